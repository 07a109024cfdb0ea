"""SMMD (or any registered aux loss) inside the trainers people already use: the HF `Trainer` and TRL.

Two ways in, both on unshifted labels that are -100 outside the answer (any causal LM or VLM):

- `numeric_loss_func(tokenizer, aux="smmd", aux_lambda=1.0)`: a `compute_loss_func` for
  `transformers.Trainer(compute_loss_func=...)` and TRL's `SFTTrainer(compute_loss_func=...)`. The model
  builds its full logits [B, T, V] (in TRL >= 1.0 SFTTrainer then runs the plain forward, plus a no-grad
  fused forward for its metrics); their memory is B * T * V * 2 bytes in bf16 (B=8, T=2048, Qwen's
  V=151,936: 5 GB, and as much again for their gradient), the cost our answer-only trainer avoids.
  Normalisation: the Trainer passes `num_items_in_batch`, the answer tokens of the whole optimizer step
  (all micro-batches, all ranks), and nothing about numeric tokens. So both sums are divided by it:
      loss = (sum of CE + lambda * sum of aux over numeric answer tokens) / answer tokens of the step
  which makes accumulation 1 vs 2 the same update whatever the micro-batches' numeric counts. Our own
  trainer divides aux by the step's numeric tokens instead; the same update here takes
  lambda_here = lambda_ours * answer tokens / numeric tokens (e.g. "10:07<|im_end|>": 6 / 4 = 1.5).

- `NumericLossMixin`, for any Trainer subclass (`class T(NumericLossMixin, SFTTrainer)`): logits only at the
  answer positions and both counts over the whole optimizer step, so it matches our trainer exactly.

Both apply the aux to every numeric answer token: they read labels only, not the collator's numeric_mask, so
a Sample's `numeric_spans` (grounding: coordinates only) counts in our trainer alone.

A tokenizer is duck-typed: anything `NumericVocab.from_tokenizer` reads (get_vocab, decode), or a processor
holding one as `.tokenizer`. Nothing here imports transformers: the Trainer classes come from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..numeric import NumericVocab
from .objective import IGNORE_INDEX, NumericObjective, answer_positions

NUMERIC_VOCABS = ("all", "canonical")
ANSWER_INDEX = "numeric_answer_index"  # the batch key the mixin keeps its host-side answer positions under


def numeric_vocab_of(tokenizer, numeric_vocab="all") -> NumericVocab:
    """V_num of a tokenizer (or of a processor's `.tokenizer`): "all" | "canonical" | a NumericVocab."""
    if isinstance(numeric_vocab, NumericVocab):
        return numeric_vocab
    if numeric_vocab not in NUMERIC_VOCABS:
        raise ValueError(f"numeric_vocab must be one of {NUMERIC_VOCABS} or a NumericVocab, got {numeric_vocab!r}")
    if not hasattr(tokenizer, "get_vocab") and hasattr(tokenizer, "tokenizer"):
        tokenizer = tokenizer.tokenizer
    if not hasattr(tokenizer, "get_vocab"):
        raise ValueError(f"need a tokenizer with get_vocab() and decode() (or a processor holding one), got "
                         f"{type(tokenizer).__name__}")
    return NumericVocab.from_tokenizer(tokenizer, canonical=numeric_vocab == "canonical")


def logits_of(outputs) -> torch.Tensor:
    """The logits [B, T, V] of a model's outputs, or a one-line ValueError saying why there are none."""
    if isinstance(outputs, (tuple, list)):
        logits = outputs[0] if outputs and torch.is_tensor(outputs[0]) and outputs[0].dim() == 3 else None
    elif hasattr(outputs, "get"):
        logits = outputs.get("logits")
    else:
        logits = getattr(outputs, "logits", None)
    if logits is None:
        raise ValueError(
            f"the model outputs ({type(outputs).__name__}) carry no logits: a fused or chunked LM head (TRL's "
            "fused_lm_head=True forward, Liger's fused linear cross-entropy) scores labels without building them; "
            "give this loss the plain forward's outputs: pass it as SFTTrainer(compute_loss_func=...) or "
            "Trainer(compute_loss_func=...) and keep use_liger_kernel off, or liger_kernel_config="
            "{'fused_linear_cross_entropy': False}")
    return logits


class NumericLossFunction:
    """`(outputs, labels, num_items_in_batch=None) -> loss`, made by `numeric_loss_func`; `objective` is its
    `NumericObjective`."""

    def __init__(self, objective: NumericObjective):
        self.objective = objective

    def parts(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> dict:
        """The objective's parts for logits [B, T, V] and labels [B, T] (module docstring for denominators)."""
        logits = logits_of(outputs)
        if labels is None:
            raise ValueError("numeric_loss_func needs the labels (-100 outside the answer); got None")
        if logits.dim() != 3 or labels.shape != logits.shape[:2]:
            raise ValueError(f"need logits [B, T, V] and labels [B, T], got {tuple(logits.shape)} and "
                             f"{tuple(labels.shape)}")
        if labels.dtype != torch.int64:
            raise ValueError(f"labels must be int64 token ids with -100 outside the answer; got {labels.dtype}")
        padding = (labels < 0) & (labels != IGNORE_INDEX)
        if bool(padding.any()):
            raise ValueError(f"labels must be token ids >= 0 with -100 outside the answer; got padding "
                             f"{int(labels[padding][0])}")
        if num_items_in_batch is not None and float(num_items_in_batch) < 0:
            raise ValueError(f"num_items_in_batch counts the answer tokens of the optimizer step (>= 0); "
                             f"got {float(num_items_in_batch):g}")
        batch_idx, pos_idx, targets = answer_positions(labels.to(logits.device))
        denominator = len(targets) if num_items_in_batch is None else num_items_in_batch
        return self.objective(logits[batch_idx, pos_idx], targets, ce_denominator=denominator,
                              aux_denominator=denominator, batch_idx=batch_idx, pos_idx=pos_idx)

    def __call__(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        return self.parts(outputs, labels, num_items_in_batch)["loss"]


def numeric_loss_func(tokenizer, aux: str = "smmd", aux_lambda: float = 1.0, numeric_vocab="all",
                      **loss_options) -> NumericLossFunction:
    """A `compute_loss_func` for `transformers.Trainer` and TRL's `SFTTrainer`: CE + aux_lambda * aux on the
    shifted labels, normalised by the Trainer's `num_items_in_batch` (module docstring).

    aux: a name in `vlm_smmd.losses.AUX_NAMES`; loss_options: its options (`LOSSES[aux].options`), checked
    now. numeric_vocab: "all" | "canonical" (see `vlm_smmd.numeric`) or a NumericVocab.
    """
    vocab = numeric_vocab_of(tokenizer, numeric_vocab)
    return NumericLossFunction(NumericObjective.from_vocab(vocab, aux=aux, lam=aux_lambda, **loss_options))


@dataclass
class AnswerIndex:
    """Answer positions on the host, for one batch: rows [M] and positions [M] (`answer_positions`), `keep`
    [U] the distinct positions (the logits the model builds, `logits_to_keep`) and `column` [M] each
    position's index in keep. Not a tensor, so the Trainer does not move it with the batch."""

    batch: torch.Tensor
    pos: torch.Tensor
    keep: torch.Tensor
    column: torch.Tensor

    @classmethod
    def of(cls, labels: torch.Tensor) -> AnswerIndex:
        """From host labels [B, T]."""
        batch, pos, _ = answer_positions(labels)
        keep, column = torch.unique(pos, sorted=True, return_inverse=True)
        if len(keep) == 0:  # nothing to predict: one column keeps the loss in the graph
            keep = torch.tensor([labels.shape[1] - 1])
        return cls(batch, pos, keep, column)


class NumericLossMixin:
    """Mix into any transformers Trainer subclass: `class T(NumericLossMixin, SFTTrainer)`, then
    `T(..., aux="smmd", aux_lambda=1.0, numeric_vocab="all", aux_options={...})`.

    The model builds logits only at the answer positions (`logits_to_keep` as the [U] distinct answer
    positions of the batch: a left-padded batch needs only its answer length), and `get_batch_samples`
    counts answer and numeric tokens over all micro-batches and ranks of the optimizer step (the step's one
    host copy of the labels), so CE and aux are sums divided by those counts: the update equals the
    one-big-batch update and our own trainer's. It replaces the parent's `compute_loss` (TRL's entropy and
    token-accuracy metrics are not logged; ce, aux and numeric_tokens are). The returned outputs hold the
    answer-position logits only. Needs transformers >= 5.19 (`loss_is_scaled_for_ga`).
    """

    loss_is_scaled_for_ga = True  # compute_loss divides by whole-step counts itself

    def __init__(self, *args, aux: str = "smmd", aux_lambda: float = 1.0, numeric_vocab="all",
                 aux_options: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        trainers = [c for c in type(self).__mro__ if c.__module__.startswith("transformers")]
        if not any("loss_is_scaled_for_ga" in vars(c) for c in trainers):
            raise RuntimeError("NumericLossMixin needs transformers >= 5.19 (Trainer.loss_is_scaled_for_ga); "
                               "older Trainers divide its step-normalised loss by the accumulation steps again")
        if self.processing_class is None:
            raise ValueError("NumericLossMixin needs processing_class= (the tokenizer or processor)")
        vocab = numeric_vocab_of(self.processing_class, numeric_vocab)
        self.numeric_vocab = vocab
        self.objective = NumericObjective.from_vocab(vocab, aux=aux, lam=aux_lambda, **(aux_options or {}))
        self.objective.to(self.args.device)
        self._step_counts = None  # (answer tokens, numeric answer tokens) of the current optimizer step
        # running sums of (ce_sum, n_tokens, aux_sum, n_numeric) per phase, read at log steps
        self._numeric_parts = {phase: torch.zeros(4, dtype=torch.float64, device=self.args.device)
                               for phase in ("train", "eval")}

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        if not batch_samples:
            return batch_samples, num_items_in_batch
        flat = torch.cat([b["labels"].flatten() for b in batch_samples]).cpu()  # the step's one sync
        counts = torch.zeros(2, dtype=torch.long)
        offset = 0
        for batch in batch_samples:
            shape, n = batch["labels"].shape, batch["labels"].numel()
            labels = flat[offset:offset + n].view(shape)
            offset += n
            batch[ANSWER_INDEX] = AnswerIndex.of(labels)
            following = labels[:, 1:]  # position t predicts label t + 1
            counts[0] += (following != -100).sum()
            counts[1] += self.numeric_vocab.mask(following).sum()
        counts = counts.to(device)
        if self.args.world_size > 1:
            counts = self.accelerator.gather(counts[None]).sum(0)
        self._step_counts = counts
        return batch_samples, num_items_in_batch

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        index = inputs.pop(ANSWER_INDEX, None)
        if index is None:  # evaluation, or a batch not seen by get_batch_samples
            index = AnswerIndex.of(labels.cpu())
        device = labels.device
        batch_idx, pos_idx = index.batch.to(device), index.pos.to(device)
        inputs["use_cache"] = False
        outputs = model(**inputs, logits_to_keep=index.keep.to(device))
        logits = logits_of(outputs)[batch_idx, index.column.to(device)]  # [M, V]
        targets = labels[batch_idx, pos_idx + 1]
        if model.training and self._step_counts is not None:
            parts = self.objective(logits, targets, ce_denominator=self._step_counts[0],
                                   aux_denominator=self._step_counts[1], batch_idx=batch_idx, pos_idx=pos_idx)
            loss = parts["loss"] * self.args.world_size  # counts span all ranks; DDP averages gradients
        else:  # evaluation, or a step not fed through get_batch_samples: means over this batch
            parts = self.objective(logits, targets, batch_idx=batch_idx, pos_idx=pos_idx)
            accumulation = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
            loss = parts["loss"] / (accumulation if model.training else 1)
        sums = self._numeric_parts["train" if model.training else "eval"]
        sums += torch.stack([parts[k].to(sums.device, torch.float64) for k in ("ce_sum", "n_tokens", "aux_sum",
                                                                               "n_numeric")])
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict, start_time: float | None = None) -> None:
        phase, prefix = ("eval", "eval_") if any(k.startswith("eval_") for k in logs) else ("train", "")
        if phase == "eval" or "loss" in logs:  # the same condition on every rank
            sums = self._numeric_parts[phase]
            if self.args.world_size > 1:
                sums = self.accelerator.reduce(sums.clone(), reduction="sum")
            ce_sum, n_tokens, aux_sum, n_numeric = sums.tolist()
            if n_tokens:
                logs[f"{prefix}ce"] = round(ce_sum / n_tokens, 6)
                logs[f"{prefix}aux"] = round(aux_sum / max(n_numeric, 1), 6)
                logs[f"{prefix}numeric_tokens"] = int(n_numeric)
            self._numeric_parts[phase].zero_()
        super().log(logs, start_time)
