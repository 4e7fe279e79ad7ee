"""The floor comparison of the step table: each backbone's step as a ratio to the floor's (the same step
with an identity mixer, ``FLOOR`` of step_timing.py) and to sasrec's, eager and compiled, per shape; and
per backbone the fastest compiled mode that passed its check against eager (compile.py's VERIFIED_MODES)."""

from __future__ import annotations

from step_timing import FLOOR

from prism_rec.markdown import fill, pipe_table
from prism_rec.paths import TEMPLATES_DIR

REFERENCE = "sasrec"


def _timed(rows: list[dict]) -> dict:
    """(model, batch, length, items, loss path, compile) -> median ms of the cells that ran."""
    return {(r["model"], int(r["batch_size"]), int(r["seq_len"]), int(r["n_items"]), r["loss_path"], r["compile"]):
            float(r["step_ms"]) for r in rows if r["status"] == "ok"}


def compiled_choice(timed: dict, passed: dict, model: str, shape: tuple) -> tuple[str, float, str] | None:
    """The fastest compiled cell of ``model`` at ``shape`` among the modes whose check passed, else among
    those not checked (the floor's, say): (mode, ms, "" or "unchecked"); None when none ran."""
    cells = {key[-1]: ms for key, ms in timed.items() if key[0] == model and key[1:-1] == shape and key[-1] != "off"}
    for status, label in ((True, ""), (None, "unchecked")):
        eligible = {mode: ms for mode, ms in cells.items() if passed.get((model, mode)) is status}
        if eligible:
            mode = min(eligible, key=eligible.get)
            return mode, eligible[mode], label
    return None


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return "" if numerator is None or denominator is None else f"{numerator / denominator:.2f}x"


def floor_table(timed: dict, passed: dict, shape: tuple, models: list[str]) -> list[list[str]]:
    """Rows of the ratio table at ``shape`` (batch, length, items, loss path), the floor's first."""
    eager = {model: timed.get((model, *shape, "off")) for model in models}
    compiled = {model: compiled_choice(timed, passed, model, shape) for model in models}
    reference = compiled.get(REFERENCE)
    table = []
    for model in models:
        choice = compiled[model]
        mode, ms, label = choice if choice else ("", None, "")
        floor_ms = timed.get((FLOOR, *shape, mode)) or (compiled[FLOOR][1] if compiled.get(FLOOR) else None)
        table.append([model, "" if eager[model] is None else f"{eager[model]:.2f}", _ratio(eager[model], eager[FLOOR]),
                      _ratio(eager[model], eager.get(REFERENCE)), f"{mode} {label}".strip(),
                      "" if ms is None else f"{ms:.2f}", _ratio(ms, floor_ms),
                      _ratio(ms, reference[1] if reference else None)])
    return table


def verified_modes(timed: dict, passed: dict) -> dict[str, str]:
    """Per checked backbone, its compiled mode that passed and took the least time summed over the shapes
    where every passing mode ran; "off" for a backbone none of whose modes passed."""
    modes = {}
    for backbone in dict.fromkeys(b for b, _ in passed):
        passing = [m for (b, m), ok in passed.items() if b == backbone and ok]
        shapes = {key[1:-1] for key in timed if key[0] == backbone}
        shapes = [s for s in shapes if all((backbone, *s, m) in timed for m in passing)]
        totals = {m: sum(timed[(backbone, *s, m)] for s in shapes) for m in passing}
        modes[backbone] = min(totals, key=totals.get) if totals and shapes else "off"
    return modes


def floor_sections(rows: list[dict], verified: list) -> list[str]:
    """The markdown of the floor comparison and of the verified modes; nothing without floor rows."""
    timed = _timed(rows)
    passed = {(backbone, mode): ok for backbone, mode, ok in verified}
    shapes = list(dict.fromkeys(key[1:-1] for key in timed if key[0] == FLOOR))
    if not shapes:
        return []
    models = [FLOOR, *dict.fromkeys(r["model"] for r in rows if r["model"] != FLOOR)]
    lines = [fill(TEMPLATES_DIR / "step_floor.md"), ""]
    for shape in shapes:
        batch, length, items, path = shape
        lines += [f"### {batch} x {length}, {items:,} items, {path} loss", "",
                  pipe_table(["backbone", "eager ms", "/ floor", "/ sasrec", "compiled mode", "compiled ms",
                              "/ floor", "/ sasrec"], floor_table(timed, passed, shape, models), align="lrrrlrrr"), ""]
    modes = verified_modes(timed, passed)
    if modes:
        lines += [fill(TEMPLATES_DIR / "step_verified.md", modes=modes), ""]
    return lines
