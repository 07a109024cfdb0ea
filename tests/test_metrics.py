import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vlm_smmd.metrics import (
    ClockTime,
    clock_exact,
    clock_hour_correct,
    clock_minute_correct,
    clock_time_gap,
    exact_match,
    extract_final_number,
    final_number_match,
    final_number_within,
    normalize_answer,
    parse_decimal,
    parse_time,
    relaxed_accuracy,
    score_against_targets,
)

# (prediction, target, tolerance, expected)
RELAXED_CASES = [
    ("12", "12", 0.05, True),
    ("12.0", "12", 0.05, True),
    # tolerance boundary (values exact in binary)
    ("105", "100", 0.05, True),
    ("95", "100", 0.05, True),
    ("105.01", "100", 0.05, False),
    ("94.99", "100", 0.05, False),
    ("1.05", "1", 0.05, False),  # 0.05000000000000004 > 0.05 in binary floats, as in the reference
    ("110", "100", 0.1, True),
    ("100.5", "100", 0.0, False),
    ("-104", "-100", 0.05, True),
    ("104", "-100", 0.05, False),
    # percent divides by 100 on its own side only
    ("45%", "0.45", 0.05, True),
    ("0.45", "45%", 0.05, True),
    ("45%", "45", 0.05, False),
    ("45", "45%", 0.05, False),
    ("45%", "45%", 0.05, True),
    ("50%%", "0.5", 0.05, True),  # rstrip("%") removes every trailing '%'
    (" 45 % ", "0.45", 0.05, True),
    # zero target: string comparison
    ("0", "0", 0.05, True),
    ("0.0", "0", 0.05, False),
    ("0", "0.0", 0.05, False),
    ("0.001", "0", 0.05, False),
    ("0%", "0", 0.05, False),
    # commas do not parse: strings compared
    ("1,234", "1,234", 0.05, True),
    ("1234", "1,234", 0.05, False),
    ("1,234", "1234", 0.05, False),
    ("$12", "12", 0.05, False),
    # case-insensitive exact match when either side is not a number
    ("Yes", "yes", 0.05, True),
    (" DEMOCRAT ", "democrat", 0.05, True),
    ("five", "5", 0.05, False),
    ("5", "five", 0.05, False),
    # what Python float() accepts
    ("1e2", "100", 0.05, True),
    ("1_000", "1000", 0.05, True),
    ("+7", "7", 0.05, True),
    ("nan", "nan", 0.05, False),  # nan target: relative change nan -> never correct
    ("NaN", "nan", 0.05, False),
    ("inf", "inf", 0.05, False),  # inf - inf = nan
    ("inf", "5", 0.05, False),
    ("nan", "5", 0.05, False),
    ("5", "inf", 0.05, False),
    ("infinity", "Infinity", 0.05, False),
]


@pytest.mark.parametrize("prediction,target,tolerance,expected", RELAXED_CASES)
def test_relaxed_accuracy_convention(prediction, target, tolerance, expected):
    assert relaxed_accuracy(prediction, target, tolerance) is expected


def _reference_relaxed(prediction, target, tolerance=0.05):
    """The published pix2struct formula (target first there), with surrounding whitespace stripped."""

    def to_float(text):
        try:
            return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            return None

    target, prediction = target.strip(), prediction.strip()
    t, p = to_float(target), to_float(prediction)
    if p is not None and t:
        return abs(p - t) / abs(t) <= tolerance
    return prediction.lower() == target.lower()


@given(st.text(alphabet="0123456789.,%-eE naiAN", max_size=8), st.text(alphabet="0123456789.,%-eE naiAN", max_size=8))
def test_relaxed_accuracy_matches_reference_formula(prediction, target):
    assert relaxed_accuracy(prediction, target) == _reference_relaxed(prediction, target)


UNICODE_DIGITS = ["\uff11\uff12", "\u0661\u0662", "\u06f1\u06f2", "\u0967\u0968", "1\uff12"]  # full-width,
# Arabic-Indic, extended Arabic-Indic, Devanagari, mixed: all "12" to Python's float()


