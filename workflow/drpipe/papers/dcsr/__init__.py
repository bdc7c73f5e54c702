"""DCSR: Wu et al., ACL 2022. Sentence-aware Contrastive Learning for Open-Domain Passage
Retrieval.

Its DCSR rows of the shared Table 2 carry its Table 2; ``tables.py`` builds its Tables 2-8
(each a list of cells, ours beside the paper's) and Figure 4; ``rules.smk`` the cells from the
config, the DCSR-hard negative round and the vectors-per-passage count.
"""

from drpipe.papers import Paper, Table2Source

PACKAGE_DATA = ("papers/dcsr/numbers.csv", "papers/dcsr/citation.csv")
TABLE2 = "copied from Wu et al. 2022 (DCSR), Table 2"

PAPER = Paper(
    key="dcsr",
    label="DCSR",
    year=2022,
    methods=("dcsr",),
    table2=(Table2Source("2", TABLE2),),
)
