"""data-synth arithmetic: every answer re-derived with Fraction, options honoured, bytes independent of the
worker count, atomic output and --resume (also after a real SIGTERM), the CLI."""

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest

import data_synth.arithmetic as arithmetic
from data_synth.arithmetic import main, write_arithmetic_dataset
from tests.data_synth.signals import logged_lines, terminate_when

QUIET = dict(progress=False)
CANONICAL = re.compile(r"^-?(0|[1-9]\d*)(\.\d+)?$")  # no exponent, no leading zeros, no "+"


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def records(root: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (root / split).with_suffix(".jsonl").read_text().splitlines()]


def places_of(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def integer_digits(text: str) -> int:
    return len(text.lstrip("-").split(".")[0])


def derive(rec: dict, div_places) -> Fraction:
    """The exact answer from the operands, computed independently with Fraction."""
    a, b = (Fraction(x) for x in rec["operands"])
    op = rec["operation"]
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if div_places is None:
        return a / b
    scale = 10 ** div_places
    return Fraction(math.floor(a / b * scale + Fraction(1, 2)), scale)  # half up (a, b >= 0)


def check(root: Path, splits, *, digits, places, div_places, negatives, operations) -> dict:
    """Checks every record of a dataset; returns counts of what was seen."""
    seen = {"ops": set(), "negative": 0, "digits": set(), "ids": set(), "rounded_up": 0}
    for split in splits:
        for rec in records(root, split):
            assert list(rec) == ["id", "question", "answer", "operation", "operands", "split"]
            assert rec["split"] == split and rec["id"] not in seen["ids"]
            seen["ids"].add(rec["id"])
            op, (a, b), answer = rec["operation"], rec["operands"], rec["answer"]
            assert op in operations
            seen["ops"].add(op)
            for text, (lo, hi) in ((a, digits[0]), (b, digits[1])):
                assert CANONICAL.match(text) and places_of(text) == places and not text.startswith("-")
                if not (op == "div" and div_places is None and text == a):  # exact dividends follow b * q
                    assert lo <= integer_digits(text) <= hi, rec
                seen["digits"].add(integer_digits(text))
            assert CANONICAL.match(answer) and answer not in ("-0",) and not re.match(r"^-0(\.0+)?$", answer), rec
            assert Fraction(answer) == derive(rec, div_places), rec
            want_places = {"add": places, "sub": places, "mul": 2 * places}.get(op, div_places or 0)
            assert places_of(answer) == want_places, rec
            symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[op]
            assert rec["question"].startswith(f"What is {a} {symbol} {b}") and rec["question"].endswith("?")
            if op == "div":
                assert Fraction(b) != 0
                if div_places is None:
                    assert Fraction(answer).denominator == 1 and Fraction(answer) >= 1
                    assert integer_digits(a) <= digits[0][1]
                else:
                    assert "rounded to" in rec["question"]
                    seen["rounded_up"] += Fraction(answer) > Fraction(a) / Fraction(b)
            if Fraction(answer) < 0:
                assert op == "sub" and negatives
                seen["negative"] += 1
    return seen


@pytest.mark.parametrize("opts", [
    dict(),
    dict(places=2, negatives=True),
    dict(digits=((2, 4), (1, 2)), div_places=3, negatives=True),
    dict(digits=3, places=1, operations=("mul", "div"), div_places=0),
    dict(digits=((1, 1), (1, 1)), operations=("div",)),
])
def test_every_answer_rederived_and_options_honoured(tmp_path, opts):
    settings = dict(digits=((1, 3), (1, 3)), places=0, div_places=None, negatives=False,
                    operations=("add", "sub", "mul", "div")) | opts
    out = write_arithmetic_dataset(tmp_path / "ds", 1500, seed=5, splits="train=0.8,test=0.2", **settings, **QUIET)
    digits = settings["digits"]
    digits = [[digits] * 2] * 2 if isinstance(digits, int) else [list(d) for d in digits]
    seen = check(out, ("train", "test"), **(settings | {"digits": digits}))
    assert len(records(out, "train")) == 1200 and len(records(out, "test")) == 300
    assert seen["ops"] == set(settings["operations"])
    assert seen["digits"] >= {lo for lo, _ in digits} | {hi for _, hi in digits}
    if settings["negatives"] and "sub" in settings["operations"]:
        assert seen["negative"] > 0
    if settings["div_places"] is not None:
        assert seen["rounded_up"] > 0  # half-up rounding does round up, not only truncate
    saved = json.loads((out / "generation.json").read_text())
    assert saved["num"] == 1500 and saved["seed"] == 5 and saved["places"] == settings["places"]
    assert saved["div_places"] == settings["div_places"] and saved["digits"] == digits
    assert saved["operations"] == list(settings["operations"]) and saved["negatives"] == settings["negatives"]
    assert saved["splits"] == {"train": 0.8, "test": 0.2}


def test_fixed_point_text():
    assert [arithmetic.fixed(n, p) for n, p in [(5, 2), (-1230, 2), (0, 3), (7, 0), (-7, 0), (100, 1)]] == [
        "0.05", "-12.30", "0.000", "7", "-7", "10.0"]


def test_long_divisors_are_fine_when_quotients_are_rounded(tmp_path):
    out = write_arithmetic_dataset(tmp_path / "r", 200, digits=((1, 2), (3, 3)), div_places=2,
                                   operations=("div",), splits={"train": 1.0}, **QUIET)
    check(out, ("train",), digits=[[1, 2], [3, 3]], places=0, div_places=2, negatives=False, operations=("div",))


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["--num", "50", "--seed", "2", "--out", str(out), "--digits", "2-3,1", "--places", "1",
                 "--operations", "add,div", "--div-places", "2", "--splits", "train=0.5,dev=0.5",
                 "--no-progress"]) == 0
    assert "wrote 50 arithmetic problems" in capsys.readouterr().out
    seen = check(out, ("train", "dev"), digits=[[2, 3], [1, 1]], places=1, div_places=2, negatives=False,
                 operations=("add", "div"))
    assert seen["ops"] == {"add", "div"}
    assert main(["--num", "50", "--seed", "2", "--out", str(out), "--no-progress"]) == 2
    assert "already holds a data-synth dataset" in capsys.readouterr().err
    assert main(["--num", "5", "--out", str(tmp_path / "bad"), "--operations", "mod", "--no-progress"]) == 2
    assert "operations" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--num", "5", "--out", str(tmp_path / "bad"), "--digits", "a-b"])


