"""`NumericTrainer`: the HF Trainer with CE + lambda * aux at answer tokens, logits built only there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from ..losses.objective import NumericObjective, answer_positions
from .checkpoints import load_checkpoint_weights


class NumericTrainer(Trainer):
    """HF Trainer with the numeric objective.

    The forward runs without labels and keeps only the logits of the right-aligned answer window
    (`logits_to_keep`; the collator pads on the left), so no `[B, T, V]` tensor is built.
    Normalisation under gradient accumulation and data parallelism: `get_batch_samples` counts the
    answer tokens and the numeric answer tokens over all micro-batches of the optimizer step and all
    ranks; CE and aux are sums divided by those counts, so the update equals the one-big-batch update.
    """

    loss_is_scaled_for_ga = True  # compute_loss divides by whole-step counts itself

    PARTS = ("ce_sum", "n_tokens", "aux_sum", "n_numeric")

    def __init__(self, *args, objective: NumericObjective, **kwargs):
        super().__init__(*args, **kwargs)
        from ..families import family_of

        self.family = family_of(self.model)
        self.family.speed_up(self.model)
        self.objective = objective.to(self.args.device)
        self._step_counts = None  # (answer tokens, numeric answer tokens) of the current optimizer step
        # running sums of PARTS per phase, kept on the device until a log step reads them
        self._parts = {phase: torch.zeros(len(self.PARTS), dtype=torch.float64, device=self.args.device)
                       for phase in ("train", "eval")}
        self._skipped = torch.zeros((), dtype=torch.long, device=self.args.device)

    @property
    def skipped_samples(self) -> int:
        """Samples the collator left out under on_error="skip" on this rank (reading it syncs)."""
        return int(self._skipped)

    # Checkpoint weights with every key checked (`load_checkpoint_weights`). The stock loader reads the
    # file with load_state_dict(strict=False) and no key conversion: for families whose checkpoints keep
    # the original key names (Qwen2-VL, Qwen2.5-VL, Mllama) no weight but lm_head was restored, with only a
    # warning (transformers issue 43701).
    # DeepSpeed and FSDP load through their own engines (with the module's own key names): left as they are.
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        if model is not None or self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        load_checkpoint_weights(self.model, resume_from_checkpoint)

    def _load_best_model(self) -> None:  # load_best_model_at_end: the same loader, the same bug
        # (a node without the folder, multi-node without save_on_each_node: the Trainer's warning, as before)
        if self.is_deepspeed_enabled or self.is_fsdp_enabled or not Path(self.state.best_model_checkpoint).is_dir():
            return super()._load_best_model()
        load_checkpoint_weights(self.model, self.state.best_model_checkpoint)

    # group_by_length on the token lengths the preflight measured (HF would look for input_ids in items)
    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy == "group_by_length" and hasattr(dataset, "lengths"):
            return _length_sampler(self.args.train_batch_size * self.args.gradient_accumulation_steps, dataset)
        return super()._get_train_sampler(train_dataset)

    def _get_eval_sampler(self, eval_dataset):
        if self.args.train_sampling_strategy == "group_by_length" and hasattr(eval_dataset, "lengths"):
            return _length_sampler(self.args.eval_batch_size, eval_dataset, self.args.data_seed or self.args.seed)
        return super()._get_eval_sampler(eval_dataset)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The optimizer step's micro-batches, plus one host copy of their labels and numeric masks (the
        step's only sync): from it each batch gets its answer positions (`answer_index`, kept on the host)
        and the step its token counts over all micro-batches and ranks."""
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        if not batch_samples:
            return batch_samples, num_items_in_batch
        flat = torch.cat([t.flatten().long() for b in batch_samples for t in (b["labels"], b["numeric_mask"])]).cpu()
        counts = torch.zeros(2, dtype=torch.long)
        offset = 0
        for batch in batch_samples:
            shape, n = batch["labels"].shape, batch["labels"].numel()
            labels, numeric = flat[offset:offset + n].view(shape), flat[offset + n:offset + 2 * n].view(shape)
            offset += 2 * n
            batch["answer_index"] = HostIndex.of(labels)
            counts[0] += len(batch["answer_index"].pos)
            counts[1] += numeric[:, 1:].sum()  # labels shift by one: position 0 is never a target
        counts = counts.to(device)
        if self.args.world_size > 1:
            counts = self.accelerator.gather(counts[None]).sum(0)
        self._step_counts = counts
        return batch_samples, num_items_in_batch

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        numeric_mask = inputs.pop("numeric_mask", None)
        skipped = inputs.pop("skipped_samples", None)
        if skipped is not None:
            self._skipped += skipped.to(self._skipped.device)
        index = inputs.pop("answer_index", None)
        if index is None:  # evaluation, or a batch not seen by get_batch_samples
            index = HostIndex.of(labels.cpu())
        batch_idx, pos_idx, keep = index.batch.to(labels.device), index.pos.to(labels.device), index.keep
        seq_len = labels.shape[1]
        targets = labels[batch_idx, pos_idx + 1]
        # the aux goes where the collator's numeric_mask is true, the positions get_batch_samples counted
        # (a grounding answer: its coordinates only); device indexing, no sync
        aux_mask = None if numeric_mask is None else numeric_mask.to(labels.device)[batch_idx, pos_idx + 1]
        # a text-only micro-batch on one of several ranks must still run the vision tower (ZeRO-3, DDP)
        if model.training and self.family.vision and self.args.world_size > 1 and "pixel_values" not in inputs:
            self.family.add_masked_image(inputs, self.processing_class)
        outputs = model(**inputs, logits_to_keep=keep, use_cache=False)
        logits = outputs.logits[batch_idx, pos_idx - (seq_len - keep)]  # [M, V]

        if model.training and self._step_counts is not None:
            parts = self.objective(logits, targets, ce_denominator=self._step_counts[0],
                                   aux_denominator=self._step_counts[1], batch_idx=batch_idx, pos_idx=pos_idx,
                                   numeric_mask=aux_mask)
            # counts span all ranks while gradients are averaged over ranks: undo that average
            loss = parts["loss"] * self.args.world_size
        else:  # evaluation, or a step not fed through get_batch_samples: means over this batch
            parts = self.objective(logits, targets, batch_idx=batch_idx, pos_idx=pos_idx, numeric_mask=aux_mask)
            accumulation = getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
            loss = parts["loss"] / (accumulation if model.training else 1)
        self._record(parts, "train" if model.training else "eval")
        return (loss, outputs) if return_outputs else loss

    def _record(self, parts: dict, phase: str) -> None:
        acc = self._parts[phase]
        acc += torch.stack([parts[k].to(acc.device, torch.float64) for k in self.PARTS])

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        phase, prefix = ("eval", "eval_") if any(k.startswith("eval_") for k in logs) else ("train", "")
        if phase == "eval" or "loss" in logs:  # the same condition on every rank
            sums = self._parts[phase]
            if self.args.world_size > 1:  # every rank logs: figures cover all ranks' tokens
                sums = self.accelerator.reduce(sums.clone(), reduction="sum")
            ce_sum, n_tokens, aux_sum, n_numeric = sums.tolist()  # the logging step's one sync
            if n_tokens:
                ce, aux = ce_sum / n_tokens, aux_sum / max(n_numeric, 1)
                logs[f"{prefix}ce"] = round(ce, 6)
                logs[f"{prefix}aux"] = round(aux, 6)
                logs[f"{prefix}total"] = round(ce + self.objective.lam * aux, 6)
                logs[f"{prefix}numeric_tokens"] = int(n_numeric)
            self._parts[phase].zero_()
        super().log(logs, start_time)


