"""read_clockqa and read_clockbench on small parquet files written with pyarrow in their layouts: seconds kept,
per-type breakdown, ClockBench's accepted readings and impossible clocks, malformed rows."""

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vlm_smmd.data import DataError, read_clockbench, read_clockqa
from vlm_smmd.data.itsabouttime import coverage_line
from vlm_smmd.evaluation import score_prediction, summarize


def png(color=(255, 255, 255)):
    buf = io.BytesIO()
    Image.new("RGB", (42, 42), color).save(buf, "PNG")
    return buf.getvalue()


IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def write_clockqa(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"image": pa.array([{"bytes": b, "path": None} for b, *_ in rows], IMAGE),
                      "question": [q for _, q, _, _ in rows], "answer": [a for *_, a, _ in rows],
                      "type": [t for *_, t in rows]})
    pq.write_table(table, path)


def target(valid=True, hours=3, minutes=7, seconds=15):
    return json.dumps({"valid": False} if not valid else {"valid": True, "hours": hours, "minutes": minutes,
                                                           "seconds": seconds, "date": False})


def write_clockbench(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [r[0] for r in rows], "image": pa.array([{"bytes": png(), "path": None}] * len(rows), IMAGE),
                      "question_time": ["What time is it? ... JSON"] * len(rows), "target_time": [r[1] for r in rows],
                      "question_shift": ["add 2 hours"] * len(rows), "target_shift": ["{}"] * len(rows)})
    pq.write_table(table, path)


def test_clockqa_rows_keep_seconds_and_type(tmp_path):
    write_clockqa(tmp_path / "data" / "test-00000-of-00001.parquet",
                  [(png(), "What time is it?", "3:07:15", "roman"), (png((0, 0, 0)), "Time?", "12:00:00", "black dial"),
                   (png(), "What time?", "10:10", "no second hand")])
    samples = read_clockqa(tmp_path)
    assert [s.answer for s in samples] == ["3:07:15", "12:00:00", "10:10"]
    assert [s.meta["type"] for s in samples] == ["roman", "black dial", "no second hand"]
    assert samples[0].source == "clockqa" and samples[0].load_image().size == (42, 42)
    assert samples[1].load_image().getpixel((0, 0)) == (0, 0, 0)
    # the clock metrics read H:MM:SS: seconds must match for exact, the gap counts them
    scores = score_prediction("3:07:15", [samples[0].answer], "clockqa")
    assert scores["time_exact"] == 1.0 and scores["time_gap_minutes"] == 0.0
    scores = score_prediction("3:08:45", [samples[0].answer], "clockqa")
    assert scores["time_exact"] == 0.0 and scores["time_gap_minutes"] == 1.5 and scores["within_1_min"] == 0.0


def test_clockqa_per_type_breakdown_in_the_metrics(tmp_path):
    write_clockqa(tmp_path / "test-0.parquet", [(png(), "q", "3:07:15", "roman"), (png(), "q", "4:00:00", "roman"),
                                                (png(), "q", "5:30:00", "arrow hands")])
    records = []
    for s, prediction in zip(read_clockqa(tmp_path), ["3:07:15", "4:01:00", "5:30:00"]):
        records.append({"source": s.source, "split": "test", "meta": s.meta,
                        "scores": score_prediction(prediction, [s.answer], s.source)})
    by_type = summarize(records)["sources"]["clockqa"]["test"]["by"]["type"]
    assert by_type["roman"]["count"] == 2 and by_type["roman"]["time_exact"] == 0.5
    assert by_type["arrow hands"]["time_exact"] == 1.0


@pytest.mark.parametrize("row, reason", [
    ((None, "q", "3:07", "t"), "image missing"),
    ((png(), " ", "3:07", "t"), "blank question"),
    ((png(), "q", "3 o'clock", "t"), "is not a time"),
    ((png(), "q", "25:07", "t"), "hour 25"),
    ((png(), "q", "3:67:00", "t"), "is not a time"),
])
def test_clockqa_malformed_rows_name_file_and_row_or_are_skipped(tmp_path, row, reason):
    path = tmp_path / "test-0.parquet"
    write_clockqa(path, [(png(), "q", "3:07", "t"), row])
    with pytest.raises(DataError, match=reason) as err:
        read_clockqa(tmp_path)
    assert f"row 1 of {path}" in str(err.value)
    with pytest.warns(UserWarning, match="skipped 1"):
        samples = read_clockqa(tmp_path, on_error="skip")
    assert len(samples) == 1 and samples.skipped == 1


def test_layout_errors(tmp_path):
    write_clockqa(tmp_path / "train-0.parquet", [(png(), "q", "3:07", "t")])
    with pytest.raises(DataError, match="no parquet files of split 'test' \\(splits found: train\\)"):
        read_clockqa(tmp_path)
    pq.write_table(pa.table({"image": [b"x"], "question": ["q"]}), tmp_path / "test-0.parquet")
    with pytest.raises(DataError, match=r"missing columns \['answer', 'type'\]"):
        read_clockqa(tmp_path)


def test_clockbench_readings_alternatives_and_impossible_clocks(tmp_path):
    write_clockbench(tmp_path / "default" / "train" / "0000.parquet", [
        ("white_1", target(hours=12, minutes=25, seconds=15)),
        ("white_5", target(valid=False)),
        ("white_circular_numbers_1", target(hours=1, minutes=[4, 5], seconds=45)),
        ("white_circular_numbers_2", target(hours=5, minutes=21, seconds=False)),
    ])
    samples = read_clockbench(tmp_path)
    assert [s.id for s in samples] == ["white_1", "white_circular_numbers_1", "white_circular_numbers_2"]
    assert [s.answer for s in samples] == ["12:25:15", "1:04:45", "5:21"]
    assert samples[1].meta["answers"] == ["1:04:45", "1:05:45"]
    assert [s.meta["type"] for s in samples] == ["white", "white_circular_numbers", "white_circular_numbers"]
    assert samples[0].question == "What time does the clock show?"
    assert samples[0].meta["question_original"].startswith("What time is it?")
    cov = samples.coverage
    assert (cov["rows"], cov["present"], cov["missing"], cov["missing_examples"]) == (4, 3, 1, ["white_5"])
    assert coverage_line(cov) == "3 of 4 rows present; 1 impossible clocks (valid: false) not scored (e.g. white_5)"
    # either accepted minute scores: eval takes the reading nearest the prediction
    assert score_prediction("1:05:45", samples[1].meta["answers"], "clockbench")["time_exact"] == 1.0
    assert score_prediction("1:04:45", samples[1].meta["answers"], "clockbench")["time_exact"] == 1.0
    assert score_prediction("1:06:45", samples[1].meta["answers"], "clockbench")["time_gap_minutes"] == 1.0


@pytest.mark.parametrize("bad, reason", [
    ("not json", "is not a JSON object with 'valid'"),
    (json.dumps({"hours": 3}), "with 'valid'"),
    (target(hours=24), "target hours 24"),
    (target(minutes=[]), "target minutes \\[\\]"),
    (target(seconds="15"), "target seconds '15'"),
])
def test_clockbench_malformed_targets(tmp_path, bad, reason):
    write_clockbench(tmp_path / "train-0.parquet", [("white_1", target()), ("white_2", bad)])
    with pytest.raises(DataError, match=reason) as err:
        read_clockbench(tmp_path)
    assert "row 1 of" in str(err.value) and "(white_2)" in str(err.value)
    with pytest.warns(UserWarning):
        assert len(read_clockbench(tmp_path, on_error="skip")) == 1
