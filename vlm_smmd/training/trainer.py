"""`NumericTrainer`: the HF Trainer with CE + lambda * aux at answer tokens, logits built only there."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from ..losses.hf import NumericLossMixin
from ..losses.objective import NumericObjective
from .checkpoints import load_checkpoint_weights


class NumericTrainer(NumericLossMixin, Trainer):
    """HF Trainer with the numeric objective: the drop-in `NumericLossMixin` (one step for both doors:
    `losses.step`) plus this family's hooks, length-grouped sampling and checked checkpoint loading.

    The forward runs without labels and keeps only the logits of the right-aligned answer window
    (`logits_to_keep`; the collator pads on the left), so no `[B, T, V]` tensor is built. Under gradient
    accumulation and data parallelism CE and aux are sums divided by the step's answer and numeric answer
    tokens (all micro-batches, all ranks), so the update equals the one-big-batch update.
    """

    def __init__(self, *args, objective: NumericObjective, **kwargs):
        super().__init__(*args, objective=objective, **kwargs)
        from ..families import family_of

        self.family = family_of(self.model)
        self.family.speed_up(self.model)
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

    def prepare_forward(self, model, inputs: dict) -> None:
        skipped = inputs.pop("skipped_samples", None)
        if skipped is not None:
            self._skipped += skipped.to(self._skipped.device)
        # a text-only micro-batch on one of several ranks must still run the vision tower (ZeRO-3, DDP)
        if model.training and self.family.vision and self.args.world_size > 1 and "pixel_values" not in inputs:
            self.family.add_masked_image(inputs, self.processing_class)


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


class SaveAtSteps(TrainerCallback):
    """Saves a checkpoint (output_dir/checkpoint-N, as save_steps would) at each global step `at(max_steps)`
    answers, whatever save_strategy says; the steps are resolved when training starts, from the Trainer's own
    max_steps (so an epoch-based run works too). Saving reads the weights and RNG states and changes neither."""

    def __init__(self, at):
        self.at = at
        self.steps: frozenset[int] = frozenset()

    def on_train_begin(self, args, state, control, **kwargs):
        self.steps = frozenset(self.at(state.max_steps))

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            control.should_save = True
