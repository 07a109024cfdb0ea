"""The drop-in loss for the HF Trainer / TRL and `NumericLossMixin`, on tiny random models with the real
Qwen2.5 and Llama-3 tokenizers."""

import copy
import warnings

import pytest
import torch
from transformers import Trainer, TrainingArguments
from transformers.loss.loss_utils import ForCausalLMLoss
from transformers.modeling_outputs import CausalLMOutputWithPast

from vlm_smmd.losses import NumericLossMixin, NumericObjective, SMMDLoss, answer_positions, numeric_loss_func
from vlm_smmd.numeric import NumericVocab

QUESTION = "What is the value?"
ANSWERS = ["10:07", "3:45", "Democrat", "12.5"]  # numeric tokens on Qwen: 4, 3, 0, 3


@pytest.fixture(scope="module")
def qwen():
    from vlm_smmd.modeling import load_model_and_processor

    model, tokenizer = load_model_and_processor("tiny-qwen2.5", verbose=False)
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def llama():
    from vlm_smmd.modeling import load_model_and_processor

    model, tokenizer = load_model_and_processor("tiny-llama3", verbose=False)
    return model.eval(), tokenizer


def example(tokenizer, answer):
    """input_ids [L] and labels [L]: -100 except the answer and what closes the assistant turn."""
    turn = [{"role": "user", "content": QUESTION}]
    prompt = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(turn + [{"role": "assistant", "content": answer}], tokenize=False)
    assert full.startswith(prompt)
    prefix = tokenizer(prompt, add_special_tokens=False).input_ids
    ids = tokenizer(full, add_special_tokens=False).input_ids
    assert ids[:len(prefix)] == prefix
    return {"input_ids": torch.tensor(ids), "labels": torch.tensor([-100] * len(prefix) + ids[len(prefix):])}


def collate(examples, pad_id, side="left"):
    width = max(len(e["input_ids"]) for e in examples)
    shape = (len(examples), width)
    batch = {"input_ids": torch.full(shape, pad_id), "attention_mask": torch.zeros(shape, dtype=torch.long),
             "labels": torch.full(shape, -100)}
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        cols = slice(width - n, width) if side == "left" else slice(0, n)
        batch["input_ids"][i, cols], batch["attention_mask"][i, cols] = e["input_ids"], 1
        batch["labels"][i, cols] = e["labels"]
    return batch


def chat_batch(tokenizer, answers, side="left"):
    return collate([example(tokenizer, a) for a in answers], tokenizer.pad_token_id, side)


def reference(logits, labels, num_items, aux, lam, vocab):
    """In float64 from the full logits [B, T, V]: CE summed over the shifted labels plus lam * (aux summed over
    numeric answer tokens), divided by num_items (SMMD: by SMMDLoss on the numeric rows alone)."""
    logits = logits.double()
    shifted = labels[:, 1:].reshape(-1)
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(shifted.numel(), -1), shifted, reduction="sum")
    ce = ce / num_items
    batch_idx, pos_idx, targets = answer_positions(labels)
    if aux == "smmd":
        numeric = vocab.mask(targets)
        rows = logits[batch_idx, pos_idx][numeric][:, vocab.token_ids]
        aux_sum = SMMDLoss(vocab.values).double()(rows, vocab.index_of(targets[numeric]), reduction="sum")
    else:
        objective = NumericObjective.from_vocab(vocab, aux=aux)
        aux_sum = objective(logits[batch_idx, pos_idx], targets, batch_idx=batch_idx, pos_idx=pos_idx)["aux_sum"]
    return ce + lam * aux_sum / num_items


@pytest.mark.parametrize("aux", ["smmd", "ntil", "number_level", "none"])
def test_drop_in_equals_transformers_ce_plus_our_aux(qwen, aux):
    model, tokenizer = qwen
    vocab = NumericVocab.from_tokenizer(tokenizer)
    loss_func = numeric_loss_func(tokenizer, aux=aux, aux_lambda=0.7)
    batch = chat_batch(tokenizer, ANSWERS)
    labels = batch.pop("labels")
    with torch.no_grad():
        outputs = model(**batch)
    num_items = (labels[:, 1:] != -100).sum()
    want = reference(outputs.logits, labels, num_items, aux, 0.7, vocab)
    if aux == "none":  # CE alone is transformers' own causal-LM loss (float32)
        hf = ForCausalLMLoss(outputs.logits, labels, vocab_size=outputs.logits.shape[-1], num_items_in_batch=num_items)
        assert abs(hf.item() - want.item()) < 1e-6 * want.item()
    loss = loss_func(outputs, labels, num_items_in_batch=num_items)  # float32 math on float32 logits
    assert loss.dtype == torch.float32 and abs(loss.item() - want.item()) < 1e-6 * want.item()
    outputs = CausalLMOutputWithPast(logits=outputs.logits.double())  # float64 math: the formulas to 1e-6
    loss = loss_func(outputs, labels, num_items_in_batch=num_items)
    assert abs(loss.item() - want.item()) < 1e-6
    parts = loss_func.parts(outputs, labels, num_items)
    assert parts["n_numeric"] == (0 if aux == "none" else 10) and parts["n_tokens"] == num_items
    # without num_items_in_batch (evaluation): both sums divided by this batch's answer tokens
    assert abs(loss_func(outputs, labels).item() - loss.item()) < 1e-6
    # the padding side does not matter
    right = chat_batch(tokenizer, ANSWERS, side="right")
    right_labels = right.pop("labels")
    with torch.no_grad():
        right_logits = model(**right).logits.double()
    right_loss = loss_func(CausalLMOutputWithPast(logits=right_logits), right_labels, num_items_in_batch=num_items)
    assert abs(right_loss.item() - loss.item()) < 1e-5


