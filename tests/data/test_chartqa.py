import io
import json
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from tests.conftest import make_image
from vlm_smmd.data import DataError, read_chartqa
from vlm_smmd.data.chartqa import EncodedImage


def _official(root, split="test", human=(), augmented=(), images=()):
    d = root / split
    (d / "png").mkdir(parents=True, exist_ok=True)
    for name in images:
        make_image(seed=len(name)).save(d / "png" / name)
    (d / f"{split}_human.json").write_text(json.dumps(list(human)))
    (d / f"{split}_augmented.json").write_text(json.dumps(list(augmented)))


def test_official_layout_odd_real_records(tmp_path):
    human = [
        {"imgname": "41699051005347.png", "query": "What is the highest value?", "label": "51.67"},
        {"imgname": "41699051005347.png", "query": "How many bars exceed 20?", "label": ["3", "three"]},
        {"imgname": "multi_col_20396.png", "query": "Is the red bar taller?", "label": 3.0},
    ]
    augmented = [{"imgname": "two_col_1234.png", "query": "What's the value of Peru?", "label": "1.2%"}]
    _official(tmp_path, human=human, augmented=augmented,
              images=["41699051005347.png", "multi_col_20396.png", "two_col_1234.png"])
    ds = read_chartqa(tmp_path, "test")
    assert len(ds) == 4 and ds.skipped == 0
    a, b, c, d = ds
    assert a.answer == "51.67" and a.meta["answers"] == ["51.67"] and a.meta["subset"] == "human"
    assert b.answer == "3" and b.meta["answers"] == ["3", "three"]  # every label kept for scoring
    assert c.answer == "3"  # a numeric label, without float noise
    assert d.answer == "1.2%" and d.meta["subset"] == "augmented" and d.meta["imgname"] == "two_col_1234.png"
    assert [s.id for s in ds] == ["test/human/0", "test/human/1", "test/human/2", "test/augmented/0"]
    assert str(a.image).endswith("test/png/41699051005347.png")  # a path: opened on use
    assert a.load_image().tobytes() == make_image(seed=len("41699051005347.png")).tobytes()
    assert a.source == "chartqa" and a.question == "What is the highest value?"
    only = read_chartqa(tmp_path, "test", subsets="augmented")
    assert [s.answer for s in only] == ["1.2%"]


def test_missing_and_escaping_images_raise_and_skip(tmp_path):
    human = [{"imgname": "a.png", "query": "q0", "label": "1"},
             {"imgname": "missing.png", "query": "q1", "label": "2"},
             {"imgname": "../../secret.png", "query": "q2", "label": "3"},
             {"imgname": "/etc/passwd", "query": "q3", "label": "4"},
             {"imgname": "a.png", "query": "q4", "label": "5"}]
    _official(tmp_path, human=human, images=["a.png"])
    with pytest.raises(DataError) as e:
        read_chartqa(tmp_path, "test")
    msg = str(e.value)
    assert "missing.png" in msg and "image missing" in msg and "record #1" in msg and "test_human.json" in msg
    with pytest.warns(UserWarning, match="chartqa: skipped 3 records"):
        ds = read_chartqa(tmp_path, "test", on_error="skip")
    assert [s.question for s in ds] == ["q0", "q4"] and ds.skipped == 3
    assert ds.skip_log.counts == {"image missing": 1, "leaves the dataset root": 2}
    assert ds[1].id == "test/human/4"  # ids keep the record's place in the file
    _official(tmp_path, human=human[2:3], images=["a.png"])
    with pytest.raises(DataError, match="leaves the dataset root"):
        read_chartqa(tmp_path, "test")


@pytest.mark.parametrize("bad, message", [
    ({"query": "q", "label": "1"}, "missing key 'imgname'"),
    ({"imgname": "a.png", "label": "1"}, "missing key 'query'"),
    ({"imgname": "a.png", "query": "q", "label": []}, "empty label list"),
    ({"imgname": "a.png", "query": "q", "label": [None]}, "not a string or number"),
    ({"imgname": "a.png", "query": "q", "label": ""}, "empty answer"),
    ({"imgname": "a.png", "query": "q", "label": "\u200b"}, "empty answer"),
    ({"imgname": "a.png", "query": "q", "label": ["4", "\ufeff\u2060"]}, "empty answer"),
    ({"imgname": 7, "query": "q", "label": "1"}, "'imgname' should be str"),
])
def test_malformed_records(tmp_path, bad, message):
    _official(tmp_path, augmented=[{"imgname": "a.png", "query": "q", "label": "1"}, bad], images=["a.png"])
    with pytest.raises(DataError, match=message) as e:
        read_chartqa(tmp_path, "test")
    assert "record #1" in str(e.value) and "test_augmented.json" in str(e.value)
    with pytest.warns(UserWarning):
        ds = read_chartqa(tmp_path, "test", on_error="skip")
    assert len(ds) == 1 and ds.skip_log.counts == {"malformed record": 1}


