"""The scratch research preset: a family's architecture over a task vocabulary, trained, saved, reloaded."""

import json

import pytest
import torch

from tests.conftest import make_image
from vlm_smmd.data import Sample
from vlm_smmd.data.collator import VLMCollator
from vlm_smmd.families import presets
from vlm_smmd.modeling import ModelLoadError, build_scratch, load_model_and_processor
from vlm_smmd.numeric import NumericVocab

SIZES = dict(hidden_size=32, layers=1, heads=2, vision_hidden_size=32, vision_depth=1, vision_heads=2)


def test_scratch_vocabulary_is_small_and_keeps_the_chat_machinery():
    texts = ["What time is it?", "10:07", "3:45", "Answer in H:MM format."]
    config, processor = build_scratch(presets()["tiny"], texts, sizes=SIZES)
    tok = processor.tokenizer
    assert config.text_config.vocab_size == len(tok) < 600
    assert config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert NumericVocab.from_tokenizer(tok).texts == [str(d) for d in range(10)]
    collator = VLMCollator(processor)
    batch = collator([Sample(make_image(), "What time is it?", "10:07", "t", "a")])
    labels = batch["labels"][0]
    assert tok.decode(labels[labels != -100]) == "10:07<|im_end|>"
    model, _ = load_model_and_processor("scratch", processor=processor, config=config, verbose=False)
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}
    assert model(**inputs).logits.shape[-1] == len(tok)


def test_scratch_merges_shorten_long_questions_and_keep_digits_single():
    texts = [f"{name} has {n} marbles in a jar. How many marbles does {name} have now?"
             for name in ("Ava", "Liam", "Priya") for n in range(40)]
    question = "Priya has 37 marbles in a jar. How many marbles does Priya have now?"
    lengths = {}
    for merges in (16, 256):
        _, tok = build_scratch(presets()["tiny-qwen2.5"], texts, sizes=SIZES, merges=merges)
        ids = tok(question)["input_ids"]
        assert tok.decode(ids) == question  # round-trips
        assert [t for t in tok.convert_ids_to_tokens(ids) if any(c.isdigit() for c in t)] == ["3", "7"]
        lengths[merges] = len(ids)
    assert lengths[256] < lengths[16] // 2  # "marbles", "How many" become single tokens


def test_scratch_sizes_are_checked():
    with pytest.raises(ModelLoadError, match="heads"):
        build_scratch(presets()["tiny"], ["a"], sizes={**SIZES, "hidden_size": 30, "heads": 4})
    with pytest.raises(ModelLoadError, match="qwen2_5_vl and qwen2"):
        build_scratch(presets()["tiny-mllama"], ["a"], sizes=SIZES)


@pytest.mark.parametrize("family, dataset", [("qwen2_5_vl", "clocks"), ("qwen2", "arithmetic")])
def test_scratch_run_saves_a_checkpoint_that_reloads_and_generates(tmp_path, family, dataset):
    from vlm_smmd.config import load_config
    from vlm_smmd.evaluation import generate_predictions
    from vlm_smmd.training import run

    root = tmp_path / "data"
    synth = {"clocks": {"synthesize": "clocks", "synthesize_size": "64", "synthesize_num": "30"},
             "arithmetic": {"synthesize": "arithmetic", "synthesize_num": "40"}}[dataset]
    configs = load_config(None, {
        "model_name_or_path": "scratch", "scratch_family": family, "scratch_hidden_size": "32", "scratch_layers": "1",
        "scratch_heads": "2", "scratch_vision_hidden_size": "32", "scratch_vision_depth": "1",
        "scratch_vision_heads": "2", "dataset": dataset, "data_root": str(root), **synth,
        "output_dir": str(tmp_path / "out"), "use_cpu": "true", "max_steps": "4", "per_device_train_batch_size": "4",
        "learning_rate": "0.01", "disable_tqdm": "true", "report_to": "none", "logging_steps": "1"})
    run(*configs)
    out = tmp_path / "out"
    saved = json.loads((out / "config.json").read_text())
    assert saved["model_type"] == family
    model, processor = load_model_and_processor(str(out), dtype="fp32", verbose=False)
    tok = getattr(processor, "tokenizer", processor)
    assert len(tok) < 600
    run_config = json.loads((out / "run_config.json").read_text())
    assert run_config["scratch_hidden_size"] == 32 and run_config["numeric_vocab_size"] == 10
    reader = getattr(__import__("vlm_smmd.data", fromlist=["x"]), f"read_{dataset}")
    samples = list(reader(root, "test"))[:3]
    records = generate_predictions(model, processor, samples, max_new_tokens=6, progress=False)
    assert len(records) == 3
    state = json.loads((out / "trainer_state.json").read_text())
    totals = [h["total"] for h in state["log_history"] if "total" in h]
    assert len(totals) == 4 and all(torch.isfinite(torch.tensor(totals)))
