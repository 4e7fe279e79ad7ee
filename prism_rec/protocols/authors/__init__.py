"""The authors' protocol: destination-node retrieval on a user-item temporal graph.

Written from reading gpr-prism/prism at commit 435f392 (rec/; no code copied). ``data`` builds the edge
task (split, user filter, neighbour histories, fallback features), ``model`` the source and destination
encoders around a registered backbone and the MergeLayer scorer, ``metrics`` the link and retrieval
metrics, ``train`` one (dataset, model, seed) run, ``design`` issue 39's runs, rates and order, ``grid``
the budgeted, resumable grid of them, ``next_item`` the same backbones' headline runs, ``decision`` which
explanation the data support and ``report`` results/authors_protocol.md. ``commands`` adds
``prism-rec authors {train,grid,table}``.
"""
