"""benchmarks/grid_epochs.py: epoch costs per compile mode from a manifest, checked against sums by hand."""

import importlib.util
import json
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def grid_epochs():
    spec = importlib.util.spec_from_file_location("grid_epochs", BENCHMARKS / "grid_epochs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


H200 = "NVIDIA H200 (CUDA 13.0)"


def entry(model, mode, wall, epochs, jobs, width="d64", dataset="ml-100k", machine=H200):
    line = {"dataset": dataset, "model": model, "width": width, "wall_seconds": wall, "epochs_run": epochs,
            "jobs_per_device": jobs, "machine": machine}
    return line if mode is None else {**line, "compile": mode}


def test_epoch_costs_are_medians_per_mode_and_the_whole_step_ratio_is_against_the_cheapest_other_mode(tmp_path):
    module = grid_epochs()
    entries = [entry("prism", None, 100.0, 10, 10.0),  # no compile field: an eager run from before the option
               entry("prism", "off", 300.0, 10, 10.0), entry("prism", "off", 200.0, 10, 10.0),
               entry("prism", "cudagraphs", 60.0, 10, 12.0),
               entry("prism", "step-graphs", 90.0, 10, 6.0), entry("prism", "step-graphs", 150.0, 10, 3.0),
               entry("prism", "step-graphs", 200.0, 10, 4.0),
               entry("sasrec", "off", 50.0, 5, 8.0),  # one mode only: not listed
               # another machine's runs of the same backbone: a cell of their own, listed beside the H200's
               entry("prism", "off", 400.0, 10, 4.0, machine="H100"), entry("prism", "cudagraphs", 80.0, 10, 4.0,
                                                                           machine="H100"),
               {**entry("prism", "off", 0.0, 0, 8.0), "wall_seconds": None}]  # diverged: no time
    cells = module.epoch_costs(entries)
    prism = cells[(H200, "ml-100k", "d64", "prism")]
    assert prism["off"] == {"runs": 3, "jobs": 10.0, "seconds": 20.0, "share": 2.0}  # medians of 10, 30, 20 s
    # per run 9, 15, 20 s over 6, 3, 4 runs sharing: shares 1.5, 5, 5; the median share is not 15 / 4
    assert prism["step-graphs"] == {"runs": 3, "jobs": 4.0, "seconds": 15.0, "share": 5.0}
    assert prism["cudagraphs"]["share"] == 0.5
    assert cells[("H100", "ml-100k", "d64", "prism")] == {
        "off": {"runs": 1, "jobs": 4.0, "seconds": 40.0, "share": 10.0},
        "cudagraphs": {"runs": 1, "jobs": 4.0, "seconds": 8.0, "share": 2.0}}
    [(key, mode, best, share, wall)] = module.whole_step_ratios(cells)
    assert (key, mode, best) == ((H200, "ml-100k", "d64", "prism"), "step-graphs", "cudagraphs")
    assert share == 5.0 / 0.5 and wall == 15.0 / 6.0
    manifest, out = tmp_path / "manifest.jsonl", tmp_path / "step_grid.md"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries))
    assert module.main(["--manifest", str(manifest), "--out", str(out)]) == 0
    text = out.read_text()
    assert f"| {H200} | ml-100k | d64 | prism | step-graphs | 3 | 4 | 15.0 | 5.00 |" in text
    assert "| sasrec |" not in text
    assert "| H100 | ml-100k | d64 | prism | off | 1 | 4 | 40.0 | 10.00 |" in text
    assert f"| {H200} | ml-100k | d64 | prism | step-graphs | cudagraphs | 10.0x | 2.5x |" in text
    assert "larger in 1 of 1 cells, its wall seconds per epoch in 1." in text
    # against eager (20 s per epoch, share 2): cudagraphs 6 s and 0.5, step-graphs 15 s and 5
    assert f"| {H200} | ml-100k | d64 | prism | cudagraphs | 0.25x | 0.30x |" in text
    assert f"| {H200} | ml-100k | d64 | prism | step-graphs | 2.50x | 0.75x |" in text
    assert "| H100 | ml-100k | d64 | prism | cudagraphs | 0.20x | 0.20x |" in text
    assert ("The encoder modes: GPU share per epoch smaller in 2 of 2 cells, wall seconds per epoch in 2. "
            "The whole-step modes: GPU share per epoch smaller in 0 of 1 cells, wall seconds per epoch in 1.") in text


def test_a_missing_or_empty_manifest_is_refused_naming_the_option(tmp_path, capsys):
    module = grid_epochs()
    out = tmp_path / "step_grid.md"
    assert module.main(["--manifest", str(tmp_path / "absent.jsonl"), "--out", str(out)]) == 2
    assert "option --manifest: no file" in capsys.readouterr().err and not out.exists()
    (tmp_path / "empty.jsonl").write_text("")
    assert module.main(["--manifest", str(tmp_path / "empty.jsonl"), "--out", str(out)]) == 2
    assert "holds no runs" in capsys.readouterr().err and not out.exists()
    (tmp_path / "broken.jsonl").write_text(json.dumps(entry("prism", "off", 1.0, 1, 1.0)) + "\n{not json\n")
    assert module.main(["--manifest", str(tmp_path / "broken.jsonl"), "--out", str(out)]) == 2
    assert "broken.jsonl:2: not a JSON line" in capsys.readouterr().err and not out.exists()
    (tmp_path / "keyless.jsonl").write_text(json.dumps({"model": "prism", "wall_seconds": 1.0}) + "\n")
    assert module.main(["--manifest", str(tmp_path / "keyless.jsonl"), "--out", str(out)]) == 2
    assert "keyless.jsonl: run 1 has no dataset" in capsys.readouterr().err and not out.exists()
