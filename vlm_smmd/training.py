"""Training: a Trainer whose loss is CE + lambda * aux at answer tokens, and `run(config)` wiring it all.

Launch: `vlm-smmd train CONFIG.yaml [--key value ...]`; the same command under `torchrun` or the
`deepspeed` launcher (`--module vlm_smmd.cli train ...`) trains on many processes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Subset
from transformers import Trainer, set_seed

from .config import ConfigError, aux_options, load_config, train_command_line, train_help, uses_deepspeed
from .losses.objective import NumericObjective, answer_positions


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
        from .families import family_of

        self.family = family_of(self.model)
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
        inputs.pop("numeric_mask", None)
        skipped = inputs.pop("skipped_samples", None)
        if skipped is not None:
            self._skipped += skipped.to(self._skipped.device)
        index = inputs.pop("answer_index", None)
        if index is None:  # evaluation, or a batch not seen by get_batch_samples
            index = HostIndex.of(labels.cpu())
        batch_idx, pos_idx, keep = index.batch.to(labels.device), index.pos.to(labels.device), index.keep
        seq_len = labels.shape[1]
        targets = labels[batch_idx, pos_idx + 1]
        # a text-only micro-batch on one of several ranks must still run the vision tower (ZeRO-3, DDP)
        if model.training and self.family.vision and self.args.world_size > 1 and "pixel_values" not in inputs:
            self.family.add_masked_image(inputs, self.processing_class)
        outputs = model(**inputs, logits_to_keep=keep, use_cache=False)
        logits = outputs.logits[batch_idx, pos_idx - (seq_len - keep)]  # [M, V]

        if model.training and self._step_counts is not None:
            parts = self.objective(logits, targets, ce_denominator=self._step_counts[0],
                                   aux_denominator=self._step_counts[1])
            # counts span all ranks while gradients are averaged over ranks: undo that average
            loss = parts["loss"] * self.args.world_size
        else:  # evaluation, or a step not fed through get_batch_samples: means over this batch
            parts = self.objective(logits, targets)
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


# ---------------------------------------------------------------- data


def synthesize_if_missing(data_args) -> None:
    """Render the synthetic set named by `data_args.synthesize` into data_root, or reuse what is there
    when it was rendered with the same settings (a mismatch is an error, never silently ignored)."""
    kind = data_args.synthesize
    if kind == "none" or data_args.data_root is None:
        return
    root = Path(data_args.data_root)
    options = json.loads(data_args.synthesize_options or "{}")
    if kind in ("clocks", "arithmetic"):  # every split at once
        wanted = {"kind": kind, "num": data_args.synthesize_num, "seed": data_args.synthesize_seed, "options": options}
        if kind == "clocks":
            wanted["size"] = data_args.synthesize_size
        record = root / "synthesize.json"
        if root.exists():
            _check_rendered(root, record, wanted)
            return
        print(f"rendering {wanted['num']} synthetic {kind} into {root}")
        if kind == "clocks":
            from data_synth.writer import write_clock_dataset

            write_clock_dataset(root, wanted["num"], wanted["seed"], size=wanted["size"], **options)
        else:
            from data_synth.arithmetic import write_arithmetic_dataset

            write_arithmetic_dataset(root, wanted["num"], wanted["seed"], **options)
        record.write_text(json.dumps(wanted))
        return

    from data_synth.charts import write_chart_dataset

    layout = "chartqa" if kind == "bars" else kind
    if kind == "bars":  # one question per chart: the bar's value
        side = data_args.synthesize_size
        options = {"kinds": ["bars_axis"], "size": [side, side], "questions_per_chart": 1, **options}
    for split in sorted({data_args.train_split, data_args.eval_split} - {None}):
        is_train = split == data_args.train_split
        wanted = {"kind": kind, "charts": data_args.synthesize_num if is_train else max(data_args.synthesize_num // 10, 8),
                  "seed": data_args.synthesize_seed + (not is_train), "options": options}
        record = root / "charts_data" / f"{split}.json"
        if record.exists():
            _check_rendered(root, record, wanted)
            continue
        print(f"rendering {wanted['charts']} synthetic {kind} charts ({split}) into {root}")
        extra = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
        info = write_chart_dataset(root, layout=layout, num=wanted["charts"], seed=wanted["seed"], split=split, **extra)
        record.write_text(json.dumps({**wanted, "layout": layout, "questions": info["questions"]}))


def _check_rendered(root: Path, record: Path, wanted: dict) -> None:
    try:
        found = json.loads(record.read_text())
    except (OSError, json.JSONDecodeError):
        raise ConfigError(f"{root} exists but was not rendered by `synthesize` ({record} is missing or unreadable); "
                          "to train on it as it is, set synthesize: none; else remove it or choose another "
                          "data_root") from None
    found.setdefault("kind", wanted["kind"])  # records of the first release name no kind and no options
    found.setdefault("options", {})
    changed = {k: (found.get(k), v) for k, v in wanted.items() if found.get(k) != v}
    if changed:
        detail = ", ".join(f"{k} {old} there, {new} asked" for k, (old, new) in changed.items())
        raise ConfigError(f"{root} was rendered with other settings ({detail}); to train on it as it is, set "
                          "synthesize: none; else remove it or choose another data_root")
    print(f"reusing the synthetic data in {root}")


def read_split(data_args, split: str):
    """The dataset named by `data_args` for one split (a sequence of Samples)."""
    from . import data

    if data_args.dataset == "mixture":
        from .data.mixture import MixtureDataset

        # entries may name their training split; evaluation reads eval_split of every source
        spec = [entry if "split" in entry and split != data_args.eval_split else {**entry, "split": split}
                for entry in json.loads(data_args.mixture)]
        return MixtureDataset.from_spec(spec, seed=data_args.synthesize_seed, on_error=data_args.on_error)
    reader = getattr(data, f"read_{data_args.dataset}")
    return reader(data_args.data_root, split, on_error=data_args.on_error,
                  **json.loads(data_args.reader_options or "{}"))


def _limit(dataset, limit: int | None):
    return Subset(dataset, range(min(limit, len(dataset)))) if limit else dataset


def build_datasets(data_args):
    synthesize_if_missing(data_args)
    train = _limit(read_split(data_args, data_args.train_split), data_args.max_train_samples)
    evaluation = None
    if data_args.eval_split:
        evaluation = _limit(read_split(data_args, data_args.eval_split), data_args.max_eval_samples)
    return train, evaluation


# ---------------------------------------------------------------- checkpoints

TRAINER_STATE = "trainer_state.json"
MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
DEEPSPEED_TAG = "latest"  # DeepSpeed's own checkpoint (its ZeRO shards in global_stepN/)


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: missing, incomplete, or holding weights that do not fit the model."""


