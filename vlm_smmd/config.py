"""Run configuration: dataclasses for model, data and loss, plus the HF TrainingArguments.

A config is one flat YAML mapping whose keys are fields of these dataclasses (HfArgumentParser style);
`--key value` on the command line overrides a key; keys are taken spelt with dashes too (max-steps).
Unknown keys are errors that name the key and where it came from.

Importing transformers takes seconds, so keys and our own values are checked first (`check_config`):
the TrainingArguments field names are read from transformers' source with `ast`, and
`VLMTrainingArguments` is built on first use (module `__getattr__`). Only `load_config` imports it.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import math
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, make_dataclass
from pathlib import Path

import yaml

from .data.tasks import SYNTH_KINDS as SYNTH_TABLE
from .data.tasks import TASKS, synth_nested, synth_options
from .losses.registry import AUX_LAMBDA, AUX_NAMES, LOSSES, SETTINGS, options_from_settings

DATASETS = (*TASKS, "mixture")
SYNTH_KINDS = ("none", *SYNTH_TABLE)  # the `synthesize:` kinds: rows of data.tasks.SYNTH_KINDS


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names the key."""


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="tiny", metadata={"help": "hub id, local dir, or a preset: tiny (Qwen2.5-VL), tiny-qwen2-vl, "
                                  "tiny-qwen3-vl, tiny-mllama, tiny-qwen2.5, tiny-llama3, or scratch (a task "
                                  "vocabulary and the scratch_* sizes)"})
    random_init: bool = field(default=False, metadata={
        "help": "build the released architecture of the hub id in model_name_or_path offline with random weights "
                "(nothing downloaded; for sizing, dry runs and benches: `vlm-smmd plan` lists the known ids)"})
    torch_dtype: str = field(default="auto", metadata={"help": "auto | bf16 | fp16 | fp32"})
    attn_implementation: str | None = field(default=None, metadata={"help": "eager | sdpa | flash_attention_2"})
    flush_denormal: bool = field(default=True, metadata={
        "help": "on the CPU, compute subnormal floats (below 1.2e-38) as 0 (torch.set_flush_denormal): they "
                "arise as a model sharpens and made a trained scratch model's step 2.5x slower; false "
                "reproduces runs made before this option bit for bit"})
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
    scratch_vocab_merges: int = field(default=256, metadata={"help": "scratch preset: most BPE merges of the task "
                                                                     "vocabulary (more: fewer tokens a question)"})


@dataclass
class DataArguments:
    dataset: str = field(default="clocks", metadata={"help": "|".join(DATASETS)})
    data_root: str | None = field(default=None, metadata={"help": "dataset folder (the reader's root)"})
    train_split: str = "train"
    eval_split: str | None = field(default=None, metadata={"help": "split scored during training (loss only)"})
    mixture: list[dict] | None = field(
        default=None,
        metadata={"help": "mixture sources: a list of {name, root, split, weight, limit} "
                  "(in YAML a plain list; on the command line JSON or YAML text)"},
    )
    reader_options: dict | None = field(
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
    synthesize_options: dict | None = field(
        default=None, metadata={"help": "extra options of the synthetic kind's writer as a mapping (in YAML a plain "
                                "mapping), checked against its keywords: " + "; ".join(
                                    f"{k.name}: {k.writer.replace(':', '.')}" for k in SYNTH_TABLE.values())})
    preflight_workers: int = field(default=1, metadata={"help": "processes for the preflight check of every record"})
    max_image_pixels: int | None = field(default=None, metadata={
        "help": "largest image (width x height) accepted; larger ones are bad records; default Pillow's "
                "89,478,485; 0: no limit"})
    # the evaluation protocol of a setting, declared before its runs (compare and demo read it)
    test_splits: list[str] = field(default_factory=list, metadata={
        "help": "held-out splits compare and demo evaluate (default: [eval_split or 'test']); a split named "
                "*unseen* holds answers never seen in training"})
    primary_metric: str | None = field(default=None, metadata={
        "help": "the comparison's primary endpoint: a headline figure of the report (exact_match, mae, ...)"})
    primary_split: str | None = field(default=None, metadata={"help": "the split of the primary endpoint"})
    dev_seeds: list[int] = field(default_factory=list, metadata={
        "help": "seeds used while building this setting: reported, never counted as confirmation"})

    def __setattr__(self, name, value):
        # the mapping-valued keys are typed whenever set (init, replace, assignment): JSON or YAML text (older
        # callers, run_config.json) is parsed once here; a value of another shape is a ConfigError naming the key
        object.__setattr__(self, name, mapping_value(name, value) if name in MAPPING_KEYS else value)


MAPPING_KEYS = ("mixture", "reader_options", "synthesize_options")  # mixture: a list of mappings


def mapping_value(key: str, value, where: str | None = None):
    """`value` of mapping-valued key `key` as its typed value (a dict; for mixture a list of dicts), text
    parsed with the config's YAML loader (JSON is YAML); ConfigError naming the key (and `where`)."""
    if isinstance(value, str):
        try:
            value = _safe_yaml(value, where or key)
        except yaml.YAMLError as e:
            raise ConfigError(f"{where or key}: not {'a list' if key == 'mixture' else 'a mapping'} "
                              f"({' '.join(str(e).split())})") from None
    if value is None:
        return None
    if key == "mixture":
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"mixture: expected a list of sources such as [{{name: ..., root: ...}}], got {value!r}")
        for i, entry in enumerate(value):
            if not isinstance(entry, dict):
                raise ConfigError(f"mixture entry {i}: expected a mapping such as {{name: ..., root: ...}}, got {entry!r}")
        return [dict(entry) for entry in value]
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping such as {{key: value}}, got {value!r}")
    return dict(value)


