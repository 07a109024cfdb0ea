"""Qwen2.5-VL: ViT with window attention and a patch merger; 3-D mRoPE; images sized by smart_resize (28)."""

from __future__ import annotations

import torch

from . import Family
from .tokenizers import QWEN_VL_CHAT_TEMPLATE, build_qwen_tokenizer

# Small enough to train on two CPU cores, shaped like the real thing (mRoPE, window attention, patch
# merger, untied LM head wider than the tokenizer as in the released checkpoints).
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


class QwenVLFamily(Family):
    """What the Qwen VL families share: ChatML turns, <|image_pad|> placeholders, smart_resize sizing."""

    assistant_header = "<|im_start|>assistant\n"
    end_of_turn = "<|im_end|>"
    image_token = "<|image_pad|>"
    resize_factor = 28
    lora_vision_suffixes = ("qkv", "attn.proj", "gate_proj", "up_proj", "down_proj")
    vision_markers = (".visual.",)
    projector_markers = (".visual.merger.",)
    own_positions = True

    def expected_image_tokens(self, batch, images_per_row, processor):
        grids = batch.get("image_grid_thw")
        counts = torch.zeros(len(images_per_row), dtype=torch.long)
        if grids is None:
            return counts
        per_image = grids.prod(1) // processor.image_processor.merge_size ** 2
        rows = torch.repeat_interleave(torch.arange(len(images_per_row)), torch.tensor(images_per_row))
        return counts.index_add_(0, rows, per_image)

    def placeholder_tokens(self, image, processor):
        patch, merge = processor.image_processor.patch_size, processor.image_processor.merge_size
        width, height = image.size
        return (height // patch) * (width // patch) // merge**2

    def add_masked_image(self, inputs, processor):
        """One merged patch of a blank image, its placeholder in a new first column with attention mask 0
        (mRoPE positions skip masked tokens, and no query attends to it); the other rows get a masked pad."""
        from PIL import Image

        side = self.resize_factor
        image = processor.image_processor(images=[Image.new("RGB", (side, side))], do_resize=False,
                                          return_tensors="pt")
        ids = inputs["input_ids"]
        tok = processor.tokenizer
        column = torch.full((len(ids), 1), tok.pad_token_id, dtype=ids.dtype, device=ids.device)
        column[0, 0] = tok.convert_tokens_to_ids(self.image_token)
        types = torch.zeros_like(column)
        types[0, 0] = 1
        inputs["input_ids"] = torch.cat([column, ids], 1)
        inputs["attention_mask"] = torch.cat([torch.zeros_like(column), inputs["attention_mask"]], 1)
        if "mm_token_type_ids" in inputs:
            inputs["mm_token_type_ids"] = torch.cat([types.to(inputs["mm_token_type_ids"].dtype),
                                                     inputs["mm_token_type_ids"]], 1)
        inputs["pixel_values"] = image["pixel_values"].to(ids.device)
        inputs["image_grid_thw"] = image["image_grid_thw"].to(ids.device)

    def describe_numbers(self):
        return 'every digit is its own token ("10:07" is 1, 0, :, 0, 7): V_num = the ten digits'


class Qwen25VL(QwenVLFamily):
    model_type = "qwen2_5_vl"
    title = "Qwen2.5-VL"
    preset = "tiny-qwen2.5-vl"
    processor_class = "Qwen2_5_VLProcessor"

    def model_class(self):
        from transformers import Qwen2_5_VLForConditionalGeneration

        return Qwen2_5_VLForConditionalGeneration

    def tiny_config(self):
        from transformers import Qwen2_5_VLConfig

        return Qwen2_5_VLConfig(text_config=dict(TINY_TEXT_CONFIG), vision_config=dict(TINY_VISION_CONFIG),
                                tie_word_embeddings=False)

    def tiny_processor(self, min_pixels=None, max_pixels=None):
        return build_processor(build_qwen_tokenizer(), min_pixels, max_pixels)


def build_processor(tokenizer, min_pixels=None, max_pixels=None, *, processor_cls=None, patch_size=14,
                    chat_template=QWEN_VL_CHAT_TEMPLATE):
    """The stock Qwen VL processor (Qwen2_5_VLProcessor unless given) around `tokenizer`."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    size = {"shortest_edge": min_pixels or Qwen25VL.tiny_min_pixels,
            "longest_edge": max_pixels or Qwen25VL.tiny_max_pixels}
    processor_cls = processor_cls or Qwen2_5_VLProcessor
    kwargs = dict(image_processor=Qwen2VLImageProcessor(size=size, patch_size=patch_size), tokenizer=tokenizer,
                  chat_template=chat_template)
    if "video_processor" in processor_cls.get_attributes():
        video_cls = Qwen2VLVideoProcessor
        if processor_cls.__name__ == "Qwen3VLProcessor":
            from transformers import Qwen3VLVideoProcessor as video_cls
        kwargs["video_processor"] = video_cls(size=size, patch_size=patch_size)
    return processor_cls(**kwargs)


FAMILY = Qwen25VL()
