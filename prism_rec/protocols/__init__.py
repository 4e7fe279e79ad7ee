"""Evaluation protocols other than the suite's next-item protocol (``prism_rec.training``).

``authors``: the link-prediction task of the PRISM authors' recommendation code (gpr-prism/prism, rec/).
"""
