"""The trainer's loss against a hand computation; training runs in-process on in-memory samples."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import make_image
from vlm_smmd.config import LossArguments, VLMTrainingArguments
from vlm_smmd.data import Sample
from vlm_smmd.data.collator import QwenVLCollator
from vlm_smmd.losses import SMMDLoss
from vlm_smmd.training import NumericTrainer, build_objective


def clock_samples(n=4):
    answers = ["10:07", "3:45", "Democrat", "12.5"]
    return [Sample(make_image(112 + 28 * (i % 2), 84, seed=i), "What time is it?", answers[i % 4], "test", str(i))
            for i in range(n)]


def make_trainer(model, processor, tmp_path, aux="smmd", lam=0.7, **train_kw):
    collator = QwenVLCollator(processor)
    options = dict(max_steps=4, per_device_train_batch_size=4, learning_rate=5e-3, logging_steps=1,
                   save_strategy="no", disable_tqdm=True)
    args = VLMTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{**options, **train_kw})
    objective = build_objective(LossArguments(aux=aux, aux_lambda=lam), collator.numeric_vocab)
    return NumericTrainer(model=model, args=args, train_dataset=clock_samples(), data_collator=collator,
                          processing_class=processor, objective=objective), collator


def test_trainer_loss_equals_hand_computation(tiny_model_and_processor, tmp_path):
    model, processor = tiny_model_and_processor
    model.eval()  # no dropout anyway; eval mode uses per-batch means
    trainer, collator = make_trainer(model, processor, tmp_path)
    batch = collator(clock_samples())
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(batch))
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}
        logits = model(**inputs).logits.double()  # full [B, T, V]
    labels = batch["labels"]
    shift_logits, shift_labels = logits[:, :-1], labels[:, 1:]
    keep = shift_labels != -100
    ce = F.cross_entropy(shift_logits[keep], shift_labels[keep])
    digit_ids = torch.arange(15, 25)  # "0".."9" on Qwen2.5
    numeric = keep & torch.isin(shift_labels, digit_ids)
    assert numeric.sum() == 4 + 0 + 3 + 3 - 0  # "10:07" 4, "3:45" 3, "Democrat" 0, "12.5" 3
    numeric_logits = shift_logits[numeric][:, digit_ids]
    targets = shift_labels[numeric] - 15
    aux = SMMDLoss(torch.arange(10.0)).double()(numeric_logits, targets)
    assert torch.allclose(loss.double(), ce + 0.7 * aux, atol=1e-5)


def test_gradient_accumulation_matches_full_batch(tmp_path):
    """Two micro-batches of 2 with accumulation give the same update as one batch of 4."""
    from vlm_smmd.modeling import load_model_and_processor

    weights = []
    for batch_size, accumulation in ((4, 1), (2, 2)):
        model, processor = load_model_and_processor("tiny", verbose=False)
        trainer, _ = make_trainer(model, processor, tmp_path / f"{batch_size}", per_device_train_batch_size=batch_size,
                                  gradient_accumulation_steps=accumulation, max_steps=1, optim="sgd",
                                  learning_rate=1.0, max_grad_norm=0.0)
        trainer.train()
        weights.append(model.model.language_model.layers[0].mlp.up_proj.weight.detach().clone())
    # the micro-batches differ in padding length, so only float noise separates the two updates
    assert torch.allclose(weights[0], weights[1], atol=1e-5)


def test_loss_goes_down_and_parts_are_logged(tiny_model_and_processor, tmp_path):
    model, processor = tiny_model_and_processor
    trainer, _ = make_trainer(model, processor, tmp_path, max_steps=8)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "ce" in h]
    assert len(logged) == 8 and all("aux" in h and "total" in h for h in logged)
    assert logged[-1]["total"] < logged[0]["total"]
    assert all(h["numeric_tokens"] == 10 for h in logged)


@pytest.mark.slow
def test_lora_merged_save_reloads_the_trained_model(tmp_path):
    from vlm_smmd.modeling import load_model_and_processor
    from vlm_smmd.training import save_final

    model, processor = load_model_and_processor("tiny", lora=True, lora_r=4, verbose=False)
    trainer, collator = make_trainer(model, processor, tmp_path, max_steps=3, learning_rate=0.05)
    trainer.train()
    batch = {k: v for k, v in collator(clock_samples()).items() if k not in ("labels", "numeric_mask")}
    model.eval()
    with torch.no_grad():
        trained = model(**batch).logits
        with model.disable_adapter():
            untrained = model(**batch).logits
    assert not torch.allclose(trained, untrained, atol=1e-4)  # the adapters learned something
    save_final(trainer, processor, merge_lora=True)
    reloaded, _ = load_model_and_processor(str(tmp_path), dtype="fp32", verbose=False)
    reloaded.eval()
    with torch.no_grad():
        assert torch.allclose(reloaded(**batch).logits, trained, atol=1e-4)


def test_synthetic_data_is_reused_only_when_settings_match(tmp_path, capsys):
    from vlm_smmd.config import ConfigError, DataArguments
    from vlm_smmd.training import synthesize_if_missing

    root = tmp_path / "clocks"
    args = DataArguments(data_root=str(root), synthesize="clocks", synthesize_num=10, synthesize_size=64)
    synthesize_if_missing(args)
    assert len(list((root / "train").rglob("*.png"))) == 9
    synthesize_if_missing(args)
    assert "reusing" in capsys.readouterr().out
    args.synthesize_num = 12
    with pytest.raises(ConfigError, match="num 10 there, 12 asked"):
        synthesize_if_missing(args)

    charts = DataArguments(data_root=str(tmp_path / "charts"), dataset="chartqa", synthesize="chartqa",
                           synthesize_num=2, eval_split="test")
    synthesize_if_missing(charts)
    assert (tmp_path / "charts" / "charts_data" / "test.json").is_file()
    charts.synthesize_seed = 5
    with pytest.raises(ConfigError, match="seed.*synthesize: none"):
        synthesize_if_missing(charts)


def test_synthesize_bars_and_arithmetic_with_options(tmp_path):
    from vlm_smmd.config import ConfigError, load_config
    from vlm_smmd.data import read_arithmetic, read_chartqa
    from vlm_smmd.training import synthesize_if_missing

    bars = tmp_path / "bars"
    _, data_args, _, _ = load_config(None, {"dataset": "chartqa", "data_root": str(bars), "synthesize": "bars",
                                            "synthesize_num": "12", "synthesize_size": "56", "eval_split": "test",
                                            "synthesize_options": "{bar_axis_max: 1000}"})
    synthesize_if_missing(data_args)
    train = read_chartqa(bars, "train")
    assert len(train) == 12 and all(int(s.answer) < 1000 for s in train)
    assert train[0].load_image().size == (56, 56)
    data_args.synthesize_options = '{"bar_axis_max": 100}'
    with pytest.raises(ConfigError, match="options"):
        synthesize_if_missing(data_args)

    arith = tmp_path / "arith"
    _, data_args, _, _ = load_config(None, {"dataset": "arithmetic", "data_root": str(arith),
                                            "synthesize": "arithmetic", "synthesize_num": "20",
                                            "synthesize_options": '{"operations": ["add"], "digits": 2}'})
    synthesize_if_missing(data_args)
    problems = list(read_arithmetic(arith, "train")) + list(read_arithmetic(arith, "test"))
    assert len(problems) == 20 and all("+" in s.question for s in problems)
    for s in problems:
        a, b = (int(x) for x in s.question.removeprefix("What is ").rstrip("?").split(" + "))
        assert s.answer == str(a + b)


def test_collator_skips_are_totalled_by_the_trainer(tiny_model_and_processor, tmp_path):
    model, processor = tiny_model_and_processor
    trainer, _ = make_trainer(model, processor, tmp_path, max_steps=2, per_device_train_batch_size=5)
    bad = Sample(make_image(), "What time is it?", "  ", "test", "empty-answer")
    trainer.train_dataset = clock_samples() + [bad]
    trainer.data_collator = QwenVLCollator(processor, on_error="skip")
    with pytest.warns(UserWarning, match="skipped 1 records"):
        trainer.train()
    assert trainer.skipped_samples == 2  # the bad sample is in both steps' batch of 5
    assert trainer.data_collator(clock_samples(2))["skipped_samples"] == 0


def test_training_micro_batches_never_wait_for_the_device(tiny_model_and_processor, tmp_path, monkeypatch):
    """No .item() / int() / float() / bool() / .tolist() on a tensor from our loss code during training
    micro-batches (on a GPU each stalls the stream): counts stay on the device until a logging step."""
    import sys

    model, processor = tiny_model_and_processor
    trainer, _ = make_trainer(model, processor, tmp_path, max_steps=3, logging_steps=3,
                              gradient_accumulation_steps=2, per_device_train_batch_size=2)
    calls = []

    def guard(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            code = sys._getframe(1).f_code
            # the model's own reads are not ours to remove: Qwen2.5-VL's vision attention reads its window
            # lengths, in the stock forward and in the family's drop-in (`speed_up`) alike
            if "vlm_smmd" in code.co_filename and active and not code.co_qualname.endswith("WindowAttention.forward"):
                calls.append((name, code.co_filename, sys._getframe(1).f_lineno))
            return original(self, *args, **kwargs)
        return wrapper

    active = False
    for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "nonzero"):
        monkeypatch.setattr(torch.Tensor, name, guard(name))
    compute_loss = trainer.compute_loss

    def watched(*args, **kwargs):
        nonlocal active
        active = True
        try:
            return compute_loss(*args, **kwargs)
        finally:
            active = False

    trainer.compute_loss = watched
    trainer.train()
    assert calls == []
    logged = [h for h in trainer.state.log_history if "ce" in h]
    assert logged and logged[-1]["numeric_tokens"] > 0  # the end-of-training log read the device sums once


@pytest.fixture(scope="module")
def full_batch_gradient():
    """d(CE + 0.7 * SMMD)/d(params) of the tiny preset's seed-0 weights on one batch of all four samples,
    by hand from the full [B, T, V] logits."""
    from vlm_smmd.modeling import load_model_and_processor

    model, processor = load_model_and_processor("tiny", verbose=False)
    batch = QwenVLCollator(processor)(clock_samples())
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "numeric_mask")}
    model.train()  # as the Trainer runs it (the tiny preset has no dropout)
    logits = model(**inputs).logits
    shift_logits, shift_labels = logits[:, :-1], batch["labels"][:, 1:]
    keep = shift_labels != -100
    digit_ids = torch.arange(15, 25)  # "0".."9" on Qwen2.5
    numeric = keep & torch.isin(shift_labels, digit_ids)
    ce = F.cross_entropy(shift_logits[keep], shift_labels[keep])
    aux = SMMDLoss(torch.arange(10.0))(shift_logits[numeric][:, digit_ids], shift_labels[numeric] - 15)
    (ce + 0.7 * aux).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("batch_size, accumulation", [(4, 1), (2, 2), (1, 4)])
def test_accumulated_sgd_step_is_the_full_batch_gradient(tmp_path, full_batch_gradient, batch_size, accumulation):
    """One SGD step (lr 1, constant, no clipping, no decay) moves every weight by minus the hand-computed
    full-batch gradient, however the batch of 4 is split into micro-batches. The update ratio
    <delta, -g> / <g, g> is 1; a Trainer that divides our already step-normalised loss by the
    accumulation steps again (transformers < 5.19 ignores `loss_is_scaled_for_ga`) gives 1 / accumulation."""
    from vlm_smmd.modeling import load_model_and_processor

    grads = full_batch_gradient
    model, processor = load_model_and_processor("tiny", verbose=False)  # the same seed-0 weights
    before = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    assert before.keys() == grads.keys()
    trainer, _ = make_trainer(model, processor, tmp_path, per_device_train_batch_size=batch_size,
                              gradient_accumulation_steps=accumulation, max_steps=1, optim="sgd",
                              learning_rate=1.0, max_grad_norm=0.0, lr_scheduler_type="constant", weight_decay=0.0)
    trainer.train()
    assert trainer.state.global_step == 1
    after = dict(model.named_parameters())
    delta = torch.cat([(after[name].detach() - before[name]).flatten() for name in before]).double()
    expected = -torch.cat([grads[name].flatten() for name in before]).double()
    assert expected.norm() > 1.0  # a real step, far above float noise
    ratio = float(delta @ expected / (expected @ expected))
    assert abs(ratio - 1) < 1e-3, f"update ratio {ratio:.4f} at {accumulation} accumulation steps (want 1)"
    # and not only along the gradient: the update is the gradient (micro-batches pad differently: float noise)
    assert float((delta - expected).norm() / expected.norm()) < 1e-3


# ---------------------------------------------------------------- resuming from a checkpoint


def bare_trainer(model, processor, tmp_path):
    from vlm_smmd.numeric import NumericVocab

    vocab = NumericVocab.from_tokenizer(getattr(processor, "tokenizer", processor))
    objective = build_objective(LossArguments(), vocab)
    args = VLMTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", disable_tqdm=True)
    return NumericTrainer(model=model, args=args, processing_class=processor, objective=objective)


def perturb(model):
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(1.0)


@pytest.mark.parametrize("preset, lora", [("tiny", False), ("tiny-qwen2-vl", False), ("tiny-qwen3-vl", False),
                                          ("tiny-mllama", False), ("tiny-qwen2.5", False), ("tiny-llama3", False),
                                          ("tiny", True), ("tiny-mllama", True)])
def test_resume_restores_every_weight_of_the_checkpoint(tmp_path, preset, lora):
    """The Trainer's own loader (load_state_dict(strict=False), no key conversion) restored 1 of 57 tensors
    of a Qwen2.5-VL checkpoint, 1 of 58 of Qwen2-VL and 0 of 87 of Mllama, with only a warning."""
    from vlm_smmd.modeling import load_model_and_processor

    model, processor = load_model_and_processor(preset, lora=lora, lora_r=4, verbose=False)
    trainer = bare_trainer(model, processor, tmp_path)
    trainer.save_model(str(tmp_path / "checkpoint-1"))
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    for load in (lambda: trainer._load_from_checkpoint(str(tmp_path / "checkpoint-1")), trainer._load_best_model):
        perturb(model)
        trainer.state.best_model_checkpoint = str(tmp_path / "checkpoint-1")
        load()
        restored = model.state_dict()
        assert restored.keys() == saved.keys()
        differ = [k for k in saved if not torch.equal(restored[k], saved[k])]
        assert not differ, f"{len(differ)} of {len(saved)} tensors not restored, e.g. {differ[0]}"


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("change", ["drop", "add"])
def test_checkpoint_whose_keys_do_not_fit_is_an_error(tmp_path, lora, change):
    from safetensors.torch import load_file, save_file

    from vlm_smmd.modeling import load_model_and_processor
    from vlm_smmd.training import CheckpointError

    model, processor = load_model_and_processor("tiny", lora=lora, lora_r=4, verbose=False)
    trainer = bare_trainer(model, processor, tmp_path)
    folder = tmp_path / "checkpoint-1"
    trainer.save_model(str(folder))
    file = folder / ("adapter_model.safetensors" if lora else "model.safetensors")
    tensors = load_file(file)
    if change == "drop":
        tensors.pop(sorted(k for k in tensors if "layers.0." in k)[0])
    else:
        tensors["model.layers.0.mlp.extra.weight"] = torch.zeros(2)
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="missing" if change == "drop" else "unexpected"):
        trainer._load_from_checkpoint(str(folder))


def test_resume_takes_the_newest_complete_checkpoint(tmp_path, capsys):
    import json

    from vlm_smmd.training import CheckpointError, resume_checkpoint

    def checkpoint(step, *files, state=True):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        for name in files:
            (folder / name).write_bytes(b"x")
        if state is not None:
            (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}) if state else '{"global_st')
        return str(folder)

    with pytest.raises(CheckpointError, match="no checkpoint-N folder"):
        resume_checkpoint(tmp_path, True)
    assert resume_checkpoint(tmp_path, None) is None and resume_checkpoint(tmp_path, False) is None
    complete = checkpoint(3, "model.safetensors", "optimizer.pt")
    killed_mid_save = checkpoint(6, "model.safetensors", "optimizer.pt", state=None)  # trainer_state.json comes last
    killed_writing_state = checkpoint(9, "model.safetensors", "optimizer.pt", state=False)
    checkpoint(12, "optimizer.pt")  # a state but no weights
    (tmp_path / "checkpoint-15.tmp").mkdir()  # not a checkpoint-N folder
    for wanted in (True, "true"):
        assert resume_checkpoint(tmp_path, wanted) == complete
        printed = capsys.readouterr().out.strip().splitlines()
        assert len(printed) == 1  # one line names every incomplete one passed over
        for name in ("checkpoint-6 (no trainer_state.json)", "checkpoint-9 (trainer_state.json does not parse)",
                     "checkpoint-12 (no weights)", "resuming from checkpoint-3", "overwritten"):
            assert name in printed[0]
    assert resume_checkpoint(tmp_path, True, announce=False) == complete and not capsys.readouterr().out
    assert resume_checkpoint(tmp_path, complete) == complete
    for path in (killed_mid_save, killed_writing_state):
        with pytest.raises(CheckpointError, match="incomplete checkpoint") as error:
            resume_checkpoint(tmp_path, path)
        assert "\n" not in str(error.value)
    with pytest.raises(CheckpointError, match="is not a folder"):
        resume_checkpoint(tmp_path, tmp_path / "checkpoint-99")
    Path(complete, "trainer_state.json").unlink()
    with pytest.raises(CheckpointError, match="no complete checkpoint in .*checkpoint-12 .*checkpoint-3"):
        resume_checkpoint(tmp_path, True)


# ---------------------------------------------------------------- divergence, the atomic final save, the lock


def guarded_trainer(model, processor, tmp_path, **train_kw):
    """`make_trainer` with the recipe's DivergenceGuard on its objective."""
    from vlm_smmd.training.guards import DivergenceGuard

    trainer, collator = make_trainer(model, processor, tmp_path, **train_kw)
    trainer.add_callback(DivergenceGuard(trainer.objective))
    return trainer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_finite_agrees_with_an_elementwise_check(dtype):
    from vlm_smmd.training.guards import finite

    generator = torch.Generator().manual_seed(0)
    for trial in range(200):
        tensors = [torch.randn(int(n), generator=generator).to(dtype)
                   for n in torch.randint(1, 300, (int(torch.randint(1, 6, (1,), generator=generator)),),
                                          generator=generator)]
        if trial % 2:  # half the trials: one bad value somewhere
            t = tensors[int(torch.randint(len(tensors), (1,), generator=generator))]
            t[int(torch.randint(len(t), (1,), generator=generator))] = (float("nan"), float("inf"), -float("inf"))[trial % 3]
        expected = all(bool(torch.isfinite(t).all()) for t in tensors)
        assert bool(finite(tensors)) == expected, trial
    assert bool(finite([]))
    # documented: a norm that overflows counts as non-finite (values far beyond any trained weight)
    assert not bool(finite([torch.full((10,), 1e30)])) and bool(finite([torch.full((10,), 1e3)]))


