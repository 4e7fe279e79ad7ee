"""Fair tuning of the headline grid: one learning-rate grid, one choice rule, the same for every backbone.

For each (dataset, base backbone) seed 0 trains once at every rate of the start grid; the chosen rate is the
one with the highest best validation AUC (ties: the smaller rate); seeds 1.. then train at that rate. A grid
with a ladder (``TuningGrid``) extends itself per cell: while the best rate tried sits at the top (bottom) of
the rates tried and the ladder goes further, seed 0 also trains at the ladder's next rate up (down), so the
choice ends inside the grid or at the ladder's end (flagged by ``TuningGrid.at_edge``). Plain tuples of rates
(headline v2) never extend. The
ablation presets of PRISM (``prism-*``) take PRISM's choice instead of their own, so an ablation differs
from PRISM in the ablated part only. ``pop`` trains nothing and has no rate. The choice reads only
validation metrics of manifest entries, so it is reproducible from the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OptionError
from ..registry import backbone_entry, trains

LR_GRID = (3e-4, 1e-3, 3e-3)  # headline v2's fixed grid
V3_START = (3e-4, 1e-3, 3e-3, 1e-2)
RATE_LADDER = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)  # a factor of about 3 a step: the extension's reach
TUNING_SEED = 0
PRESET_BASES = {"prism": "prism-"}  # base backbone: name prefix of its presets (same factory, other defaults)


def check_grid(rates: list[float]) -> tuple[float, ...]:
    """``rates`` as a sorted tuple; refuses an empty grid or a rate that is not a finite positive number."""
    if not rates:
        raise OptionError("option --lr-grid: the learning-rate grid is empty")
    for rate in rates:
        if not (isinstance(rate, float) and 0 < rate < float("inf")):
            raise OptionError(f"option --lr-grid: {rate!r} is not a positive learning rate")
    return tuple(sorted(set(rates)))


def parse_grid(text: str) -> tuple[float, ...]:
    """A comma-separated ``--lr-grid`` such as "3e-4,1e-3,3e-3": refuses an empty grid, a rate that is not a
    finite positive number, and rates not in increasing order (a repeat included)."""
    rates = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            rates.append(float(part))
        except ValueError:
            raise OptionError(f"option --lr-grid: {part.strip()!r} is not a number") from None
    grid = check_grid(rates)
    if tuple(rates) != grid:
        raise OptionError(f"option --lr-grid: the rates must increase, each once; got {text!r}")
    return grid


@dataclass(frozen=True)
class TuningGrid:
    """A start grid of rates and the ladder it may extend along (empty: it never extends)."""

    start: tuple[float, ...]
    ladder: tuple[float, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "start", check_grid(list(self.start)))
        if self.ladder:
            object.__setattr__(self, "ladder", check_grid(list(self.ladder)))
            off = [r for r in self.start if r not in self.ladder]
            if off:
                raise OptionError(f"option --lr-grid: {', '.join(f'{r:g}' for r in off)} not on the rate ladder "
                                 f"{', '.join(f'{r:g}' for r in self.ladder)}")

    def rates(self, by_rate: dict[float, float]) -> tuple[float, ...]:
        """The cell's grid so far: the start grid and the ladder rates tried."""
        return tuple(sorted(set(self.start) | {r for r in by_rate if r in self.ladder}))

    def next_rate(self, by_rate: dict[float, float]) -> float | None:
        """The next rate seed 0 must train at, or None once the cell's grid is complete."""
        missing = [rate for rate in self.rates(by_rate) if rate not in by_rate]
        if missing or not self.ladder:
            return missing[0] if missing else None
        rates = self.rates(by_rate)
        best = choose_rate(by_rate, rates)
        if best == rates[-1] and best < self.ladder[-1]:
            return self.ladder[self.ladder.index(best) + 1]
        if best == rates[0] and best > self.ladder[0]:
            return self.ladder[self.ladder.index(best) - 1]
        return None

    def choice(self, by_rate: dict[float, float]) -> float | None:
        """The chosen rate once the cell's grid is complete, else None."""
        return None if self.next_rate(by_rate) is not None else choose_rate(by_rate, self.rates(by_rate))

    def at_edge(self, by_rate: dict[float, float]) -> bool:
        """Whether the completed cell's choice is still the lowest or highest rate of its grid."""
        chosen, rates = self.choice(by_rate), self.rates(by_rate)
        return chosen is not None and len(rates) > 1 and chosen in (rates[0], rates[-1])


HEADLINE_V3_GRID = TuningGrid(V3_START, RATE_LADDER)


def as_grid(grid: TuningGrid | tuple[float, ...]) -> TuningGrid:
    return grid if isinstance(grid, TuningGrid) else TuningGrid(tuple(grid))


def tuning_base(model: str) -> str:
    """The backbone whose seed-0 grid sets ``model``'s rate: its base when it is a preset of one (named
    with the base's prefix and built by the same factory: the ablations, not ``prism-authors``), else itself."""
    for base, prefix in PRESET_BASES.items():
        if model.startswith(prefix) and backbone_entry(model).factory is backbone_entry(base).factory:
            return base
    return model