@pytest.mark.parametrize("aux", ["smmd", "number_level"])
def test_drop_in_on_llama3_multi_digit_numbers(llama, aux):
    model, tokenizer = llama
    vocab = NumericVocab.from_tokenizer(tokenizer)
    loss_func = numeric_loss_func(tokenizer, aux=aux, aux_lambda=0.5)
    batch = chat_batch(tokenizer, ["1234.56", "10:07", "42"])
    labels = batch.pop("labels")
    with torch.no_grad():
        outputs = CausalLMOutputWithPast(logits=model(**batch).logits.double())
    parts = loss_func.parts(outputs, labels, num_items_in_batch=torch.tensor(17))
    assert parts["n_numeric"] == 6  # "123" "4" "56" | "10" "07" | "42"
    want = reference(outputs.logits, labels, torch.tensor(17), aux, 0.5, vocab)
    assert abs(parts["loss"].item() - want.item()) < 1e-6


def test_no_numeric_target_gives_aux_exactly_zero(qwen):
    model, tokenizer = qwen
    batch = chat_batch(tokenizer, ["Democrat", "yes"])
    labels = batch.pop("labels")
    outputs = model(**batch)
    for aux in ("smmd", "ntil", "number_level"):
        parts = numeric_loss_func(tokenizer, aux=aux, aux_lambda=2.0).parts(outputs, labels, torch.tensor(9))
        assert parts["aux"].item() == 0.0 and parts["aux_sum"].item() == 0.0 and parts["n_numeric"] == 0
        assert parts["loss"].item() == parts["ce"].item() and parts["aux"].grad_fn is not None


def test_outputs_without_logits_are_a_clear_error(qwen):
    model, tokenizer = qwen
    loss_func = numeric_loss_func(tokenizer)
    labels = torch.full((1, 4), -100)
    for outputs in (CausalLMOutputWithPast(loss=torch.tensor(1.0)), {"loss": torch.tensor(1.0)}):
        with pytest.raises(ValueError, match="carry no logits.*fused_lm_head") as err:
            loss_func(outputs, labels, 1)
        assert "\n" not in str(err.value)
    trl_utils = pytest.importorskip("trl.trainer.utils", reason="trl is not installed")
    fused = copy.deepcopy(model)
    trl_utils.add_fused_lm_head(fused)
    batch = chat_batch(tokenizer, ANSWERS[:2])
    labels = batch.pop("labels")
    with torch.no_grad():
        outputs = fused(**batch, labels=labels, fused_lm_head=True)  # TRL's chunked loss: no logits built
    with pytest.raises(ValueError, match="FusedCausalLMOutput.*carry no logits"):
        loss_func(outputs, labels, 1)


def test_bad_arguments(qwen):
    _, tokenizer = qwen
    with pytest.raises(ValueError, match="numeric_vocab must be"):
        numeric_loss_func(tokenizer, numeric_vocab="digits")
    with pytest.raises(ValueError, match="aux must be one of"):
        numeric_loss_func(tokenizer, aux="focal")
    with pytest.raises(ValueError, match="option squash=0"):
        numeric_loss_func(tokenizer, squash=0)
    with pytest.raises(ValueError, match="get_vocab"):
        numeric_loss_func(object())
    canonical = numeric_loss_func(tokenizer, numeric_vocab="canonical").objective
    assert canonical.numeric_token_ids.tolist() == list(range(15, 25))


# ---------------------------------------------------------------- training


def trainer_args(tmp_path, batch_size, accumulation, **kw):
    return TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=1, optim="sgd",
                             learning_rate=1.0, max_grad_norm=0.0, lr_scheduler_type="constant", weight_decay=0.0,
                             per_device_train_batch_size=batch_size, gradient_accumulation_steps=accumulation,
                             train_sampling_strategy="sequential", save_strategy="no", disable_tqdm=True,
                             remove_unused_columns=False, logging_steps=1, **kw)


