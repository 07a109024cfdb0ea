"""The writer contract every data-synth generator keeps, one parametrised test a contract (these were copied
into test_arithmetic, test_word_problems, test_grounding, test_writer (clocks) and test_charts):
- the bytes do not depend on the worker count, and the seed matters;
- an interrupted run leaves no dataset, refuses a plain rerun and a resume with other arguments, and a resume
  renders only what was missing, to the uninterrupted run's bytes;
- an existing dataset is kept unless `overwrite`, which replaces it and leaves no temporary folder;
- bad arguments raise a ValueError naming the argument and write nothing.
Each writer's own numbers (sizes, where the interruption lands, which argument a resume may not change) are
in its `Writer` entry, exactly as the copies had them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import data_synth.arithmetic as arithmetic
import data_synth.grounding as grounding
import data_synth.word_problems as word_problems
import data_synth.writer as clocks
from data_synth.charts import write_chart_dataset

QUIET = dict(progress=False)
CLOCKS = dict(size=64, progress=False)  # small clocks


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def jsonl_count(root: Path, split: str) -> int:  # arithmetic, word problems: one SPLIT.jsonl a split
    return len((root / f"{split}.jsonl").read_text().splitlines())


def metadata_count(root: Path, split: str) -> int:  # image sets: SPLIT/metadata.jsonl
    return len((root / split / "metadata.jsonl").read_text().splitlines())


@dataclass
class Writer:
    write: Callable  # write(out, num, **kwargs) -> out
    defaults: dict  # keyword arguments of every call
    count: Callable  # (root, split) -> records in that split
    # the worker-count contract: num, options, a check of the file names, the file a new seed must change
    same_num: int
    same_opts: dict
    same_files: Callable[[dict], bool]
    seed_changes: tuple[str, ...]
    also_default_workers: bool = False  # also compare against a run with the default worker count
    # the resume contract: what renders one item (object, attribute), total items, where it stops
    render: tuple = ()
    resume_num: int = 0
    resume_opts: dict = field(default_factory=dict)
    stop_after: int = 0
    interrupt: tuple[type, str] = (KeyboardInterrupt, "")  # what the render raises: type and message
    torn_line: str | None = None  # a progress line cut short by the interruption, appended before resuming
    other_arguments: tuple[dict, str] = ({}, "")  # a resume with these kwargs raises ValueError(match)
    rendered_on_resume: range = range(0)
    # the overwrite contract: the first call's num, first and second calls' kwargs, the replacing call's num
    first_num: int = 20
    first: dict = field(default_factory=dict)
    second: dict = field(default_factory=dict)
    replaced_num: int = 0
    cli_refusal: Callable | None = None  # (out, capsys) -> checks the command line refuses the existing set too


def _grounding_cli_refusal(out, capsys):
    assert grounding.main(["--num", "10", "--out", str(out), "--width", "56", "--height", "56", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("data-synth grounding: ")
    assert "already holds a data-synth dataset" in err


WRITERS = {
    "arithmetic": Writer(
        write=arithmetic.write_arithmetic_dataset, defaults=QUIET, count=jsonl_count,
        same_num=6000, same_opts=dict(seed=3, places=1),
        same_files=lambda t: set(t) == {"generation.json", "train.jsonl", "test.jsonl"},
        seed_changes=("train.jsonl",),
        render=(arithmetic._Plan, "render"), resume_num=300, resume_opts=dict(seed=11), stop_after=120,
        torn_line='{"index": 120, "id": "tra', other_arguments=(dict(places=1), "places"),
        rendered_on_resume=range(120, 300),
        first=dict(seed=0), second=dict(seed=1), replaced_num=30),
    "word_problems": Writer(
        write=word_problems.write_word_problem_dataset, defaults=QUIET, count=jsonl_count,
        same_num=5000, same_opts=dict(seed=3, unseen_fraction=0.2),
        same_files=lambda t: set(t) == {"generation.json", "train.jsonl", "test.jsonl", "test_unseen.jsonl"},
        seed_changes=("train.jsonl",),
        render=(word_problems._Plan, "render"), resume_num=300, resume_opts=dict(seed=11, unseen_fraction=0.2),
        stop_after=120, torn_line='{"index": 120, "id": "tra',
        other_arguments=(dict(distractor_rate=0.1), "distractor_rate"),
        rendered_on_resume=range(120, 330),  # 300 + 30 of held-out templates in test_unseen
        first=dict(seed=0), second=dict(seed=1), replaced_num=30),
    "grounding": Writer(
        write=grounding.write_grounding_dataset, defaults=QUIET, count=metadata_count,
        same_num=30, same_opts=dict(seed=6, width=84, height=56, objects=(1, 3), object_size=(0.15, 0.3), clutter=3,
                                    noise=4.0, unseen_fraction=0.2, unseen_num=6),
        same_files=lambda t: len([k for k in t if k.endswith(".png")]) == 36,
        seed_changes=("train/metadata.jsonl", "train/0000/00000000.png"), also_default_workers=True,
        render=(grounding._Plan, "render"), resume_num=40, resume_opts=dict(seed=8, width=56, height=56,
                                                                           unseen_fraction=0.2),
        stop_after=15, other_arguments=(dict(clutter=2), "different arguments"),
        rendered_on_resume=range(15, 44),  # 40 + 4 in test_unseen; the finished ones not drawn again
        first_num=10, first=dict(seed=0, width=56, height=56), second=dict(seed=1, width=56, height=56),
        replaced_num=12,
        cli_refusal=_grounding_cli_refusal),
    "clocks": Writer(
        write=clocks.write_clock_dataset, defaults=CLOCKS, count=metadata_count,
        same_num=20, same_opts=dict(seed=3),
        same_files=lambda t: len(t) == 20 + 2 + 1,  # images, two metadata files, generation.json
        seed_changes=(),  # any file: the whole tree differs
        render=(clocks, "_render_item"), resume_num=15, resume_opts=dict(seed=11), stop_after=6,
        interrupt=(RuntimeError, "injected failure"), torn_line='{"file_name": "0000/000',
        other_arguments=(dict(seed=12), "seed"),
        rendered_on_resume=range(6, 15),  # the six finished images were not drawn again
        first_num=10, first=dict(seed=0), second=dict(seed=0), replaced_num=12),
}
ALL = list(WRITERS)


@pytest.mark.parametrize("name", ALL)
def test_same_bytes_whatever_the_worker_count(tmp_path, name):
    w = WRITERS[name]
    opts = w.defaults | w.same_opts
    a = tree(w.write(tmp_path / "a", w.same_num, workers=1, **opts))
    b = tree(w.write(tmp_path / "b", w.same_num, workers=2, **opts))
    assert a == b and w.same_files(a)
    if w.also_default_workers:
        assert tree(w.write(tmp_path / "c", w.same_num, **opts)) == a
    other = tree(w.write(tmp_path / "d", w.same_num, workers=1, **(opts | {"seed": opts["seed"] + 1})))
    if w.seed_changes:
        for key in w.seed_changes:
            assert other[key] != a[key], key
    else:
        assert other != a


def test_chart_bytes_do_not_depend_on_the_worker_count(tmp_path):
    """Charts keep the contract with their own signature (a layout and one split a call)."""
    write_chart_dataset(tmp_path / "a", "dvqa", 4, seed=9, split="train")
    write_chart_dataset(tmp_path / "b", "dvqa", 4, seed=9, split="train", workers=2)
    write_chart_dataset(tmp_path / "c", "dvqa", 4, seed=10, split="train")
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert files_a == files_b and len(files_a) == 7  # 4 images, the QA file, the chart data, the generation record
    for rel in files_a:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    qa = "qa/train_qa.json"
    assert (tmp_path / "a" / qa).read_bytes() != (tmp_path / "c" / qa).read_bytes()


@pytest.mark.parametrize("name", ALL)
def test_interrupted_run_resumes_to_the_same_bytes(tmp_path, monkeypatch, name):
    w = WRITERS[name]
    opts = w.defaults | w.resume_opts
    reference = w.write(tmp_path / "ref", w.resume_num, **opts)
    owner, attr = w.render
    real = getattr(owner, attr)
    calls = []

    def failing(plan, index, root):
        if len(calls) == w.stop_after:
            raise w.interrupt[0](w.interrupt[1])
        calls.append(index)
        return real(plan, index, root)

    monkeypatch.setattr(owner, attr, failing)
    out = tmp_path / "out"
    with pytest.raises(w.interrupt[0], match=w.interrupt[1] or None):
        w.write(out, w.resume_num, **opts)
    assert not out.exists()
    partial = tmp_path / ".out.partial"
    assert partial.is_dir()
    if w.torn_line is not None:
        with open(partial / "progress.jsonl", "a") as f:  # a line torn by the interruption
            f.write(w.torn_line)
    with pytest.raises(FileExistsError, match="--resume"):
        w.write(out, w.resume_num, **opts)
    changed, match = w.other_arguments
    with pytest.raises(ValueError, match=match):
        w.write(out, w.resume_num, resume=True, **(opts | changed))

    calls.clear()
    monkeypatch.setattr(owner, attr, lambda plan, i, root: calls.append(i) or real(plan, i, root))
    w.write(out, w.resume_num, resume=True, **opts)
    assert sorted(calls) == list(w.rendered_on_resume)
    assert not partial.exists() and tree(out) == tree(reference)


@pytest.mark.parametrize("name", ALL)
def test_existing_output_needs_overwrite(tmp_path, capsys, name):
    w = WRITERS[name]
    out = w.write(tmp_path / "o", w.first_num, **(w.defaults | w.first))
    before = tree(out)
    with pytest.raises(FileExistsError, match="overwrite"):
        w.write(out, w.first_num, **(w.defaults | w.second))
    if w.cli_refusal:
        w.cli_refusal(out, capsys)
    assert tree(out) == before
    w.write(out, w.replaced_num, overwrite=True, **(w.defaults | w.second))
    assert w.count(out, "train") + w.count(out, "test") == w.replaced_num
    assert not list(tmp_path.glob(".o.*"))


# (writer, kwargs, the ValueError's message): each writer's own refusals, as its file listed them
BAD_ARGUMENTS = {
    "arithmetic": [
        (dict(num=0), "num"), (dict(operations=("add", "pow")), "operations"), (dict(operations=()), "operations"),
        (dict(digits=((1, 2), (3, 3))), "exact division"), (dict(digits=((0, 2), (1, 1))), "1 <= lowest"),
        (dict(digits=((3, 2), (1, 1))), "1 <= lowest"), (dict(digits=(1, 2, 3)), "digits"),
        (dict(places=-1), "places"), (dict(div_places=1.5), "div_places"), (dict(splits="train=0.5"), "sum to 1"),
        (dict(num=1), "test would get no problem"), (dict(workers=0), "workers"),
    ],
    "word_problems": [
        (dict(num=0), "num"), (dict(num=10 ** 8), "num"), (dict(distractor_rate=1.5), "distractor_rate"),
        (dict(distractor_rate=True), "distractor_rate"), (dict(unseen_fraction=1.0), r"\[0, 1\)"),
        (dict(unseen_fraction=0.9), "can be held out"), (dict(unseen_num=5), "unseen_num needs"),
        (dict(unseen_fraction=0.2, splits="train=0.8,test_unseen=0.2"), "written by unseen_fraction"),
        (dict(operations=["add", "pow"]), "operations must be"),
        (dict(operations=["add", "add"]), "operations must be"), (dict(operations=[]), "operations must be"),
        (dict(splits="train=0.5"), "sum to 1"), (dict(num=1), "test would get no problem"),
        (dict(workers=0), "workers"),
    ],
    "grounding": [
        (dict(num=0), "num"), (dict(width=20), "width"), (dict(height=5000), "height"), (dict(task="line"), "task"),
        (dict(coords="relative"), "coords"), (dict(objects=(0, 2)), "objects"), (dict(objects=13), "objects"),
        (dict(object_size=(0.3, 0.2)), "lowest <= highest"),
        (dict(object_size=0.05, width=56, height=56), "under 4 px"),
        (dict(object_size=0.5), "too large for a grid"), (dict(objects=12, object_size=0.35, grid=2), "do not fit"),
        (dict(kinds=["hexagon"]), "kinds"), (dict(colours=["red", "red"]), "colours"),
        (dict(kinds=["square"], colours=["red"], objects=2), "distractors need"), (dict(noise=-1), "noise"),
        (dict(unseen_fraction=1.0), r"\[0, 1\)"), (dict(unseen_fraction=0.2, grid=1), "unseen_fraction"),
        (dict(unseen_num=5), "unseen_num needs"), (dict(min_pixels=5000, max_pixels=4000), "exceeds"),
        (dict(unseen_fraction=0.2, splits="train=0.8,test_unseen=0.2"), "written by unseen_fraction"),
        (dict(variation="no"), "variation"), (dict(workers=0), "workers"),
    ],
    "clocks": [
        (dict(num=0), "num"), (dict(size=32), "size"), (dict(splits="train=0.5,test=0.4"), "sum to 1"),
        (dict(splits="train=1,train=0"), "train"), (dict(answer_format="hh:mm:ss"), "answer_format"),
        (dict(style={"numerals": "greek"}), "numerals"), (dict(style={"shade": 1}), "shade"),
        (dict(style={"second_hand": True}), "second_hand"), (dict(workers=0), "workers"),
        (dict(answer_format="24h", style={"am_pm": False}), "am_pm"), (dict(num=1), "test would get no image"),
    ],
}


@pytest.mark.parametrize("name, kwargs, match", [
    pytest.param(name, kwargs, match, id=f"{name}-{i}")
    for name, cases in BAD_ARGUMENTS.items() for i, (kwargs, match) in enumerate(cases)])
def test_bad_arguments_raise_and_write_nothing(tmp_path, name, kwargs, match):
    w = WRITERS[name]
    args = dict(num=10, **w.defaults) | kwargs
    with pytest.raises(ValueError, match=match):
        w.write(tmp_path / "x", args.pop("num"), **args)
    assert not list(tmp_path.iterdir())

