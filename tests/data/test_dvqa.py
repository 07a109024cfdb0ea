import json

import pytest

from tests.conftest import make_image
from vlm_smmd.data import DataError, read_dvqa
from vlm_smmd.data.dvqa import question_type


def _qa(qid, image, answer, template_id="data", question="How many bars are there?"):
    return {"question_id": qid, "image": image, "question": question, "answer": answer,
            "template_id": template_id, "answer_bbox": []}


def _write(root, records, split="val_easy", images=("bar_val_easy_00000000.png",), under_qa=True):
    (root / "images").mkdir(parents=True, exist_ok=True)
    for name in images:
        make_image(seed=3).save(root / "images" / name)
    folder = root / "qa" if under_qa else root
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{split}_qa.json"
    path.write_text(json.dumps(records))
    return path


def test_word_and_number_answers_and_question_types(tmp_path):
    img = "bar_val_easy_00000000.png"
    records = [
        _qa(1, img, "three", "structure"),
        _qa(2, img, "7", "data", "What is the value of the largest bar?"),
        _qa(3, img, "pair", "reasoning", "Which bar has the largest value?"),
        _qa(4, img, 7, "reasoning_2"),
        _qa(5, img, "no", "Structure_3"),
        {"question_id": 6, "image": img, "question": "q", "answer": "yes", "template_id": "odd",
         "bbox_answer": [1, 2, 3, 4]},
    ]
    _write(tmp_path, records)
    ds = read_dvqa(tmp_path, "val_easy")
    assert [s.answer for s in ds] == ["three", "7", "pair", "7", "no", "yes"]
    assert [s.meta["template_id"] for s in ds] == ["structure", "data", "reasoning", "reasoning_2", "Structure_3", "odd"]
    assert [s.meta["question_type"] for s in ds] == ["structure", "data", "reasoning", "reasoning", "structure", None]
    s = ds[1]
    assert s.id == "val_easy/2" and s.source == "dvqa" and s.question == "What is the value of the largest bar?"
    assert str(s.image).endswith("images/bar_val_easy_00000000.png")
    assert s.load_image().tobytes() == make_image(seed=3).tobytes()
    assert ds[5].meta["answer_bbox"] == [1, 2, 3, 4]


def test_question_type_names():
    assert [question_type(t) for t in ("structure", "data", "reasoning", "data_retrieval", None, "x")] == [
        "structure", "data", "reasoning", "data", None, None]


def test_qa_file_at_root_also_found(tmp_path):
    _write(tmp_path, [_qa(1, "bar_val_easy_00000000.png", "2")], under_qa=False)
    assert read_dvqa(tmp_path, "val_easy")[0].answer == "2"
    with pytest.raises(FileNotFoundError, match="train_qa.json"):
        read_dvqa(tmp_path, "train")


def test_missing_and_escaping_images_raise_and_skip(tmp_path):
    ok = "bar_val_easy_00000000.png"
    records = [_qa(1, ok, "1"), _qa(2, "bar_val_easy_00000009.png", "2"), _qa(3, "../qa/val_easy_qa.json", "3"),
               _qa(4, "/tmp/x.png", "4"), _qa(5, ok, "5")]
    path = _write(tmp_path, records)
    with pytest.raises(DataError) as e:
        read_dvqa(tmp_path, "val_easy")
    msg = str(e.value)
    assert "bar_val_easy_00000009.png" in msg and "image missing" in msg and "record #1" in msg and str(path) in msg
    with pytest.warns(UserWarning, match="dvqa: skipped 3 records"):
        ds = read_dvqa(tmp_path, "val_easy", on_error="skip")
    assert [s.id for s in ds] == ["val_easy/1", "val_easy/5"] and ds.skipped == 3
    assert ds.skip_log.counts == {"image missing": 1, "leaves the dataset root": 2}


@pytest.mark.parametrize("bad, message", [
    ({"image": "bar_val_easy_00000000.png", "question": "q"}, "missing key 'answer'"),
    ({"image": "bar_val_easy_00000000.png", "answer": "1"}, "missing key 'question'"),
    ({"question": "q", "answer": "1"}, "missing key 'image'"),
    ({"image": "bar_val_easy_00000000.png", "question": "q", "answer": "  "}, "empty answer"),
    ({"image": "bar_val_easy_00000000.png", "question": "q", "answer": "1", "template_id": 4}, "'template_id'"),
    ("just a string", "expected an object"),
])
def test_malformed_records(tmp_path, bad, message):
    path = _write(tmp_path, [_qa(1, "bar_val_easy_00000000.png", "1"), bad])
    with pytest.raises(DataError, match=message) as e:
        read_dvqa(tmp_path, "val_easy")
    assert "record #1" in str(e.value) and str(path) in str(e.value)
    with pytest.warns(UserWarning):
        ds = read_dvqa(tmp_path, "val_easy", on_error="skip")
    assert len(ds) == 1 and ds.skip_log.counts == {"malformed record": 1}


def test_unreadable_image(tmp_path):
    _write(tmp_path, [_qa(1, "bad.png", "1")], images=())
    (tmp_path / "images" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    ds = read_dvqa(tmp_path, "val_easy")
    with pytest.raises(DataError, match="bad.png: unreadable image"):
        ds[0].load_image()
    with pytest.raises(DataError, match="unreadable image.*record #0"):
        read_dvqa(tmp_path, "val_easy", verify_images=True)


def test_synthetic_dvqa_layout_loads_unchanged(tmp_path):
    from data_synth.charts import write_chart_dataset

    info = write_chart_dataset(tmp_path, "dvqa", 4, seed=11, split="val_hard", questions_per_chart=5)
    ds = read_dvqa(tmp_path, "val_hard")
    charts = [json.loads(line) for line in open(info["data_file"])]
    expected = {q["ref"]["question_id"]: (c, q) for c in charts for q in c["questions"]}
    assert len(ds) == len(expected) == 20
    for s in ds:
        chart, q = expected[s.meta["question_id"]]
        assert (s.question, s.answer, s.meta["template_id"]) == (q["question"], q["answer"], q["template_id"])
        assert s.meta["question_type"] in ("structure", "data", "reasoning")
        assert s.meta["image_name"] == chart["image"].rsplit("/", 1)[1]
    assert max(len(ds[k].load_image().getcolors(1 << 20)) for k in range(3)) > 10  # a drawn chart


def test_number_answers_keep_their_json_text(tmp_path):
    img = "bar_val_easy_00000000.png"
    text = json.dumps([_qa(1, img, "@"), _qa(2, img, "\u200b")]).replace('"@"', "98765432109876543.25")
    path = _write(tmp_path, [])
    path.write_text(text)
    with pytest.raises(DataError, match=r"record #1 .*empty answer"):
        read_dvqa(tmp_path, "val_easy")
    with pytest.warns(UserWarning, match="1 malformed record"):
        ds = read_dvqa(tmp_path, "val_easy", on_error="skip")
    assert [s.answer for s in ds] == ["98765432109876543.25"]