def checkpoint_problem(folder: Path) -> str | None:
    """Why `folder` is not a complete Trainer checkpoint, or None when it is one. The Trainer writes
    trainer_state.json last (after weights, optimizer, scheduler, RNG states), so a save killed halfway
    leaves it missing or partly written."""
    try:
        json.loads((folder / TRAINER_STATE).read_text())
    except FileNotFoundError:
        return f"no {TRAINER_STATE}"
    except (OSError, ValueError):
        return f"{TRAINER_STATE} does not parse"
    if not any((folder / name).is_file() for name in (*MODEL_WEIGHTS, *ADAPTER_WEIGHTS, DEEPSPEED_TAG)):
        return "no weights"
    return None


def resume_checkpoint(output_dir, wanted, *, announce: bool = True) -> str | None:
    """The checkpoint folder `resume_from_checkpoint` (`wanted`) names, or None for a fresh start.

    True / "true": the newest complete checkpoint-N in output_dir; newer incomplete ones (a save that was
    killed) are named in one printed line (when `announce`) and left in place: the run overwrites such a
    folder when it saves that step again. A path must be a complete checkpoint. Anything else is a
    CheckpointError in one line."""
    if wanted is None or wanted is False or str(wanted).lower() in ("", "false"):
        return None
    if wanted is True or str(wanted).lower() == "true":
        out = Path(output_dir)
        steps = {int(p.name.removeprefix("checkpoint-")): p for p in (out.iterdir() if out.is_dir() else ())
                 if p.is_dir() and p.name.startswith("checkpoint-") and p.name.removeprefix("checkpoint-").isdigit()}
        passed = []
        for step in sorted(steps, reverse=True):
            problem = checkpoint_problem(steps[step])
            if problem is None:
                if passed and announce:
                    names = ", ".join(f"{p.name} ({why})" for p, why in passed)
                    it = "it is" if len(passed) == 1 else "they are"
                    print(f"resume_from_checkpoint: passing over the incomplete {names} in {out} (a save that "
                          f"was interrupted) and resuming from {steps[step].name}; {it} left in place and "
                          "overwritten when this run saves that step again")
                return str(steps[step])
            passed.append((steps[step], problem))
        if not passed:
            raise CheckpointError(f"resume_from_checkpoint: no checkpoint-N folder in {out} to resume from")
        names = ", ".join(f"{p.name} ({why})" for p, why in passed)
        raise CheckpointError(f"resume_from_checkpoint: no complete checkpoint in {out}: {names}")
    folder = Path(wanted)
    if not folder.is_dir():
        raise CheckpointError(f"resume_from_checkpoint: {folder} is not a folder")
    problem = checkpoint_problem(folder)
    if problem is not None:
        raise CheckpointError(f"resume_from_checkpoint: {folder} is an incomplete checkpoint ({problem}; its save "
                              "was interrupted); name a complete one, or set resume_from_checkpoint: true to take "
                              "the newest complete checkpoint")
    return str(folder)


