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
    bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
    pad_token_id=None,  # the released 128004 makes ZeRO-3 from-scratch init index a partitioned embedding
)

# Llama-3 rope with the long-context frequency scaling of the 3.1 / 3.2 releases
LLAMA31_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
LLAMA3_IDS = dict(bos_token_id=128000, eos_token_id=[128001, 128008, 128009], pad_token_id=None)
PUBLISHED_TILE = 560  # the released image processor's tile side


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
    published = {
        "meta-llama/Llama-3.2-11B-Vision-Instruct": dict(
            vision_config=dict(hidden_size=1280, num_hidden_layers=32, num_global_layers=8, attention_heads=16,
                               intermediate_size=5120, vision_output_dim=7680, image_size=PUBLISHED_TILE,
                               patch_size=14, max_num_tiles=4, intermediate_layers_indices=[3, 7, 15, 23, 30]),
            text_config=dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=40,
                             cross_attention_layers=[3, 8, 13, 18, 23, 28, 33, 38], num_attention_heads=32,
                             num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                             rope_parameters=dict(LLAMA31_ROPE), tie_word_embeddings=False, **LLAMA3_IDS),
            image_token_index=128256),
    }

    def config_class(self):
        from transformers import MllamaConfig

        return MllamaConfig

    def published_processor(self, hub_id, min_pixels=None, max_pixels=None):
        from transformers import MllamaImageProcessor, MllamaProcessor

        image_processor = MllamaImageProcessor(size={"height": PUBLISHED_TILE, "width": PUBLISHED_TILE},
                                               max_image_tiles=4)
        return MllamaProcessor(image_processor=image_processor, tokenizer=build_llama3_tokenizer(),
                               chat_template=LLAMA3_CHAT_TEMPLATE)

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

    def process(self, processor, texts, images_per_row, **kwargs):
        """The stock processor needs an image in every row; for a batch that mixes text-only and image rows,
        the image rows' image inputs are placed into zero tensors [B, ...] and the cross-attention mask of a
        text-only row stays all zero (it attends to no image)."""
        rows = [r for r, images in enumerate(images_per_row) if images]
        if len(rows) in (0, len(texts)):
            return dict(processor(text=texts, images=images_per_row if rows else None, **kwargs))
        from transformers.models.mllama.processing_mllama import (
            convert_sparse_cross_attention_mask_to_dense,
            get_cross_attention_token_mask,
        )

        batch = dict(processor.tokenizer(texts, **kwargs))  # the processor refuses <|image|> without images
        images = processor.image_processor(images=[images_per_row[r] for r in rows], return_tensors="pt")
        num_tiles = [[] for _ in texts]
        for k, r in enumerate(rows):
            num_tiles[r] = images["num_tiles"][k]
        for key in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask"):
            part = images[key]
            full = part.new_zeros((len(texts), *part.shape[1:]))
            full[rows] = part
            batch[key] = full
        ids = batch["input_ids"]
        sparse = [get_cross_attention_token_mask(row.tolist(), processor.image_token_id) for row in ids]
        dense = convert_sparse_cross_attention_mask_to_dense(sparse, num_tiles, processor.image_processor.max_image_tiles,
                                                             ids.shape[1])
        batch["cross_attention_mask"] = torch.from_numpy(dense)
        return batch

    def add_masked_image(self, inputs, processor):
        """A blank one-tile image per row with an all-zero cross-attention mask: the vision tower, the
        projector and the cross-attention layers run, and Mllama zeroes the cross-attention output of rows
        that attend to no image."""
        from PIL import Image

        side = processor.image_processor.size["height"]
        rows = len(inputs["input_ids"])
        image = processor.image_processor(images=[[Image.new("RGB", (side, side))]] * rows, return_tensors="pt")
        device = inputs["input_ids"].device
        for key in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask"):
            inputs[key] = image[key].to(device)
        tiles = processor.image_processor.max_image_tiles
        inputs["cross_attention_mask"] = torch.zeros((*inputs["input_ids"].shape, 1, tiles), dtype=torch.long,
                                                     device=device)

    def describe_numbers(self):
        return ('integers are split into groups of up to three digits, each one token ("1234" is 123, 4; '
                '"10:07" is 10, :, 07): V_num holds 1,110 tokens (0..999 and zero-padded ones such as "07", "007")')


FAMILY = Mllama()