def check_bases(models: list[str]) -> None:
    """Refuses a model list with a preset but not the base whose rate it takes."""
    missing = sorted({tuning_base(m) for m in models} - set(models))
    if missing:
        raise OptionError(f"option --models: {', '.join(m for m in models if tuning_base(m) in missing)} "
                         f"take the learning rate chosen for {', '.join(missing)}; add it to the list")


def choose_rate(valid_auc_by_rate: dict[float, float], grid: tuple[float, ...]) -> float | None:
    """The rate of ``grid`` with the highest validation AUC (ties: the smaller); None until every rate
    of the grid has a result."""
    if any(rate not in valid_auc_by_rate for rate in grid):
        return None
    return max(sorted(grid), key=lambda rate: (valid_auc_by_rate[rate], -rate))


def seed0_by_rate(entries: list[dict], value) -> dict[tuple[str, str], dict[float, object]]:
    """{(dataset, base backbone): {rate: ``value``(line)}} over the seed-0 manifest lines of the base backbones
    (``dataset``, ``model``, ``seed``, ``lr``); the newest line per (dataset, model, rate) counts."""
    seen: dict[tuple[str, str], dict[float, object]] = {}
    for entry in entries:
        model = entry["model"]
        if entry["seed"] == TUNING_SEED and trains(model) and model == tuning_base(model):
            seen.setdefault((entry["dataset"], entry["model"]), {})[float(entry["lr"])] = value(entry)
    return seen


def valid_auc_by_rate(entries: list[dict]) -> dict[tuple[str, str], dict[float, float]]:
    """{(dataset, base backbone): {rate: best validation AUC of seed 0}} (``seed0_by_rate`` of
    ``best_valid_auc``: -inf for a run that diverged before its first validation)."""
    return seed0_by_rate(entries, lambda entry: entry["best_valid_auc"])


def chosen_rates(entries: list[dict], grid: TuningGrid | tuple[float, ...] = LR_GRID
                 ) -> dict[tuple[str, str], float]:
    """{(dataset, base backbone): chosen rate} for every base whose seed-0 grid is complete in ``entries``
    (manifest lines, see ``valid_auc_by_rate``)."""
    grid = as_grid(grid)
    choices = {key: grid.choice(by_rate) for key, by_rate in valid_auc_by_rate(entries).items()}
    return {key: rate for key, rate in choices.items() if rate is not None}


def next_rates(entries: list[dict], grid: TuningGrid | tuple[float, ...] = LR_GRID) -> dict[tuple[str, str], float]:
    """{(dataset, base backbone): the next rate its seed 0 needs} for every base with a seed-0 run whose grid
    is not complete (for an extending grid, the extension a driver queues once the rates before it are in)."""
    grid = as_grid(grid)
    wanted = {key: grid.next_rate(by_rate) for key, by_rate in valid_auc_by_rate(entries).items()}
    return {key: rate for key, rate in wanted.items() if rate is not None}


def edge_cells(entries: list[dict], grid: TuningGrid | tuple[float, ...] = LR_GRID) -> set[tuple[str, str]]:
    """The (dataset, base backbone) cells whose completed choice is still at an edge of their grid."""
    grid = as_grid(grid)
    return {key for key, by_rate in valid_auc_by_rate(entries).items() if grid.at_edge(by_rate)}


def leading_rates(entries: list[dict], grid: TuningGrid | tuple[float, ...] = LR_GRID
                  ) -> dict[tuple[str, str], float]:
    """{(dataset, base backbone): the rate the choice rule would pick among the rates tried so far} for
    every base whose seed-0 grid has started but is not complete: the best guess at its choice, on which
    a driver may start the other seeds before the grid ends (they count only if the guess holds)."""
    grid = as_grid(grid)
    leading = {}
    for key, by_rate in valid_auc_by_rate(entries).items():
        tried = tuple(rate for rate in grid.rates(by_rate) if rate in by_rate)
        if tried and grid.next_rate(by_rate) is not None:
            leading[key] = choose_rate(by_rate, tried)
    return leading


def rate_for(dataset: str, model: str, choices: dict[tuple[str, str], float]) -> float | None:
    """The rate ``model`` trains at on ``dataset`` once its base's grid is complete (None before)."""
    return choices.get((dataset, tuning_base(model)))


def selected_entries(entries: list[dict], grid: TuningGrid | tuple[float, ...] = LR_GRID) -> list[dict]:
    """The entries that make the tables: every seed at its cell's chosen rate (and ``pop``), the newest
    line per (dataset, model, seed)."""
    choices = chosen_rates(entries, grid)
    newest: dict[tuple[str, str, int], dict] = {}
    for entry in entries:
        if entry.get("diverged"):  # at a losing rate unless every rate diverged; never a table row
            continue
        if not trains(entry["model"]) or float(entry["lr"]) == rate_for(entry["dataset"], entry["model"], choices):
            newest[(entry["dataset"], entry["model"], entry["seed"])] = entry
    return list(newest.values())
