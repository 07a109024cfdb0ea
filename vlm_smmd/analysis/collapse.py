"""Collapse: how many distinct answers a run gives, its most common one and that one's share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from vlm_smmd.metrics import normalize_answer

from .digits import rate

COLLAPSE_SHARE = 0.5
COLLAPSE_DISTINCT = 0.1


def collapse_check(records: Sequence[Mapping]) -> dict:
    """Does the run mostly repeat itself? (rule in the package docstring). Predictions and targets are
    compared normalised (`metrics.normalize_answer`: trimmed, whitespace collapsed, lower case)."""
    preds = Counter(normalize_answer(r["prediction"]) for r in records)
    targets = Counter(normalize_answer(r["targets"][0]) for r in records)
    n = len(records)
    top, top_count = preds.most_common(1)[0] if preds else ("", 0)
    top_target_share = rate(targets.most_common(1)[0][1], n) if targets else None
    share = rate(top_count, n)
    reasons = []
    if share is not None and share > COLLAPSE_SHARE and share > 2 * top_target_share:
        reasons.append(f"the most common answer {top!r} is {top_count} of {n} answers ({share:.0%}); the most "
                       f"common target is only {top_target_share:.0%} of the targets")
    if len(targets) >= 10 and len(preds) < COLLAPSE_DISTINCT * len(targets):
        reasons.append(f"only {len(preds)} distinct answers for {len(targets)} distinct targets")
    return {"records": n, "distinct_predictions": len(preds), "distinct_targets": len(targets),
            "most_common_prediction": top, "most_common_count": top_count, "most_common_share": share,
            "most_common_target_share": top_target_share, "top_predictions": preds.most_common(5),
            "collapsed": bool(reasons), "reasons": reasons}
