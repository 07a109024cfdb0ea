"""data-synth word-problems: every answer re-derived from the question's numbers and the recorded equation,
splits that share no problem, held-out templates only in test_unseen, bytes independent of the worker
count, atomic output and --resume, the CLI."""

import json
import re
import string
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

import data_synth.word_problems as wp
from data_synth.word_problems import TEMPLATES, main, unseen_templates, write_word_problem_dataset

QUIET = dict(progress=False)
SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
FIELDS = ["id", "question", "answer", "equation", "operands", "distractors", "template", "operations", "split"]


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def records(root: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (root / f"{split}.jsonl").read_text().splitlines()]


def exact_value(equation: str) -> Fraction:
    """The equation's value with every number an exact Fraction, by Python's own parser and precedence."""
    assert re.fullmatch(r"[\d\s+\-*/()]+", equation), equation
    return eval(re.sub(r"\d+", lambda m: f"Fraction({m[0]})", equation), {"Fraction": Fraction})


def check_record(rec: dict, split: str) -> None:
    """One problem re-derived from its own text: the question's numbers are the operands and distractors,
    the equation uses exactly the operands, and its exact value is the answer."""
    assert list(rec) == FIELDS and rec["split"] == split and rec["id"].startswith(f"{split}-")
    question = rec["question"]
    assert question.endswith("?") and "{" not in question and "}" not in question
    assert Counter(re.findall(r"\d+", question)) == Counter(rec["operands"] + rec["distractors"])
    assert re.findall(r"\d+", rec["equation"]) == rec["operands"]
    value = exact_value(rec["equation"])
    assert value.denominator == 1 and value >= 1 and rec["answer"] == str(value), rec
    assert all(int(n) >= 2 for n in rec["operands"] + rec["distractors"])
    ops = rec["operations"]
    assert 1 <= len(ops) <= 2 and Counter(SYMBOL[op] for op in ops) == Counter(re.findall(r"[-+*/]", rec["equation"]))
    assert len(rec["distractors"]) <= 1


def test_templates_are_well_formed():
    assert len(TEMPLATES) >= 12 and len({t.id for t in TEMPLATES}) == len(TEMPLATES)
    for t in TEMPLATES:
        fields = {f for s in t.sentences for _, f, _, _ in string.Formatter().parse(s) if f}
        letters = set(re.findall(r"\b[a-z]\b", t.equation))
        assert letters <= set(t.numbers) and fields & set(t.numbers) == letters, t.id  # helpers never shown
        assert fields - letters <= {"A", "B", "item", "items", "box", "boxes", "money", "distance", "vehicle",
                                    "baked"}, t.id
        assert t.sentences[-1].endswith("?") and all(not s.endswith("?") for s in t.sentences[:-1])
        assert 1 <= len(t.operations) <= 2
    assert {op for t in TEMPLATES for op in t.operations} == {"add", "sub", "mul", "div"}
    assert any(len(t.operations) == 2 for t in TEMPLATES) and any(len(t.operations) == 1 for t in TEMPLATES)


def test_every_answer_rederived_and_held_out_templates_only_in_test_unseen(tmp_path):
    out = write_word_problem_dataset(tmp_path / "wp", 6000, seed=1, distractor_rate=0.5, unseen_fraction=0.25,
                                     unseen_num=800, **QUIET)
    assert {p.name for p in out.iterdir()} == {"generation.json", "train.jsonl", "test.jsonl", "test_unseen.jsonl"}
    held = set(unseen_templates(0.25, 0))
    saved = json.loads((out / "generation.json").read_text())
    assert saved["unseen"] == {"fraction": 0.25, "seed": 0, "num": 800, "templates": sorted(
        held, key=[t.id for t in TEMPLATES].index)}
    splits = {s: records(out, s) for s in ("train", "test", "test_unseen")}
    assert [len(r) for r in splits.values()] == [5400, 600, 800]
    for split, recs in splits.items():
        for rec in recs:
            check_record(rec, split)
    seen = {r["template"] for r in splits["train"]}
    assert seen == {t.id for t in TEMPLATES} - held  # every training template is used, no held-out one
    assert {r["template"] for r in splits["test"]} <= seen
    assert {r["template"] for r in splits["test_unseen"]} == held
    assert {op for r in splits["train"] for op in r["operations"]} == {"add", "sub", "mul", "div"}
    with_distractor = sum(bool(r["distractors"]) for r in splits["train"]) / len(splits["train"])
    assert 0.45 < with_distractor < 0.55
    # the distractor sentence (the one whose only number is the distractor) stands anywhere before the question
    places = Counter()
    for r in splits["train"]:
        sentences = re.split(r"(?<=[.?]) ", r["question"])
        found = [i for i, s in enumerate(sentences) if r["distractors"] and re.findall(r"\d+", s) == r["distractors"]]
        if len(found) == 1:
            places["first" if found[0] == 0 else "last" if found[0] == len(sentences) - 1 else "middle"] += 1
    assert places["first"] > 100 and places["middle"] > 100 and places["last"] == 0