def test_guard_stops_at_the_update_that_makes_weights_non_finite(tiny_model_and_processor, tmp_path):
    """learning_rate 1e30 behind a linear warmup: step 1 runs at lr 0 (checkpoint-1 is the seed model), step 2
    throws the weights past float range. Training stops at step 2 before the Trainer saves it."""
    from safetensors.torch import load_file

    from vlm_smmd.training.checkpoints import checkpoint_problem, stopped_run_error
    from vlm_smmd.training.guards import DivergedError

    model, processor = tiny_model_and_processor
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = guarded_trainer(model, processor, tmp_path, learning_rate=1e30, lr_scheduler_type="linear",
                              warmup_steps=10, save_strategy="steps", save_steps=1, save_only_model=True)
    with pytest.raises(DivergedError, match=r"at step 2: the update made weights non-finite \(learning_rate 1e\+29\)") \
            as error:
        trainer.train()
    assert trainer.state.global_step == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-1"]
    saved = load_file(tmp_path / "checkpoint-1" / "model.safetensors")
    assert all(bool(torch.isfinite(t).all()) for t in saved.values())
    assert checkpoint_problem(tmp_path / "checkpoint-1") is None
    assert torch.equal(saved["model.layers.0.mlp.up_proj.weight"],
                       initial["model.language_model.layers.0.mlp.up_proj.weight"])  # lr 0 at step 1
    message = str(stopped_run_error(error.value, tmp_path, 1, main=True))
    assert message.endswith(f"the last good checkpoint is {tmp_path / 'checkpoint-1'}") and "\n" not in message


