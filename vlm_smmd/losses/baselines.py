"""Token-level numeric losses SMMD is compared against; `NumericLoss` subclasses like `SMMDLoss`.

Each takes `values` [N] (V_num order) at construction and is called as `loss(logits [M, N], target [M])`
with logits over V_num and target indices into values; p = softmax(logits) over V_num, y = values[target].
    NTLMSELoss      (sum_i p_i v_i - y)^2                    Zausinger et al., "Regress, Don't Guess"
    NTLWASLoss      sum_i p_i |v_i - y|  (Wasserstein-1 to the Dirac at y; same paper)
    DIST2Loss       KL(t || p), t_i ~ exp(-(v_i - y)^2 / tau), tau = 1       Chung et al.
    GaussianCELoss  -sum_i t_i log p_i, t_i ~ exp(-(v_i - y)^2 / (2 sigma^2)), sigma = 1
Math in float32 (float64 for float64 logits); `reduction` "mean" (0 when M == 0) | "sum" | "none".
"""

from __future__ import annotations

import torch

from .base import NumericLoss
from .kernels import value_distances


class NTLMSELoss(NumericLoss):
    """Squared error between the expected value under p and the target value."""

    def _per_position(self, logits, target):
        v = self.values.to(device=logits.device, dtype=logits.dtype)
        return (torch.softmax(logits, -1) @ v - v[target]) ** 2


class NTLWASLoss(NumericLoss):
    """Wasserstein-1 distance between p and the one-hot target on the real line: sum_i p_i |v_i - y|."""

    def _per_position(self, logits, target):
        v = self.values.to(device=logits.device, dtype=logits.dtype)
        return (torch.softmax(logits, -1) * (v[None, :] - v[target][:, None]).abs()).sum(-1)


class _SoftTargetLoss(NumericLoss):
    """Losses against a soft target row log_t[y] [N] fixed per target index (kept as a log buffer)."""

    def __init__(self, values, log_targets_scale: float, kl: bool):
        super().__init__(values)
        if log_targets_scale <= 0:
            raise ValueError(f"the temperature / sigma must be positive, got {log_targets_scale}")
        d = value_distances(values)
        log_t = torch.log_softmax(-(d**2) / log_targets_scale, dim=1)  # row y: log t(. | y)
        self.register_buffer("log_targets", log_t.to(torch.float32), persistent=False)
        self.kl = kl

    def _per_position(self, logits, target):
        log_t = self.log_targets.to(device=logits.device, dtype=logits.dtype)[target]
        t = log_t.exp()
        log_p = torch.log_softmax(logits, -1)
        terms = t * (log_t - log_p) if self.kl else -t * log_p
        return torch.where(t > 0, terms, torch.zeros_like(terms)).sum(-1)  # 0 * log 0 counts as 0


class DIST2Loss(_SoftTargetLoss):
    """KL(t || p) with t_i proportional to exp(-(v_i - y)^2 / tau) over V_num."""

    def __init__(self, values, *, tau: float = 1.0):
        super().__init__(values, tau, kl=True)
        self.tau = tau


class GaussianCELoss(_SoftTargetLoss):
    """Cross-entropy against Gaussian-smoothed labels, t_i proportional to exp(-(v_i - y)^2 / (2 sigma^2))."""

    def __init__(self, values, *, sigma: float = 1.0):
        if sigma <= 0:
            raise ValueError(f"sigma must be positive, got {sigma}")
        super().__init__(values, 2 * sigma**2, kl=False)
        self.sigma = sigma
