"""Setup notes: where our setup differs from the papers', said beside the numbers.

Each Table 2 row names the notes that apply to it (CSV column ``notes``); the Markdown prints
their text, written from the run's own config (``setup`` in the table's ``--cfg``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from drpipe.tables.compare import as_scale

# Where our setup differs from the papers', said beside the numbers: each Table 2 row names
# the notes that apply to it (CSV column "notes"); the markdown prints their text, written
# from the run's own config ("setup" in the table's --cfg).
# "paper": a row whose method no paper lists (it has no paper value).
# "multi": a Multi row of a table whose Multi rows train on more than one set (each paper's own).
# "precision": a row whose training or encoding recorded a precision (drpipe.tables.precision).
# "zero_shot": an off-the-shelf encoder's row (config zero_shot: run init.<name>).
# "external": a run made elsewhere (config external_runs: run ext.<name>).
# "reader", "k", "reader_precision" and "sample": the reader behind a Table 4 row
# (reader_notes).
NOTE_ORDER = (
    "scale", "bm25", "hybrid", "released", "zero_shot", "external", "training", "multi",
    "validation", "precision",
    "reader", "k", "reader_precision", "sample", "paper",
)  # fmt: skip
# The run of DPR's released checkpoints (evaluated without training: no training notes).
RELEASED_RUN = "dpr.released"


def row_kinds(run: str, train_set: str | None) -> set[str]:
    kinds = set()
    if run == "bm25":
        kinds.add("bm25")
    if "+bm25" in run:
        kinds |= {"bm25", "hybrid"}
    if run.split("+")[0] == RELEASED_RUN:
        kinds.add("released")
    elif run.startswith("init."):
        kinds.add("zero_shot")
    elif run.startswith("ext."):
        kinds.add("external")
    elif train_set and train_set != "none":
        kinds |= {"training", "validation"}
    return kinds


def note_keys(kinds: Iterable[str], scale: str) -> list[str]:
    """The notes a row with these kinds carries, in ``NOTE_ORDER``."""
    keys = set(kinds) | ({"scale"} if as_scale(scale).note else set())
    return [k for k in NOTE_ORDER if k in keys]


def _listed(entries: Iterable[dict], what: Any) -> str:
    """Config entries (zero-shot encoders, external runs) as "label: what (note); ..."."""
    return "; ".join(
        f"{e['label']}: {what(e)}" + (f" ({e['note']})" if e.get("note") else "") for e in entries
    )


def setup_notes(setup: dict[str, Any], scale: str) -> dict[str, str]:
    """Text of each note from the run's config: ``encoder`` (init), ``bm25_fields``,
    ``field_weights``, ``hybrid_lambda``, ``hybrid_grid``, ``training`` (method -> epochs,
    batch_size), ``multi_sets`` (train set of Multi rows -> its datasets) and ``validation``
    (train set -> ``dev`` or the held-out fraction); ``encoder_settings`` (the encoder block's
    pooling and normalisation in words) and ``zero_shot`` (label, init, settings, note of
    each off-the-shelf encoder's row)."""
    notes: dict[str, str] = {}
    scale = as_scale(scale)
    if scale.note == "standin":
        notes["scale"] = (
            f"Scale `{scale}`: the paper scale's DAG on stand-in inputs of the papers' formats "
            "(README, 'On a cluster') and a tiny random BERT-shaped encoder. Its numbers mean "
            "nothing; its structure (rows, columns, the paper-scale diff and tolerance) is the "
            "paper scale's."
        )
    elif scale.note == "small":
        notes["scale"] = (
            f"Scale `{scale}`: a corpus of thousands of passages (README, 'Scales') instead "
            f"of 21M Wikipedia passages, and the encoder {setup.get('encoder', '?')}"
            + (f" ({setup['encoder_settings']})" if setup.get("encoder_settings") else "")
            + " instead of BERT-base. The absolute numbers are no reproduction gap, so no difference to the "
            "paper is printed; what carries over is the ordering of the rows (their ranks) and "
            "the paired claims in results/claims.csv."
        )
        seen = setup.get("encoder_pretraining") or []
        if seen:
            notes["scale"] += (
                " That encoder was trained, before any training here, on question-passage "
                f"pairs of {', '.join(seen)} (its data_config.json): the initial row is no "
                "untrained baseline, and the held-out questions of the local scales (SQuAD "
                "train articles) are among what it saw; the test questions (SQuAD dev) are not."
            )
    if setup.get("bm25_fields", "single") == "single":
        notes["bm25"] = (
            "BM25 indexes title and text as one field, as pyserini indexes DPR's Wikipedia; "
            "DPR's own BM25 used two fields, and pyserini's single-field NQ run prints 3 to 4 "
            "points above DPR's BM25 (bm25.fields: title_text is the two-field option)."
        )
    else:
        w = setup.get("field_weights", {})
        notes["bm25"] = (
            "BM25 is summed over two fields, text and title (Anserini -fields, weights "
            f"{w.get('contents', 1.0)} and {w.get('title', 1.0)}), like DPR's two-field index."
        )
    lam = setup.get("hybrid_lambda", 1.1)
    how = (
        f"lambda chosen per model as the best of {setup.get('hybrid_grid')} on the training "
        "questions the model held out for validation (never on test questions; the choice and "
        "the grid's accuracies are in the hybrid run's report)"
        if lam == "tune"
        else f"lambda fixed at {lam}"
    )
    notes["hybrid"] = (
        f"BM25 + lambda x dense, {how}; DPR chose 1.1 on its dev set for its own encoder's "
        "score scale. A passage found only by the dense retriever gets the lowest BM25 score "
        "of that question's list: an upper bound on its true BM25 score."
    )
    training = setup.get("training") or {}
    if training:
        ours = "; ".join(
            f"{m}: {t['epochs']} epoch(s), batch {t['batch_size']}"
            for m, t in sorted(training.items())
        )
        notes["training"] = (
            f"Training here: {ours}. The papers train 40 epochs (DPR and xMoCo: 100 on "
            "WebQuestions and CuratedTREC) with batch 128 on 8 GPUs."
            if scale.note
            else f"Training: {ours}."
        )
    multi = setup.get("multi_sets") or {}
    if len(multi) > 1:
        sets = "; ".join(f"{ts} = {' + '.join(ds)}" for ts, ds in sorted(multi.items()))
        notes["multi"] = (
            f"The Multi rows do not share one training set: each paper's Multi model trains on "
            f"that paper's Multi set, as the paper beside it did (column Train set): {sets}. "
            "DPR and xMoCo combine NQ, TriviaQA, WebQuestions and CuratedTREC; DCSR (its "
            "section 4.2) NQ, TriviaQA and SQuAD. Multi rows of different sets are not a "
            "like-for-like comparison."
        )
    validation = setup.get("validation") or {}
    held = {ts: v for ts, v in validation.items() if v != "dev"}
    if held:
        sets = ", ".join(f"{ts} ({v:g} of its examples)" for ts, v in sorted(held.items()))
        notes["validation"] = (
            f"No dev file for train set(s) {sets}: checkpoints are selected on that held-out "
            "fraction of the training examples, which the model does not train on. DPR trains "
            "on its whole training file and selects on its dev set."
        )
    elif validation:
        notes["validation"] = "Checkpoints are selected on DPR's dev biencoder files, as DPR."
    released = setup.get("released") or {}
    if released:
        where = "; ".join(
            f"{ts}: "
            + (
                f"{r['question_encoder']} and {r['ctx_encoder']} (Hugging Face)"
                if r["layout"] == "hf"
                else f"DPR's checkpoint file {r['source']} on {r['base']}"
            )
            for ts, r in sorted(released.items())
        )
        notes["released"] = (
            f"DPR's released encoders, evaluated without training ({where}): the paper's "
            "numbers beside them are DPR's for the model it released; the difference is "
            "ours (corpus, BM25, evaluation), not training."
        )
    zero_shot = setup.get("zero_shot") or []
    if zero_shot:
        rows = _listed(zero_shot, lambda z: f"{z['init']}, {z['settings']}")
        notes["zero_shot"] = (
            "Off-the-shelf encoders evaluated as they are, without fine-tuning (config "
            f"zero_shot), on the same corpus, questions and search as the other rows: {rows}."
        )
    external = setup.get("external") or []
    if external:
        rows = _listed(external, lambda e: e["file"])
        notes["external"] = (
            "Runs made elsewhere (config external_runs), imported onto this corpus's passages "
            "and scored with the same questions and answer matching as the other rows; their "
            f"retrievers are not this workflow's: {rows}."
        )
    notes["paper"] = (
        "No paper of this workflow (workflow/drpipe/papers) lists this row's method, so the row "
        "has no paper value: it is ours alone."
    )
    return notes


def _warm_start_negatives(m: int) -> str:
    if m == 1:
        return "the question's own paragraph alone, no negatives"
    return "negatives the article's other paragraphs"


def reader_notes(reader: dict[str, Any], scale: str) -> dict[str, str]:
    """Text of the Table 4 notes from the reader's config (``setup["reader"]``): ``mode``
    (shared | per_retriever | released), ``train_run``, ``init``, ``passages``, ``max_len``,
    ``epochs``, ``batch_size``, ``ks``, ``k_split``, ``k_per_row``, ``precision``, ``sample``."""
    mode = reader.get("mode", "shared")
    limits = (
        f"m = {reader.get('passages')} passages per question (1 positive, the rest negatives "
        f"from the retriever's top {reader.get('depth', 100)}), inputs cut at "
        f"{reader.get('max_len')} tokens, batch {reader.get('batch_size')}, "
        f"{reader.get('epochs')} epoch(s)" + f", from {reader.get('init')}"
    )
    ws = reader.get("warm_start")
    if ws:
        limits += (
            f", warm-started on reading comprehension over {ws['questions']} questions of "
            f"{ws['articles']} SQuAD train articles that the corpus does not hold (m = "
            f"{ws['passages']}, {_warm_start_negatives(int(ws['passages']))}, {ws['epochs']} "
            "epoch(s); a local-scale deviation: DPR's reader starts from BERT)"
        )
    dpr = (
        "DPR trains one BERT-base reader per retriever and training setting on that "
        "retriever's own top 100 (m = 24, 350 tokens, batch 16; 4 for WQ and TREC, whose "
        "Multi reader is the NQ reader fine-tuned)"
    )
    if mode == "released":
        text = (
            f"Every row is read by the released reader {reader.get('released')} without "
            "training, as AOpt's Table 4 read its rows with DPR's released reader. " + dpr + "."
        )
    elif mode == "per_retriever":
        text = f"One reader per retriever and training setting, as DPR: {limits}. {dpr}."
    else:
        text = (
            f"One reader shared by every row, trained on the {reader.get('train_run')} "
            f"results of the training questions ({limits}), to fit the scale's budget. {dpr}: "
            "a row here differs from another only in the passages its retriever hands the "
            "same reader."
        )
    notes = {"reader": text}
    split = reader.get("k_split")
    where = f"the {split} questions" + (
        " (training articles' questions the train split did not take)" if split == "heldout" else ""
    )
    if reader.get("k_per_row", True) or mode == "per_retriever":
        how = f"chosen per row among {reader.get('ks')} on {where}, never on test questions"
    else:
        how = (
            f"chosen once among {reader.get('ks')}, for the shared reader, on {where} read "
            f"over its {reader.get('train_run')} run (never on test questions), and used by "
            "every row"
        )
    notes["k"] = (
        f"k, the passages read per question, is {how}; DPR tunes k on its dev sets (up to "
        "100; 50 on NQ). The chosen k is the row's 'K' column."
    )
    notes["reader_precision"] = (
        f"The reader's scoring precision (reader.precision: {reader.get('precision')}; auto: "
        "bf16 where the hardware has fast bf16, fp32 otherwise, as encode.precision); the "
        "row's 'Reader precision' column says which ran. Paths can differ in the second "
        "decimal of EM; the papers read in fp32 (or fp16 on GPUs)."
    )
    if reader.get("sample"):
        notes["sample"] = (
            f"EM over a seeded sample of {reader['sample']} test questions (reader.sample; "
            f"k is chosen on a sample of as many {split} questions) to fit the scale's budget; "
            "the row's n says how many. Table 2's retrieval rows use every test question."
        )
    if not as_scale(scale).note and mode != "shared":
        notes["reader"] = notes["reader"].replace(" to fit the scale's budget", "")
    return notes
