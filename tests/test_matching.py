"""Answer matching: DPR semantics on DPR's own sample, regex answers, and hand-made edge cases."""

from __future__ import annotations

import json
import unicodedata

import pytest
import regex

from drpipe.qa.datasets import read_curatedtrec_tsv, read_dpr_jsonl, read_squad
from drpipe.qa.matching import (
    AnswerMatcher,
    compile_answer_regex,
    has_answer,
    match_tokens,
    regex_compiles,
    tokenize,
    unescape_non_ascii,
)

_REFERENCE_TOKEN = regex.compile(r"([\p{L}\p{N}\p{M}]+)|([^\p{Z}\p{C}])")


def dpr_reference_has_answer(answers, text):
    """Independent oracle written from DPR's description: NFD, token lists, sliding window."""
    tok = _REFERENCE_TOKEN

    def words(s):
        return [m.group().lower() for m in tok.finditer(unicodedata.normalize("NFD", s))]

    text_words = words(text)
    for answer in answers:
        a = words(answer)
        for i in range(len(text_words) - len(a) + 1):
            if text_words[i : i + len(a)] == a:
                return True
    return False


@pytest.fixture(scope="module")
def dpr_sample(data_mirror):
    return json.loads((data_mirror / "dpr/biencoder-nq-dev.sample.json").read_text())


def test_dpr_sample_positives_contain_answer(dpr_sample):
    n = 0
    for rec in dpr_sample:
        for ctx in rec["positive_ctxs"]:
            assert has_answer(rec["answers"], ctx["text"], "string"), (
                rec["question"],
                ctx["title"],
            )
            n += 1
    assert n == 22


def test_dpr_sample_negatives_mostly_lack_answer(dpr_sample):
    # DPR chose hard negatives among BM25's top passages that lack the answer by its own
    # has_answer, so agreement with "no answer" should be near complete.
    agree = total = 0
    for rec in dpr_sample:
        for ctx in rec["hard_negative_ctxs"]:
            total += 1
            agree += not has_answer(rec["answers"], ctx["text"], "string")
    rate = agree / total
    print(f"\nDPR hard negatives without an answer by our matcher: {agree}/{total} = {rate:.4f}")
    assert total == 483 and rate >= 0.98
    random_hits = sum(
        has_answer(rec["answers"], ctx["text"])
        for rec in dpr_sample
        for ctx in rec["negative_ctxs"]
    )
    assert random_hits <= 5


def test_agrees_with_reference_on_real_pairs(dpr_sample, data_mirror):
    pairs = [
        (rec["answers"], ctx["text"])
        for rec in dpr_sample
        for key in ("positive_ctxs", "negative_ctxs", "hard_negative_ctxs")
        for ctx in rec[key]
    ]
    squad = read_squad(data_mirror / "squad/squad-dev-v1.1.reconstructed.json.gz", "squad", "dev")
    contexts = sorted({q["gold_context"] for q in squad})[:20]
    pairs += [(q["answers"], c) for q in squad[::100] for c in contexts]
    texts = {i: text for i, (_, text) in enumerate(pairs)}
    matcher = AnswerMatcher(texts)
    expected = [dpr_reference_has_answer(a, t) for a, t in pairs]
    assert [has_answer(a, t) for a, t in pairs] == expected
    assert [matcher.contains(a, "string", i) for i, (a, _) in enumerate(pairs)] == expected
    assert 0 < sum(expected) < len(expected)


