"""The compiled training step: the recommender's encoder through torch.compile, with or without CUDA graphs.

At the benchmark's shapes (d_model 64, 2 layers, batch 256) a step is bound by kernel launches and
Python, not by the GPU, so the gain is in fewer, fused launches. Modes (``TrainConfig.compile``):

- ``"off"``: eager PyTorch, the reference (and the CPU default);
- ``"inductor"``: ``SequentialRecommender.encode`` compiled by TorchInductor as one graph per direction
  (the short convolutions with their SiLU, the L2 norms, the gate and beta math, the padding masks,
  PRISM's refinement loop, the norms and feed-forwards fuse into a few kernels; the delta scan is the
  custom op of ``prism_rec.kernels.compiled_scan``);
- ``"cudagraphs"``: the same, replayed as CUDA graphs (``mode="reduce-overhead"``); on CPU it is
  ``"inductor"``;
- ``"graphs"``: the eager kernels, unfused, replayed as CUDA graphs (torch.compile's "cudagraphs" backend:
  seconds to compile where TorchInductor takes tens); on CPU it is ``"off"``;
- ``"step-graphs"``: the whole step (forward with the eager kernels, fused loss, backward, AdamW) captured
  as one CUDA graph (``CapturedStep``); on CPU it is ``"off"``;
- ``"step-cudagraphs"``: the same with the encoder compiled by TorchInductor inside the graph; on CPU it
  is ``"inductor"``;
- ``"auto"`` (the default): on CUDA in a single process, the backbone's compiled mode of ``VERIFIED_MODES``
  (checked against eager; its comment says which measurements chose it); eager for a backbone not in it, in a
  data-parallel world and on CPU.

In the encoder modes the loss (the fused full-softmax kernels over the real positions, whose number changes
per batch) and the optimizer stay eager; with a compiled encoder AdamW runs fused on CUDA
(``optimizer_options``). The whole-step modes (``WHOLE_STEP_MODES``) take static shapes instead: every
position of a batch [batch_size, T + 1] enters the loss, the trained ones sorted first and the rows past their
count (a device scalar) skipped by the fused kernels, a short batch is padded with empty windows, and AdamW
runs fused and capturable (prism_rec/training/step.py); they train
the full-softmax loss in one process only (the sampled loss draws from a generator of its own, which the
graph does not replay; DistributedDataParallel's all-reduce is not captured). The encoder is
compiled for one shape [batch_size, T]: a smaller batch (an epoch's last) is padded with empty windows,
which the backbones leave at zero and which hold no target, so no shape recompiles once warm.
The compiled encoder is used for training only; evaluation calls the eager ``model.encode``.
``CompiledFunction`` is the same compilation for any function of fixed shapes (the probes compile their
model's forward and loss with it, prism_rec/experiments/probes/train.py) and ``compiled_gaps`` its check against eager.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

COMPILE_MODES = ("off", "auto", "inductor", "cudagraphs", "graphs", "step-graphs", "step-cudagraphs")
# the modes that capture the whole step, and the mode of the encoder inside it
WHOLE_STEP_MODES = {"step-graphs": "off", "step-cudagraphs": "inductor"}

# Per backbone, the compiled mode "auto" trains in, whose encoder passed the check against eager on the H200
# (compiled_gaps within benchmarks/step_bench.py's COMPILED_GAP_LIMIT, fp32, TF32 off). "graphs": every
# backbone that benchmarks/headline_gpu.sh's check (step_bench.py --check-only --compile graphs) let train
# compiled, results/headline_v2_manifest.jsonl (entries with compile "graphs"). The five backbones of the
# floor benchmark take cudagraphs, the fastest encoder mode of their steps alone (results/step.md), whose
# encoder passed its check there and in the headline calls' checks (COMPILE=cudagraphs,
# results/headline_v3_manifest.jsonl). The whole-step modes were fastest alone on full random windows
# (results/step_whole.md) but cost more per epoch than eager and the encoder modes in the headline grid on
# real windows (results/step_grid.md), so "auto" does not pick them. In that grid eager itself cost less than
# the encoder modes in most cells, mainly where epochs are short and a run's compilation weighs on each; the
# grid's figures are observational (different calls, code and neighbours), and a controlled comparison in
# the grid (benchmarks/grid_modes_gpu.sh: the same runs per mode, side by side) is still to be measured.
VERIFIED_MODES = {
    "gated_deltanet": "cudagraphs", "gdn-authors": "graphs", "hstu": "graphs", "mamba2": "cudagraphs",
    "mamba2-authors": "graphs", "prism": "cudagraphs", "prism-L0": "graphs", "prism-L1": "graphs",
    "prism-authors": "graphs", "prism-eq18": "graphs", "prism-noconv": "graphs", "prism-nogain": "graphs",
    "prism-nogelu": "graphs", "sasrec": "cudagraphs", "titans": "graphs", "transformer++": "cudagraphs",
    "ttt-linear": "graphs", "ttt-mlp": "graphs",
}


# a whole-step mode's counterpart that compiles the encoder alone (for the sampled loss under "auto", should
# VERIFIED_MODES name a whole-step mode again)
ENCODER_ONLY = {"step-graphs": "graphs", "step-cudagraphs": "cudagraphs"}


def auto_compile(backbone: str | None, device: torch.device, distributed: bool = False,
                 loss: str = "full") -> tuple[str, str]:
    """The mode ``"auto"`` trains ``backbone`` in on ``device`` with ``loss``, and why (for the log line)."""
    if device.type != "cuda":
        return "off", f"eager on {device.type}"
    if distributed:
        return "off", "eager in a data-parallel world: no compiled mode is verified under DistributedDataParallel"
    if backbone not in VERIFIED_MODES:
        return "off", (f"eager: no compiled mode of {backbone} is verified against eager "
                       "(VERIFIED_MODES, prism_rec/training/compile.py)")
    mode = VERIFIED_MODES[backbone]
    if mode in WHOLE_STEP_MODES and loss != "full":
        return ENCODER_ONLY[mode], (f"{ENCODER_ONLY[mode]}, the encoder alone: its verified {mode} captures "
                                    f"the full-softmax loss only (VERIFIED_MODES, compile.py)")
    return mode, "its compiled mode verified against eager (VERIFIED_MODES, compile.py)"


def resolve_compile(mode: str, device: torch.device, distributed: bool = False, backbone: str | None = None,
                    loss: str = "full") -> str:
    """``mode`` made concrete for ``device`` (and for "auto", ``backbone`` and ``loss``): "off", "inductor",
    "cudagraphs", "graphs", "step-graphs" or "step-cudagraphs"."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"option --compile: {mode!r} is not one of {COMPILE_MODES}")
    if mode == "auto":
        return auto_compile(backbone, device, distributed, loss)[0]
    if device.type != "cuda":
        return {"cudagraphs": "inductor", "graphs": "off", **WHOLE_STEP_MODES}.get(mode, mode)
    if mode in WHOLE_STEP_MODES and (distributed or loss != "full"):
        raise ValueError(f"option --compile: {mode} captures the whole step, which trains the full-softmax loss "
                         f"in one process only; use {ENCODER_ONLY[mode]} (the encoder alone) here")
    return mode


