import json

import pytest

from vlm_smmd.data import DataError, read_svamp

DAN = {"ID": "chal-2", "Body": "Dan had $ 3 left with him after he bought a candy bar. If he had $ 4 at the start",
       "Question": "How much did the candy bar cost?", "Equation": "( 4.0 - 3.0 )", "Answer": 1.0,
       "Type": "Subtraction"}


def _problem(ident, answer, **changes):
    return {**DAN, "ID": ident, "Answer": answer, **changes}


def _write(root, records, text=None):
    root.mkdir(parents=True, exist_ok=True)
    (root / "SVAMP.json").write_text(text if text is not None else json.dumps(records, indent=4), encoding="utf-8")


def test_answers_keep_their_json_text_and_questions(tmp_path):
    _write(tmp_path, [DAN, _problem("chal-3", 8.0), _problem("chal-4", 0.5), _problem("chal-5", 12),
                      _problem("chal-6", 0.1 + 0.2)])
    ds = read_svamp(tmp_path)
    assert [s.answer for s in ds] == ["1", "8", "0.5", "12", "0.30000000000000004"]  # the file's digits
    s = ds[0]
    assert s.question == DAN["Body"] + " " + DAN["Question"] and s.image is None and s.source == "svamp"
    assert s.id == "all/chal-2" and s.meta["final_answer"] == "1" and s.meta["raw_answer"] == 1.0
    assert s.meta["equation"] == "( 4.0 - 3.0 )" and s.meta["type"] == "Subtraction"
    assert [s.id for s in read_svamp(tmp_path, "test")][:2] == ["test/chal-2", "test/chal-3"]
    with pytest.raises(ValueError, match="SVAMP has no split 'train'"):
        read_svamp(tmp_path, "train")


def test_malformed_records(tmp_path):
    bad = [DAN, _problem("chal-3", "8"), {k: v for k, v in DAN.items() if k != "Body"}, 3, _problem("chal-9", 2.5)]
    _write(tmp_path, bad)
    with pytest.raises(DataError, match=r"record #1 in .*SVAMP.json: malformed record: 'Answer' should be int or float"):
        read_svamp(tmp_path)
    with pytest.warns(UserWarning, match="svamp: skipped 3 records"):
        ds = read_svamp(tmp_path, on_error="skip")
    assert [s.answer for s in ds] == ["1", "2.5"] and ds.skip_log.counts == {"malformed record": 3}
    _write(tmp_path, None, text='{"ID": 1}')
    with pytest.raises(DataError, match="expected a JSON list"):
        read_svamp(tmp_path)
    _write(tmp_path, None, text='[{"ID": 1,')
    with pytest.raises(DataError, match="SVAMP.json: invalid JSON"):
        read_svamp(tmp_path)
    with pytest.raises(FileNotFoundError, match="SVAMP.json does not exist"):
        read_svamp(tmp_path / "nowhere")


def test_long_answers_are_not_rounded(tmp_path):
    text = json.dumps([_problem("chal-1", "@")]).replace('"@"', "12345678901234567.0")
    _write(tmp_path, None, text=text)
    s = read_svamp(tmp_path)[0]
    assert s.answer == s.meta["final_answer"] == "12345678901234567"
    assert str(s.meta["raw_answer"]) == "12345678901234567.0"  # the JSON text, as a Decimal
    _write(tmp_path, None, text=json.dumps([_problem("chal-1", "@")]).replace('"@"', "1e5000"))
    with pytest.raises(DataError, match="record #0 .*malformed record: answer number with more than 4300 digits"):
        read_svamp(tmp_path)
