import json

import pytest
import torch

from tests.conftest import make_image
from vlm_smmd.families import family_of
from vlm_smmd.modeling import (
    ModelLoadError,
    load_model_and_processor,
    lora_target_modules,
)


def test_tokenizer_special_ids_and_digits(qwen_tokenizer):
    tok = qwen_tokenizer
    expected = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|image_pad|>": 151655,
                "<|video_pad|>": 151656}
    for text, token_id in expected.items():
        assert tok.convert_tokens_to_ids(text) == token_id
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
    assert len(tok) == 151665
    assert tok("1234567890", add_special_tokens=False).input_ids == [16, 17, 18, 19, 20, 21, 22, 23, 24, 15]
    # ordinary text goes through the real BPE merges, not byte by byte
    assert tok("Hello world", add_special_tokens=False).input_ids == [9707, 1879]
    assert tok.decode(tok("What time is it? 10:07").input_ids) == "What time is it? 10:07"


def _batch(processor, answer="10:07"):
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What time is it?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]
    text = processor.apply_chat_template(messages, tokenize=False)
    return processor(text=[text], images=[make_image()], return_tensors="pt")


def test_tiny_forward_backward_reaches_vision(tiny_model_and_processor):
    model, processor = tiny_model_and_processor
    batch = _batch(processor)
    assert "mm_token_type_ids" in batch
    assert (batch["input_ids"] == 151655).sum() == batch["image_grid_thw"].prod(-1).sum() // 4
    out = model(**batch, labels=batch["input_ids"])
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["model.visual.patch_embed.proj.weight"].abs().sum() > 0
    assert grads["model.visual.merger.mlp.0.weight"].abs().sum() > 0
    assert grads["lm_head.weight"].abs().sum() > 0


def test_tiny_size_and_shape(tiny_model_and_processor):
    model, _ = tiny_model_and_processor
    non_embedding = sum(p.numel() for n, p in model.named_parameters()
                        if "embed_tokens" not in n and "lm_head" not in n)
    assert 1e5 <= non_embedding <= 5e6
    assert model.config.vision_config.depth == 2 and model.config.text_config.num_hidden_layers == 2
    # logit width exceeds the tokenizer, as in the real Qwen2.5-VL checkpoints
    assert model.config.text_config.vocab_size > 151665


def test_save_then_load_identical_logits(tiny_model_and_processor, tmp_path):
    model, processor = tiny_model_and_processor
    model.eval()
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    loaded, loaded_processor = load_model_and_processor(str(tmp_path), dtype="fp32", verbose=False)
    loaded.eval()
    assert type(loaded_processor).__name__ == "Qwen2_5_VLProcessor"
    batch = _batch(processor)
    batch2 = _batch(loaded_processor)
    for key in batch:
        assert torch.equal(batch[key], batch2[key]), key
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, loaded(**batch2).logits)


def test_tiny_is_seeded(tmp_path):
    a, _ = load_model_and_processor("tiny", seed=1, verbose=False)
    b, _ = load_model_and_processor("tiny", seed=1, verbose=False)
    c, _ = load_model_and_processor("tiny", seed=2, verbose=False)
    wa, wb, wc = (m.model.language_model.layers[0].mlp.up_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_default_lora_targets_language_only(tiny_model_and_processor):
    model, _ = tiny_model_and_processor
    targets = lora_target_modules(model)
    assert targets and not any("visual" in t for t in targets)
    assert any(t.endswith("mlp.gate_proj") for t in targets) and any(t.endswith("q_proj") for t in targets)
    with_vision = lora_target_modules(model, vision=True)
    assert any(t.startswith("model.visual.blocks") for t in with_vision)
    assert not any("merger" in t for t in with_vision)


def test_lora_model_trains_only_adapters():
    model, _ = load_model_and_processor("tiny", lora=True, lora_r=4, verbose=False)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert not any("visual" in n for n in trainable)


@pytest.mark.parametrize("freeze", [
    {"freeze_vision": True}, {"freeze_merger": True}, {"freeze_language": True},
    {"freeze_vision": True, "freeze_merger": True},
])
def test_freezing_options(freeze):
    model, _ = load_model_and_processor("tiny", verbose=False, **freeze)
    part_of = family_of(model).parameter_part
    frozen_parts = {part for part, key in (("vision", "vision"), ("projector", "merger"), ("language", "language"))
                    if freeze.get(f"freeze_{key}")}
    for name, param in model.named_parameters():
        assert param.requires_grad == (part_of(name) not in frozen_parts), name
    # every part exists, so each option really freezes something
    parts = {part_of(n) for n, _ in model.named_parameters()}
    assert parts == {"vision", "projector", "language"}


def test_bad_paths_give_clear_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="no such model directory"):
        load_model_and_processor(str(tmp_path / "missing"), verbose=False)
    with pytest.raises(ModelLoadError, match="holds no model"):
        load_model_and_processor(str(tmp_path), verbose=False)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelLoadError, match="'gpt2' is not a supported family; supported: .*Qwen2.5-VL"):
        load_model_and_processor(str(tmp_path), verbose=False)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model_and_processor(str(tmp_path), verbose=False)


def test_adapter_folder_gets_a_clear_error(tmp_path):
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="LoRA adapter"):
        load_model_and_processor(str(tmp_path), verbose=False)
