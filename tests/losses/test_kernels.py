import pytest
import torch

from tests.losses.reference import DIGITS, UNEVEN, ref_kernel
from vlm_smmd.losses.kernels import (
    build_kernel,
    distance_kernel,
    random_features,
    random_kernel,
    shuffle_permutation,
    squash_distances,
    value_distances,
)


def test_squash_is_identity_on_the_ten_digits():
    d = value_distances(DIGITS)
    assert torch.equal(squash_distances(d, 9.0), d)  # non-zero distances already span [1, 9]


def test_squash_maps_min_to_one_and_max_to_squash():
    d = value_distances(UNEVEN)
    s = squash_distances(d, 9.0)
    assert s[0, 1] == 1.0 and s[0, 6] == 9.0 and s[6, 0] == 9.0
    assert torch.equal(s.diagonal(), torch.zeros(7, dtype=torch.float64))
    # affine in between: 100 - 0 = 100 -> 1 + 99/998 * 8
    assert s[0, 5].item() == pytest.approx(1 + 99 / 998 * 8, rel=1e-12)


def test_squash_keeps_repeated_values_at_zero_and_equal_distances_at_one():
    s = squash_distances(value_distances([3.0, 3.0, 7.0]), 5.0)
    assert s.tolist() == [[0, 0, 1], [0, 0, 1], [1, 1, 0]]


@pytest.mark.parametrize("squash", [1.0, 0.5, 0.0, -3.0])
def test_squash_at_most_one_disables(squash):
    d = value_distances(UNEVEN)
    assert torch.equal(squash_distances(d, squash), d)


def test_distance_kernel_formulas():
    d = torch.tensor([[0.0, 1.5], [1.5, 0.0]], dtype=torch.float64)
    g = distance_kernel(d, "gaussian", (1.0, 3.0))
    assert g[0, 1].item() == pytest.approx((torch.exp(torch.tensor(-1.125)) + torch.exp(torch.tensor(-0.125))).item() / 2)
    lap = distance_kernel(d, "laplace", (0.5,))
    assert lap[0, 1].item() == pytest.approx(torch.exp(torch.tensor(-3.0)).item())
    assert g[0, 0] == 1.0 and lap[1, 1] == 1.0


@pytest.mark.parametrize("bad", [(), (0.0,), (-1.0, 2.0)])
def test_bad_sigmas(bad):
    with pytest.raises(ValueError, match="sigmas"):
        distance_kernel(value_distances(DIGITS), "gaussian", bad)


def test_random_kernel_is_hadamard_power_of_rademacher_gram():
    f = random_features(10, seed=3)
    assert f.shape == (10, 4)
    assert set(f.abs().flatten().tolist()) == {0.5}
    assert torch.allclose(f.norm(dim=1), torch.ones(10, dtype=torch.float64))
    k = random_kernel(10, seed=3)
    assert torch.equal(k, (f @ f.T) ** 5)
    assert torch.equal(k.diagonal(), torch.ones(10, dtype=torch.float64))
    assert set(k.flatten().tolist()) <= {1.0, -1.0, 1 / 32, -1 / 32, 0.0}
    assert torch.linalg.eigvalsh(k).min() > -1e-9  # Schur product theorem: still PSD
    assert torch.equal(k, random_kernel(10, seed=3)) and not torch.equal(k, random_kernel(10, seed=4))


def test_shuffled_permutes_the_values():
    perm = shuffle_permutation(10, 7)
    assert sorted(perm.tolist()) == list(range(10)) and perm.tolist() != list(range(10))
    k = build_kernel(torch.tensor(DIGITS), kernel_mode="shuffled", seed=7)
    base = build_kernel(torch.tensor(DIGITS))
    # token i now carries the value of token perm[i]
    assert torch.equal(k, base[perm][:, perm])


@pytest.mark.parametrize("values", [DIGITS, UNEVEN, [0.0, 5.0, 5.0, 10.0, 0.5]])
@pytest.mark.parametrize("kernel_mode", ["value_distance", "random", "shuffled"])
@pytest.mark.parametrize("kernel, sigmas, squash", [
    ("gaussian", (2.0,), 9.0), ("gaussian", (0.5, 1.0, 4.0), 1.0), ("laplace", (2.0,), 4.0),
    ("laplace", (0.7, 3.0), 9.0),
])
def test_build_kernel_matches_reference(values, kernel_mode, kernel, sigmas, squash):
    got = build_kernel(torch.tensor(values), kernel=kernel, sigmas=sigmas, squash=squash,
                       kernel_mode=kernel_mode, seed=5)
    want = torch.tensor(ref_kernel(values, kernel, sigmas, squash, kernel_mode, seed=5), dtype=torch.float64)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_build_kernel_errors():
    with pytest.raises(ValueError, match="kernel must be"):
        build_kernel(torch.tensor(DIGITS), kernel="cosine")
    with pytest.raises(ValueError, match="kernel_mode"):
        build_kernel(torch.tensor(DIGITS), kernel_mode="learned")
    with pytest.raises(ValueError, match="empty"):
        build_kernel(torch.tensor([]))
