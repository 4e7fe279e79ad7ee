"""Errors that end a command with a message of their own rather than a traceback."""


class OptionError(ValueError):
    """A bad command-line option; the message names it. ``prism-rec`` prints it and exits 2, before any
    training or logging."""


class BenchFailures(RuntimeError):
    """Some trainings of a bench crashed (each ended FAILED, its traceback printed); the others ran."""
