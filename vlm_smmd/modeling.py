"""Load a model + its processor through its family (hub id, local dir, or an offline preset); freeze; LoRA.

Presets, randomly initialised with the real tokenizers (built offline, see `families.tokenizers`):
"tiny" / "tiny-qwen2.5-vl", "tiny-qwen2-vl", "tiny-qwen3-vl", "tiny-mllama" (Llama-3.2-Vision), and the
text LLMs "tiny-qwen2.5", "tiny-llama3".

"scratch" is the research preset (`build_scratch`): a family's real architecture, randomly initialised at
the sizes asked, over a task vocabulary (`task_vocab`) learned from the task's own texts, so that a model
small enough to learn on two CPU cores does not spend its time on a 152k-token output layer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from .families import (
    ModelLoadError,
    checkpoint_model_type,
    family_for,
    family_of,
    looks_like_path,
    presets,
    published_family,
    published_ids,
)

__all__ = ["ModelLoadError", "check_model_folder", "load_model_and_processor", "load_processor", "lora_target_modules", "set_trainable",
           "trainable_summary"]


def _resolve_dtype(dtype):
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return "auto"
    try:
        return {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
                "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of auto, bf16, fp16, fp32; got {dtype!r}") from None


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set to a true value: no hub request is made."""
    return any(os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _cached_model_type(hub_id: str, table) -> str | None:
    """model_type of a hub id from the local hub cache (offline mode: nothing else can be asked); a
    ModelLoadError at once when the cache does not hold its config."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config_file = try_to_load_from_cache(hub_id, "config.json")
    except ValueError:  # not a valid repo id (HFValidationError)
        config_file = None
    if not isinstance(config_file, str):
        raise ModelLoadError(f"{hub_id}: not a preset ({', '.join(table)}) or a model directory, and HF_HUB_OFFLINE "
                             "is set, so no hub is reachable (nor does the local hub cache hold it)")
    try:
        config = json.loads(Path(config_file).read_text())
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"{config_file}: not a readable config.json ({e})") from None
    return config.get("model_type") if isinstance(config, dict) else None


def resolve_family(name_or_path: str):
    """The family of a preset name, a local checkpoint folder or a hub id (ModelLoadError otherwise)."""
    table = presets()
    if name_or_path in table:
        return table[name_or_path]
    model_type = checkpoint_model_type(name_or_path)
    if model_type is None:
        if looks_like_path(name_or_path):
            raise ModelLoadError(f"{name_or_path}: no such model directory")
        if hub_offline():
            return family_for(_cached_model_type(name_or_path, table), where=name_or_path)
        from transformers import AutoConfig

        try:
            model_type = AutoConfig.from_pretrained(name_or_path).model_type
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"{name_or_path}: not a preset ({', '.join(table)}), a model directory or a "
                                 f"reachable hub id ({e})") from None
    return family_for(model_type, where=name_or_path)


# the files a loader reads from a model folder as JSON (from_pretrained, the tokenizer and processor)
_LOADER_JSON = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "added_tokens.json", "vocab.json", "preprocessor_config.json",
                "processor_config.json", "video_preprocessor_config.json", "chat_template.json", "adapter_config.json",
                "model.safetensors.index.json")
_HEADER_MAX = 100 << 20  # safetensors' own bound on a header


def _check_safetensors(path: Path) -> None:
    """ModelLoadError naming `path` unless it is a whole safetensors file: an 8-byte header length, a JSON
    header of tensors whose data offsets all lie within the file (a truncated, garbled or empty file fails)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < length <= min(_HEADER_MAX, size - 8):
            why = "empty" if size == 0 else "no safetensors header (not a safetensors file, or cut short)"
            raise ModelLoadError(f"{path}: unreadable weights: {why}")
        try:
            header = json.loads(f.read(length))
        except ValueError:
            raise ModelLoadError(f"{path}: unreadable weights: its safetensors header is not JSON (garbled)") from None
    if not isinstance(header, dict):
        raise ModelLoadError(f"{path}: unreadable weights: its safetensors header is not a mapping (garbled)")
    ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"
            and isinstance(entry, dict) and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2]
    if len(ends) != len([k for k in header if k != "__metadata__"]) or not all(isinstance(e, int) for e in ends):
        raise ModelLoadError(f"{path}: unreadable weights: its safetensors header lists tensors without data offsets")
    if 8 + length + max(ends, default=0) > size:
        raise ModelLoadError(f"{path}: unreadable weights: cut short ({size:,} bytes; its header needs "
                             f"{8 + length + max(ends):,})")