def _is_peft_model(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def _key_summary(problems: dict[str, list]) -> str:
    return "; ".join(f"{len(keys)} {kind.replace('_', ' ')} (e.g. {sorted(map(str, keys))[0]})"
                     for kind, keys in problems.items() if keys)


def load_checkpoint_weights(model, checkpoint) -> None:
    """Load the weights of a Trainer checkpoint into `model` in place, every key checked.

    A full model: its class's `from_pretrained` reads the checkpoint, mapping saved key names onto the
    module's (Qwen2.5-VL and Qwen2-VL save model.layers.*, the module has model.language_model.layers.*;
    Mllama likewise), and the result goes in with load_state_dict(strict=True). A peft model: its adapter
    through `load_adapter`, refusing missing or unexpected adapter keys. Anything that does not fit is a
    CheckpointError, never a warning."""
    folder = Path(checkpoint)
    if _is_peft_model(model):
        if not any((folder / name).is_file() for name in ADAPTER_WEIGHTS):
            raise CheckpointError(f"{folder}: no adapter weights ({' or '.join(ADAPTER_WEIGHTS)}) for this LoRA "
                                  "model")
        adapter = model.active_adapters[0]  # our runs train one adapter
        result = model.load_adapter(str(folder), adapter, is_trainable=True)
        problems = {"missing_keys": result.missing_keys, "unexpected_keys": result.unexpected_keys}
        if any(problems.values()):
            raise CheckpointError(f"{folder}: its adapter does not fit the model ({_key_summary(problems)})")
        return
    if not any((folder / name).is_file() for name in MODEL_WEIGHTS):
        raise CheckpointError(f"{folder}: no model weights ({' or '.join(MODEL_WEIGHTS)})")
    try:
        loaded, info = type(model).from_pretrained(str(folder), dtype=model.dtype, output_loading_info=True)
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{folder}: could not read its weights as a {type(model).__name__} ({e})") from None
    if any(info.values()):
        raise CheckpointError(f"{folder}: its weights do not fit the model ({_key_summary(info)})")
    try:
        model.load_state_dict(loaded.state_dict(), strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"{folder}: its weights do not fit the model ({str(e).splitlines()[0]})") from None


# ---------------------------------------------------------------- run


def build_objective(loss_args, numeric_vocab) -> NumericObjective:
    kernel_losses = ("smmd", "mmd", "smooth")
    options = aux_options(loss_args) if loss_args.aux in kernel_losses else {}
    return NumericObjective.from_vocab(numeric_vocab, aux=loss_args.aux, lam=loss_args.aux_lambda, **options)


def ensure_single_process_env() -> None:
    """Rank variables for a run started without a launcher, so DeepSpeed does not look for MPI."""
    import os
    import socket

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}.items():
        os.environ.setdefault(key, value)


def connect_deepspeed_comm(train_args) -> None:
    """On CPU ranks accelerate sets up torch.distributed itself (gloo) and leaves deepspeed.comm unset,
    so DeepSpeed would see a world of 1 and reject the batch sizes; attach it to the existing group."""
    if not train_args.deepspeed:
        return
    _ = train_args.device  # sets up the process group
    import deepspeed.comm as ds_dist

    if torch.distributed.is_initialized() and not ds_dist.is_initialized():
        ds_dist.init_distributed(dist_backend=torch.distributed.get_backend(), auto_mpi_discovery=False)


def checked_datasets(train_dataset, eval_dataset, collator, data_args, train_args):
    """Both sets through the preflight check (`data.preflight`): the main process checks (or reads the
    cache) first, the other ranks then read its cached result. Returns the checked sets and the records
    dropped under on_error="skip"."""
    from .data.preflight import CheckedDataset, preflight

    out, skipped = [], 0
    for name, dataset in (("train", train_dataset), ("eval", eval_dataset)):
        if dataset is None:
            out.append(None)
            continue
        with train_args.main_process_first(desc=f"preflight {name}"):
            result = preflight(dataset, collator, name=name, max_length=data_args.max_length,
                               on_error=data_args.on_error, workers=data_args.preflight_workers,
                               progress=train_args.process_index == 0 and not train_args.disable_tqdm)
        if train_args.process_index == 0:
            print(result.summary())
        if name == "train" and not result.kept:
            from .data.sample import DataError

            raise DataError(f"preflight train: none of the {result.checked} records is usable ({result.summary()})")
        skipped += result.total_skipped
        out.append(CheckedDataset(dataset, result.kept, result.lengths))
    return out[0], out[1], skipped


