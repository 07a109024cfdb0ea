"""The `NumericLoss` contract, checked on every registered loss, and every name through the objective."""

import pytest
import torch

from vlm_smmd.losses import AUX_NAMES, NumericLoss, NumericObjective, build_loss
from vlm_smmd.numeric import NumericVocab

LOSS_NAMES = [name for name in AUX_NAMES if name != "none"]
VALUES = [float(d) for d in range(10)]
DIGITS = [str(d) for d in range(10)]
POINT = 13  # the "." token; digit d is token 15 + d, as on Qwen2.5


def _rows():
    """Targets [M] (token ids) and positions of "12.5", "7", "30" (rows 0, 0, 1) and a text token."""
    targets = torch.tensor([16, 17, POINT, 20, 99, 22, 18, 15])
    batch_idx = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1])
    pos_idx = torch.tensor([3, 4, 5, 6, 7, 9, 2, 3])
    return targets, batch_idx, pos_idx


def _numbers():
    vocab = NumericVocab(torch.arange(15, 25), torch.tensor(VALUES), DIGITS, POINT)
    targets, batch_idx, pos_idx = _rows()
    return vocab.index_of(targets).clamp_min(0), vocab.number_layout(targets, batch_idx, pos_idx)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_contract(name):
    loss = build_loss(name, VALUES)
    assert isinstance(loss, NumericLoss) and len(loss) == 10
    assert loss.values.dtype == torch.float32 and loss.values.tolist() == VALUES
    assert loss.state_dict() == {}  # buffers are not persistent: checkpoints hold no loss state
    index, numbers = _numbers()
    m = len(index)
    kw = {"numbers": numbers}
    logits = torch.randn(m, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    per = loss.per_position(logits, index, **kw)
    assert per.shape == (m,) and per.dtype == torch.float64 and torch.isfinite(per).all() and (per >= 0).all()
    assert loss.per_position(logits.float(), index, **kw).dtype == torch.float32
    assert loss.per_position(logits.bfloat16(), index, **kw).dtype == torch.float32
    torch.testing.assert_close(loss(logits, index, reduction="none", **kw), per)
    torch.testing.assert_close(loss(logits, index, reduction="sum", **kw), per.sum())
    counted = int((numbers.number >= 0).sum()) if loss.needs_numbers else m  # rows outside numbers score 0
    torch.testing.assert_close(loss(logits, index, **kw), per.sum() / counted)
    if loss.needs_numbers:
        assert (per[numbers.number < 0] == 0).all()
        with pytest.raises(ValueError, match="scores whole numbers"):
            loss.per_position(logits, index)
    with pytest.raises(ValueError, match=r"\[M, 10\]"):
        loss.per_position(torch.zeros(m, 7), index, **kw)
    with pytest.raises(ValueError, match="target must be"):
        loss.per_position(logits, index[:-1], **kw)
    with pytest.raises(ValueError, match="reduction"):
        loss(logits, index, reduction="max", **kw)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_loss_follows_the_logits_device_and_dtype(name):
    loss = build_loss(name, VALUES).to(torch.float64)  # buffers may be moved; the math follows the logits
    index, numbers = _numbers()
    logits = torch.randn(len(index), 10)
    assert loss.per_position(logits, index, numbers=numbers).dtype == torch.float32


@pytest.mark.parametrize("name", AUX_NAMES)
def test_every_name_gives_a_finite_loss_and_gradient_through_the_objective(name):
    torch.manual_seed(2)
    targets, batch_idx, pos_idx = _rows()
    logits = (torch.randn(len(targets), 120) * 3).requires_grad_(True)
    objective = NumericObjective(torch.arange(15, 25), VALUES, aux=name, lam=0.5, decimal_point_id=POINT)
    out = objective(logits, targets, batch_idx=batch_idx, pos_idx=pos_idx)
    assert out["n_tokens"] == 8 and out["n_numeric"] == (0 if name == "none" else 6)  # "none" counts none
    assert torch.isfinite(out["loss"]) and (out["aux"] > 0) == (name != "none")
    out["loss"].backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