def one_step(model, tokenizer, tmp_path, batch_size, accumulation, trainer_class=Trainer, **trainer_kw):
    """Weights after one SGD step (lr 1) on the four ANSWERS, split into micro-batches in order."""
    model = copy.deepcopy(model).train()
    data = [example(tokenizer, a) for a in ANSWERS]
    trainer_kw.setdefault("data_collator", lambda rows: collate(rows, tokenizer.pad_token_id))
    trainer = trainer_class(model=model, args=trainer_args(tmp_path, batch_size, accumulation), train_dataset=data,
                            processing_class=tokenizer, **trainer_kw)
    trainer.train()
    assert trainer.state.global_step == 1
    return torch.cat([p.detach().flatten() for p in model.parameters()]), trainer


def test_drop_in_accumulation_gives_the_same_update(qwen, tmp_path):
    """Micro-batches [10:07, 3:45] and [Democrat, 12.5] hold 7 and 3 numeric tokens: normalising aux by the
    step's answer tokens keeps accumulation 2 equal to one batch of 4."""
    model, tokenizer = qwen
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    loss_func = numeric_loss_func(tokenizer, aux="smmd", aux_lambda=1.0)
    one, _ = one_step(model, tokenizer, tmp_path / "a", 4, 1, compute_loss_func=loss_func)
    two, _ = one_step(model, tokenizer, tmp_path / "b", 2, 2, compute_loss_func=loss_func)
    delta = one - before
    assert delta.norm() > 1.0
    assert float((two - one).norm() / delta.norm()) < 1e-5


def full_batch_gradient(model, tokenizer, aux, lam):
    """d(CE mean over answer tokens + lam * aux mean over numeric tokens)/d(weights) on all four ANSWERS, from
    the full [B, T, V] logits: our trainer's normalisation."""
    model = copy.deepcopy(model).train()
    batch = chat_batch(tokenizer, ANSWERS)
    labels = batch.pop("labels")
    logits = model(**batch).logits
    batch_idx, pos_idx, targets = answer_positions(labels)
    objective = NumericObjective.from_vocab(NumericVocab.from_tokenizer(tokenizer), aux=aux, lam=lam)
    objective(logits[batch_idx, pos_idx], targets, batch_idx=batch_idx, pos_idx=pos_idx)["loss"].backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


class MixedTrainer(NumericLossMixin, Trainer):
    pass


@pytest.mark.parametrize("aux, batch_size, accumulation", [("smmd", 4, 1), ("smmd", 2, 2), ("smmd", 1, 4),
                                                        ("number_level", 2, 2)])
def test_mixin_update_is_the_full_batch_gradient(qwen, tmp_path, aux, batch_size, accumulation):
    """One SGD step (lr 1) moves the weights by minus the full-batch gradient of our trainer's objective,
    however the batch is split: both counts span the whole optimizer step."""
    model, tokenizer = qwen
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    after, trainer = one_step(model, tokenizer, tmp_path, batch_size, accumulation, MixedTrainer, aux=aux,
                              aux_lambda=0.7)
    expected = -full_batch_gradient(model, tokenizer, aux, 0.7)
    delta = after - before
    assert expected.norm() > 1.0
    assert float((delta - expected).norm() / expected.norm()) < 1e-4
    logged = trainer.state.log_history[0]
    assert logged["numeric_tokens"] == 10 and logged["aux"] > 0 and logged["ce"] > 0


def test_mixin_builds_logits_only_at_answer_positions(qwen, tmp_path):
    model, tokenizer = qwen
    trainer = MixedTrainer(model=copy.deepcopy(model), args=trainer_args(tmp_path, 4, 1), processing_class=tokenizer,
                           aux="ntil", aux_lambda=0.5, aux_options={"digit_exp": 1.5})
    assert trainer.objective.aux_loss.digit_exp == 1.5
    for side in ("left", "right"):
        batch = chat_batch(tokenizer, ANSWERS, side)
        with torch.no_grad():
            loss, outputs = trainer.compute_loss(trainer.model.eval(), dict(batch), return_outputs=True)
        positions = answer_positions(batch["labels"])[1]
        # left: the answers' tails line up; right: the same prompt, so their heads do. Either way a window of
        # the answer positions plus at most one more column (the last) is built
        assert outputs.logits.shape[:2] == (4, len(positions.unique()) + 1)
        assert outputs.logits.shape[1] == 8 < batch["labels"].shape[1] // 3
        labels = batch.pop("labels")
        with torch.no_grad():
            full = trainer.model(**batch).logits
        b, t, targets = answer_positions(labels)
        objective = NumericObjective.from_vocab(NumericVocab.from_tokenizer(tokenizer), aux="ntil", lam=0.5,
                                                digit_exp=1.5)
        want = objective(full[b, t], targets, batch_idx=b, pos_idx=t)["loss"]  # evaluation: means over the batch
        assert abs(loss.item() - want.item()) < 1e-5