def optimizer_options(mode: str, device: torch.device) -> dict:
    """Keyword arguments of AdamW for a step compiled with ``mode`` (resolved): fused on CUDA, and capturable
    (its step count on the device) when the whole step is one CUDA graph."""
    if mode == "off" or device.type != "cuda":
        return {}
    return {"fused": True, "capturable": True} if mode in WHOLE_STEP_MODES else {"fused": True}


class CompiledFunction:
    """``function`` compiled for fixed input shapes under ``mode`` (resolved, not "off"); called like it.

    ``backend`` overrides the mode's backend (tests use "aot_eager": the same graphs, run eagerly). Compiling
    resets torch.compile's caches, so that a process that trains many models one after another never
    reaches the recompile limit (the code compiled is shared by all of them). Under CUDA graphs each call
    starts a new step: the previous call's outputs are no longer read.
    """

    def __init__(self, function, mode: str, backend: str | None = None):
        if mode not in ("inductor", "cudagraphs", "graphs"):
            raise ValueError(f"torch.compile modes are 'inductor', 'cudagraphs' or 'graphs', not {mode!r}")
        torch._dynamo.reset()
        self.graphs = mode != "inductor"
        options = ({"backend": "cudagraphs"} if mode == "graphs"
                   else {"mode": "reduce-overhead" if self.graphs else None})
        if backend is not None:
            options = {"backend": backend}
        self.function = torch.compile(function, fullgraph=True, dynamic=False, **options)

    def __call__(self, *inputs: torch.Tensor):
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        return self.function(*inputs)


