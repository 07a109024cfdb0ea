"""Qwen2 / Qwen2.5 text LLMs (model_type qwen2): ChatML turns, every digit its own token."""

from __future__ import annotations

from . import Family
from .tokenizers import QWEN2_CHAT_TEMPLATE, build_qwen_tokenizer


class Qwen2Text(Family):
    model_type = "qwen2"
    title = "Qwen2.5 (text)"
    preset = "tiny-qwen2.5"
    vision = False
    assistant_header = "<|im_start|>assistant\n"
    end_of_turn = "<|im_end|>"
    published = {
        "Qwen/Qwen2.5-7B-Instruct": dict(
            vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
            num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
            bos_token_id=151643, eos_token_id=151645),
    }

    def config_class(self):
        from transformers import Qwen2Config

        return Qwen2Config

    def model_class(self):
        from transformers import Qwen2ForCausalLM

        return Qwen2ForCausalLM

    def tiny_config(self):
        from transformers import Qwen2Config

        return Qwen2Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                           bos_token_id=151643, eos_token_id=151645, tie_word_embeddings=False)

    def tiny_processor(self, min_pixels=None, max_pixels=None):
        return build_qwen_tokenizer(chat_template=QWEN2_CHAT_TEMPLATE)

    def describe_numbers(self):
        return "every digit is its own token: V_num = the ten digits"


FAMILY = Qwen2Text()