@pytest.mark.slow
def test_sigterm_with_two_workers_ends_cleanly_and_resumes_to_the_same_bytes(tmp_path, monkeypatch):
    num = 100_000
    args = ["arithmetic", "--num", str(num), "--seed", "8", "--out", "ds", "--workers", "2", "--no-progress"]
    status, err = terminate_when(args, tmp_path, lambda: logged_lines(tmp_path / ".ds.partial" / "progress.jsonl") > 0)
    assert status == 143 and "Traceback" not in err and "leaked" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        rf"data-synth arithmetic: interrupted with \d+ of {num} problems done; the partial dataset is in "
        r"\.ds\.partial; rerun with --resume to finish it", lines[0]), err
    assert not (tmp_path / "ds").exists()
    monkeypatch.chdir(tmp_path)
    assert main(args[1:] + ["--resume"]) == 0
    assert tree(tmp_path / "ds") == tree(write_arithmetic_dataset(tmp_path / "ref", num, seed=8, **QUIET))


def test_read_arithmetic_loads_it_unchanged(tmp_path):
    from vlm_smmd.data import read_arithmetic

    out = write_arithmetic_dataset(tmp_path / "ds", 400, seed=1, places=2, negatives=True, div_places=1, **QUIET)
    for split in ("train", "test"):
        samples = read_arithmetic(out, split)
        recs = records(out, split)
        assert len(samples) == len(recs) and samples.skipped == 0
        assert [(s.id, s.question, s.answer) for s in samples] == [(r["id"], r["question"], r["answer"]) for r in recs]
        assert samples[0].image is None and samples[0].meta["operands"] == recs[0]["operands"]
    assert any(r["answer"].startswith("-") for r in records(out, "train"))