class CapturedStep:
    """``function()``, a training step whose inputs and outputs are tensors that stay in place, as one CUDA
    graph: its first ``warmup`` calls run eagerly on a side stream (they compile and load kernels and create
    the optimizer's state, and they are steps like the others), the next is captured and replayed, and the
    later ones replay the graph. Returns ``function``'s output, the same tensor at every replay. Off CUDA
    each call runs ``function`` eagerly: the same step without the graph."""

    def __init__(self, function, device: torch.device, warmup: int = 3):
        self.function, self.capture, self.warmup = function, device.type == "cuda", warmup
        self.calls, self.graph, self.output = 0, None, None

    def __call__(self):
        if self.graph is not None:
            self.graph.replay()
            return self.output
        if not self.capture:
            return self.function()
        self.calls += 1
        if self.calls <= self.warmup:
            side, main = torch.cuda.Stream(), torch.cuda.current_stream()
            side.wait_stream(main)
            with torch.cuda.stream(side):
                output = self.function()
            main.wait_stream(side)
            output.record_stream(main)
            return output
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.output = self.function()
        graph.replay()
        self.graph = graph
        return self.output


class CompiledEncoder:
    """``model.encode`` compiled for items [batch_size, T]; called like it, on batches of at most batch_size
    (``CompiledFunction``, whose ``backend`` this passes on)."""

    def __init__(self, model: torch.nn.Module, batch_size: int, mode: str, backend: str | None = None):
        self.batch_size = batch_size
        self.encode = CompiledFunction(model.encode, mode, backend)

    def __call__(self, items: torch.Tensor) -> torch.Tensor:
        """items [B, T] with B <= batch_size -> hidden [B, T, d]."""
        rows = items.shape[0]
        if rows > self.batch_size:
            raise ValueError(f"a batch of {rows} windows is larger than the compiled {self.batch_size}")
        return self.encode(F.pad(items, (0, 0, 0, self.batch_size - rows)))[:rows]


def training_encoder(model: torch.nn.Module, batch_size: int, mode: str):
    """What the training objective encodes with under ``mode`` (resolved): ``model.encode`` or its compiled form
    (in a whole-step mode, that of the encoder inside the graph)."""
    mode = WHOLE_STEP_MODES.get(mode, mode)
    return model.encode if mode == "off" else CompiledEncoder(model, batch_size, mode)


def gaps_to_eager(model: torch.nn.Module, mode: str, items: torch.Tensor, backend: str | None = None) -> dict:
    """How far the compiled encoder is from eager on ``items`` [B, T], compiled for B + 2 rows so that the
    padding of a short batch is exercised too (``compiled_gaps``)."""
    return compiled_gaps(model, model.encode, CompiledEncoder(model, items.shape[0] + 2, mode, backend), items)


def compiled_gaps(model: torch.nn.Module, eager, compiled, *inputs: torch.Tensor) -> dict:
    """How far ``compiled`` is from ``eager`` (two forms of one function of ``model``) on ``inputs``, at the
    compiled form's third call (the first replay of CUDA graphs, which warm up and record on the first
    two): the largest |compiled - eager| over the largest |eager| of the output ("output") and of the
    parameters' gradients of a fixed linear loss of it ("gradients", the worst parameter, named in "worst")."""

    def output_and_grads(function) -> tuple[torch.Tensor, dict]:
        model.zero_grad(set_to_none=True)
        output = function(*inputs)
        weights = torch.linspace(-1, 1, output.numel(), device=output.device).view(output.shape)
        (output.float() * weights).sum().backward()
        return output.detach().float().clone(), {name: p.grad.float().clone() for name, p in model.named_parameters()
                                                 if p.grad is not None}

    def gap(compiled: torch.Tensor, eager: torch.Tensor) -> float:
        """The relative gap; a NaN anywhere counts as an infinite gap (max() would pass NaN by)."""
        relative = (compiled - eager).abs().max() / eager.abs().max().clamp_min(1e-12)
        return torch.nan_to_num(relative, nan=math.inf).item()

    eager_output, eager_grads = output_and_grads(eager)
    for _ in range(2):
        output_and_grads(compiled)
    output, grads = output_and_grads(compiled)
    if grads.keys() != eager_grads.keys():
        raise AssertionError(f"compiled and eager gradients differ in their parameters: "
                             f"{sorted(grads.keys() ^ eager_grads.keys())}")
    gradient_gaps = {name: gap(grads[name], eager_grads[name]) for name in eager_grads}
    worst = max(gradient_gaps, key=gradient_gaps.get)
    return {"output": gap(output, eager_output), "gradients": gradient_gaps[worst], "worst": worst}