@pytest.mark.parametrize("text", UNICODE_DIGITS)
def test_one_digit_rule_everywhere_ascii_only(text):
    from vlm_smmd.analysis import record_kind
    from vlm_smmd.numeric import is_plain_number

    assert float(text) == 12.0  # what the rule overrides
    assert not relaxed_accuracy(text, "12") and not relaxed_accuracy("12", text)
    assert not relaxed_accuracy(text, "12.3")  # within 5% of 12 if it were read as a number
    assert relaxed_accuracy(text, text) and relaxed_accuracy(f" {text} ", text)  # text: string match
    assert parse_decimal(text) is None and extract_final_number(f"#### {text}") is None
    assert not exact_match(text, "12", numeric=True)
    assert not is_plain_number(text)  # no V_num token, no SMMD term
    assert record_kind({"source": "chartqa", "targets": [text]}) == "non_numeric_target"


def test_score_against_targets_takes_the_max():
    assert score_against_targets(relaxed_accuracy, "12", ["twelve", "12.3"]) == 1.0
    assert score_against_targets(relaxed_accuracy, "12", ["twelve", "20"]) == 0.0
    assert score_against_targets(clock_time_gap, "3:00", ["3:10", "3:20"]) == 20.0
    with pytest.raises(ValueError):
        score_against_targets(relaxed_accuracy, "12", [])
    with pytest.raises(ValueError):
        score_against_targets(relaxed_accuracy, "12", "12")


def test_exact_match_options():
    assert exact_match(" Hello  World ", "hello world")
    assert not exact_match("Hello", "hello", ignore_case=False)
    assert not exact_match("a  b", "a b", collapse_whitespace=False)
    assert not exact_match("12.", "12")
    assert exact_match("12.", "12", strip_punctuation=True)
    assert exact_match('"yes"', "yes", strip_punctuation=True)
    assert not exact_match("1.5", "15", strip_punctuation=True)  # inner punctuation kept
    assert normalize_answer(" 3:15 PM. ", strip_punctuation=True) == "3:15 pm"
    assert not exact_match("1,234", "1234")
    assert exact_match("1,234", "1234.0", numeric=True)
    assert exact_match("$5", "5", numeric=True)
    assert not exact_match("5.01", "5", numeric=True)
    assert exact_match("Five", "five", numeric=True)  # falls back to text when not both numbers


@pytest.mark.parametrize("text,value", [
    ("12", Decimal("12")), (" 12 ", Decimal("12")), ("-3.5", Decimal("-3.5")), ("+3.5", Decimal("3.5")),
    ("\u22124", Decimal("-4")), (".5", Decimal("0.5")), ("12.", Decimal("12")), ("0.070", Decimal("0.07")),
    ("1,234", Decimal("1234")), ("1,234,567.25", Decimal("1234567.25")),
    ("45%", Decimal("45")), ("45 %", Decimal("45")), ("5 percent", Decimal("5")),
    ("$12", Decimal("12")), ("-$12", Decimal("-12")), ("$-12", Decimal("-12")), ("\u20ac3.50", Decimal("3.5")),
    ("12 million", Decimal("12000000")), ("1.5k", Decimal("1500")), ("2.5 Billion", Decimal("2500000000")),
    ("3bn", Decimal("3000000000")), ("1e3", Decimal("1000")), ("2.5E-2", Decimal("0.025")),
])
def test_parse_decimal_accepts(text, value):
    assert parse_decimal(text) == value


@pytest.mark.parametrize("text", [
    "", "abc", "1,23", "12,5", "1,2345", "12 apples", "inf", "nan", "1e999", "+-3", "--3", "1.2.3",
    "\u0661\u0662", "1 2", "$", "%", "three",
])
def test_parse_decimal_rejects(text):
    assert parse_decimal(text) is None


