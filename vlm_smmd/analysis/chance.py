"""Chance by pairs of records: every ordered pair of distinct records, the prediction being one record's
answer and the target the other's (definition in the `vlm_smmd.analysis` docstring)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence

PAIR_LIMIT = 1_000_000  # distinct (prediction, target) answer pairs enumerated exactly for chance
PAIR_SAMPLES = 200_000  # random pairs above that
PAIR_SEED = 0


def record_pairs(keys: Sequence[Hashable]) -> tuple[Iterator[tuple[Hashable, Hashable, int]], int, str]:
    """(iterator of (prediction key, target key, weight), total weight, method) over the ordered pairs
    (i, j) of distinct records, the prediction being record j's key and the target record i's. Exact over
    the distinct keys with their multiplicities up to PAIR_LIMIT distinct pairs, else PAIR_SAMPLES pairs
    drawn with seed PAIR_SEED (weight 1 each). A mean over pairs is sum(weight * score) / total."""
    n = len(keys)
    counts = Counter(keys)
    if len(counts) ** 2 <= PAIR_LIMIT:
        exact = ((p, t, kt * (kp - (p == t))) for t, kt in counts.items() for p, kp in counts.items())
        return ((p, t, w) for p, t, w in exact if w), n * (n - 1), \
            f"exact over all {n} x {n - 1} ordered pairs of distinct records"

    def sampled():
        rng = random.Random(PAIR_SEED)
        for _ in range(PAIR_SAMPLES):
            i, j = rng.randrange(n), rng.randrange(n - 1)
            yield keys[j + (j >= i)], keys[i], 1

    return sampled(), PAIR_SAMPLES, f"estimated from {PAIR_SAMPLES:,} random pairs of the {n} records (seed {PAIR_SEED})"


def pair_mean(keys: Sequence[Hashable], score: Callable[[Hashable, Hashable], float]) -> float | None:
    """Mean of score(prediction key, target key) over `record_pairs(keys)`; None below 2 records."""
    if len(keys) < 2:
        return None
    pairs, total, _ = record_pairs(keys)
    return sum(w * score(p, t) for p, t, w in pairs) / total


def distinct_records(records: Iterable[Mapping]) -> list[Mapping]:
    """Records distinct by (source, id), first occurrence kept (pooled seeds repeat them)."""
    seen, out = set(), []
    for r in records:
        key = (r["source"], str(r["id"]))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out
