"""Chart splits written through the dataset machinery: an existing split (or a file a split would write)
is refused without --overwrite and left byte for byte; --overwrite replaces a split only once the new one
is complete and leaves none of the earlier split's images or tables; other splits and foreign files are
never touched (DVQA's shared images/ folder included); an interrupted split resumes to the same bytes;
the held-out values of bars_axis charts stay out of the seen splits."""

import json
import re
from pathlib import Path

import pytest

from data_synth import bars, charts
from data_synth.charts import main, write_chart_dataset
from data_synth.dataset import digit_places

BARS = dict(kinds=("bars_axis",), size=(56, 56), questions_per_chart=1)
LAYOUTS = ("chartqa", "plotqa", "dvqa")


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def split_files(root: Path, layout: str, split: str) -> set[str]:
    """Every file of `split` in `root`, by the layout's rules, found by walking the tree."""
    def ours(rel: str) -> bool:
        if rel.startswith("charts_data/"):
            return rel in (f"charts_data/{split}.jsonl", f"charts_data/{split}.generation.json")
        if layout == "dvqa":
            return rel == f"qa/{split}_qa.json" or re.fullmatch(rf"images/synth_{split}_\d{{8}}\.png", rel) is not None
        return rel.startswith(f"{split}/png/") or rel.startswith(f"{split}/tables/") or rel in (
            f"{split}/{split}_human.json", f"{split}/{split}_augmented.json", f"{split}/qa_pairs_V2.json")
    return {rel for rel in tree(root) if ours(rel)}


def read(root: Path, layout: str, split: str):
    from vlm_smmd.data import read_chartqa, read_dvqa, read_plotqa

    return {"chartqa": read_chartqa, "plotqa": read_plotqa, "dvqa": read_dvqa}[layout](root, split)


def fake_chartqa_split(root: Path, split: str = "train") -> None:
    """A real-looking ChartQA split: index files, an image, a table and an annotation."""
    (root / split / "png").mkdir(parents=True)
    (root / split / "png" / "two_col_1.png").write_bytes(b"not really a png")
    (root / split / "tables").mkdir()
    (root / split / "tables" / "two_col_1.csv").write_text("Year,Value\n2020,7\n")
    (root / split / "annotations").mkdir()
    (root / split / "annotations" / "two_col_1.json").write_text("{}")
    for subset in ("human", "augmented"):
        (root / split / f"{split}_{subset}.json").write_text(
            json.dumps([{"imgname": "two_col_1.png", "query": f"{subset} question?", "label": "7"}]))


