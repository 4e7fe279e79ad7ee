"""Data-parallel plumbing for runs launched by torchrun: process group, rank shares, collectives.

A process started without torchrun (no WORLD_SIZE in the environment, or WORLD_SIZE=1) is a world of
one: every helper below then does nothing special, so the single-process path stays unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place among the data-parallel processes."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def device(self, requested: torch.device) -> torch.device:
        """The device of this rank: CUDA device ``local_rank`` when ``requested`` is CUDA."""
        if self.distributed and requested.type == "cuda":
            return torch.device("cuda", self.local_rank)
        return requested

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def sum(self, values: list[float], device: torch.device) -> list[float]:
        """Element-wise sum of ``values`` over all ranks (float64)."""
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def any(self, flag: bool, device: torch.device) -> bool:
        """True on every rank when ``flag`` is true on at least one rank."""
        return self.sum([float(flag)], device)[0] > 0 if self.distributed else flag

    def gather_objects(self, value: object) -> list[object]:
        """``value`` of every rank, in rank order, on every rank."""
        if not self.distributed:
            return [value]
        gathered = [None] * self.size
        dist.all_gather_object(gathered, value)
        return gathered

    def broadcast_object(self, value: object) -> object:
        """Rank 0's ``value`` on every rank."""
        if not self.distributed:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]

    def share(self, items: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """This rank's contiguous share of ``items`` (sizes differ by at most one; may be empty)."""
        if not self.distributed:
            return items
        if isinstance(items, np.ndarray):
            return np.array_split(items, self.size)[self.rank]
        return torch.tensor_split(items, self.size)[self.rank]


SINGLE_PROCESS = World()  # the world of a run without torchrun


def world_from_environment() -> World:
    """The world torchrun describes in RANK, WORLD_SIZE and LOCAL_RANK (a world of one without them)."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError as error:
        raise ValueError(f"torchrun environment: RANK, WORLD_SIZE and LOCAL_RANK must be integers ({error})") from None
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"torchrun environment: rank {rank} is not within WORLD_SIZE={size}")
    return World(rank=rank, size=size, local_rank=local_rank)


def start(device: torch.device) -> World:
    """Join the process group torchrun set up (NCCL on CUDA, gloo on CPU); returns this process's world."""
    world = world_from_environment()
    if world.distributed and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo",
                                device_id=world.device(device) if device.type == "cuda" else None)
    return world


def stop(world: World, finished: bool = False) -> None:
    """Leave the process group. ``finished`` (every rank got to the end of its work): wait for the others first,
    so that a rank done early (rank 1 logs nothing) does not tear down its gloo connections while rank 0 still
    writes the results; that aborted the early rank ("terminate called without an active exception") and made
    torchrun stop rank 0. After an error no rank waits: torchrun ends the others when one exits with it."""
    if world.distributed and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()
