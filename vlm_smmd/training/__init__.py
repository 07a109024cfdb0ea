"""Training: `run(config)` (the recipe), `NumericTrainer` (CE + lambda * aux at answer tokens), the run's
datasets (synthetic sets rendered when missing, the preflight check) and checkpoints (resume, checked
loading, the final save)."""

from .checkpoints import (
    CheckpointError,
    checkpoint_problem,
    load_checkpoint_weights,
    resume_checkpoint,
    save_final,
)
from .datasets import build_datasets, checked_datasets, synthesize_if_missing
from .recipe import build_objective, connect_deepspeed_comm, ensure_single_process_env, run, run_config
from .trainer import NumericTrainer

__all__ = [
    "CheckpointError", "NumericTrainer", "build_datasets", "build_objective", "checked_datasets",
    "checkpoint_problem", "connect_deepspeed_comm", "ensure_single_process_env", "load_checkpoint_weights",
    "resume_checkpoint", "run", "run_config", "save_final", "synthesize_if_missing",
]