@dataclass
class HostIndex:
    """Answer positions on the host: batch row [M], position [M] (`answer_positions`), and `keep`, the
    width of the right-aligned logits window that covers them. Not a tensor or tuple, so the Trainer does
    not move it to the device with the batch."""

    batch: torch.Tensor
    pos: torch.Tensor
    keep: int

    @classmethod
    def of(cls, labels: torch.Tensor) -> HostIndex:
        """From host labels [B, T]."""
        batch, pos, _ = answer_positions(labels)
        return cls(batch, pos, int(labels.shape[1] - pos.min()) if len(pos) else 1)


def _length_sampler(batch_size: int, dataset, seed: int | None = None):
    from transformers.trainer_pt_utils import LengthGroupedSampler

    generator = None if seed is None else torch.Generator().manual_seed(seed)
    return LengthGroupedSampler(batch_size, lengths=dataset.lengths, generator=generator)


class ThreadReplan(TrainerCallback):
    """Sets torch's thread count during training to what `replan()` answers after each step (an int, or None
    to keep it), printing each change: the caller's measure of the free cores (`experiments.threads.LoadWatch`)."""

    def __init__(self, replan):
        self.replan = replan

    def on_step_end(self, args, state, control, **kwargs):
        threads = self.replan()
        if threads is not None and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
            if state.is_world_process_zero:
                print(f"threads: {threads} torch thread{'s' if threads > 1 else ''} from step {state.global_step} "
                      f"(the free cores changed)", flush=True)
