"""Mechanistic probes (paper Table 4): synthetic tasks, a final-token probe model on any registered
backbone, parallel budgeted training with a resumable manifest, and results/probes.md.

Modules: ``tasks`` (one generator per task and the paper's figures), ``settings`` (paper and
authors'-code profiles), ``model``, ``train`` (one run), ``runner`` (many runs, MLflow, manifest),
``report`` (manifest and table), ``cli`` (``prism-rec probe``).
"""
