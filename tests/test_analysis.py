import json
import re
import struct
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
from vlm_smmd.analysis.formatting import fmt, md_cell, md_table, new_figure, save_figure, series_color
from vlm_smmd.cli import main as cli
from vlm_smmd.metrics import ClockTime, relaxed_accuracy


def analyze(argv):
    return cli(["analyze", *argv])

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
    assert a["kinds"] == {"numeric": 11, "non_numeric_target": 1, "clock": 6, "clock_non_time_target": 1,
                          "grounding": 0, "grounding_bad_target": 0}
    assert sum(a["kinds"].values()) == a["records"]
    assert a["exact_match"] == pytest.approx(5 / 19)  # A, H (second label), K, L, M
    assert a["relaxed_accuracy"] == pytest.approx(5 / 12)  # over the chart records: A, F, H, K, L
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

    # |p - t| over the 10 parsed: A 0, B 30, C 10, D 10, E 63, F 0.05, G 0, H 0, J 10, K 0
    assert n["abs_error"]["mean"] == pytest.approx(123.05 / 10) and n["abs_error"]["n"] == 10
    assert n["within_abs"] == {"0": 4, "1": 5, "2": 5, "5": 5, "10": 8}  # of 11: the non-numeric I misses
    assert n["within_abs_rate"]["1"] == pytest.approx(5 / 11)
    assert n["within_relative"]["0.05"] == 5  # A, F (1.5%), G, H, K (zero target: exact)

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
    assert c["analysed"] == 5 and c["mean_gap_worst_case"] == pytest.approx((546 + 360) / 6)
    # clock digits: targets 10:07 12:03 2:50 3:15 9:20 (4:30 holds no prediction time)
    places = {k: (v["correct"], v["target_digits"], v["missing"], v["extra"]) for k, v in c["places"].items()}
    assert places == {"hour tens": (2, 2, 0, 1),  # 10, 12 (from 11:58) right; 10:14 for 2:50 has an extra one
                      "hour units": (2, 5, 0, 0), "minute tens": (2, 5, 0, 0), "minute units": (2, 5, 0, 0)}
    json.dumps(a, allow_nan=False)  # strict JSON


def test_perfect_run():
    a = analyze_records(perfect_records())
    n, c = a["numeric"], a["clock"]
    assert n["non_numeric_predictions"] == 0 and n["digit_accuracy"] == 1.0 and n["value_exact"] == 11
    assert n["first_wrong_place"] == {} and n["magnitude_errors"] == 0 and n["sign_errors"] == 0
    assert c["exact"] == 6 and c["swapped_hands"] == 0 and c["no_time"] == 0
    rows = compare_runs({"ce": analyze_records(planted_records()), "smmd": a})
    assert rows["digit accuracy: tens"] == {"ce": 0.5, "smmd": 1.0}
    assert rows["clock digit accuracy: hour units"] == {"ce": 0.4, "smmd": 1.0}
    assert rows["answer holds no time"] == {"ce": pytest.approx(1 / 6), "smmd": 0.0}
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


@pytest.mark.slow
def test_analyze_cli_compares_two_runs(tmp_path, capsys):
    ce = _write_jsonl(tmp_path / "ce" / "predictions.jsonl", planted_records())
    smmd = _write_jsonl(tmp_path / "smmd" / "predictions.jsonl", perfect_records())
    out = tmp_path / "report"
    assert analyze([str(ce), str(smmd), "--out", str(out), "--names", "CE,SMMD"]) == 0
    assert "report:" in capsys.readouterr().out

    data = json.loads((out / "analysis.json").read_text())
    assert list(data["runs"]) == ["CE", "SMMD"]
    assert data["runs"]["CE"]["clock"]["swapped_hands"] == 1
    assert data["comparison"]["digit accuracy: tens"] == {"CE": 0.5, "SMMD": 1.0}
    assert data["inputs"] == {"CE": str(ce), "SMMD": str(smmd)}

    expected = {"place_accuracy.png", "digit_error.png", "first_wrong_place.png", "relative_error_cdf.png",
                "abs_within.png", "confusion_0_CE.png", "confusion_1_SMMD.png", "clock_gap_hist.png",
                "clock_breakdown.png", "clock_place_accuracy.png", "clock_digit_error.png",
                "clock_confusion_0_CE.png", "clock_confusion_1_SMMD.png"}
    assert {p.name for p in out.glob("*.png")} == expected
    for name in expected:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    report = (out / "report.md").read_text()
    assert set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)) == expected  # every image embedded, by relative path
    assert "| figure | over | CE | SMMD | chance | best constant |" in report
    assert "| tens | 0.500 (3/6; 0 missing, 1 extra) | 1.000 (7/7; 0 missing, 0 extra) |" in report
    assert "| answers holding no number (left out of the digit tables and the MAE) | 1 | 0 |" in report
    assert "| non_numeric_target | 1 | 1 |" in report
    assert "| clock_non_time_target | 1 | 1 |" in report
    assert "| swapped hands | 1/6 (0.167) | 0/6 (0.000) |" in report
    assert "do not cover the same record ids" not in report