def _loss_arguments() -> type:
    """`LossArguments`: aux, aux_lambda, numeric_vocab, and one key per option of the registered losses
    (`losses.registry.SETTINGS`), so every loss option can be set from a config and a new loss needs no
    change here."""
    kinds = {"float": float, "int": int, "choice": str, "floats": list[float], "auto_or_float": str}
    specs = [("aux", str, field(default="smmd", metadata={"help": " | ".join(AUX_NAMES)})),
             ("aux_lambda", float, field(default=AUX_LAMBDA.default, metadata={"help": AUX_LAMBDA.help}))]
    for key, option in SETTINGS.items():
        users = [name for name, entry in LOSSES.items() if option in entry.options]
        metadata = {"help": f"{option.help}; {option.rule} ({', '.join(users)})"}
        specs.append((key, kinds[option.kind],
                      field(default_factory=lambda d=option.default: list(d), metadata=metadata)
                      if option.kind == "floats" else field(default=option.default, metadata=metadata)))
    specs.append(("numeric_vocab", str, field(default="all", metadata={
        "help": "all: every plain-number token (\"7\", \"07\" share value 7) | canonical: integers without "
                "leading zeros only"})))
    return make_dataclass("LossArguments", specs, namespace={"__module__": __name__})


LossArguments = _loss_arguments()


OWN_CLASSES = (ModelArguments, DataArguments, LossArguments)


@functools.cache
def _vlm_training_arguments() -> type:
    from transformers import TrainingArguments

    @dataclass
    class VLMTrainingArguments(TrainingArguments):
        """TrainingArguments with defaults that suit VLM fine-tuning with our collator."""

        remove_unused_columns: bool = field(default=False, metadata={"help": "samples are not dicts of columns"})
        prediction_loss_only: bool = field(default=True, metadata={"help": "never gather [B, T, V] logits"})
        logging_steps: float = 10
        save_strategy: str = "no"

    VLMTrainingArguments.__qualname__ = "VLMTrainingArguments"  # pickled by name (training_args.bin)
    return VLMTrainingArguments


def __getattr__(name: str):
    """`VLMTrainingArguments` and `CONFIG_CLASSES` (the four dataclasses) import transformers on first use."""
    if name == "VLMTrainingArguments":
        return _vlm_training_arguments()
    if name == "CONFIG_CLASSES":
        return (*OWN_CLASSES, _vlm_training_arguments())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _init_fields(classes) -> set[str]:
    return {f.name for cls in classes for f in fields(cls) if f.init}


