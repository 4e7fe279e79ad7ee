"""prism-rec: a sequential-recommendation benchmark suite built around PRISM (arXiv 2602.10796)."""

__version__ = "0.1.0"
