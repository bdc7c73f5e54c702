"""DPR: Karpukhin et al., EMNLP 2020. Dense Passage Retrieval for Open-Domain QA.

Its Table 2 is the layout of the shared ``results/table2.csv`` (BM25, the encoder before
fine-tuning, DPR and BM25+DPR; Single and Multi; five datasets); ``tables.py`` adds its
Table 3 (training schemes) and Figure 1 (top-k against k by training-set size). Its Table 4
(end-to-end exact match) is the layout of the shared ``results/table4.csv``.
"""

from drpipe.papers import Paper, Table2Source

PACKAGE_DATA = ("papers/dpr/numbers.csv", "papers/dpr/citation.csv")
TABLE2 = "copied from Karpukhin et al. 2020, Table 2"
TABLE3 = "copied from Karpukhin et al. 2020, Table 3"
TABLE4 = "copied from Karpukhin et al. 2020, Table 4"

PAPER = Paper(
    key="dpr",
    label="DPR",
    year=2020,
    methods=("bm25", "init", "dpr"),
    table2=(Table2Source("2", TABLE2),),
    table4=(Table2Source("4", TABLE4),),
    # Placed after BM25 in the "None" block: the encoder before any fine-tuning.
    row_order=("BM25", "DPR init (no fine-tuning)", "DPR", "BM25+DPR"),
)
