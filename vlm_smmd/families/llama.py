"""Llama-3 text LLMs (model_type llama): header-delimited turns, integers in groups of up to 3 digits."""

from __future__ import annotations

from . import Family
from .mllama import LLAMA3_IDS, LLAMA31_ROPE, Mllama
from .tokenizers import build_llama3_tokenizer


class LlamaText(Family):
    model_type = "llama"
    title = "Llama-3 (text)"
    preset = "tiny-llama3"
    vision = False
    assistant_header = Mllama.assistant_header
    end_of_turn = Mllama.end_of_turn
    published = {
        "meta-llama/Llama-3.1-8B-Instruct": dict(
            vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
            rope_parameters=dict(LLAMA31_ROPE), tie_word_embeddings=False, **LLAMA3_IDS),
    }

    def config_class(self):
        from transformers import LlamaConfig

        return LlamaConfig

    def model_class(self):
        from transformers import LlamaForCausalLM

        return LlamaForCausalLM

    def tiny_config(self):
        from transformers import LlamaConfig

        return LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                           rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                           bos_token_id=128000, eos_token_id=[128001, 128008, 128009], tie_word_embeddings=False)

    def tiny_processor(self, min_pixels=None, max_pixels=None):
        return build_llama3_tokenizer()

    def describe_numbers(self):
        return Mllama.describe_numbers(self)


FAMILY = LlamaText()
