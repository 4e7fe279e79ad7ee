"""Data pipeline: sources, filtering, splitting, caching and batching."""
