"""Every family on its tiny preset: tokenizer ids, labels, numeric mask, image placeholders, padding,
training, save/reload, generation end to end, LoRA targets and freezing."""

import json

import pytest
import torch
from qwen_vl_utils import smart_resize

from tests.conftest import make_image
from vlm_smmd.data import Sample
from vlm_smmd.data.collator import VLMCollator
from vlm_smmd.families import family_of, family_of_processor, presets
from vlm_smmd.modeling import ModelLoadError, load_model_and_processor, lora_target_modules

VISION_PRESETS = ["tiny", "tiny-qwen2-vl", "tiny-qwen3-vl", "tiny-mllama"]
TEXT_PRESETS = ["tiny-qwen2.5", "tiny-llama3"]
ALL_PRESETS = VISION_PRESETS + TEXT_PRESETS
ANSWERS = ["10:07", "3.5%", "Democrat", "first line\nsecond line 42"]


@pytest.fixture(scope="module")
def shared():
    """shared(name) -> (model in eval mode, processor) of a preset, built once a module: for the tests that only
    read them (forward passes, collation, tokenizer ids). A test that trains, freezes, patches or saves
    parameters' gradients builds its own, or clears what it set."""
    built = {}

    def get(name):
        if name not in built:
            model, processor = load_model_and_processor(name, verbose=False)
            built[name] = model.eval(), processor
        return built[name]

    return get


@pytest.fixture(scope="module", params=ALL_PRESETS)
def preset(request, shared):
    return (request.param, *shared(request.param))


def sample(preset_name, answer="10:07", i=0, size=(120, 90)):
    image = make_image(*size, seed=i) if preset_name in VISION_PRESETS else None
    return Sample(image, "What time is it?", answer, "test", f"r{i}")


def tokens(tokenizer, ids):
    return [tokenizer.decode([int(i)]) for i in ids]


def test_presets_and_families():
    assert set(ALL_PRESETS) <= set(presets())
    assert presets()["tiny"].model_type == "qwen2_5_vl"
    types = {presets()[p].model_type for p in ALL_PRESETS}
    assert types == {"qwen2_5_vl", "qwen2_vl", "qwen3_vl", "mllama", "qwen2", "llama"}


def test_real_special_token_ids(shared):
    _, qwen3 = shared("tiny-qwen3-vl")
    tok = qwen3.tokenizer
    assert [tok.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>", "<|image_pad|>", "<think>",
                                                    "</think>")] == [151644, 151645, 151655, 151667, 151668]
    assert len(tok) == 151669
    _, mllama = shared("tiny-mllama")
    tok = mllama.tokenizer
    assert len(tok) == 128257
    assert [tok.convert_tokens_to_ids(t) for t in ("<|begin_of_text|>", "<|eot_id|>", "<|image|>")] == [
        128000, 128009, 128256]
    assert mllama.image_token_id == 128256 and tok.pad_token_id == 128004


@pytest.mark.parametrize("answer", ANSWERS)
def test_labels_are_exactly_answer_and_end_token(preset, answer):
    name, model, processor = preset
    family = family_of(model)
    collator = VLMCollator(processor)
    assert collator.family is family
    batch = collator([sample(name, answer), sample(name, "7", 1, size=(60, 200))])
    tok = collator.tokenizer
    for row, want in enumerate([answer, "7"]):
        labels = batch["labels"][row]
        ids = labels[labels != -100]
        assert tok.decode(ids) == want + family.end_of_turn
        assert int(ids[-1]) == tok.convert_tokens_to_ids(family.end_of_turn)
        # the labels are the row's last real tokens (up to Qwen's trailing newline), so they are right-aligned
        last = int(torch.nonzero(labels != -100).max())
        assert last >= labels.shape[0] - 2


def test_numeric_mask_marks_exactly_the_numeric_tokens(preset):
    name, model, processor = preset
    collator = VLMCollator(processor)
    batch = collator([sample(name, "10:07"), sample(name, "3.5%", 1)])
    tok = collator.tokenizer
    marked = [tokens(tok, batch["labels"][r][batch["numeric_mask"][r]]) for r in range(2)]
    if name in ("tiny-mllama", "tiny-llama3"):
        assert marked == [["10", "07"], ["3", "5"]]
    else:
        assert marked == [["1", "0", "0", "7"], ["3", "5"]]