def check_model_folder(folder, *, weights: bool = True) -> None:
    """ModelLoadError in one line naming the file, for a local model folder whose loader files do not read:
    a JSON file (config, tokenizer, processor, a weights index) that does not parse, and, with `weights`,
    a safetensors file (or a shard its index names) that is empty, garbled or cut short. Cheap: headers
    only, no tensor is read."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for name in _LOADER_JSON:
        path = folder / name
        if not path.is_file():
            continue
        try:
            json.loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError) as e:
            why = "empty" if path.stat().st_size == 0 else f"not valid JSON ({str(e).splitlines()[0]}; cut short?)"
            raise ModelLoadError(f"{path}: unreadable model file: {why}") from None
        except OSError as e:
            raise ModelLoadError(f"{path}: unreadable model file ({e.strerror or e})") from None
    if not weights:
        return
    shards = {p.name for p in folder.glob("*.safetensors")}
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        found = json.loads(index.read_bytes())
        listed = set((found.get("weight_map") or {}).values()) if isinstance(found, dict) else set()
        missing = sorted(n for n in listed if not (folder / n).is_file())
        if missing:
            raise ModelLoadError(f"{index}: names weight files that are not in {folder}: {', '.join(missing[:3])}")
        shards |= listed
    for name in sorted(shards):
        _check_safetensors(folder / name)


def _pickled_weights_error(error: BaseException, folder) -> ModelLoadError | None:
    """One line for torch's weights_only loader refusing a pickled weights file (it holds more than
    tensors: code could run on loading), naming the file; None for other errors."""
    import pickle

    seen = error
    while seen is not None and not isinstance(seen, pickle.UnpicklingError):
        seen = seen.__cause__ or seen.__context__
    if seen is None:
        return None
    files = sorted(p.name for p in Path(folder).glob("*.bin")) if Path(folder).is_dir() else []
    where = Path(folder) / files[0] if len(files) == 1 else f"{folder} ({', '.join(files) or 'a pickled file'})"
    return ModelLoadError(f"{where}: refused: a pickled weights file holding more than tensors (torch's weights_only "
                          "loader); convert it to safetensors from a trusted copy")


def published(hub_id: str):
    """The family of a released checkpoint whose architecture is known offline (`random_init`)."""
    family = published_family(hub_id)
    if family is None:
        raise ModelLoadError(f"{hub_id}: random_init builds only a released architecture known offline: "
                             + ", ".join(published_ids()))
    return family


def load_processor(name_or_path: str, *, min_pixels: int | None = None, max_pixels: int | None = None,
                   trust_remote_code: bool = False, random_init: bool = False):
    """(family, processor) of a preset, local checkpoint or hub id, without loading the model; the
    tokenizer pads on the left. With `random_init` a released hub id gets its processor built offline."""
    family = published(name_or_path) if random_init else resolve_family(name_or_path)
    if random_init:
        processor = family.published_processor(name_or_path, min_pixels, max_pixels)
    elif name_or_path in presets():
        processor = family.tiny_processor(min_pixels, max_pixels)
    else:
        check_model_folder(name_or_path, weights=False)  # a broken tokenizer or config: one line naming it
        processor = family.load_processor(name_or_path, min_pixels=min_pixels, max_pixels=max_pixels,
                                          trust_remote_code=trust_remote_code)
    getattr(processor, "tokenizer", processor).padding_side = "left"
    return family, processor


SCRATCH = "scratch"
# the scratch tokenizer's init keyword (saved in tokenizer_config.json) listing every character of the texts
# its vocabulary was learned from: a fine-tune from the saved model checks its own texts against it
# (training.datasets.check_base_vocabulary), since byte-level BPE encodes any text and an unseen
# character would silently get bytes whose embeddings were never trained
TASK_CHARACTERS = "task_characters"


def _mrope_sections(head_dim: int) -> list[int]:
    """Qwen's split of the rotary half-dimensions over (time, height, width): 64 -> [16, 24, 24]."""
    half = head_dim // 2
    side = (half - half // 4) // 2
    return [half - 2 * side, side, side]


def build_scratch(family, texts, *, sizes: dict, min_pixels=None, max_pixels=None, merges: int = 256):
    """(config, processor) of the scratch preset: `family`'s architecture at `sizes` (hidden_size, layers,
    heads, vision_hidden_size, vision_depth, vision_heads) over a tokenizer learned from `texts` (at most
    `merges` BPE merges: more make long questions fewer positions), keeping the
    family's special-token names and chat template (so the stock processor, the collator, NumericVocab and
    evaluation run unchanged). Qwen2.5-VL and Qwen2.5 (text) are supported."""
    from .task_vocab import build_task_tokenizer

    if family.model_type not in ("qwen2_5_vl", "qwen2"):
        raise ModelLoadError(f"the scratch preset supports the qwen2_5_vl and qwen2 families, not {family.model_type}")
    texts = list(texts)
    base = family.tiny_processor(min_pixels, max_pixels)
    base_tok = getattr(base, "tokenizer", base)
    specials = [t.content for _, t in sorted(base_tok.added_tokens_decoder.items()) if t.special]
    tok = build_task_tokenizer(texts, special_tokens=specials, chat_template=base_tok.chat_template,
                               eos_token=base_tok.eos_token, pad_token=base_tok.pad_token, max_merges=merges)
    tok.init_kwargs[TASK_CHARACTERS] = "".join(sorted(set().union(*map(set, texts))))
    hidden, heads = sizes["hidden_size"], sizes["heads"]
    if hidden % heads or (hidden // heads) % 2:
        raise ModelLoadError(f"scratch: hidden_size {hidden} must split into {heads} heads of an even size")
    text = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                num_hidden_layers=sizes["layers"], num_attention_heads=heads, num_key_value_heads=heads,
                max_position_embeddings=4096, bos_token_id=None, eos_token_id=tok.eos_token_id,
                tie_word_embeddings=False)
    if not family.vision:
        from transformers import Qwen2Config

        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
        return Qwen2Config(**text), tok
    from transformers import Qwen2_5_VLConfig

    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                               "mrope_section": _mrope_sections(hidden // heads)}
    depth, vision_hidden = sizes["vision_depth"], sizes["vision_hidden_size"]
    vision = dict(depth=depth, hidden_size=vision_hidden, intermediate_size=2 * vision_hidden,
                  num_heads=sizes["vision_heads"], patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                  window_size=112, out_hidden_size=hidden, fullatt_block_indexes=[depth - 1])
    ids = {name: tok.convert_tokens_to_ids(t) for name, t in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    parts = {attr: getattr(base, attr) for attr in type(base).get_attributes()}
    processor = type(base)(**{**parts, "tokenizer": tok}, chat_template=base.chat_template)
    return config, processor


def load_model_and_processor(
    name_or_path: str,
    *,
    processor=None,
    config=None,
    dtype="auto",
    attn_implementation: str | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    trust_remote_code: bool = False,
    seed: int = 0,
    freeze_vision: bool = False,
    freeze_merger: bool = False,
    freeze_language: bool = False,
    gradient_checkpointing: bool = False,
    lora: bool = False,
    lora_r: int = 16,
    lora_alpha: int = 32,
    lora_dropout: float = 0.05,
    lora_vision: bool = False,
    random_init: bool = False,
    verbose: bool = True,
):
    """Return `(model, processor)` of the checkpoint's family (a tokenizer is the processor of text LLMs).

    `name_or_path` is a hub id, a local directory saved with `save_pretrained`, or a preset name (module
    docstring; randomly initialised, seeded by `seed`). The family comes from the preset or from the
    checkpoint's config `model_type`; an unsupported one is a ModelLoadError listing the supported families.
    A `processor` from `load_processor` is used as it is; with a `config` (the scratch preset, with the
    processor `build_scratch` made for it) the model is that config, randomly initialised. With
    `random_init` a released hub id (`published_ids()`) is built offline at its published architecture with
    random weights (seeded by `seed`): nothing is downloaded.
    `freeze_merger` freezes the projector between vision and language (Qwen's merger, Mllama's
    multi_modal_projector).
    """
    torch_dtype = _resolve_dtype(dtype)
    if config is not None:
        if processor is None:
            raise ValueError("a config to initialise needs its processor (see build_scratch)")
        family = family_for(config.model_type)
    elif processor is None:
        family, processor = load_processor(name_or_path, min_pixels=min_pixels, max_pixels=max_pixels,
                                           trust_remote_code=trust_remote_code, random_init=random_init)
    else:
        family = published(name_or_path) if random_init else resolve_family(name_or_path)
    if config is None and random_init:
        config = family.published_config(name_or_path)
    if config is not None or name_or_path in presets():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            config = config if config is not None else family.tiny_config()
            if attn_implementation:
                config._attn_implementation = attn_implementation
            model = family.model_class()(config)
        if torch_dtype not in (None, "auto"):
            model = model.to(torch_dtype)
    else:
        kwargs = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        check_model_folder(name_or_path)  # a damaged weights file: one line naming it, before transformers reads it
        try:
            model = family.model_class().from_pretrained(name_or_path, **kwargs)
        except Exception as e:
            pickled = _pickled_weights_error(e, name_or_path)
            if pickled is not None:
                raise pickled from None
            if not isinstance(e, (OSError, ValueError)):
                raise
            raise ModelLoadError(f"{name_or_path}: could not load a {family.title} model ({e})") from e
    if verbose and (min_pixels or max_pixels) and family.resize_factor is None:
        print(f"note: min_pixels / max_pixels do not apply to {family.title} "
              + ("(its processor tiles images itself)" if family.vision else "(a text-only model)"))

    set_trainable(model, freeze_vision=freeze_vision, freeze_merger=freeze_merger,
                  freeze_language=freeze_language)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    if lora:
        model = apply_lora(model, r=lora_r, alpha=lora_alpha, dropout=lora_dropout, vision=lora_vision)
    if verbose:
        print(f"{family.title}: {trainable_summary(model)}")
    return model, processor


def set_trainable(model, *, freeze_vision=False, freeze_merger=False, freeze_language=False) -> None:
    """Freeze parts of a model: the vision tower, the projector, the language model (+ head)."""
    family = family_of(model)
    frozen = {"vision": freeze_vision, "projector": freeze_merger, "language": freeze_language}
    for name, param in model.named_parameters():
        param.requires_grad_(not frozen[family.parameter_part(name)])


def lora_target_modules(model, vision: bool = False) -> list[str]:
    """Full module names of the linear layers LoRA should wrap.

    Full names, not suffixes: vision MLPs share names such as gate_proj/up_proj/down_proj or q_proj with
    the language model, so a suffix list would silently put adapters on the vision tower too.
    """
    family = family_of(model)
    targets = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or "lm_head" in name:
            continue
        part = family.parameter_part(name + ".weight")
        if part == "language" and name.endswith(family.lora_text_suffixes):
            targets.append(name)
        elif vision and part == "vision" and name.endswith(family.lora_vision_suffixes):
            targets.append(name)
    return targets


def apply_lora(model, *, r=16, alpha=32, dropout=0.05, vision=False):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, bias="none",
                        target_modules=lora_target_modules(model, vision=vision))
    return get_peft_model(model, config)


def trainable_summary(model) -> str:
    def size(p):  # ZeRO-3 partitions parameters at construction; ds_numel is the full size
        return getattr(p, "ds_numel", p.numel())

    total = sum(size(p) for p in model.parameters())
    trainable = sum(size(p) for p in model.parameters() if p.requires_grad)
    return f"trainable params: {trainable:,} of {total:,} ({100.0 * trainable / max(total, 1):.2f}%)"