@pytest.mark.parametrize("text,expected", [
    ("10:07", ClockTime(10, 7)), ("3:05", ClockTime(3, 5)), ("03:05", ClockTime(3, 5)),
    ("10:07:33", ClockTime(10, 7, 33)), ("It is 3:15 pm.", ClockTime(15, 15)), ("3:15PM", ClockTime(15, 15)),
    ("3:15 p.m.", ClockTime(15, 15)), ("12:00 am", ClockTime(0, 0)), ("12:30 pm", ClockTime(12, 30)),
    ("11:59 AM", ClockTime(11, 59)), ("23:45", ClockTime(23, 45)), ("3:15 amazing", ClockTime(3, 15)),
    ("25:10 then 4:05", ClockTime(4, 5)), ("13:00 pm", None), ("3:60", None), ("3:5", None), ("1:23:45:67", None),
    ("2010:11", None), ("ten past three", None), ("3.15", None),
])
def test_parse_time(text, expected):
    assert parse_time(text) == expected


def test_parse_time_whole():
    assert parse_time(" 10:07 ", whole=True) == ClockTime(10, 7)
    assert parse_time("it is 10:07", whole=True) is None


@pytest.mark.parametrize("prediction,target,gap", [
    ("11:58", "12:03", 5.0), ("12:03", "11:58", 5.0), ("12:03", "0:03", 0.0), ("1:00", "13:00", 0.0),
    ("6:00", "12:00", 360.0), ("11:59", "0:00", 1.0), ("12:00 am", "12:00 pm", 0.0), ("3:15", "3:45", 30.0),
    ("3:15:30", "3:15:00", 0.5), ("11:59:30", "12:00:15", 0.75), ("3:15:30", "3:15", 0.0), ("3:15", "3:15:40", 0.0),
    ("I think 4:20", "4:25", 5.0),
])
def test_clock_time_gap(prediction, target, gap):
    assert clock_time_gap(prediction, target) == pytest.approx(gap)


def test_clock_time_gap_without_time():
    assert clock_time_gap("no idea", "3:00") is None
    with pytest.raises(ValueError, match="holds no time"):
        clock_time_gap("3:00", "three")


def _hand_angle_gap(a: ClockTime, b: ClockTime) -> float:
    """Independent: the angle between the two hour hands (0.5 degree per minute) via unit vectors."""
    def angle(t):
        return math.radians((t.hour % 12) * 30 + t.minute * 0.5)
    dot = math.cos(angle(a)) * math.cos(angle(b)) + math.sin(angle(a)) * math.sin(angle(b))
    cross = math.cos(angle(a)) * math.sin(angle(b)) - math.sin(angle(a)) * math.cos(angle(b))
    return abs(math.degrees(math.atan2(cross, dot))) / 0.5


@given(st.integers(0, 23), st.integers(0, 59), st.integers(0, 23), st.integers(0, 59))
def test_clock_time_gap_matches_hand_angle(h1, m1, h2, m2):
    gap = clock_time_gap(f"{h1}:{m1:02d}", f"{h2}:{m2:02d}")
    assert 0 <= gap <= 360
    assert gap == pytest.approx(_hand_angle_gap(ClockTime(h1, m1), ClockTime(h2, m2)), abs=1e-6)
    assert gap == clock_time_gap(f"{h2}:{m2:02d}", f"{h1}:{m1:02d}")


def test_clock_correctness_metrics():
    assert clock_exact("15:07", "3:07") and clock_exact("3:07 pm", "3:07")
    assert not clock_exact("3:08", "3:07")
    assert clock_exact("3:07:10", "3:07")  # prediction's seconds ignored when the target has none
    assert not clock_exact("3:07", "3:07:10")  # target seconds must be given
    assert not clock_exact("3:07:11", "3:07:10")
    assert not clock_exact("nothing", "3:07")
    assert clock_hour_correct("3:50", "15:07") and not clock_hour_correct("4:07", "3:07")
    assert clock_minute_correct("9:07", "3:07") and not clock_minute_correct("3:08", "3:07")
    assert not clock_hour_correct("?", "3:07") and not clock_minute_correct("?", "3:07")


