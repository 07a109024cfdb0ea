"""The contract every numeric loss follows (`NumericLoss`), and the helpers the losses share.

A numeric loss scores logits over V_num, the numeric sub-vocabulary, in the order of its `values` [N]:
    loss = SomeLoss(values, **options)                  values [N]: the token values, V_num order
    loss.per_position(logits [M, N], target [M]) -> [M]  target: indices into values
    loss(logits, target, reduction="mean" | "sum" | "none")
Token-level losses score each position alone. Number-level losses (`needs_numbers = True`) score whole
numbers, so they also need `numbers`, the `vlm_smmd.numeric.NumberLayout` of those M positions (which
positions form one number, and the place value of each); rows outside every number score 0.
Math runs in float32 for half, bfloat16 and float32 logits, in float64 for float64 logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn

REDUCTIONS = ("mean", "sum", "none")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half / bfloat16 / float32 inputs, float64 for float64 ones."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def reduce(per_position: torch.Tensor, reduction: str, count=None) -> torch.Tensor:
    """[M] -> scalar ("mean": sum / count, count defaulting to M, 0 when it is 0, never NaN; "sum") or [M]
    ("none"); stays in the graph."""
    if reduction == "none":
        return per_position
    if reduction == "sum":
        return per_position.sum()
    if reduction == "mean":
        return per_position.sum() / max(per_position.numel() if count is None else count, 1)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def check_inputs(logits: torch.Tensor, target: torch.Tensor, n: int) -> None:
    if logits.dim() != 2 or logits.shape[1] != n:
        raise ValueError(f"logits must be [M, {n}] (over V_num), got {tuple(logits.shape)}")
    if target.shape != logits.shape[:1]:
        raise ValueError(f"target must be [M] = [{logits.shape[0]}], got {tuple(target.shape)}")


class NumericLoss(nn.Module):
    """Base class of the numeric losses: the values buffer, input checks, dtype and reduction.

    Subclasses implement `_per_position(logits [M, N] in the compute dtype, target [M])` -> [M], or, with
    `needs_numbers = True`, `_per_position(logits, target, numbers)`.
    """

    needs_numbers: ClassVar[bool] = False

    def __init__(self, values: torch.Tensor | Sequence[float]):
        super().__init__()
        values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
        if len(values) == 0:
            raise ValueError("the numeric vocabulary is empty")
        self.register_buffer("values", values.to(torch.float32), persistent=False)

    def __len__(self) -> int:
        return len(self.values)

    def per_position(self, logits: torch.Tensor, target: torch.Tensor, numbers=None) -> torch.Tensor:
        """logits [M, N] over V_num, target [M] indices into values -> [M] (float32, float64 for float64 logits).

        `numbers` (a `NumberLayout` of the M rows) is required by number-level losses, ignored by the others.
        """
        check_inputs(logits, target, len(self))
        logits = logits.to(compute_dtype(logits.dtype))
        if not self.needs_numbers:
            return self._per_position(logits, target)
        if numbers is None:
            raise ValueError(f"{type(self).__name__} scores whole numbers: pass numbers= (a NumberLayout from "
                             "NumericVocab.number_layout; NumericObjective.forward builds it from batch_idx, pos_idx)")
        if numbers.number.shape != target.shape:
            raise ValueError(f"numbers covers {tuple(numbers.number.shape)} positions, the logits {len(target)}")
        return self._per_position(logits, target, numbers)

    def _per_position(self, logits: torch.Tensor, target: torch.Tensor, *numbers) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, logits: torch.Tensor, target: torch.Tensor, reduction: str = "mean",
                numbers=None) -> torch.Tensor:
        """Reduced `per_position`; with `numbers`, "mean" averages over the rows inside a number."""
        per_position = self.per_position(logits, target, numbers)
        count = None
        if self.needs_numbers and reduction == "mean":
            count = int((numbers.number >= 0).sum())
        return reduce(per_position, reduction, count)
