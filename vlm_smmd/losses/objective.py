"""The training objective from answer-position logits only: CE + lambda * aux at numeric targets.

`answer_positions` names the positions whose next label is not -100 (exactly the HF causal-LM shift); the
trainer computes logits only there (a right-aligned `logits_to_keep` window), so logits for prompt and
image tokens are never built. `NumericObjective` turns those logits [M, V] and targets [M] into the loss
and its logged parts; number-level aux losses (ntil, number_level) also need the positions (batch_idx,
pos_idx) to see which targets form one number.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..numeric import NumericVocab
from .registry import AUX_LAMBDA, build_loss

IGNORE_INDEX = -100


def answer_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Positions that predict a label: labels [B, T] -> (batch_idx [M], pos_idx [M], targets [M]).

    Position t of row b is kept when labels[b, t + 1] != -100 and its target is labels[b, t + 1], the
    same shift as the Hugging Face causal-LM loss. Row-major order.
    """
    if labels.dim() != 2:
        raise ValueError(f"labels must be [B, T], got {tuple(labels.shape)}")
    following = labels[:, 1:]
    batch_idx, pos_idx = (following != IGNORE_INDEX).nonzero(as_tuple=True)
    return batch_idx, pos_idx, following[batch_idx, pos_idx]


def _divide(total: torch.Tensor, denominator) -> torch.Tensor:
    """total / denominator, where a zero (or missing) count divides by 1 so an empty sum stays 0."""
    if isinstance(denominator, torch.Tensor):
        return total / denominator.to(total.device, total.dtype).clamp_min(1)
    return total / max(float(denominator), 1.0)


def _plain_text(value: float) -> str:
    """A value's plain-number text when no token texts are given: "7", "0.5"."""
    return str(int(value)) if float(value).is_integer() else format(value, ".7g")


