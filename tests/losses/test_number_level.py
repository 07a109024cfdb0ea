"""NTIL and the number-level loss against slow float64 references written from their formulas, and the
number-level loss against ntloss's NumberLevelLoss where ntloss is installed."""

import math
import random

import pytest
import torch

from tests.losses.reference import softmax
from tests.test_numeric import NUMERIC_TEXTS, _random_rows, _vocab, reference_numbers
from vlm_smmd.losses import NTILLoss, NumberLevelLoss

VALUES = [float(t) for t in NUMERIC_TEXTS]


def _case(seed):
    """Random rows of numeric, "." and text tokens; logits [M, N] over V_num; the reference numbers."""
    rows = _random_rows(seed)
    flat = [(row, pos, tid) for row in rows for pos, tid in rows[row].items()]
    random.Random(seed).shuffle(flat)
    targets = torch.tensor([t for _, _, t in flat], dtype=torch.long)
    vocab = _vocab()
    layout = vocab.number_layout(targets, torch.tensor([r for r, _, _ in flat], dtype=torch.long),
                                 torch.tensor([p for _, p, _ in flat], dtype=torch.long))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(flat), len(VALUES), generator=g, dtype=torch.float64) * 2
    index = vocab.index_of(targets).clamp_min(0)
    where = {(r, p): i for i, (r, p, _) in enumerate(flat)}
    return logits, index, layout, where, reference_numbers(rows)


def ref_number_level(logits, index, where, numbers):
    out = [0.0] * len(logits)
    for tokens, value in numbers:
        predicted, wanted = 0.0, 0.0
        for row, pos, place, _ in tokens:
            i = where[row, pos]
            predicted += sum(p * v for p, v in zip(softmax(logits[i]), VALUES)) * float(place)
            wanted += VALUES[index[i]] * float(place)
        assert wanted == pytest.approx(float(value), rel=1e-12)
        denominator = abs(predicted) + abs(wanted)
        loss = abs(predicted - wanted) / denominator if denominator else 0.0
        for row, pos, _, _ in tokens:
            out[where[row, pos]] = loss
    return out


def ref_ntil(logits, index, where, numbers, digit_exp=1.2, digit_alpha=1.0, abs_alpha=0.2, mag_alpha=0.2):
    out = [0.0] * len(logits)
    for tokens, _ in numbers:
        predicted, wanted = 0.0, 0.0
        for row, pos, place, after in tokens:
            i = where[row, pos]
            p, y = softmax(logits[i]), VALUES[index[i]]
            emd = sum(pi * abs(v - y) for pi, v in zip(p, VALUES))
            out[i] = digit_alpha * digit_exp**after * emd
            argmax = max(range(len(p)), key=lambda j: logits[i][j])
            predicted += VALUES[argmax] * float(place)
            wanted += y * float(place)
        high, low = max(predicted, wanted), min(predicted, wanted)
        sequence = abs_alpha * abs(predicted - wanted) / (high + 1) + mag_alpha * math.log((high + 1) / (low + 1))
        for row, pos, _, _ in tokens:
            out[where[row, pos]] += sequence
    return out


@pytest.mark.parametrize("seed", range(12))
def test_number_level_matches_the_float64_reference(seed):
    logits, index, layout, where, numbers = _case(seed)
    got = NumberLevelLoss(VALUES).per_position(logits, index, layout)
    want = ref_number_level(logits.tolist(), index.tolist(), where, numbers)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    got32 = NumberLevelLoss(VALUES).per_position(logits.float(), index, layout)
    torch.testing.assert_close(got32.double(), got, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("options", [{}, {"digit_exp": 2.0, "digit_alpha": 0.5, "abs_alpha": 1.0, "mag_alpha": 0.7}])
def test_ntil_matches_the_float64_reference(seed, options):
    logits, index, layout, where, numbers = _case(seed)
    got = NTILLoss(VALUES, **options).per_position(logits, index, layout)
    want = ref_ntil(logits.tolist(), index.tolist(), where, numbers, **options)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-12)


def _digits_case():
    """One row "12.5 3" over Qwen-like digits (digit d = token 15 + d, "." = 13, space = 220)."""
    from vlm_smmd.numeric import NumericVocab

    vocab = NumericVocab(torch.arange(15, 25), torch.arange(10.0), [str(d) for d in range(10)], 13)
    targets = torch.tensor([16, 17, 13, 20, 220, 18])
    layout = vocab.number_layout(targets, torch.zeros(6, dtype=torch.long), torch.arange(6))
    return vocab.index_of(targets).clamp_min(0), layout