@pytest.mark.parametrize(
    ("answer", "text", "expected"),
    [
        ("Denver Broncos", "the denver broncos won", True),  # case-insensitive
        ("Bron", "the Denver Broncos won", False),  # whole tokens only
        ("Broncos", "the Broncos' win", True),  # punctuation is its own token
        ("May 18 , 2018", "released May 18, 2018.", True),  # spacing around punctuation ignored
        ("U.S.", "in the U.S", False),  # the final "." is a token
        ("Jean-Paul", "Jean - Paul Sartre", True),
        ("Röntgen", "Wilhelm Ro\u0308ntgen", True),  # NFC answer, NFD passage
        ("Ro\u0308ntgen", "Wilhelm Röntgen", True),  # NFD answer, NFC passage
        ("Rontgen", "Wilhelm Röntgen", False),  # accents are kept, not stripped
        ("foo bar", "foo\u200bbar", True),  # zero-width space (Cf) separates, is no token
        ("foo bar", "foo\u00a0bar", True),  # no-break space is a separator
        ("ΟΔΟΣ", "η οδος", True),  # lower() gives word-final ς, as in the passage
        ("1987", "Eli (1987–2002)", True),
        ("", "anything", True),  # DPR: an answer without tokens matches everything
        ("Broncos", "", False),
    ],
)
def test_string_edge_cases(answer, text, expected):
    assert has_answer([answer], text, "string") is expected
    assert dpr_reference_has_answer([answer], text) is expected


def test_tokenizer():
    assert tokenize("Hello, world! It's 3.5%") == [
        "Hello",
        ",",
        "world",
        "!",
        "It",
        "'",
        "s",
        "3",
        ".",
        "5",
        "%",
    ]
    assert match_tokens("Ame\u0301lie") == ["ame\u0301lie"]
    assert match_tokens("Amélie") == ["ame\u0301lie"]  # NFD keeps the combining mark in the token


# CuratedTREC answers with a backslash before a non-ASCII letter that, after NFD, is a bad
# escape: DPR's regex_match cannot compile them, so they never match (qid -> escaped letter).
DPR_UNCOMPILABLE = {
    "test": {"10025": "ě", "231": "é", "1144": "ö"},
    "train": {"46": "ú", "147": "ō", "712": "é"},
}


def test_curatedtrec_regexes_compile_and_match(data_mirror):
    for split in ("test", "train"):
        questions = read_curatedtrec_tsv(
            data_mirror / f"curatedtrec/large2180-{split}.tsv", "curatedtrec", split
        )
        bad = {q["qid"] for q in questions for a in q["answers"] if not regex_compiles(a, "regex")}
        assert bad == set(DPR_UNCOMPILABLE[split])
        for q in questions:
            for a in q["answers"]:
                compile_answer_regex(a, repaired=True)  # the repaired reading compiles them all
                if q["qid"] in bad:
                    assert "\\" + DPR_UNCOMPILABLE[split][q["qid"]] in a
    test = read_curatedtrec_tsv(
        data_mirror / "curatedtrec/large2180-test.tsv", "curatedtrec", "test"
    )
    by_q = {q["question"]: q["answers"] for q in test}
    cases = [
        ("How tall is Mount McKinley?", "Denali rises to 20,320 feet above sea level.", True),
        ("How tall is Mount McKinley?", "Denali rises to 6,190 metres above sea level.", False),
        (
            "What is the most populated country in the world?",
            "the People's Republic of CHINA",
            True,
        ),
        ("What is the most populated country in the world?", "India has 1.4 billion people", False),
        (
            "what Arthur Miller play recounts his marriage to Marilyn Monroe?",
            "He wrote After the Fall in 1964.",
            True,
        ),
    ]
    for question, text, expected in cases:
        assert has_answer(by_q[question], text, "regex") is expected, question
    dpr = read_dpr_jsonl(data_mirror / "dpr/curatedtrec-test.qa.jsonl", "curatedtrec", "test")
    assert all(q["match"] == "regex" for q in dpr)


def dpr_reference_patterns(answers):
    """DPR's regex_match compiles each answer (NFD) or skips it: those that compile."""
    patterns = []
    for answer in answers:
        try:
            patterns.append(
                regex.compile(
                    unicodedata.normalize("NFD", answer),
                    flags=regex.IGNORECASE + regex.UNICODE + regex.MULTILINE,
                )
            )
        except BaseException:
            continue
    return patterns