def test_an_existing_chartqa_split_is_refused_and_kept(tmp_path, capsys):
    root = tmp_path / "ChartQA"
    fake_chartqa_split(root)
    before = tree(root)
    with pytest.raises(FileExistsError, match=r"train_human\.json exists; choose another --out or pass --overwrite"):
        write_chart_dataset(root, "chartqa", 3, split="train", **BARS)
    assert main(["--layout", "chartqa", "--num", "3", "--out", str(root), "--kinds", "bars_axis", "--size", "56",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"data-synth charts: {root / 'train' / 'train_human.json'} exists; choose another --out or pass "
                   "--overwrite"]
    assert tree(root) == before and sorted(p.name for p in root.iterdir()) == ["train"]  # no partial left
    write_chart_dataset(root, "chartqa", 3, split="val", **BARS)  # another split is fine
    assert {k: v for k, v in tree(root).items() if k in before} == before


@pytest.mark.parametrize("layout, make, name", [
    ("chartqa", lambda r: (r / "train" / "png").mkdir(parents=True) or
     (r / "train" / "png" / "synth_train_000001.png").write_bytes(b"x"), "synth_train_000001.png"),
    ("chartqa", lambda r: (r / "train" / "tables").mkdir(parents=True) or
     (r / "train" / "tables" / "synth_train_000002.csv").write_text("x"), "synth_train_000002.csv"),
    ("chartqa", lambda r: (r / "data").mkdir(parents=True) or (r / "data" / "train-0.parquet").write_bytes(b"x"),
     "train-0.parquet"),
    ("plotqa", lambda r: (r / "train" / "png").mkdir(parents=True) or (r / "train" / "png" / "2.png").write_bytes(b"x"),
     "2.png"),
    ("plotqa", lambda r: (r / "train").mkdir() or (r / "train" / "qa_pairs_V1.json").write_text("{}"),
     "qa_pairs_V1.json"),
    ("dvqa", lambda r: (r / "images").mkdir() or (r / "images" / "synth_train_00000000.png").write_bytes(b"x"),
     "synth_train_00000000.png"),
    ("dvqa", lambda r: (r / "train_qa.json").write_text("[]"), "train_qa.json"),
    ("dvqa", lambda r: (r / "charts_data").mkdir() or (r / "charts_data" / "train.jsonl").write_text(""),
     "train.jsonl"),
])
def test_a_file_the_split_would_write_or_shadow_is_refused(tmp_path, layout, make, name):
    root = tmp_path / "ds"
    root.mkdir()
    make(root)
    before = tree(root)
    with pytest.raises(FileExistsError, match=re.escape(name) + " exists"):
        write_chart_dataset(root, layout, 3, split="train", **BARS)
    assert tree(root) == before and not (root / ".train.partial").exists()


def test_foreign_files_in_the_split_folders_are_kept(tmp_path):
    for layout, foreign in (("chartqa", "train/png/mine.png"), ("plotqa", "train/png/mine.png"),
                            ("dvqa", "images/bar_train_00000000.png")):
        root = tmp_path / layout
        (root / foreign).parent.mkdir(parents=True)
        (root / foreign).write_bytes(b"keep")
        (root / "notes.txt").write_text("keep")
        write_chart_dataset(root, layout, 3, split="train", **BARS)
        files = tree(root)
        assert files[foreign] == files["notes.txt"] == b"keep"
        assert len(read(root, layout, "train")) == 3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_overwrite_replaces_a_split_only_when_complete_and_leaves_no_orphans(tmp_path, monkeypatch, layout):
    root = tmp_path / "ds"
    write_chart_dataset(root, layout, 6, seed=1, split="train", **BARS)
    write_chart_dataset(root, layout, 4, seed=2, split="test", **BARS)
    (root / "README").write_text("foreign")
    (root / "charts_data" / "train.json").write_text("{}")  # e.g. the record vlm-smmd train writes
    before = tree(root)
    test_files = {k: v for k, v in before.items() if k in split_files(root, layout, "test")}

    real = charts._Plan.render
    calls = []

    def failing(plan, index, out):
        if len(calls) == 2:
            raise RuntimeError("injected failure")
        calls.append(index)
        return real(plan, index, out)

    monkeypatch.setattr(charts._Plan, "render", failing)
    with pytest.raises(RuntimeError, match="injected"):
        write_chart_dataset(root, layout, 3, seed=5, split="train", overwrite=True, **BARS)
    assert {k: v for k, v in tree(root).items() if not k.startswith(".train.partial/")} == before  # untouched

    monkeypatch.setattr(charts._Plan, "render", real)
    write_chart_dataset(root, layout, 3, seed=5, split="train", overwrite=True, resume=True, **BARS)
    after = tree(root)
    assert not (root / ".train.partial").exists() and not (root / ".train.old").exists()
    assert {k: v for k, v in after.items() if k in test_files} == test_files  # the other split, byte for byte
    assert after["README"] == b"foreign" and after["charts_data/train.json"] == b"{}"
    reference = tmp_path / "ref"
    write_chart_dataset(reference, layout, 3, seed=5, split="train", **BARS)
    assert {k: after[k] for k in split_files(root, layout, "train")} == tree(reference)  # nothing of the old one
    images = [k for k in split_files(root, layout, "train") if k.endswith(".png")]
    assert len(images) == 3
    assert len(read(root, layout, "train")) == 3 and len(read(root, layout, "test")) == 4


def test_overwrite_of_a_real_chartqa_split_keeps_what_is_not_the_split(tmp_path):
    root = tmp_path / "ChartQA"
    fake_chartqa_split(root)
    write_chart_dataset(root, "chartqa", 2, split="train", overwrite=True, **BARS)
    files = tree(root)
    assert "train/png/two_col_1.png" not in files and "train/tables/two_col_1.csv" not in files
    assert files["train/annotations/two_col_1.json"] == b"{}"  # not part of the layout the split writes
    assert [s.question for s in read(root, "chartqa", "train")] == ["What is the value of the bar?"] * 2


@pytest.mark.parametrize("layout", LAYOUTS)
def test_interrupted_split_resumes_to_the_same_bytes(tmp_path, monkeypatch, layout):
    opts = dict(BARS, bars_per_chart=(1, 3), questions_per_chart=2, unseen_fraction=0.2, unseen_seed=4, bar_noise=3.0)
    reference = tmp_path / "ref"
    write_chart_dataset(reference, layout, 40, seed=7, split="train", **opts)
    root = tmp_path / "ds"
    real = charts._Plan.render
    calls = []

    def interrupted(plan, index, out):
        if len(calls) == 15:
            raise KeyboardInterrupt
        calls.append(index)
        return real(plan, index, out)

    monkeypatch.setattr(charts._Plan, "render", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_chart_dataset(root, layout, 40, seed=7, split="train", **opts)
    assert sorted(p.name for p in root.iterdir()) == [".train.partial"]
    with pytest.raises(FileExistsError, match="--resume"):
        write_chart_dataset(root, layout, 40, seed=7, split="train", **opts)
    with pytest.raises(ValueError, match="seed"):
        write_chart_dataset(root, layout, 40, seed=8, split="train", resume=True, **opts)
    calls.clear()
    monkeypatch.setattr(charts._Plan, "render", lambda plan, i, out: calls.append(i) or real(plan, i, out))
    write_chart_dataset(root, layout, 40, seed=7, split="train", resume=True, **opts)
    assert sorted(calls) == list(range(15, 40))
    assert tree(root) == tree(reference)


def test_bytes_do_not_depend_on_the_worker_count_with_every_option(tmp_path):
    opts = dict(BARS, bars_per_chart=(1, 3), unseen_fraction=0.2, unseen_seed=1, bar_noise=4.0, unseen_split=True)
    write_chart_dataset(tmp_path / "a", "chartqa", 300, seed=3, split="test_unseen", workers=1, **opts)
    write_chart_dataset(tmp_path / "b", "chartqa", 300, seed=3, split="test_unseen", workers=2, **opts)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


def answers(root: Path, split: str) -> list[str]:
    return [json.loads(line)["questions"][0]["answer"] for line in open(root / "charts_data" / f"{split}.jsonl")]


def test_unseen_values_are_held_out_of_the_seen_splits(tmp_path):
    root = tmp_path / "bars"
    unseen = dict(unseen_fraction=0.2, unseen_seed=11)
    write_chart_dataset(root, "chartqa", 1500, seed=0, split="train", **BARS, **unseen)
    write_chart_dataset(root, "chartqa", 300, seed=1, split="test", **BARS, **unseen)
    write_chart_dataset(root, "chartqa", 300, seed=2, split="test_unseen", unseen_split=True, **BARS, **unseen)
    held = {str(v) for v in bars.unseen_values(100, 0, 0.2, 11)}
    assert len(held) == 20
    train, test, test_unseen = answers(root, "train"), answers(root, "test"), answers(root, "test_unseen")
    assert not held & set(train) and not held & set(test)
    assert set(test_unseen) == held  # only the held-out values, and (300 charts) every one of them
    everywhere = set().union(*(digit_places(str(v)) for v in range(100)))
    assert set().union(*(digit_places(a) for a in train)) == everywhere  # every digit at every place
    for split, holds in (("train", "seen"), ("test", "seen"), ("test_unseen", "unseen")):
        record = json.loads((root / "charts_data" / f"{split}.generation.json").read_text())
        assert record["unseen"] == {"fraction": 0.2, "seed": 11, "split_holds": holds, "values": sorted(held, key=int)}
        assert record["split"] == split
    samples = read(root, "chartqa", "test_unseen")
    assert {s.answer for s in samples} == held


def test_unseen_values_with_decimals_and_several_bars(tmp_path):
    opts = dict(BARS, size=(112, 112), bar_places=1, bars_per_chart=(2, 3), questions_per_chart=3,
                unseen_fraction=0.2, unseen_seed=0)
    held = {bars.value_text(u, 1) for u in bars.unseen_values(100, 1, 0.2, 0)}
    assert len(held) == 200
    write_chart_dataset(tmp_path, "chartqa", 200, split="train", **opts)
    write_chart_dataset(tmp_path, "chartqa", 100, split="test_unseen", unseen_split=True, **opts)
    train = [json.loads(line) for line in open(tmp_path / "charts_data" / "train.jsonl")]
    test = [json.loads(line) for line in open(tmp_path / "charts_data" / "test_unseen.jsonl")]
    assert not {v for c in train for v in c["series"][0]["values"]} & held
    assert {v for c in test for v in c["series"][0]["values"]} <= held
    assert all(re.fullmatch(r"\d+\.\d", q["answer"]) for c in train + test for q in c["questions"])