@pytest.mark.parametrize("name", VISION_PRESETS)
def test_image_placeholders_match_the_image_size(name, shared):
    _, processor = shared(name)
    collator = VLMCollator(processor)
    family = collator.family
    sizes = [(120, 90), (300, 60), (64, 64)]
    batch = collator([sample(name, "1", i, size=s) for i, s in enumerate(sizes)])
    found = (batch["input_ids"] == collator.image_token_id).sum(1).tolist()
    if family.resize_factor is None:  # Mllama: one <|image|> token, cross-attention from it to the end
        assert found == [1, 1, 1]
        mask = batch["cross_attention_mask"]
        for row in range(3):
            first = int((batch["input_ids"][row] == collator.image_token_id).nonzero()[0])
            attends = mask[row].flatten(1).any(1)
            assert not attends[:first].any() and attends[first:].all()
    else:  # Qwen: one token per merged patch of the smart-resized image
        patch = processor.image_processor.patch_size
        want = []
        for w, h in sizes:
            rh, rw = smart_resize(h, w, factor=family.resize_factor, min_pixels=collator.min_pixels,
                                  max_pixels=collator.max_pixels)
            want.append((rh // patch) * (rw // patch) // 4)
        assert found == want


def test_mixed_sizes_give_per_row_logits_equal_to_each_sample_alone(preset):
    name, model, processor = preset
    collator = VLMCollator(processor)
    samples = [sample(name, "10:07", 0, (140, 84)), sample(name, "3", 1, (56, 112)),
               sample(name, "12.5", 2, (200, 200))]
    if name in TEXT_PRESETS:
        samples[1].question = "A much longer question about the clock on the wall, please?"

    def answer_logits(batch):
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}
        with torch.no_grad():
            logits = model(**inputs).logits
        keep = batch["labels"][:, 1:] != -100
        return [logits[r, :-1][keep[r]] for r in range(len(logits))]

    together = answer_logits(collator(samples))
    for r, s in enumerate(samples):
        alone = answer_logits(collator([s]))[0]
        torch.testing.assert_close(together[r], alone, rtol=1e-4, atol=1e-4)


def test_three_training_steps_lower_the_loss(preset, tmp_path):
    from vlm_smmd.config import LossArguments, VLMTrainingArguments
    from vlm_smmd.training import NumericTrainer, build_objective

    name, _, _ = preset
    model, processor = load_model_and_processor(name, verbose=False, seed=1)
    collator = VLMCollator(processor)
    data = [sample(name, a, i) for i, a in enumerate(["10:07", "3:45", "12.5", "7"])]
    args = VLMTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=3,
                                per_device_train_batch_size=4, learning_rate=1e-2, logging_steps=1,
                                save_strategy="no", disable_tqdm=True, warmup_steps=0)
    trainer = NumericTrainer(model=model, args=args, train_dataset=data, data_collator=collator,
                             processing_class=processor,
                             objective=build_objective(LossArguments(aux="smmd"), collator.numeric_vocab))
    batch = collator(data)

    def loss():
        model.eval()
        with torch.no_grad():
            return float(trainer.compute_loss(model, dict(batch)))

    before = loss()
    trainer.train()
    assert loss() < before


def test_save_and_reload_give_identical_logits(preset, tmp_path):
    name, model, processor = preset
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == family_of(model).model_type
    loaded, loaded_processor = load_model_and_processor(str(tmp_path), dtype="fp32", verbose=False)
    loaded.eval()
    assert type(loaded_processor) is type(processor) or name in TEXT_PRESETS
    assert family_of_processor(loaded_processor) is family_of(model)
    s = [sample(name, "10:07")]
    batch, batch2 = VLMCollator(processor)(s), VLMCollator(loaded_processor)(s)
    assert batch.keys() == batch2.keys()
    for key in batch:
        assert torch.equal(batch[key], batch2[key]), key
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, loaded(**inputs).logits)


def test_generation_stops_at_the_family_end_token_and_scores(preset):
    from vlm_smmd.evaluation import generate_predictions

    name, model, processor = preset
    records = generate_predictions(model, processor, [sample(name, "10:07", i) for i in range(3)], batch_size=2,
                                   max_new_tokens=4, progress=False)
    assert [r["id"] for r in records] == ["r0", "r1", "r2"]
    assert all(isinstance(r["raw_output"], str) and "exact_match" in r["scores"] for r in records)


