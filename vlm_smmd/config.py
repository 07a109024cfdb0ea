"""Run configuration: dataclasses for model, data and loss, plus the HF TrainingArguments.

A config is one flat YAML mapping whose keys are fields of these dataclasses (HfArgumentParser style);
`--key value` on the command line overrides a key. Unknown keys are errors that name the key.
"""

from __future__ import annotations

import difflib
import json
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml
from transformers import HfArgumentParser, TrainingArguments

AUX_NAMES = ("smmd", "mmd", "smooth", "ntl_mse", "ntl_was", "dist2", "gce", "none")
DATASETS = ("clocks", "chartqa", "plotqa", "dvqa", "gsm8k", "svamp", "deepmind_math", "arithmetic", "mixture")
# chartqa / plotqa / dvqa: the default chart mix in that layout; bars: unlabelled bars against an axis
# (ChartQA layout); arithmetic: text problems
SYNTH_KINDS = ("none", "clocks", "chartqa", "plotqa", "dvqa", "bars", "arithmetic")


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names the key."""


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="tiny", metadata={"help": "hub id, local dir, or a preset: tiny (Qwen2.5-VL), tiny-qwen2-vl, "
                                  "tiny-qwen3-vl, tiny-mllama, tiny-qwen2.5, tiny-llama3, or scratch (a task "
                                  "vocabulary and the scratch_* sizes)"})
    torch_dtype: str = field(default="auto", metadata={"help": "auto | bf16 | fp16 | fp32"})
    attn_implementation: str | None = field(default=None, metadata={"help": "eager | sdpa | flash_attention_2"})
    min_pixels: int | None = field(default=None, metadata={"help": "smallest image area in pixels"})
    max_pixels: int | None = field(default=None, metadata={"help": "largest image area in pixels"})
    freeze_vision: bool = False
    freeze_merger: bool = field(default=False, metadata={"help": "freeze the vision-language projector"})
    freeze_language: bool = False
    lora: bool = field(default=False, metadata={"help": "train LoRA adapters on the language model"})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_vision: bool = field(default=False, metadata={"help": "also put adapters on the vision blocks"})
    merge_lora: bool = field(default=True, metadata={"help": "save the merged model rather than the adapter"})
    scratch_family: str = field(default="qwen2_5_vl", metadata={"help": "scratch preset: qwen2_5_vl | qwen2 (text)"})
    scratch_hidden_size: int = field(default=64, metadata={"help": "scratch preset: text hidden size"})
    scratch_layers: int = field(default=2, metadata={"help": "scratch preset: text layers"})
    scratch_heads: int = field(default=4, metadata={"help": "scratch preset: text attention heads"})
    scratch_vision_hidden_size: int = field(default=64, metadata={"help": "scratch preset: vision hidden size"})
    scratch_vision_depth: int = field(default=2, metadata={"help": "scratch preset: vision blocks"})
    scratch_vision_heads: int = field(default=4, metadata={"help": "scratch preset: vision attention heads"})


@dataclass
class DataArguments:
    dataset: str = field(default="clocks", metadata={"help": "|".join(DATASETS)})
    data_root: str | None = field(default=None, metadata={"help": "dataset folder (the reader's root)"})
    train_split: str = "train"
    eval_split: str | None = field(default=None, metadata={"help": "split scored during training (loss only)"})
    mixture: str | None = field(
        default=None,
        metadata={"help": "mixture sources: a JSON list of {name, root, split, weight, limit} "
                  "(in YAML a plain list)"},
    )
    reader_options: str | None = field(
        default=None, metadata={"help": "extra reader keywords as a mapping, e.g. {target: rationale} for gsm8k, "
                                "{modules: 'arithmetic__add*'} for deepmind_math (in YAML a plain mapping)"})
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    on_error: str = field(default="raise", metadata={"help": "raise | skip (counted) for bad records"})
    system_prompt: str | None = None
    instruction: str | None = field(default=None, metadata={"help": "suffix appended to every question"})
    max_length: int | None = field(default=None, metadata={"help": "longest sample in tokens (longer: error)"})
    synthesize: str = field(
        default="none", metadata={"help": "render this synthetic set into data_root when it is missing: "
                                  + "|".join(SYNTH_KINDS)}
    )
    synthesize_num: int = 1000
    synthesize_seed: int = 0
    synthesize_size: int = 224
    synthesize_options: str | None = field(
        default=None, metadata={"help": "extra data-synth options as a mapping (clocks: style, plain; bars: "
                                "bar_axis_max, bar_places, bars_per_chart; arithmetic: digits, places, operations, "
                                "negatives, div_places) (in YAML a plain mapping)"})
    preflight_workers: int = field(default=1, metadata={"help": "processes for the preflight check of every record"})


@dataclass
class LossArguments:
    aux: str = field(default="smmd", metadata={"help": "|".join(AUX_NAMES)})
    aux_lambda: float = field(default=1.0, metadata={"help": "weight of the aux loss"})
    kernel: str = field(default="gaussian", metadata={"help": "gaussian | laplace"})
    sigmas: list[float] = field(default_factory=lambda: [2.0])
    squash: float = 9.0
    alpha: str = field(default="auto", metadata={"help": "'auto' or a number"})
    kernel_mode: str = field(default="value_distance", metadata={"help": "value_distance | random | shuffled"})
    kernel_seed: int = 42
    numeric_vocab: str = field(
        default="all", metadata={"help": "all: every plain-number token (\"7\", \"07\" share value 7) | "
                                 "canonical: integers without leading zeros only"})


@dataclass
class VLMTrainingArguments(TrainingArguments):
    """TrainingArguments with defaults that suit VLM fine-tuning with our collator."""

    remove_unused_columns: bool = field(default=False, metadata={"help": "samples are not dicts of columns"})
    prediction_loss_only: bool = field(default=True, metadata={"help": "never gather [B, T, V] logits"})
    logging_steps: float = 10
    save_strategy: str = "no"


CONFIG_CLASSES = (ModelArguments, DataArguments, LossArguments, VLMTrainingArguments)


def _known_keys() -> set[str]:
    return {f.name for cls in CONFIG_CLASSES for f in fields(cls) if f.init}


def parse_overrides(argv: list[str]) -> dict:
    """`--key value` pairs (or `--key=value`; a bare `--flag` means true) as raw strings; `load_config`
    converts each to its field's type."""
    overrides, i = {}, 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument {arg!r}: overrides are --key value")
        key, eq, value = arg[2:].partition("=")
        key = key.replace("-", "_")
        if not eq:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value, i = argv[i + 1], i + 1
            else:
                value = "true"
        overrides[key] = value
        i += 1
    return overrides


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}
_NONE = {"none", "null", "~"}


