"""Slow, dense float64 references of the loss formulas, written from the spec with Python floats.

They share nothing with the implementation except the documented seed recipes of the two controls.
"""

import math

import torch

DIGITS = [float(i) for i in range(10)]
UNEVEN = [0.0, 1.0, 2.0, 5.0, 10.0, 100.0, 999.0]


def softmax(row):
    m = max(row)
    e = [math.exp(x - m) for x in row]
    s = sum(e)
    return [x / s for x in e]


def ref_kernel(values, kernel="gaussian", sigmas=(2.0,), squash=9.0, kernel_mode="value_distance", seed=42):
    n = len(values)
    if kernel_mode == "random":
        # documented recipe: +-1 signs from torch.randint(0, 2, (n, 4)) with a Generator seeded by `seed`
        g = torch.Generator().manual_seed(seed)
        signs = (torch.randint(0, 2, (n, 4), generator=g) * 2 - 1).tolist()
        feats = [[s / 2.0 for s in row] for row in signs]  # L2 norm of a +-1 row of 4 is 2
        return [[sum(a * b for a, b in zip(feats[i], feats[j])) ** 5 for j in range(n)] for i in range(n)]
    if kernel_mode == "shuffled":
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
        values = [values[perm[i]] for i in range(n)]
    d = [[abs(values[i] - values[j]) for j in range(n)] for i in range(n)]
    if squash > 1:
        nz = [x for row in d for x in row if x != 0]
        if nz:
            lo, hi = min(nz), max(nz)
            for i in range(n):
                for j in range(n):
                    if d[i][j] != 0:
                        d[i][j] = 1.0 if hi == lo else 1.0 + (d[i][j] - lo) * (squash - 1.0) / (hi - lo)
    k = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if kernel == "gaussian":
                vals = [math.exp(-d[i][j] ** 2 / (2 * s * s)) for s in sigmas]
            else:
                vals = [math.exp(-d[i][j] / s) for s in sigmas]
            k[i][j] = min(1.0, max(0.0, sum(vals) / len(vals)))
    return k


def ref_smmd_terms(probs, y, k):
    """(mmd, smooth, mean degree) for one position: probabilities [N], target index, kernel [N][N]."""
    n = len(probs)
    r = [probs[i] - (1.0 if i == y else 0.0) for i in range(n)]
    deg = [sum(k[i]) for i in range(n)]
    lap = [[(deg[i] if i == j else 0.0) - k[i][j] for j in range(n)] for i in range(n)]
    mmd = sum(r[i] * k[i][j] * r[j] for i in range(n) for j in range(n))
    smooth = sum(r[i] * lap[i][j] * r[j] for i in range(n) for j in range(n))
    return mmd, smooth, sum(deg) / n


def ref_smmd(logits, targets, values, mode="smmd", alpha="auto", **kernel_options):
    """Mean over positions of max(0, per-position value); 0 for no position."""
    k = ref_kernel(values, **kernel_options)
    out = []
    for row, y in zip(logits, targets):
        mmd, smooth, mean_deg = ref_smmd_terms(softmax(row), y, k)
        a = 1.0 / (2.0 * mean_deg) if alpha == "auto" else alpha
        value = {"mmd": mmd, "smooth": a * smooth, "smmd": mmd + a * smooth}[mode]
        out.append(max(0.0, value))
    return sum(out) / len(out) if out else 0.0
