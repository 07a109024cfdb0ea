import pytest
import torch
from torch import nn
from transformers.loss.loss_utils import ForCausalLMLoss

from tests.conftest import make_image
from vlm_smmd.losses import (
    AUX_NAMES,
    DIST2Loss,
    GaussianCELoss,
    NTLMSELoss,
    NTLWASLoss,
    NumericObjective,
    SMMDLoss,
    answer_positions,
)
from vlm_smmd.numeric import NumericVocab

V = 40
NUM_IDS = torch.tensor([5, 6, 7, 8, 30])  # a small "vocabulary" with numeric ids, one far from the rest
NUM_VALUES = torch.tensor([0.0, 1.0, 2.0, 3.0, 10.0])


def answer_logits(hidden, labels, head):
    """The head on the answer positions only (as the trainer's logits_to_keep window does)."""
    logits, targets, _ = answer_logits_and_positions(hidden, labels, head)
    return logits, targets


def answer_logits_and_positions(hidden, labels, head):
    """(logits [M, V], targets [M], {"batch_idx", "pos_idx"}) at the answer positions."""
    if hidden.shape[:2] != labels.shape:
        raise ValueError("hidden states and labels must share [B, T]")
    b, t, targets = answer_positions(labels)
    return head(hidden[b, t]), targets, {"batch_idx": b, "pos_idx": t}


def _labels():
    labels = torch.full((3, 9), -100)
    labels[0, 5:9] = torch.tensor([6, 12, 30, 2])  # numeric, text, numeric, eos-like
    labels[1, 2:4] = torch.tensor([7, 7])
    labels[1, 7] = 5  # a gap inside the row
    labels[2, 0] = 8  # position 0 is never predicted (nothing before it)
    return labels


def test_answer_positions_shift_like_the_causal_lm_loss():
    labels = _labels()
    b, t, y = answer_positions(labels)
    want = [(i, j, int(labels[i, j + 1])) for i in range(3) for j in range(8) if labels[i, j + 1] != -100]
    assert list(zip(b.tolist(), t.tolist(), y.tolist())) == want
    assert answer_positions(torch.full((2, 5), -100))[0].numel() == 0


def test_answer_only_ce_equals_hugging_face_causal_lm_loss():
    torch.manual_seed(0)
    hidden = torch.randn(3, 9, 16)
    head = nn.Linear(16, V, bias=False)
    labels = _labels()
    full = head(hidden)
    want = ForCausalLMLoss(full, labels, vocab_size=V)
    logits, targets = answer_logits(hidden, labels, head)
    out = NumericObjective(NUM_IDS, NUM_VALUES, aux="none")(logits, targets)
    torch.testing.assert_close(out["loss"], want)
    # and with the Trainer's num_items_in_batch denominator
    want_sum = ForCausalLMLoss(full, labels, vocab_size=V, num_items_in_batch=torch.tensor(20))
    out = NumericObjective(NUM_IDS, NUM_VALUES, aux="none")(logits, targets, ce_denominator=torch.tensor(20))
    torch.testing.assert_close(out["ce"], want_sum)


def test_logits_to_keep_window_equals_full_logits_rows_of_the_tiny_model(tiny_model_and_processor):
    """The trainer's path: logits of the right-aligned answer window only (logits_to_keep)."""
    model, processor = tiny_model_and_processor
    model.eval()
    texts = []
    for answer in ["10:07", "3"]:
        messages = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What time is it?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        ]
        texts.append(processor.apply_chat_template(messages, tokenize=False))
    batch = processor(text=texts, images=[make_image(), make_image(64, 64, seed=3)], padding=True,
                      return_tensors="pt")
    labels = torch.full_like(batch["input_ids"], -100)
    labels[0, -7:-1] = batch["input_ids"][0, -7:-1]  # "10:07<|im_end|>" (left padding: tails line up)
    labels[1, -3:-1] = batch["input_ids"][1, -3:-1]
    b, t, targets = answer_positions(labels)
    keep = int(labels.shape[1] - t.min())
    with torch.no_grad():
        full = model(**batch).logits
        logits = model(**batch, logits_to_keep=keep).logits[b, t - (labels.shape[1] - keep)]
    assert keep < labels.shape[1] // 2
    rows = [(b, t) for b in range(2) for t in range(labels.shape[1] - 1) if labels[b, t + 1] != -100]
    assert len(rows) == 8 and logits.shape == (8, full.shape[-1])
    want = torch.stack([full[b, t] for b, t in rows])
    torch.testing.assert_close(logits, want, rtol=1e-5, atol=1e-5)
    assert targets.tolist() == [int(labels[b, t + 1]) for b, t in rows]


