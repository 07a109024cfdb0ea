"""`vlm-smmd plan`: the memory planner answers for every config offline; its model states agree with
DeepSpeed's own estimators; its activation model is autograd's saved tensors, counted tensor by tensor."""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path

import pytest
import torch

from vlm_smmd.cli import main
from vlm_smmd.training.memory_plan import (
    GIB,
    Architecture,
    PlanError,
    Setup,
    Stack,
    deepspeed_estimate,
    layer_bytes,
    model_states,
    plan,
    plan_config,
)

CONFIGS = sorted(glob.glob("configs/*.yaml"))
READY = [c for c in CONFIGS if c.split("/")[-1].startswith(("qwen", "llama"))]


@pytest.mark.parametrize("config", CONFIGS)
def test_plan_answers_for_every_config(config):
    # a fine-tune starts from the trained research base (configs/scratch_cpu_base.yaml's output), which a fresh
    # clone lacks: plan its from-scratch twin there, the same architecture and batch
    base = "outputs/scratch_cpu_base"
    twin = {"model_name_or_path": "scratch"} if "_ft_" in config and not Path(base, "config.json").is_file() else None
    p = plan_config(config, twin)
    parts = [p.weights, p.gradients, p.optimizer, p.master, p.activations, p.logits_answer_only]
    assert all(math.isfinite(x) and x >= 0 for x in parts)
    assert p.total == pytest.approx(sum(parts) + p.runtime_reserve)
    assert p.weights > 0 and p.activations > 0 and p.tokens_per_step > 0
    assert p.activations_checkpointed < p.activations_full
    assert p.fits or p.suggestions, "a plan that does not fit names a change that does"


def test_ready_configs_are_all_planned():
    assert len(READY) >= 9


class _Family:  # what plan() reads of a family for a text model
    published_max_pixels = None


def _arch(params=1_000_000_000, largest=100_000_000):
    return Architecture("qwen2", Stack(4, 1024, 4096, 16, 256), 32000, params={"language": params},
                        lora_widths={"language": 10_000}, lora_text_targets=7, largest_module=largest)


@pytest.mark.parametrize("stage,offload_opt,offload_param", [(2, False, False), (2, True, False),
                                                             (3, False, False), (3, True, False), (3, True, True)])
@pytest.mark.parametrize("gpus", [1, 8])
def test_model_states_agree_with_deepspeeds_estimators(stage, offload_opt, offload_param, gpus):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    arch = _arch()
    setup = Setup(zero_stage=stage, offload_optimizer=offload_opt, offload_param=offload_param, gpus=gpus)
    ours = sum(model_states(arch, setup, arch.total_params).values())
    if stage == 2:
        _, theirs = estimate_zero2_model_states_mem_needs(arch.total_params, num_gpus_per_node=gpus,
                                                          cpu_offload=offload_opt)
    else:
        _, theirs, _ = estimate_zero3_model_states_mem_needs(arch.total_params, arch.largest_module,
                                                             num_gpus_per_node=gpus, cpu_offload=offload_opt,
                                                             cpu_offload_params=offload_param)
    assert ours == pytest.approx(theirs, abs=1)


@pytest.mark.parametrize("config", ["configs/qwen2_5_vl_7b_chartqa_smmd.yaml",
                                    "configs/qwen2_5_vl_7b_chartqa_smmd_lora.yaml"])
def test_a_ready_configs_model_states_are_deepspeeds_plus_its_frozen_weights(config):
    """Frozen parts (the vision tower; the whole base under LoRA) keep only their 16-bit copy, which DeepSpeed's
    estimators, counting every parameter as trained, leave to the caller."""
    p = plan_config(config, gpus=4)
    ds = deepspeed_estimate(p)
    assert p.model_states / GIB == pytest.approx(ds["model_states_gib"] + ds["frozen_weights_gib"], abs=0.002)
    assert ds["frozen_weights_gib"] > 0


def test_without_deepspeed_a_bf16_model_keeps_bf16_states():
    arch = _arch()
    states = model_states(arch, Setup(zero_stage=0), arch.total_params)
    assert states == {"weights": 2e9, "gradients": 2e9, "optimizer": 4e9, "master": 0.0}


