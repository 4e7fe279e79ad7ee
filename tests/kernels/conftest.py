"""Run Triton kernels through its interpreter when no CUDA device is present (set before triton loads)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