def scratch_preset(model_args, data_args, train_dataset, eval_dataset):
    """(config, processor) of the scratch preset: the task vocabulary is learned from every question and
    answer of both sets, the instruction and the system prompt."""
    from .families import family_for
    from .modeling import build_scratch

    texts = [t for t in (data_args.instruction, data_args.system_prompt) if t]
    for dataset in (train_dataset, eval_dataset):
        for i in range(len(dataset) if dataset is not None else 0):
            sample = dataset[i]
            texts += [sample.question, sample.answer]
    sizes = {k: getattr(model_args, f"scratch_{k}") for k in ("hidden_size", "layers", "heads", "vision_hidden_size",
                                                               "vision_depth", "vision_heads")}
    return build_scratch(family_for(model_args.scratch_family), texts, sizes=sizes,
                         min_pixels=model_args.min_pixels, max_pixels=model_args.max_pixels)


def run(model_args, data_args, loss_args, train_args) -> dict:
    """Train as configured; returns the final training metrics. Saves model + processor to output_dir."""
    from .data.collator import VLMCollator
    from .families import family_for
    from .modeling import SCRATCH, load_model_and_processor, load_processor
    from .numeric import NumericVocab

    set_seed(train_args.seed)
    connect_deepspeed_comm(train_args)  # before the model exists: ZeRO-3 partitions it at construction
    # before the data and the model: a checkpoint that cannot be resumed is a one-line error at once
    train_args.resume_from_checkpoint = resume_checkpoint(train_args.output_dir, train_args.resume_from_checkpoint,
                                                          announce=train_args.process_index == 0)
    train_dataset, eval_dataset = build_datasets(data_args)
    scratch_config = None
    if model_args.model_name_or_path == SCRATCH:
        scratch_config, processor = scratch_preset(model_args, data_args, train_dataset, eval_dataset)
        family = family_for(scratch_config.model_type)
    else:
        family, processor = load_processor(model_args.model_name_or_path, min_pixels=model_args.min_pixels,
                                           max_pixels=model_args.max_pixels)
    tokenizer = getattr(processor, "tokenizer", processor)
    collator = VLMCollator(
        processor, family=family, system_prompt=data_args.system_prompt,
        instruction=data_args.instruction, max_length=data_args.max_length, min_pixels=model_args.min_pixels,
        max_pixels=model_args.max_pixels, on_error=data_args.on_error,
        numeric_vocab=NumericVocab.from_tokenizer(tokenizer, canonical=loss_args.numeric_vocab == "canonical"),
    )
    # every record checked before the (slow) model load: a bad one stops the run or is dropped up front
    train_dataset, eval_dataset, preflight_skips = checked_datasets(train_dataset, eval_dataset, collator,
                                                                    data_args, train_args)
    model, _ = load_model_and_processor(
        model_args.model_name_or_path, processor=processor, config=scratch_config, dtype=model_args.torch_dtype,
        attn_implementation=model_args.attn_implementation, min_pixels=model_args.min_pixels,
        max_pixels=model_args.max_pixels, seed=train_args.seed, freeze_vision=model_args.freeze_vision,
        freeze_merger=model_args.freeze_merger, freeze_language=model_args.freeze_language,
        gradient_checkpointing=train_args.gradient_checkpointing, lora=model_args.lora, lora_r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha, lora_dropout=model_args.lora_dropout, lora_vision=model_args.lora_vision,
        verbose=train_args.process_index == 0,
    )
    # load_model_and_processor already enabled checkpointing; the Trainer would redo it with other kwargs
    train_args.gradient_checkpointing = False
    trainer = NumericTrainer(
        model=model, args=train_args, train_dataset=train_dataset, eval_dataset=eval_dataset,
        data_collator=collator, processing_class=processor,
        objective=build_objective(loss_args, collator.numeric_vocab),
    )
    result = trainer.train(resume_from_checkpoint=train_args.resume_from_checkpoint)
    metrics = dict(result.metrics)
    if eval_dataset is not None:  # before saving: merging LoRA changes the live model
        metrics.update(trainer.evaluate())
    save_final(trainer, processor, merge_lora=model_args.lora and model_args.merge_lora,
               run_config=run_config(model_args, data_args, loss_args, train_args, collator))
    if data_args.on_error == "skip":
        # records dropped by the preflight (each once), plus any the collator still had to skip (a file
        # that broke during the run), totalled over DataLoader workers and ranks
        runtime = torch.tensor(trainer.skipped_samples, device=train_args.device)
        if train_args.world_size > 1:
            runtime = trainer.accelerator.reduce(runtime, reduction="sum")
        metrics["skipped_samples"] = preflight_skips + int(runtime)
        if int(runtime) and trainer.args.should_save:
            print(f"the collator skipped {int(runtime)} more samples during training (reasons in the warnings above)")
    if trainer.args.should_save:
        trainer.save_metrics("all", metrics)
    return metrics