# ------------------------------------------------------------------------------ research options

RESEARCH = dict(operations=("add", "sub", "mul"), digits=(2, 3))


def problem_key(rec: dict) -> tuple:
    """A problem as the test sees it: a + b and b + a (a * b and b * a) are one problem."""
    a, b = (int(x) for x in rec["operands"])
    return (rec["operation"], *sorted((a, b))) if rec["operation"] in ("add", "mul") else (rec["operation"], a, b)


def places_and_digits(answers) -> set[tuple[int, str]]:
    """(power of ten, digit) of every digit of whole-number answers, read right to left."""
    return {(k, d) for text in answers for k, d in enumerate(reversed(text.lstrip("-")))}


def brute_force_answers(operations, digits, negatives) -> set[int]:
    """Every answer of every integer problem, by trying every pair of operands (slow, independent)."""
    (a_lo, a_hi), (b_lo, b_hi) = ((0 if lo == 1 else 10 ** (lo - 1), 10 ** hi - 1) for lo, hi in digits)
    found = set()
    for a in range(a_lo, a_hi + 1):
        for b in range(b_lo, b_hi + 1):
            for op in operations:
                if op == "add":
                    found.add(a + b)
                elif op == "sub":
                    found.add(a - b if negatives else abs(a - b))
                elif op == "mul":
                    found.add(a * b)
                elif b and a % b == 0 and a // b >= 1:  # exact division: a dividend that b divides
                    found.add(a // b)
    return found


@pytest.mark.parametrize("operations, digits, negatives", [
    (("add", "sub", "mul", "div"), ((1, 2), (1, 1)), False),
    (("sub", "div"), ((2, 2), (1, 2)), True),
    (("mul",), ((1, 2), (2, 2)), False),
    (("add", "sub"), ((1, 1), (2, 3)), False),
])
def test_possible_answers_match_brute_force(operations, digits, negatives):
    assert arithmetic.possible_answers(operations, digits, negatives) == sorted(
        brute_force_answers(operations, digits, negatives))


def test_distinct_splits_share_no_problem(tmp_path):
    # one-digit addition has 55 problems: drawn freely, test repeats training problems
    free = write_arithmetic_dataset(tmp_path / "free", 600, seed=2, operations=("add",), digits=1, **QUIET)
    shared = {problem_key(r) for r in records(free, "train")} & {problem_key(r) for r in records(free, "test")}
    assert len(shared) > 5
    out = write_arithmetic_dataset(tmp_path / "distinct", 600, seed=2, operations=("add",), digits=1,
                                   distinct=True, **QUIET)
    train, test = ({problem_key(r) for r in records(out, s)} for s in ("train", "test"))
    assert not train & test and len(records(out, "test")) == 60
    assert len(train | test) == 55  # every problem still drawn, each in one split only

    out = write_arithmetic_dataset(tmp_path / "research", 4000, seed=0, distinct=True, **RESEARCH, **QUIET)
    seen = check(out, ("train", "test"), digits=[[2, 3], [2, 3]], places=0, div_places=None, negatives=False,
                 operations=RESEARCH["operations"])
    assert seen["ops"] == set(RESEARCH["operations"])
    train, test = ({problem_key(r) for r in records(out, s)} for s in ("train", "test"))
    assert not train & test
    assert {r["question"] for r in records(out, "train")}.isdisjoint(r["question"] for r in records(out, "test"))
    assert {r["operation"] for r in records(out, "test")} == set(RESEARCH["operations"])


@pytest.mark.slow
def test_unseen_answers_only_in_test_unseen_and_every_digit_place_in_training(tmp_path):
    out = write_arithmetic_dataset(tmp_path / "u", 20000, seed=0, distinct=True, unseen_fraction=0.2,
                                   unseen_num=1000, **RESEARCH, **QUIET)
    assert {p.name for p in out.iterdir()} == {"generation.json", "train.jsonl", "test.jsonl", "test_unseen.jsonl"}
    held = {str(v) for v in arithmetic.unseen_answers(RESEARCH["operations"], ((2, 3), (2, 3)), False, 0.2, 0)}
    possible = {str(v) for v in brute_force_answers(RESEARCH["operations"], ((2, 3), (2, 3)), False)}
    assert held < possible and abs(len(held) - 0.2 * len(possible)) <= 1
    train, test, unseen = (records(out, s) for s in ("train", "test", "test_unseen"))
    assert (len(train), len(test), len(unseen)) == (18000, 2000, 1000)
    check(out, ("train", "test", "test_unseen"), digits=[[2, 3], [2, 3]], places=0, div_places=None,
          negatives=False, operations=RESEARCH["operations"])
    assert all(r["answer"] in held for r in unseen)
    assert not any(r["answer"] in held for r in train + test)
    assert not {r["answer"] for r in unseen} & {r["answer"] for r in train}
    assert {r["operation"] for r in unseen} == set(RESEARCH["operations"])
    assert [r["id"] for r in unseen][:2] == ["test_unseen-00020000", "test_unseen-00020001"]
    # every digit still occurs at every place among the answers actually written to train
    assert places_and_digits(r["answer"] for r in train) == places_and_digits(possible)
    saved = json.loads((out / "generation.json").read_text())
    assert saved["distinct"] is True
    assert saved["unseen"] == {"fraction": 0.2, "seed": 0, "num": 1000, "answers": len(held)}
    other = arithmetic.unseen_answers(RESEARCH["operations"], ((2, 3), (2, 3)), False, 0.2, 1)
    assert {str(v) for v in other} != held  # the unseen seed picks the answers


def test_research_options_same_bytes_whatever_the_worker_count_and_after_resume(tmp_path, monkeypatch):
    opts = dict(seed=4, distinct=True, unseen_fraction=0.2, **RESEARCH, **QUIET)
    a = write_arithmetic_dataset(tmp_path / "a", 3000, workers=1, **opts)
    b = write_arithmetic_dataset(tmp_path / "b", 3000, workers=2, **opts)
    assert tree(a) == tree(b) and "test_unseen.jsonl" in tree(a)

    real = arithmetic._Plan.render
    calls = []

    def failing(plan, index, root):
        if len(calls) == 1700:
            raise KeyboardInterrupt
        calls.append(index)
        return real(plan, index, root)

    monkeypatch.setattr(arithmetic._Plan, "render", failing)
    with pytest.raises(KeyboardInterrupt):
        write_arithmetic_dataset(tmp_path / "c", 3000, **opts)
    with pytest.raises(ValueError, match="unseen"):  # other held-out answers: a resume is refused
        write_arithmetic_dataset(tmp_path / "c", 3000, resume=True, **(opts | {"unseen_seed": 1}))
    calls.clear()
    monkeypatch.setattr(arithmetic._Plan, "render", lambda plan, i, root: calls.append(i) or real(plan, i, root))
    write_arithmetic_dataset(tmp_path / "c", 3000, resume=True, **opts)
    assert sorted(calls) == list(range(1700, 3300))
    assert tree(tmp_path / "c") == tree(a)


def test_default_problems_unchanged_by_the_research_options(tmp_path):
    # without the options every problem is its stream's first draw; with them, only misfits are redrawn
    plain = write_arithmetic_dataset(tmp_path / "plain", 2000, seed=9, **RESEARCH, **QUIET)
    distinct = write_arithmetic_dataset(tmp_path / "distinct", 2000, seed=9, distinct=True, **RESEARCH, **QUIET)
    same = sum(x == y for x, y in zip(records(plain, "train"), records(distinct, "train")))
    assert 0.85 * 1800 < same < 1800  # train owns about 90% of the problems: the rest are redrawn


@pytest.mark.parametrize("kwargs, match", [
    (dict(unseen_fraction=0.2, places=1), "places 0"),
    (dict(unseen_fraction=0.2, div_places=2), "exact division"),
    (dict(unseen_fraction=0.2, splits="train=0.8,test_unseen=0.2"), "written by unseen_fraction"),
    (dict(unseen_num=5), "unseen_num needs unseen_fraction"),
    (dict(unseen_fraction=1.0), r"\[0, 1\)"),
    (dict(unseen_fraction=0.2, unseen_num=0), "unseen_num"),
    (dict(unseen_fraction=0.2, digits=4, operations=("mul",)), "use fewer digits"),
    (dict(unseen_fraction=0.9, digits=1, operations=("add",)), "every digit still seen"),
    (dict(distinct="yes"), "distinct"),
])
def test_bad_research_arguments_raise_and_write_nothing(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        write_arithmetic_dataset(tmp_path / "x", 50, **kwargs, **QUIET)
    assert not list(tmp_path.iterdir())


def test_a_split_no_problem_fits_fails_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(arithmetic, "MAX_DRAWS", 200)
    monkeypatch.setattr(arithmetic, "owner_split", lambda kind, seed, key, splits: "train")  # test owns nothing
    with pytest.raises(ValueError, match="split 'test': no problem fits it in 200 draws"):
        write_arithmetic_dataset(tmp_path / "x", 50, distinct=True, **QUIET)
    assert not list(tmp_path.iterdir())


def test_owner_split_follows_the_fractions():
    splits = {"train": 0.7, "dev": 0.1, "test": 0.2}
    owners = [arithmetic.owner_split("arithmetic", 3, f"add:{k}", splits) for k in range(20000)]
    for name, fraction in splits.items():
        assert abs(owners.count(name) / 20000 - fraction) < 0.015
    assert owners != [arithmetic.owner_split("arithmetic", 4, f"add:{k}", splits) for k in range(20000)]


def test_cli_research_options(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["--num", "300", "--out", str(out), "--operations", "add,sub", "--digits", "2", "--distinct",
                 "--unseen-fraction", "0.25", "--unseen-seed", "3", "--unseen-num", "40", "--no-progress"]) == 0
    assert "wrote 300 arithmetic problems and 40 with held-out answers in test_unseen" in capsys.readouterr().out
    held = {str(v) for v in arithmetic.unseen_answers(("add", "sub"), ((2, 2), (2, 2)), False, 0.25, 3)}
    assert all(r["answer"] in held for r in records(out, "test_unseen")) and len(records(out, "test_unseen")) == 40
    assert not any(r["answer"] in held for r in records(out, "train") + records(out, "test"))
    assert main(["--num", "30", "--out", str(tmp_path / "bad"), "--unseen-fraction", "1.5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unseen_fraction must be a number in [0, 1)" in err
    assert not (tmp_path / "bad").exists()


def test_small_answer_spaces_keep_every_digit_place_in_training(tmp_path):
    # one-digit addition answers 0..18: only 9 has a 9 in the units, only 10..18 a tens digit; a hold-out
    # that ignored digit places would take 9 (or all of 10..18) out for some of these seeds
    possible = {str(v) for v in range(19)}
    for seed in range(10):
        out = write_arithmetic_dataset(tmp_path / str(seed), 2000, seed=seed, operations=("add",), digits=1,
                                       unseen_fraction=0.3, unseen_seed=seed, **QUIET)
        held = {str(v) for v in arithmetic.unseen_answers(("add",), ((1, 1), (1, 1)), False, 0.3, seed)}
        train = {r["answer"] for r in records(out, "train")}
        assert len(held) == round(0.3 * 19) and {r["answer"] for r in records(out, "test_unseen")} <= held
        assert train == possible - held  # 1,800 problems: every answer left is drawn
        assert places_and_digits(train) == places_and_digits(possible)