@functools.cache
def training_argument_names() -> frozenset[str]:
    """The init field names of HF TrainingArguments, read from transformers/training_args.py with `ast`
    (no import); from the class itself when that file is not laid out as expected (no plain class of
    that name, or one with base classes whose fields the source would not show)."""
    try:
        spec = importlib.util.find_spec("transformers")
        source = Path(spec.submodule_search_locations[0], "training_args.py").read_text(encoding="utf-8")
        tree = ast.parse(source)
        (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrainingArguments"]
    except (AttributeError, TypeError, IndexError, ValueError, OSError, SyntaxError):
        cls = None
    if cls is None or cls.bases:
        from transformers import TrainingArguments

        return frozenset(_init_fields([TrainingArguments]))
    names = set()
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        if "ClassVar" in ast.unparse(node.annotation):
            continue
        value = node.value
        if (isinstance(value, ast.Call) and ast.unparse(value.func).endswith("field")
                and any(k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                        for k in value.keywords)):
            continue
        names.add(node.target.id)
    return frozenset(names)


def _known_keys() -> set[str]:
    return _init_fields(OWN_CLASSES) | training_argument_names()


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


def _text_none_keys(classes) -> set[str]:
    """Fields where "none" / "null" text means None: those whose default is None. Elsewhere it stays
    text ("report_to: none" is HF's word for no reporting)."""
    return {f.name for cls in classes for f in fields(cls) if f.default is None and f.default_factory is MISSING}


def _field_types(classes) -> dict:
    hints = {}
    for cls in classes:
        hints.update(typing.get_type_hints(cls))
    return hints


def _coerce(key: str, value, hint, from_cli: bool = False, none_keys: set[str] = frozenset()):
    """`value` (YAML-typed, or a raw string from the command line) as the field's type; ConfigError names
    the key when it does not fit. "none" text is None for `none_keys`. Other types (enums, dicts) are
    parsed as YAML when they come from the command line and left to HfArgumentParser otherwise."""
    args = typing.get_args(hint)
    optional = type(None) in args
    bases = [a for a in args if a is not type(None)] if args and typing.get_origin(hint) is not list else [hint]
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in _NONE
                         and key in none_keys):
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
        if isinstance(value, (int, float)) and math.isfinite(value) and (base is float or float(value).is_integer()):
            return base(value)
        if isinstance(value, str):
            try:
                number = base(value.strip())
            except ValueError:
                raise bad("an integer" if base is int else "a number") from None
            if math.isfinite(number):
                return number
        raise bad("an integer" if base is int else "a finite number")
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
        values = _safe_yaml(_config_text(Path(path)), path) if path is not None else {}
    except (OSError, yaml.YAMLError, ConfigError):
        return False  # load_config reports the problem
    return isinstance(values, dict) and bool(values.get("deepspeed"))


MAX_YAML_NODES = 100_000  # a config is small; more (after alias expansion) is an alias bomb


def _config_text(path: Path) -> str:
    """The config's text; bytes that are not UTF-8 are a ConfigError naming the line and byte."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}); "
                          "save the config as UTF-8") from None


def _safe_yaml(text: str, path, lines: dict | None = None) -> object:
    """yaml.safe_load, refusing a key given twice in one mapping and alias expansion past MAX_YAML_NODES,
    each as a ConfigError naming the file and line. `lines`, when given, receives {key path: line} for
    every mapping key (a path: the keys and list indices from the top, e.g. ("synthesize_options", "style"))."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        count, todo = 0, [(node, ())]
        while todo:
            item, where = todo.pop()
            count += 1
            if count > MAX_YAML_NODES:
                raise ConfigError(f"{path}: line {item.start_mark.line + 1}: aliases expand past {MAX_YAML_NODES} "
                                  "values; write the config out without such anchors")
            if isinstance(item, yaml.MappingNode):
                seen = {}
                for key, value in item.value:
                    inner = where
                    if isinstance(key, yaml.ScalarNode):
                        if key.value in seen:
                            raise ConfigError(f"{path}: line {key.start_mark.line + 1}: key {key.value!r} is given "
                                              f"twice (first on line {seen[key.value]}); keep one")
                        seen[key.value] = key.start_mark.line + 1
                        inner = (*where, key.value)
                        if lines is not None:
                            lines.setdefault(inner, key.start_mark.line + 1)
                    todo += ((key, where), (value, inner))
            elif isinstance(item, yaml.SequenceNode):
                todo += ((v, (*where, i)) for i, v in enumerate(item.value))
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _read_yaml(path: Path, lines: dict | None = None) -> dict:
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        values = _safe_yaml(_config_text(path), path, lines) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: a config is a mapping of keys to values")
    return values


