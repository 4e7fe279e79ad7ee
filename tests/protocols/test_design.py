"""The design's runs and their order, against hand-made manifests (no training)."""

import pytest

from prism_rec.experiments.tuning import TuningGrid
from prism_rec.protocols.authors.design import Design
from prism_rec.protocols.authors.grid import expected_seconds
from prism_rec.protocols.authors.train import RunConfig

EAGER = ("eager", None)  # the kind of an eager run of a model without the delta scan (grid.run_kind)

BASE = RunConfig(model="null", epochs=2, batch_size=16, n_neighbours=3, channel=4, n_heads=1)
GRID = TuningGrid((1e-3, 1e-2), (1e-4, 1e-3, 1e-2, 1e-1))


def row(model, lr, seed=0, valid=0.5, head="per-backbone", wall=10.0, **settings):
    config = {**BASE.to_dict(), "model": model, "lr": lr, "seed": seed, "head_width": head, **settings}
    return {"dataset": "tiny", "config": config, "valid_full_auc": valid, "wall_seconds": wall}


def jobs(design, rows):
    return [(c.model, c.seed, c.lr, c.head_width) for _, c in design.pending(rows)]


def design(models, equal_head="4"):
    return Design(("tiny",), tuple(models), (0, 1, 2), BASE, GRID, equal_head)


def test_seed_zero_grids_come_first_in_the_given_order():
    assert jobs(design(["sasrec", "null", "pop"]), []) == [
        ("sasrec", 0, 1e-3, "per-backbone"), ("sasrec", 0, 1e-2, "per-backbone"),
        ("null", 0, 1e-3, "per-backbone"), ("null", 0, 1e-2, "per-backbone"), ("pop", 0, BASE.lr, "per-backbone")]


def test_a_grid_at_its_edge_extends_before_any_other_seed():
    rows = [row("sasrec", 1e-3, valid=0.6), row("sasrec", 1e-2, valid=0.7)]
    assert jobs(design(["sasrec"]), rows) == [("sasrec", 0, 1e-1, "per-backbone")]
    rows.append(row("sasrec", 1e-1, valid=0.65))  # 1e-2 is interior now: chosen
    assert design(["sasrec"]).chosen(rows) == {("tiny", "sasrec"): 1e-2}


def test_a_chosen_rate_releases_the_other_seeds_then_the_equal_heads_arm():
    rows = [row("sasrec", 1e-4, valid=0.4), row("sasrec", 1e-3, valid=0.6), row("sasrec", 1e-2, valid=0.5)]
    rows += [row("null", 1e-4, valid=0.4), row("null", 1e-3, valid=0.6), row("null", 1e-2, valid=0.5)]
    assert jobs(design(["sasrec", "null"]), rows) == [
        ("sasrec", 1, 1e-3, "per-backbone"), ("null", 1, 1e-3, "per-backbone"),
        ("sasrec", 2, 1e-3, "per-backbone"), ("null", 2, 1e-3, "per-backbone"),
        ("sasrec", 0, 1e-3, "4"), ("sasrec", 1, 1e-3, "4"), ("sasrec", 2, 1e-3, "4")]  # null's head is 4 already


def test_the_first_tier_finishes_before_the_second_starts_its_grid():
    rows = [row("sasrec", lr, valid=v) for lr, v in ((1e-4, 0.4), (1e-3, 0.6), (1e-2, 0.5))]
    order = jobs(design(["mamba2", "sasrec"], equal_head=None), rows)
    assert order == [("sasrec", 1, 1e-3, "per-backbone"), ("sasrec", 2, 1e-3, "per-backbone"),
                     ("mamba2", 0, 1e-3, "per-backbone"), ("mamba2", 0, 1e-2, "per-backbone")]


def test_rows_of_other_settings_are_not_this_designs():
    rows = [row("sasrec", 1e-3, valid=0.6, epochs=3), row("sasrec", 1e-2, valid=0.5, epochs=3)]
    assert jobs(design(["sasrec"]), rows) == [("sasrec", 0, 1e-3, "per-backbone"), ("sasrec", 0, 1e-2, "per-backbone")]


def test_the_expected_time_is_the_models_mean_else_the_slowest_models():
    rows = [row("sasrec", 1e-3, wall=10.0), row("sasrec", 1e-2, wall=20.0), row("null", 1e-3, wall=4.0)]
    assert expected_seconds(rows, "tiny", "sasrec", EAGER) == pytest.approx(15.0)
    assert expected_seconds(rows, "tiny", "prism", EAGER) == pytest.approx(15.0)
    assert expected_seconds(rows, "other", "prism", EAGER) is None


def test_a_runs_expected_time_is_that_of_its_models_runs_with_the_same_step_and_scan():
    def row(model, seconds, step=None, scan=None):
        return {"dataset": "d", "config": {"model": model}, "wall_seconds": seconds,
                **({"step": step} if step else {}), **({"scan": scan} if scan else {})}

    graphs = ("cuda graphs", None)
    rows = [row("a", 400.0), row("a", 300.0, "eager"), row("a", 60.0, "cuda graphs"), row("b", 900.0),
            row("p", 500.0, "eager", "triton"), row("p", 200.0, "eager", "torch")]
    assert expected_seconds(rows, "d", "a", graphs) == 60.0
    assert expected_seconds(rows, "d", "a", EAGER) == 350.0       # records without a step were eager
    assert expected_seconds(rows, "d", "b", graphs) is None       # b's eager times do not tell
    assert expected_seconds(rows, "d", "c", EAGER) == 900.0       # no run of c: the slowest eager model's
    assert expected_seconds(rows, "d", "c", graphs) == 60.0       # ... or graphed one's
    assert expected_seconds(rows, "e", "a", EAGER) is None
    assert expected_seconds(rows, "d", "p", ("eager", "torch")) == 200.0   # the scan's backend counts too
    assert expected_seconds(rows, "d", "p", ("eager", "chunk_split")) is None


def test_a_preset_trains_every_seed_at_its_bases_chosen_rate_and_runs_no_grid():
    rows = [row("prism", lr, valid=v) for lr, v in ((1e-4, 0.4), (1e-3, 0.6), (1e-2, 0.5))]
    assert jobs(design(["prism", "prism-L0"], equal_head=None), []) == [
        ("prism", 0, 1e-3, "per-backbone"), ("prism", 0, 1e-2, "per-backbone")]
    # prism is of the first tier, prism-L0 of the second
    assert jobs(design(["prism", "prism-L0"], equal_head=None), rows) == [
        ("prism", 1, 1e-3, "per-backbone"), ("prism", 2, 1e-3, "per-backbone"),
        ("prism-L0", 0, 1e-3, "per-backbone"), ("prism-L0", 1, 1e-3, "per-backbone"),
        ("prism-L0", 2, 1e-3, "per-backbone")]