def test_guard_stops_at_a_non_finite_loss_whose_gradient_is_finite(tiny_model_and_processor, tmp_path):
    """A NaN added to the loss as a constant leaves the gradient (and so the weights) finite: only the loss
    check can see it."""
    from vlm_smmd.training.guards import DivergedError, DivergenceGuard

    model, processor = tiny_model_and_processor
    trainer, _ = make_trainer(model, processor, tmp_path, max_steps=3)
    nan_at_step_2 = iter([False, True])
    trainer.objective.register_forward_hook(  # registered before the guard's, so the guard sees its output
        lambda module, args, out: {**out, "loss": out["loss"] + float("nan")} if next(nan_at_step_2, False) else None)
    trainer.add_callback(DivergenceGuard(trainer.objective))
    with pytest.raises(DivergedError, match="at step 2: the loss is not finite"):
        trainer.train()
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_guard_syncs_once_per_optimizer_step(tiny_model_and_processor, tmp_path, monkeypatch):
    """The guard's cost: one host sync per optimizer step, whatever the accumulation."""
    import sys

    model, processor = tiny_model_and_processor
    trainer = guarded_trainer(model, processor, tmp_path, max_steps=3, gradient_accumulation_steps=2,
                              per_device_train_batch_size=2)
    calls = []

    def counted(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            if sys._getframe(1).f_code.co_filename.endswith("guards.py"):
                calls.append(name)
            return original(self, *args, **kwargs)
        return wrapper

    for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "nonzero", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, counted(name))
    trainer.train()
    assert trainer.state.global_step == 3
    assert calls == ["tolist"] * 3


