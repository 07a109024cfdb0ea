"""The `vlm-smmd` commands, one module each; `vlm_smmd.cli` dispatches to them and applies the policy.

A command module (listed with its one-line help in `COMMANDS`) declares:
- `parse(argv) -> args`: its arguments, checked without importing torch or transformers (a usage problem
  raises `UsageError`; `--help` prints and exits 0);
- `output(args) -> Output | None`: the folder it writes and the entries there a run would replace;
- `run(args) -> int | None`: the library call, heavy imports inside; an exit status (None means 0).
Commands never print errors or choose exit codes for them: they raise, and the dispatcher says it in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..run_record import FILE_NAME as RUN_RECORD

# name -> (module under vlm_smmd.commands, one-line help); HIDDEN ones are started by other commands
COMMANDS = {
    "train": ("train", "fine-tune on a YAML config (CE + lambda * aux at numeric answer tokens)"),
    "eval": ("evaluate", "generate answers for a dataset and score them"),
    "analyze": ("analyze", "per-digit error analysis of predictions.jsonl files, with plots"),
    "compare": ("compare", "train, evaluate and analyse several aux losses / seeds on one config"),
    "export": ("export", "write a dataset as an lmms-eval task folder or a VLMEvalKit TSV, scored as eval scores"),
    "plan": ("plan", "per-GPU memory of a config (weights, optimizer, activations) and whether it fits; no GPU"),
    "demo": ("demo", "offline CPU demo: the research settings end to end, each figure beside chance"),
    "summary": ("summary", "one table across compare pages: each endpoint against CE, Holm across all, MDDs"),
}
HIDDEN = {"compare-worker": ("compare_worker", "one variant of a compare (started by `vlm-smmd compare`)")}


class UsageError(ValueError):
    """The command line cannot be used as given: one line, exit status 2."""


@dataclass
class Output:
    """What a command writes: `folder` (given by `flag`), the entries of it that a run would replace
    (`existing`), whether the user allowed that (`overwrite`), and how to say it (`what`: "a trained
    model", `advice`)."""

    folder: Path
    existing: list[str] = field(default_factory=list)
    overwrite: bool = False
    what: str = ""
    advice: str = "pass --overwrite to replace it, or choose another --out"
    flag: str = "--out"


# what a training run leaves in its output_dir: train refuses to write over any of it without --overwrite,
# which removes all of it (so no file of the earlier run, such as its run_config.json, stays beside the new one)
TRAINED_MODEL = ("config.json", "adapter_config.json", "trainer_state.json", "*.safetensors", "*.bin", "*.pt",
                 "*.pth", "*.index.json", "checkpoint-*", RUN_RECORD, "*_results.json",
                 "generation_config.json", "tokenizer*", "special_tokens_map.json", "vocab.json", "merges.txt",
                 "*.jinja", "chat_template*", "preprocessor_config.json", "processor_config.json",
                 "video_preprocessor_config.json")


def existing(folder, patterns) -> list[str]:
    """Names of the entries of `folder` that match any of the glob `patterns`, sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted({p.name for pattern in patterns for p in folder.glob(pattern)})