# ---------------------------------------------------------------- TRL


def _sft_dataset(vision):
    from datasets import Dataset
    from PIL import Image

    if vision:
        user = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
        rows = [{"images": [Image.new("RGB", (56, 56), (40 * i, 90, 200))], "prompt": user,
                 "completion": [{"role": "assistant", "content": [{"type": "text", "text": a}]}]}
                for i, a in enumerate(ANSWERS)]
    else:
        rows = [{"prompt": [{"role": "user", "content": QUESTION}],
                 "completion": [{"role": "assistant", "content": a}]} for a in ANSWERS]
    return Dataset.from_list(rows)


def _sft_args(tmp_path):
    from trl import SFTConfig

    return SFTConfig(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=2, learning_rate=1e-3,
                     report_to="none", use_cpu=True, logging_steps=1, save_strategy="no", disable_tqdm=True,
                     max_length=None, seed=0)


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite runs it, the fast tier not
@pytest.mark.parametrize("preset", ["tiny-qwen2.5", "tiny"])
def test_sft_trainer_trains_three_steps_with_the_drop_in(tmp_path, preset):
    """TRL's SFTTrainer (text, and the tiny Qwen2.5-VL preset with images): every loss it trains on equals
    transformers' CE plus our aux on the same batch."""
    trl = pytest.importorskip("trl", reason="trl is not installed (pip install trl)")
    from vlm_smmd.modeling import load_model_and_processor

    model, processor = load_model_and_processor(preset, verbose=False)
    tokenizer = getattr(processor, "tokenizer", processor)
    vocab = NumericVocab.from_tokenizer(tokenizer)
    loss_func = numeric_loss_func(processor, aux="smmd", aux_lambda=0.7)
    seen = []

    def recorded(outputs, labels, num_items_in_batch=None):
        loss = loss_func(outputs, labels, num_items_in_batch)
        logits64 = outputs.logits.detach().double()
        want = reference(logits64, labels, num_items_in_batch, "smmd", 0.7, vocab).item()
        assert abs(loss.item() - want) < 1e-6 * want  # float32 math on the model's float32 logits
        loss64 = loss_func(CausalLMOutputWithPast(logits=logits64), labels, num_items_in_batch).item()
        seen.append((loss64, want, int(vocab.mask(labels).sum()), int((labels == -100).sum())))
        return loss

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # TRL 1.x: compute_loss_func is deprecated
        trainer = trl.SFTTrainer(model=model, args=_sft_args(tmp_path), train_dataset=_sft_dataset(preset == "tiny"),
                                 processing_class=processor, compute_loss_func=recorded)
    trainer.train()
    assert trainer.state.global_step == 3 and len(seen) == 3
    for loss, want, _, masked in seen:
        assert abs(loss - want) < 1e-6 and torch.isfinite(torch.tensor(loss))
        assert masked > 0  # the prompt is -100 (completion-only loss)
    assert sum(numeric for _, _, numeric, _ in seen) > 0


def test_sft_trainer_with_the_mixin(tmp_path):
    trl = pytest.importorskip("trl", reason="trl is not installed (pip install trl)")
    from vlm_smmd.modeling import load_model_and_processor

    class NumericSFTTrainer(NumericLossMixin, trl.SFTTrainer):
        pass

    model, tokenizer = load_model_and_processor("tiny-qwen2.5", verbose=False)
    trainer = NumericSFTTrainer(model=model, args=_sft_args(tmp_path), train_dataset=_sft_dataset(False),
                                processing_class=tokenizer, aux="number_level", aux_lambda=0.5)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "aux" in h]
    assert trainer.state.global_step == 3 and len(logged) == 3
    assert all(torch.isfinite(torch.tensor(h["loss"])) and h["ce"] > 0 for h in logged)
    assert sum(h["numeric_tokens"] for h in logged) > 0


def test_mixin_refuses_a_trainer_that_would_rescale_its_loss_and_needs_a_tokenizer(qwen, tmp_path):
    class OldTrainer:  # a Trainer without loss_is_scaled_for_ga (transformers < 5.19) divides by accumulation
        def __init__(self, *args, **kwargs):
            self.processing_class = kwargs.get("processing_class")

    class Old(NumericLossMixin, OldTrainer):
        pass

    with pytest.raises(RuntimeError, match="transformers >= 5.19"):
        Old(processing_class=qwen[1])
    with pytest.raises(ValueError, match="processing_class"):
        MixedTrainer(model=copy.deepcopy(qwen[0]), args=trainer_args(tmp_path, 1, 1))
