"""The learning-rate grid that extends itself until the choice is inside it (headline v3), and v2's fixed grid."""

import pytest

from prism_rec.experiments import tuning
from prism_rec.experiments.tuning import HEADLINE_V3_GRID, RATE_LADDER, TuningGrid


def curve(peak: float):
    """Validation AUC of a cell whose best rate is ``peak``: falls off with the distance on the ladder."""
    return lambda rate: 0.9 - 0.01 * abs(RATE_LADDER.index(rate) - RATE_LADDER.index(peak))


def tune(grid: TuningGrid, auc) -> dict[float, float]:
    """Runs seed 0 wherever the grid asks, as a driver would, until it asks for nothing."""
    tried: dict[float, float] = {}
    while (rate := grid.next_rate(tried)) is not None:
        assert rate not in tried
        tried[rate] = auc(rate)
    return tried


@pytest.mark.parametrize("peak,expected_rates", [
    (1e-3, (3e-4, 1e-3, 3e-3, 1e-2)),                # inside the start grid: no extension
    (3e-2, (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)),    # at the top edge: up one, then one more to see it fall
    (1e-4, (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)),          # the ladder's bottom: stops there, flagged
    (1e-1, (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)),    # the ladder's top: stops there, flagged
])
def test_the_grid_extends_until_the_choice_is_inside(peak, expected_rates):
    tried = tune(HEADLINE_V3_GRID, curve(peak))
    assert HEADLINE_V3_GRID.rates(tried) == expected_rates == tuple(sorted(tried))
    assert HEADLINE_V3_GRID.choice(tried) == peak
    assert HEADLINE_V3_GRID.at_edge(tried) == (peak in (RATE_LADDER[0], RATE_LADDER[-1]))


def test_a_fixed_grid_never_extends():
    tried = tune(TuningGrid(tuning.LR_GRID), curve(1e-1))
    assert tuple(sorted(tried)) == tuning.LR_GRID
    assert TuningGrid(tuning.LR_GRID).at_edge(tried)  # chose 3e-3, the top: flagged, not extended


def test_manifest_functions_follow_the_grid():
    def entry(model, rate, auc, seed=0):
        return {"dataset": "ml-100k", "model": model, "seed": seed, "lr": rate, "best_valid_auc": auc}
    entries = [entry("sasrec", r, curve(1e-2)(r)) for r in tuning.V3_START]
    entries += [entry("prism", r, curve(1e-3)(r)) for r in tuning.V3_START]
    assert tuning.next_rates(entries, HEADLINE_V3_GRID) == {("ml-100k", "sasrec"): 3e-2}
    assert tuning.chosen_rates(entries, HEADLINE_V3_GRID) == {("ml-100k", "prism"): 1e-3}
    assert tuning.leading_rates(entries, HEADLINE_V3_GRID) == {("ml-100k", "sasrec"): 1e-2}
    entries.append(entry("sasrec", 3e-2, curve(1e-2)(3e-2)))
    assert tuning.chosen_rates(entries, HEADLINE_V3_GRID)[("ml-100k", "sasrec")] == 1e-2
    assert tuning.edge_cells(entries, HEADLINE_V3_GRID) == set()
    assert tuning.chosen_rates(entries, tuning.LR_GRID) == {("ml-100k", "sasrec"): 3e-3, ("ml-100k", "prism"): 1e-3}


def test_a_start_grid_off_the_ladder_is_refused():
    with pytest.raises(ValueError, match=r"option --lr-grid: 0.002 not on the rate ladder"):
        TuningGrid((1e-3, 2e-3), RATE_LADDER)
    with pytest.raises(ValueError, match="empty"):
        TuningGrid((), RATE_LADDER)
