"""The ±1-minute clock scorer of It's About Time (top_1, top_1_min) and its agreement with the definitions."""

import pytest

from vlm_smmd.evaluation import score_prediction
from vlm_smmd.metrics import clock_minute_within, clock_within_minutes


@pytest.mark.parametrize(("prediction", "target", "within_1", "minute_1"), [
    ("11:59", "12:00", True, True),   # across 12 on the dial
    ("12:00", "12:01", True, True),
    ("6:59", "6:00", False, True),    # the minute wraps at the hour; the time is 59 minutes off
    ("3:00", "3:02", False, False),
    ("9:30", "21:31", True, True),    # 12-hour dial
    ("no time", "3:00", False, False),
])
def test_published_edges(prediction, target, within_1, minute_1):
    assert clock_within_minutes(prediction, target) is within_1
    assert clock_minute_within(prediction, target) is minute_1


def _definition(ph, pm, th, tm):
    """Direct from the paper: hour 12 as 0, position h*60+m on the 720-minute dial, ±1 circular."""
    d = abs((ph % 12) * 60 + pm - ((th % 12) * 60 + tm)) % 720
    return min(d, 720 - d) <= 1, (ph % 12) == (th % 12), min(abs(pm - tm), 60 - abs(pm - tm)) <= 1


@pytest.mark.slow
def test_agrees_with_the_definitions_over_all_720_by_720_pairs():
    times = [(h, m) for h in range(1, 13) for m in range(60)]
    text = {t: f"{t[0]}:{t[1]:02d}" for t in times}
    disagree = 0
    for p in times:
        for t in times:
            top1, _, mn = _definition(*p, *t)
            disagree += (clock_within_minutes(text[p], text[t]) != top1) + (clock_minute_within(text[p], text[t]) != mn)
    assert disagree == 0


def test_eval_scores_carry_within_1_min():
    scores = score_prediction("It is 11:59.", ["12:00"], "clocks")
    assert scores["within_1_min"] == 1.0 and scores["minute_within_1"] == 1.0 and scores["time_exact"] == 0.0