class NumericObjective(nn.Module):
    """loss = CE over all M answer positions + lam * aux over the positions whose target is in V_num.

    numeric_token_ids [N], numeric_values [N]: V_num (e.g. from `NumericVocab`, see `from_vocab`). aux: a
    name in `registry.AUX_NAMES`; aux_kwargs are its options, range-checked by `registry.check_options`
    (SMMD: kernel, sigmas, squash, alpha, kernel_mode, seed; dist2: tau; gce: sigma; ntil: digit_exp, ...).
    numeric_texts [N] and decimal_point_id tell the number-level losses how tokens spell numbers (defaults:
    each value written plainly, so "07" needs its text; no decimal point token). Logits are upcast to
    float32 for both terms.
    """

    def __init__(
        self,
        numeric_token_ids: torch.Tensor | Sequence[int],
        numeric_values: torch.Tensor | Sequence[float],
        aux: str = "smmd",
        lam: float = 1.0,
        *,
        numeric_texts: Sequence[str] | None = None,
        decimal_point_id: int | None = None,
        **aux_kwargs,
    ):
        super().__init__()
        ids = torch.as_tensor(numeric_token_ids, dtype=torch.long).reshape(-1)
        values = torch.as_tensor(numeric_values, dtype=torch.float32).reshape(-1)
        if len(ids) != len(values) or len(ids) == 0:
            raise ValueError(f"need as many numeric token ids as values (> 0), got {len(ids)} and {len(values)}")
        self.aux_loss = build_loss(aux, values, **aux_kwargs)
        self.aux_name, self.lam = aux, AUX_LAMBDA.check(lam)
        self.vocab = None  # number-level losses: how answers spell numbers (NumericVocab.number_layout)
        if self.aux_loss is not None and self.aux_loss.needs_numbers:
            texts = list(numeric_texts) if numeric_texts is not None else [_plain_text(v) for v in values.tolist()]
            self.vocab = NumericVocab(ids, values, texts, decimal_point_id)
        self.register_buffer("numeric_token_ids", ids, persistent=False)
        self.max_numeric_id = int(ids.max())  # checked against the logit width without a device sync

    @classmethod
    def from_vocab(cls, vocab: NumericVocab, **kwargs) -> NumericObjective:
        """Build from a `vlm_smmd.numeric.NumericVocab` (its texts and decimal point included)."""
        return cls(vocab.token_ids, vocab.values, numeric_texts=vocab.texts, decimal_point_id=vocab.decimal_point_id,
                   **kwargs)

    def forward(self, logits: torch.Tensor, targets: torch.Tensor, ce_denominator=None, aux_denominator=None, *,
                batch_idx: torch.Tensor | None = None, pos_idx: torch.Tensor | None = None,
                numeric_mask: torch.Tensor | None = None) -> dict:
        """logits [M, V] at answer positions, targets [M] token ids (-100 entries are ignored); batch_idx [M]
        and pos_idx [M] the positions' rows and places (`answer_positions`), needed by number-level losses;
        numeric_mask [M] bool, optional: the positions that may take the aux (the collator's numeric_mask at
        the targets, e.g. only the coordinates of a grounding answer); None: every numeric target.

        ce = (sum of CE over the M positions) / ce_denominator (default: number of targets);
        aux = (sum of per-position aux over numeric targets, within numeric_mask when given) / aux_denominator
        (default: their number). A number-level loss gives each numeric token its number's loss
        (`number_level` module docstring), so the same sums and counts hold for it; numbers are found among
        all numeric targets, and a masked-out token's share is then dropped.
        Denominators may be numbers or tensors (e.g. the Trainer's num_items_in_batch); 0 counts as 1.
        Returns {"loss", "ce", "aux"} (tensors in the graph; aux exactly 0 but connected when no target
        is numeric), {"ce_sum", "aux_sum"} (detached tensors) and {"n_tokens", "n_numeric"} (0-d long tensors).
        A token-level aux waits for the device nowhere: no `.item()`, no data-dependent shapes. A
        number-level aux finds the numbers with data-dependent shapes (vectorised, a few syncs).
        """
        if logits.dim() != 2 or targets.shape != logits.shape[:1]:
            raise ValueError(f"need logits [M, V] and targets [M], got {tuple(logits.shape)} and {tuple(targets.shape)}")
        if self.max_numeric_id >= logits.shape[1]:
            raise ValueError(f"numeric token id {self.max_numeric_id} is outside the logit width {logits.shape[1]}")
        if self.numeric_token_ids.device != logits.device:
            self.to(logits.device)  # a loss module is not moved with the model; follow the logits
        targets = targets.to(logits.device)
        logits32 = logits.float() if logits.dtype != torch.float64 else logits
        ce_sum = F.cross_entropy(logits32, targets, ignore_index=IGNORE_INDEX, reduction="sum")
        n_tokens = (targets != IGNORE_INDEX).sum()

        # index_select: its backward is an index_add (advanced indexing backward is ~50x slower at N=1110)
        numeric_logits = None if self.aux_loss is None else logits32.index_select(1, self.numeric_token_ids)  # [M, N]
        return self.combine(ce_sum, n_tokens, numeric_logits, targets, ce_denominator, aux_denominator,
                            batch_idx=batch_idx, pos_idx=pos_idx, numeric_mask=numeric_mask)

    def combine(self, ce_sum: torch.Tensor, n_tokens: torch.Tensor, numeric_logits: torch.Tensor | None,
                targets: torch.Tensor, ce_denominator=None, aux_denominator=None, *,
                batch_idx: torch.Tensor | None = None, pos_idx: torch.Tensor | None = None,
                numeric_mask: torch.Tensor | None = None) -> dict:
        """The parts from a CE sum already taken (`forward`, or a fused / chunked CE that built no logits) and
        the V_num logits numeric_logits [M, N] (float32; in the order of numeric_token_ids) at the M answer
        positions; None when there is no aux. Arguments and result as in `forward`."""
        if self.aux_loss is None:  # a zero still in the graph
            aux_sum, n_numeric = ce_sum[None][:0].sum(), torch.zeros((), dtype=torch.long, device=ce_sum.device)
        else:
            if self.numeric_token_ids.device != numeric_logits.device:
                self.to(numeric_logits.device)
            targets = targets.to(numeric_logits.device)
            ids = self.numeric_token_ids
            match = targets[:, None] == ids[None, :]  # [M, N]
            numeric = match.any(1)  # [M]
            if numeric_mask is not None:
                if numeric_mask.shape != targets.shape:
                    raise ValueError(f"numeric_mask must be [M] like targets, got {tuple(numeric_mask.shape)} and "
                                     f"{tuple(targets.shape)}")
                numeric = numeric & numeric_mask.to(numeric_logits.device, torch.bool)
            # every row goes through the aux (non-numeric rows with a stand-in target) and is masked out:
            # no data-dependent selection, so no sync
            numbers = None
            if self.aux_loss.needs_numbers:
                if batch_idx is None or pos_idx is None:
                    raise ValueError(f"aux {self.aux_name!r} scores whole numbers: pass batch_idx and pos_idx (from "
                                     "answer_positions(labels)) to NumericObjective.forward")
                numbers = self.vocab.number_layout(targets, batch_idx, pos_idx)
            # the rows left out of the aux see zeros instead of their logits: -inf digit logits there (a
            # masked vocabulary) would make the aux's backward NaN, which masking its output does not undo
            numeric_logits = torch.where(numeric[:, None], numeric_logits, torch.zeros_like(numeric_logits))
            per_position = self.aux_loss.per_position(numeric_logits, match.int().argmax(1), numbers)  # [M]
            aux_sum = torch.where(numeric, per_position, torch.zeros_like(per_position)).sum()
            n_numeric = numeric.sum()

        ce = _divide(ce_sum, n_tokens if ce_denominator is None else ce_denominator)
        aux = _divide(aux_sum, n_numeric if aux_denominator is None else aux_denominator)
        return {
            "loss": ce + self.lam * aux, "ce": ce, "aux": aux,
            "ce_sum": ce_sum.detach(), "n_tokens": n_tokens, "aux_sum": aux_sum.detach(), "n_numeric": n_numeric,
        }
