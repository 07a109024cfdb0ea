"""Llama-3.2-Vision (Mllama): a tiled ViT whose features enter the language model through cross-attention
layers; one <|image|> token per image; the Llama-3 tokenizer, where every integer 0..999 is one token."""

from __future__ import annotations

import torch

from . import Family
from .tokenizers import LLAMA3_CHAT_TEMPLATE, build_llama3_tokenizer

TINY_TILE = 56  # pixels per tile side; the processor tiles and resizes images itself
TINY_VISION_CONFIG = dict(
    hidden_size=32, num_hidden_layers=2, num_global_layers=1, attention_heads=4, intermediate_size=64,
    intermediate_layers_indices=[0], vision_output_dim=64, image_size=TINY_TILE, patch_size=14, max_num_tiles=4,
)
TINY_TEXT_CONFIG = dict(
    vocab_size=128256, hidden_size=64, intermediate_size=128, num_hidden_layers=3, cross_attention_layers=[1],
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    bos_token_id=128000, eos_token_id=[128001, 128008, 128009], pad_token_id=128004,
)


class Mllama(Family):
    model_type = "mllama"
    title = "Llama-3.2-Vision"
    preset = "tiny-mllama"
    processor_class = "MllamaProcessor"
    assistant_header = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    end_of_turn = "<|eot_id|>"
    image_token = "<|image|>"
    resize_factor = None
    lora_vision_suffixes = ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2")
    vision_markers = (".vision_model.",)
    projector_markers = (".multi_modal_projector.",)

    def model_class(self):
        from transformers import MllamaForConditionalGeneration

        return MllamaForConditionalGeneration

    def tiny_config(self):
        from transformers import MllamaConfig

        return MllamaConfig(vision_config=dict(TINY_VISION_CONFIG), text_config=dict(TINY_TEXT_CONFIG),
                            image_token_index=128256)

    def tiny_processor(self, min_pixels=None, max_pixels=None):
        from transformers import MllamaImageProcessor, MllamaProcessor

        image_processor = MllamaImageProcessor(size={"height": TINY_TILE, "width": TINY_TILE}, max_image_tiles=4)
        return MllamaProcessor(image_processor=image_processor, tokenizer=build_llama3_tokenizer(),
                               chat_template=LLAMA3_CHAT_TEMPLATE)

    def images_argument(self, images_per_row):
        # nested per row; a processor call with images needs every row to have one
        return images_per_row if any(images_per_row) else None

    def dummy_vision_inputs(self, processor, device):
        from PIL import Image

        side = processor.image_processor.size["height"]
        out = processor.image_processor(images=[[Image.new("RGB", (side, side))]], return_tensors="pt")
        return {k: out[k].to(device) for k in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask")}

    def vision_forward(self, model, inputs):
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        vision = inner.model.vision_model
        out = vision(pixel_values=inputs["pixel_values"].to(next(vision.parameters()).dtype),
                     aspect_ratio_ids=inputs["aspect_ratio_ids"], aspect_ratio_mask=inputs["aspect_ratio_mask"])
        return inner.model.multi_modal_projector(out.last_hidden_state)

    def describe_numbers(self):
        return ('integers are split into groups of up to three digits, each one token ("1234" is 123, 4; '
                '"10:07" is 10, :, 07): V_num holds 1,110 tokens (0..999 and zero-padded ones such as "07", "007")')


FAMILY = Mllama()


def cross_attention_rows(batch: dict) -> torch.Tensor:
    """BoolTensor [B]: rows whose text attends to an image."""
    mask = batch.get("cross_attention_mask")
    return torch.zeros(len(batch["input_ids"]), dtype=torch.bool) if mask is None else mask.flatten(1).any(1)
