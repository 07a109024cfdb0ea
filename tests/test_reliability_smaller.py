"""Issue 45 item 9 (and 5's duplicates): two renders of one data_root, bounded meta fields in predictions,
duplicated records counted, one digit rule at train time."""

from __future__ import annotations

import threading

import pytest


def test_second_render_of_one_data_root_waits_then_reuses(tmp_path, capsys, monkeypatch):
    """Two trains rendering one new data_root at once: the second waits for the first (a lock beside the
    root, "waiting for pid N"), then reuses what it rendered; nothing is rendered twice or resumed."""
    from vlm_smmd.config import DataArguments
    from vlm_smmd.training import datasets

    real = datasets.synth_writer
    renders, inside, release = [], threading.Event(), threading.Event()

    def gated(kind):
        def write(*args, **kwargs):
            renders.append(kwargs.get("resume"))
            inside.set()
            assert release.wait(30)  # the first render stays in progress until the second is waiting
            return real(kind)(*args, **kwargs)
        return write

    monkeypatch.setattr(datasets, "synth_writer", gated)
    root = tmp_path / "clocks"
    args = DataArguments(data_root=str(root), synthesize="clocks", synthesize_num=10, synthesize_size=64)
    errors = []

    def train():
        try:
            datasets.synthesize_if_missing(args)
        except Exception as e:  # noqa: BLE001 (reported by the assertion below)
            errors.append(e)

    first = threading.Thread(target=train)
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=train)
    second.start()
    seen = ""
    for _ in range(300):  # until the second says it waits (it must, before the first is released)
        seen += capsys.readouterr().out
        if "waiting for pid" in seen:
            break
        second.join(0.1)
    release.set()
    first.join(60)
    second.join(60)
    seen += capsys.readouterr().out
    assert not errors, errors
    assert renders == [False]  # rendered once, never resumed by the second
    assert seen.count(f"which is rendering {root}") == 1
    assert "reusing the synthetic data" in seen
    assert len(list((root / "train").rglob("*.png"))) == 9
    assert not (tmp_path / "clocks.lock").exists()  # removed by its holder on exit


@pytest.mark.parametrize("answer", ["１２:３０", "١٢:٣٠", "1２"])
def test_training_preflight_refuses_non_ascii_digits(tiny_processor, tmp_path, answer):
    """One digit rule at train time: eval scores Unicode digits as text, so the preflight refuses them with
    one line naming the image file and record, or counts a skip under on_error=skip."""
    from PIL import Image

    from vlm_smmd.data import DataError, Sample
    from vlm_smmd.data.collator import VLMCollator
    from vlm_smmd.data.preflight import preflight

    image = tmp_path / "clock.png"
    Image.new("RGB", (56, 56), "white").save(image)
    records = [Sample(str(image), "What time is it?", "12:30", "clocks", "r0"),
               Sample(str(image), "What time is it?", answer, "clocks", "r1")]
    collator = VLMCollator(tiny_processor)
    with pytest.raises(DataError) as err:
        preflight(records, collator, name="train", cache_dir=tmp_path / "c1", progress=False)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{image}: non-ASCII digits")
    assert "record 'r1' of clocks" in message
    result = preflight(records, collator, name="train", on_error="skip", cache_dir=tmp_path / "c2", progress=False)
    assert result.kept == [0] and result.skipped == {"non-ASCII digits": 1}


def test_eval_bounds_huge_meta_fields_in_prediction_records(tiny_model_and_processor):
    """A huge metadata field is not copied whole into the prediction record: every string meta value over
    MAX_META_CHARS is cut with a marker giving its length, and the record lists the keys cut."""
    import json

    from tests.conftest import make_image
    from vlm_smmd.data import Sample
    from vlm_smmd.evaluation import MAX_META_CHARS, generate_predictions

    model, processor = tiny_model_and_processor
    huge, long_item = "n" * 5_000_000, "b" * (MAX_META_CHARS + 1)
    meta = {"split": "test", "notes": huge, "style": {"hands": "plain", "log": [long_item, "short"]},
            "edge": "e" * MAX_META_CHARS}
    sample = Sample(make_image(56, 56), "What time is it?", "3:15", "clocks", "r0", meta)
    [record] = generate_predictions(model, processor, [sample], batch_size=1, max_new_tokens=2, progress=False)
    kept = record["meta"]
    assert kept["notes"] == "n" * MAX_META_CHARS + "[... cut: 5000000 characters in all]"
    assert kept["style"]["log"] == ["b" * MAX_META_CHARS + f"[... cut: {MAX_META_CHARS + 1} characters in all]",
                                    "short"]
    assert kept["edge"] == meta["edge"] and kept["style"]["hands"] == "plain" and kept["split"] == "test"
    assert record["meta_cut"] == ["notes", "style.log.0"]
    assert len(json.dumps(record)) < 4 * MAX_META_CHARS
    assert len(sample.meta["notes"]) == 5_000_000  # the sample itself is left as it was


