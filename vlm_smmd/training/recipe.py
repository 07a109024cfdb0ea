"""`run(config)`: the recipe that wires data, model, objective and Trainer for one training run.

Launch: `vlm-smmd train CONFIG.yaml [--key value ...]`; the same command under `torchrun` or the
`deepspeed` launcher (`--module vlm_smmd.cli train ...`) trains on many processes.
"""

from __future__ import annotations

import contextlib
import os

import torch
from transformers import set_seed

from ..config import aux_options
from ..losses.objective import NumericObjective
from ..run_record import RunRecord, weights_identity
from . import resume
from .checkpoints import resume_checkpoint, save_final, stopped_run_error
from .datasets import build_datasets, check_base_vocabulary, checked_datasets, run_texts
from .guards import DivergenceGuard, output_lock
from .trainer import NumericTrainer, ThreadReplan


def build_objective(loss_args, numeric_vocab) -> NumericObjective:
    return NumericObjective.from_vocab(numeric_vocab, aux=loss_args.aux, lam=loss_args.aux_lambda,
                                       **aux_options(loss_args))


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


def scratch_preset(model_args, data_args, train_dataset, eval_dataset):
    """(config, processor) of the scratch preset: the task vocabulary is learned from every question and
    answer of both sets, the instruction and the system prompt."""
    from ..families import family_for
    from ..modeling import build_scratch

    texts = [text for _, text in run_texts(data_args, (train_dataset, eval_dataset))]
    sizes = {k: getattr(model_args, f"scratch_{k}") for k in ("hidden_size", "layers", "heads", "vision_hidden_size",
                                                               "vision_depth", "vision_heads")}
    return build_scratch(family_for(model_args.scratch_family), texts, sizes=sizes,
                         min_pixels=model_args.min_pixels, max_pixels=model_args.max_pixels,
                         merges=model_args.scratch_vocab_merges)


@contextlib.contextmanager
def flushing_denormals(enabled: bool = True):
    """Within the block, CPU float ops treat subnormal inputs and results as 0 where the CPU can (x86 with
    SSE3: torch.set_flush_denormal); the setting is the process's, so the one found is restored after."""
    if not enabled:
        yield
        return
    was = bool((torch.tensor([1e-39], dtype=torch.float32) * 1.0).item() == 0.0)
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was)


def run(model_args, data_args, loss_args, train_args, *, on_ready=None, threads: dict | None = None,
        replan=None, prepare_model=None, callbacks=()) -> dict:
    """Train as configured; returns the final training metrics. Saves model + processor to output_dir.

    The main process locks output_dir for the whole run (`output_lock`: a second run on it is refused).
    `on_ready()`, when given, is called on the main process once the data, the model and the Trainer are
    ready, before the first step (`vlm-smmd train --overwrite` removes the earlier run's files there, so
    a run that cannot start leaves them). Training stops at the first non-finite loss or weight
    (`DivergenceGuard`). `threads`: the caller's thread plan (`ThreadPlan.record()`), kept in run_config.json
    (without one, the torch threads found); `replan()`, when given, answers the thread count after each step
    (`ThreadReplan`). `prepare_model(model)`, when given, is called on the built model before the Trainer
    wraps it (the dry run freezes its vocabulary matrices there). `callbacks`: further TrainerCallbacks (compare's
    learning curve adds `SaveAtSteps`)."""
    with output_lock(train_args.output_dir, take=train_args.process_index == 0), \
            flushing_denormals(model_args.flush_denormal):
        return _run(model_args, data_args, loss_args, train_args, on_ready, threads, replan, prepare_model, callbacks)


