"""benchmarks/precision_accuracy.py: paired top-k of precision paths of one trained model,
on small snapshot folders the test writes (the squad-scale figures are in README)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
RUN, QUESTIONS = "dpr/squad", "squad-test"


def _module():
    spec = importlib.util.spec_from_file_location(
        "precision_accuracy", REPO / "benchmarks" / "precision_accuracy.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _results(root: Path, precision: str, ranks: list[float], training: str = "t",
             backend: str | None = None, emulated: str | None = None) -> Path:  # fmt: skip
    """A results folder holding what the comparison reads, as the workflow writes it."""
    more: dict = {"precision_backend": backend} if backend else {}
    if emulated:
        more["environment"] = {"cpu": {"flags": ["avx2"], "emulated_kind": emulated}}
    (root / "metrics/dpr/squad").mkdir(parents=True)
    (root / "embeddings/dpr/squad").mkdir(parents=True)
    (root / "qvecs/dpr/squad").mkdir(parents=True)
    (root / "models/dpr").mkdir(parents=True)
    frame = pd.DataFrame({"qid": [f"q{i}" for i in range(len(ranks))], "first_hit_rank": ranks})
    frame.to_parquet(root / "metrics/dpr/squad/squad-test.per_question.parquet")
    (root / "metrics/dpr/squad/squad-test.json").write_text("{}")
    (root / "models/dpr/squad.report.json").write_text(json.dumps({"run": training}))
    for shard in range(2):
        rep = {
            "precision": precision,
            "seconds": 10.0,
            "n_encoded": 100 if precision == "fp32" else 250,
            **more,
        }
        (root / f"embeddings/dpr/squad/shard-{shard}.report.json").write_text(json.dumps(rep))
    (root / "qvecs/dpr/squad/squad-test.report.json").write_text(
        json.dumps({"precision": precision, "seconds": 1.0, **more})
    )
    return root


def test_snapshot_and_compare_pair_questions(tmp_path: Path, capsys) -> None:
    mod = _module()
    base = [1, 3, 25, None, 150, 2, 19, 99]
    # int8 loses q2 at top-20 and q6 at top-20 (19 -> 21); gains q3 at top-100.
    other = [1, 3, 30, 50, 150, 2, 21, 99]
    snaps = {}
    for label, ranks in (("fp32", base), ("int8", other)):
        results = _results(tmp_path / f"results-{label}", label, ranks)
        mod.snapshot(results, RUN, QUESTIONS, tmp_path / "snap" / label)
        snaps[label] = mod.read_snapshot(tmp_path / "snap" / label, label, RUN, QUESTIONS)
    out = mod.compare(snaps, RUN, QUESTIONS, resamples=200)
    assert out["n_questions"] == 8
    int8 = out["paths"]["int8"]
    assert out["paths"]["fp32"]["top20"]["top"] == 50.0  # q0, q1, q5, q6
    assert int8["top20"]["top"] == 37.5 and int8["top20"]["diff"] == -12.5
    assert (int8["top20"]["gained"], int8["top20"]["lost"]) == (0, 1)
    assert int8["top100"]["diff"] == 12.5 and int8["top100"]["gained"] == 1
    assert int8["speed_vs_baseline"] == 2.5
    text = mod.render(out)
    assert (
        text.splitlines()[-1] == "largest |top-20| / |top-100| change vs fp32: 12.50 / 12.50 (int8)"
    )


def test_compare_refuses_mislabelled_or_other_training(tmp_path: Path) -> None:
    mod = _module()
    _results(tmp_path / "a", "fp32", [1, 2])
    with pytest.raises(SystemExit, match="ran precision 'fp32', labelled 'bf16'"):
        mod.read_snapshot(tmp_path / "a", "bf16", RUN, QUESTIONS)
    _results(tmp_path / "b", "bf16", [1, 2], training="another")
    snaps = {
        "fp32": mod.read_snapshot(tmp_path / "a", "fp32", RUN, QUESTIONS),
        "bf16": mod.read_snapshot(tmp_path / "b", "bf16", RUN, QUESTIONS),
    }
    with pytest.raises(SystemExit, match="different training runs"):
        mod.compare(snaps, RUN, QUESTIONS, resamples=50)
    with pytest.raises(SystemExit, match="not found"):
        mod.snapshot(tmp_path / "missing", RUN, QUESTIONS, tmp_path / "snap")


def test_int8_with_7_bit_weights_is_its_own_label(tmp_path: Path) -> None:
    # 7-bit int8 (an x86 CPU without VNNI, or int8_weight_bits: 7) is labelled int8-7bit and
    # is not taken for 8-bit int8, nor 8-bit for it.
    mod = _module()
    seven = "onnxruntime 1.20.1, 7-bit weights (as configured; this CPU has VNNI)"
    _results(tmp_path / "a", "int8", [1, 2], backend=seven)
    _results(tmp_path / "b", "int8", [1, 2], backend="onnxruntime 1.20.1")
    assert mod.read_snapshot(tmp_path / "a", "int8-7bit", RUN, QUESTIONS)["n_passages"] == 500
    with pytest.raises(SystemExit, match="ran precision 'int8 .7-bit weights.', labelled 'int8'"):
        mod.read_snapshot(tmp_path / "a", "int8", RUN, QUESTIONS)
    with pytest.raises(SystemExit, match="ran precision 'int8', labelled 'int8-7bit'"):
        mod.read_snapshot(tmp_path / "b", "int8-7bit", RUN, QUESTIONS)


def test_an_emulated_cpu_kind_is_named_in_the_label(tmp_path: Path) -> None:
    # PATH@KIND: the path as above, run under benchmarks/emulate_cpu.py KIND; reports that
    # record an emulated kind must match it, and are not taken for a native run.
    mod = _module()
    seven = "onnxruntime 1.32.0, 7-bit weights (x86 without VNNI)"
    _results(tmp_path / "a", "int8", [1, 2], backend=seven, emulated="avx2")
    assert mod.read_snapshot(tmp_path / "a", "int8-7bit@avx2", RUN, QUESTIONS)["n_passages"] == 500
    with pytest.raises(
        SystemExit, match="ran as an emulated avx2 CPU, labelled 'int8-7bit@avx512'"
    ):
        mod.read_snapshot(tmp_path / "a", "int8-7bit@avx512", RUN, QUESTIONS)
    with pytest.raises(SystemExit, match="ran as an emulated avx2 CPU, labelled 'int8-7bit'"):
        mod.read_snapshot(tmp_path / "a", "int8-7bit", RUN, QUESTIONS)
