"""read_clocks on hand-written imagefolder splits: good rows, malformed lines, path escapes, missing images."""

import json

import pytest

from tests.conftest import make_image
from vlm_smmd.data import DataError, Sample, read_clocks


def write_split(root, lines, images=("0000/00000000.png", "0000/00000001.png")):
    split = root / "train"
    for name in images:
        (split / name).parent.mkdir(parents=True, exist_ok=True)
        make_image(64, 64).save(split / name)
    (split / "metadata.jsonl").write_text("".join(line + "\n" for line in lines))
    return root


def row(file_name="0000/00000000.png", answer="3:07", **extra):
    return json.dumps({"file_name": file_name, "question": "What time is it?", "answer": answer, "hour": 15,
                       "minute": 7, "second": None, "face_shape": "round", **extra})


def test_reads_rows_in_order_with_meta(tmp_path):
    root = write_split(tmp_path, [row(), "", row("0000/00000001.png", "12:45", minute=45)])
    samples = read_clocks(root, "train")
    assert [s.answer for s in samples] == ["3:07", "12:45"]
    s = samples[0]
    assert isinstance(s, Sample) and s.source == "clocks" and s.id == "00000000"
    assert s.question == "What time is it?"
    assert s.meta == {"hour": 15, "minute": 7, "second": None, "face_shape": "round"}
    assert s.load_image().size == (64, 64)
    assert samples[1].meta["minute"] == 45


@pytest.mark.parametrize("bad, reason", [
    ('{"file_name": "0000/00000001.png", "question": "q"', "malformed record"),  # truncated JSON
    ('["a", "b"]', "malformed record"),
    (json.dumps({"file_name": "0000/00000001.png", "question": "q"}), "'answer'"),
    (json.dumps({"file_name": "0000/00000001.png", "question": "q", "answer": 307}), "'answer'"),
    (json.dumps({"question": "q", "answer": "3:07"}), "'file_name'"),
    (json.dumps({"file_name": "0000/00000001.png", "question": "q", "answer": "\u200b"}), "'answer'"),
])
def test_malformed_line_names_file_and_line(tmp_path, bad, reason):
    root = write_split(tmp_path, [row(), bad])
    with pytest.raises(DataError, match=reason) as err:
        read_clocks(root, "train")
    assert f"{root / 'train' / 'metadata.jsonl'}:2" in str(err.value)


@pytest.mark.parametrize("file_name, reason", [
    ("../outside.png", "leaves the dataset root"), ("/etc/passwd", "leaves the dataset root"),
    ("0000/99999999.png", "image missing"),
])
def test_bad_paths_raise_naming_the_record(tmp_path, file_name, reason):
    (tmp_path / "outside.png").write_bytes(b"")
    root = write_split(tmp_path, [row(), row(file_name)])
    with pytest.raises(DataError, match=reason) as err:
        read_clocks(root, "train")
    assert "metadata.jsonl:2" in str(err.value)


def test_skip_counts_and_reports_bad_records(tmp_path):
    lines = [row(), "not json", row("../x.png"), row("0000/00000009.png"), row("0000/00000001.png", "1:00")]
    root = write_split(tmp_path, lines)
    with pytest.warns(UserWarning, match="skipped 3 records") as record:
        samples = read_clocks(root, "train", on_error="skip")
    assert [s.answer for s in samples] == ["3:07", "1:00"]
    assert samples.skipped == 3 and samples.skip_log.counts["image missing"] == 1
    message = str(record[0].message)
    assert "image missing" in message and "leaves the dataset root" in message and "malformed record" in message


def test_missing_split_lists_the_splits_found(tmp_path):
    root = write_split(tmp_path, [row()])
    with pytest.raises(DataError, match=r"'test'.*train"):
        read_clocks(root, "test")
    with pytest.raises(ValueError, match="on_error"):
        read_clocks(root, "train", on_error="ignore")


def test_a_line_that_is_not_utf8_names_file_and_line_and_is_skipped(tmp_path):
    root = write_split(tmp_path, [row()])
    meta = root / "train" / "metadata.jsonl"
    latin1 = row("0000/00000001.png", "@").encode().replace(b'"@"', b'"caf\xe9"')  # a Latin-1 byte
    lines = [row().encode(), latin1, row("0000/00000001.png", "1:00").encode()]
    meta.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataError) as err:
        read_clocks(root, "train")
    bad = meta.read_bytes().index(b"\xe9")
    assert str(err.value) == f"{meta}:2: malformed record (not valid UTF-8: invalid continuation byte at byte {bad})"
    with pytest.warns(UserWarning, match="skipped 1 records"):
        samples = read_clocks(root, "train", on_error="skip")
    assert [s.answer for s in samples] == ["3:07", "1:00"] and samples.skip_log.counts == {"malformed record": 1}
