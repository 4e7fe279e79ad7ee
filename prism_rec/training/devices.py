"""The ``--device`` option: one device name, or a comma list of numbered CUDA devices for workers."""

from __future__ import annotations

import torch

ONE_DEVICE_HELP = "auto (CUDA when present), cpu, cuda, cuda:N"  # an option that takes one device


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"option --device: {name!r} requested but CUDA is not available")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"option --device: {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def check_devices(device: str) -> list[str]:
    """The devices of ``--device`` (one, or a comma list of CUDA devices); raises naming the bad one."""
    devices = device.split(",")
    for name in devices:
        try:
            resolved = resolve_device(name)
        except (RuntimeError, ValueError) as error:
            raise ValueError(f"option --device: {name!r} is not a usable device ({error})") from None
        if len(devices) > 1 and (resolved.type != "cuda" or resolved.index is None):
            raise ValueError(f"option --device: {name!r}: a list takes numbered CUDA devices (cuda:0,cuda:1)")
    return devices
