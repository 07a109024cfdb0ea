"""`vlm-smmd` command: each subcommand lives in the module that does the work."""

from __future__ import annotations

import sys
from importlib import import_module

# name -> (module with a `main(argv)`, one-line help)
COMMANDS = {
    "train": ("vlm_smmd.training", "fine-tune on a YAML config (CE + lambda * aux at numeric answer tokens)"),
    "eval": ("vlm_smmd.evaluation", "generate answers for a dataset and score them"),
    "analyze": ("vlm_smmd.analysis", "per-digit error analysis of predictions.jsonl files, with plots"),
    "compare": ("vlm_smmd.compare", "train, evaluate and analyse several aux losses / seeds on one config"),
    "demo": ("vlm_smmd.demo", "offline CPU demo: clocks -> tiny Qwen2.5-VL + SMMD -> eval -> report"),
}


def usage() -> str:
    lines = ["usage: vlm-smmd COMMAND [options]   (vlm-smmd COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the `deepspeed` launcher passes --local_rank=N first; the rank is also in the LOCAL_RANK env var
    argv = [a for a in argv if not a.startswith("--local_rank")]
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in COMMANDS:
        print(f"vlm-smmd: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
