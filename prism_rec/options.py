"""Values of the command-line options several commands share; a bad value raises ``OptionError`` naming
the option."""

from __future__ import annotations

import importlib.util
import math
import tempfile
from pathlib import Path

from . import registry
from .errors import OptionError

SEED_LIMIT = 2**32  # NumPy's seeds are 32-bit
MAX_SEEDS = 10_000
# Integer options by destination, with the range they must lie in: every subcommand's option of that name.
INTEGER_RANGES = {
    "d_model": (1, 65_536), "n_layers": (1, 1_024), "n_heads": (1, 4_096), "max_len": (1, 1_000_000),
    "seq_len": (1, 1_000_000), "vocab_size": (1, 1 << 24), "batch_size": (1, 1 << 24),
    "eval_batch_size": (1, 1 << 24), "eval_size": (1, 1 << 30), "epochs": (1, 1_000_000), "patience": (0, 1_000_000),
    "n_negatives": (1, 1 << 24), "steps": (1, 10**9), "warmup": (0, 10**9), "workers": (1, 4_096),
    "port": (1, 65_535), "cluster_jobs": (1, 100_000), "runs_per_gpu": (1, 1_024),
    "min_user_interactions": (0, 2**31 - 1), "min_item_interactions": (0, 2**31 - 1),
}
# Number options by destination: (low, high, whether low itself is allowed); NaN and infinities never are.
NUMBER_RANGES = {
    "lr": (0.0, 10.0, True), "weight_decay": (0.0, 10.0, True), "dropout": (0.0, 1.0, True),
    "grad_clip": (0.0, 1e6, True), "time_budget": (0.0, 1e9, False), "budget": (0.0, 1e9, False),
    "total_budget": (0.0, 1e9, False), "case_budget": (0.0, 1e9, False), "start_margin": (0.0, 1e9, True),
    "checkpoint_limit": (0.0, 1e12, False), "timeout": (0.0, 1e6, False),
}


ON_WORDS = ("on", "true", "1", "yes")
OFF_WORDS = ("off", "false", "0", "no")


