"""Kernels over the numeric vocabulary V_num: value distance, and the paper's random / shuffled controls.

Everything here is built once, in float64, from the N token values; callers keep the result as buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

KERNELS = ("gaussian", "laplace")
KERNEL_MODES = ("value_distance", "random", "shuffled")


def value_distances(values: torch.Tensor) -> torch.Tensor:
    """d_ij = |v_i - v_j|: [N] -> [N, N] float64."""
    v = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    return (v[:, None] - v[None, :]).abs()


def squash_distances(d: torch.Tensor, squash: float) -> torch.Tensor:
    """Map the non-zero distances affinely onto [1, squash] (smallest -> 1, largest -> squash); zeros stay.

    When every non-zero distance is the same they all become 1. `squash <= 1` returns `d` unchanged.
    """
    if squash <= 1:
        return d
    nonzero = d > 0
    if not nonzero.any():
        return d
    lo, hi = d[nonzero].min(), d[nonzero].max()
    scaled = 1.0 + (d - lo) / (hi - lo) * (squash - 1.0) if hi > lo else torch.ones_like(d)
    return torch.where(nonzero, scaled, torch.zeros_like(d))


def distance_kernel(d: torch.Tensor, kernel: str = "gaussian", sigmas: Sequence[float] = (2.0,)) -> torch.Tensor:
    """kappa(d) averaged over `sigmas`, clamped to [0, 1]: [N, N] -> [N, N].

    gaussian: exp(-d^2 / (2 sigma^2)); laplace: exp(-d / sigma).
    """
    sigmas = tuple(float(s) for s in sigmas)
    if not sigmas or any(s <= 0 for s in sigmas):
        raise ValueError(f"sigmas must be a non-empty list of positive numbers, got {sigmas}")
    if kernel == "gaussian":
        parts = [torch.exp(-(d**2) / (2 * s**2)) for s in sigmas]
    elif kernel == "laplace":
        parts = [torch.exp(-d / s) for s in sigmas]
    else:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    return torch.stack(parts).mean(0).clamp(0.0, 1.0)


def random_features(n: int, seed: int, dim: int = 4) -> torch.Tensor:
    """Rademacher features [n, dim] (entries +-1 drawn from torch.Generator seeded by `seed`), rows L2-normalised."""
    g = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (n, dim), generator=g, dtype=torch.int64) * 2 - 1
    return signs.to(torch.float64) / dim**0.5


def random_kernel(n: int, seed: int, dim: int = 4, power: int = 5) -> torch.Tensor:
    """The random PSD control: Gram matrix of `random_features`, raised element-wise to `power`: [n, n]."""
    f = random_features(n, seed, dim)
    return (f @ f.T) ** power


def shuffle_permutation(n: int, seed: int) -> torch.Tensor:
    """The shuffled control's permutation [n]: torch.randperm(n) from a torch.Generator seeded by `seed`."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))


def build_kernel(
    values: torch.Tensor,
    *,
    kernel: str = "gaussian",
    sigmas: Sequence[float] = (2.0,),
    squash: float = 9.0,
    kernel_mode: str = "value_distance",
    seed: int = 42,
) -> torch.Tensor:
    """K [N, N] float64 over the N values.

    value_distance: kappa(squash(|v_i - v_j|)). shuffled: the same built from the values permuted by
    `shuffle_permutation(N, seed)` (token i gets value v[perm[i]]). random: `random_kernel(N, seed)`,
    ignoring kernel, sigmas and squash.
    """
    values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if len(values) == 0:
        raise ValueError("the numeric vocabulary is empty")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel_mode == "random":
        return random_kernel(len(values), seed)
    if kernel_mode == "shuffled":
        values = values[shuffle_permutation(len(values), seed)]
    elif kernel_mode != "value_distance":
        raise ValueError(f"kernel_mode must be one of {KERNEL_MODES}, got {kernel_mode!r}")
    return distance_kernel(squash_distances(value_distances(values), squash), kernel, sigmas)
