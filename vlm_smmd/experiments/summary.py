"""One table across `compare` pages (`vlm-smmd summary`): each page's declared endpoint against CE, with Holm's
correction across every test of the table, not only within a page, and beside each result without a finding
its minimal detectable difference.

Everything re-derives from the pages' own files: the tests from paired.csv (the rows marked `primary` whose
reference is CE), the groups' means, spreads and chance from results.csv. The sign-flip p-values are the pages';
only the correction is new. The minimal detectable difference (MDD) at power 1 - beta is the paired t
approximation (t_{1-alpha/2, n-1} + t_{1-beta, n-1}) * sd / sqrt(n), from the observed spread of the paired
differences: before the correction (alpha) and at the strictest step of Holm's (alpha / m, Bonferroni), which
brackets what the corrected test can detect."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from ..analysis.formatting import fmt, md_table
from .statistics import holm, interval_excludes_zero, t_ppf
from .variants import BASELINE

ALPHA = 0.05
POWER = 0.8


class SummaryError(ValueError):
    """A page that cannot be summarised; one line naming its file."""


def minimal_detectable_difference(sd: float | None, n: int, *, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The paired difference a two-sided t-test at `alpha` detects with probability `power` (central-t
    approximation) for n pairs whose differences spread with sample sd `sd`; None below 2 pairs or without sd."""
    if sd is None or n < 2:
        return None
    return (t_ppf(1.0 - alpha / 2.0, n - 1) + t_ppf(power, n - 1)) * sd / math.sqrt(n)


def _read_csv(path: Path) -> list[dict]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        raise SummaryError(f"{path}: no such file (is {path.parent} the --out of a finished vlm-smmd compare?)") from None


def _number(row: dict, key: str, path: Path) -> float | None:
    value = row.get(key, "")
    if value in ("", None):
        return None
    try:
        return float(value)
    except ValueError:
        raise SummaryError(f"{path}: {key} of {row.get('comparison') or row.get('group')!r} is {value!r}, "
                           "not a number") from None


def read_page(label: str, folder: Path) -> list[dict]:
    """The page's primary tests against CE: one dict per comparison with its figures, the two groups' mean and
    std and the figure's chance. A SummaryError naming the file for a page without them."""
    paired_path, results_path = folder / "paired.csv", folder / "results.csv"
    paired = _read_csv(paired_path)
    if paired and "primary" not in paired[0]:
        raise SummaryError(f"{paired_path}: no primary column (written by an earlier release); rerun the same "
                           "vlm-smmd compare command on that folder to rewrite its page")
    tests = [r for r in paired if r["primary"] == "True" and r["b"] == BASELINE]
    if not tests:
        raise SummaryError(f"{paired_path}: no test of the declared endpoint against {BASELINE!r} (a page needs a "
                           f"primary_metric and the {BASELINE!r} group)")
    groups = {(r["split"], r["group"], r["figure"]): r for r in _read_csv(results_path)}
    out = []
    for r in tests:
        split, figure = r["split"], r["figure"]
        a, b = groups.get((split, r["a"], figure)), groups.get((split, r["b"], figure))
        if a is None or b is None:
            raise SummaryError(f"{results_path}: no {figure} on {split} for {r['a'] if a is None else r['b']!r}")
        out.append({
            "setting": label, "page": str(folder), "split": split, "figure": figure, "a": r["a"], "b": r["b"],
            "lower_is_better": r.get("lower_is_better") == "True", "n": int(r["n"]),
            "mean": _number(r, "mean", paired_path), "sd": _number(r, "sd", paired_path),
            "t_low": _number(r, "t_low", paired_path), "t_high": _number(r, "t_high", paired_path),
            "p_signflip": _number(r, "p_signflip", paired_path),
            "a_mean": _number(a, "mean", results_path), "a_std": _number(a, "std", results_path),
            "b_mean": _number(b, "mean", results_path), "b_std": _number(b, "std", results_path),
            "chance": _number(b, "chance", results_path)})
    return out


