import json

import pytest

from vlm_smmd.data import DataError, read_word_problems
from vlm_smmd.data.tasks import TASKS, read


def _row(i, split="test", **changes):
    row = {"id": f"{split}-{i:08d}", "question": f"Ava has {i + 10} apples. Ava gives 3 to Tom. How many are left?",
           "answer": str(i + 7), "equation": f"{i + 10} - 3", "operands": [str(i + 10), "3"], "distractors": [],
           "template": "loss", "operations": ["sub"], "split": split}
    return {k: v for k, v in (row | changes).items() if v is not ...}


def _write(root, split, rows):
    root.mkdir(parents=True, exist_ok=True)
    (root / "generation.json").write_text(json.dumps({"num": len(rows), "seed": 0}))
    (root / f"{split}.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return root / f"{split}.jsonl"


def test_reads_the_writer_format_unchanged(tmp_path):
    rows = [_row(0), _row(1, distractors=["41"], question="Ava has 11 apples. Tom is 41 years old. Ava gives 3 to "
                                                           "Tom. How many are left?"),
            _row(2, answer="2.50", equation="(5 + 0) / 2", operands=["5", "0", "2"], template="pool_and_split",
                 operations=["add", "div"])]
    _write(tmp_path, "test", rows)
    ds = read_word_problems(tmp_path, "test")
    assert [s.answer for s in ds] == ["7", "8", "2.50"]  # exact strings as written
    s = ds[1]
    assert s.question == rows[1]["question"] and s.id == "test-00000001" and s.image is None
    assert s.source == "word_problems"
    assert s.meta == {"split": "test", "final_answer": "8", "template": "loss", "operations": ["sub"], "steps": 1,
                      "distractor": True, "equation": "11 - 3", "operands": ["11", "3"], "distractors": ["41"],
                      "record": 1}
    assert ds[2].meta["steps"] == 2 and ds[0].meta["distractor"] is False
    assert all(key in s.meta for key in TASKS["word_problems"].breakdowns)  # what evaluation groups by
    assert [x.id for x in read("word_problems", tmp_path, "test")] == [x.id for x in ds]
    assert len(read_word_problems(tmp_path, "test", max_records=2)) == 2


def test_malformed_lines(tmp_path):
    rows = [_row(0), "{oops", _row(2, answer="1/2"), _row(3, split="train"), _row(4, template=...),
            _row(5, operations=[]), _row(6, question="  "), _row(7, operands="11, 3"), "[1, 2]", _row(9)]
    path = _write(tmp_path, "test", rows)
    with pytest.raises(DataError, match=f"^{path}:2: malformed record: not JSON"):
        read_word_problems(tmp_path, "test")
    with pytest.warns(UserWarning, match="word_problems: skipped 8 records"):
        ds = read_word_problems(tmp_path, "test", on_error="skip")
    assert [s.id for s in ds] == ["test-00000000", "test-00000009"] and ds.skipped == 8
    assert sum(ds.skip_log.counts.values()) == 8
    for row, message in ((3, "answer '1/2' is not a plain decimal number"), (4, "'split' is 'train' in test.jsonl"),
                         (5, "missing key 'template'"), (6, "'operations' should be a non-empty list of names"),
                         (7, "empty question"), (8, "'operands' should be list, got str")):
        with pytest.raises(DataError) as e:
            _write(tmp_path / str(row), "test", [rows[row - 1]])
            read_word_problems(tmp_path / str(row), "test")
        assert str(e.value) == f"{tmp_path / str(row) / 'test.jsonl'}:1: malformed record: {message}"
    with pytest.raises(FileNotFoundError, match="splits found in .*: test"):
        read_word_problems(tmp_path, "train")
