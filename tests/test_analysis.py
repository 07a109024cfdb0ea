import json
import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vlm_smmd import analysis
from vlm_smmd.analysis import (
    DigitPair,
    align_digits,
    analyze_records,
    canonical_digits,
    compare_runs,
    digit_places,
    load_predictions,
    swapped_hands,
    write_report,
)
from vlm_smmd.metrics import ClockTime

# ---------------------------------------------------------------------------------------------------------
# Digit alignment


@pytest.mark.parametrize("prediction,target,pairs", [
    ("2.55", "12.5", [(1, 1, None), (0, 2, 2), (-1, 5, 5), (-2, None, 5)]),
    ("99", "100", [(2, 1, None), (1, 0, 9), (0, 0, 9)]),
    ("0.7", "0.07", [(0, 0, 0), (-1, 0, 7), (-2, 7, None)]),
    ("0.07", "0.7", [(0, 0, 0), (-1, 7, 0), (-2, None, 7)]),
    ("7", "0.07", [(0, 0, 7), (-1, 0, None), (-2, 7, None)]),
    ("1234.0", "1,234", [(3, 1, 1), (2, 2, 2), (1, 3, 3), (0, 4, 4)]),
    ("-5", "5", [(0, 5, 5)]),
    ("1.5k", "$1,500", [(3, 1, 1), (2, 5, 5), (1, 0, 0), (0, 0, 0)]),
    ("2.50", "2.5", [(0, 2, 2), (-1, 5, 5)]),
])
def test_align_digits(prediction, target, pairs):
    assert align_digits(prediction, target) == [DigitPair(*p) for p in pairs]


def test_align_digits_non_numeric():
    assert align_digits("seven", "7") is None
    assert align_digits("7", "n/a") is None


def test_canonical_digits():
    assert canonical_digits("-012.50") == ("12", "5", True)
    assert canonical_digits("0.07") == ("0", "07", False)
    assert canonical_digits("12 million") == ("12000000", "", False)
    assert canonical_digits("-0") == ("0", "", False)
    assert canonical_digits("x") is None


@given(st.decimals(min_value=-10**9, max_value=10**9, places=4, allow_nan=False, allow_infinity=False))
def test_digit_places_reconstruct_the_value(value):
    text = format(value, "f")
    places = digit_places(text)
    assert sum(Decimal(d).scaleb(p) for p, d in places.items()) == abs(value)
    assert 0 in places  # always a units digit
    assert min(places) >= -4


# ---------------------------------------------------------------------------------------------------------
# Swapped hands


def test_swapped_hands():
    t = ClockTime(2, 50)  # minute hand at 10 o'clock, hour hand at 14.17 minutes
    assert swapped_hands(ClockTime(10, 14), t)
    assert swapped_hands(ClockTime(10, 10), t)  # hour * 5 reading of the hour hand
    assert swapped_hands(ClockTime(22, 19), t)  # 4.83 minutes away, within 5
    assert not swapped_hands(ClockTime(10, 20), t)  # 5.83 minutes away
    assert not swapped_hands(ClockTime(11, 14), t)
    assert not swapped_hands(ClockTime(2, 50), t)  # correct is never swapped
    assert swapped_hands(ClockTime(10, 20), t, tolerance=6.0)
    # circular on the minute dial: hour hand of 11:55 points at 59.58 minutes
    assert swapped_hands(ClockTime(11, 2), ClockTime(11, 55))
    # 11:05: minute hand at 1 o'clock, hour hand at 55.42 minutes
    assert swapped_hands(ClockTime(1, 55), ClockTime(11, 5))
    assert not swapped_hands(ClockTime(11, 55), ClockTime(11, 5))


# ---------------------------------------------------------------------------------------------------------
# Planted errors


def _rec(i, target, prediction, source="chartqa", **extra):
    rec = {"id": f"r{i}", "source": source, "question": "q?", "prediction": prediction, **extra}
    if isinstance(target, list):
        rec["targets"] = target
    else:
        rec["target"] = target
    return rec


PLANTED = [
    # numeric (chartqa): (target, prediction)
    ("47", "47"),  # A correct
    ("35", "65"),  # B tens error 3 -> 6
    ("128", "118"),  # C tens error 2 -> 1
    ("12.5", "22.5"),  # D tens error 1 -> 2
    ("7", "70"),  # E one integer digit too many (extra tens digit, units 7 -> 0), magnitude error
    ("3.25", "3.2"),  # F hundredths missing (one fraction digit too few)
    ("45%", "45"),  # G same digits (relaxed accuracy fails: 45 vs 0.45)
    (["1,234", "1234"], "1234"),  # H several labels; digits from the first
    ("60", "sixty"),  # I non-numeric prediction
    ("-5", "5"),  # J sign error
    ("0", "0"),  # K zero target
    ("Democrat", "democrat"),  # L non-numeric target
]
PLANTED_CLOCKS = [
    ("10:07", "10:07"),  # M exact
    ("12:03", "11:58"),  # N gap 5 across 12:00, hour and minute wrong
    ("2:50", "10:14"),  # O swapped hands, gap 276
    ("3:15", "3:40"),  # P hour only, gap 25
    ("4:30", "I don't know"),  # Q no time
    ("unknown", "3:00"),  # R clock source, target holds no time
    ("9:20", "5:20"),  # S minute only, gap 240
]


