"""Chunked scans for linear recurrent sequence models (prism_rec.kernels)."""

from .delta_scan import delta_scan

__all__ = ["delta_scan"]
