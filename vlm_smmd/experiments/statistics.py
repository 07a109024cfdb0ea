"""Paired statistics for comparing a variant with a reference run on the same seeds.

The input is a vector of paired differences d_1..d_n (variant minus reference, same seed, one metric).

- Effect size: the mean difference with a paired (one-sample) Student-t interval, `paired_t`.
- Primary test: the exact sign-flip permutation test, `signflip_p`. Under the null of no effect each
  difference is as likely to have come out with the other sign, so the p-value is the share of the 2^n
  sign patterns whose |mean| is at least the observed |mean|. It assumes only symmetry about 0, not
  normality, which matters at 3-10 seeds; its smallest possible value is 2 / 2^n (0.0625 at n = 5: five
  seeds can never reject at 0.05). Past `EXACT_MAX_PAIRS` pairs it is estimated from random sign patterns.
- Multiplicity: Holm's step-down correction across the variants of one metric, applied to the sign-flip
  p-values (`holm`); `compare_to_reference` marks a variant `significant` only where that corrected p is
  below alpha and the paired t-interval excludes 0 (a skewed handful of seeds can make the two disagree;
  a page never bolds an interval that holds 0). The t p-value is reported beside it but never decides.

Pure: numbers in, numbers out; numpy only. The Student-t quantile is computed here (regularized
incomplete beta by its continued fraction, inverted by bisection) so the core install needs no scipy.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

EXACT_MAX_PAIRS = 16  # up to this many pairs all 2^n sign patterns are enumerated (65536 at 16)
SIGNFLIP_DRAWS = 100_000  # Monte Carlo draws past EXACT_MAX_PAIRS: standard error <= 0.0016, ~0.0007 at p = 0.05
SIGNFLIP_SEED = 0
TIE_RTOL = 1e-9  # |sum| within this share of sum|d| of the observed one counts as a tie (float summation order)
_MC_CHUNK = 8192  # sign patterns drawn per block (bounds memory; fixed, so the draws do not depend on it)


# ------------------------------------------------------------------------------------- Student t


def spread(values: Sequence[float | None]) -> dict:
    """{"n", "mean", "std" (sample std, None below 2 values), "min", "max"} over the non-None values."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"n": 0, "mean": None, "std": None, "min": None, "max": None}
    return {"n": len(xs), "mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else None,
            "min": min(xs), "max": max(xs)}


def _betainc_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (DLMF 8.17.22), by the modified Lentz method;
    converges fast for x < (a + 1) / (a + b + 2)."""
    tiny, eps = 1e-300, 1e-16
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 10_000):
        for coef in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),  # even term d_2m
                     -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # odd term d_2m+1
            d = 1.0 + coef * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + coef / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < eps:
            return f
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0 and 0.0 <= x <= 1.0):
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1, got a={a}, b={b}, x={x}")
    if x == 0.0 or x == 1.0:
        return x
    log_front = a * math.log(x) + b * math.log1p(-x) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betainc_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betainc_cf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    # P(T > |t|) from whichever of x = df / (df + t^2) and 1 - x is small, computed directly (1 - x from
    # a rounded x would lose the digits of small |t|).
    t2 = t * t
    if t2 < df:
        tail = 0.5 - 0.5 * betainc(0.5, df / 2.0, t2 / (df + t2))
    else:
        tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t2))
    return tail if t >= 0 else 1.0 - tail


@lru_cache(maxsize=1024)
def t_ppf(p: float, df: float) -> float:
    """Inverse CDF of Student's t: the t with P(T <= t) = p, 0 < p < 1. Bisection on the upper tail until
    the bracket is a few ulps wide (absolute error far below 1e-8 for the quantiles intervals use)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_ppf needs 0 < p < 1, got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    q = 1.0 - p  # upper tail to reach; t_sf is decreasing in t
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > q:
        lo, hi = hi, hi * 2.0
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            return mid
        if t_sf(mid, df) > q:
            lo = mid
        else:
            hi = mid


