"""Qwen3-VL: patch 16 (images sized to multiples of 32), interleaved mRoPE, DeepStack mergers; the Qwen3
vocabulary (Qwen2.5's plus <tool_response>, </tool_response>, <think>, </think> at 151665..151668)."""

from __future__ import annotations

from .qwen2_5_vl import QWEN_IDS, QWEN_VL_TOKEN_IDS, QwenVLFamily, build_processor
from .tokenizers import QWEN3_VL_CHAT_TEMPLATE, build_qwen_tokenizer

TINY_TEXT_CONFIG = dict(
    vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [4, 2, 2],
                     "mrope_interleaved": True},
    bos_token_id=151643, eos_token_id=151645,
)
TINY_VISION_CONFIG = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=4, patch_size=16,
                          spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                          num_position_embeddings=256, deepstack_visual_indexes=[0])


def _qwen3_vl(hidden, intermediate, tied, *, depth, vision_hidden, vision_intermediate, deepstack):
    """Keyword arguments of a released Qwen3-VL config: a 36-layer text model (32 heads of 128, 8 KV heads,
    interleaved mRoPE) and a patch-16 ViT whose DeepStack mergers feed three of its blocks to the text."""
    text = dict(vocab_size=151936, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=262144,
                rms_norm_eps=1e-6, tie_word_embeddings=tied,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                                 "mrope_interleaved": True}, **QWEN_IDS)
    vision = dict(depth=depth, hidden_size=vision_hidden, intermediate_size=vision_intermediate, num_heads=16,
                  in_channels=3, patch_size=16, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=hidden,
                  num_position_embeddings=2304, deepstack_visual_indexes=deepstack, hidden_act="gelu_pytorch_tanh")
    return dict(text_config=text, vision_config=vision, tie_word_embeddings=tied, **QWEN_VL_TOKEN_IDS)


class Qwen3VL(QwenVLFamily):
    model_type = "qwen3_vl"
    title = "Qwen3-VL"
    preset = "tiny-qwen3-vl"
    processor_class = "Qwen3VLProcessor"
    resize_factor = 32
    lora_vision_suffixes = ("qkv", "attn.proj", "linear_fc1", "linear_fc2")
    projector_markers = (".visual.merger.", ".visual.deepstack_merger_list.")
    tiny_min_pixels = 64 * 64
    tiny_max_pixels = 256 * 256
    published_min_pixels = 65536
    published_max_pixels = 16777216
    published = {
        "Qwen/Qwen3-VL-4B-Instruct": _qwen3_vl(2560, 9728, True, depth=24, vision_hidden=1024,
                                               vision_intermediate=4096, deepstack=[5, 11, 17]),
        "Qwen/Qwen3-VL-8B-Instruct": _qwen3_vl(4096, 12288, False, depth=27, vision_hidden=1152,
                                               vision_intermediate=4304, deepstack=[8, 16, 24]),
    }

    def config_class(self):
        from transformers import Qwen3VLConfig

        return Qwen3VLConfig

    def model_class(self):
        from transformers import Qwen3VLForConditionalGeneration

        return Qwen3VLForConditionalGeneration

    def tiny_config(self):
        from transformers import Qwen3VLConfig

        return Qwen3VLConfig(text_config=dict(TINY_TEXT_CONFIG), vision_config=dict(TINY_VISION_CONFIG),
                             tie_word_embeddings=False)

    def tiny_processor(self, min_pixels=None, max_pixels=None):
        from transformers import Qwen3VLProcessor

        tokenizer = build_qwen_tokenizer(qwen3=True, chat_template=QWEN3_VL_CHAT_TEMPLATE)
        return build_processor(tokenizer, min_pixels or self.tiny_min_pixels, max_pixels or self.tiny_max_pixels,
                               processor_cls=Qwen3VLProcessor, patch_size=16, chat_template=QWEN3_VL_CHAT_TEMPLATE)


FAMILY = Qwen3VL()