def _check_keys(file_values: dict, overrides: dict, path) -> None:
    known = _known_keys()
    for key in [*file_values, *overrides]:
        if key in known:
            continue
        where = " on the command line" if key in overrides else f" in {path}"
        close = difflib.get_close_matches(str(key).replace("-", "_"), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown config key {key!r}{where}{hint}")


def _underscored(values: dict, path) -> dict:
    """The YAML mapping with known keys spelt with dashes (max-steps) under their underscore names."""
    known, out = _known_keys(), {}
    for key, value in values.items():
        name = key.replace("-", "_") if isinstance(key, str) and key.replace("-", "_") in known else key
        if name in out:
            raise ConfigError(f"config key {name!r} is given twice in {path} (spelt with dashes and with underscores)")
        out[name] = value
    return out


def _check(path, overrides: dict):
    """((ModelArguments, DataArguments, LossArguments), the TrainingArguments values as given)."""
    lines: dict = {}
    values = _underscored(_read_yaml(Path(path), lines), path) if path is not None else {}
    _check_keys(values, overrides, path)
    values.update(overrides)
    nested = {}
    for key in MAPPING_KEYS:  # text from the command line, or quoted in the file: parsed here, once
        if values.get(key) is not None:
            where = f"--{key}" if key in overrides else f"{path}: {key}"
            values[key] = nested[key] = mapping_value(key, values[key], where)
    types, none_keys = _field_types(OWN_CLASSES), _text_none_keys(OWN_CLASSES)
    own = []
    for cls in OWN_CLASSES:
        names = _init_fields([cls])
        own.append(cls(**{key: _coerce(key, values.pop(key), types[key], from_cli=key in overrides,
                                       none_keys=none_keys) for key in list(values) if key in names}))
    validate(*own)
    check_nested_keys(own[1], nested, path, lines, overrides)
    check_seeds(values)
    return tuple(own), values


_MIXTURE_KEYS = {"name", "root", "split", "weight", "limit", "label", "on_error"}  # mixture.from_spec's own
# a mixture entry may render its root on first use: the DataArguments synthesis keys, per source
# (training.datasets.source_data_args); the reader never sees them (mixture.from_spec drops synthesize*)
SYNTH_ENTRY_KEYS = tuple(f.name for f in fields(DataArguments) if f.name.startswith("synthesize"))


def _keywords(function, set_by_caller: set[str]) -> set[str] | None:
    """The keyword names `function` takes, less those its caller sets; None when it takes any (**kwargs)."""
    import inspect

    params = inspect.signature(function).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind is not p.VAR_POSITIONAL} - set_by_caller


def _unknown(keys, allowed: set[str], what: str, where) -> None:
    for key in keys:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(sorted(allowed))})"
            raise ConfigError(f"{where(key)}: unknown key {key!r} in {what}{hint}")


def check_nested_keys(data_args, nested: dict, path, lines: dict, overrides: dict) -> None:
    """Every key inside synthesize_options, reader_options and the mixture's entries is one the writer or
    reader named takes (from its signature), so a typo is one ConfigError naming file, line and key with a
    suggestion, before any data is rendered or read."""
    from .data.tasks import reader

    def locate(key_path):
        def where(key):
            if key_path[0] in overrides:
                return f"--{key_path[0]} on the command line"
            line = lines.get((*key_path, key)) or lines.get(key_path[:1])
            return f"{path}: line {line}" if line else str(path)
        return where

    def check_synth_options(kind, options, key_path, what):
        allowed = synth_options(kind)
        if allowed is not None:
            _unknown(options, set(allowed), f"{what} of synthesize: {kind}", locate(key_path))
        for option, shape in synth_nested(kind).items():  # clocks: style, the ClockStyle fields
            if isinstance(options.get(option), dict):
                _unknown(options[option], {f.name for f in fields(shape)}, f"{what}.{option} "
                         f"({shape.__name__})", locate((*key_path, option)))

    options = nested.get("synthesize_options")
    if options is not None and data_args.synthesize != "none":
        check_synth_options(data_args.synthesize, options, ("synthesize_options",), "synthesize_options")
    options = nested.get("reader_options")
    if options is not None and data_args.dataset != "mixture":
        allowed = _keywords(reader(data_args.dataset), {"root", "split", "on_error"})
        if allowed is not None:
            _unknown(options, allowed, f"reader_options of dataset {data_args.dataset}", locate(("reader_options",)))
    for i, entry in enumerate(nested.get("mixture") or ()):
        if isinstance(entry, dict) and entry.get("name") in TASKS:
            allowed = _keywords(reader(entry["name"]), {"root", "split", "on_error"})
            if allowed is not None:
                _unknown(entry, allowed | _MIXTURE_KEYS | set(SYNTH_ENTRY_KEYS), f"mixture entry {i} ({entry['name']})",
                         locate(("mixture", i)))
            if entry.get("synthesize", "none") != "none" and entry.get("synthesize_options"):
                check_synth_options(entry["synthesize"], entry["synthesize_options"],
                                    ("mixture", i, "synthesize_options"), f"mixture entry {i} synthesize_options")


