"""The shared dataset machinery: held-out value sets (against a brute-force check), digit places, item
seeds, what a failure that is not an interrupt says, and the size and count limits that every writer
checks before any work (a usage error, exit 2, one line, nothing left behind)."""

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from data_synth import dataset
from data_synth.arithmetic import main as arithmetic_main
from data_synth.charts import main as charts_main
from data_synth.cli import main as data_synth
from data_synth.dataset import digit_places, item_seed, pick_unseen


def places_of(text):
    """(power of ten, digit) pairs, computed by padding to a common width (independent of digit_places)."""
    whole, _, frac = text.partition(".")
    padded = whole.rjust(12, "x") + frac.ljust(6, "x")
    return {(11 - k, c) for k, c in enumerate(padded[:12]) if c != "x"} | \
        {(-1 - k, c) for k, c in enumerate(padded[12:]) if c != "x"}


@pytest.mark.parametrize("text", ["0", "7", "47", "100", "47.3", "0.05", "123.45", "9.0"])
def test_digit_places(text):
    assert digit_places(text) == places_of(text)


def test_digit_places_by_example():
    assert digit_places("47.3") == {(1, "4"), (0, "7"), (-1, "3")}
    assert digit_places("5") == {(0, "5")}


@pytest.mark.parametrize("count, places, fraction, seed", [(100, 0, 0.2, 0), (100, 0, 0.2, 7), (1000, 1, 0.2, 3),
                                                           (1000, 0, 0.5, 1), (200, 2, 0.3, 2)])
def test_held_out_values_keep_every_digit_at_every_place(count, places, fraction, seed):
    texts = [f"{u // 10 ** places}.{u % 10 ** places:0{places}d}" if places else str(u) for u in range(count)]
    held = pick_unseen(texts, digit_places, fraction, seed)
    assert len(held) == round(fraction * count) and len(set(held)) == len(held)
    assert held == [t for t in texts if t in set(held)]  # in the order given
    left = [t for t in texts if t not in set(held)]
    everywhere = set().union(*(places_of(t) for t in texts))
    assert set().union(*(places_of(t) for t in left)) == everywhere
    assert pick_unseen(texts, digit_places, fraction, seed) == held  # a pure function
    assert pick_unseen(texts, digit_places, fraction, seed + 1) != held


def test_held_out_values_are_spread_over_the_seeds():
    """Over many seeds every value is held out some time, about as often as the fraction says."""
    texts = [str(u) for u in range(100)]
    counts = Counter(v for seed in range(300) for v in pick_unseen(texts, digit_places, 0.2, seed))
    assert set(counts) == set(texts)
    assert 0.1 < min(counts.values()) / 300 and max(counts.values()) / 300 < 0.35


def test_held_out_values_refused_when_the_features_forbid_them():
    with pytest.raises(ValueError, match="only 0 of 3 values"):
        pick_unseen(["1", "2", "3"], digit_places, 0.4, 0)  # each digit occurs once: none can go
    with pytest.raises(ValueError, match="unseen_fraction"):
        pick_unseen(["1", "2"], digit_places, 1.0, 0)
    with pytest.raises(ValueError, match="holds out 0"):
        pick_unseen([str(u) for u in range(10)], digit_places, 0.01, 0)
    assert pick_unseen(["1", "2"], digit_places, 0.0, 0) == []


def test_item_seeds_are_stable_and_distinct():
    for kind, seed, index in (("clocks", 0, 0), ("arithmetic", 3, 12345)):
        digest = hashlib.sha256(f"{kind}:{seed}:{index}".encode()).digest()
        assert item_seed(kind, seed, index) == int.from_bytes(digest[:8], "little") // 2
    seeds = {item_seed("clocks", 0, i) for i in range(10_000)}
    assert len(seeds) == 10_000 and max(seeds) < 2 ** 63
    assert item_seed("clocks", 1, 0) != item_seed("clocks", 0, 0) != item_seed("arithmetic", 0, 0)


class _Plan:
    """A tiny plan: item i is the line {"index": i}; `render` raises `error` at item `fail`."""

    name, noun, unit, chunk = "toy", "items", "item", 4
    fail, error = None, None

    def __init__(self, cfg):
        self.cfg, self.total = cfg, cfg["num"]

    def render(self, index, root):
        if index == self.fail:
            raise self.error
        return json.dumps({"index": index})

    def is_done(self, row, root):
        return True

    def finish(self, root, done):
        (root / "items.txt").write_text("".join(done[i] + "\n" for i in range(self.total)))


