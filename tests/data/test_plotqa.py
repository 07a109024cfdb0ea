import json
import pickle
import tracemalloc
from decimal import Decimal

import pytest
from PIL import Image

from vlm_smmd.data import DataError, read_plotqa, records
from vlm_smmd.data.records import format_number, iter_json_array


def _png(path, mode="RGB", size=(40, 30)):
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "RGBA":  # left half transparent, right half opaque red
        img = Image.new("RGBA", size, (0, 0, 0, 0))
        img.paste((255, 0, 0, 255), (size[0] // 2, 0, size[0], size[1]))
    else:
        img = Image.new("RGB", size, (10, 20, 30))
    img.save(path)


def _pair(image_index, answer, question="What is the value?", qid=0, **extra):
    rec = {"image_index": image_index, "question_string": question, "answer": answer, "template": "data_retrieval",
           "type": "closed", "question_id": qid, "answer_bbox": {"x": 1, "y": 2, "w": 3, "h": 4}}
    rec.update(extra)
    return rec


def _write(root, pairs, split="test", version="V2", images=(0,), text=None):
    d = root / split
    d.mkdir(parents=True, exist_ok=True)
    for i in images:
        _png(d / "png" / f"{i}.png", "RGBA")
    path = d / f"qa_pairs_{version}.json"
    path.write_text(text if text is not None else json.dumps({"qa_pairs": pairs}))
    return path


# (JSON text of the answer, the label): the digits as written, trailing zeros dropped, nothing rounded
JSON_ANSWERS = [("51.67", "51.67"), ("3.0", "3"), ("1.2e-05", "0.000012"), ("0.30000000000000004", "0.30000000000000004"),
                ("7", "7"), ('"Yes"', "Yes"), ("1234567.0", "1234567"), ("51.669999999999995", "51.669999999999995"),
                ("-0.5", "-0.5"), ("1e16", "10000000000000000"), ("12345678901234567.0", "12345678901234567"),
                ("1.50", "1.5"), ("-0.0", "0"), ('"Mexico"', "Mexico")]


def test_number_answers_keep_their_json_text(tmp_path):
    pairs = []
    for k, (text, _) in enumerate(JSON_ANSWERS):
        pair = json.dumps(_pair(0, "@", qid=k))
        pairs.append(pair.replace('"@"', text))
    _write(tmp_path, None, text='{"qa_pairs": [' + ", ".join(pairs) + "]}")
    ds = read_plotqa(tmp_path, "test")
    got = [s.answer for s in ds]
    assert got == [label for _, label in JSON_ANSWERS]
    for (text, _), label in zip(JSON_ANSWERS, got):  # independent check: the same value as the JSON text
        if not text.startswith('"'):
            assert Decimal(label) == Decimal(text)
    assert format_number(float("12345678901234567.0")) == "12345678901234568"  # what a float would have said
    s = ds[0]
    assert s.source == "plotqa" and s.id == "test/0" and s.question == "What is the value?"
    assert s.meta["template"] == "data_retrieval" and s.meta["type"] == "closed" and s.meta["question_id"] == 0
    assert s.meta["raw_answer"] == Decimal("51.67") and ds[1].meta["raw_answer"] == Decimal("3.0")
    rounded = read_plotqa(tmp_path, "test", round_digits=1)  # rounding only when asked
    assert [s.answer for s in rounded][:4] == ["51.7", "3", "0", "0.3"]
    assert rounded[8].answer == "-0.5" and rounded[10].answer == "12345678901234567"


def test_format_number_against_decimal_text():
    # independent reference: the shortest repr of the float, expanded by hand
    assert format_number(2.675, 2) == "2.68"  # half-up on the decimal text, not on the binary value
    assert format_number(0.125, 2) == "0.13"
    assert format_number(123456789012345678901234567890) == "123456789012345678901234567890"
    assert format_number(-0.0) == "0"
    for bad in (float("nan"), float("inf"), True, "3"):
        with pytest.raises(ValueError):
            format_number(bad)


def test_rgba_images_composited_on_white_and_lazy(tmp_path):
    _write(tmp_path, [_pair(0, 5)])
    ds = read_plotqa(tmp_path, "test")
    s = ds[0]
    assert isinstance(s.image, type(tmp_path)) or isinstance(s.image, str)  # a path, not pixels
    img = s.load_image()
    assert img.mode == "RGB"
    assert img.getpixel((1, 1)) == (255, 255, 255) and img.getpixel((38, 1)) == (255, 0, 0)


def test_version_choice(tmp_path):
    _write(tmp_path, [_pair(0, 1)], version="V1")
    assert read_plotqa(tmp_path, "test")[0].answer == "1"
    _write(tmp_path, [_pair(0, 2), _pair(0, 3)], version="V2")
    assert [s.answer for s in read_plotqa(tmp_path, "test")] == ["2", "3"]  # V2 preferred
    assert [s.answer for s in read_plotqa(tmp_path, "test", version="V1")] == ["1"]
    with pytest.raises(FileNotFoundError, match="qa_pairs"):
        read_plotqa(tmp_path, "train")
    with pytest.raises(ValueError, match="version"):
        read_plotqa(tmp_path, "test", version="V3")


def test_missing_and_escaping_images_raise_and_skip(tmp_path):
    pairs = [_pair(0, 1, qid=10), _pair(5, 2, qid=11), _pair("../../outside", 3, qid=12), _pair(0, 4, qid=13)]
    path = _write(tmp_path, pairs)
    with pytest.raises(DataError) as e:
        read_plotqa(tmp_path, "test")
    assert "5.png" in str(e.value) and "image missing" in str(e.value) and "record #1" in str(e.value)
    assert str(path) in str(e.value)
    with pytest.warns(UserWarning, match="skipped 2 records"):
        ds = read_plotqa(tmp_path, "test", on_error="skip")
    assert ds.skipped == 2 and len(ds) == 2
    assert ds.skip_log.counts == {"image missing": 1, "leaves the dataset root": 1}
    assert [s.meta["question_id"] for s in ds] == [10, 13]
    assert [s.meta["record"] for s in ds] == [0, 3]
    (tmp_path / "test" / "qa_pairs_V2.json").write_text(json.dumps({"qa_pairs": [_pair("../../x", 1)]}))
    with pytest.raises(DataError, match="leaves the dataset root"):
        read_plotqa(tmp_path, "test")


@pytest.mark.parametrize("bad, message", [
    ({"question_string": "q", "answer": 1}, "missing key 'image_index'"),
    ({"image_index": 0, "answer": 1}, "missing key 'question_string'"),
    ({"image_index": 0, "question_string": "q", "answer": None}, "'answer' should be"),
    ({"image_index": 0, "question_string": "q", "answer": True}, "'answer' should be"),
    ({"image_index": 0, "question_string": "q", "answer": [1]}, "'answer' should be"),
    ({"image_index": 0, "question_string": "q", "answer": ""}, "empty answer"),
    ({"image_index": 0, "question_string": 5, "answer": 1}, "'question_string' should be str"),
    ({"image_index": 0, "question_string": "q", "answer": 1, "template": 3}, "'template' should be str"),
    ([1, 2], "expected an object"),
])
def test_malformed_records_raise_and_skip(tmp_path, bad, message):
    path = _write(tmp_path, [_pair(0, 1), bad, _pair(0, 2)])
    with pytest.raises(DataError, match=message) as e:
        read_plotqa(tmp_path, "test")
    assert str(path) in str(e.value) and "record #1" in str(e.value)
    with pytest.warns(UserWarning):
        ds = read_plotqa(tmp_path, "test", on_error="skip")
    assert [s.answer for s in ds] == ["1", "2"] and ds.skip_log.counts == {"malformed record": 1}


def test_non_finite_answer_is_malformed(tmp_path):
    _write(tmp_path, None, text='{"qa_pairs": [{"image_index": 0, "question_string": "q", "answer": NaN}]}')
    with pytest.raises(DataError, match="malformed record.*finite"):
        read_plotqa(tmp_path, "test")


def test_broken_json_raises_even_when_skipping(tmp_path):
    path = _write(tmp_path, None, text='{"qa_pairs": [' + json.dumps(_pair(0, 1)) + ', {"image_index": 0,, }]}')
    with pytest.raises(DataError, match="invalid JSON") as e:
        read_plotqa(tmp_path, "test", on_error="skip")
    assert str(path) in str(e.value) and "element #1" in str(e.value)
    _write(tmp_path, None, text='{"pairs": []}')
    with pytest.raises(DataError, match="no 'qa_pairs' array"):
        read_plotqa(tmp_path, "test")


def test_unreadable_image_detected_at_read_time_when_verifying(tmp_path):
    _write(tmp_path, [_pair(0, 1), _pair(1, 2)])
    (tmp_path / "test" / "png" / "1.png").write_bytes(b"not a png at all")
    ds = read_plotqa(tmp_path, "test")  # existence only: the bad file is found on use
    assert len(ds) == 2
    with pytest.raises(DataError, match="unreadable image"):
        ds[1].load_image()
    with pytest.raises(DataError, match=r"1\.png: unreadable image.*record #1"):
        read_plotqa(tmp_path, "test", verify_images=True)
    with pytest.warns(UserWarning):
        ds = read_plotqa(tmp_path, "test", on_error="skip", verify_images=True)
    assert len(ds) == 1 and ds.skip_log.counts == {"unreadable image": 1}


def test_index_is_exact_with_small_chunks_unicode_and_other_keys(tmp_path):
    recs = [{"i": i, "s": 'é"]},[' * (i % 5), "n": [1.5, {"x": "ü" * (i % 3)}]} for i in range(200)]
    doc = {"meta": {"k": [1, "]"]}, "qa_pairs": recs, "after": 1}
    for ensure_ascii in (True, False):
        data = b"\xef\xbb\xbf" + json.dumps(doc, ensure_ascii=ensure_ascii, indent=1).encode()
        path = tmp_path / "doc.json"
        path.write_bytes(data)
        for chunk in (1, 5, 64, 1 << 20):
            items = list(iter_json_array(path, "qa_pairs", chunk_bytes=chunk))
            assert [v for _, _, v in items] == recs
            assert all(json.loads(data[a:b]) == v for a, b, v in items)


def test_reading_streams_instead_of_loading_everything(tmp_path, monkeypatch):
    pairs = [_pair(k % 3, k * 0.5, question=f"Question number {k} about the plot?", qid=k) for k in range(2000)]
    _write(tmp_path, pairs, images=(0, 1, 2))
    del pairs
    path = tmp_path / "test" / "qa_pairs_V2.json"
    monkeypatch.setattr(records, "CHUNK_BYTES", 1 << 14)  # a window far smaller than the file
    tracemalloc.start()
    tracemalloc.reset_peak()
    ds = read_plotqa(tmp_path, "test")
    _, stream_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    with open(path) as f:
        everything = json.load(f)
    _, load_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(ds) == len(everything["qa_pairs"]) == 2000
    assert stream_peak < load_peak / 10, (stream_peak, load_peak)
    assert ds[1234].question == "Question number 1234 about the plot?" and ds[1234].answer == "617"
    assert ds[-1].meta["question_id"] == 1999
    limited = read_plotqa(tmp_path, "test", max_records=10)
    assert len(limited) == 10 and limited[9].meta["question_id"] == 9


def test_dataset_pickles_for_worker_processes(tmp_path):
    _write(tmp_path, [_pair(0, 1.5), _pair(0, 2)])
    ds = read_plotqa(tmp_path, "test")
    copy = pickle.loads(pickle.dumps(ds))
    assert [s.answer for s in copy] == ["1.5", "2"]
    assert ds[0:2][1].answer == "2"
    with pytest.raises(IndexError):
        ds[2]


def test_synthetic_plotqa_layout_loads_unchanged(tmp_path):
    from data_synth.charts import write_chart_dataset

    info = write_chart_dataset(tmp_path, "plotqa", 4, seed=7, split="test", questions_per_chart=4)
    ds = read_plotqa(tmp_path, "test")
    charts = [json.loads(line) for line in open(info["data_file"])]
    expected = {q["ref"]["question_id"]: (c["index"], q) for c in charts for q in c["questions"]}
    assert len(ds) == len(expected) == 16
    for s in ds:
        index, q = expected[s.meta["question_id"]]
        assert s.answer == q["answer"] and s.question == q["question"]
        assert s.meta["template"] == q["template"] and s.meta["type"] == q["qtype"]
        assert s.meta["image_index"] == index
        assert s.load_image().size == (512, 400)