def planted_records():
    recs = [_rec(i, t, p) for i, (t, p) in enumerate(PLANTED)]
    recs += [_rec(100 + i, t, p, source="clocks", raw_output=p) for i, (t, p) in enumerate(PLANTED_CLOCKS)]
    return recs


def perfect_records():
    return [{**r, "prediction": (r.get("targets") or [r.get("target")])[0]} for r in planted_records()]


def test_planted_errors_are_reported_exactly():
    a = analyze_records(planted_records())
    assert a["records"] == 19
    assert a["kinds"] == {"numeric": 11, "non_numeric_target": 1, "clock": 6, "clock_non_time_target": 1}
    assert sum(a["kinds"].values()) == a["records"]
    assert a["exact_match"] == pytest.approx(5 / 19)  # A, H (second label), K, L, M
    assert a["relaxed_accuracy"] == pytest.approx(6 / 19)  # A, F, H, K, L, M
    assert a["by_source"]["chartqa"]["records"] == 12 and a["by_source"]["clocks"]["records"] == 7

    n = a["numeric"]
    assert (n["records"], n["non_numeric_predictions"], n["analysed"]) == (11, 1, 10)
    assert n["value_exact"] == 4  # A, G, H, K
    tens = n["places"]["tens"]
    assert (tens["target_digits"], tens["correct"], tens["wrong"], tens["missing"], tens["extra"]) == (6, 3, 3, 0, 1)
    assert tens["accuracy"] == 0.5
    units = n["places"]["units"]
    assert (units["target_digits"], units["correct"], units["wrong"], units["missing"], units["extra"]) == (10, 9, 1, 0, 0)
    hundredths = n["places"]["hundredths"]
    assert (hundredths["target_digits"], hundredths["correct"], hundredths["missing"]) == (1, 0, 1)
    assert [k for k in n["places"]] == ["thousands", "hundreds", "tens", "units", "tenths", "hundredths"]
    assert n["places"]["hundreds"]["correct"] == 2 and n["places"]["thousands"]["correct"] == 1
    assert n["places"]["tenths"]["correct"] == 2
    assert n["digit_accuracy"] == pytest.approx(17 / 22)
    assert n["first_wrong_place"] == {"tens": 4, "hundredths": 1}
    assert n["all_digits_correct"] == 5  # A, G, H, J (sign aside), K
    assert n["sign_errors"] == 1
    assert n["length_errors"] == {"int_too_many": 1, "int_too_few": 0, "frac_too_many": 0, "frac_too_few": 1}
    assert n["magnitude_errors"] == 1

    conf = n["confusion"]
    assert sum(map(sum, conf)) == 21 and sum(conf[d][d] for d in range(10)) == 17
    assert conf[3][6] == conf[2][1] == conf[1][2] == conf[7][0] == 1
    assert n["digit_error_histogram"] == [17, 2, 0, 1, 0, 0, 0, 1, 0, 0]

    rel = n["relative_error"]
    assert (rel["nonzero_target_records"], rel["zero_target_records"]) == (10, 1)
    assert len(rel["values"]) == 9
    assert rel["cdf"]["0.0"] == 0.3 and rel["cdf"]["0.05"] == 0.4 and rel["cdf"]["0.1"] == 0.5
    assert rel["cdf"]["1.0"] == 0.7  # E (9x), J (2x) and the non-numeric I stay above
    assert rel["values"][-1] == pytest.approx(9.0)

    c = a["clock"]
    assert (c["records"], c["no_time"], c["exact"]) == (6, 1, 1)
    assert (c["hour_correct"], c["minute_correct"]) == (2, 2)
    assert (c["both_correct"], c["hour_only"], c["minute_only"], c["neither"]) == (1, 1, 1, 2)
    assert c["swapped_hands"] == 1
    assert c["gaps"] == [0.0, 5.0, 25.0, 240.0, 276.0]
    assert c["within_minutes"] == {"0": 1, "1": 1, "5": 2, "10": 2, "15": 2, "30": 3, "60": 3}
    assert c["within_minutes_rate"]["5"] == pytest.approx(2 / 6)
    assert {b["label"]: b["count"] for b in c["gap_buckets"]} == {
        "0": 1, "(0, 1]": 0, "(1, 5]": 1, "(5, 15]": 0, "(15, 30]": 1, "(30, 60]": 0, "(60, 180]": 0, "(180, 360]": 2}
    assert c["mean_gap"] == pytest.approx(546 / 5) and c["median_gap"] == 25.0
    json.dumps(a, allow_nan=False)  # strict JSON


