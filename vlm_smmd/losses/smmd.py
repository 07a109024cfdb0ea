"""SMMD: Smooth Maximum Mean Discrepancy between the predicted V_num distribution and the one-hot target.

For a position with logits z [N] over V_num and target index y:
    p = softmax(z), q = onehot(y), r = p - q
    MMD = r^T K r,  smooth = alpha * r^T L r  (L = D - K, D = diag(row sums of K))
    SMMD = MMD + smooth,  alpha = 1 / (2 * mean degree) unless given.
mode "mmd" keeps the first term, "smooth" the second (alpha included), "smmd" both; each per-position
value is clamped at 0. All of it is one quadratic form r^T A r with A fixed at construction.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F

from .base import NumericLoss
from .kernels import build_kernel

MODES = ("mmd", "smooth", "smmd")  # the `mode` argument; the registry names each as an aux loss


class SMMDLoss(NumericLoss):
    """SMMD (or its mmd / smooth parts) on logits over V_num.

    values: [N] token values in V_num order. `loss(logits [M, N], target [M] indices into values)` -> scalar
    mean over positions (0 when M == 0); `reduction="none"` gives [M], "sum" the sum.
    K, degree, L, alpha and the quadratic form A are float32 buffers (non-persistent, they follow .to()).
    """

    def __init__(
        self,
        values: torch.Tensor | Sequence[float],
        *,
        mode: str = "smmd",
        kernel: str = "gaussian",
        sigmas: Sequence[float] = (2.0,),
        squash: float = 9.0,
        alpha: str | float = "auto",
        kernel_mode: str = "value_distance",
        seed: int = 42,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        super().__init__(values)
        self.mode = mode
        values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
        k = build_kernel(values, kernel=kernel, sigmas=sigmas, squash=squash, kernel_mode=kernel_mode, seed=seed)
        degree = k.sum(1)
        if alpha == "auto":
            mean_degree = degree.mean()
            if mean_degree <= 0:
                raise ValueError(f"alpha='auto' needs a positive mean degree, got {float(mean_degree)}")
            alpha_value = 1.0 / (2.0 * mean_degree)
        elif isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
            alpha_value = torch.tensor(float(alpha), dtype=torch.float64)
        else:
            raise ValueError(f"alpha must be 'auto' or a number, got {alpha!r}")
        laplacian = torch.diag(degree) - k
        smooth = alpha_value * laplacian
        form = k if mode == "mmd" else smooth if mode == "smooth" else k + smooth
        for name, t in [("K", k), ("degree", degree), ("L", laplacian),
                        ("alpha", alpha_value), ("A", form)]:
            self.register_buffer(name, t.to(torch.float32), persistent=False)

    def divergence(self, probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per-position value [M] from probabilities [M, N] over V_num and target indices [M], clamped at 0."""
        r = probs - F.one_hot(target, probs.shape[-1]).to(probs.dtype)
        a = self.A.to(device=r.device, dtype=r.dtype)
        return ((r @ a) * r).sum(-1).clamp_min(0.0)

    def _per_position(self, logits, target):
        return self.divergence(torch.softmax(logits, dim=-1), target)
