"""One training step behind both doors (issue 42): NumericTrainer and the drop-in NumericLossMixin give the same
update; the aux from hidden states (fused CE, no logits) equals the logits path; packed batches equal padded ones."""

import copy
import types

import pytest
import torch
from torch.nn import functional as F
from transformers import Trainer
from transformers.modeling_outputs import CausalLMOutputWithPast

from tests.losses.test_hf import ANSWERS, chat_batch, collate, example, one_step, qwen  # noqa: F401
from vlm_smmd.losses import NumericLossMixin, NumericObjective, answer_positions, numeric_loss_func
from vlm_smmd.numeric import NumericVocab
from vlm_smmd.training import NumericTrainer


class MixedTrainer(NumericLossMixin, Trainer):
    pass


def masked_collate(tokenizer):
    """Left-padded batches with a collator-style numeric_mask that leaves out each row's first numeric token
    (as the "2" of bbox_2d is left out of a grounding answer)."""
    vocab = NumericVocab.from_tokenizer(tokenizer)

    def run(rows):
        batch = collate(rows, tokenizer.pad_token_id)
        numeric = vocab.mask(batch["labels"]) & (batch["labels"] != -100)
        first = numeric.int().cumsum(1) == 1
        batch["numeric_mask"] = numeric & ~first
        return batch
    return run


def weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("batch_size, accumulation, grounding", [(4, 1, False), (2, 2, False), (2, 2, True)])
def test_both_doors_give_the_same_update(qwen, tmp_path, batch_size, accumulation, grounding):  # noqa: F811
    model, tokenizer = qwen
    kw = {"data_collator": masked_collate(tokenizer)} if grounding else {}
    objective = NumericObjective.from_vocab(NumericVocab.from_tokenizer(tokenizer), aux="smmd", lam=0.7)
    ours, trainer = one_step(model, tokenizer, tmp_path / "a", batch_size, accumulation, NumericTrainer,
                             objective=objective, **kw)
    mixin, mixed = one_step(model, tokenizer, tmp_path / "b", batch_size, accumulation, MixedTrainer, aux="smmd",
                            aux_lambda=0.7, **kw)
    delta = ours - weights(model)
    assert delta.norm() > 1.0 and float((mixin - ours).norm() / delta.norm()) < 1e-6
    a, b = trainer.state.log_history[0], mixed.state.log_history[0]
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6) and a["aux"] == pytest.approx(b["aux"], rel=1e-6)
    assert a["numeric_tokens"] == b["numeric_tokens"] == (10 - 3 if grounding else 10)  # 3 rows have numbers
    # and both equal minus the full-batch gradient, the mask applied (independent slow computation)
    full = copy.deepcopy(model).train()
    batch = (masked_collate(tokenizer) if grounding else lambda r: collate(r, tokenizer.pad_token_id))(
        [example(tokenizer, x) for x in ANSWERS])
    labels = batch.pop("labels")
    mask = batch.pop("numeric_mask", None)
    logits = full(**batch).logits
    bi, pi, targets = answer_positions(labels)
    parts = objective(logits[bi, pi], targets, batch_idx=bi, pos_idx=pi,
                      numeric_mask=None if mask is None else mask[bi, pi + 1])
    parts["loss"].backward()
    expected = -torch.cat([p.grad.flatten() for p in full.parameters()])
    assert float((delta - expected).norm() / expected.norm()) < 1e-4


def test_final_hidden_states_are_what_the_head_receives(qwen):  # noqa: F811
    model, tokenizer = qwen
    batch = chat_batch(tokenizer, ANSWERS)
    batch.pop("labels")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    assert torch.allclose(model.lm_head(out.hidden_states[-1]), out.logits, atol=1e-6)


def chunked_ce_forward(self, input_ids=None, labels=None, num_items_in_batch=None, logits_to_keep=0, **kwargs):
    """A forward that scores the labels in chunks of 3 positions and builds no logits (as a fused CE does)."""
    hidden = self.model(input_ids=input_ids, **kwargs).last_hidden_state[:, :-1]
    shifted = labels[:, 1:]
    rows, targets = hidden[shifted != -100], shifted[shifted != -100]
    ce = sum(F.cross_entropy(self.lm_head(rows[i:i + 3]).float(), targets[i:i + 3], reduction="sum")
             for i in range(0, len(targets), 3))
    count = len(targets) if num_items_in_batch is None else num_items_in_batch
    return CausalLMOutputWithPast(loss=ce / count, hidden_states=(hidden,) if kwargs.get("output_hidden_states") else None)