DEFAULT_OUTPUT_DIR = "outputs/run"


def check_config(path: str | Path | None, overrides: dict | None = None):
    """(ModelArguments, DataArguments, LossArguments, {TrainingArguments key: value as given}) from YAML +
    overrides, every key checked, without importing transformers; those values are checked by `load_config`."""
    own, values = _check(path, overrides or {})
    return (*own, values)


SEED_MAX = 2**32 - 1  # numpy's seed range, which the Trainer's set_seed uses


def check_seeds(values: dict) -> None:
    """`seed` and `data_seed` among the TrainingArguments values, when given, are integers in 0..2**32-1."""
    for key in ("seed", "data_seed"):
        value = values.get(key)
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
            continue
        try:
            number = int(str(value).strip()) if not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None or not 0 <= number <= SEED_MAX:
            raise ConfigError(f"{key} must be an integer in 0..{SEED_MAX}; got {value!r}")


def load_config(path: str | Path | None, overrides: dict | None = None):
    """(ModelArguments, DataArguments, LossArguments, VLMTrainingArguments) from YAML + overrides."""
    overrides = overrides or {}
    own, values = _check(path, overrides)
    from transformers import HfArgumentParser

    cls = _vlm_training_arguments()
    types, none_keys = _field_types([cls]), _text_none_keys([cls])
    values = {key: _coerce(key, value, types[key], from_cli=key in overrides, none_keys=none_keys)
              for key, value in values.items()}
    values.setdefault("output_dir", DEFAULT_OUTPUT_DIR)
    where = f" in {path}" if path is not None else ""
    try:
        (train_args,) = HfArgumentParser((cls,)).parse_dict(values)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad config value{where}: {e}") from e
    return (*own, train_args)


def train_command_line(argv: list[str]) -> tuple[str | None, dict, bool]:
    """`[CONFIG.yaml] [--key value ...] [--overwrite]` -> (config path or None, overrides, overwrite)."""
    path, rest = (None, argv) if not argv or argv[0].startswith("--") else (argv[0], argv[1:])
    overrides = parse_overrides(rest)
    overwrite = _coerce("--overwrite", overrides.pop("overwrite", False), bool)
    return path, overrides, overwrite


def train_help() -> str:
    """`vlm-smmd train --help`: the command line and every key of our dataclasses."""
    lines = ["usage: vlm-smmd train CONFIG.yaml [--key value ...] [--overwrite] [--dry-run]", "",
             "A config is a flat YAML mapping; any key can be overridden on the command line as --key value",
             "(or --key=value; a bare --flag means true). Keys are spelt with underscores; dashes work too (--max-steps).",
             "--overwrite: train into an output_dir that already holds a trained model (config.json, weights,",
             "trainer_state.json or checkpoint-*; they are removed first); without it such a folder is refused",
             "unless resume_from_checkpoint is set.",
             "--dry-run: build the config's released architecture at its real widths but 2 text layers / 2 vision",
             "blocks, train 2 steps of one sample on the CPU (dtype, LoRA, checkpointing, DeepSpeed over gloo and",
             "pixels as configured), save, reload and answer one sample, all in a temporary folder (output_dir is",
             "never touched); a config whose options do not go together fails in one line.", ""]
    for cls in OWN_CLASSES:
        lines.append(f"{cls.__name__}:")
        for f in fields(cls):
            default = f.default if f.default is not MISSING else f.default_factory()
            text = f.metadata.get("help", "")
            lines.append(f"  {f.name:<26} default {default!r}  {text}".rstrip())
        lines.append("")
    lines.append("plus every HF TrainingArguments key (learning_rate, per_device_train_batch_size, max_steps, "
                 "deepspeed, bf16, use_cpu, ...).")
    return "\n".join(lines)