def test_analyze_cli_default_names_and_notes(tmp_path):
    a = _write_jsonl(tmp_path / "a" / "predictions.jsonl", planted_records()[:12])  # numeric only
    b = _write_jsonl(tmp_path / "b" / "predictions.jsonl", planted_records()[:5])
    out = tmp_path / "out"
    assert analyze([str(a), str(b), "--out", str(out)]) == 0
    data = json.loads((out / "analysis.json").read_text())
    assert list(data["runs"]) == ["a", "b"]
    assert "clock_gap_hist.png" not in {p.name for p in out.glob("*.png")}
    report = (out / "report.md").read_text()
    assert "## Clock answers" not in report and "## Numeric answers" in report
    assert "do not cover the same record ids" in report


def test_analyze_cli_errors(tmp_path, capsys):
    good = _write_jsonl(tmp_path / "p.jsonl", planted_records())
    assert analyze([str(good), "--out", str(tmp_path / "o"), "--names", "a,b"]) == 2
    assert analyze([str(good), str(good), "--out", str(tmp_path / "o"), "--names", "a,a"]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "source": "s", "question": "q", "target": "1"}) + "\n")
    assert analyze([str(bad), "--out", str(tmp_path / "o")]) == 1
    assert f"{bad}:1 (id 1): missing field 'prediction'" in capsys.readouterr().err
    assert analyze([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")]) == 1


@pytest.mark.slow
def test_write_report_single_run(tmp_path):
    report = write_report({"only": analyze_records(planted_records())}, tmp_path / "r")
    text = report.read_text()
    assert "| figure | over | only | chance | best constant |" in text and "## Clock answers" in text
    assert (tmp_path / "r" / "confusion_0_only.png").exists()


@pytest.mark.slow
def test_source_names_match_the_task_registry_case_insensitively(tmp_path):
    recs = [_rec(i, "100", "103", source=src) for i, src in enumerate(["ChartQA", "chartqa", "PLOTQA"])]
    recs += [_rec(3, "12:05", "12:05", source="Clocks"), _rec(4, "100", "103", source="my_charts"),
             _rec(5, "7", "7", source="my_charts"), _rec(6, "8", "8", source="Other")]
    a = analyze_records(recs)
    assert a["chart_records"] == 3 and a["relaxed_accuracy"] == 1.0  # "ChartQA" scored as chartqa
    assert a["by_source"]["chartqa"]["records"] == 2 and a["by_source"]["plotqa"]["relaxed_accuracy"] == 1.0
    assert a["kinds"]["clock"] == 1 and a["clock"]["records"] == 1
    assert a["unknown_sources"] == {"Other": 1, "my_charts": 2}  # counted, never scored as a chart source
    assert a["by_source"]["my_charts"]["records"] == 2
    text = write_report({"run": a}, tmp_path / "r").read_text()
    assert "run has sources that name no task**: 'Other' (1 records), 'my_charts' (2 records)" in text
    assert "no task" not in write_report({"run": analyze_records(recs[:4])}, tmp_path / "r2").read_text()
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(recs[0]) + "\n")
    assert load_predictions(path)[0]["source"] == "chartqa"


def test_bad_utf8_in_predictions_names_file_and_line(tmp_path):
    path = tmp_path / "predictions.jsonl"
    good = json.dumps(_rec(0, "1", "1")).encode()
    bad = json.dumps(_rec(1, "2", "@")).encode().replace(b'"@"', b'"\xff2"')
    path.write_bytes(good + b"\n" + bad + b"\n")
    offset = path.read_bytes().index(b"\xff")
    with pytest.raises(ValueError) as err:
        load_predictions(path)
    assert str(err.value) == f"{path}:2: not valid UTF-8 (invalid start byte at byte {offset})"


# ---------------------------------------------------------------------------------------------------------
# Clock digits


def test_clock_digits_per_place():
    recs = [
        _rec(0, "3:15", "3:05", source="clocks"),    # minute tens wrong (0 for 1)
        _rec(1, "12:05", "0:05", source="clocks"),   # 12-hour dial: 0 o'clock is 12, all right
        _rec(2, "10:07", "1:07", source="clocks"),   # hour tens missing, hour units 1 for 0
        _rec(3, "4:20", "no idea", source="clocks"),  # no time: left out, counted
        _rec(4, "11:58", "11:59", source="clocks"),  # minute units 9 for 8
        _rec(5, "7.5", "7", source="chartqa"),       # not a clock record
        _rec(6, "1:02:03", "1:02:13", source="clocks"),  # seconds: second tens 1 for 0
        _rec(7, "1:02:03", "1:02", source="clocks"),  # a prediction without seconds misses both
    ]
    assert analysis.clock_digit_pairs(ClockTime(1, 7), ClockTime(10, 7)) == [
        ("hour tens", 1, None), ("hour units", 0, 1), ("minute tens", 0, 0), ("minute units", 7, 7)]
    c = analyze_records(recs)["clock"]
    assert c["records"] == 7 and c["no_time"] == 1 and c["analysed"] == 6
    got = {k: (v["correct"], v["target_digits"], v["missing"]) for k, v in c["places"].items()}
    assert list(got) == ["hour tens", "hour units", "minute tens", "minute units", "second tens", "second units"]
    assert got["hour tens"] == (2, 3, 1)  # targets 12, 10, 11
    assert got["hour units"] == (5, 6, 0)  # 3, 2, 0 (1 predicted), 1, 1, 1
    assert got["minute tens"] == (5, 6, 0) and got["minute units"] == (5, 6, 0)
    assert got["second tens"] == (0, 2, 1) and got["second units"] == (1, 2, 1)
    assert c["confusion"][1][0] == 1 and c["confusion"][0][1] == 2 and c["confusion"][8][9] == 1
    assert sum(c["digit_error_histogram"]) == sum(map(sum, c["confusion"]))  # aligned digits only


# ---------------------------------------------------------------------------------------------------------
# Chance, best constant, collapse


def _brute_chance(targets, score):
    """Mean of score(other target, target) over ordered pairs of distinct records, written plainly."""
    values = [score(targets[j], targets[i]) for i in range(len(targets)) for j in range(len(targets)) if i != j]
    return sum(values) / len(values)


def test_chance_uniform_0_to_99_is_exact():
    # every value 0..99 once: E|i - j| over i != j is (n + 1) / 3; 2 * (100 - k) ordered pairs are k apart
    recs = [_rec(i, str(v), "0") for i, v in enumerate(range(100))]
    a = analyze_records(recs)
    ch = a["numeric"]["chance"]
    assert ch["mae"] == pytest.approx(101 / 3) and ch["value_exact"] == 0.0
    assert ch["within_abs"]["1"] == pytest.approx(2 * 99 / 9900)
    assert ch["within_abs"]["2"] == pytest.approx((2 * 99 + 2 * 98) / 9900)
    assert ch["places"]["units"] == pytest.approx(10 * 9 / 99 / 10)  # 10 of each units digit
    assert ch["places"]["tens"] == pytest.approx(9 * 10 * 9 / (90 * 99))  # 10..99 have a tens digit
    assert a["chance"]["exact_match"] == 0.0
    assert a["numeric"]["constant"]["mae"] == pytest.approx(sum(abs(v - 49) for v in range(100)) / 100)
    assert "exact over all 100 x 99" in ch["method"]


def test_chance_equals_brute_force_on_a_skewed_distribution():
    targets = ["3", "3", "3", "17", "-2.5", "40", "40", "0.25"]
    recs = [_rec(i, t, "x") for i, t in enumerate(targets)]
    a = analyze_records(recs)
    ch = a["numeric"]["chance"]
    val = {t: Decimal(t) for t in targets}
    assert ch["value_exact"] == pytest.approx(_brute_chance(targets, lambda p, t: val[p] == val[t]))
    assert ch["mae"] == pytest.approx(_brute_chance(targets, lambda p, t: float(abs(val[p] - val[t]))))
    assert ch["within_abs"]["2"] == pytest.approx(_brute_chance(targets, lambda p, t: abs(val[p] - val[t]) <= 2))
    assert a["chance"]["exact_match"] == pytest.approx(_brute_chance(targets, lambda p, t: p == t))
    assert a["chance"]["relaxed_accuracy"] == pytest.approx(
        _brute_chance(targets, lambda p, t: relaxed_accuracy(p, t)))

    def place_correct(p, t):
        pairs = [x for x in align_digits(p, t) if x.target is not None]
        return sum(x.prediction == x.target for x in pairs), len(pairs)

    for name, place in (("tens", 1), ("units", 0), ("tenths", -1)):
        pairs = [(targets[j], targets[i]) for i in range(8) for j in range(8) if i != j]
        hits = [x for p, t in pairs for x in align_digits(p, t) if x.place == place and x.target is not None]
        assert ch["places"][name] == pytest.approx(sum(x.prediction == x.target for x in hits) / len(hits))
    assert a["numeric"]["constant"]["value_exact"] == pytest.approx(3 / 8)  # always "3"
    assert a["numeric"]["constant"]["value_exact_answer"] == "3"


def test_clock_chance_equals_brute_force():
    from vlm_smmd.metrics import clock_hour_correct, clock_time_gap

    targets = ["3:15", "3:15", "9:45", "12:00", "11:58", "6:30", "10:07"]
    a = analyze_records([_rec(i, t, "x", source="clocks") for i, t in enumerate(targets)])
    ch = a["clock"]["chance"]
    assert ch["mean_gap"] == pytest.approx(_brute_chance(targets, clock_time_gap))
    assert ch["rates"]["hour_correct"] == pytest.approx(_brute_chance(targets, clock_hour_correct))
    assert ch["within_minutes_rate"]["5"] == pytest.approx(_brute_chance(targets, lambda p, t: clock_time_gap(p, t) <= 5))
    assert sum(ch["gap_bin_fractions"]) == pytest.approx(1.0)
    const = a["clock"]["constant"]
    best = min(targets, key=lambda c: sum(clock_time_gap(c, t) for t in targets))
    assert const["mean_gap"] == pytest.approx(sum(clock_time_gap(best, t) for t in targets) / len(targets))
    assert const["exact"] == pytest.approx(2 / 7) and const["exact_answer"] == "3:15"


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite runs it, the fast tier not
def test_chance_counts_each_record_once_and_samples_above_the_limit(monkeypatch):
    recs = [_rec(i, str(i % 20), "1") for i in range(60)]
    once = analyze_records(recs)
    twice = analyze_records(recs + recs)  # two seeds pooled: the same ids again
    assert twice["numeric"]["chance"]["mae"] == once["numeric"]["chance"]["mae"]
    assert twice["numeric"]["chance"]["records"] == 60
    monkeypatch.setattr(analysis.chance, "PAIR_LIMIT", 10)  # 20 distinct values: 400 pairs > 10
    sampled = analyze_records(recs)["numeric"]["chance"]
    assert "estimated from" in sampled["method"] and "seed 0" in sampled["method"]
    assert sampled["mae"] == pytest.approx(once["numeric"]["chance"]["mae"], rel=0.02)
    assert analyze_records(recs)["numeric"]["chance"]["mae"] == sampled["mae"]  # seeded


def _collapsed_clock_run():
    """Like the first demo: 64 answers, "1:01" 40 times, 24 holding no time."""
    recs = []
    for i in range(64):
        prediction = "1:01" if i < 40 else ("11:0", "11:2", "11:5")[i % 3]
        recs.append(_rec(i, f"{i % 12 + 1}:{(7 * i) % 60:02d}", prediction, source="clocks"))
    return recs


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite runs it, the fast tier not
def test_collapse_warning_fires_on_a_collapsed_run_only(tmp_path):
    collapsed = analyze_records(_collapsed_clock_run())
    c = collapsed["collapse"]
    assert c["collapsed"] and c["most_common_prediction"] == "1:01" and c["most_common_count"] == 40
    assert c["distinct_predictions"] == 4
    assert c["distinct_targets"] == len({r["target"] for r in _collapsed_clock_run()}) == 60
    assert len(c["reasons"]) == 2
    varied = analyze_records(planted_records())
    assert not varied["collapse"]["collapsed"]
    # a majority answer that is also the majority target is no collapse
    yes = [_rec(i, "yes" if i % 4 else "no", "yes" if i % 4 else "no") for i in range(40)]
    assert not analyze_records(yes)["collapse"]["collapsed"]

    report = write_report({"tiny": collapsed, "varied": varied}, tmp_path / "r").read_text()
    head = report.split("## Summary")[0]
    assert "**Warning: tiny mostly repeats itself**" in head and "'1:01' is 40 of 64 answers" in head
    assert "varied mostly repeats" not in report
    # denominators: the mean gap over the 40 answers holding a time, and the worst case over all 64
    tiny = write_report({"tiny": collapsed}, tmp_path / "t").read_text()
    assert re.search(r"\| mean gap \(min\), answers holding a time ↓ \| clock answers holding a time \| "
                     r"[\d.]+ \(over 40 of 64\) \|", tiny)
    worst = collapsed["clock"]["mean_gap_worst_case"]
    assert worst == pytest.approx((sum(collapsed["clock"]["gaps"]) + 24 * 360) / 64)
    assert f"| mean gap (min), no time = 360 ↓ | clock answers | {worst:.3f} (n=64) |" in tiny
    assert "| answer holds no time ↓ | clock answers | 0.375 (24/64) |" in tiny
    # targets 10-12 o'clock have an hour tens digit that no answer has: 0 correct, all missing (not "no data")
    hour_tens = collapsed["clock"]["places"]["hour tens"]
    assert hour_tens["correct"] == 0 and hour_tens["missing"] == hour_tens["target_digits"] > 0


@pytest.mark.slow
def test_no_data_places_and_plots(tmp_path):
    a = analyze_records([_rec(0, "12.5", "12.5"), _rec(1, "3", "3")])
    b = analyze_records([_rec(0, "12.5", "n/a"), _rec(1, "3", "x")])  # nothing parses: no digits at all
    report = write_report({"a": a, "b": b}, tmp_path / "r").read_text()
    assert "| tenths | 1.000 (1/1; 0 missing, 0 extra) | no data |" in report
    assert "**b**\n\nno data (no aligned digits)" in report
    assert (tmp_path / "r" / "confusion_0_a.png").exists() and not list((tmp_path / "r").glob("confusion_1_*"))
    # clocks whose answers hold no time: counted, no gap histogram or digit plots drawn empty
    no_time = analyze_records([_rec(i, f"{i + 1}:30", "x", source="clocks") for i in range(5)])
    report = write_report({"c": no_time}, tmp_path / "c").read_text()
    assert "No answer holds a time: no gap histogram." in report and "No answer holds a time: no digit" in report
    assert {p.name for p in (tmp_path / "c").glob("*.png")} == {"clock_breakdown.png"}


# ---------------------------------------------------------------------------------------------------------
# Negative numbers and decimals (text answers such as GSM8K)


def test_negative_and_decimal_text_answers():
    recs = [_rec(0, "-12.5", "-12.25", source="gsm8k"),  # hundredths extra, tenths 5 -> 2
            _rec(1, "0.75", "0.7", source="gsm8k"),      # hundredths missing
            _rec(2, "-3", "3", source="gsm8k"),          # sign error
            _rec(3, "1,000", "1000.0", source="gsm8k")]  # exact
    a = analyze_records(recs)
    n = a["numeric"]
    assert n["analysed"] == 4 and n["value_exact"] == 1 and n["sign_errors"] == 1
    assert n["abs_error"]["mean"] == pytest.approx((0.25 + 0.05 + 6 + 0) / 4)
    assert n["within_abs"]["1"] == 3
    assert n["within_relative"]["0.05"] == 2  # 0.25 / 12.5 = 2%, exact 1000; 0.05 / 0.75 = 6.7% is out
    assert n["places"]["tenths"]["correct"] == 1 and n["places"]["tenths"]["target_digits"] == 2  # 5 -> 2, 7
    assert n["places"]["hundredths"]["missing"] == 1 and n["places"]["hundredths"]["extra"] == 1
    keys = [f.key for f in analysis.headline(a)]
    assert "value_exact" in keys and "within_rel_0.01" in keys and "relaxed_accuracy" not in keys
    assert n["chance"]["mae"] == pytest.approx(_brute_chance(["-12.5", "0.75", "-3", "1,000"], lambda p, t: float(
        abs(Decimal(p.replace(",", "")) - Decimal(t.replace(",", ""))))))


def test_headline_has_no_digit_figure_for_a_place_no_target_has():
    # "120" puts a digit in the hundreds, a place no target has: the analysis counts it as extra, and the
    # headline (the results pages' columns and digit plots) gets no empty "hundreds" figure
    recs = [_rec(0, "12", "12"), _rec(1, "45", "120"), _rec(2, "7", "8")]
    a = analyze_records(recs)
    places = a["numeric"]["places"]
    assert places["hundreds"]["extra"] == 1 and places["hundreds"]["target_digits"] == 0
    figs = {f.key: f for f in analysis.headline(a)}
    assert "digit_acc_hundreds" not in figs
    assert figs["digit_acc_tens"].n == 2 and figs["digit_acc_units"].n == 3
    assert figs["digit_acc_units"].value == pytest.approx(1 / 3)


def test_series_colors_stay_distinct_past_ten_series():
    from matplotlib.colors import to_rgba

    for n in (3, 10, 12, 20, 25):
        colors = {to_rgba(series_color(i, n)) for i in range(n)}
        assert len(colors) == n, n


def test_compare_digit_plot_gives_each_of_twelve_variants_its_own_colour(tmp_path, monkeypatch):
    from matplotlib.colors import to_rgba

    from vlm_smmd.experiments import results

    figs = []
    monkeypatch.setattr(results, "save_figure", lambda fig, path: figs.append(fig))
    rows = [{"group": f"v{j}", "digit_acc_units": {"mean": 0.5, "std": 0.1}} for j in range(12)]
    assert results._digit_plot(tmp_path / "d.png", rows, {"digit_acc_units": ("", "digit accuracy: units")},
                               {}, ["digit_acc_units"])
    ax = figs[0].axes[0]
    bars = [c for c in ax.containers if hasattr(c, "patches")]
    assert len({to_rgba(c.patches[0].get_facecolor()) for c in bars}) == 12
    figs[0].canvas.draw()  # twelve entries would cover the bars: the legend sits beside the axes
    renderer = figs[0].canvas.get_renderer()
    assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1


# ---------------------------------------------------------------------------------------------------------
# The run behind the predictions


def _planted_run(tmp_path, *, config=True, state=True):
    run_dir = tmp_path / "model"
    run_dir.mkdir()
    if config:
        (run_dir / "run_config.json").write_text(json.dumps({
            "model_name_or_path": "scratch", "dataset": "chartqa", "aux": "smmd", "aux_lambda": 0.5,
            "max_steps": 40, "learning_rate": 0.001, "seed": 3, "text_hidden_size": 64, "vision_depth": 2,
            "weight_decay": 0.0}))
    if state:
        history = [{"step": s, "loss": 3.0 / s, "ce": 2.5 / s, "aux": 0.5 / s, "total": 3.0 / s,
                    "learning_rate": 1e-3} for s in (10, 20, 30, 40)]
        history += [{"step": 20, "eval_ce": 1.1, "eval_loss": 1.2, "eval_exact_match": 0.2, "eval_runtime": 3.0,
                     "eval_numeric_tokens": 53},
                    {"step": 40, "eval_ce": 0.9, "eval_loss": 1.0, "eval_exact_match": 0.3, "eval_runtime": 3.0},
                    {"step": 40, "train_runtime": 61.5, "train_loss": 0.1}]
        (run_dir / "trainer_state.json").write_text(json.dumps({"global_step": 40, "log_history": history}))
    eval_dir = tmp_path / "eval"
    pred = _write_jsonl(eval_dir / "predictions.jsonl", planted_records()[:12])
    (eval_dir / "metrics.json").write_text(json.dumps({"count": 12, "run": {"model": str(run_dir), "split": "test"}}))
    return run_dir, pred


@pytest.mark.slow
def test_report_names_the_run_and_plots_its_training_curve(tmp_path, capsys):
    run_dir, pred = _planted_run(tmp_path)
    assert analysis.find_run_dir(pred) == run_dir
    out = tmp_path / "report"
    assert analyze([str(pred), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "| aux | smmd |" in report and "| aux_lambda | 0.5 |" in report and "| max_steps | 40 |" in report
    assert "| text_hidden_size | 64 |" in report and "| vision_depth | 2 |" in report
    assert "Last logged values (step 40): ce 0.062, aux 0.013, eval_ce 0.900, eval_loss 1.000, training time 62 s" \
        in report
    assert "![training curve eval](training_curve_0_eval.png)" in report
    assert (out / "training_curve_0_eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    series = analysis.curve_series(json.loads((run_dir / "trainer_state.json").read_text())["log_history"])
    assert set(series) == {"training", "evaluation losses", "evaluation metrics"}
    assert set(series["evaluation metrics"]) == {"eval_exact_match"}  # runtime and token counts are no metric
    assert series["training"]["ce"][0] == (10.0, 0.25)


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite runs it, the fast tier not
def test_report_without_run_files_says_not_available(tmp_path):
    run_dir, pred = _planted_run(tmp_path, config=False, state=False)
    out = tmp_path / "r1"
    assert analyze([str(pred), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "Run settings: not available." in report and "Training curve: not available." in report
    assert f"no run_config.json in {run_dir}" in report
    (run_dir / "trainer_state.json").write_text("{broken")
    assert analyze([str(pred), "--out", str(tmp_path / "r2")]) == 0
    assert "trainer_state.json unreadable" in (tmp_path / "r2" / "report.md").read_text()
    # an explicit --run-dir wins; a prediction file with no metrics.json beside it still gets a report
    other = _write_jsonl(tmp_path / "bare" / "p.jsonl", planted_records()[:3])
    assert analyze([str(other), "--out", str(tmp_path / "r3")]) == 0
    assert "no training folder found" in (tmp_path / "r3" / "report.md").read_text()
    (tmp_path / "good").mkdir()
    _planted_run(tmp_path / "good")
    assert analyze([str(other), "--out", str(tmp_path / "r4"), "--run-dir", str(tmp_path / "good" / "model")]) == 0
    assert "| aux | smmd |" in (tmp_path / "r4" / "report.md").read_text()
    assert analyze([str(other), "--out", str(tmp_path / "r5"), "--run-dir", "a", "--run-dir", "b"]) == 2


# ---------------------------------------------------------------------------------------------------------
# Shared formatting and the package's imports


def test_fmt_precision_sign_and_markdown_cells():
    assert fmt(None) == "–" and fmt(3) == "3" and fmt("a|b") == "a|b"
    assert fmt(0.1234) == "0.123" and fmt(0.1234, "mae") == "0.12"  # figures on a wide scale: 2 decimals
    assert fmt(0.1234, signed=True) == "+0.123" and fmt(-1.5, "mean_time_gap_min", signed=True) == "-1.50"
    assert md_cell("a|b") == "a\\|b" and md_cell(None) == "–" and md_cell(0.5) == "0.500"
    assert md_table(["run", "x|y"], [["a", 0.5], ["b", None]]) == [
        "| run | x\\|y |", "|---|---|", "| a | 0.500 |", "| b | – |", ""]


def test_figures_are_png_of_the_asked_size_without_a_software_entry(tmp_path):
    fig, ax = new_figure(3.0, 2.0)
    ax.plot([0, 1], [1, 0])
    save_figure(fig, tmp_path / "a.png")
    data = (tmp_path / "a.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"Software" not in data
    assert struct.unpack(">II", data[16:24]) == (300, 200)  # IHDR width, height: inches x 100 dpi
    fig, axes = new_figure(ncols=3)
    assert len(axes) == 3 and fig.axes == axes