@pytest.mark.parametrize("name", VISION_PRESETS)
def test_lora_targets_and_freezing_by_part(name, shared):
    model, _ = shared(name)  # read only; the frozen one is built below
    family = family_of(model)
    parts = {family.parameter_part(n) for n, _ in model.named_parameters()}
    assert parts == {"vision", "projector", "language"}
    targets = lora_target_modules(model)
    assert targets and all(family.parameter_part(t + ".weight") == "language" for t in targets)
    with_vision = set(lora_target_modules(model, vision=True))
    vision_only = with_vision - set(targets)
    assert vision_only and all(family.parameter_part(t + ".weight") == "vision" for t in vision_only)
    frozen, _ = load_model_and_processor(name, verbose=False, freeze_vision=True, freeze_merger=True)
    for n, p in frozen.named_parameters():
        assert p.requires_grad == (family.parameter_part(n) == "language"), n


def test_text_family_refuses_images(shared):
    _, tokenizer = shared("tiny-qwen2.5")
    collator = VLMCollator(tokenizer)
    with pytest.raises(Exception, match="takes text only.*record 'r0'"):
        collator([Sample(make_image(), "q", "1", "test", "r0")])


def test_unsupported_checkpoint_lists_the_families(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "paligemma"}))
    with pytest.raises(ModelLoadError, match="paligemma.*supported: .*Qwen3-VL.*Llama-3.2-Vision"):
        load_model_and_processor(str(tmp_path), verbose=False)


def test_path_like_names_fail_at_once(tmp_path):
    with pytest.raises(ModelLoadError, match="no such model directory"):
        load_model_and_processor("outputs/demo/modle", verbose=False)


@pytest.mark.parametrize("name", VISION_PRESETS)
def test_text_only_and_image_rows_mix_in_one_batch(name, shared):
    model, processor = shared(name)
    collator = VLMCollator(processor)
    samples = [Sample(None, "What is 12 + 30?", "42", "text", "t0"), sample(name, "10:07", 1),
               Sample(None, "What is 1.5 * 3?", "4.5", "text", "t2")]
    batch = collator(samples)
    tok = collator.tokenizer
    for row, s in enumerate(samples):
        labels = batch["labels"][row]
        assert tok.decode(labels[labels != -100]) == s.answer + collator.family.end_of_turn
    found = (batch["input_ids"] == collator.image_token_id).sum(1).tolist()
    assert found[0] == 0 and found[2] == 0 and found[1] > 0

    def answer_logits(b):
        inputs = {k: v for k, v in b.items() if k not in ("labels", "numeric_mask")}
        with torch.no_grad():
            logits = model(**inputs).logits
        keep = b["labels"][:, 1:] != -100
        return [logits[r, :-1][keep[r]] for r in range(len(logits))]

    together = answer_logits(batch)
    for row, s in enumerate(samples):
        torch.testing.assert_close(together[row], answer_logits(collator([s]))[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", VISION_PRESETS)
def test_masked_image_changes_no_text_logit_and_reaches_the_vision_tower(name, shared):
    model, processor = shared(name)
    model.zero_grad(set_to_none=True)  # the shared model: no gradient is left from elsewhere
    collator = VLMCollator(processor)
    batch = collator([Sample(None, "What is 12 + 30?", "42", "t", "a"), Sample(None, "And 1 + 1?", "2", "t", "b")])
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}
    with torch.no_grad():
        plain = model(**inputs).logits
    family = family_of(model)
    family.add_masked_image(inputs, processor)
    assert "pixel_values" in inputs
    out = model(**inputs).logits
    torch.testing.assert_close(out[:, -plain.shape[1]:], plain, rtol=1e-5, atol=1e-5)
    out[:, -3:].sum().backward()
    vision = [p.grad for n, p in model.named_parameters() if family.parameter_part(n) == "vision"]
    model.zero_grad(set_to_none=True)  # leave the shared model as it was
    assert vision and all(g is not None for g in vision)


def test_measure_equals_the_row_length_of_a_batch(preset):
    name, _, processor = preset
    collator = VLMCollator(processor)
    for i, size in enumerate([(120, 90), (300, 40), (56, 56)]):
        s = sample(name, "10:07" if i else "12.5", i, size)
        assert collator.measure(s) == int(collator([s])["attention_mask"].sum())


def test_mrope_positions_by_hand():
    """One left-padded row: pad, 2 text tokens, one image of 2 x 2 merged patches, 1 text token."""
    from vlm_smmd.families.qwen2_5_vl import mrope_positions

    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1]])
    got = mrope_positions(types, mask, torch.tensor([[1, 4, 4]]), merge_size=2)
    # text 0, 1; the image starts at 2: time 2, height 2 + row, width 2 + column; then text at 2 + max(2, 2)
    assert got.tolist() == [[[0, 0, 1, 2, 2, 2, 2, 4]], [[0, 0, 1, 2, 2, 3, 3, 4]], [[0, 0, 1, 2, 3, 2, 3, 4]]]
    # runs that do not match the grids: the model's own error, not a silent guess
    assert mrope_positions(types, mask, torch.tensor([[1, 4, 4], [1, 2, 2]]), merge_size=2) is None
    assert mrope_positions(types, mask, torch.tensor([[1, 2, 4]]), merge_size=2) is None


