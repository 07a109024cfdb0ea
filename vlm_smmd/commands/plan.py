"""`vlm-smmd plan CONFIG [--gpus N] [--gpu-memory GiB] [--json]`: per-GPU memory of a training config and
whether it fits (`training.memory_plan`), without a GPU or a hub."""

from __future__ import annotations

import argparse

from data_synth.args import Parser

from ..config import ConfigError, check_config
from . import UsageError


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog="vlm-smmd plan", description="Per-GPU memory of a training config as written (weights, "
                    "gradients, optimizer states, master weights, activations, logits) and whether it fits; "
                    "offline, no GPU needed.")
    parser.add_argument("config", help="the training config (YAML)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs the run shares its ZeRO states over (%(default)s)")
    parser.add_argument("--gpu-memory", type=float, default=80.0, help="memory of each GPU in GiB (%(default)s)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.gpus < 1:
        parser.error(f"--gpus must be >= 1, got {args.gpus}")
    if not args.gpu_memory > 0:
        parser.error(f"--gpu-memory must be > 0 GiB, got {args.gpu_memory}")
    try:
        check_config(args.config)  # keys and values, before torch loads
    except ConfigError as e:
        raise UsageError(e) from None
    return args


def output(args) -> None:
    return None  # prints only


def run(args) -> int:
    from ..training.memory_plan import plan_config, table, to_json

    result = plan_config(args.config, gpus=args.gpus, gpu_memory_gib=args.gpu_memory)
    print(to_json(result) if args.json else table(result))
    return 0
