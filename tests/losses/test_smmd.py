import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.losses.reference import DIGITS, UNEVEN, ref_kernel, ref_smmd
from vlm_smmd.losses import SMMDLoss


def _logits(n, m=7, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g, dtype=torch.float64) * 2.0
    x[0] = 0.0  # uniform prediction
    target = torch.randint(0, n, (m,), generator=g)
    x[1, target[1]] = 30.0  # nearly one-hot on the target
    return x.to(dtype), target


OPTIONS = list(itertools.product(
    ["smmd", "mmd", "smooth"],
    ["gaussian", "laplace"],
    [(2.0,), (0.5, 1.0, 4.0)],
    [9.0, 1.0, 4.0],
    ["auto", 0.3],
    ["value_distance", "random", "shuffled"],
))


@pytest.mark.parametrize("values", [DIGITS, UNEVEN], ids=["digits", "uneven"])
@pytest.mark.parametrize("mode, kernel, sigmas, squash, alpha, kernel_mode", OPTIONS)
def test_matches_dense_float64_reference(values, mode, kernel, sigmas, squash, alpha, kernel_mode):
    loss = SMMDLoss(torch.tensor(values), mode=mode, kernel=kernel, sigmas=sigmas, squash=squash, alpha=alpha,
                    kernel_mode=kernel_mode, seed=11)
    logits, target = _logits(len(values), seed=len(values))
    want = ref_smmd(logits.tolist(), target.tolist(), values, mode=mode, alpha=alpha, kernel=kernel,
                    sigmas=sigmas, squash=squash, kernel_mode=kernel_mode, seed=11)
    got64 = loss(logits, target)
    got32 = loss(logits.float(), target)
    assert got64.dtype == torch.float64 and got32.dtype == torch.float32
    # the kernel buffers are float32, so agreement is to float32 precision
    assert got64.item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert got32.item() == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_per_position_values_are_clamped_then_averaged():
    # the random control is not PSD on this set: some positions come out negative before clamping
    values = UNEVEN
    loss = SMMDLoss(values, mode="smooth", kernel_mode="random", seed=1)
    logits, target = _logits(len(values), m=40, seed=3)
    per = loss(logits, target, reduction="none")
    k = torch.tensor(ref_kernel(values, kernel_mode="random", seed=1), dtype=torch.float64)
    r = torch.softmax(logits, -1) - torch.nn.functional.one_hot(target, len(values))
    lap = torch.diag(k.sum(1)) - k
    raw = loss.alpha.double() * torch.einsum("mi,ij,mj->m", r, lap, r)
    assert (raw < 0).any() and (raw > 0).any()
    torch.testing.assert_close(per, raw.clamp_min(0), rtol=1e-5, atol=1e-7)
    assert loss(logits, target).item() == pytest.approx(per.mean().item())
    assert loss(logits, target, reduction="sum").item() == pytest.approx(per.sum().item())


def test_alpha_auto_and_buffers():
    loss = SMMDLoss(DIGITS)
    k = torch.tensor(ref_kernel(DIGITS))
    assert loss.alpha.item() == pytest.approx(1 / (2 * k.sum(1).mean().item()))
    torch.testing.assert_close(loss.degree, k.sum(1).float())
    torch.testing.assert_close(loss.L, (torch.diag(k.sum(1)) - k).float())
    assert SMMDLoss(DIGITS, alpha=0.25).alpha.item() == 0.25
    names = {n for n, _ in loss.named_buffers()}
    assert {"values", "K", "degree", "L", "alpha", "A"} <= names
    assert loss.state_dict() == {}  # derived from the values, never saved into checkpoints
    moved = SMMDLoss(DIGITS).to(torch.float64)
    assert moved.K.dtype == torch.float64 and moved.alpha.dtype == torch.float64


@pytest.mark.parametrize("kw, match", [
    ({"mode": "wasserstein"}, "mode"), ({"kernel": "cosine"}, "kernel"), ({"alpha": "half"}, "alpha"),
    ({"kernel_mode": "learned"}, "kernel_mode"), ({"sigmas": ()}, "sigmas"),
])
def test_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        SMMDLoss(DIGITS, **kw)