def validate(model_args: ModelArguments, data_args: DataArguments, loss_args) -> None:
    choices = [("dataset", data_args.dataset, DATASETS), ("aux", loss_args.aux, AUX_NAMES),
               ("synthesize", data_args.synthesize, SYNTH_KINDS),
               ("on_error", data_args.on_error, ("raise", "skip")),
               ("numeric_vocab", loss_args.numeric_vocab, ("all", "canonical"))]
    for key, value, allowed in choices:
        if value not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")
    try:
        AUX_LAMBDA.check(loss_args.aux_lambda)
        aux_options(loss_args)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if model_args.scratch_vocab_merges < 0:
        raise ConfigError(f"scratch_vocab_merges must be >= 0, got {model_args.scratch_vocab_merges}")
    if data_args.max_image_pixels is not None and data_args.max_image_pixels < 0:
        raise ConfigError(f"max_image_pixels must be >= 0 (0: no limit), got {data_args.max_image_pixels}")
    if data_args.primary_split is not None and data_args.primary_split not in evaluated_splits(data_args):
        raise ConfigError(f"primary_split {data_args.primary_split!r} is not one of the evaluated splits "
                          f"{evaluated_splits(data_args)} (test_splits)")
    if data_args.dataset == "mixture":
        if not data_args.mixture:
            raise ConfigError("dataset: mixture needs the key 'mixture' (a list of sources)")
        if data_args.synthesize != "none":
            raise ConfigError("synthesize does not apply to dataset: mixture; give each mixture entry that is "
                              "rendered its own synthesize (and synthesize_num, _seed, _size, _options)")
        for i, entry in enumerate(data_args.mixture):
            check_entry_synthesis(i, entry)
    elif data_args.data_root is None:
        raise ConfigError(f"dataset {data_args.dataset!r} needs the key 'data_root'")


def check_entry_synthesis(i: int, entry: dict) -> None:
    """A mixture entry's synthesis keys (SYNTH_ENTRY_KEYS) have the types and ranges of the top-level ones,
    and its kind writes the layout of the entry's task; ConfigError naming the entry otherwise."""
    kind = entry.get("synthesize", "none")
    where = f"mixture entry {i} ({entry.get('name')})"
    if kind == "none":
        given = [k for k in SYNTH_ENTRY_KEYS if k in entry and k != "synthesize"]
        if given:
            raise ConfigError(f"{where}: {', '.join(given)} without synthesize (nothing would be rendered)")
        return
    if kind not in SYNTH_TABLE:
        raise ConfigError(f"{where}: synthesize must be one of {', '.join(SYNTH_KINDS)}; got {kind!r}")
    if SYNTH_TABLE[kind].layout != entry.get("name"):
        raise ConfigError(f"{where}: synthesize: {kind} writes the {SYNTH_TABLE[kind].layout} layout, which "
                          f"name: {entry.get('name')} does not read")
    for key, low in (("synthesize_num", 1), ("synthesize_seed", 0), ("synthesize_size", 1)):
        value = entry.get(key, 0 if key == "synthesize_seed" else 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{where}: {key} must be an integer >= {low}, got {value!r}")
    if not isinstance(entry.get("synthesize_options") or {}, dict):
        raise ConfigError(f"{where}: synthesize_options must be a mapping, got {entry['synthesize_options']!r}")


def evaluated_splits(data_args: DataArguments) -> list[str]:
    """The held-out splits a comparison evaluates: test_splits, else [eval_split or "test"]."""
    return list(data_args.test_splits) or [data_args.eval_split or "test"]


def aux_options(loss_args) -> dict:
    """The range-checked keyword arguments of the aux loss named by `loss_args.aux`, read from its config
    keys (`losses.registry`; "auto_or_float" options given as text, such as alpha "0.5", as numbers).
    ValueError naming option and value when one is out of range."""
    settings = asdict(loss_args)
    for key, option in SETTINGS.items():
        value = settings.get(key)
        if option.kind == "auto_or_float" and isinstance(value, str) and value != "auto":
            try:
                settings[key] = float(value)
            except ValueError:
                pass  # the option's own check names it
        option.check(settings[key])  # every key of the config, also those of other losses: no nan anywhere
    return options_from_settings(loss_args.aux, settings)
