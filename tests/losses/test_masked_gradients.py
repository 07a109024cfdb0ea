"""Every registered aux loss gives a finite gradient when the digit logits are -inf (a masked
vocabulary) at answer rows whose targets are not numeric, beside a numeric row; the drop-in refuses a
negative num_items_in_batch and labels that are not int64 with -100 padding, in one line."""
from types import SimpleNamespace

import pytest
import torch

from vlm_smmd.losses.hf import NumericLossFunction
from vlm_smmd.losses.objective import NumericObjective
from vlm_smmd.losses.registry import AUX_NAMES

IDS = [5, 6, 7, 8]  # the digits 0..3
VALUES = [0.0, 1.0, 2.0, 3.0]


def batch():
    """logits [1, 5, 12] and labels [1, 5]: row 0 answers "2" (numeric), rows 1-3 answer words whose
    digit logits are -inf."""
    torch.manual_seed(0)
    logits = torch.randn(1, 5, 12)
    logits[0, 1:4, IDS] = float("-inf")
    labels = torch.tensor([[-100, 7, 1, 2, 3]])
    return logits.requires_grad_(), labels


@pytest.mark.parametrize("aux", [a for a in AUX_NAMES if a != "none"])
def test_every_aux_gives_a_finite_gradient_with_masked_digit_logits(aux):
    logits, labels = batch()
    loss = NumericLossFunction(NumericObjective(IDS, VALUES, aux=aux))(SimpleNamespace(logits=logits), labels)
    loss.backward()
    assert torch.isfinite(loss)
    grad = logits.grad
    assert torch.isfinite(grad).all(), f"{aux}: {int((~torch.isfinite(grad)).sum())} non-finite gradient entries"
    assert grad[0, 0].abs().sum() > 0  # the numeric row still learns


@pytest.mark.parametrize("labels, match", [
    (torch.tensor([[-100, 7, 1, 2, 3]], dtype=torch.int32), "int64"),
    (torch.tensor([[-1, 7, 1, 2, -1]]), "-100"),
])
def test_labels_outside_the_convention_are_one_line_errors(labels, match):
    logits, _ = batch()
    with pytest.raises(ValueError, match=match):
        NumericLossFunction(NumericObjective(IDS, VALUES))(SimpleNamespace(logits=logits), labels)


def test_negative_num_items_in_batch_is_refused():
    logits, labels = batch()
    loss = NumericLossFunction(NumericObjective(IDS, VALUES))
    with pytest.raises(ValueError, match="num_items_in_batch"):
        loss(SimpleNamespace(logits=logits), labels, torch.tensor(-4))
    assert torch.isfinite(loss(SimpleNamespace(logits=logits), labels, torch.tensor(0)))
