"""The headline protocol "headline-v3": the v2 settings with a rate grid that extends to an interior optimum,
five seeds, GRU4Rec, and a second width preset on two datasets.

- Rates: ``tuning.HEADLINE_V3_GRID`` (start 3e-4..1e-2, extended per (dataset, base backbone, width) cell along
  the ladder 1e-4..1e-1 while the choice sits at an edge).
- Seeds 0-4 at the chosen rate.
- Widths: "d64" (SETTINGS: d_model 64, 2 heads) on every backbone and dataset; "d256" (d_model 256, 4 heads) on
  ``WIDE_MODELS`` and ``WIDE_DATASETS``, tuned the same way.
- Every run of ``--reuse`` manifests (default the committed v2 one) whose settings hash is a cell of this grid
  counts as done: its line is copied into the v3 manifest (keeping its "protocol": "headline-v2") and it is not
  retrained, so v2's rates and seeds 0-2 carry over wherever the settings match.
"""

from __future__ import annotations

from ...errors import OptionError
from ...paths import RESULTS_DIR
from .. import tuning
from .protocol import BASE_WIDTH, MANIFEST_NAME, HeadlineProtocol, Width

PROTOCOL_V3 = "headline-v3"
SEEDS_V3 = (0, 1, 2, 3, 4)
WIDE_MODELS = ("sasrec", "transformer++", "gated_deltanet", "prism", "prism-L0", "mamba2")
WIDE_DATASETS = ("books-dealrec", "yelp-iclrec")
WIDTHS = {BASE_WIDTH.name: BASE_WIDTH, "d256": Width("d256", 256, 4, WIDE_MODELS, WIDE_DATASETS)}
V3 = HeadlineProtocol(PROTOCOL_V3, SEEDS_V3, tuning.HEADLINE_V3_GRID, WIDTHS, "headline_v3_manifest.jsonl",
                      "headline_v3_case_ranks.jsonl")
REUSE_DEFAULT = RESULTS_DIR / MANIFEST_NAME


def parse_widths(text: str, protocol: HeadlineProtocol) -> dict[str, Width]:
    """A comma-separated ``--widths`` list of ``protocol``'s width presets; refuses an empty list or an unknown
    name."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise OptionError("option --widths: no width preset given")
    unknown = [name for name in names if name not in protocol.widths]
    if unknown:
        raise OptionError(f"option --widths: unknown width preset(s) {', '.join(unknown)}; {protocol.name} has "
                          f"{', '.join(protocol.widths)}")
    return {name: protocol.widths[name] for name in names}


def grid_from_option(text: str, protocol: HeadlineProtocol) -> tuning.TuningGrid | tuple[float, ...]:
    """``--lr-grid`` under ``protocol``: its start grid, extended along the protocol's ladder if it has one."""
    ladder = protocol.grid.ladder if isinstance(protocol.grid, tuning.TuningGrid) else ()
    try:
        rates = tuning.parse_grid(text)
        return tuning.TuningGrid(rates, ladder) if ladder else rates
    except ValueError as error:
        raise OptionError(str(error)) from None