def test_only_an_interrupt_is_reported_as_one(tmp_path, capsys, monkeypatch):
    out = tmp_path / "toy"
    monkeypatch.setattr(_Plan, "fail", 4)
    monkeypatch.setattr(_Plan, "error", OSError("disk full"))
    with pytest.raises(OSError, match="disk full"):
        dataset.build_dataset(out, _Plan({"num": 10}), progress=False)
    assert capsys.readouterr().err == ""
    assert (tmp_path / ".toy.partial").is_dir()  # kept: --resume continues once the cause is fixed
    monkeypatch.setattr(_Plan, "fail", 7)
    monkeypatch.setattr(_Plan, "error", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        dataset.build_dataset(out, _Plan({"num": 10}), resume=True, progress=False)
    assert capsys.readouterr().err.strip() == (f"data-synth toy: interrupted with 7 of 10 items done; the partial "
                                               f"dataset is in {tmp_path / '.toy.partial'}; rerun with --resume to "
                                               "finish it")


def test_resume_must_match_the_arguments_and_then_completes(tmp_path, monkeypatch):
    out = tmp_path / "toy"
    monkeypatch.setattr(_Plan, "fail", 6)
    monkeypatch.setattr(_Plan, "error", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        dataset.build_dataset(out, _Plan({"num": 10, "kind": "a"}), progress=False)
    with pytest.raises(ValueError, match=r"different arguments \(kind\)"):
        dataset.build_dataset(out, _Plan({"num": 10, "kind": "b"}), resume=True, progress=False)
    with pytest.raises(FileExistsError, match="unfinished run; pass --resume"):
        dataset.build_dataset(out, _Plan({"num": 10, "kind": "a"}), progress=False)
    monkeypatch.setattr(_Plan, "fail", None)
    calls = []
    real = _Plan.render
    monkeypatch.setattr(_Plan, "render", lambda self, i, root: calls.append(i) or real(self, i, root))
    dataset.build_dataset(out, _Plan({"num": 10, "kind": "a"}), resume=True, progress=False)
    assert calls == [6, 7, 8, 9]
    assert (out / "items.txt").read_text() == "".join(f'{{"index": {i}}}\n' for i in range(10))
    assert json.loads((out / "generation.json").read_text()) == {"num": 10, "kind": "a"}
    assert not (tmp_path / ".toy.partial").exists()


# ------------------------------------------------------------------------------- limits, before any work

def run(main, argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize("main, argv, match", [
    (data_synth, ["clocks", "--num", "4", "--size", "100000"], "--size: must be in 64..4096"),
    (data_synth, ["clocks", "--num", "4", "--size", "63"], "--size: must be in 64..4096"),
    (data_synth, ["clocks", "--num", str(10 ** 8)], "--num: must be in 1..10000000"),
    (data_synth, ["clocks", "--num", "4", "--unseen-fraction", "1.5"], "--unseen-fraction"),
    (charts_main, ["--layout", "chartqa", "--num", "2", "--size", "5000x300"], "at most 4096 px"),
    (charts_main, ["--layout", "chartqa", "--num", str(10 ** 8)], "num must be an integer in 1..10000000"),
    (charts_main, ["--layout", "chartqa", "--num", "2", "--questions-per-chart", "1000"], "questions_per_chart"),
    (charts_main, ["--layout", "chartqa", "--num", "2", "--kinds", "bars_axis", "--bar-noise", "99"], "--bar-noise"),
    (charts_main, ["--layout", "chartqa", "--num", "2", "--unseen-fraction", "0.2"], "kinds=bars_axis"),
    (charts_main, ["--layout", "chartqa", "--num", "2", "--kinds", "bars_axis", "--unseen-split"], "unseen_fraction"),
    (charts_main, ["--layout", "chartqa", "--num", "2", "--split", "../x"], "split names"),
    (arithmetic_main, ["--num", "4", "--digits", "1000"], "at most 100"),
    (arithmetic_main, ["--num", "4", "--places", "31"], "--places: must be in 0..30"),
    (arithmetic_main, ["--num", "4", "--div-places", "31"], "--div-places: must be in 0..30"),
    (arithmetic_main, ["--num", str(10 ** 8)], "--num: must be in 1..10000000"),
])
def test_too_large_or_unrenderable_is_a_usage_error_before_any_work(tmp_path, monkeypatch, capsys, main, argv, match):
    monkeypatch.chdir(tmp_path)
    code, err = run(main, [*argv, "--out", "ds", "--no-progress"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and match in err, err
    assert "interrupted" not in err and "resume" not in err
    assert list(tmp_path.iterdir()) == []  # no output, no .ds.partial


def test_after_a_refused_size_the_corrected_run_works(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run(data_synth, ["clocks", "--num", "4", "--size", "100000", "--out", "ds", "--no-progress"], capsys)[0] == 2
    assert run(data_synth, ["clocks", "--num", "10", "--size", "64", "--out", "ds", "--no-progress"], capsys)[0] == 0
    assert len(list(Path("ds").rglob("*.png"))) == 10


def test_a_write_error_is_one_line_exit_1(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("parent").write_text("a file where a folder should be")
    code, err = run(data_synth, ["arithmetic", "--num", "10", "--out", "parent/ds", "--no-progress"], capsys)
    assert code == 1 and len(err.splitlines()) == 1 and err.startswith("data-synth arithmetic: cannot write:"), err
    assert "interrupted" not in err