# ------------------------------------------------------------------------------------------- tests


def _clean(diffs: Sequence[float | None], what: str = "differences") -> tuple[np.ndarray, int]:
    """The finite differences as float64 [n], and how many NaN / None entries were dropped.
    Infinities are an error (no metric difference is infinite; dropping one would hide a broken run)."""
    kept, dropped = [], 0
    for i, v in enumerate(diffs):
        x = math.nan if v is None else float(v)
        if math.isnan(x):
            dropped += 1
        elif math.isinf(x):
            raise ValueError(f"{what}: entry #{i} is {x}, not a finite difference")
        else:
            kept.append(x)
    return np.asarray(kept, dtype=np.float64), dropped


def paired_t(diffs: Sequence[float | None], *, level: float = 0.95) -> dict:
    """Paired mean difference with its Student-t interval and two-sided t-test p.

    diffs: [n] variant minus reference per seed; NaN / None are dropped and counted.
    Returns {"n", "dropped", "mean", "sd" (sample sd, ddof 1), "df", "low", "high", "p"}. n = 0: all None;
    n = 1: the mean only. Equal differences (sd 0): an interval of zero width at the mean, p 0 when the
    mean is not 0 and 1 when it is.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    d, dropped = _clean(diffs)
    n = len(d)
    out = {"n": n, "dropped": dropped, "mean": None, "sd": None, "df": None, "low": None, "high": None, "p": None}
    if n == 0:
        return out
    mean = float(d.mean())
    out["mean"] = mean
    if n == 1:
        return out
    df = n - 1
    out["df"] = df
    if np.all(d == d[0]):  # exact: the computed sd of equal floats can be 1e-17 instead of 0
        out.update(mean=float(d[0]), sd=0.0, low=float(d[0]), high=float(d[0]), p=0.0 if d[0] != 0 else 1.0)
        return out
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    half = t_ppf(0.5 + level / 2.0, df) * se
    out.update(sd=sd, low=mean - half, high=mean + half, p=min(1.0, 2.0 * t_sf(abs(mean) / se, df)))
    return out


def signflip_p(diffs: Sequence[float | None], *, exact_max: int = EXACT_MAX_PAIRS, draws: int = SIGNFLIP_DRAWS,
               seed: int = SIGNFLIP_SEED) -> dict:
    """Two-sided sign-flip permutation p-value of the paired differences' mean.

    diffs: [n]; NaN / None dropped and counted. For n <= exact_max: the share of all 2^n sign patterns
    (s_i = +-1) with |sum s_i |d_i|| >= |sum d_i| (up to TIE_RTOL * sum |d_i|), exact. Above: `draws`
    random patterns from numpy.random.default_rng(seed), p = (1 + hits) / (1 + draws) (the observed
    pattern counts as one draw, so p > 0 and the test keeps its level).
    Returns {"n", "dropped", "p" (None for n < 2), "exact", "patterns" (2^n, exact only), "draws" and
    "seed" (Monte Carlo only, else None)}.
    """
    d, dropped = _clean(diffs)
    n = len(d)
    out = {"n": n, "dropped": dropped, "p": None, "exact": n <= exact_max, "patterns": None, "draws": None,
           "seed": None}
    if n < 2:
        return out
    magnitudes = np.abs(d)
    threshold = abs(float(d.sum())) - TIE_RTOL * float(magnitudes.sum())
    if n <= exact_max:
        patterns = 1 << n
        bits = (np.arange(patterns, dtype=np.int64)[:, None] >> np.arange(n)) & 1  # [2^n, n]
        sums = (1.0 - 2.0 * bits) @ magnitudes  # [2^n]
        out.update(p=float(np.count_nonzero(np.abs(sums) >= threshold)) / patterns, patterns=patterns)
        return out
    if draws < 1:
        raise ValueError(f"draws must be >= 1, got {draws}")
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, draws, _MC_CHUNK):
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(min(_MC_CHUNK, draws - start), n))  # [chunk, n]
        hits += int(np.count_nonzero(np.abs(signs @ magnitudes) >= threshold))
    out.update(p=(1 + hits) / (1 + draws), draws=draws, seed=seed)
    return out


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: sorted ascending, the j-th smallest
    (j = 0..m-1) becomes max over i <= j of min(1, (m - i) * p_(i)). Rejecting where adjusted < alpha
    controls the family-wise error rate at alpha."""
    p = [float(x) for x in pvalues]
    for i, x in enumerate(p):
        if not 0.0 <= x <= 1.0:  # also NaN
            raise ValueError(f"p-value #{i} is {x}, not in [0, 1]")
    m = len(p)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: p[k])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def compare_to_reference(diffs_by_variant: Mapping[str, Sequence[float | None]], *, level: float = 0.95,
                         alpha: float = 0.05, exact_max: int = EXACT_MAX_PAIRS, draws: int = SIGNFLIP_DRAWS,
                         seed: int = SIGNFLIP_SEED) -> dict[str, dict]:
    """Per variant, its paired differences to the reference on one metric, tested with Holm across variants.

    diffs_by_variant: name -> [n] differences (variant minus reference, one per seed both finished; NaN /
    None dropped and counted). Returns name -> {"n", "dropped", "mean", "sd", "t_low", "t_high", "level",
    "p_t", "p_signflip", "signflip_exact", "draws", "seed", "p_holm", "significant", "wins", "losses",
    "ties", "method"}, in the input order. p_holm is Holm over the variants whose sign-flip p exists (n >= 2;
    the others get None and do not count in m); significant = p_holm < alpha and the t-interval excludes 0. wins / losses / ties count
    differences > 0 / < 0 / == 0 (which of them is better depends on the metric's direction). An infinite
    difference raises ValueError naming the variant.
    """
    rows: dict[str, dict] = {}
    for name, diffs in diffs_by_variant.items():
        d, _ = _clean(diffs, f"differences of {name!r}")  # first, so an error names the variant
        t = paired_t(diffs, level=level)
        sf = signflip_p(diffs, exact_max=exact_max, draws=draws, seed=seed)
        rows[name] = {"n": t["n"], "dropped": t["dropped"], "mean": t["mean"], "sd": t["sd"], "t_low": t["low"],
                      "t_high": t["high"], "level": level, "p_t": t["p"], "p_signflip": sf["p"],
                      "signflip_exact": sf["exact"], "draws": sf["draws"], "seed": sf["seed"], "p_holm": None,
                      "significant": False, "wins": int(np.count_nonzero(d > 0)),
                      "losses": int(np.count_nonzero(d < 0)), "ties": int(np.count_nonzero(d == 0))}
    tested = [name for name, row in rows.items() if row["p_signflip"] is not None]
    for name, adjusted in zip(tested, holm([rows[name]["p_signflip"] for name in tested])):
        rows[name]["p_holm"] = adjusted
        rows[name]["significant"] = bool(adjusted < alpha and interval_excludes_zero(rows[name]))
    for row in rows.values():
        row["method"] = _method(row, len(tested), level)
    return rows


def interval_excludes_zero(row: Mapping) -> bool:
    """Whether a paired row's t-interval (uncorrected) lies wholly on one side of 0."""
    return row["t_low"] is not None and (row["t_low"] > 0 or row["t_high"] < 0)


def _method(row: Mapping, m: int, level: float) -> str:
    n = row["n"]
    if n < 2:
        return f"{n} pair{'s' if n != 1 else ''}: no interval and no test"
    if row["signflip_exact"]:
        flip = f"exact sign-flip p over all 2^{n} = {1 << n} sign patterns"
    else:
        flip = (f"Monte Carlo sign-flip p from {row['draws']} random sign patterns (seed {row['seed']}), "
                f"(1 + hits) / (1 + draws)")
    return f"paired t {level:.0%} interval (df {n - 1}); {flip}; Holm over {m} comparison{'s' if m != 1 else ''}"