AUX_CLASSES = {
    "smmd": lambda v: SMMDLoss(v), "mmd": lambda v: SMMDLoss(v, mode="mmd"),
    "smooth": lambda v: SMMDLoss(v, mode="smooth"), "ntl_mse": NTLMSELoss, "ntl_was": NTLWASLoss,
    "dist2": DIST2Loss, "gce": GaussianCELoss,
}


@pytest.mark.parametrize("aux", sorted(AUX_CLASSES))
def test_objective_parts_match_an_independent_computation(aux):
    torch.manual_seed(1)
    logits = torch.randn(7, V, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([6, 12, 30, 2, 7, -100, 5])
    out = NumericObjective(NUM_IDS, NUM_VALUES, aux=aux, lam=0.7)(logits, targets)

    valid = targets != -100
    ce_rows = -torch.log_softmax(logits[valid], -1)[torch.arange(int(valid.sum())), targets[valid]]
    numeric_rows = [0, 2, 4, 6]
    sub = logits[numeric_rows][:, NUM_IDS]
    idx = torch.tensor([1, 4, 2, 0])  # 6 -> 1, 30 -> 4, 7 -> 2, 5 -> 0
    per = AUX_CLASSES[aux](NUM_VALUES)(sub, idx, reduction="none")
    assert out["n_tokens"] == 6 and out["n_numeric"] == 4
    torch.testing.assert_close(out["ce_sum"], ce_rows.sum())
    torch.testing.assert_close(out["ce"], ce_rows.mean())
    torch.testing.assert_close(out["aux_sum"], per.sum())
    torch.testing.assert_close(out["aux"], per.mean())
    torch.testing.assert_close(out["loss"], ce_rows.mean() + 0.7 * per.mean())
    assert out["ce_sum"].grad_fn is None and out["loss"].grad_fn is not None
    out["loss"].backward()
    assert torch.isfinite(logits.grad).all()


def test_denominators():
    logits = torch.randn(4, V)
    targets = torch.tensor([6, 7, 12, 13])
    obj = NumericObjective(NUM_IDS, NUM_VALUES)
    base = obj(logits, targets)
    out = obj(logits, targets, ce_denominator=10, aux_denominator=torch.tensor(5))
    torch.testing.assert_close(out["ce"], base["ce_sum"] / 10)
    torch.testing.assert_close(out["aux"], base["aux_sum"] / 5)
    zero = obj(logits, targets, ce_denominator=0, aux_denominator=torch.tensor(0))
    assert torch.isfinite(zero["loss"])


@pytest.mark.parametrize("aux", AUX_NAMES)
def test_batch_without_numeric_target_gives_zero_aux_connected(aux):
    head = nn.Linear(16, V)
    hidden = torch.randn(2, 6, 16)
    labels = torch.full((2, 6), -100)
    labels[0, 3:5] = torch.tensor([12, 13])  # text only
    logits, targets, positions = answer_logits_and_positions(hidden, labels, head)
    out = NumericObjective(NUM_IDS, NUM_VALUES, aux=aux, lam=3.0)(logits, targets, **positions)
    assert out["aux"].item() == 0.0 and out["n_numeric"] == 0 and out["aux_sum"].item() == 0.0
    assert out["aux"].grad_fn is not None
    assert out["loss"].item() == pytest.approx(out["ce"].item())
    out["loss"].backward()
    assert torch.isfinite(head.weight.grad).all()


@pytest.mark.parametrize("aux", AUX_NAMES)
def test_no_answer_position_at_all_is_zero_and_reaches_the_head(aux):
    # a data-parallel rank whose micro-batch has no labelled token must still backward through lm_head
    head = nn.Linear(16, V)
    logits, targets, positions = answer_logits_and_positions(torch.randn(2, 6, 16), torch.full((2, 6), -100), head)
    out = NumericObjective(NUM_IDS, NUM_VALUES, aux=aux)(logits, targets, **positions)
    for key in ("loss", "ce", "aux"):
        assert out[key].item() == 0.0 and not torch.isnan(out[key])
    assert out["n_tokens"] == 0 and out["n_numeric"] == 0
    out["loss"].backward()
    assert head.weight.grad is not None and (head.weight.grad == 0).all()


def test_bf16_logits():
    logits = torch.randn(5, V).to(torch.bfloat16).requires_grad_(True)
    targets = torch.tensor([6, 7, 12, 30, 5])
    obj = NumericObjective(NUM_IDS, NUM_VALUES)
    out = obj(logits, targets)
    assert out["loss"].dtype == torch.float32
    assert out["loss"].item() == obj(logits.detach().float(), targets)["loss"].item()
    out["loss"].backward()
    assert logits.grad.dtype == torch.bfloat16


def test_options_reach_the_aux_loss_and_bad_ones_fail():
    obj = NumericObjective(NUM_IDS, NUM_VALUES, aux="smmd", kernel="laplace", sigmas=(1.0, 3.0), squash=1.0,
                           alpha=0.5, kernel_mode="shuffled", seed=3)
    ref = SMMDLoss(NUM_VALUES, kernel="laplace", sigmas=(1.0, 3.0), squash=1.0, alpha=0.5,
                   kernel_mode="shuffled", seed=3)
    assert torch.equal(obj.aux_loss.A, ref.A)
    assert NumericObjective(NUM_IDS, NUM_VALUES, aux="dist2", tau=2.0).aux_loss.tau == 2.0
    with pytest.raises(ValueError, match="aux must be one of"):
        NumericObjective(NUM_IDS, NUM_VALUES, aux="focal")
    with pytest.raises(ValueError, match="ntl_mse"):
        NumericObjective(NUM_IDS, NUM_VALUES, aux="ntl_mse", sigmas=(2.0,))
    with pytest.raises(ValueError, match="fixes"):
        NumericObjective(NUM_IDS, NUM_VALUES, aux="mmd", mode="smmd")
    with pytest.raises(ValueError, match="none"):
        NumericObjective(NUM_IDS, NUM_VALUES, aux="none", kernel="gaussian")
    with pytest.raises(ValueError, match="logit width"):
        NumericObjective(NUM_IDS, NUM_VALUES)(torch.randn(2, 20), torch.tensor([1, 2]))


def test_from_vocab_on_qwen(qwen_tokenizer):
    vocab = NumericVocab.from_tokenizer(qwen_tokenizer)
    obj = NumericObjective.from_vocab(vocab, aux="smmd", lam=0.5)
    assert obj.numeric_token_ids.tolist() == list(range(15, 25)) and obj.lam == 0.5
    logits = torch.randn(3, 151936)
    out = obj(logits, torch.tensor([16, 220, 24]))
    assert out["n_numeric"] == 2
    ref = SMMDLoss(vocab.values)(logits[[0, 2]][:, 15:25], torch.tensor([1, 9]))
    torch.testing.assert_close(out["aux"], ref)


# ---------------------------------------------------------------- number-level losses and positions

DIGIT_IDS = torch.arange(15, 25)  # "0".."9" as on Qwen2.5
POINT = 13


def _digit_objective(aux, **kw):
    return NumericObjective(DIGIT_IDS, torch.arange(10.0), aux=aux, decimal_point_id=POINT, **kw)


def _number_labels():
    """Rows with "12.5", "3", "7:45" and a text-only answer (ids: digit d is 15 + d, "." 13, ":" 25)."""
    labels = torch.full((4, 9), -100)
    labels[0, 3:8] = torch.tensor([16, 17, 13, 20, 30])  # 12.5 then end-of-turn
    labels[1, 6:8] = torch.tensor([18, 30])
    labels[2, 2:7] = torch.tensor([22, 25, 19, 20, 30])
    labels[3, 5:8] = torch.tensor([40, 41, 30])
    return labels


@pytest.mark.parametrize("aux", ["ntil", "number_level"])
def test_number_level_aux_without_positions_is_a_clear_error(aux):
    logits = torch.randn(3, 40)
    with pytest.raises(ValueError, match="batch_idx and pos_idx"):
        _digit_objective(aux)(logits, torch.tensor([16, 17, 30]))


@pytest.mark.parametrize("aux", ["ntil", "number_level"])
def test_number_level_sums_add_up_over_micro_batches(aux):
    """Each number lies in one row, so the aux sum and the numeric count of a batch are those of its parts:
    dividing by the step's numeric count is exact under gradient accumulation."""
    torch.manual_seed(4)
    labels = _number_labels()
    head = nn.Linear(8, 48)
    hidden = torch.randn(4, 9, 8)
    objective = _digit_objective(aux)
    whole = objective(*answer_logits_and_positions(hidden, labels, head)[:2],
                      **answer_logits_and_positions(hidden, labels, head)[2])
    parts = [objective(*answer_logits_and_positions(hidden[rows], labels[rows], head)[:2],
                       **answer_logits_and_positions(hidden[rows], labels[rows], head)[2])
             for rows in ([0, 3], [1, 2])]
    assert whole["n_numeric"] == 7 == sum(p["n_numeric"] for p in parts)
    torch.testing.assert_close(whole["aux_sum"], parts[0]["aux_sum"] + parts[1]["aux_sum"])
    assert whole["aux_sum"] > 0


@pytest.mark.parametrize("aux", ["ntil", "number_level"])
def test_number_level_aux_is_the_per_position_sum_over_numeric_targets(aux):
    from vlm_smmd.numeric import NumericVocab

    torch.manual_seed(5)
    labels = _number_labels()
    logits, targets, positions = answer_logits_and_positions(torch.randn(4, 9, 8), labels, nn.Linear(8, 48))
    out = _digit_objective(aux, lam=0.5)(logits, targets, ce_denominator=20, aux_denominator=10, **positions)
    vocab = NumericVocab(DIGIT_IDS, torch.arange(10.0), [str(d) for d in range(10)], POINT)
    numbers = vocab.number_layout(targets, positions["batch_idx"], positions["pos_idx"])
    loss = _digit_objective(aux).aux_loss
    per = loss(logits[:, DIGIT_IDS].double(), vocab.index_of(targets).clamp_min(0), reduction="none", numbers=numbers)
    torch.testing.assert_close(out["aux_sum"].double(), per.sum(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["aux"].double(), per.sum() / 10, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["loss"], out["ce"] + 0.5 * out["aux"])


def test_token_level_path_never_waits_for_the_device(monkeypatch):
    """With positions given, a token-level aux still reads no tensor value on the host (no .item(), no
    data-dependent shapes): the guard records every such call made from our code. A number-level aux does
    wait (it finds the numbers), which shows the guard sees such calls."""
    import sys

    torch.manual_seed(6)
    labels = _number_labels()
    logits, targets, positions = answer_logits_and_positions(torch.randn(4, 9, 8), labels, nn.Linear(8, 48))
    calls = []

    def guard(name):
        original = getattr(torch.Tensor, name)

        def wrapper(self, *args, **kwargs):
            if "vlm_smmd" in sys._getframe(1).f_code.co_filename:
                calls.append(name)
            return original(self, *args, **kwargs)
        return wrapper

    objectives = {aux: _digit_objective(aux) for aux in AUX_NAMES if aux not in ("ntil", "number_level")}
    number_level = _digit_objective("number_level")
    for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "nonzero"):
        monkeypatch.setattr(torch.Tensor, name, guard(name))
    for objective in objectives.values():
        objective(logits, targets, ce_denominator=torch.tensor(20), aux_denominator=torch.tensor(9), **positions)
    assert calls == []
    number_level(logits, targets, **positions)
    assert calls


def test_lambda_and_options_are_range_checked():
    with pytest.raises(ValueError, match="aux_lambda=-1"):
        NumericObjective(NUM_IDS, NUM_VALUES, lam=-1)
    with pytest.raises(ValueError, match="aux_lambda=nan"):
        NumericObjective(NUM_IDS, NUM_VALUES, lam=float("nan"))
    with pytest.raises(ValueError, match="option squash=0"):
        NumericObjective(NUM_IDS, NUM_VALUES, squash=0)
    with pytest.raises(ValueError, match="option tau=-2"):
        NumericObjective(NUM_IDS, NUM_VALUES, aux="dist2", tau=-2.0)