def _text_none_keys() -> set[str]:
    """Fields where "none" / "null" text means None: those whose default is None. Elsewhere it stays
    text ("report_to: none" is HF's word for no reporting)."""
    from dataclasses import MISSING

    return {f.name for cls in CONFIG_CLASSES for f in fields(cls) if f.default is None and f.default_factory is MISSING}


def _field_types() -> dict:
    hints = {}
    for cls in CONFIG_CLASSES:
        hints.update(typing.get_type_hints(cls))
    return hints


def _coerce(key: str, value, hint, from_cli: bool = False):
    """`value` (YAML-typed, or a raw string from the command line) as the field's type; ConfigError names
    the key when it does not fit. Other types (enums, dicts) are parsed as YAML when they come from the
    command line and left to HfArgumentParser otherwise."""
    args = typing.get_args(hint)
    optional = type(None) in args
    bases = [a for a in args if a is not type(None)] if args and typing.get_origin(hint) is not list else [hint]
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in _NONE
                         and key in _text_none_keys()):
        if optional:
            return None
        raise ConfigError(f"{key}: a value is required")
    base = bases[0] if len(bases) == 1 else (str if str in bases else None)

    def bad(expected):
        return ConfigError(f"{key}: expected {expected}, got {value!r}")

    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise bad("true or false")
    if base in (int, float):
        if isinstance(value, bool):
            raise bad("a number")
        if isinstance(value, (int, float)) and (base is float or float(value).is_integer()):
            return base(value)
        if isinstance(value, str):
            try:
                return base(value.strip())
            except ValueError:
                raise bad("an integer" if base is int else "a number") from None
        raise bad("an integer" if base is int else "a number")
    if base is str:
        if isinstance(value, str):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("text (quote it in YAML)")
        return str(value)
    if typing.get_origin(base) is list:
        (item,) = typing.get_args(base) or (str,)
        if isinstance(value, str):
            text = value.strip().removeprefix("[").removesuffix("]")
            value = [v.strip() for v in text.split(",") if v.strip()]
        if not isinstance(value, list):
            value = [value]
        return [_coerce(key, v, item) for v in value]
    if from_cli and isinstance(value, str):
        return yaml.safe_load(value)
    return value


