"""benchmarks/mixer_scan_bench.py on CPU: its smoke table names every mixer and backend asked for, and bad
options fail before any work."""

import subprocess
import sys
from pathlib import Path

from prism_rec.kernels.delta_scan import auto_backend

REPO = Path(__file__).resolve().parents[1]


def run_bench(*argv):
    return subprocess.run([sys.executable, "benchmarks/mixer_scan_bench.py", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_smoke_table(tmp_path):
    out = tmp_path / "mixer_scan.md"
    done = run_bench("--smoke", "--mixers", "mamba2,gated_deltanet", "--backends", "torch", "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and "x40" in line]
    assert [row.split(" | ")[0:2] for row in rows] == [["| mamba2", "2x40"], ["| gated_deltanet", "2x40"]]
    auto = auto_backend(True, 40)  # what a CUDA input of 40 tokens would take ("torch" where Triton is absent)
    assert all(row.rstrip(" |").endswith(f"{auto} | torch") for row in rows)  # the auto column, then the fastest


def test_bad_options_are_named(tmp_path):
    for argv, message in ((["--mixers", "sasrec"], "--mixers: unknown ['sasrec']"),
                          (["--backends", "cuda"], "--backends: unknown ['cuda']"),
                          (["--shapes", "256x"], "--shapes: '256x' is not BxT")):
        done = run_bench(*argv, "--out", str(tmp_path / "x.md"))
        assert done.returncode != 0 and message in done.stderr, done.stderr
        assert not (tmp_path / "x.md").exists()