def test_perfect_run():
    a = analyze_records(perfect_records())
    n, c = a["numeric"], a["clock"]
    assert n["non_numeric_predictions"] == 0 and n["digit_accuracy"] == 1.0 and n["value_exact"] == 11
    assert n["first_wrong_place"] == {} and n["magnitude_errors"] == 0 and n["sign_errors"] == 0
    assert c["exact"] == 6 and c["swapped_hands"] == 0 and c["no_time"] == 0
    rows = compare_runs({"ce": analyze_records(planted_records()), "smmd": a})
    assert rows["digit accuracy: tens"] == {"ce": 0.5, "smmd": 1.0}
    assert rows["swapped hands"] == {"ce": 1, "smmd": 0}
    assert rows["records"] == {"ce": 19, "smmd": 19}


def test_bad_records_name_the_place(tmp_path):
    with pytest.raises(ValueError, match=r"record 1 \(id 'x'\): missing field 'prediction'"):
        analyze_records([_rec(0, "1", "1"), {"id": "x", "source": "s", "question": "q", "target": "1"}])
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(_rec(0, "1", "1")) + "\n\n" + json.dumps(_rec(1, 5, "1")) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:3 (id 'r1'): field 'target' must be a string")):
        load_predictions(path)
    path.write_text(json.dumps(_rec(0, [], "1")) + "\n")
    with pytest.raises(ValueError, match="non-empty list"):
        load_predictions(path)
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:1: not valid JSON")):
        load_predictions(path)


# ---------------------------------------------------------------------------------------------------------
# CLI and report


def _write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_analyze_cli_compares_two_runs(tmp_path, capsys):
    ce = _write_jsonl(tmp_path / "ce" / "predictions.jsonl", planted_records())
    smmd = _write_jsonl(tmp_path / "smmd" / "predictions.jsonl", perfect_records())
    out = tmp_path / "report"
    assert analysis.main([str(ce), str(smmd), "--out", str(out), "--names", "CE,SMMD"]) == 0
    assert "report:" in capsys.readouterr().out

    data = json.loads((out / "analysis.json").read_text())
    assert list(data["runs"]) == ["CE", "SMMD"]
    assert data["runs"]["CE"]["clock"]["swapped_hands"] == 1
    assert data["comparison"]["digit accuracy: tens"] == {"CE": 0.5, "SMMD": 1.0}
    assert data["inputs"] == {"CE": str(ce), "SMMD": str(smmd)}

    expected = {"place_accuracy.png", "digit_error.png", "first_wrong_place.png", "relative_error_cdf.png",
                "confusion_0_CE.png", "confusion_1_SMMD.png", "clock_gap_hist.png", "clock_breakdown.png"}
    assert {p.name for p in out.glob("*.png")} == expected
    for name in expected:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    report = (out / "report.md").read_text()
    assert set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)) == expected  # every image embedded, by relative path
    assert "| metric | CE | SMMD |" in report
    assert "| tens | 0.500 (3/6; 0 missing, 1 extra) | 1.000 (7/7; 0 missing, 0 extra) |" in report
    assert "| non-numeric predictions (left out of the digit tables) | 1 | 0 |" in report
    assert "| non_numeric_target | 1 | 1 |" in report
    assert "| clock_non_time_target | 1 | 1 |" in report
    assert "| swapped hands | 1 (0.167) | 0 (0.000) |" in report
    assert "do not cover the same record ids" not in report


def test_analyze_cli_default_names_and_notes(tmp_path):
    a = _write_jsonl(tmp_path / "a" / "predictions.jsonl", planted_records()[:12])  # numeric only
    b = _write_jsonl(tmp_path / "b" / "predictions.jsonl", planted_records()[:5])
    out = tmp_path / "out"
    assert analysis.main([str(a), str(b), "--out", str(out)]) == 0
    data = json.loads((out / "analysis.json").read_text())
    assert list(data["runs"]) == ["a", "b"]
    assert "clock_gap_hist.png" not in {p.name for p in out.glob("*.png")}
    report = (out / "report.md").read_text()
    assert "## Clock answers" not in report and "## Numeric answers" in report
    assert "do not cover the same record ids" in report


def test_analyze_cli_errors(tmp_path, capsys):
    good = _write_jsonl(tmp_path / "p.jsonl", planted_records())
    with pytest.raises(SystemExit) as e:
        analysis.main([str(good), "--out", str(tmp_path / "o"), "--names", "a,b"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        analysis.main([str(good), str(good), "--out", str(tmp_path / "o"), "--names", "a,a"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "source": "s", "question": "q", "target": "1"}) + "\n")
    assert analysis.main([str(bad), "--out", str(tmp_path / "o")]) == 1
    assert f"{bad}:1 (id 1): missing field 'prediction'" in capsys.readouterr().err
    assert analysis.main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]) == 1


def test_write_report_single_run(tmp_path):
    report = write_report({"only": analyze_records(planted_records())}, tmp_path / "r")
    text = report.read_text()
    assert "| metric | only |" in text and "## Clock answers" in text
    assert (tmp_path / "r" / "confusion_0_only.png").exists()