def parse_on_off(value, name: str) -> bool:
    """True or False (or 1 or 0) as given; a word of ``ON_WORDS`` or ``OFF_WORDS`` (any case) as True or False;
    anything else raises :class:`OptionError` naming ``name`` (the option, e.g. "--set exclude_history")."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ON_WORDS or text in OFF_WORDS:
        return text in ON_WORDS
    raise OptionError(f"option {name}: {value!r} is not on or off (one of {', '.join(ON_WORDS + OFF_WORDS)})")


def resolve_models(text: str, option: str = "--models") -> list[str]:
    """'all' -> every registered backbone; 'a,b' -> ['a', 'b'] when both are registered or name RecBole
    models ("recbole:<Model>", which bench checks against the bridge), else an error naming ``option``."""
    registered = registry.list_backbones()
    names = registered if text == "all" else [name.strip() for name in text.split(",") if name.strip()]
    check_unique(names, option)
    unknown = [name for name in names if name not in registered and not name.startswith(registry.RECBOLE_PREFIX)]
    if unknown or not names:
        raise OptionError(f"option {option}: unknown backbone(s) {unknown or text!r}; "
                          f"registered: {', '.join(registered)}")
    return names


def parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '1,5,7' -> [1, 5, 7]: distinct seeds in [0, 2**32), at most ``MAX_SEEDS``; anything
    else raises :class:`OptionError`."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()] if "," in text else None
        count = int(text) if seeds is None else len(seeds)
    except ValueError:
        raise OptionError(f"option --seeds: expected a count or a comma list of integers, got {text!r}") from None
    if count > MAX_SEEDS:
        raise OptionError(f"option --seeds: {count} seeds, at most {MAX_SEEDS}")
    seeds = list(range(count)) if seeds is None else seeds
    if not seeds:
        raise OptionError(f"option --seeds: need at least one seed, got {text!r}")
    if len(set(seeds)) != len(seeds):
        raise OptionError(f"option --seeds: seed listed twice in {text!r}")
    bad = [seed for seed in seeds if not 0 <= seed < SEED_LIMIT]
    if bad:
        raise OptionError(f"option --seeds: {bad[0]} is not a seed in [0, {SEED_LIMIT - 1}]")
    return seeds


FOLDER_OPTIONS = ("results_dir", "checkpoint_dir", "checkpoints")  # folders a command writes into
OUTPUT_OPTIONS = ("out",)  # a folder, or a file where the name has a suffix (scaling.md)
STORE_COMMANDS = ("bench", "tables", "import-runs", "ui")  # the commands that always open the MLflow store


def opens_store(args) -> bool:
    """Whether the parsed command line opens the MLflow store: the commands of ``STORE_COMMANDS`` always,
    ``probe`` unless --no-mlflow, ``throughput`` with --mlflow on (or auto where mlflow is installed)."""
    if args.command in STORE_COMMANDS:
        return True
    if args.command == "probe":
        return not getattr(args, "no_mlflow", False)
    mode = getattr(args, "mlflow", "off") if args.command == "throughput" else "off"
    return mode == "on" or (mode == "auto" and importlib.util.find_spec("mlflow") is not None)


def option_name(dest: str) -> str:
    return f"--{dest.replace('_', '-')}"


def check_options(args) -> None:
    """Every option of a parsed command line (``args``, argparse's namespace), checked by its destination's
    name before any work: integers in range, finite numbers in range, seeds, unique models, devices,
    backbone ``--option`` values of the option's type, and writable output folders. Raises
    :class:`OptionError` with one line naming the first bad option."""
    values = vars(args)
    check_ranges(values)
    if isinstance(values.get("seeds"), str):
        parse_seeds(values["seeds"])
    elif isinstance(values.get("seeds"), int) and not 1 <= values["seeds"] <= MAX_SEEDS:
        raise OptionError(f"option --seeds: a count in [1, {MAX_SEEDS}], got {values['seeds']}")
    if isinstance(values.get("models"), str):
        names = [name.strip() for name in values["models"].split(",") if name.strip()]
        check_unique(names, "--models")
        if values.get("option"):
            check_backbone_options(names, dict(values["option"]))
    if isinstance(values.get("device"), str):
        from .training.devices import check_devices

        try:
            check_devices(values["device"])
        except ValueError as error:
            raise OptionError(str(error)) from None
    for dest in (*FOLDER_OPTIONS, *OUTPUT_OPTIONS):
        if values.get(dest) is not None:
            check_writable(Path(values[dest]), option_name(dest),
                           folder=dest in FOLDER_OPTIONS or not Path(values[dest]).suffix)


def check_ranges(values: dict) -> None:
    """The integer and number options among ``values`` (by destination) inside their ranges."""
    for dest, (low, high) in INTEGER_RANGES.items():
        value = values.get(dest)
        if value is not None and not low <= value <= high:
            raise OptionError(f"option {option_name(dest)}: must be an integer in [{low}, {high}], got {value}")
    for dest, (low, high, closed) in NUMBER_RANGES.items():
        value = values.get(dest)
        if value is not None and not (math.isfinite(value) and (low <= value if closed else low < value)
                                      and value <= high):
            bound = "[" if closed else "("
            raise OptionError(f"option {option_name(dest)}: must be a finite number in {bound}{low:g}, {high:g}], "
                              f"got {value}")


def check_unique(names: list[str], option: str) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise OptionError(f"option {option}: {', '.join(repeated)} listed twice")


def check_backbone_options(models: list[str], options: dict) -> None:
    """Each ``--option KEY=VALUE`` of the type of KEY's default in every registered model of ``models`` that
    takes KEY (an integer default takes integers; a number, numbers; a flag, True or False)."""
    for model in models:
        if model not in registry.list_backbones():
            continue  # named by the command's own check of the models
        parameters = registry.backbone_parameters(model)
        for key, value in options.items():
            default = parameters[key].default if key in parameters else None
            kinds = {bool: (bool,), int: (int,), float: (int, float)}.get(type(default))
            if kinds and not (isinstance(value, kinds) and (type(default) is bool) == isinstance(value, bool)):
                raise OptionError(f"option --option {key}={value}: backbone {model} takes "
                                  f"{type(default).__name__} {key} (default {default!r})")
            if isinstance(value, float) and not math.isfinite(value):
                raise OptionError(f"option --option {key}={value}: not a finite number")


def check_writable(path: Path, option: str, folder: bool) -> None:
    """``path`` (a folder, or a file when not ``folder``) can be written: it, or the nearest folder above it
    that exists, takes a new file; the check leaves nothing behind."""
    if path.exists() and folder != path.is_dir():
        raise OptionError(f"option {option}: {path} is {'a file' if folder else 'a folder'}; expected "
                          f"{'a folder' if folder else 'a file'}")
    existing = path if path.is_dir() else path.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OptionError(f"option {option}: {existing} is not a folder, so {path} cannot be made")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise OptionError(f"option {option}: cannot write in {existing} ({error.strerror})") from None