def test_layout_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither"):
        read_chartqa(tmp_path, "test")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_human.json").write_text("[]")
    with pytest.raises(FileNotFoundError, match="test_augmented.json"):
        read_chartqa(tmp_path, "test")
    assert len(read_chartqa(tmp_path, "test", subsets=("human",))) == 0
    with pytest.raises(ValueError, match="subsets"):
        read_chartqa(tmp_path, "test", subsets=("machine",))
    with pytest.raises(ValueError, match="on_error"):
        read_chartqa(tmp_path, "test", on_error="ignore")


# ----------------------------------------------------------------------------------------- parquet


def _png_bytes(seed):
    buf = io.BytesIO()
    make_image(seed=seed).save(buf, format="PNG")
    return buf.getvalue()


_HF_META = {b"huggingface": json.dumps({"info": {"features": {
    "image": {"_type": "Image"}, "query": {"dtype": "string", "_type": "Value"},
    "label": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
    "human_or_machine": {"names": ["human", "machine"], "_type": "ClassLabel"}}}}).encode()}


def _parquet(path, rows, row_group_size=2):
    schema = pa.schema([("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("query", pa.string()), ("label", pa.list_(pa.string())),
                        ("human_or_machine", pa.int64())], metadata=_HF_META)
    table = pa.table({
        "image": [None if r[0] == "no struct" else {"bytes": r[0], "path": None} for r in rows],
        "query": [r[1] for r in rows], "label": [r[2] for r in rows], "human_or_machine": [r[3] for r in rows],
    }, schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)


def test_parquet_layout(tmp_path):
    rows0 = [(_png_bytes(k), f"q{k}", [str(k * 1.5), f"alt{k}"], k % 2) for k in range(5)]
    rows1 = [(_png_bytes(10 + k), f"r{k}", ["Yes"], 0) for k in range(3)]
    _parquet(tmp_path / "data" / "test-00000-of-00002.parquet", rows0)
    _parquet(tmp_path / "data" / "test-00001-of-00002.parquet", rows1)
    _parquet(tmp_path / "data" / "train-00000-of-00001.parquet", rows1[:1])
    ds = read_chartqa(tmp_path, "test")
    assert len(ds) == 8
    assert [s.question for s in ds] == ["q0", "q1", "q2", "q3", "q4", "r0", "r1", "r2"]
    assert [s.meta["subset"] for s in ds][:5] == ["human", "augmented", "human", "augmented", "human"]
    assert ds[3].answer == "4.5" and ds[3].meta["answers"] == ["4.5", "alt3"]
    for k in (4, 0, 7, 2, 5):  # out of order: row groups are read on demand
        expected = make_image(seed=k if k < 5 else 10 + k - 5)
        assert ds[k].load_image().tobytes() == expected.tobytes()
    assert isinstance(ds[0].image, EncodedImage) and ds[0].id == "test/test-00000-of-00002.parquet#0"
    assert [s.question for s in read_chartqa(tmp_path, "test", subsets="augmented")] == ["q1", "q3"]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy[6].load_image().tobytes() == make_image(seed=11).tobytes()
    with Image.open(ds[1].image) as img:  # file-like: PIL opens it directly too
        assert img.size == make_image().size
    assert len(read_chartqa(tmp_path / "data", "test")) == 8  # the data/ folder itself works too


def test_parquet_null_and_unreadable_images(tmp_path):
    rows = [(_png_bytes(0), "ok", ["1"], 0), (None, "null", ["2"], 0), (b"garbage", "bad", ["3"], 1),
            (_png_bytes(1), "ok2", ["4"], 1), ("no struct", "none", ["5"], 0)]
    path = tmp_path / "data" / "val-00000-of-00001.parquet"
    _parquet(path, rows)
    with pytest.raises(DataError, match=r"image missing.*row 1 of .*val-00000") as e:
        read_chartqa(tmp_path, "val")
    assert str(path) in str(e.value)
    with pytest.warns(UserWarning):
        ds = read_chartqa(tmp_path, "val", on_error="skip")
    assert [s.question for s in ds] == ["ok", "bad", "ok2"] and ds.skip_log.counts == {"image missing": 2}
    with pytest.raises(DataError, match="unreadable image"):
        ds[1].load_image()  # found on use without verify_images
    with pytest.warns(UserWarning):
        ds = read_chartqa(tmp_path, "val", on_error="skip", verify_images=True)
    assert [s.question for s in ds] == ["ok", "ok2"]
    assert ds.skip_log.counts == {"image missing": 2, "unreadable image": 1}


def test_parquet_truncated_image_fails_on_load_with_the_record(tmp_path):
    data = _png_bytes(3)
    _parquet(tmp_path / "data" / "test-0.parquet", [(data[: len(data) // 2], "cut", ["1"], 0)])
    ds = read_chartqa(tmp_path, "test")
    with pytest.raises(DataError, match=r"unreadable image.*test-0.parquet#0"):
        ds[0].load_image()


def test_parquet_schema_and_value_errors(tmp_path):
    table = pa.table({"query": ["q"], "label": [["1"]]})
    path = tmp_path / "data" / "test-0.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    with pytest.raises(DataError, match="missing columns.*image"):
        read_chartqa(tmp_path, "test")
    _parquet(path, [(_png_bytes(0), "q", [], 0), (_png_bytes(0), "q", ["1"], 5)])
    with pytest.raises(DataError, match="row 0 .*'label'"):
        read_chartqa(tmp_path, "test")
    with pytest.warns(UserWarning):
        ds = read_chartqa(tmp_path, "test", on_error="skip")
    assert len(ds) == 0 and ds.skip_log.counts == {"malformed record": 2}


def test_synthetic_chartqa_layout_loads_unchanged(tmp_path):
    from data_synth.charts import write_chart_dataset

    info = write_chart_dataset(tmp_path, "chartqa", 5, seed=3, split="val")
    ds = read_chartqa(tmp_path, "val")
    charts = [json.loads(line) for line in open(info["data_file"])]
    expected = {(q["ref"]["subset"], q["ref"]["record"]): (c, q) for c in charts for q in c["questions"]}
    assert len(ds) == len(expected) == 15
    for s in ds:
        chart, q = expected[(s.meta["subset"], s.meta["record"])]
        assert (s.question, s.answer, s.meta["answers"]) == (q["question"], q["answer"], [q["answer"]])
        assert s.meta["imgname"] == chart["image"].rsplit("/", 1)[1]
    assert ds[0].load_image().size == (512, 400)


def test_json_number_labels_keep_their_digits(tmp_path):
    d = tmp_path / "test"
    (d / "png").mkdir(parents=True)
    make_image().save(d / "png" / "a.png")
    (d / "test_human.json").write_text('[{"imgname": "a.png", "query": "q", "label": 12345678901234567.0}, '
                                       '{"imgname": "a.png", "query": "q", "label": [0.30000000000000004, "x", 2.50]}]')
    (d / "test_augmented.json").write_text("[]")
    ds = read_chartqa(tmp_path, "test")
    assert ds[0].answer == "12345678901234567"  # a float would give 12345678901234568; 15 digits 12345678901234600
    assert ds[1].meta["answers"] == ["0.30000000000000004", "x", "2.5"]


def test_bad_utf8_names_the_file_and_its_byte(tmp_path):
    records = [{"imgname": "a.png", "query": f"question number {k} about the chart", "label": str(k)} for k in range(20)]
    text = json.dumps(records, ensure_ascii=False)
    data = text.encode().replace(b"number 15", b"numb\xe9r 15")  # a Latin-1 byte in a UTF-8 file
    d = tmp_path / "test"
    (d / "png").mkdir(parents=True)
    (d / "test_human.json").write_bytes(data)
    (d / "test_augmented.json").write_text("[]")
    bad = data.index(b"\xe9")
    assert bad > 600
    with pytest.raises(DataError, match=rf"test_human\.json: not valid UTF-8 at byte {bad}: invalid continuation byte"):
        read_chartqa(tmp_path, "test", on_error="skip")