# ---------------------------------------------------------------------------------------------------------
# Final numbers of generated solutions


@pytest.mark.parametrize("text,expected", [
    ("Natalia sold 24 in May.\nShe sold 72 altogether.\n#### 72", "72"),
    ("#### 1,234", "1234"),
    ("so 5 + 7 = 12\n#### 12\nThe answer is 13", "12"),  # '####' first
    ("#### 1 then #### 2", "2"),  # the last '####'
    ("She has 3 apples. The answer is $1,234.50.", "1234.50"),
    ("The answer is 7. Check: 7 * 2 = 14", "7"),  # first number after the last 'The answer is'
    ("The final answer is: **-3**", "-3"),
    ("3 + 4 = 7 apples.", "7"),  # else the last number
    ("It costs $12.", "12"),
    ("It cost -$12 in the end", "-12"),
    ("x = \u22125", "-5"),  # Unicode minus
    ("10-5=5 and 10-6", "6"),  # a minus after a digit subtracts
    ("so - 5", "5"),  # a bullet-like dash is no sign
    ("1234.0", "1234.0"),
    ("half is 1/2", "2"),
    ("I get 3.5.", "3.5"),
    ("#### \nso 41", "41"),  # nothing after '####': the next rule
    ("The answer is unknown, maybe 8", "8"),
    ("values 1,2345", None),  # commas not in groups of three: not guessed
    ("no number here", None),
    ("", None),
])
def test_extract_final_number(text, expected):
    assert extract_final_number(text) == expected


@given(st.integers(-10**12, 10**12), st.integers(0, 99), st.sampled_from(["#### {}", "The answer is {}.",
                                                                          "Total: 3 + {}", "So we get ${}."]))
def test_extract_final_number_reads_formatted_values(n, cents, template):
    written = f"{abs(n):,}.{cents:02d}"
    text = "We add 2 and 3 first.\n" + template.format(("-" if n < 0 else "") + written)
    expected = Fraction(abs(n) * 100 + cents, 100) * (-1 if n < 0 else 1)
    assert Fraction(extract_final_number(text)) == expected


def test_final_number_match_by_value():
    for prediction in ("1,234", "1234", "1234.0", "#### 1,234", "The answer is $1,234.00."):
        assert final_number_match(prediction, "1234"), prediction
    assert final_number_match("1234", "1,234") and final_number_match("-0.50", "-0.5")
    assert not final_number_match("1235", "1234") and not final_number_match("no number", "1234")
    assert not final_number_match("", "0")
    with pytest.raises(ValueError, match="not a number"):
        final_number_match("1", "1/2")


def _within_reference(p: str, t: str, tol: str) -> bool:
    return abs(Fraction(p) - Fraction(t)) <= Fraction(tol) * abs(Fraction(t))


@given(st.decimals(-10**6, 10**6, places=3, allow_nan=False, allow_infinity=False),
       st.decimals(-10**6, 10**6, places=3, allow_nan=False, allow_infinity=False),
       st.sampled_from(["0", "0.001", "0.01", "0.05"]))
def test_final_number_within_matches_exact_fractions(p, t, tol):
    assert final_number_within(str(p), str(t), float(tol)) == _within_reference(str(p), str(t), tol)


def test_final_number_within_boundaries():
    assert final_number_within("105", "100", 0.05) and not final_number_within("105.01", "100", 0.05)
    assert final_number_within("1.05", "1", 0.05)  # exact decimals: no binary float surprise at the boundary
    assert final_number_within("0", "0", 0.05) and not final_number_within("0.001", "0", 0.05)
    assert final_number_within("1234.0", "1234", 0) and not final_number_within("1234.5", "1234", 0)
    assert not final_number_within("nothing", "3", 0.05)
    with pytest.raises(ValueError, match="tolerance"):
        final_number_within("1", "1", -0.1)
