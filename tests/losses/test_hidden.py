"""The hidden-state V_num logits (`losses.hidden`): the custom autograd function that gives the LM head a sparse
gradient on its V_num rows matches the plain logits path in float64, and leaves `.grad` dense beside a CE."""

import pytest
import torch

from vlm_smmd.losses.hidden import _HeadRows, numeric_logits

IDS = torch.tensor([7, 3, 11, 4])  # not sorted, not contiguous: as on a Llama-3 style V_num


@pytest.fixture
def head():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 30, bias=True).double()


def test_gradcheck_in_float64(head):
    hidden = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)

    def rows(h, w, b):  # a zero dense term beside it, as the CE always reaches the head: gradcheck wants dense
        return _HeadRows.apply(h, w, b, IDS) + 0 * (w.sum() + b.sum())
    assert torch.autograd.gradcheck(rows, (hidden, head.weight, head.bias), check_undefined_grad=False)


@pytest.mark.parametrize("dense_first", [False, True])
def test_same_gradients_as_the_logits_path(head, dense_first):
    """loss = CE-like dense term over the full logits + a weighted sum of the V_num logits: equal to the
    same loss with the V_num logits taken from head(h) (the independent slow computation)."""
    hidden = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(5, len(IDS), dtype=torch.float64)
    got = []
    for path in ("hidden", "logits"):
        head.zero_grad(set_to_none=True)
        hidden.grad = None
        numeric = numeric_logits(hidden, head, IDS) if path == "hidden" else head(hidden)[:, IDS]
        dense, aux = head(hidden).logsumexp(1).sum(), (numeric * weights).sum()
        ((dense + aux) if dense_first else (aux + dense)).backward()
        got.append([numeric.detach(), hidden.grad, head.weight.grad, head.bias.grad])
    assert all(g.layout == torch.strided for g in got[0])  # the sparse rows were added into the dense grad
    for a, b in zip(*got):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_alone_the_head_gradient_is_its_vnum_rows(head):
    hidden = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    numeric_logits(hidden, head, IDS).sum().backward()
    grad = head.weight.grad.to_dense()
    others = torch.ones(30, dtype=torch.bool)
    others[IDS] = False
    assert torch.equal(grad[others], torch.zeros_like(grad[others]))
    assert torch.allclose(grad[IDS], hidden.sum(0).expand(len(IDS), -1).detach())