def run_config(model_args, data_args, loss_args, train_args, collator) -> dict:
    """The run's identity for reports: every model / data / loss key as used, the trainer keys that shape
    the run, the family and V_num size."""
    from dataclasses import asdict

    keys = ("seed", "max_steps", "num_train_epochs", "per_device_train_batch_size", "gradient_accumulation_steps",
            "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay", "bf16", "fp16", "deepspeed",
            "world_size")
    info = {**asdict(model_args), **asdict(data_args), **asdict(loss_args),
            **{k: getattr(train_args, k, None) for k in keys}}
    info.update(family=collator.family.model_type, numeric_vocab_size=len(collator.numeric_vocab))
    return json.loads(json.dumps(info, default=str))


def save_final(trainer: Trainer, processor, *, merge_lora: bool, run_config: dict | None = None) -> None:
    """Save model + processor to output_dir so that it loads with `from_pretrained`, with the trainer's
    state (trainer_state.json: the log history) and `run_config` (run_config.json) beside them."""
    out = trainer.args.output_dir
    if not merge_lora:
        trainer.save_model(out)  # gathers ZeRO-3 shards; a peft model saves its adapter
    else:
        model = trainer.accelerator.unwrap_model(trainer.model)
        if trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
                merged = model.merge_and_unload()
                if trainer.args.should_save:
                    merged.save_pretrained(out, state_dict={k: v.clone() for k, v in merged.state_dict().items()})
        else:
            merged = model.merge_and_unload()
            if trainer.args.should_save:
                merged.save_pretrained(out)
    if trainer.args.should_save:
        processor.save_pretrained(out)
        trainer.state.save_to_json(str(Path(out) / "trainer_state.json"))
        if run_config is not None:
            (Path(out) / "run_config.json").write_text(json.dumps(run_config, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    """`vlm-smmd train CONFIG.yaml [--key value ...] [--overwrite]`; exit status 0, 1 (bad input met while
    running: one line naming the file and record) or 2 (usage: bad key or value, an output_dir it would
    overwrite)."""
    import os
    import shutil

    from .cli import TRAINED_MODEL, existing, fail, input_error, no_empty_folder, usage_error, wants_help

    argv = list(sys.argv[1:] if argv is None else argv)
    if wants_help(argv):
        print(train_help())
        return 0
    try:
        config_path, overrides, overwrite = train_command_line(argv)
        if uses_deepspeed(config_path, overrides):
            ensure_single_process_env()  # before TrainingArguments initialises DeepSpeed
        configs = load_config(config_path, overrides)
    except ConfigError as e:
        return usage_error("train", e)
    model_args, _, _, train_args = configs
    out = Path(train_args.output_dir)
    earlier = existing(out, TRAINED_MODEL)
    if earlier and not overwrite and not train_args.resume_from_checkpoint:
        return usage_error("train", f"output_dir {out} already holds a trained model ({', '.join(earlier)}); pass "
                           "--overwrite to replace it, set resume_from_checkpoint to continue it, or choose "
                           "another output_dir")
    try:
        with no_empty_folder(out):
            from .modeling import SCRATCH, resolve_family

            if model_args.model_name_or_path != SCRATCH:  # a bad name or path fails before the data is read
                resolve_family(model_args.model_name_or_path)
            if earlier and overwrite and not train_args.resume_from_checkpoint and os.environ.get("RANK", "0") == "0":
                for path in (out / name for name in earlier):
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
                print(f"--overwrite: removed the earlier run's {', '.join(earlier)} from {out}")
            metrics = run(*configs)
    except Exception as e:
        if not input_error(e):
            raise
        return fail("train", e)
    print(json.dumps({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, indent=1))
    return 0
