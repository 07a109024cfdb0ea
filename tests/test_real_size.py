"""The released architectures, built offline: `model_name_or_path: <hub id>` with `random_init: true` gives
exactly the published model (parameter count on the meta device against the model card), with the family's
real tokenizer, whose special ids agree with the config's."""

from __future__ import annotations

import pytest
import torch

from vlm_smmd.families import ModelLoadError, published_family, published_ids
from vlm_smmd.modeling import load_model_and_processor

# The parameter counts the model cards / the hub's safetensors metadata publish ("Model size" on each
# checkpoint's hub page; Qwen2.5-7B's card states "Number of Parameters: 7.61B").
PUBLISHED_PARAMETERS = {
    "Qwen/Qwen2-VL-2B-Instruct": 2.21e9,
    "Qwen/Qwen2-VL-7B-Instruct": 8.29e9,
    "Qwen/Qwen2.5-VL-3B-Instruct": 3.75e9,
    "Qwen/Qwen2.5-VL-7B-Instruct": 8.29e9,
    "Qwen/Qwen3-VL-4B-Instruct": 4.44e9,
    "Qwen/Qwen3-VL-8B-Instruct": 8.77e9,
    "meta-llama/Llama-3.2-11B-Vision-Instruct": 10.67e9,
    "Qwen/Qwen2.5-7B-Instruct": 7.61e9,
    "meta-llama/Llama-3.1-8B-Instruct": 8.03e9,
}


def test_every_published_architecture_has_its_card_figure():
    assert sorted(published_ids()) == sorted(PUBLISHED_PARAMETERS)


def meta_model(hub_id):
    """The model and processor `random_init` builds, with the weights on the meta device (no memory)."""
    with torch.device("meta"):
        return load_model_and_processor(hub_id, random_init=True, verbose=False)


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED_PARAMETERS))
def test_random_init_builds_the_published_size(hub_id):
    model, _ = meta_model(hub_id)
    count = sum(p.numel() for p in model.parameters())
    assert count == pytest.approx(PUBLISHED_PARAMETERS[hub_id], rel=0.005), f"{hub_id}: {count / 1e9:.3f}B"
    assert model.config.model_type == published_family(hub_id).model_type


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED_PARAMETERS))
def test_the_config_special_ids_are_the_real_tokenizers(hub_id):
    """The image placeholder and end-of-turn ids of the config name those tokens of the offline tokenizer, and the
    embedding covers the whole tokenizer."""
    model, processor = meta_model(hub_id)
    tokenizer = getattr(processor, "tokenizer", processor)
    config = model.config
    text = getattr(config, "text_config", config)
    family = published_family(hub_id)
    rows = model.get_input_embeddings().num_embeddings  # Mllama's has 8 rows past vocab_size, <|image|> first
    beyond = [t for t, i in tokenizer.get_vocab().items() if i >= rows]
    # the offline Llama-3 tokenizer is 3.2-Vision's: its <|image|> (128256) is the one token Llama-3.1 lacks
    assert beyond == (["<|image|>"] if family.model_type == "llama" else []), beyond
    end = tokenizer.convert_tokens_to_ids(family.end_of_turn)
    eos = text.eos_token_id if isinstance(text.eos_token_id, list) else [text.eos_token_id]
    assert end in eos, (family.end_of_turn, end, eos)
    if family.vision:
        image_id = getattr(config, "image_token_id", None) or config.image_token_index
        assert tokenizer.convert_tokens_to_ids(processor.image_token) == image_id


def test_the_published_qwen_processor_sizes_an_image_as_the_release():
    """Qwen2.5-VL's released processor bounds (3,136 to 12,845,056 pixels): a 448 x 448 image is 32 x 32
    patches of 14, merged 2 x 2 into 256 placeholders."""
    from PIL import Image

    _, processor = meta_model("Qwen/Qwen2.5-VL-3B-Instruct")
    size = processor.image_processor.size  # transformers 5 keeps the pixel bounds as shortest/longest_edge
    assert (size.shortest_edge, size.longest_edge) == (3136, 12845056)
    batch = processor(text=[f"<|vision_start|>{processor.image_token}<|vision_end|>7"],
                      images=[Image.new("RGB", (448, 448))], return_tensors="pt")
    assert batch["image_grid_thw"].tolist() == [[1, 32, 32]]
    image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    assert int((batch["input_ids"] == image_id).sum()) == 256


def test_random_init_of_an_unknown_hub_id_names_the_known_ones():
    with pytest.raises(ModelLoadError, match="Qwen/Qwen2.5-VL-7B-Instruct") as err:
        load_model_and_processor("someone/Some-7B", random_init=True, verbose=False)
    assert "random_init" in str(err.value) and "\n" not in str(err.value)


def test_random_init_is_seeded():
    """Two builds with one seed are the same weights, another seed other weights (a truncated copy, to stay
    small: the published widths at one layer)."""
    family = published_family("Qwen/Qwen2.5-7B-Instruct")
    small = dict(family.published["Qwen/Qwen2.5-7B-Instruct"], num_hidden_layers=1, vocab_size=512, hidden_size=64,
                 intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)
    family.published = {"test/one-layer": small} | family.published
    try:
        a, _ = load_model_and_processor("test/one-layer", random_init=True, seed=3, verbose=False)
        b, _ = load_model_and_processor("test/one-layer", random_init=True, seed=3, verbose=False)
        c, _ = load_model_and_processor("test/one-layer", random_init=True, seed=4, verbose=False)
    finally:
        family.published = {k: v for k, v in family.published.items() if k != "test/one-layer"}
    wa, wb, wc = (m.model.layers[0].mlp.up_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert a.config.num_hidden_layers == 1 and a.config.rope_parameters["rope_theta"] == 1000000.0