def test_save_final_refuses_non_finite_weights(tiny_model_and_processor, tmp_path):
    from vlm_smmd.training import save_final
    from vlm_smmd.training.guards import DivergedError

    model, processor = tiny_model_and_processor
    trainer, _ = make_trainer(model, processor, tmp_path / "out")
    with torch.no_grad():
        model.model.language_model.layers[1].self_attn.q_proj.weight[3, 5] = float("inf")
    with pytest.raises(DivergedError, match=r"not saving the model to .*1 weight tensors hold non-finite values "
                                            r"\(e.g. model.language_model.layers.1.self_attn.q_proj.weight\)"):
        save_final(trainer, processor, merge_lora=False)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _folder_state(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("failure", ["full disk", "ctrl-c"])
def test_failed_final_save_leaves_the_folder_as_it_was(tiny_model_and_processor, tmp_path, monkeypatch, failure):
    """The save fails after the weights are written (the processor's files next): the folder keeps only what
    it held, with no partial model and no staging folder; a full disk is a one-line SaveError naming the
    complete checkpoint kept."""
    import errno

    from vlm_smmd.training import save_final
    from vlm_smmd.training.checkpoints import SaveError

    model, processor = tiny_model_and_processor
    out = tmp_path / "out"
    trainer, _ = make_trainer(model, processor, out)
    earlier = out / "checkpoint-2"
    earlier.mkdir(parents=True)
    (earlier / "model.safetensors").write_bytes(b"weights")
    (earlier / "trainer_state.json").write_text('{"global_step": 2}')
    (out / "notes.txt").write_text("mine")
    before = _folder_state(out)

    def fail(*args, **kwargs):
        assert (out / ".saving" / "model.safetensors").is_file()  # the weights went to the staging folder
        if failure == "full disk":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise KeyboardInterrupt

    monkeypatch.setattr(processor, "save_pretrained", fail)
    expected = (SaveError, KeyboardInterrupt)[failure == "ctrl-c"]
    with pytest.raises(expected) as error:
        save_final(trainer, processor, merge_lora=False)
    assert _folder_state(out) == before
    if failure == "full disk":
        assert str(error.value) == (f"no space left on device while saving the model to {out}; nothing was left "
                                    f"half-written there; the checkpoints in {out} are kept (newest: checkpoint-2; "
                                    "free some space and resume it with resume_from_checkpoint: true)")


def test_final_save_moves_config_json_last_and_replaces_an_earlier_save(tiny_model_and_processor, tmp_path,
                                                                           monkeypatch):
    import os

    from vlm_smmd.modeling import load_model_and_processor
    from vlm_smmd.training import save_final

    model, processor = tiny_model_and_processor
    out = tmp_path / "out"
    trainer, _ = make_trainer(model, processor, out)
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text('{"earlier": true}')
    (out / ".saving").mkdir()  # left by a run killed while saving
    (out / ".saving" / "model.safetensors").write_bytes(b"partial")
    moved = []
    replace = os.replace

    def record(src, dst):
        moved.append(Path(dst).name)
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", record)
    save_final(trainer, processor, merge_lora=False, run_config={"instruction": "Answer."})
    assert moved[-1] == "config.json" and {"model.safetensors", "tokenizer.json", "run_config.json"} <= set(moved)
    assert not (out / ".saving").exists()
    reloaded, _ = load_model_and_processor(str(out), verbose=False)
    for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.slow
def test_output_lock_refuses_a_second_holder_and_not_a_dead_ones_file(tmp_path):
    """Held by another process: refused, naming its pid. Once that process is killed (SIGKILL: its .lock
    file stays), the lock is free again; a clean release removes the file."""
    import os
    import signal
    import subprocess
    import sys

    from vlm_smmd.training.guards import OutputLockedError, output_lock

    folder = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom vlm_smmd.training.guards import output_lock\n"
         f"with output_lock({str(folder)!r}):\n    print('locked', flush=True)\n    time.sleep(120)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(OutputLockedError, match=rf"{folder} is being written by another run \(pid {holder.pid} on "):
            with output_lock(folder):
                pass
        with output_lock(folder, take=False):  # the other ranks of a run take nothing
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (folder / ".lock").read_text().startswith(f"pid {holder.pid} ")  # stale file of the killed holder
    with output_lock(folder):
        assert (folder / ".lock").read_text().startswith(f"pid {os.getpid()} ")
    assert not (folder / ".lock").exists()


def _flushing() -> bool:
    return (torch.tensor([1e-39], dtype=torch.float32) * 1.0).item() == 0.0


def test_flushing_denormals_zeroes_subnormals_inside_and_restores_after():
    from vlm_smmd.training.recipe import flushing_denormals

    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormals")
    assert not _flushing()
    with flushing_denormals():
        assert _flushing()
        with flushing_denormals():  # nested: the outer block's setting survives the inner one
            pass
        assert _flushing()
    assert not _flushing()
    with flushing_denormals(False):
        assert not _flushing()


@pytest.mark.parametrize("flush", [True, False])
def test_training_runs_with_subnormals_flushed_unless_told_not_to(tmp_path, monkeypatch, flush):
    from vlm_smmd.config import ModelArguments
    from vlm_smmd.training import recipe

    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormals")
    monkeypatch.setattr(recipe, "_run", lambda *args: {"flushing": _flushing()})
    args = VLMTrainingArguments(output_dir=str(tmp_path / "run"), use_cpu=True, report_to=[])
    assert recipe.run(ModelArguments(flush_denormal=flush), None, None, args) == {"flushing": flush}
    assert not _flushing()
