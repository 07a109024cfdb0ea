import json

import pytest

from vlm_smmd.data import DataError, read_arithmetic


def _row(i, a, b, op, answer, split="test"):
    return {"id": f"{split}-{i:06d}", "question": f"What is {a} {op} {b}?", "answer": answer,
            "operation": {"+": "add", "-": "sub", "*": "mul", "/": "div"}[op], "operands": [a, b], "split": split}


def _write(root, split, rows):
    root.mkdir(parents=True, exist_ok=True)
    (root / "generation.json").write_text(json.dumps({"num": len(rows), "seed": 0}))
    (root / f"{split}.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return root / f"{split}.jsonl"


def test_reads_the_writer_format_unchanged(tmp_path):
    rows = [_row(0, "123", "45", "*", "5535"), _row(1, "7", "12", "-", "-5"), _row(2, "3", "2", "/", "1.50")]
    _write(tmp_path, "test", rows)
    ds = read_arithmetic(tmp_path, "test")
    assert [s.answer for s in ds] == ["5535", "-5", "1.50"]  # exact strings, fixed-point places kept
    s = ds[0]
    assert s.question == "What is 123 * 45?" and s.id == "test-000000" and s.image is None
    assert s.source == "arithmetic" and s.meta["final_answer"] == "5535" and s.meta["operation"] == "mul"
    assert s.meta["operands"] == ["123", "45"] and s.meta["split"] == "test"


def test_malformed_lines(tmp_path):
    rows = [_row(0, "1", "2", "+", "3"), "{oops", _row(2, "1", "2", "/", "1/2"), _row(3, "1", "1", "+", "2", "train"),
            {k: v for k, v in _row(4, "1", "1", "+", "2").items() if k != "operands"}, _row(5, "2", "2", "*", "4")]
    path = _write(tmp_path, "test", rows)
    with pytest.raises(DataError, match=f"{path}:2: malformed record"):
        read_arithmetic(tmp_path, "test")
    with pytest.warns(UserWarning, match="arithmetic: skipped 4 records"):
        ds = read_arithmetic(tmp_path, "test", on_error="skip")
    assert [s.answer for s in ds] == ["3", "4"] and ds.skipped == 4
    messages = " | ".join(ds.skip_log.examples)
    assert "answer '1/2' is not a plain decimal number" in messages and "'split' is 'train' in test.jsonl" in messages
    with pytest.raises(FileNotFoundError, match="splits found in .*: test"):
        read_arithmetic(tmp_path, "train")
