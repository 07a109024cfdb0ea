"""One training step of the numeric objective, for both doors: `NumericLossMixin` (any Trainer subclass, and
through it our `NumericTrainer`) and `numeric_loss_func` (a Trainer's `compute_loss_func`).

Written once here:
- `AnswerIndex`: the positions that predict an answer token (`answer_positions`, the causal-LM shift) and the
  logits the model must build for them (`logits_to_keep`); in a packed batch (TRL padding-free: one row,
  position_ids restarting at 0 per sample, or a VLM's mRoPE position ids [R, B, T]: `sample_starts`) a sample's
  first token is never a target, so the shift never crosses a sequence boundary.
- `NumericStep.begin`: the optimizer step's two counts, answer tokens and numeric answer tokens, over all
  its micro-batches and ranks, from one host copy of their labels (the step's only sync). A numeric token
  counts where its target is in V_num and, when the batch has the collator's `numeric_mask`, where that mask
  is true (grounding: the coordinates, not the "2" of bbox_2d), the positions the objective's aux sees.
- `NumericStep.loss`: the normalisation. In a step that `begin` counted, CE and aux are sums divided by the
  step's counts, times the world size (DDP averages gradients over ranks): the update equals the one big
  batch's. Otherwise (evaluation) means over the batch, divided by the accumulation steps in training.
- `NumericStep.record` / `figures`: the running sums (ce_sum, n_tokens, aux_sum, n_numeric) kept on the
  device and read at log steps as ce, aux, total and numeric_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .objective import IGNORE_INDEX, NumericObjective

ANSWER_INDEX = "numeric_answer_index"  # the batch key a step keeps its host-side answer positions under
PARTS = ("ce_sum", "n_tokens", "aux_sum", "n_numeric")


def packed_key(batch: dict, key: str) -> bool:
    """Whether batch[key] is a tensor the index reads: the numeric_mask [B, T], or position_ids ([B, T], or a
    VLM's mRoPE position ids [R, B, T])."""
    value = batch.get(key)
    if value is None:
        return False
    shape = batch["labels"].shape
    return value.shape == shape or (key == "position_ids" and value.dim() == 3 and value.shape[1:] == shape)


def sample_starts(position_ids: torch.Tensor | None, shape) -> torch.Tensor | None:
    """[B, T] bool, True where a packed sample starts (its position restarts at 0), from position_ids [B, T]
    or a VLM's mRoPE position ids [R, B, T] (Qwen2/2.5/3-VL: R = 3, or 4 with a text row first). Row 0 is read:
    the text row, or mRoPE's temporal row, which is 0 only at a sample's first token (a text token; an image's
    temporal positions start after the text before it). None when there are none or their shape is neither."""
    if position_ids is None or position_ids.dim() not in (2, 3) or tuple(position_ids.shape[-2:]) != tuple(shape):
        return None
    return position_ids.reshape(-1, *shape)[0] == 0


@dataclass
class AnswerIndex:
    """Answer positions on the host for one batch: rows `batch` [M] and positions `pos` [M] (row-major),
    `keep` what the model builds logits for (an int: the right-aligned window, the common left-padded case;
    else the LongTensor [U] of distinct positions), `column` [M] each position's column in those logits, and
    `numeric` [M] bool, the positions the aux may see (target in V_num, and in the numeric_mask when the
    batch has one). Not a tensor, so the Trainer does not move it with the batch."""

    batch: torch.Tensor
    pos: torch.Tensor
    keep: int | torch.Tensor
    column: torch.Tensor
    numeric: torch.Tensor

    @classmethod
    def of(cls, labels: torch.Tensor, numeric_ids: torch.Tensor, numeric_mask: torch.Tensor | None = None,
           starts: torch.Tensor | None = None) -> AnswerIndex:
        """From host labels [B, T], V_num's ids [N], and optionally the collator's numeric_mask [B, T] and a
        packed batch's sample starts [B, T] bool (`sample_starts`)."""
        if labels.dim() != 2:
            raise ValueError(f"labels must be [B, T], got {tuple(labels.shape)}")
        following = labels[:, 1:] != IGNORE_INDEX  # position t predicts label t + 1
        if starts is not None:  # packed: a sample's first token is not predicted by the one before
            following &= ~starts.reshape(labels.shape)[:, 1:].bool()
        batch, pos = following.nonzero(as_tuple=True)
        targets = labels[batch, pos + 1]
        numeric = torch.isin(targets, numeric_ids)
        if numeric_mask is not None:
            numeric &= numeric_mask.reshape(labels.shape)[batch, pos + 1].bool()
        used = following.any(0)  # [T - 1] the positions some row needs
        if len(pos) == 0:  # nothing to predict: one column keeps the loss in the graph
            return cls(batch, pos, 1, pos, numeric)
        first = int(pos.min())
        width = labels.shape[1] - first
        if int(used.sum()) >= width - 1:  # the window [first, T) wastes at most the last column
            return cls(batch, pos, width, pos - first, numeric)
        keep = used.nonzero().flatten()
        return cls(batch, pos, keep, (used.cumsum(0) - 1)[pos], numeric)


class NumericStep:
    """The objective, the current optimizer step's counts and the running logged sums of one trainer.
    objective: a `NumericObjective` (moved to `device`)."""

    def __init__(self, objective: NumericObjective, device):
        self.objective = objective.to(device)
        self.numeric_ids = objective.numeric_token_ids.cpu()  # host copy, for the host-side index
        self.counts = None  # LongTensor [2] on device: answer tokens, numeric answer tokens of the step
        self.sums = {phase: torch.zeros(len(PARTS), dtype=torch.float64, device=device) for phase in ("train", "eval")}

    def index(self, labels: torch.Tensor, numeric_mask=None, position_ids=None) -> AnswerIndex:
        """The host index of one batch (its tensors may be on the device: they are copied, a sync);
        position_ids [B, T] or mRoPE [R, B, T]."""
        host = [None if t is None else t.cpu() for t in (numeric_mask, sample_starts(position_ids, labels.shape))]
        return AnswerIndex.of(labels.cpu(), self.numeric_ids, *host)

    def begin(self, batches: list[dict], device, gather=None) -> None:
        """Index each micro-batch of the optimizer step (under `ANSWER_INDEX`) and count the step's answer and
        numeric answer tokens; `gather` sums a [1, 2] tensor over ranks (None on one rank)."""
        keys = ["labels", *(k for k in ("numeric_mask", "position_ids") if packed_key(batches[0], k))]

        def tensor(batch, key):  # position_ids: as their sample starts [B, T]
            value = batch[key]
            return sample_starts(value, batch["labels"].shape) if key == "position_ids" else value

        flat = torch.cat([tensor(b, k).flatten().long() for b in batches for k in keys]).cpu()  # the step's one sync
        counts = torch.zeros(2, dtype=torch.long)
        offset = 0
        for batch in batches:
            shape, n = batch["labels"].shape, batch["labels"].numel()
            host = {k: flat[offset + i * n:offset + (i + 1) * n].view(shape) for i, k in enumerate(keys)}
            offset += len(keys) * n
            index = AnswerIndex.of(host["labels"], self.numeric_ids, host.get("numeric_mask"),
                                   host.get("position_ids"))
            batch[ANSWER_INDEX] = index
            counts[0] += len(index.pos)
            counts[1] += index.numeric.sum()
        counts = counts.to(device)
        if gather is not None:
            counts = gather(counts[None]).sum(0)
        self.counts = counts

    def loss(self, parts_of, training: bool, world_size: int = 1, accumulation: int = 1) -> tuple[torch.Tensor, dict]:
        """(loss, parts) from `parts_of(ce_denominator, aux_denominator)`, a call of the objective (None: its
        own counts, the batch's means), normalised as the module docstring says; the parts are recorded."""
        if training and self.counts is not None:
            parts = parts_of(self.counts[0], self.counts[1])
            loss = parts["loss"] * world_size  # counts span all ranks while gradients are averaged over ranks
        else:
            parts = parts_of(None, None)
            loss = parts["loss"] / (accumulation if training else 1)
        self.record(parts, "train" if training else "eval")
        return loss, parts

    def record(self, parts: dict, phase: str) -> None:
        acc = self.sums[phase]
        acc += torch.stack([parts[k].to(acc.device, torch.float64) for k in PARTS])

    def figures(self, phase: str, reduce=None) -> dict:
        """{"ce", "aux", "total", "numeric_tokens"} since the last call ({} when no token was seen), then the
        sums restart; `reduce` sums a tensor over ranks (None on one rank). Reads the device once."""
        sums = self.sums[phase]
        if reduce is not None:
            sums = reduce(sums.clone())
        ce_sum, n_tokens, aux_sum, n_numeric = sums.tolist()
        self.sums[phase].zero_()
        if not n_tokens:
            return {}
        ce, aux = ce_sum / n_tokens, aux_sum / max(n_numeric, 1)
        return {"ce": round(ce, 6), "aux": round(aux, 6), "total": round(ce + self.objective.lam * aux, 6),
                "numeric_tokens": int(n_numeric)}