def dpr_reference_regex_match(answers, text, patterns=None):
    """Oracle after DPR's has_answer/regex_match: NFD both, compile or return False, search.
    ``patterns``: the answers' dpr_reference_patterns, compiled once for many texts."""
    text = unicodedata.normalize("NFD", text)
    if patterns is None:
        patterns = dpr_reference_patterns(answers)
    return any(pattern.search(text) is not None for pattern in patterns)


def test_regex_mode_agrees_with_dpr_on_real_curatedtrec(data_mirror):
    test = read_dpr_jsonl(data_mirror / "dpr/curatedtrec-test.qa.jsonl", "curatedtrec", "test")
    texts = [q["question"] for q in test[:200]]  # real text with many of the answers in it
    texts += ["Mount Sněžka", "Marshal Philippe Pétain", "Sultan Kösen"]
    hits = 0
    m = AnswerMatcher(dict(enumerate(texts)))
    for q in test:
        # The oracle's patterns compiled once per question, not once per text (~3 s of CPU).
        patterns = dpr_reference_patterns(q["answers"])
        expected = [dpr_reference_regex_match(q["answers"], t, patterns) for t in texts]
        assert m.hits(q["answers"], "regex", range(len(texts))) == expected, q["qid"]
        hits += sum(expected)
    assert hits > 0


def test_regex_semantics():
    # Substring search, as DPR: "China" matches inside "Chinatown".
    assert has_answer(["China"], "Chinatown, San Francisco", "regex")
    assert has_answer([r"^\s*nine\s*$"], "eight\n nine \nten", "regex")  # MULTILINE
    assert has_answer(["Röntgen"], "Ro\u0308ntgen", "regex")  # NFD on both sides
    # DPR (default "regex"): escaped non-ASCII letters are used as given. After NFD "\ě" is
    # "\e" + caron, a bad escape: the pattern does not compile and matches nothing, as DPR's
    # regex_match returns False; "\ñ" is "\n" + tilde, a newline: it compiles, never matches.
    assert not regex_compiles(r"Sne[zž]ka|Sn\ě\žka", "regex")
    assert not has_answer([r"Sne[zž]ka|Sn\ě\žka"], "Mount Sněžka", "regex")
    assert not has_answer([r"the Ni\ña"], "sailed on the Niña", "regex")
    # The repaired reading (an option, not DPR) keeps their literal meaning after NFD.
    assert unescape_non_ascii(r"Sn\ě\žka|a\\ä\.") == r"Sněžka|a\\ä\."
    assert regex_compiles(r"Sne[zž]ka|Sn\ě\žka", "regex_repaired")
    assert has_answer([r"Sne[zž]ka|Sn\ě\žka"], "Mount Sněžka", "regex_repaired")
    assert has_answer([r"the Ni\ña"], "sailed on the Niña", "regex_repaired")
    assert not has_answer([r"the Ni\ña"], "sailed on the Nina", "regex_repaired")
    # A pattern that does not compile is no match (DPR), and does not hide the other answers.
    for mode in ("regex", "regex_repaired"):
        assert not has_answer(["(unclosed"], "text (unclosed", mode)
        assert has_answer(["(unclosed", "text"], "text", mode)
    with pytest.raises(ValueError, match=r"answer regex '\(unclosed' does not compile"):
        compile_answer_regex("(unclosed")
    with pytest.raises(ValueError, match="unknown match mode"):
        has_answer(["a"], "a", "exact")


def test_matcher_batch_forms_and_cache_bound():
    texts = {10: "nothing here", 11: "the Denver Broncos", 12: "Broncos again", 13: "no"}
    m = AnswerMatcher(texts, max_cache=2)
    keys = [10, 11, 12, 13]
    assert m.hits(["Denver Broncos", "again"], "string", keys) == [False, True, True, False]
    assert m.first_hit(["broncos"], "string", keys) == 2
    assert m.first_hit(["Broncos AGAIN"], "string", keys) == 3
    assert m.first_hit(["absent"], "string", keys) is None
    assert m.first_hit([r"Bron.os\b"], "regex", keys) == 2
    assert m.first_hit(["x"], "string", []) is None
    assert len(m._cache) <= 2
