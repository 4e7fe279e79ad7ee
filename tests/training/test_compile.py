"""The compiled training step (prism_rec/training/compile.py) against eager on CPU.

The compiled encoders (the delta scan's custom op is tested in tests/kernels/test_compiled_scan.py) are traced by
torch.compile with the "aot_eager" backend (the graphs torch.compile builds, forward and backward, run
eagerly: seconds, no C++ compiler); one slow test compiles with TorchInductor's C++ backend. CUDA graphs
need a GPU and are exercised by benchmarks/step_bench.py on the device (the whole step captured: checked
against the eager step there; its static-shape logic is tested on CPU in tests/training/test_step.py).
"""

import math

import pytest
import torch

from prism_rec.models.recommender import SequentialRecommender
from prism_rec.registry import list_backbones
from prism_rec.training.compile import (
    VERIFIED_MODES,
    CapturedStep,
    CompiledEncoder,
    auto_compile,
    compiled_gaps,
    gaps_to_eager,
    optimizer_options,
    resolve_compile,
    training_encoder,
)
from prism_rec.training.config import TrainConfig


def test_resolve_compile():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_compile("auto", cpu, backbone="prism") == "off"
    assert resolve_compile("auto", cuda, backbone="prism") == VERIFIED_MODES["prism"] != "off"
    assert resolve_compile("auto", cuda, distributed=True, backbone="prism") == "off"
    assert resolve_compile("cudagraphs", cpu) == "inductor" and resolve_compile("inductor", cuda) == "inductor"
    assert resolve_compile("graphs", cpu) == "off" and resolve_compile("graphs", cuda) == "graphs"
    with pytest.raises(ValueError, match="--compile"):
        resolve_compile("max", cpu)
    assert optimizer_options("cudagraphs", cuda) == {"fused": True}
    assert optimizer_options("off", cuda) == {} and optimizer_options("inductor", cpu) == {}


def test_whole_step_modes_resolve_and_refuse_what_they_cannot_capture():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_compile("step-graphs", cpu) == "off" and resolve_compile("step-cudagraphs", cpu) == "inductor"
    assert resolve_compile("step-graphs", cuda) == "step-graphs"
    for distributed, loss in ((True, "full"), (False, "sampled")):
        with pytest.raises(ValueError, match="--compile: step-cudagraphs captures the whole step.*use cudagraphs"):
            resolve_compile("step-cudagraphs", cuda, distributed, loss=loss)
    assert optimizer_options("step-graphs", cuda) == {"fused": True, "capturable": True}
    assert optimizer_options("step-graphs", cpu) == {}


def test_auto_trains_the_sampled_loss_with_the_encoder_alone_where_the_whole_step_is_verified(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setitem(VERIFIED_MODES, "sasrec", "step-cudagraphs")
    assert auto_compile("sasrec", cuda)[0] == "step-cudagraphs"
    mode, reason = auto_compile("sasrec", cuda, loss="sampled")
    assert mode == "cudagraphs" and "full-softmax loss only" in reason
    assert resolve_compile("auto", cuda, backbone="sasrec", loss="sampled") == "cudagraphs"


def test_captured_step_runs_its_function_at_every_call_off_cuda():
    calls = []
    step = CapturedStep(lambda: calls.append(1) or torch.tensor(float(len(calls))), torch.device("cpu"))
    assert [float(step()) for _ in range(5)] == [1, 2, 3, 4, 5] and step.graph is None


def test_auto_is_the_verified_mode_of_the_backbone_and_says_why_it_falls_back():
    cuda = torch.device("cuda")
    assert set(VERIFIED_MODES.values()) <= {"inductor", "cudagraphs", "graphs", "step-graphs", "step-cudagraphs"}
    assert set(VERIFIED_MODES) <= set(list_backbones())  # a renamed backbone would silently train eager
    assert auto_compile("sasrec", cuda) == (VERIFIED_MODES["sasrec"], auto_compile("sasrec", cuda)[1])
    mode, reason = auto_compile("not-verified", cuda)
    assert mode == "off" and "no compiled mode of not-verified is verified" in reason and "VERIFIED_MODES" in reason
    assert auto_compile("sasrec", cuda, distributed=True)[0] == "off"
    assert auto_compile("sasrec", torch.device("cpu")) == ("off", "eager on cpu")
    assert TrainConfig().compile == "auto"


def test_config_compile_is_validated_and_not_part_of_the_identity():
    assert TrainConfig(compile="off").identity() == TrainConfig().identity()
    assert TrainConfig(compile="inductor").params()["compile"] == "inductor"
    with pytest.raises(ValueError, match="--compile"):
        TrainConfig(compile="fast").validate()


def padded_items(seed=0):
    """Left-padded item ids [3, 12]: one full row, two with padding (one of 9 positions)."""
    items = torch.randint(1, 41, (3, 12), generator=torch.Generator().manual_seed(seed))
    items[1, :4] = 0
    items[2, :9] = 0
    return items


@pytest.mark.parametrize("backbone", ["gated_deltanet", "prism", "prism-eq18", "mamba2", "mamba2-authors", "sasrec",
                                      "ttt-linear"])
def test_compiled_encoder_matches_eager(backbone):
    """Outputs and parameter gradients of the compiled encoder (fullgraph, 3 rows padded to 5) equal eager's."""
    torch.manual_seed(0)
    model = SequentialRecommender(40, backbone, d_model=16, max_len=12, dropout=0.0, n_layers=2, n_heads=2)
    gaps = gaps_to_eager(model, "inductor", padded_items(), backend="aot_eager")
    assert gaps["output"] < 1e-5 and gaps["gradients"] < 1e-4, gaps


def test_graphs_mode_runs_the_cudagraphs_backend_eagerly_on_cpu():
    """The "graphs" wiring (torch.compile's cudagraphs backend, which runs a CPU graph without CUDA graphs)."""
    torch.manual_seed(0)
    model = SequentialRecommender(40, "prism", d_model=16, max_len=12, dropout=0.0, n_layers=1, n_heads=2)
    gaps = gaps_to_eager(model, "graphs", padded_items())
    assert gaps["output"] < 1e-5 and gaps["gradients"] < 1e-4, gaps


def test_compiled_encoder_refuses_a_larger_batch():
    model = SequentialRecommender(40, "sasrec", d_model=16, max_len=12, dropout=0.0)
    with pytest.raises(ValueError, match="larger than the compiled 2"):
        CompiledEncoder(model, 2, "inductor", backend="aot_eager")(padded_items())
    assert training_encoder(model, 2, "off") == model.encode


@pytest.mark.slow
def test_inductor_compiled_prism_matches_eager():
    """TorchInductor's C++ kernels (CPU) for PRISM's encoder, forward and backward, against eager."""
    torch.manual_seed(0)
    model = SequentialRecommender(40, "prism", d_model=16, max_len=12, dropout=0.0, n_layers=1, n_heads=2)
    gaps = gaps_to_eager(model, "inductor", padded_items(1))
    assert gaps["output"] < 1e-5 and gaps["gradients"] < 1e-4, gaps


def test_a_nan_in_the_compiled_gradients_is_an_infinite_gap():
    """compiled_gaps ranks a NaN gradient as the worst, at an infinite gap, so no limit check passes it."""
    model = torch.nn.Linear(3, 2)

    def eager(x):
        return model(x)

    def compiled(x):
        return model(x) * torch.tensor([1.0, float("nan")])  # the second output's gradients become NaN

    gaps = compiled_gaps(model, eager, compiled, torch.ones(4, 3))
    assert gaps["output"] == math.inf and gaps["gradients"] == math.inf and gaps["worst"] in ("weight", "bias")
