"""Score runs against qrels with ir_measures, keeping per-query values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

DEFAULT_MEASURES = ("nDCG@10", "RR@10", "R@100")


def parse_measures(names: Iterable[str]):
    """Measure objects from names as ir_measures parses them; a bad name raises ValueError."""
    import ir_measures

    out = []
    for name in names:
        try:
            out.append(ir_measures.parse_measure(name))
        except Exception as exc:  # ir_measures raises several types for bad names
            raise ValueError(f"unknown ir_measures measure {name!r}: {exc}") from None
    return out


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    measures: Iterable[str] = DEFAULT_MEASURES,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``(aggregate, per_query)``: ``{measure: value}`` and ``{measure: {qid: value}}``.

    Queries in the qrels but absent from the run score 0 (aggregates are over the qrels'
    queries, as trec_eval's ``-c``)."""
    import ir_measures

    names = list(measures)
    parsed = parse_measures(names)
    qrels = {str(q): {str(d): int(s) for d, s in row.items()} for q, row in qrels.items()}
    run = {str(q): {str(d): float(s) for d, s in row.items()} for q, row in run.items()}
    per_query: dict[str, dict[str, float]] = {n: {q: 0.0 for q in qrels} for n in names}
    by_measure = dict(zip(parsed, names, strict=True))
    for m in ir_measures.iter_calc(parsed, qrels, run):
        if m.query_id in qrels:
            per_query[by_measure[m.measure]][m.query_id] = float(m.value)
    aggregate = {n: (sum(v.values()) / len(v) if v else 0.0) for n, v in per_query.items()}
    return aggregate, per_query
