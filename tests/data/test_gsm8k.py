import json
import pickle

import pytest

from vlm_smmd.data import DataError, read_gsm8k

# two problems as openai/grade-school-math publishes them (abridged), and one with a thousands separator
NATALIA = {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
                       "in May. How many clips did Natalia sell altogether in April and May?",
           "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
                     "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"}
BIG = {"question": "A farm has 617 cows and 617 sheep. How many animals are there?",
       "answer": "617+617 = <<617+617=1234>>1,234 animals.\n#### 1,234"}
LOSS = {"question": "It was 3 degrees and fell by 8. What is the temperature?",
        "answer": "3-8=<<3-8=-5>>-5\n#### -5"}


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_final_answers_and_meta(tmp_path):
    _jsonl(tmp_path / "test.jsonl", [NATALIA, BIG, LOSS])
    ds = read_gsm8k(tmp_path, "test")
    assert len(ds) == 3 and ds.skipped == 0
    assert [s.answer for s in ds] == ["72", "1234", "-5"]  # "#### 1,234" is 1234
    s = ds[1]
    assert s.image is None and s.source == "gsm8k" and s.id == "test/1" and s.question == BIG["question"]
    assert s.meta["final_answer"] == "1234" and s.meta["solution"] == BIG["answer"] and s.meta["split"] == "test"
    assert ds[-1].meta["final_answer"] == "-5"
    with pytest.raises(DataError, match="text-only"):
        s.load_image()
    copy = pickle.loads(pickle.dumps(ds))
    assert [x.answer for x in copy[0:3]] == ["72", "1234", "-5"]
    with pytest.raises(IndexError):
        ds[3]


def test_rationale_target_strips_calculator_annotations(tmp_path):
    _jsonl(tmp_path / "train.jsonl", [NATALIA, BIG])
    ds = read_gsm8k(tmp_path, "train", target="rationale")
    assert ds[0].answer == ("Natalia sold 48/2 = 24 clips in May.\n"
                            "Natalia sold 48+24 = 72 clips altogether in April and May.\n#### 72")
    assert ds[1].answer == "617+617 = 1,234 animals.\n#### 1234"  # ends in exactly the final number
    assert "<<" not in ds[0].answer and ds[1].meta["final_answer"] == "1234" and ds[1].meta["target"] == "rationale"
    with pytest.raises(ValueError, match="target must be one of"):
        read_gsm8k(tmp_path, "train", target="steps")


def test_malformed_lines_raise_or_are_counted(tmp_path):
    rows = [NATALIA, "{not json", {"question": "Q?", "answer": "no final line"},
            {"question": "Q?", "answer": "so\n#### twelve"}, {"answer": "#### 3"}, "", BIG, "[1, 2]"]
    path = _jsonl(tmp_path / "test.jsonl", rows)
    with pytest.raises(DataError, match=f"{path}:2: malformed record: not JSON"):
        read_gsm8k(tmp_path, "test")
    with pytest.warns(UserWarning, match="gsm8k: skipped 5 records"):
        ds = read_gsm8k(tmp_path, "test", on_error="skip")
    assert ds.skipped == 5 and ds.skip_log.counts == {"malformed record": 5}
    assert [s.answer for s in ds] == ["72", "1234"] and [s.id for s in ds] == ["test/0", "test/6"]
    messages = " | ".join(ds.skip_log.examples)
    assert f"{path}:3: malformed record: no '####' line" in messages
    assert "'twelve' after '####' is not a number" in messages and "missing key 'question'" in messages
    assert len(read_gsm8k(tmp_path, "test", on_error="skip", max_records=1)) == 1


def test_parquet_layout(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    (tmp_path / "main").mkdir()
    rows = [NATALIA, BIG, {"question": None, "answer": "#### 1"}, LOSS]
    table = pa.table({"question": [r["question"] for r in rows], "answer": [r["answer"] for r in rows]})
    pq.write_table(table, tmp_path / "main" / "test-00000-of-00001.parquet", row_group_size=2)
    with pytest.raises(DataError, match="row 2 of .*test-00000-of-00001.parquet: malformed record: 'question'"):
        read_gsm8k(tmp_path, "test")
    with pytest.warns(UserWarning):
        ds = read_gsm8k(tmp_path, "test", on_error="skip")
    assert [s.answer for s in ds] == ["72", "1234", "-5"] and ds.skipped == 1
    assert [s.id for s in ds] == ["test/0", "test/1", "test/3"]
    with pytest.warns(UserWarning):
        rationales = read_gsm8k(tmp_path / "main", "test", on_error="skip", target="rationale")
    assert rationales[1].answer.endswith("#### 1234")
    pq.write_table(pa.table({"question": ["q"]}), tmp_path / "main" / "train-00000-of-00001.parquet")
    with pytest.raises(DataError, match="missing columns \\['answer'\\]"):
        read_gsm8k(tmp_path, "train")


def test_missing_split(tmp_path):
    with pytest.raises(FileNotFoundError, match="found neither .*test.jsonl"):
        read_gsm8k(tmp_path, "test")