def uses_deepspeed(path, overrides: dict) -> bool:
    """Whether a config plus overrides names a DeepSpeed config, read from the raw YAML: building
    TrainingArguments would start DeepSpeed before a single process has its rank variables."""
    if "deepspeed" in overrides:
        value = overrides["deepspeed"]
        return bool(value) and str(value).strip().lower() not in _NONE
    try:
        values = yaml.safe_load(Path(path).read_text()) if path is not None else {}
    except (OSError, yaml.YAMLError):
        return False  # load_config reports the problem
    return isinstance(values, dict) and bool(values.get("deepspeed"))


def load_config(path: str | Path | None, overrides: dict | None = None):
    """(ModelArguments, DataArguments, LossArguments, VLMTrainingArguments) from YAML + overrides."""
    values: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"{path}: no such config file")
        try:
            values = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: a config is a mapping of keys to values")
    overrides = overrides or {}
    values.update(overrides)
    where = f" in {path}" if path is not None else ""
    known = _known_keys()
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r}{where}{hint}")
    if isinstance(values.get("mixture"), list):
        values["mixture"] = json.dumps(values["mixture"])
    for key in ("reader_options", "synthesize_options"):  # mappings travel as JSON text
        if key in values and values[key] is not None:
            value = values[key]
            if isinstance(value, str):
                try:
                    value = yaml.safe_load(value)
                except yaml.YAMLError as e:
                    raise ConfigError(f"{key}: not a mapping ({e})") from None
            if not isinstance(value, dict):
                raise ConfigError(f"{key}: expected a mapping such as {{key: value}}, got {values[key]!r}")
            values[key] = json.dumps(value)
    types = _field_types()
    values = {key: _coerce(key, value, types[key], from_cli=key in overrides) for key, value in values.items()}
    values.setdefault("output_dir", "outputs/run")
    try:
        model_args, data_args, loss_args, train_args = HfArgumentParser(CONFIG_CLASSES).parse_dict(values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad config value{where}: {e}") from e
    validate(model_args, data_args, loss_args)
    return model_args, data_args, loss_args, train_args


def validate(model_args: ModelArguments, data_args: DataArguments, loss_args: LossArguments) -> None:
    choices = [("dataset", data_args.dataset, DATASETS), ("aux", loss_args.aux, AUX_NAMES),
               ("synthesize", data_args.synthesize, SYNTH_KINDS),
               ("on_error", data_args.on_error, ("raise", "skip")),
               ("kernel", loss_args.kernel, ("gaussian", "laplace")),
               ("kernel_mode", loss_args.kernel_mode, ("value_distance", "random", "shuffled")),
               ("numeric_vocab", loss_args.numeric_vocab, ("all", "canonical"))]
    for key, value, allowed in choices:
        if value not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")
    if loss_args.alpha != "auto":
        try:
            float(loss_args.alpha)
        except ValueError:
            raise ConfigError(f"alpha must be 'auto' or a number; got {loss_args.alpha!r}") from None
    if data_args.dataset == "mixture":
        if not data_args.mixture:
            raise ConfigError("dataset: mixture needs the key 'mixture' (a list of sources)")
    elif data_args.data_root is None:
        raise ConfigError(f"dataset {data_args.dataset!r} needs the key 'data_root'")


def aux_options(loss_args: LossArguments) -> dict:
    """Keyword arguments for the aux loss named by `loss_args.aux`."""
    alpha = loss_args.alpha if loss_args.alpha == "auto" else float(loss_args.alpha)
    return dict(kernel=loss_args.kernel, sigmas=tuple(loss_args.sigmas), squash=loss_args.squash, alpha=alpha,
                kernel_mode=loss_args.kernel_mode, seed=loss_args.kernel_seed)
