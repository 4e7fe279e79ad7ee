"""benchmarks/kernel_profile.py's options on CPU: a bad --blocks set is refused, naming it, before any
kernel runs (the profile itself needs a GPU)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_profile.py"


def run_profile(*arguments):
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("arguments, message", [
    (["--blocks", "stages=2"], "--blocks 'stages=2': chunk_parallel takes chunk, sequential_value,"),
    (["--blocks", "chunk=0"], "--blocks 'chunk=0': block override 'chunk=0': expected name=positive integer"),
    (["--blocks", "chunk=24"], "--blocks 'chunk=24': block override chunk=24: expected 16, 32 or 64"),
    (["--blocks", "key=16"], "chunk_parallel takes chunk, sequential_value,"),
    (["--backends", "triton", "--blocks", "chunk=16"], "triton takes chunk_size, value_block, not chunk"),
])
def test_bad_block_overrides_are_refused_by_name(arguments, message):
    result = run_profile(*arguments)
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_good_overrides_reach_the_gpu_check():
    result = run_profile("--backends", "chunk_parallel,fla", "--blocks", "", "--blocks", "chunk=32,sequential_stages=3")
    assert result.returncode == 2 and "needs a CUDA device" in result.stderr