@pytest.mark.parametrize("aux", ["smmd", "number_level"])
def test_hidden_state_aux_equals_the_logits_path(qwen, aux):  # noqa: F811
    model, tokenizer = qwen
    batch = chat_batch(tokenizer, ANSWERS)
    labels = batch.pop("labels")
    num_items = torch.tensor(15)
    grads = []
    for fused in (False, True):
        m = copy.deepcopy(model)
        if fused:
            m.forward = types.MethodType(chunked_ce_forward, m)
            out = m(**batch, labels=labels, num_items_in_batch=num_items, output_hidden_states=True)
            # the chunked forward drops the last position: pad it back so hidden states are [B, T, H]
            out.hidden_states = (F.pad(out.hidden_states[-1], (0, 0, 0, 1)),)
            assert out.logits is None
        else:
            out = m(**batch)
        loss = numeric_loss_func(tokenizer, aux=aux, aux_lambda=0.7, model=m)(out, labels, num_items)
        loss.backward()
        grads.append((loss.detach(), torch.cat([p.grad.flatten() for p in m.parameters()])))
    (want, g_want), (got, g_got) = grads
    assert abs(got.item() - want.item()) < 1e-5 * want.item()
    assert float((g_got - g_want).norm() / g_want.norm()) < 1e-5


def test_mixin_with_a_fused_ce_gives_the_logits_update(qwen, tmp_path):  # noqa: F811
    """fused_ce=True: CE from the model's chunked forward (no logits), aux from the decoder's hidden states."""
    model, tokenizer = qwen
    fused = copy.deepcopy(model)
    fused.forward = types.MethodType(chunked_ce_forward, fused)
    want, _ = one_step(model, tokenizer, tmp_path / "a", 2, 2, MixedTrainer, aux="smmd", aux_lambda=0.7)
    got, trainer = one_step(fused, tokenizer, tmp_path / "b", 2, 2, MixedTrainer, aux="smmd", aux_lambda=0.7,
                            fused_ce=True)
    delta = want - weights(model)
    assert float((got - want).norm() / delta.norm()) < 1e-5
    assert trainer.state.log_history[0]["numeric_tokens"] == 10


def test_packed_batch_gives_the_padded_loss(qwen, tmp_path):  # noqa: F811
    """TRL's padding-free collation (one row, position_ids restarting per sample): the same loss and numeric
    count as the padded batch; the index never reads a label across a sample boundary."""
    collators = pytest.importorskip("trl.trainer.sft_trainer", reason="trl is not installed")
    model, tokenizer = qwen
    from tests.losses.test_hf import trainer_args

    trainer = MixedTrainer(model=copy.deepcopy(model), args=trainer_args(tmp_path, 4, 1), processing_class=tokenizer,
                           aux="smmd", aux_lambda=0.7)
    rows = [{k: v.tolist() for k, v in example(tokenizer, a).items()} for a in ANSWERS]
    packed = collators.DataCollatorForLanguageModeling(tokenizer.pad_token_id, padding_free=True)(rows)
    packed = {k: packed[k] for k in ("input_ids", "labels", "position_ids")}
    # a packer that leaves each sample's first label in place: the index must still not cross the boundary
    starts = packed["position_ids"] == 0
    packed["labels"][starts] = packed["input_ids"][starts]
    padded = chat_batch(tokenizer, ANSWERS, side="right")
    trainer.model.eval()
    with torch.no_grad():
        want = trainer.compute_loss(trainer.model, dict(padded))
        got, outputs = trainer.compute_loss(trainer.model, dict(packed), return_outputs=True)
    assert abs(got.item() - want.item()) < 1e-5 * want.item()
    index = trainer.numeric_step.index(packed["labels"], None, packed["position_ids"])
    assert len(index.pos) == int((padded["labels"][:, 1:] != -100).sum()) and int(index.numeric.sum()) == 10
    assert not isinstance(index.keep, int) and outputs.logits.shape[1] == len(index.keep)  # answer columns only


