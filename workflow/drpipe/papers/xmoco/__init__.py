"""xMoCo: Yang et al., ACL-IJCNLP 2021. Cross Momentum Contrastive Learning for Open-Domain QA.

Its xMoCo rows of the shared Table 2 (and BM25+xMoCo, which it prints "xMoCo+BM25") carry its
Table 2, and its rows of the shared Table 4 its Table 4 (end-to-end exact match); ``tables.py``
builds its own Table 2 (with its re-implementation of DPR), Table 3 (tied against separate
encoders) and Figure 2 (top-20 against queue size).
"""

from drpipe.papers import Paper, Table2Source

PACKAGE_DATA = ("papers/xmoco/numbers.csv", "papers/xmoco/citation.csv")
TABLE2 = "copied from Yang et al. 2021 (xMoCo), Table 2"
TABLE3 = "copied from Yang et al. 2021 (xMoCo), Table 3"
TABLE4 = "copied from Yang et al. 2021 (xMoCo), Table 4"

PAPER = Paper(
    key="xmoco",
    label="xMoCo",
    year=2021,
    methods=("xmoco",),
    table2=(Table2Source("2", TABLE2),),
    table4=(Table2Source("4", TABLE4),),
)