def _run(model_args, data_args, loss_args, train_args, on_ready, threads, replan, prepare_model=None,
         callbacks=()) -> dict:
    from ..data.collator import VLMCollator
    from ..families import family_for
    from ..modeling import SCRATCH, load_model_and_processor, load_processor
    from ..numeric import NumericVocab

    set_seed(train_args.seed)
    connect_deepspeed_comm(train_args)  # before the model exists: ZeRO-3 partitions it at construction
    # before the data and the model: a checkpoint that cannot be resumed is a one-line error at once
    train_args.resume_from_checkpoint = resume_checkpoint(train_args.output_dir, train_args.resume_from_checkpoint,
                                                          announce=train_args.process_index == 0)
    # a resume continues its checkpoint's settings: a changed key is refused before any data is rendered
    settings = resume.settings(model_args, data_args, loss_args, train_args)
    resumed = None
    if train_args.resume_from_checkpoint:
        resumed = resume.check_settings(train_args.resume_from_checkpoint, settings,
                                        announce=train_args.process_index == 0)
    train_dataset, eval_dataset = build_datasets(data_args)
    scratch_config = None
    if model_args.model_name_or_path == SCRATCH:
        scratch_config, processor = scratch_preset(model_args, data_args, train_dataset, eval_dataset)
        family = family_for(scratch_config.model_type)
    else:
        family, processor = load_processor(model_args.model_name_or_path, min_pixels=model_args.min_pixels,
                                           max_pixels=model_args.max_pixels, random_init=model_args.random_init)
    tokenizer = getattr(processor, "tokenizer", processor)
    base = None  # a trained local folder (a base model): its identity for run_config.json, its vocabulary checked
    if scratch_config is None and os.path.isdir(model_args.model_name_or_path):
        base = weights_identity(model_args.model_name_or_path)
        check_base_vocabulary(tokenizer, (train_dataset, eval_dataset), data_args, model_args.model_name_or_path)
    collator = VLMCollator(
        processor, family=family, system_prompt=data_args.system_prompt,
        instruction=data_args.instruction, max_length=data_args.max_length, min_pixels=model_args.min_pixels,
        max_pixels=model_args.max_pixels, on_error=data_args.on_error,
        numeric_vocab=NumericVocab.from_tokenizer(tokenizer, canonical=loss_args.numeric_vocab == "canonical"),
    )
    # every record checked before the (slow) model load: a bad one stops the run or is dropped up front
    train_dataset, eval_dataset, preflight_skips = checked_datasets(train_dataset, eval_dataset, collator,
                                                                    data_args, train_args)
    fingerprint = resume.data_fingerprint(train_dataset)
    if resumed is not None:
        resume.check_data(resumed, fingerprint)  # before the (slow) model load
    model, _ = load_model_and_processor(
        model_args.model_name_or_path, processor=processor, config=scratch_config, dtype=model_args.torch_dtype,
        attn_implementation=model_args.attn_implementation, min_pixels=model_args.min_pixels,
        max_pixels=model_args.max_pixels, seed=train_args.seed, freeze_vision=model_args.freeze_vision,
        freeze_merger=model_args.freeze_merger, freeze_language=model_args.freeze_language,
        gradient_checkpointing=train_args.gradient_checkpointing, lora=model_args.lora, lora_r=model_args.lora_r,
        lora_alpha=model_args.lora_alpha, lora_dropout=model_args.lora_dropout, lora_vision=model_args.lora_vision,
        random_init=model_args.random_init, verbose=train_args.process_index == 0,
    )
    if prepare_model is not None:
        prepare_model(model)
    # load_model_and_processor already enabled checkpointing; the Trainer would redo it with other kwargs
    train_args.gradient_checkpointing = False
    objective = build_objective(loss_args, collator.numeric_vocab)
    trainer = NumericTrainer(
        model=model, args=train_args, train_dataset=train_dataset, eval_dataset=eval_dataset,
        data_collator=collator, processing_class=processor, objective=objective,
        callbacks=[DivergenceGuard(objective), resume.SettingsRecorder(settings, fingerprint, resume.resumes(resumed)),
                   *([ThreadReplan(replan)] if replan is not None else []), *callbacks],
    )
    if on_ready is not None and train_args.process_index == 0:
        on_ready()
    try:
        result = trainer.train(resume_from_checkpoint=train_args.resume_from_checkpoint)
    except Exception as e:  # diverged, or a full disk: one line naming what is kept
        error = stopped_run_error(e, train_args.output_dir, trainer.state.global_step, main=trainer.args.should_save)
        if error is None:
            raise
        raise error from None
    metrics = dict(result.metrics)
    if eval_dataset is not None:  # before saving: merging LoRA changes the live model
        metrics.update(trainer.evaluate())
    save_final(trainer, processor, merge_lora=model_args.lora and model_args.merge_lora,
               run_config=run_config(model_args, data_args, loss_args, train_args, collator, threads,
                                     data_fingerprint=fingerprint, resumed=resume.resumes(resumed), base=base))
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


def run_config(model_args, data_args, loss_args, train_args, collator, threads: dict | None = None, *,
               data_fingerprint: str | None = None, resumed: list[dict] | None = None,
               base: dict | None = None) -> RunRecord:
    """The run's identity for reports (its RunRecord, run_config.json): every model / data / loss key as used, the trainer keys that shape
    the run, the family and V_num size, the torch thread plan it ran with, the training records'
    fingerprint, for a resumed run each resume (checkpoint, step, the keys that changed) and, for a run
    from a trained local folder, `base` (the folder and its weights' sha256, `run_record.weights_identity`)."""
    from dataclasses import asdict

    keys = ("seed", "max_steps", "num_train_epochs", "per_device_train_batch_size", "gradient_accumulation_steps",
            "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay", "bf16", "fp16", "deepspeed",
            "world_size")
    settings = {**asdict(model_args), **asdict(data_args), **asdict(loss_args),
                **{k: getattr(train_args, k, None) for k in keys}}
    record = RunRecord(settings=settings, family=collator.family.model_type,
                       numeric_vocab_size=len(collator.numeric_vocab),
                       threads=threads if threads is not None else {"threads": torch.get_num_threads()},
                       data_fingerprint=data_fingerprint, resumed=list(resumed or []), base=base)
    return RunRecord.from_dict(record.to_dict())  # settings as JSON values (paths as text), as written
