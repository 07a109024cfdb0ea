"""Qwen2-VL: the Qwen2.5-VL layout with a plain ViT (fc1/fc2 MLP, no window attention)."""

from __future__ import annotations

from .qwen2_5_vl import MROPE, QWEN_IDS, QWEN_VL_TOKEN_IDS, TINY_TEXT_CONFIG, QwenVLFamily, build_processor
from .tokenizers import build_qwen_tokenizer

TINY_VISION_CONFIG = dict(depth=2, embed_dim=64, hidden_size=64, num_heads=4, mlp_ratio=2, patch_size=14,
                          spatial_merge_size=2, temporal_patch_size=2)


def _qwen2_vl(hidden, intermediate, heads, kv_heads, vocab, tied):
    """Keyword arguments of a released Qwen2-VL config: a 28-layer text model and the 32-block ViT (width
    1280, MLP ratio 4) whose merger projects to the text width."""
    text = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=28,
                num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=32768,
                rms_norm_eps=1e-6, rope_parameters=dict(MROPE), tie_word_embeddings=tied, **QWEN_IDS)
    vision = dict(depth=32, embed_dim=1280, hidden_size=hidden, num_heads=16, mlp_ratio=4, in_channels=3,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, hidden_act="quick_gelu")
    return dict(text_config=text, vision_config=vision, tie_word_embeddings=tied, **QWEN_VL_TOKEN_IDS)


class Qwen2VL(QwenVLFamily):
    model_type = "qwen2_vl"
    title = "Qwen2-VL"
    preset = "tiny-qwen2-vl"
    processor_class = "Qwen2VLProcessor"
    lora_vision_suffixes = ("qkv", "attn.proj", "fc1", "fc2")
    published = {
        "Qwen/Qwen2-VL-2B-Instruct": _qwen2_vl(1536, 8960, 12, 2, 151936, tied=True),
        "Qwen/Qwen2-VL-7B-Instruct": _qwen2_vl(3584, 18944, 28, 4, 152064, tied=False),
    }

    def config_class(self):
        from transformers import Qwen2VLConfig

        return Qwen2VLConfig

    def model_class(self):
        from transformers import Qwen2VLForConditionalGeneration

        return Qwen2VLForConditionalGeneration

    def tiny_config(self):
        from transformers import Qwen2VLConfig

        return Qwen2VLConfig(text_config=dict(TINY_TEXT_CONFIG), vision_config=dict(TINY_VISION_CONFIG),
                             tie_word_embeddings=False)

    def tiny_processor(self, min_pixels=None, max_pixels=None):
        from transformers import Qwen2VLProcessor

        return build_processor(build_qwen_tokenizer(), min_pixels, max_pixels, processor_cls=Qwen2VLProcessor)


FAMILY = Qwen2VL()