def test_ntil_token_term_gradient_and_straight_through_sequence_gradient():
    index, layout = _digits_case()
    x = torch.randn(6, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    token_only = NTILLoss(torch.arange(10.0), abs_alpha=0.0, mag_alpha=0.0)
    assert torch.autograd.gradcheck(lambda z: token_only(z, index, numbers=layout), (x,), eps=1e-6, atol=1e-6)
    # the whole-number terms reach every digit of a wrong number through the soft straight-through values
    logits = torch.full((6, 10), -5.0, dtype=torch.float64)
    logits[torch.arange(6), (index + 3) % 10] = 5.0  # every digit predicted 3 too high
    logits.requires_grad_(True)
    NTILLoss(torch.arange(10.0), digit_alpha=0.0)(logits, index, numbers=layout).backward()
    assert (logits.grad[[0, 1, 3, 5]].abs().sum(1) > 0).all() and (logits.grad[[2, 4]] == 0).all()


def test_ntil_and_number_level_are_zero_when_each_digit_is_right():
    index, layout = _digits_case()
    logits = torch.full((6, 10), -30.0)
    logits[torch.arange(6), index] = 30.0
    assert NumberLevelLoss(torch.arange(10.0))(logits, index, numbers=layout) < 1e-6
    assert NTILLoss(torch.arange(10.0))(logits, index, numbers=layout) < 1e-6


def test_long_digit_strings_stay_finite():
    """600 nines: place values up to 10**599 and NTIL's place weight 1.2**599 overflow float32 unless capped
    (NTIL) or taken relative to the leading place (number_level)."""
    from vlm_smmd.numeric import NumericVocab

    vocab = NumericVocab(torch.arange(15, 25), torch.arange(10.0), [str(d) for d in range(10)], 13)
    targets = torch.full((600,), 24)
    layout = vocab.number_layout(targets, torch.zeros(600, dtype=torch.long), torch.arange(600))
    logits = torch.randn(600, 10, requires_grad=True)
    for loss in (NTILLoss(torch.arange(10.0)), NumberLevelLoss(torch.arange(10.0))):
        value = loss(logits, vocab.index_of(targets), numbers=layout)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(logits.grad).all()
        logits.grad = None


def test_number_level_equals_ntloss_number_level_loss():
    """ntloss's NumberLevelLoss (float_level=True, reweigh=False) gives each number's loss at its first
    digit; ours gives it at every digit of the number."""
    ntloss = pytest.importorskip("ntloss", reason="ntloss is not installed (pip install ntloss)")
    from vlm_smmd.families.tokenizers import build_qwen_tokenizer
    from vlm_smmd.numeric import NumericVocab

    tokenizer = build_qwen_tokenizer()  # ntloss may add tokens to the tokenizer it is given
    vocab = NumericVocab.from_tokenizer(tokenizer)
    texts = ["The total is 1234.56 and 7 more.", "0.25 or 30, then 1300.", "no number here", "0 and 00 and 9.5"]
    rows = [tokenizer(t, add_special_tokens=False).input_ids for t in texts]
    width, v = max(map(len, rows)), 151936
    labels = torch.full((len(rows), width), -100)
    for i, ids in enumerate(rows):
        labels[i, :len(ids)] = torch.tensor(ids)
    logits = torch.randn(len(rows), width, v, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    logits[..., vocab.token_ids] *= 3
    reference = ntloss.NumberLevelLoss(tokenizer, vocab_size=v, float_level=True, reweigh=False)
    theirs = reference(logits, labels, reduction="none")  # [B, T]

    batch_idx, pos_idx = (labels != -100).nonzero(as_tuple=True)
    targets = labels[batch_idx, pos_idx]
    layout = vocab.number_layout(targets, batch_idx, pos_idx)
    ours = NumberLevelLoss(vocab.values).per_position(logits[batch_idx, pos_idx][:, vocab.token_ids],
                                                     vocab.index_of(targets).clamp_min(0), layout)
    firsts = (layout.slot == 0) & (layout.number >= 0)
    assert int(firsts.sum()) == layout.count == 8 == int((theirs != 0).sum())
    torch.testing.assert_close(ours[firsts], theirs[batch_idx, pos_idx][firsts], rtol=1e-6, atol=1e-9)
    assert ours[firsts].min() > 0
    first_of = torch.zeros(layout.count, dtype=torch.float64)
    first_of[layout.number[firsts]] = ours[firsts]
    inside = layout.number >= 0
    assert torch.equal(ours[inside], first_of[layout.number[inside]])  # every digit carries its number's loss
    assert (ours[~inside] == 0).all()