def test_splits_share_no_problem(tmp_path):
    out = write_word_problem_dataset(tmp_path / "wp", 8000, seed=2, **QUIET)
    train, test = records(out, "train"), records(out, "test")

    def key(r):
        return r["template"], tuple(r["operands"])

    assert not {key(r) for r in train} & {key(r) for r in test}
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    # the check has teeth: "share" has 11 x 14 problems and train holds most of them, so test problems drawn
    # independently of train would repeat some
    share = {key(r) for r in train if r["template"] == "share"}
    assert len(share) > 0.75 * 11 * 14 * 0.9 and sum(r["template"] == "share" for r in test) > 20


def test_unseen_templates_keep_every_operation_in_training():
    for seed in range(20):
        held = unseen_templates(0.3, seed)
        assert len(held) == round(0.3 * len(TEMPLATES))
        left = [t for t in TEMPLATES if t.id not in held]
        assert {op for t in left for op in t.operations} == {"add", "sub", "mul", "div"}
        assert held == unseen_templates(0.3, seed)
    assert len({tuple(unseen_templates(0.3, seed)) for seed in range(20)}) > 10


def test_operations_keep_only_their_templates_and_hold_out_among_them(tmp_path):
    add_sub = {t.id for t in TEMPLATES if set(t.operations) <= {"add", "sub"}}
    assert 6 <= len(add_sub) < len(TEMPLATES)
    out = write_word_problem_dataset(tmp_path / "wp", 3000, seed=1, operations=["sub", "add"], unseen_fraction=0.25,
                                     unseen_num=300, **QUIET)
    saved = json.loads((out / "generation.json").read_text())
    assert saved["operations"] == ["add", "sub"]  # canonical order: the same data whatever order was asked
    held = set(unseen_templates(0.25, 0, ["add", "sub"]))
    assert saved["unseen"]["templates"] == sorted(held, key=[t.id for t in TEMPLATES].index)
    assert held < add_sub and len(held) == round(0.25 * len(add_sub))
    splits = {s: records(out, s) for s in ("train", "test", "test_unseen")}
    for split, recs in splits.items():
        for rec in recs:
            check_record(rec, split)
            assert set(rec["operations"]) <= {"add", "sub"}
    assert {r["template"] for r in splits["train"]} == add_sub - held
    assert {r["template"] for r in splits["test_unseen"]} == held
    assert {op for r in splits["train"] for op in r["operations"]} == {"add", "sub"}
    same = write_word_problem_dataset(tmp_path / "again", 3000, seed=1, operations=["add", "sub"],
                                      unseen_fraction=0.25, unseen_num=300, **QUIET)
    assert tree(same) == tree(out)
    # without the option every template is in use and generation.json is as before the option existed
    everything = write_word_problem_dataset(tmp_path / "all", 200, seed=1, **QUIET)
    assert "operations" not in json.loads((everything / "generation.json").read_text())