def test_clocks_reader_counts_duplicated_records_in_one_note(tmp_path):
    """The same metadata line twice, or another line with the same id, is kept and counted in one warning
    line naming the file (neither dropped silently nor an error)."""
    import json
    import warnings

    from PIL import Image

    from vlm_smmd.data import read_clocks

    split = tmp_path / "train"
    (split / "extra").mkdir(parents=True)
    for name in ("a.png", "b.png", "extra/a.png"):
        Image.new("RGB", (8, 8)).save(split / name)
    rows = [("a.png", "3:15"), ("b.png", "4:00"), ("a.png", "3:15"), ("extra/a.png", "5:20")]
    (split / "metadata.jsonl").write_text("".join(
        json.dumps({"file_name": f, "question": "What time is it?", "answer": a}) + "\n" for f, a in rows))
    with pytest.warns(UserWarning) as caught:
        samples = read_clocks(tmp_path, "train")
    [note] = [str(w.message) for w in caught]
    assert len(samples) == 4  # kept
    assert note.startswith(f"clocks: {split / 'metadata.jsonl'}: 2 duplicated records (2 with an id seen before)")
    assert "\n" not in note
    (split / "metadata.jsonl").write_text("".join(
        json.dumps({"file_name": f, "question": "q", "answer": a}) + "\n" for f, a in rows[:2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no note without duplicates
        assert len(read_clocks(tmp_path, "train")) == 2


def test_analyze_notes_duplicated_prediction_records(tmp_path, capsys):
    import json

    from vlm_smmd.cli import main

    records = [{"id": i, "source": "chartqa", "question": f"q{i}", "target": str(10 + i), "prediction": "11",
                "image": "/data/c.png"} for i in range(4)]
    records += [records[1], {**records[2], "id": 9}]  # the same id again; another id, same image/question/target
    pred = tmp_path / "predictions.jsonl"
    pred.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["analyze", str(pred), "--out", str(tmp_path / "analysis")]) == 0
    out = capsys.readouterr().out
    line = f"{tmp_path.name}: note: {pred}: 2 duplicated records (1 with an id seen before, 1 with the image, question and " \
           "target of an earlier one), kept and counted as they are; e.g. id '1' repeats id '1'"
    assert line in out.splitlines()
    assert "2 duplicated records" in (tmp_path / "analysis" / "report.md").read_text()


@pytest.mark.slow  # renders two small chart splits (about 5 s)
def test_rendered_chart_data_under_a_read_only_parent_is_reused_without_a_lock(tmp_path, capsys, monkeypatch):
    """Reuse only reads: under a parent the run may not write (simulated: the tests may run as root, whom
    no permission stops) no lock file is attempted and the rendered charts are reused."""
    from vlm_smmd.config import DataArguments
    from vlm_smmd.training import datasets

    charts = DataArguments(data_root=str(tmp_path / "charts"), dataset="chartqa", synthesize="chartqa",
                           synthesize_num=2, eval_split="test")
    datasets.synthesize_if_missing(charts)
    capsys.readouterr()

    def no_lock(*args, **kwargs):
        raise PermissionError("read-only parent")

    monkeypatch.setattr(datasets, "waiting_lock", no_lock)
    monkeypatch.setattr(datasets.os, "access", lambda path, mode: False)
    datasets.synthesize_if_missing(charts)
    assert capsys.readouterr().out.count("reusing the synthetic data") == 2  # train and test splits
