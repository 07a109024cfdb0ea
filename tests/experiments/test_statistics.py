"""Paired statistics against scipy and against brute-force enumeration written here."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from vlm_smmd.experiments.statistics import (
    betainc,
    compare_to_reference,
    holm,
    paired_t,
    signflip_p,
    t_ppf,
    t_sf,
)


@pytest.fixture
def stats():
    """scipy.stats, the peer implementation (a test dependency only; the module under test needs none)."""
    return pytest.importorskip("scipy.stats")


# Fixed paired figures (exact accuracy of a variant and of the reference on the same seeds).
VARIANT = [0.862, 0.512, 0.774, 0.630, 0.918, 0.455, 0.701, 0.688]
REFERENCE = [0.601, 0.540, 0.402, 0.611, 0.530, 0.497, 0.512, 0.700]


def brute_signflip(diffs):
    """Two-sided sign-flip p in exact rational arithmetic: every sign pattern, ties exact."""
    d = [Fraction(str(x)) for x in diffs]
    observed = abs(sum(d))
    hits = sum(abs(sum(s * abs(x) for s, x in zip(signs, d))) >= observed
               for signs in itertools.product((1, -1), repeat=len(d)))
    return Fraction(hits, 2 ** len(d))


# ------------------------------------------------------------------------------------------ Student t

@pytest.mark.parametrize("df", range(1, 61))
def test_t_ppf_matches_scipy(df, stats):
    for p in (0.0005, 0.025, 0.05, 0.1, 0.3, 0.5, 0.5000001, 0.6, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995, 0.9995):
        assert abs(t_ppf(p, df) - stats.t.ppf(p, df)) <= 1e-8, (p, df)


def test_t_ppf_fractional_df_and_bad_input(stats):
    for df in (0.7, 2.5, 7.3, 150.0):
        for p in (0.05, 0.975):
            assert t_ppf(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-10, abs=1e-10)
    for p in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError):
            t_ppf(p, 3)
    with pytest.raises(ValueError):
        t_ppf(0.9, 0)


def test_t_sf_and_betainc_match_scipy(stats):
    special = pytest.importorskip("scipy.special")
    for df in (1, 2, 3, 4, 7, 19, 60):
        for t in (-50.0, -3.0, -1.0, -0.2, 0.0, 0.01, 0.7, 2.0, 4.5, 30.0, 1e4):
            assert t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-11, abs=1e-14), (t, df)
    for a, b in ((0.5, 0.5), (0.5, 30.0), (2.0, 0.5), (30.0, 0.5), (3.0, 7.0), (12.5, 12.5)):
        for x in (0.0, 1e-6, 0.05, 0.3, 0.5, 0.77, 0.999, 1.0):
            assert betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-11, abs=1e-15), (a, b, x)


def test_t_sf_closed_forms_near_zero():
    """df 1 (Cauchy) and df 2 have closed forms; small |t| needs the tail from t^2 / (df + t^2) directly."""
    for t in (1e-9, 1e-6, 1e-3, 0.5, 3.0, 100.0):
        assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, rel=1e-13)
        assert t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), rel=1e-13)


# ---------------------------------------------------------------------------------------------- paired t

@pytest.mark.parametrize("level", [0.95, 0.9, 0.99])
def test_paired_t_matches_scipy(level, stats):
    diffs = [v - r for v, r in zip(VARIANT, REFERENCE)]
    got = paired_t(diffs, level=level)
    d = np.array(diffs)
    low, high = stats.t.interval(level, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert got["n"] == 8 and got["df"] == 7 and got["dropped"] == 0
    assert got["mean"] == pytest.approx(d.mean(), rel=1e-12)
    assert got["sd"] == pytest.approx(d.std(ddof=1), rel=1e-12)
    assert got["low"] == pytest.approx(low, rel=1e-9) and got["high"] == pytest.approx(high, rel=1e-9)
    assert got["p"] == pytest.approx(stats.ttest_rel(VARIANT, REFERENCE).pvalue, rel=1e-9)
    assert got["low"] < got["mean"] < got["high"]


def test_paired_t_five_pairs_against_scipy(stats):
    diffs = [0.41, 0.02, 0.33, -0.05, 0.51]
    got = paired_t(diffs)
    test = stats.ttest_1samp(diffs, 0.0)
    low, high = test.confidence_interval(0.95)
    assert got["p"] == pytest.approx(test.pvalue, rel=1e-9)
    assert (got["low"], got["high"]) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


def test_paired_t_degenerate_inputs(stats):
    empty = paired_t([])
    assert empty["n"] == 0 and empty["mean"] is None and empty["low"] is None and empty["p"] is None
    one = paired_t([0.3, None, float("nan")])
    assert one == {"n": 1, "dropped": 2, "mean": 0.3, "sd": None, "df": None, "low": None, "high": None,
                   "p": None}
    # Equal differences whose float mean is not exactly the value (0.1 * 3 / 3): sd must be exactly 0.
    equal = paired_t([0.1, 0.1, 0.1])
    assert equal["sd"] == 0.0 and equal["low"] == equal["high"] == equal["mean"] == 0.1 and equal["p"] == 0.0
    zeros = paired_t([0.0, 0.0, 0.0, 0.0])
    assert zeros["low"] == zeros["high"] == 0.0 and zeros["p"] == 1.0
    mixed = paired_t([0.2, None, -0.1, float("nan"), 0.4])
    assert mixed["n"] == 3 and mixed["dropped"] == 2
    assert mixed["p"] == pytest.approx(stats.ttest_1samp([0.2, -0.1, 0.4], 0.0).pvalue, rel=1e-9)
    with pytest.raises(ValueError, match="entry #1 is inf"):
        paired_t([0.1, float("inf"), 0.2])
    with pytest.raises(ValueError, match="level"):
        paired_t([0.1, 0.2], level=95)


def test_t_interval_holds_its_level_where_the_bootstrap_does_not():
    """Null datasets of 5 pairs: the paired t 95% interval excludes 0 about 5% of the time, a percentile
    bootstrap of the same pairs about three times as often (the fault of the old `compare`)."""
    rng = np.random.default_rng(20240607)
    data = rng.standard_normal((3000, 5))
    t_rate = np.mean([r["low"] > 0 or r["high"] < 0 for r in map(paired_t, data)])
    resample = rng.integers(0, 5, size=(2000, 5))
    boot = np.quantile(data[:, resample].mean(axis=2), [0.025, 0.975], axis=1)  # [2, datasets]
    boot_rate = np.mean((boot[0] > 0) | (boot[1] < 0))
    assert 0.02 <= t_rate <= 0.08
    assert boot_rate >= 0.10 and boot_rate >= 2 * t_rate


# ----------------------------------------------------------------------------------------- sign flip

@pytest.mark.parametrize("diffs", [
    [0.41, 0.02, 0.33, -0.05, 0.51],
    [0.1, 0.2, -0.3, 0.3, 0.0],  # ties that float sums blur: 0.1 + 0.2 != 0.3 in binary
    [-0.02, 0.05, 0.01, -0.04, 0.03],
    [d1 - d2 for d1, d2 in zip(VARIANT, REFERENCE)],
    [0.25, -0.25, 0.125, 0.125, -0.5, 0.5, 0.0, 0.375],
    [0.3, 0.1, 0.2, -0.1, 0.4, 0.2, -0.3, 0.1],
])
def test_exact_signflip_matches_enumeration(diffs):
    got = signflip_p(diffs)
    assert got["exact"] and got["patterns"] == 2 ** len(diffs) and got["draws"] is None
    assert got["p"] == float(brute_signflip(diffs))


def test_five_pairs_of_one_sign_can_never_reach_005():
    for diffs in ([0.01, 0.3, 0.02, 0.5, 0.04], [-1.0, -2.0, -3.0, -4.0, -5.0], [0.2] * 5):
        assert signflip_p(diffs)["p"] == 2 / 32 == float(brute_signflip(diffs)) == 0.0625
    # 0.0625 is the smallest p any five nonzero differences can give
    rng = np.random.default_rng(0)
    assert min(signflip_p(rng.standard_normal(5))["p"] for _ in range(200)) >= 0.0625


def test_signflip_degenerate_and_dropped():
    assert signflip_p([])["p"] is None and signflip_p([0.4])["p"] is None
    assert signflip_p([0.0, 0.0, 0.0])["p"] == 1.0
    got = signflip_p([0.3, None, 0.2, float("nan"), 0.1])
    assert got["n"] == 3 and got["dropped"] == 2 and got["p"] == 2 / 8


def test_monte_carlo_signflip_agrees_with_exact():
    rng = np.random.default_rng(7)
    diffs = list(np.round(rng.normal(0.08, 0.2, size=12), 3))
    exact = signflip_p(diffs)
    assert exact["exact"] and exact["p"] == float(brute_signflip(diffs))
    draws = 20_000
    mc = signflip_p(diffs, exact_max=11, draws=draws, seed=3)
    assert not mc["exact"] and mc["draws"] == draws and mc["seed"] == 3 and mc["patterns"] is None
    p = exact["p"]
    assert 0.01 < p < 0.5  # a p whose estimate is informative
    assert abs(mc["p"] - p) <= 4 * math.sqrt(p * (1 - p) / draws) + 1 / draws
    assert signflip_p(diffs, exact_max=11, draws=draws, seed=3)["p"] == mc["p"]  # reproducible by seed
    # (1 + hits) / (1 + draws): never 0, even when no draw reaches the observed mean
    strong = signflip_p([1.0] * 30, draws=999, seed=0)
    assert not strong["exact"] and strong["p"] == 1 / 1000


def test_past_sixteen_pairs_is_monte_carlo():
    assert signflip_p(np.linspace(-0.2, 0.5, 16))["exact"]
    got = signflip_p(np.linspace(-0.2, 0.5, 17), draws=5000, seed=1)
    assert not got["exact"] and got["draws"] == 5000 and got["seed"] == 1


# -------------------------------------------------------------------------------------------------- Holm

def test_holm_on_a_known_vector():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert holm([0.5, 0.6, 0.01]) == pytest.approx([1.0, 1.0, 0.03], abs=1e-15)  # capped at 1
    assert holm([0.02, 0.02]) == pytest.approx([0.04, 0.04], abs=1e-15)  # ties
    assert holm([0.2]) == [0.2] and holm([]) == []
    with pytest.raises(ValueError, match="p-value #1"):
        holm([0.1, float("nan")])


def test_holm_is_monotone_and_never_below_raw():
    rng = np.random.default_rng(1)
    for _ in range(50):
        p = rng.uniform(0, 0.2, size=rng.integers(1, 10))
        adjusted = holm(p)
        order = np.argsort(p, kind="stable")
        assert np.all(np.diff(np.array(adjusted)[order]) >= 0)
        assert np.all(np.array(adjusted) >= p) and max(adjusted) <= 1.0


# ----------------------------------------------------------------------------------- per-variant summary

def test_significant_only_under_the_corrected_signflip_test():
    variants = {
        "strong": [0.31, 0.12, 0.25, 0.08, 0.4, 0.19, 0.22, 0.05],  # one sign, 8 pairs: p = 2/256
        "borderline": [0.31, 0.12, 0.25, -0.03, 0.4, 0.19, 0.22, -0.05],
        "same_sign_five": [0.20, 0.21, 0.19, 0.20, 0.22],  # t p tiny, sign-flip p = 0.0625
        "null": [0.1, -0.2, 0.05, -0.1, 0.02],
        "single": [0.5],
        "empty": [None, float("nan")],
    }
    rows = compare_to_reference(variants)
    assert list(rows) == list(variants)
    raw = {name: float(brute_signflip(d)) for name, d in variants.items() if name in ("strong", "borderline",
                                                                                   "same_sign_five", "null")}
    assert raw["strong"] == 2 / 256 and raw["borderline"] < 0.05
    expected_holm = dict(zip(raw, holm(list(raw.values()))))
    for name in raw:
        assert rows[name]["p_signflip"] == raw[name]
        assert rows[name]["p_holm"] == pytest.approx(expected_holm[name], abs=1e-15)
        low, high = rows[name]["t_low"], rows[name]["t_high"]
        assert rows[name]["significant"] == (expected_holm[name] < 0.05 and (low > 0 or high < 0))
    assert rows["strong"]["significant"]
    assert rows["borderline"]["p_signflip"] < 0.05 and rows["borderline"]["p_holm"] >= 0.05
    assert not rows["borderline"]["significant"]
    assert rows["same_sign_five"]["p_t"] < 0.001 and not rows["same_sign_five"]["significant"]
    for name in ("single", "empty"):
        assert rows[name]["p_holm"] is None and rows[name]["p_signflip"] is None and not rows[name]["significant"]
    assert rows["empty"]["dropped"] == 2 and rows["empty"]["n"] == 0
    # ten seeds of a real comparison (pointing, digit accuracy): one large loss among small ones makes the
    # sign-flip p 0.027 while the t-interval [-0.316, +0.015] holds 0: not significant, never bold
    none = [0.062, 0.152, 0.198, 0.126, 0.142, 0.752, 0.18, 0.008, 0.11, 0.5]
    smmd = [0.056, 0.102, 0.044, 0.048, 0.112, 0.046, 0.016, 0.024, 0.16, 0.116]
    skewed = compare_to_reference({"smmd": [a - b for a, b in zip(smmd, none)]})["smmd"]
    assert skewed["p_holm"] < 0.05 and skewed["t_low"] < 0 < skewed["t_high"] and not skewed["significant"]
    assert "Holm over 4 comparisons" in rows["strong"]["method"] and "2^8 = 256" in rows["strong"]["method"]


def test_summary_fields_match_the_parts():
    diffs = [0.41, 0.0, 0.33, -0.05, 0.51, None]
    row = compare_to_reference({"smmd": diffs}, level=0.9)["smmd"]
    t = paired_t(diffs, level=0.9)
    assert (row["n"], row["dropped"], row["mean"], row["sd"], row["t_low"], row["t_high"], row["p_t"]) == (
        t["n"], t["dropped"], t["mean"], t["sd"], t["low"], t["high"], t["p"])
    assert (row["wins"], row["losses"], row["ties"]) == (3, 1, 1)
    assert row["p_holm"] == row["p_signflip"] == float(brute_signflip([0.41, 0.0, 0.33, -0.05, 0.51]))
    assert row["signflip_exact"] and row["draws"] is None and row["level"] == 0.9


def test_summary_states_monte_carlo_draws_and_seed():
    row = compare_to_reference({"mmd": list(np.linspace(-0.1, 0.3, 20))}, draws=4000, seed=9)["mmd"]
    assert not row["signflip_exact"] and (row["draws"], row["seed"]) == (4000, 9)
    assert "4000 random sign patterns (seed 9)" in row["method"]


def test_summary_names_the_variant_with_an_infinite_difference():
    with pytest.raises(ValueError, match=r"differences of 'mmd': entry #2 is -inf"):
        compare_to_reference({"smmd": [0.1, 0.2], "mmd": [0.1, None, float("-inf")]})