def test_collator_mrope_positions_equal_the_models_own(shared):
    """Qwen2.5-VL: the collator's position_ids equal `get_rope_index` (the model's per-row loop) on rows of
    different image sizes, a text-only row, a row with two images and left padding; and the model gives the
    same logits with them as without."""
    model, processor = shared("tiny")
    collator = VLMCollator(processor)
    samples = [sample("tiny", "10:07", 0, (140, 84)), Sample(None, "Is it noon?", "12", "test", "t"),
               sample("tiny", "3", 1, (56, 112)), sample("tiny", "12.5", 2, (200, 200))]
    batch = collator(samples)
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask", "position_ids")}
    want, _ = model.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"], inputs["image_grid_thw"],
                                         attention_mask=inputs["attention_mask"])
    assert batch["position_ids"].dtype == want.dtype and torch.equal(batch["position_ids"], want)
    assert len({tuple(g) for g in batch["image_grid_thw"].tolist()}) == 3  # three image sizes
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, model(**inputs, position_ids=batch["position_ids"]).logits)

    # two images in one row (the processor directly): still the model's positions
    chat = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>and<|vision_start|><|image_pad|>"
            "<|vision_end|>which?<|im_end|>\n")
    two = processor(text=[chat, "<|im_start|>user\nhi<|im_end|>\n"], padding=True, padding_side="left",
                    images=[make_image(56, 84), make_image(112, 56)], return_tensors="pt")
    want, _ = model.model.get_rope_index(two["input_ids"], two["mm_token_type_ids"], two["image_grid_thw"],
                                         attention_mask=two["attention_mask"])
    assert torch.equal(collator.family.position_ids(dict(two), processor), want)


def test_batches_without_images_leave_positions_to_the_model(shared):
    _, processor = shared("tiny")
    batch = VLMCollator(processor)([Sample(None, "Is it noon?", "12", "test", "t")])
    assert "position_ids" not in batch
    _, processor = shared("tiny-qwen2-vl")  # its own rule, not ours
    assert "position_ids" not in VLMCollator(processor)([sample("tiny-qwen2-vl")])


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("sizes, stock_calls", [([(56, 56)] * 3, 0), ([(224, 224)] * 2, 0),
                                                 ([(56, 56), (112, 56), (224, 168)], 2)],
                         ids=["one-window-each", "equal-windows", "unequal-windows"])
def test_vision_attention_speed_up_computes_exactly_the_same(attn, sizes, stock_calls, monkeypatch):
    """Qwen2.5-VL's `speed_up` (one attention call over windows of one length: a 224 px image has four
    windows of 64 patches) gives bit-identical logits and gradients; windows of several lengths (a 224 x 168
    image has windows of 64 and 32 patches) go through the stock forward."""
    from vlm_smmd.families.qwen2_5_vl import equal_window_attention_class

    model, processor = load_model_and_processor("tiny", attn_implementation=attn, verbose=False)
    batch = VLMCollator(processor)([sample("tiny", "7", i, size) for i, size in enumerate(sizes)])
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}

    def logits_and_grads():
        model.zero_grad()
        logits = model(**inputs).logits
        (logits * torch.randn(logits.shape, generator=torch.Generator().manual_seed(0))).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    stock_logits, stock_grads = logits_and_grads()
    keys = list(model.state_dict())
    family_of(model).speed_up(model)
    assert sum(type(m).__name__ == "EqualWindowAttention" for m in model.modules()) == 2  # one per vision block
    stock = equal_window_attention_class().__base__
    calls = []
    monkeypatch.setattr(stock, "forward", lambda *a, _f=stock.forward, **k: calls.append(1) or _f(*a, **k))
    logits, grads = logits_and_grads()
    assert len(calls) == stock_calls
    assert torch.equal(logits, stock_logits)
    assert all(torch.equal(grads[n], stock_grads[n]) for n in grads)
    assert any(grads[n].abs().sum() > 0 for n in grads if ".visual.blocks.0.attn." in f".{n}")
    assert list(model.state_dict()) == keys
