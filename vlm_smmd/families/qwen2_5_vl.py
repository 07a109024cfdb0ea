"""Qwen2.5-VL: ViT with window attention and a patch merger; 3-D mRoPE; images sized by smart_resize (28)."""

from __future__ import annotations

import functools

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

# The released checkpoints' special tokens (the same in Qwen2-VL, Qwen2.5-VL and Qwen3-VL) and text
# settings; "no pad id" as above.
QWEN_VL_TOKEN_IDS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                         vision_end_token_id=151653)
QWEN_IDS = dict(bos_token_id=151643, eos_token_id=151645)
MROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}


def _qwen25_vl(hidden, intermediate, layers, heads, kv_heads, vocab, tied, max_positions=128000):
    """Keyword arguments of a released Qwen2.5-VL config: its text model and the shared 32-block ViT."""
    text = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                rms_norm_eps=1e-6, rope_parameters=dict(MROPE), tie_word_embeddings=tied, **QWEN_IDS)
    vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, in_channels=3,
                  out_hidden_size=hidden, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                  window_size=112, fullatt_block_indexes=[7, 15, 23, 31], hidden_act="silu", tokens_per_second=2)
    return dict(text_config=text, vision_config=vision, tie_word_embeddings=tied, **QWEN_VL_TOKEN_IDS)


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
    # the released image processors' bounds (preprocessor_config.json min_pixels / max_pixels)
    published_min_pixels = 56 * 56
    published_max_pixels = 28 * 28 * 16384

    def published_processor(self, hub_id, min_pixels=None, max_pixels=None):
        return self.tiny_processor(min_pixels or self.published_min_pixels, max_pixels or self.published_max_pixels)

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
    published = {
        "Qwen/Qwen2.5-VL-3B-Instruct": _qwen25_vl(2048, 11008, 36, 16, 2, 151936, tied=True),
        "Qwen/Qwen2.5-VL-7B-Instruct": _qwen25_vl(3584, 18944, 28, 28, 4, 152064, tied=False),
    }

    def config_class(self):
        from transformers import Qwen2_5_VLConfig

        return Qwen2_5_VLConfig

    def position_ids(self, batch, processor):
        """The mRoPE positions [3, B, T] of a batch with still images (`mrope_positions`); None for a
        batch without images or with video, where the model's own rule applies."""
        grids, types = batch.get("image_grid_thw"), batch.get("mm_token_type_ids")
        if grids is None or types is None or "video_grid_thw" in batch:
            return None
        return mrope_positions(types, batch["attention_mask"], grids, processor.image_processor.merge_size)

    def speed_up(self, model):
        """Vision attention in one call over windows of one length (`EqualWindowAttention`)."""
        attention = equal_window_attention_class()
        for module in model.modules():
            if type(module) is attention.__base__:
                module.__class__ = attention

    def model_class(self):
        from transformers import Qwen2_5_VLForConditionalGeneration

        return Qwen2_5_VLForConditionalGeneration

    def tiny_config(self):
        from transformers import Qwen2_5_VLConfig

        return Qwen2_5_VLConfig(text_config=dict(TINY_TEXT_CONFIG), vision_config=dict(TINY_VISION_CONFIG),
                                tie_word_embeddings=False)

    def tiny_processor(self, min_pixels=None, max_pixels=None):
        return build_processor(build_qwen_tokenizer(), min_pixels, max_pixels)


def mrope_positions(mm_token_type_ids: torch.Tensor, attention_mask: torch.Tensor, image_grid_thw: torch.Tensor,
                    merge_size: int) -> torch.Tensor | None:
    """LongTensor [3, B, T]: the (time, height, width) rotary positions that Qwen2.5-VL's `get_rope_index`
    gives a batch of text and still images, computed with tensor ops instead of its loop over rows and runs.

    mm_token_type_ids, attention_mask [B, T] (1 marks an image token; 0 padding); image_grid_thw [N, 3], the
    batch's images in row order. Along each row's attended tokens, p counts the text tokens so far plus
    max(h, w) for each image so far (h, w its merged grid): a text token's three positions are p; the tokens
    of an image starting at p get p + (t, h, w) indices over its merged grid, in row-major order. Padding
    positions are 0. None when the token runs do not match the grids (the model then raises its own error).
    """
    valid = attention_mask.bool()
    batch_size, length = valid.shape
    # pack each row's attended tokens to the left, in order (a stable sort), and unpack at the end
    order = torch.argsort((~valid).to(torch.int8), dim=1, stable=True)
    packed = valid.gather(1, order)
    image = (mm_token_type_ids.gather(1, order) == 1) & packed
    text = packed & ~image
    before = torch.zeros_like(image)
    before[:, 1:] = image[:, :-1]
    starts = image & ~before  # first token of each image
    images = len(image_grid_thw)
    if images == 0 or int(starts.sum()) != images:
        return None
    ordinal = (starts.flatten().cumsum(0) - 1).view(batch_size, length).clamp(min=0)  # image of each token
    if not torch.equal(torch.bincount(ordinal[image], minlength=images), image_grid_thw.prod(-1) // merge_size**2):
        return None
    merged = image_grid_thw // torch.tensor([1, merge_size, merge_size])
    _, grid_h, grid_w = merged[ordinal].unbind(-1)  # each [B, T]: the merged grid of the token's image
    columns = torch.arange(length).expand(batch_size, length)
    offset = columns - torch.where(starts, columns, 0).cummax(1).values  # index within its image
    advance = torch.maximum(grid_h, grid_w)
    text_before = text.cumsum(1) - text.long()
    images_before = (advance * starts).cumsum(1) - torch.where(image, advance, 0)  # images that have ended
    start = text_before + images_before
    inside = torch.stack([offset // (grid_h * grid_w), offset // grid_w % grid_h, offset % grid_w])  # [3, B, T]
    positions = torch.where(packed, start + inside * image, 0)
    return torch.zeros_like(positions).scatter_(2, order.expand(3, -1, -1), positions)


@functools.cache
def equal_window_attention_class():
    """`EqualWindowAttention`: Qwen2.5-VL's vision attention, with one attention call over all windows when
    they have one length (images of one size, as in the research settings) instead of one call per window.
    Each window attends within itself either way, with the same kernel on the same numbers: outputs and
    gradients are identical. Windows of several lengths, and flash attention (which takes the packed
    windows itself), run the stock forward."""
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as hf
    from transformers.utils.generic import is_flash_attention_requested

    class EqualWindowAttention(hf.Qwen2_5_VLVisionAttention):
        def forward(self, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None, **kwargs):
            """hidden_states [N, C] of all images, windows bounded by cu_seqlens [W + 1] -> [N, C]."""
            if is_flash_attention_requested(self.config):
                return super().forward(hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
            lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()  # one host read, as the stock forward makes
            total, windows = hidden_states.shape[0], len(lengths)
            if set(lengths) != {total // windows}:
                return super().forward(hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
            q, k, v = self.qkv(hidden_states).reshape(total, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
            q, k = hf.apply_rotary_pos_emb_vision(q, k, *position_embeddings)
            q, k, v = (t.reshape(windows, total // windows, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))
            attend = hf.ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                              hf.eager_attention_forward)
            out, _ = attend(self, q, k, v, attention_mask=None, scaling=self.scaling, is_causal=False,
                            dropout=self.attention_dropout if self.training else 0.0, **kwargs)  # [W, L, heads, d]
            return self.proj(out.reshape(total, -1))

    return EqualWindowAttention


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