def test_lora_states_without_deepspeed_are_the_adapters_fp32_bytes():
    """A bf16 model with peft LoRA after one AdamW step: the bytes of the base weights, the adapters, their
    gradients and the optimizer's moments, read off the tensors, are the plan's weights, gradients and
    optimizer states (peft keeps the adapters, hence their gradients and moments, in fp32)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from vlm_smmd.modeling import apply_lora

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    base = Qwen2ForCausalLM(config).to(torch.bfloat16)
    base_params = sum(p.numel() for p in base.parameters())
    model = apply_lora(base, r=8, dropout=0.05)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    model(input_ids=torch.randint(0, 128, (1, 12))).logits.float().sum().backward()
    optimizer.step()

    def nbytes(tensors):
        return sum(t.numel() * t.element_size() for t in tensors)

    measured = {"weights": nbytes(model.parameters()), "gradients": nbytes(p.grad for p in trainable),
                "optimizer": nbytes(t for state in optimizer.state.values() for t in state.values() if t.dim()),
                "master": 0.0}
    arch = Architecture("qwen2", Stack(2, 64, 160, 4, 32), 128, params={"language": base_params})
    n = sum(p.numel() for p in trainable)
    assert model_states(arch, Setup(zero_stage=0, lora=True), n) == measured


def _saved_bytes(model, ids) -> int:
    """Bytes of the tensors autograd saves for backward in one forward, each storage once, parameters left out."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids)
    return sum(seen.values())


@pytest.mark.parametrize("lora", [False, True])
def test_layer_bytes_are_what_autograd_saves(lora):
    """Per token per decoder layer: the 3-layer model's saved bytes less the 1-layer model's, halved (the first
    layer, embedding and head cancel), equal the formula exactly, full training and LoRA with dropout (CPU:
    the mask in fp32)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from vlm_smmd.modeling import apply_lora

    stack, tokens, r = Stack(1, 64, 160, 4, 32), 24, 8

    def build(layers):
        torch.manual_seed(0)
        config = Qwen2Config(vocab_size=128, hidden_size=stack.hidden, intermediate_size=stack.intermediate,
                             num_hidden_layers=layers, num_attention_heads=stack.heads, num_key_value_heads=2,
                             tie_word_embeddings=False, attn_implementation="sdpa")
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
        return apply_lora(model, r=r, dropout=0.05) if lora else model

    ids = torch.randint(0, 128, (1, tokens))
    measured = (_saved_bytes(build(3), ids) - _saved_bytes(build(1), ids)) / 2 / tokens
    assert measured == layer_bytes(stack, b=2, trains=not lora, lora_targets=7 * lora, lora_r=r, mask_bytes=4)


def test_a_config_that_does_not_fit_names_the_change_that_fits():
    one = plan_config("configs/qwen2_5_vl_7b_chartqa_smmd.yaml", gpus=1)
    assert not one.fits and one.suggestions[0] == "--gpus 2"
    assert plan_config("configs/qwen2_5_vl_7b_chartqa_smmd.yaml", gpus=2).fits
    lora = plan_config("configs/qwen2_5_vl_7b_chartqa_smmd_lora.yaml")  # "fits one 80 GB GPU", its comment says
    assert lora.fits and lora.trainable_params < 0.05 * lora.arch.total_params
    assert lora.logits_avoided > 10 * lora.logits_answer_only


def test_checkpointing_keeps_one_hidden_state_a_layer():
    arch, family = _arch(), _Family()
    full = plan(arch, Setup(batch=1, max_length=1000), family)
    ckpt = plan(arch, Setup(batch=1, max_length=1000, gradient_checkpointing=True), family)
    one_layer = layer_bytes(arch.text, b=2, trains=True) * 1000
    assert full.activations - ckpt.activations == pytest.approx(3 * one_layer - 4 * 2 * 1024 * 1000)


def test_plan_command_prints_the_table_and_json(capsys):
    assert main(["plan", "configs/qwen2_5_vl_7b_chartqa_smmd_lora.yaml", "--gpus", "2"]) == 0
    text = capsys.readouterr().out
    assert "verdict: fits" in text and "estimate_zero2_model_states_mem_needs" in text and "2 GPU(s)" in text
    assert main(["plan", "configs/qwen2_5_vl_7b_chartqa_smmd.yaml", "--json", "--gpu-memory", "40"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fits"] is False and report["gpu_memory_gib"] == 40 and report["suggestions"]
    assert report["total_gib"] > 40 and report["deepspeed_estimate"]["call"].startswith("estimate_zero3")


def test_bad_input_is_one_line(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: someone/Unknown-7B\ndata_root: data\n")
    assert main(["plan", str(config)]) == 1
    err = capsys.readouterr().err
    assert "someone/Unknown-7B" in err and "Qwen/Qwen2.5-VL-7B-Instruct" in err and err.count("\n") == 1
    config.write_text("model_name_or_path: tiny\ndata_root: data\ndeepspeed: nowhere/zero9.json\n")
    with pytest.raises(PlanError, match="nowhere/zero9.json"):
        plan_config(config)
    assert main(["plan", str(config), "--gpus", "0"]) == 2
    config.write_text("model_name_or_path: tiny\ndata_root: data\nlearnig_rate: 1\n")
    assert main(["plan", str(config)]) == 2 and "learnig_rate" in capsys.readouterr().err