def mrope_positions(n_text_before: int, grid: tuple[int, int], n_text_after: int, rows: int) -> torch.Tensor:
    """Qwen2-VL style position ids [rows, T] of one sample: text, an image of grid (h, w) patches (one frame),
    text; rows 3 (temporal, height, width) or 4 (a text row 0..T-1 first, as newer transformers give)."""
    h, w = grid
    text = torch.arange(n_text_before).expand(3, -1)
    start = n_text_before
    image = torch.stack([torch.full((h * w,), start), start + torch.arange(h).repeat_interleave(w),
                         start + torch.arange(w).repeat(h)])
    after = int(image.max()) + 1 + torch.arange(n_text_after).expand(3, -1)
    mrope = torch.cat([text, image, after], 1)
    return torch.cat([torch.arange(mrope.shape[1])[None], mrope]) if rows == 4 else mrope


@pytest.mark.parametrize("rows", [3, 4])
def test_packed_vlm_batch_with_mrope_positions_gives_the_unpacked_loss(rows):
    """Two VLM-style samples packed into one row with mRoPE position ids [rows, 1, T]: the same CE, aux and
    counts as the two samples in a padded batch; the label shift and the numeric mask do not cross the
    boundary (the packer left sample 2's first label in place, a digit, and the mask true there)."""
    from vlm_smmd.losses.step import ANSWER_INDEX, NumericStep

    torch.manual_seed(0)
    vocab_size, digits = 40, list(range(15, 25))
    objective = NumericObjective(digits, range(10), aux="smmd")
    # sample: 3 text, a 2x2 image, then "question" text and a numeric answer + end token
    samples = []
    for answer in ([17, 13, 20, 30], [16, 21, 30]):
        ids = torch.tensor([1, 2, 3, 9, 9, 9, 9, 4, 5] + answer)
        labels = torch.full_like(ids, -100)
        labels[-len(answer):] = ids[-len(answer):]
        positions = mrope_positions(3, (2, 2), 2 + len(answer), rows)
        samples.append({"labels": labels, "position_ids": positions, "logits": torch.randn(len(ids), vocab_size),
                        "numeric_mask": torch.isin(labels, torch.tensor(digits))})
    packed = {"labels": torch.cat([s["labels"] for s in samples])[None],
              "position_ids": torch.cat([s["position_ids"] for s in samples], 1)[:, None],
              "numeric_mask": torch.cat([s["numeric_mask"] for s in samples])[None]}
    start = len(samples[0]["labels"])
    packed["labels"][0, start] = 16  # the packer's leftover: a digit label on sample 2's first token
    packed["numeric_mask"][0, start] = True
    width = max(len(s["labels"]) for s in samples)
    padded = {k: torch.stack([F.pad(s[k], (0, width - len(s[k])), value=v) for s in samples])
              for k, v in (("labels", -100), ("numeric_mask", False))}
    logits = {"packed": torch.cat([s["logits"] for s in samples])[None],
              "padded": torch.stack([F.pad(s["logits"], (0, 0, 0, width - len(s["logits"]))) for s in samples])}

    results = {}
    for name, batch in (("packed", packed), ("padded", padded)):
        step = NumericStep(objective, "cpu")
        step.begin([batch], "cpu")
        index = batch[ANSWER_INDEX]
        targets = batch["labels"][index.batch, index.pos + 1]
        parts = objective(logits[name][index.batch, index.pos], targets,
                          numeric_mask=batch["numeric_mask"][index.batch, index.pos + 1])
        results[name] = (parts, step.counts.tolist(), index)
    (got, got_counts, index), (want, want_counts, _) = results["packed"], results["padded"]
    assert got_counts == want_counts == [7, 4]  # 4 + 3 answer tokens, 2 + 2 digits
    for key in ("ce", "aux", "n_numeric"):
        assert torch.allclose(got[key].float(), want[key].float(), rtol=1e-6), key
    assert float(want["aux"]) > 0
    assert start - 1 not in index.pos.tolist()  # sample 1's last token does not predict sample 2's first
    # the index of one batch (evaluation, no begin) reads the same boundaries
    alone = NumericStep(objective, "cpu").index(packed["labels"], packed["numeric_mask"], packed["position_ids"])
    assert torch.equal(alone.pos, index.pos) and torch.equal(alone.numeric, index.numeric)
