"""drpipe: a Snakemake workflow that reproduces DPR, DCSR, xMoCo and AOpt retrieval results."""

__version__ = "0.1.0"
