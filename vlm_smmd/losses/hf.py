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
  answer positions and both counts over the whole optimizer step (`step.NumericStep`). Our `NumericTrainer` is
  this mixin on the HF Trainer, so the two give the same loss and update. It honours the collator's
  `numeric_mask` when the batch has one (a Sample's `numeric_spans`: grounding coordinates only) and packed
  batches (`position_ids` restarting per sample: the shift never crosses a sample boundary).

Beside a fused or chunked CE that builds no logits (Liger's fused linear cross-entropy under
`use_liger_kernel=True`, TRL's fused LM head), the aux comes from the final hidden states at the answer
positions and the LM head's V_num rows (`hidden`): `NumericLossMixin(..., fused_ce=True)`, or
`numeric_loss_func(..., model=model)` on outputs that carry `loss` and `hidden_states` but no logits.

A tokenizer is duck-typed: anything `NumericVocab.from_tokenizer` reads (get_vocab, decode), or a processor
holding one as `.tokenizer`. Nothing here imports transformers: the Trainer classes come from the caller.
"""

from __future__ import annotations

import torch

from ..numeric import NumericVocab
from .hidden import DecoderOutput, final_hidden_states, lm_head_of, numeric_logits
from .objective import IGNORE_INDEX, NumericObjective, answer_positions
from .step import ANSWER_INDEX, NumericStep, sample_starts

NUMERIC_VOCABS = ("all", "canonical")


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
            "give this loss the plain forward's outputs (Trainer(compute_loss_func=...) does), or outputs with the "
            "CE as loss and hidden_states (output_hidden_states=True) and numeric_loss_func(..., model=model), or "
            "train with NumericLossMixin(..., fused_ce=True)")
    return logits


def _output(outputs, key):
    return outputs.get(key) if hasattr(outputs, "get") else getattr(outputs, key, None)


class NumericLossFunction:
    """`(outputs, labels, num_items_in_batch=None) -> loss`, made by `numeric_loss_func`; `objective` is its
    `NumericObjective`, `model` (optional) the model whose LM head serves outputs without logits."""

    def __init__(self, objective: NumericObjective, model=None):
        self.objective = objective
        self.model = model

    def parts(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> dict:
        """The objective's parts for logits [B, T, V] and labels [B, T] (module docstring for denominators).
        Outputs without logits: their `loss` is the CE, summed over the answer tokens and divided by
        num_items_in_batch (by their number when None), as a model computes it when given labels and
        num_items_in_batch; the aux comes from `hidden_states[-1]` and the LM head of `model`."""
        logits = hidden = None
        if not isinstance(outputs, (tuple, list)):
            logits = _output(outputs, "logits")
            hidden = None if logits is not None else final_hidden_states(outputs)
        if logits is None and (hidden is None or self.model is None or _output(outputs, "loss") is None):
            logits = logits_of(outputs)  # tuple outputs hold them first; else the one-line error
        if labels is None:
            raise ValueError("numeric_loss_func needs the labels (-100 outside the answer); got None")
        states = logits if logits is not None else hidden
        if states.dim() != 3 or labels.shape != states.shape[:2]:
            raise ValueError(f"need logits [B, T, V] (or hidden states [B, T, H]) and labels [B, T], got "
                             f"{tuple(states.shape)} and {tuple(labels.shape)}")
        if labels.dtype != torch.int64:
            raise ValueError(f"labels must be int64 token ids with -100 outside the answer; got {labels.dtype}")
        padding = (labels < 0) & (labels != IGNORE_INDEX)
        if bool(padding.any()):
            raise ValueError(f"labels must be token ids >= 0 with -100 outside the answer; got padding "
                             f"{int(labels[padding][0])}")
        if num_items_in_batch is not None and float(num_items_in_batch) < 0:
            raise ValueError(f"num_items_in_batch counts the answer tokens of the optimizer step (>= 0); "
                             f"got {float(num_items_in_batch):g}")
        batch_idx, pos_idx, targets = answer_positions(labels.to(states.device))
        denominator = len(targets) if num_items_in_batch is None else num_items_in_batch
        if logits is not None:
            return self.objective(logits[batch_idx, pos_idx], targets, ce_denominator=denominator,
                                  aux_denominator=denominator, batch_idx=batch_idx, pos_idx=pos_idx)
        return _fused_parts(self.objective, outputs.loss, denominator, hidden[batch_idx, pos_idx],
                            lm_head_of(self.model), targets, denominator, denominator, batch_idx=batch_idx,
                            pos_idx=pos_idx)

    def __call__(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        return self.parts(outputs, labels, num_items_in_batch)["loss"]


def _fused_parts(objective, ce, ce_count, hidden, lm_head, targets, ce_denominator, aux_denominator, **kwargs):
    """The parts from a fused CE `ce` (its sum over the answer tokens divided by ce_count) and the final hidden
    states [M, H] at the M answer positions (`hidden` module)."""
    count = torch.as_tensor(ce_count, device=ce.device).clamp_min(1)
    rows = None if objective.aux_loss is None else numeric_logits(hidden, lm_head, objective.numeric_token_ids)
    n_tokens = (targets != IGNORE_INDEX).sum()
    return objective.combine(ce.float() * count, n_tokens, rows, targets, ce_denominator, aux_denominator, **kwargs)


def numeric_loss_func(tokenizer, aux: str = "smmd", aux_lambda: float = 1.0, numeric_vocab="all", model=None,
                      **loss_options) -> NumericLossFunction:
    """A `compute_loss_func` for `transformers.Trainer` and TRL's `SFTTrainer`: CE + aux_lambda * aux on the
    shifted labels, normalised by the Trainer's `num_items_in_batch` (module docstring).

    aux: a name in `vlm_smmd.losses.AUX_NAMES`; loss_options: its options (`LOSSES[aux].options`), checked
    now. numeric_vocab: "all" | "canonical" (see `vlm_smmd.numeric`) or a NumericVocab. model: needed only for
    outputs without logits (a fused CE): the aux then reads its LM head's V_num rows (`hidden` module).
    """
    vocab = numeric_vocab_of(tokenizer, numeric_vocab)
    objective = NumericObjective.from_vocab(vocab, aux=aux, lam=aux_lambda, **loss_options)
    return NumericLossFunction(objective, model)


class NumericLossMixin:
    """Mix into any transformers Trainer subclass: `class T(NumericLossMixin, SFTTrainer)`, then
    `T(..., aux="smmd", aux_lambda=1.0, numeric_vocab="all", aux_options={...})`, or `T(..., objective=...)` with
    a `NumericObjective` built already.

    The model builds logits only at the answer positions (`logits_to_keep`: the right-aligned window of a
    left-padded batch, else the distinct answer positions), and `get_batch_samples` counts answer and numeric
    tokens over all micro-batches and ranks of the optimizer step (`step.NumericStep`), so CE and aux are sums
    divided by those counts: the update equals the one-big-batch update. It replaces the parent's
    `compute_loss` (TRL's entropy and token-accuracy metrics are not logged; ce, aux, total and numeric_tokens
    are). The returned outputs hold the answer-position logits only. Needs transformers >= 5.19
    (`loss_is_scaled_for_ga`).

    fused_ce=True: the model scores the CE itself from the labels without building logits (Liger's fused
    linear cross-entropy under `use_liger_kernel=True`; TRL's SFTTrainer: its fused LM head, asked for with
    fused_lm_head=True), given the step's answer-token count as num_items_in_batch; the aux comes from the
    decoder's final hidden states at the answer positions and the LM head's V_num rows (`hidden` module).
    """

    loss_is_scaled_for_ga = True  # compute_loss divides by whole-step counts itself

    def __init__(self, *args, aux: str = "smmd", aux_lambda: float = 1.0, numeric_vocab="all",
                 aux_options: dict | None = None, objective: NumericObjective | None = None, fused_ce: bool = False,
                 **kwargs):
        super().__init__(*args, **kwargs)
        trainers = [c for c in type(self).__mro__ if c.__module__.startswith("transformers")]
        if not any("loss_is_scaled_for_ga" in vars(c) for c in trainers):
            raise RuntimeError("NumericLossMixin needs transformers >= 5.19 (Trainer.loss_is_scaled_for_ga); "
                               "older Trainers divide its step-normalised loss by the accumulation steps again")
        if objective is None:
            if self.processing_class is None:
                raise ValueError("NumericLossMixin needs processing_class= (the tokenizer or processor)")
            self.numeric_vocab = numeric_vocab_of(self.processing_class, numeric_vocab)
            objective = NumericObjective.from_vocab(self.numeric_vocab, aux=aux, lam=aux_lambda, **(aux_options or {}))
        self.numeric_step = NumericStep(objective, self.args.device)
        self.objective = self.numeric_step.objective
        self.fused_ce = fused_ce
        # TRL's SFTTrainer patches its model with a fused LM head that runs only when asked
        self._fused_kwargs = {"fused_lm_head": True} if any(c.__name__ == "SFTTrainer" for c in type(self).__mro__) else {}

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        if batch_samples:
            gather = self.accelerator.gather if self.args.world_size > 1 else None
            self.numeric_step.begin(batch_samples, device, gather)
        return batch_samples, num_items_in_batch

    def prepare_forward(self, model, inputs: dict) -> None:
        """Edit the model inputs in place before the forward (labels and the numeric mask are out): a hook
        for trainers that add family-specific inputs."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        numeric_mask = inputs.pop("numeric_mask", None)
        index = inputs.pop(ANSWER_INDEX, None)
        if index is None:  # evaluation, or a batch not seen by get_batch_samples
            index = self.numeric_step.index(labels, numeric_mask, inputs.get("position_ids"))
        self.prepare_forward(model, inputs)
        device = labels.device
        batch_idx, pos_idx = index.batch.to(device), index.pos.to(device)
        targets = labels[batch_idx, pos_idx + 1]
        # the aux where the collator's numeric_mask is true (grounding: the coordinates); device indexing, no sync
        aux_mask = None if numeric_mask is None else numeric_mask.to(device)[batch_idx, pos_idx + 1]
        where = {"batch_idx": batch_idx, "pos_idx": pos_idx, "numeric_mask": aux_mask}
        inputs["use_cache"] = False
        step = self.numeric_step
        if self.fused_ce:
            counted = model.training and step.counts is not None
            ce_count = step.counts[0] if counted else torch.tensor(len(index.pos), device=device)
            starts = sample_starts(inputs.get("position_ids"), labels.shape)
            if starts is not None:  # packed: a sample's first label is not the previous sample's target
                labels = labels.masked_fill(starts, IGNORE_INDEX)
            unwrapped = self.accelerator.unwrap_model(model)
            with DecoderOutput(unwrapped) as seen:
                outputs = model(**inputs, labels=labels, num_items_in_batch=ce_count.clamp_min(1),
                                **self._fused_kwargs)
            hidden = seen.hidden[batch_idx, pos_idx]

            def parts_of(ce_denominator, aux_denominator):
                return _fused_parts(self.objective, _output(outputs, "loss"), ce_count, hidden, lm_head_of(unwrapped),
                                    targets, ce_denominator, aux_denominator, **where)
        else:
            keep = index.keep if isinstance(index.keep, int) else index.keep.to(device)
            outputs = model(**inputs, logits_to_keep=keep)
            logits = logits_of(outputs)[batch_idx, index.column.to(device)]  # [M, V]

            def parts_of(ce_denominator, aux_denominator):
                return self.objective(logits, targets, ce_denominator, aux_denominator, **where)

        accumulation = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        loss, _ = step.loss(parts_of, model.training, self.args.world_size, accumulation)
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict, start_time: float | None = None) -> None:
        phase, prefix = ("eval", "eval_") if any(k.startswith("eval_") for k in logs) else ("train", "")
        if phase == "eval" or "loss" in logs:  # the same condition on every rank
            reduce = (lambda t: self.accelerator.reduce(t, reduction="sum")) if self.args.world_size > 1 else None
            logs.update({prefix + k: v for k, v in self.numeric_step.figures(phase, reduce).items()})
        super().log(logs, start_time)