def test_bad_shapes():
    loss = SMMDLoss(DIGITS)
    with pytest.raises(ValueError, match=r"\[M, 10\]"):
        loss(torch.zeros(3, 9), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="target"):
        loss(torch.zeros(3, 10), torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize("mode", ["smmd", "mmd", "smooth"])
def test_empty_numeric_set_is_zero_and_connected(mode):
    loss = SMMDLoss(DIGITS, mode=mode)
    logits = torch.zeros(0, 10, requires_grad=True)
    out = loss(logits, torch.zeros(0, dtype=torch.long))
    assert out.item() == 0.0 and not torch.isnan(out)
    out.backward()
    assert logits.grad.shape == (0, 10)


def test_bf16_input_is_computed_in_float32():
    loss = SMMDLoss(UNEVEN)
    logits, target = _logits(len(UNEVEN), dtype=torch.bfloat16)
    logits.requires_grad_(True)
    out = loss(logits, target)
    assert out.dtype == torch.float32
    assert out.item() == loss(logits.detach().float(), target).item()
    out.backward()
    assert logits.grad.dtype == torch.bfloat16 and torch.isfinite(logits.grad.float()).all()


@pytest.mark.parametrize("mode", ["smmd", "mmd", "smooth"])
@pytest.mark.parametrize("values", [DIGITS, UNEVEN], ids=["digits", "uneven"])
def test_gradients_match_finite_differences(mode, values):
    loss = SMMDLoss(values, mode=mode, sigmas=(1.0, 3.0))
    logits, target = _logits(len(values), m=4, seed=5)
    logits[1] = torch.randn(len(values), dtype=torch.float64)  # keep every position away from the clamp
    logits.requires_grad_(True)
    assert (loss(logits, target, reduction="none") > 1e-6).all()
    assert torch.autograd.gradcheck(lambda x: loss(x, target), (logits,), eps=1e-6, atol=1e-6)


# --- properties (hypothesis), on the ten digits with the value-distance kernel, in float64 ---

CONFIGS = st.sampled_from(list(itertools.product(
    ["smmd", "mmd", "smooth"], ["gaussian", "laplace"], [(2.0,), (0.5, 1.0, 4.0)], ["auto", 0.3])))
PROBS = st.lists(st.floats(0.0, 1.0), min_size=10, max_size=10).filter(lambda p: sum(p) > 1e-3)


def _module(config):
    mode, kernel, sigmas, alpha = config
    return SMMDLoss(DIGITS, mode=mode, kernel=kernel, sigmas=sigmas, alpha=alpha).double()


@settings(max_examples=60, deadline=None)
@given(config=CONFIGS, raw=st.lists(st.floats(-30, 30), min_size=30, max_size=30),
       target=st.lists(st.integers(0, 9), min_size=3, max_size=3))
def test_property_nonnegative(config, raw, target):
    loss = _module(config)
    logits = torch.tensor(raw, dtype=torch.float64).reshape(3, 10)
    assert (loss(logits, torch.tensor(target), reduction="none") >= 0).all()


@settings(max_examples=60, deadline=None)
@given(config=CONFIGS, p=PROBS, y=st.integers(0, 9))
def test_property_zero_iff_one_hot_target(config, p, y):
    loss = _module(config)
    probs = torch.tensor(p, dtype=torch.float64)
    probs = (probs / probs.sum())[None]
    target = torch.tensor([y])
    assert loss.divergence(torch.nn.functional.one_hot(target, 10).double(), target).item() == 0.0
    gap = (probs[0] - torch.nn.functional.one_hot(target, 10)[0]).abs().max().item()
    value = loss.divergence(probs, target).item()
    if gap > 1e-3:
        assert value > 0
    # and through logits: a prediction sharply on the target costs ~0
    sharp = torch.full((1, 10), -40.0, dtype=torch.float64)
    sharp[0, y] = 40.0
    assert loss(sharp, target).item() < 1e-20


@settings(max_examples=80, deadline=None)
@given(kernel=st.sampled_from(["gaussian", "laplace"]), sigmas=st.sampled_from([(2.0,), (0.5, 1.0, 4.0)]),
       values=st.sampled_from([DIGITS, UNEVEN]), data=st.data())
def test_property_mmd_grows_with_value_distance_for_one_hot_predictions(kernel, sigmas, values, data):
    n = len(values)
    y, j, k = (data.draw(st.integers(0, n - 1)) for _ in range(3))
    if abs(values[j] - values[y]) >= abs(values[k] - values[y]):
        j, k = k, j
    loss = SMMDLoss(values, mode="mmd", kernel=kernel, sigmas=sigmas).double()
    eye = torch.eye(n, dtype=torch.float64)
    target = torch.tensor([y])
    near, far = (loss.divergence(eye[i][None], target).item() for i in (j, k))
    if abs(values[j] - values[y]) < abs(values[k] - values[y]):
        assert near < far
    else:
        assert near == pytest.approx(far)


def test_smmd_on_one_hot_predictions_is_mmd_plus_degree_term():
    """For p = onehot(j): SMMD = (1 - alpha)(2 - 2 K_jy) + alpha (deg_j + deg_y).

    The MMD part grows with |v_j - v_y|; the smoothness part depends on the degrees too, so near the ends
    of the value range SMMD is not monotone in the distance (e.g. target 0: predicting 9 costs less than 8).
    """
    loss = SMMDLoss(DIGITS).double()
    k, deg, a = loss.K, loss.degree, loss.alpha
    eye = torch.eye(10, dtype=torch.float64)
    for y in range(10):
        got = loss.divergence(eye, torch.full((10,), y))
        want = (1 - a) * (2 - 2 * k[:, y]) + a * (deg + deg[y])
        want[y] = 0.0
        torch.testing.assert_close(got, want)
    got = loss.divergence(eye, torch.zeros(10, dtype=torch.long))
    assert (got[1:5].diff() > 0).all() and got[9] < got[8]