def test_a_split_no_problem_fits_fails_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(wp, "MAX_DRAWS", 200)
    monkeypatch.setattr(wp, "owner_split", lambda kind, seed, key, splits: "train")  # test owns nothing
    with pytest.raises(ValueError, match="split 'test': no problem fits it in 200 draws"):
        write_word_problem_dataset(tmp_path / "x", 50, **QUIET)
    assert not list(tmp_path.iterdir())


def test_steps_of_an_equation():
    assert wp.steps("(a + b) / c", {"a": 2, "b": 4, "c": 3}) == [("add", 6), ("div", 2)]
    assert wp.steps("a - b * 2", {"a": 1, "b": 3}) == [("mul", 6), ("sub", -5)]
    assert wp.steps("a / (b - c)", {"a": 1, "b": 2, "c": 2}) == [("sub", 0), ("div", None)]
    with pytest.raises(ValueError, match="only"):
        wp.steps("a ** 2", {"a": 3})


def test_cli(tmp_path, monkeypatch, capsys):
    from data_synth.cli import main as data_synth

    monkeypatch.chdir(tmp_path)
    assert data_synth(["word-problems", "--num", "200", "--seed", "5", "--out", "ds", "--unseen-fraction", "0.2",
                       "--unseen-num", "30", "--distractor-rate", "0", "--splits", "train=0.5,dev=0.5",
                       "--no-progress"]) == 0
    assert "wrote 200 word problems and 30 of held-out templates in test_unseen" in capsys.readouterr().out
    for split in ("train", "dev", "test_unseen"):
        for rec in records(Path("ds"), split):
            check_record(rec, split)
            assert rec["distractors"] == []
    assert main(["--num", "200", "--out", "ds", "--no-progress"]) == 2
    assert "already holds a data-synth dataset" in capsys.readouterr().err
    for argv, message in ((["--unseen-fraction", "1.5"], "unseen_fraction must be a number in [0, 1)"),
                          (["--distractor-rate", "nan"], "distractor_rate must be a number in [0, 1]"),
                          (["--operations", "add,mod"], "operations must be distinct names from add, sub, mul, div")):
        assert main(["--num", "20", "--out", "bad", "--no-progress", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("data-synth word-problems: ") and message in err
    with pytest.raises(SystemExit) as e:
        main(["--num", "0", "--out", "bad"])
    assert e.value.code == 2
    assert not Path("bad").exists() and not list(Path().glob(".bad*"))


def test_read_word_problems_loads_it_unchanged(tmp_path):
    from vlm_smmd.data import read_word_problems

    out = write_word_problem_dataset(tmp_path / "ds", 300, seed=1, unseen_fraction=0.2, **QUIET)
    for split in ("train", "test", "test_unseen"):
        samples = read_word_problems(out, split)
        recs = records(out, split)
        assert len(samples) == len(recs) and samples.skipped == 0
        assert [(s.id, s.question, s.answer) for s in samples] == [(r["id"], r["question"], r["answer"]) for r in recs]
        for s, r in zip(samples, recs):
            assert s.image is None and s.meta["template"] == r["template"] and s.meta["split"] == split
            assert s.meta["operations"] == r["operations"] and s.meta["final_answer"] == r["answer"]
            assert s.meta["distractor"] == bool(r["distractors"]) and s.meta["steps"] == len(r["operations"])


def test_both_generators_read_operation_names_alike(tmp_path):
    """One check for arithmetic and word problems: a bare name is that one operation, a repeat or an unknown
    name is an error, and the command line ignores blanks around names."""
    import data_synth.arithmetic as arith

    assert wp.templates_of("add") == wp.templates_of(["add"])
    assert wp.templates_of("add") and all(set(t.operations) == {"add"} for t in wp.templates_of("add"))
    for bad in (["add", "add"], ["add", "mod"], [], 3):
        with pytest.raises(ValueError, match="operations must be distinct names from add, sub, mul, div"):
            wp.templates_of(bad)
        with pytest.raises(ValueError, match="operations must be distinct names from add, sub, mul, div"):
            arith.write_arithmetic_dataset(tmp_path / "a", 10, operations=bad)
    assert wp.parse_operations(" add , sub,") == ["add", "sub"]
