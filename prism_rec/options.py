"""Values of the command-line options several commands share; a bad value raises ``OptionError`` naming
the option."""

from __future__ import annotations

from . import registry
from .errors import OptionError


def resolve_models(text: str, option: str = "--models") -> list[str]:
    """'all' -> every registered backbone; 'a,b' -> ['a', 'b'] when both are registered or name RecBole
    models ("recbole:<Model>", which bench checks against the bridge), else an error naming ``option``."""
    registered = registry.list_backbones()
    names = registered if text == "all" else [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in registered and not name.startswith(registry.RECBOLE_PREFIX)]
    if unknown or not names:
        raise OptionError(f"option {option}: unknown backbone(s) {unknown or text!r}; "
                          f"registered: {', '.join(registered)}")
    return names


def parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '1,5,7' -> [1, 5, 7]; anything else raises :class:`OptionError`."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()] if "," in text else list(range(int(text)))
    except ValueError:
        raise OptionError(f"option --seeds: expected a count or a comma list of integers, got {text!r}") from None
    if not seeds:
        raise OptionError(f"option --seeds: need at least one seed, got {text!r}")
    if len(set(seeds)) != len(seeds):
        raise OptionError(f"option --seeds: seed listed twice in {text!r}")
    return seeds
