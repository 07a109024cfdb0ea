import math

import pytest
import torch

from tests.losses.reference import DIGITS, UNEVEN, softmax
from vlm_smmd.losses import DIST2Loss, GaussianCELoss, NTLMSELoss, NTLWASLoss


def _logits(n, m=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g, dtype=torch.float64) * 2
    return x.to(dtype), torch.randint(0, n, (m,), generator=g)


def ref_ntl_mse(p, values, y):
    return (sum(pi * v for pi, v in zip(p, values)) - values[y]) ** 2


def ref_ntl_was(p, values, y):
    """W1 via the CDF form: integral of |F_p - F_q| over the sorted support."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    total, cdf_p, cdf_q = 0.0, 0.0, 0.0
    for a, b in zip(order, order[1:]):
        cdf_p += p[a]
        cdf_q += 1.0 if a == y else 0.0
        total += abs(cdf_p - cdf_q) * (values[b] - values[a])
    return total


def _soft_target(values, y, scale):
    logw = [-((v - values[y]) ** 2) / scale for v in values]
    m = max(logw)
    w = [math.exp(x - m) for x in logw]
    return [x / sum(w) for x in w]


def ref_dist2(p, values, y, tau=1.0):
    t = _soft_target(values, y, tau)
    return sum(ti * (math.log(ti) - math.log(pi)) for ti, pi in zip(t, p) if ti > 0)


def ref_gce(p, values, y, sigma=1.0):
    t = _soft_target(values, y, 2 * sigma**2)
    return -sum(ti * math.log(pi) for ti, pi in zip(t, p) if ti > 0)


CASES = [
    (NTLMSELoss, {}, ref_ntl_mse),
    (NTLWASLoss, {}, ref_ntl_was),
    (DIST2Loss, {}, ref_dist2),
    (DIST2Loss, {"tau": 4.0}, lambda p, v, y: ref_dist2(p, v, y, tau=4.0)),
    (GaussianCELoss, {}, ref_gce),
    (GaussianCELoss, {"sigma": 2.5}, lambda p, v, y: ref_gce(p, v, y, sigma=2.5)),
]


@pytest.mark.parametrize("values", [DIGITS, UNEVEN, [0.0, 5.0, 5.0, 10.0, 0.5]], ids=["digits", "uneven", "repeats"])
@pytest.mark.parametrize("cls, kw, ref", CASES)
def test_matches_formula(cls, kw, ref, values):
    loss = cls(values, **kw)
    logits, target = _logits(len(values), seed=len(values))
    want = [ref(softmax(row), values, y) for row, y in zip(logits.tolist(), target.tolist())]
    got = loss(logits, target, reduction="none")
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-5, atol=1e-5)
    assert loss(logits, target).item() == pytest.approx(sum(want) / len(want), rel=1e-5)
    assert loss(logits.float(), target).item() == pytest.approx(sum(want) / len(want), rel=1e-4)


def test_ntl_was_is_expected_absolute_error():
    # W1 to a Dirac is E_p |v - y|: an independent check of the CDF reference itself
    p = [0.1, 0.2, 0.7]
    assert ref_ntl_was(p, [0.0, 1.0, 5.0], 1) == pytest.approx(0.1 * 1 + 0.7 * 4)


def test_dist2_and_gce_differ_by_target_entropy():
    # KL(t||p) = CE(t, p) - H(t): with matching widths (tau = 2 sigma^2) they differ by a constant per target
    dist2, gce = DIST2Loss(DIGITS, tau=2.0), GaussianCELoss(DIGITS, sigma=1.0)
    logits, target = _logits(10, m=20)
    diff = gce(logits, target, reduction="none") - dist2(logits, target, reduction="none")
    for y in range(10):
        d = diff[target == y]
        if len(d) > 1:
            assert torch.allclose(d, d[0].expand_as(d))


@pytest.mark.parametrize("cls", [NTLMSELoss, NTLWASLoss, DIST2Loss, GaussianCELoss])
def test_far_values_do_not_give_nan(cls):
    # exp(-999^2) underflows to 0 in the soft targets; 0 * log 0 must count as 0
    loss = cls(UNEVEN)
    logits = torch.full((2, 7), -60.0)
    logits[:, 0] = 60.0
    out = loss(logits, torch.tensor([6, 0]))
    assert torch.isfinite(out)


@pytest.mark.parametrize("cls", [NTLMSELoss, NTLWASLoss, DIST2Loss, GaussianCELoss])
def test_empty_bf16_and_gradients(cls):
    loss = cls(UNEVEN)
    empty = torch.zeros(0, 7, requires_grad=True)
    out = loss(empty, torch.zeros(0, dtype=torch.long))
    assert out.item() == 0.0
    out.backward()

    logits, target = _logits(7, dtype=torch.bfloat16)
    assert loss(logits, target).dtype == torch.float32
    assert loss(logits, target).item() == loss(logits.float(), target).item()

    x, target = _logits(7, m=3, seed=2)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda z: loss(z, target), (x,), eps=1e-6, atol=1e-5)


def test_bad_widths():
    with pytest.raises(ValueError, match="positive"):
        DIST2Loss(DIGITS, tau=0.0)
    with pytest.raises(ValueError, match="positive"):
        GaussianCELoss(DIGITS, sigma=-1.0)
    with pytest.raises(ValueError, match=r"\[M, 10\]"):
        NTLMSELoss(DIGITS)(torch.zeros(2, 7), torch.zeros(2, dtype=torch.long))
