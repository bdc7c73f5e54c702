"""The generic table toolkit every paper's tables are built with (public names only).

- ``metrics``: reading ``drpipe evaluate`` metrics and per-question first-hit ranks
- ``rows``: dataset, training and protocol order; the paper's split for ours; a cell lookup
- ``compare``: ours beside the paper's value: difference and tolerance at the paper scale,
  ranks and orderings below it
- ``notes``: the setup notes beside Table 2 rows
- ``output``: CSV, Markdown and PNG, written atomically with the same bytes for the same content
- ``cli``: one argument style for table and figure commands
- ``protocols``: standard, leak-free and oracle rows

Nothing here knows a paper: papers (``drpipe.papers``) call it.
"""
