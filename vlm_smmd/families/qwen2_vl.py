"""Qwen2-VL: the Qwen2.5-VL layout with a plain ViT (fc1/fc2 MLP, no window attention)."""

from __future__ import annotations

from .qwen2_5_vl import TINY_TEXT_CONFIG, QwenVLFamily, build_processor
from .tokenizers import build_qwen_tokenizer

TINY_VISION_CONFIG = dict(depth=2, embed_dim=64, hidden_size=64, num_heads=4, mlp_ratio=2, patch_size=14,
                          spatial_merge_size=2, temporal_patch_size=2)


class Qwen2VL(QwenVLFamily):
    model_type = "qwen2_vl"
    title = "Qwen2-VL"
    preset = "tiny-qwen2-vl"
    processor_class = "Qwen2VLProcessor"
    lora_vision_suffixes = ("qkv", "attn.proj", "fc1", "fc2")

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
