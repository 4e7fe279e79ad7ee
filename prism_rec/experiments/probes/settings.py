"""Probe training settings: the paper's (Table 4) and the authors' probing script's, per task.

``paper``: width 16, 2 layers, vocabulary 64, length 128 for every task, 10,000 steps, accuracy on the
final token (paper section 5.2 / Table 4; the paper names no batch size or optimiser, so those are the
authors' script's).

``authors-code``: what gpr-prism/prism ``rec/test_syntheticdata.py`` runs: vocabulary 32, one head, length
128 except the memory tasks (MQAR, variable tracking: length 64 and width 128, "otherwise all linear
attention models fail to converge" says the script), batch 32, AdamW lr 1e-3, weight decay 1e-4, gradient
clipping at norm 5, 10,000 steps, no dropout. (That script also builds its PRISM with depth 1 where L = 2 is
claimed; to reproduce it pass the model ``prism:L=1``.)

Both profiles use the same optimiser and batch for every model: nothing is tuned per model or per task.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

MEMORY_TASKS = ("mqar", "variable_tracking")


@dataclass(frozen=True)
class ProbeSettings:
    """Everything that defines one probe training besides task, model and seed."""

    vocab_size: int = 64
    seq_len: int = 128
    d_model: int = 16
    n_layers: int = 2
    n_heads: int = 2
    steps: int = 10_000
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-4
    grad_clip: float = 5.0
    eval_size: int = 4096

    def validate(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            option = f"--{item.name.replace('_', '-')}"
            if item.name in ("weight_decay", "grad_clip"):
                if value < 0:
                    raise ValueError(f"option {option}: must be >= 0, got {value}")
            elif item.name == "lr":
                if value <= 0:
                    raise ValueError(f"option {option}: must be > 0, got {value}")
            elif value < 1:
                raise ValueError(f"option {option}: must be >= 1, got {value}")
        if self.d_model % self.n_heads:
            raise ValueError(f"option --n-heads: {self.n_heads} does not divide --d-model {self.d_model}")

    def as_dict(self) -> dict:
        return asdict(self)


PROFILES = ("paper", "authors-code")


def settings_for(profile: str, task: str, overrides: dict | None = None) -> ProbeSettings:
    """The settings of ``task`` under ``profile``, then ``overrides`` (option name -> value, None = keep)."""
    if profile == "paper":
        settings = ProbeSettings()
    elif profile == "authors-code":
        memory = task in MEMORY_TASKS
        settings = ProbeSettings(vocab_size=32, n_heads=1, seq_len=64 if memory else 128, d_model=128 if memory else 16)
    else:
        raise ValueError(f"option --profile: {profile!r} is not one of {', '.join(PROFILES)}")
    settings = replace(settings, **{k: v for k, v in (overrides or {}).items() if v is not None})
    settings.validate()
    return settings
