"""The link model against direct computations: time encoding, head widths, scorer, source tokens."""

import numpy as np
import pytest
import torch

from prism_rec import registry
from prism_rec.errors import OptionError
from prism_rec.protocols.authors import model as link
from prism_rec.protocols.authors.model import LinkModel, MergeLayer, TimeEncoder, head_width


def test_time_encoding_formula():
    gaps = torch.tensor([[0.0, 1.0, 37.0, 86400.0]])
    encoded = TimeEncoder(100)(gaps)[0].detach().numpy()
    w = 1 / 10 ** np.linspace(0, 9, 100, dtype=np.float32)  # w_i = 10^(-9 i / 99) in float32, bias 0
    expected = np.cos(gaps[0].numpy()[:, None] * w[None, :])     # the float32 products the Linear forms
    np.testing.assert_allclose(encoded, expected, atol=1e-4)  # cos of arguments up to 86400 in float32
    assert encoded[0].tolist() == [1.0] * 100                    # a gap of 0 (the user's own token)


@pytest.mark.parametrize("model, width", [("sasrec", 768), ("prism", 768), ("prism-authors", 768),
                                          ("prism-L1", 768), ("prism-nogelu", 768), ("prism-noconv", 768),
                                          ("prism-nogain", 768), ("gdn-authors", 64), ("gated_deltanet", 64),
                                          ("mamba2-authors", 64), ("null", 64), ("hstu", 64)])
def test_per_backbone_widths_are_the_authors(model, width):
    assert head_width(model, "per-backbone", 768, 64) == width
    assert head_width(model, "96", 768, 64) == 96


def test_head_width_refuses_bad_values():
    for bad in ("0", "-3", "wide"):
        with pytest.raises(OptionError, match="--head-width: expected per-backbone or a positive integer"):
            head_width("sasrec", bad, 768)


def test_scorer_width_follows_the_head():
    torch.manual_seed(0)
    features = torch.randn(9, 12)
    model = LinkModel("sasrec", features, torch.randn(5, 12), head_width("sasrec", "per-backbone", 12, 4),
                      channel=4, time_dim=6)
    assert model.output_src.out_features == model.output_dst.out_features == 12
    assert model.scorer.fc1.in_features == 24 and model.scorer.fc1.out_features == 4
    narrow = LinkModel("null", features, torch.randn(5, 12), head_width("null", "per-backbone", 12, 4), channel=4)
    assert narrow.scorer.fc1.in_features == 8


def test_scoring_against_all_items_equals_the_pairwise_merge_layer():
    torch.manual_seed(0)
    scorer = MergeLayer(5, 3)
    src, dst = torch.randn(4, 5), torch.randn(11, 5)
    blocked = scorer.against_all(src, dst, block=4)
    direct = torch.stack([torch.stack([scorer(s, d) for d in dst]) for s in src])
    torch.testing.assert_close(blocked, direct, rtol=1e-5, atol=1e-6)


def test_null_source_is_the_last_token_plus_the_user_token():
    torch.manual_seed(0)
    model = LinkModel("null", torch.randn(9, 12), torch.randn(5, 12), 7, channel=4, time_dim=6)
    nodes, edges = torch.tensor([[3, 0, 6, 8]]), torch.tensor([[0, 0, 2, 4]])
    gaps = torch.tensor([[0.0, 50.0, 7.0, 2.0]])
    p = model.project
    tokens = torch.cat([p["node"](model.node_features[nodes]), p["edge"](model.edge_features[edges]),
                        p["time"](torch.cos(gaps[..., None] * model.time_encoder.w.weight[:, 0])),
                        p["id"](model.id_embedding(nodes))], dim=-1)
    torch.testing.assert_close(model.source(nodes, edges, gaps), model.output_src(tokens[:, -1] + tokens[:, 0]))
    dst = model.destination(torch.tensor([6]))
    expected = model.output_dst(torch.cat([p["node"](model.node_features[6]), p["id"](model.id_embedding.weight[6])]))
    torch.testing.assert_close(dst[0], expected)


def test_the_scan_models_are_those_whose_layers_call_the_delta_scan():
    assert [m for m in ("gated_deltanet", "prism", "mamba2", "mamba2-authors") if not registry.runs_scan(m)] == []
    assert [m for m in ("sasrec", "gdn-authors", "prism-authors", "null", "pop", "hstu") if registry.runs_scan(m)] == []


def test_the_scan_backend_reaches_every_scan_layer_and_keeps_the_source():
    """The backbone's layers call delta_scan with the chosen backend; the per-token loop ("naive") and the
    chunked PyTorch path give the same source embeddings from the same weights."""
    nodes, edges = torch.tensor([[3, 0, 6, 8], [1, 2, 4, 5]]), torch.tensor([[0, 0, 2, 4], [0, 1, 3, 2]])
    gaps = torch.tensor([[0.0, 50.0, 7.0, 2.0], [0.0, 3.0, 2.0, 1.0]])
    sources = {}
    for backend in ("naive", "torch"):
        torch.manual_seed(0)
        model = LinkModel("gated_deltanet", torch.randn(9, 12), torch.randn(5, 12), 7, channel=4, time_dim=6,
                          n_heads=1, scan_backend=backend).eval()
        assert {m.backend for m in model.modules() if hasattr(m, "backend")} == {backend}
        sources[backend] = model.source(nodes, edges, gaps)
    torch.testing.assert_close(sources["naive"], sources["torch"], rtol=1e-5, atol=1e-6)


def test_scan_backend_checks_and_resolution(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # tests/kernels/conftest.py sets it for the session
    assert link.check_scan_backend("torch", "prism") == "torch" and link.check_scan_backend("auto", "sasrec") == "auto"
    with pytest.raises(OptionError, match="option --scan-backend: expected one of auto, naive, torch"):
        link.check_scan_backend("cuda")
    with pytest.raises(OptionError, match="option --scan-backend: sasrec runs no delta scan .*gated_deltanet"):
        link.check_scan_backend("torch", "sasrec")
    with pytest.raises(OptionError, match="option --scan-backend: chunk_split needs a CUDA device .*--device cpu"):
        link.check_scan_backend("chunk_split", "prism", torch.device("cpu"))
    cpu = torch.device("cpu")
    assert link.scan_backend_used("prism", "auto", cpu, 21) == "torch"
    assert link.scan_backend_used("prism", "naive", cpu, 21) == "naive"
    assert link.scan_backend_used("sasrec", "auto", cpu, 21) is None