def summarize(pages: Sequence[tuple[str, Path]], *, alpha: float = ALPHA, power: float = POWER) -> list[dict]:
    """Every page's primary tests against CE, with p_holm (Holm across all of them whose sign-flip p exists),
    significant (Holm p < alpha and the t-interval without 0), the verdict and the MDDs (uncorrected and at
    alpha / m)."""
    rows = [row for label, folder in pages for row in read_page(label, Path(folder))]
    tested = [row for row in rows if row["p_signflip"] is not None]
    for row, p in zip(tested, holm([row["p_signflip"] for row in tested])):
        row["p_holm"] = p
    m = len(tested)
    for row in rows:
        row.setdefault("p_holm", None)
        row["significant"] = bool(row["p_holm"] is not None and row["p_holm"] < alpha and interval_excludes_zero(row))
        row["mdd"] = minimal_detectable_difference(row["sd"], row["n"], alpha=alpha, power=power)
        row["mdd_corrected"] = minimal_detectable_difference(row["sd"], row["n"], alpha=alpha / max(m, 1),
                                                             power=power)
        if row["significant"]:
            row["verdict"] = f"{row['a']} {'better' if (row['mean'] < 0) == row['lower_is_better'] else 'worse'}"
        elif row["n"] < 2:
            row["verdict"] = "too few seeds"
        else:
            row["verdict"] = "no detectable difference"
    return rows


def _p(p: float | None) -> str:
    return "–" if p is None else ("< 0.001" if p < 0.001 else f"{p:.3f}")


def _mean_std(mean, std) -> str:
    return fmt(mean) + (f" ± {fmt(std)}" if std is not None else "")


def write_summary(out: Path, rows: Sequence[dict], *, alpha: float = ALPHA, power: float = POWER) -> dict:
    """summary.md and summary.csv in `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    m = sum(row["p_holm"] is not None for row in rows)
    header = ["setting", "comparison", "endpoint", "n", "CE: mean ± std", "loss: mean ± std", "chance",
              "difference [95% t-interval]", "sign-flip p", "Holm p (all)", "result",
              f"MDD at {power:.0%} power (corrected)"]
    table = []
    for r in rows:
        diff = (f"{fmt(r['mean'], signed=True)} [{fmt(r['t_low'], signed=True)}, {fmt(r['t_high'], signed=True)}]"
                if r["t_low"] is not None else fmt(r["mean"], signed=True))
        result = f"**{r['verdict']}**" if r["significant"] else r["verdict"]
        mdd = "" if r["significant"] or r["mdd"] is None else f"{fmt(r['mdd'])} ({fmt(r['mdd_corrected'])})"
        table.append([r["setting"], f"{r['a']} vs {r['b']}", f"{r['figure']} on `{r['split']}`", r["n"],
                      _mean_std(r["b_mean"], r["b_std"]), _mean_std(r["a_mean"], r["a_std"]), fmt(r["chance"]),
                      diff, _p(r["p_signflip"]), _p(r["p_holm"]), result, mdd])
    md = ["# Summary across pages", "",
          f"Each page's declared endpoint against CE (`{BASELINE}`), paired by seed. Holm's correction runs across "
          f"all {m} tests of this table (not only within a page); **bold**: Holm p < {alpha} and the t-interval "
          "excludes 0. Means and spreads are over the pages' non-development seeds; chance is the figure's "
          f"expected value for a random answer from the evaluated records (the pages' definition). MDD: the smallest "
          f"difference a paired t-test at {alpha} two-sided would detect with {power:.0%} power, from the observed "
          f"spread of the differences; in brackets at {alpha}/{m} (the strictest Holm step). A result without a "
          "finding is not equivalence: differences below its MDD are not excluded.", ""]
    md += md_table(header, table) + ["", "Pages: " + "; ".join(
        f"{label}: `{page}`" for label, page in dict.fromkeys((r["setting"], r["page"]) for r in rows)), ""]
    (out / "summary.md").write_text("\n".join(md), encoding="utf-8")
    keys = ["setting", "page", "split", "figure", "a", "b", "lower_is_better", "n", "mean", "sd", "t_low", "t_high",
            "p_signflip", "p_holm", "significant", "verdict", "mdd", "mdd_corrected", "a_mean", "a_std", "b_mean",
            "b_std", "chance"]
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(keys)
        for r in rows:
            w.writerow(["" if r[k] is None else r[k] for k in keys])
    return {"summary_md": out / "summary.md", "summary_csv": out / "summary.csv"}
