"""Scores against ground truth: finite Markov chains (exact singular values), Theorem 1."""

import numpy as np
import pytest
import torch

from dpnets import scores
from dpnets.systems import MarkovChain

F64 = torch.float64


def _chain_pairs(chain):
    """All (i, j) one-hot pairs weighted by pi_i P_ij: empirical = population covariances."""
    n = chain.n_states
    pi = chain.stationary_distribution()
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    x = torch.tensor(np.eye(n)[i.ravel()], dtype=F64)
    y = torch.tensor(np.eye(n)[j.ravel()], dtype=F64)
    w = torch.tensor((pi[:, None] * chain.P).ravel(), dtype=F64)
    return x, y, w


@pytest.mark.parametrize("n_states", [5, 8])
def test_projection_score_equals_sum_of_squared_singular_values(n_states):
    chain = MarkovChain.random(n_states, seed=n_states, reversible=False)
    sv = chain.svals()
    assert not np.allclose(sv, np.abs(chain.eigvals()))  # really non-normal
    x, y, w = _chain_pairs(chain)
    p0 = scores.projection_score(x, y, weights=w).item()
    assert abs(p0 - np.sum(sv**2)) < 1e-8


def test_theorem1_bounds_on_random_features():
    chain = MarkovChain.random(7, seed=11)
    sv = chain.svals()
    x, y, w = _chain_pairs(chain)
    rng = np.random.default_rng(0)
    for r in (1, 2, 3, 5):
        for _ in range(20):
            a = torch.tensor(rng.normal(size=(7, r)), dtype=F64)
            b = torch.tensor(rng.normal(size=(7, r)), dtype=F64)
            fx, fy = x @ a, y @ b
            s0 = scores.relaxed_score(fx, fy, weights=w).item()
            p0 = scores.projection_score(fx, fy, weights=w).item()
            assert s0 <= p0 + 1e-10
            assert p0 <= np.sum(sv[:r] ** 2) + 1e-10


def test_equality_at_singular_functions():
    chain = MarkovChain.random(6, seed=5)
    pi = chain.stationary_distribution()
    d = np.sqrt(pi)
    k = d[:, None] * chain.P / d[None, :]  # T on L2(pi) in an orthonormal basis
    u, s, vt = np.linalg.svd(k)
    r = 3
    left = u[:, :r] / d[:, None]  # singular functions, orthonormal in L2(pi)
    right = vt[:r].T / d[:, None]
    x, y, w = _chain_pairs(chain)
    fx, fy = x @ torch.tensor(left), y @ torch.tensor(right)
    target = np.sum(s[:r] ** 2)
    assert abs(scores.projection_score(fx, fy, weights=w).item() - target) < 1e-10
    assert abs(scores.relaxed_score(fx, fy, weights=w).item() - target) < 1e-10
    # at C = I the metric distortion vanishes: P^gamma = P^0 for any gamma
    assert abs(scores.projection_score(fx, fy, 5.0, weights=w).item() - target) < 1e-9


def test_metric_distortion():
    eye = torch.eye(4, dtype=F64)
    assert abs(scores.metric_distortion(eye).item()) < 1e-14
    c = torch.diag(torch.tensor([0.5, 1.0, 2.0, 3.0], dtype=F64))
    lam = np.array([0.5, 1.0, 2.0, 3.0])
    assert abs(scores.metric_distortion(c).item() - np.sum(lam**2 - lam - np.log(lam))) < 1e-12
    # singular: finite value, finite gradient pushing the null direction up
    sing = torch.diag(torch.tensor([0.0, 1.0, 1.0], dtype=torch.float32)).requires_grad_()
    val = scores.metric_distortion(sing)
    val.backward()
    assert torch.isfinite(val) and torch.isfinite(sing.grad).all()
    assert sing.grad[0, 0] < 0


def test_vamp2_equals_uncentred_projection_score_with_constant():
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.normal(size=(500, 3)) + 1.5, dtype=F64)
    y = torch.tensor(rng.normal(size=(500, 3)) - 0.5, dtype=F64) + 0.5 * x
    one = torch.ones(500, 1, dtype=F64)
    p = scores.projection_score(torch.cat([one, x], 1), torch.cat([one, y], 1)).item()
    assert abs(scores.vamp_score(x, y, p=2).item() - p) < 1e-10
    # VAMP-1 >= VAMP-2 when all canonical correlations are <= 1
    assert scores.vamp_score(x, y, p=1).item() >= scores.vamp_score(x, y, p=2).item() - 1e-12


def test_vamp1_is_one_plus_sum_of_canonical_correlations():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 2))
    y = x @ np.array([[0.9, 0.0], [0.0, 0.3]]) + 0.1 * rng.normal(size=(400, 2))
    xc, yc = x - x.mean(0), y - y.mean(0)
    cx, cy, cxy = xc.T @ xc / 400, yc.T @ yc / 400, xc.T @ yc / 400
    wx = np.linalg.inv(np.linalg.cholesky(cx))
    wy = np.linalg.inv(np.linalg.cholesky(cy))
    ref = 1 + np.linalg.svd(wx @ cxy @ wy.T, compute_uv=False).sum()
    got = scores.vamp_score(torch.tensor(x), torch.tensor(y), p=1).item()
    assert abs(got - ref) < 1e-10


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, y: scores.projection_score(x, y, 0.3),
        lambda x, y: scores.relaxed_score(x, y, 0.3),
        lambda x, y: scores.vamp_score(x, y, 1),
        lambda x, y: scores.vamp_score(x, y, 2, 0.1),
        lambda x, y: scores.metric_distortion(scores.covariances(x)[0] + scores.covariances(y)[0]),
    ],
)
def test_gradcheck_float64(fn):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 4, dtype=F64, generator=g, requires_grad=True)
    y = torch.randn(30, 4, dtype=F64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (x, y))


@pytest.mark.parametrize("name", scores.SCORES)
def test_rank_deficient_float32_gradients_finite(name):
    g = torch.Generator().manual_seed(0)
    base = torch.randn(64, 3, generator=g)
    # 8 features spanning a 3-dimensional space, plus an all-zero feature
    x = torch.cat([base, base @ torch.randn(3, 4, generator=g), torch.zeros(64, 1)], 1)
    x = x.requires_grad_()
    loss = scores.make_loss(name, gamma=1.0)(x, x.roll(1, 0))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(x.grad).all()


def test_losses_are_negative_scores_and_unknown_name_raises():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(50, 3, generator=g), torch.randn(50, 3, generator=g)
    assert torch.isclose(scores.ProjectionLoss(0.5)(x, y), -scores.projection_score(x, y, 0.5))
    assert torch.isclose(scores.RelaxedLoss(0.5)(x, y), -scores.relaxed_score(x, y, 0.5))
    assert torch.isclose(scores.VAMPLoss(2)(x, y), -scores.vamp_score(x, y, 2))
    with pytest.raises(ValueError, match="unknown score"):
        scores.make_loss("vamp3")


def test_covariances_centering_and_weights():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]], dtype=F64)
    cx, cy, cxy = scores.covariances(x, 2 * x)
    np.testing.assert_allclose(cx.numpy(), x.numpy().T @ x.numpy() / 3)
    np.testing.assert_allclose(cxy.numpy(), 2 * cx.numpy())
    np.testing.assert_allclose(cy.numpy(), 4 * cx.numpy())
    cc, _, _ = scores.covariances(x, center=True)
    np.testing.assert_allclose(cc.numpy(), np.cov(x.numpy().T, bias=True))
    w = torch.tensor([2.0, 1.0, 1.0], dtype=F64)
    cw, _, _ = scores.covariances(x, weights=w)
    xx = torch.cat([x[:1], x], 0)
    np.testing.assert_allclose(cw.numpy(), scores.covariances(xx)[0].numpy())


# --------------------------------------------- the GPU path (Cholesky) against today's

_OBJECTIVES = {
    "projection": lambda x, y: scores.projection_score(x, y, 0.3, constant=True),
    "projection, shared": lambda x, y: scores.projection_score(x, x, 0.3),
    "vamp1": lambda x, y: scores.vamp_score(x, y, 1, 0.2, constant=True),
    "vamp2": lambda x, y: scores.vamp_score(x, y, 2, 0.2, constant=True),
    "relaxed": lambda x, y: scores.relaxed_score(x, y, 0.2, constant=True),
    "generator": lambda x, y: scores.GeneratorLoss(0.2, constant=True)(x, y),
    "metric distortion": lambda x, y: scores.metric_distortion(
        scores.covariances(x)[0] + scores.covariances(y)[0]
    ),
    "consistency": lambda x, y: scores.multistep_penalty(
        x, torch.stack([y, 0.5 * y + 0.1 * x], 1), constant=True
    ),
}


def _pair_data(n, r, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, r, generator=g, dtype=F64) + 0.3
    y = 0.7 * x + torch.randn(n, r, generator=g, dtype=F64)
    return x.to(dtype), y.to(dtype)


def _value_and_grads(fn, x, y, method):
    from dpnets.linalg import spectral_method

    x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
    with spectral_method(method):
        s = fn(x, y)
    s.backward()
    zero = torch.zeros_like(x)
    return s.detach(), x.grad, zero if y.grad is None else y.grad


@pytest.mark.parametrize("r", [3, 8, 64])
@pytest.mark.parametrize("name", list(_OBJECTIVES))
def test_cholesky_path_equals_eigendecomposition(name, r):
    """Every objective by Cholesky (the GPU path) equals the eigendecomposition's (today's,
    the CPU path): values to 1e-10 and gradients to 1e-9 in float64, values to float32
    round-off in float32."""
    fn = _OBJECTIVES[name]
    x, y = _pair_data(2000, r, F64)
    s0, gx0, gy0 = _value_and_grads(fn, x, y, "eigh")
    s1, gx1, gy1 = _value_and_grads(fn, x, y, "cholesky")
    assert abs(float(s1 - s0)) < 1e-10 * max(1.0, abs(float(s0)))
    torch.testing.assert_close(gx1, gx0, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(gy1, gy0, rtol=1e-9, atol=1e-12)
    x32, y32 = x.float(), y.float()
    s0, gx0, _ = _value_and_grads(fn, x32, y32, "eigh")
    s1, gx1, _ = _value_and_grads(fn, x32, y32, "cholesky")
    assert abs(float(s1) - float(s0)) <= 4 * torch.finfo(torch.float32).eps * max(
        1.0, abs(float(s0))
    )
    torch.testing.assert_close(gx1, gx0, rtol=1e-5, atol=1e-6)


def test_cholesky_projection_score_against_numpy():
    """P^gamma of [1, psi] by Cholesky against numpy's pseudo-inverses and eigenvalues."""
    from dpnets.linalg import spectral_method

    x, y = _pair_data(3000, 5, F64, seed=3)
    one = np.ones((3000, 1))
    fx, fy = np.hstack([one, x.numpy()]), np.hstack([one, y.numpy()])
    cx, cy, cxy = fx.T @ fx / 3000, fy.T @ fy / 3000, fx.T @ fy / 3000
    p0 = np.sum((np.linalg.pinv(cx) @ cxy) * (cxy @ np.linalg.pinv(cy)))

    def dist(c):
        lam = np.linalg.eigvalsh(c)
        return np.sum(lam**2 - lam - np.log(lam))

    ref = p0 - 0.3 * (dist(cx) + dist(cy)) / (2 * 6)
    with spectral_method("cholesky"):
        got = scores.projection_score(x, y, 0.3, constant=True).item()
    assert abs(got - ref) < 1e-10 * abs(ref)


@pytest.mark.parametrize(
    "name", ["projection", "vamp1", "vamp2", "relaxed", "generator", "consistency"]
)
def test_cholesky_path_gradcheck_float64(name):
    from dpnets.linalg import spectral_method

    g = torch.Generator().manual_seed(0)
    x = torch.randn(30, 4, dtype=F64, generator=g, requires_grad=True)
    y = torch.randn(30, 4, dtype=F64, generator=g, requires_grad=True)
    with spectral_method("cholesky"):
        assert torch.autograd.gradcheck(_OBJECTIVES[name], (x, y))


@pytest.mark.parametrize("name", scores.SCORES)
def test_cholesky_path_rank_deficient_float32_finite(name):
    """Rank-deficient features on the GPU path: not certified, the finite surrogate."""
    from dpnets.linalg import spectral_method

    g = torch.Generator().manual_seed(0)
    base = torch.randn(64, 3, generator=g)
    x = torch.cat([base, base @ torch.randn(3, 4, generator=g), torch.zeros(64, 1)], 1)
    x = x.requires_grad_()
    with spectral_method("cholesky"):
        loss = scores.make_loss(name, gamma=1.0, constant=True)(x, x.roll(1, 0))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("gamma", [0.0, 0.2])
def test_relaxed_score_on_the_gpu_path_decomposes_nothing_by_eigh(monkeypatch, gamma):
    """The relaxed score's operator norms on the GPU path come from repeated squaring: no
    ``eigh`` (a host synchronisation on a GPU) is called, and the value is eigh's."""
    from dpnets.linalg import spectral_method

    x, y = _pair_data(1000, 6, F64, seed=2)
    w = torch.rand(1000, generator=torch.Generator().manual_seed(3), dtype=F64)
    ref = scores.relaxed_score(x, y, gamma, constant=True)
    ref_w = scores.relaxed_score(x, y, gamma, constant=True, weights=w)  # the unfused path

    def refuse(*args, **kwargs):
        raise AssertionError("eigh called on the GPU path")

    for name in ("eigh", "eigvalsh", "svd", "svdvals", "eig", "eigvals"):
        monkeypatch.setattr(torch.linalg, name, refuse)
    with spectral_method("cholesky"):
        got = scores.relaxed_score(x, y, gamma, constant=True)
        got_w = scores.relaxed_score(x, y, gamma, constant=True, weights=w)
    assert abs(float(got - ref)) < 1e-12 * abs(float(ref))
    assert abs(float(got_w - ref_w)) < 1e-12 * abs(float(ref_w))
    assert abs(float(got_w - got)) > 1e-4  # the weights matter


def test_cholesky_path_repeated_eigenvalues_finite_gradients():
    """Whitened features (Cov([1, psi]) = I: every eigenvalue repeated): the gradients of
    both paths are finite and equal."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(500, 4, generator=g, dtype=F64)
    z = torch.cat([torch.ones(500, 1, dtype=F64), z], 1)
    q, _ = torch.linalg.qr(z)
    x = (q[:, 1:] * np.sqrt(500)).contiguous()  # [1, x] orthonormal: Cov = I exactly
    y = x.roll(1, 0)
    fn = _OBJECTIVES["projection"]
    s0, gx0, _ = _value_and_grads(fn, x, y, "eigh")
    s1, gx1, _ = _value_and_grads(fn, x, y, "cholesky")
    assert torch.isfinite(gx1).all() and torch.isfinite(gx0).all()
    torch.testing.assert_close(gx1, gx0, rtol=1e-8, atol=1e-10)
    assert abs(float(s1 - s0)) < 1e-10


def _frozen_projection(x, y, gamma, constant):
    """P^gamma through the unfused path (covariances, then the generic spectral maps):
    the formulas of main before issue 32."""
    if constant:
        x, y = scores.with_constant(x), scores.with_constant(y)
    return scores.projection_score_from_covariances(*scores.covariances(x, y), gamma)


@pytest.mark.parametrize("case", ["random", "rank-deficient", "small", "shared"])
@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_fused_projection_score_equals_the_unfused_formulas(case, dtype):
    """The fused P^gamma (one Gram matrix, one autograd function, eigh on the CPU) against
    the unfused formulas, cut-offs active included (rank-deficient features; eigenvalues
    all below 1, where the clamp of ``ln`` and the pseudo-inverse's cut-off differ):
    float64 values to 1e-10 and gradients to 1e-9, float32 to round-off."""
    g = torch.Generator().manual_seed(7)
    base = torch.randn(300, 3, generator=g, dtype=F64)
    if case == "rank-deficient":
        x = torch.cat([base, base @ torch.randn(3, 2, generator=g, dtype=F64)], 1)
        x = torch.cat([x, torch.zeros(300, 1, dtype=F64)], 1)
    elif case == "small":
        x = 1e-4 * base
    else:
        x = base + 0.5
    y = x.roll(1, 0) + 0.1 * torch.randn(x.shape, generator=g, dtype=F64)
    if case == "shared":
        y = x
    x, y = x.to(dtype), y.to(dtype)
    from dpnets.linalg import spectral_method

    for constant in (False, True):
        xa, ya = x.clone().requires_grad_(), y.clone().requires_grad_()
        xb, yb = x.clone().requires_grad_(), y.clone().requires_grad_()
        with spectral_method("eigh"):  # the CPU path, also where CUDA is the default
            fused = scores.projection_score(
                xa, xa if case == "shared" else ya, 0.3, constant=constant
            )
            frozen = _frozen_projection(xb, xb if case == "shared" else yb, 0.3, constant)
        fused.backward()
        frozen.backward()
        tol = 1e-10 if dtype == F64 else 4 * torch.finfo(dtype).eps
        fused, frozen = fused.item(), frozen.item()
        assert abs(fused - frozen) <= tol * max(1.0, abs(frozen))
        gtol = {"rtol": 1e-9, "atol": 1e-12} if dtype == F64 else {"rtol": 1e-4, "atol": 1e-6}
        torch.testing.assert_close(xa.grad, xb.grad, **gtol)
        if case != "shared":
            torch.testing.assert_close(ya.grad, yb.grad, **gtol)


@pytest.mark.parametrize("method", ["eigh", "cholesky"])
@pytest.mark.parametrize("case", ["random", "rank-deficient", "shared"])
def test_fused_vamp_penalty_equals_the_unfused_formulas(method, case):
    """The VAMP scores' metric distortion penalty from one Gram matrix (one autograd
    function) against the covariances and the generic spectral maps, cut-offs active
    included: float64 values to 1e-12 and gradients to 1e-10."""
    from dpnets.linalg import spectral_method

    g = torch.Generator().manual_seed(5)
    x = torch.randn(400, 5, generator=g, dtype=F64) + 0.3
    if case == "rank-deficient":
        x = torch.cat([x[:, :3], x[:, :2] @ torch.randn(2, 2, generator=g, dtype=F64)], 1)
    y = x if case == "shared" else 0.6 * x + torch.randn(400, 5, generator=g, dtype=F64)

    def fused(a, b, p):
        return scores.vamp_score(a, b, p, 0.3, constant=True)

    def unfused(a, b, p):
        core = scores.vamp_score(a, b, p, 0.0)
        ua, ub, _ = scores.covariances(scores.with_constant(a), scores.with_constant(b))
        rtol = scores.default_rtol(a.shape[1], a.dtype)
        return core - scores._reg(scores._eigs(ua, ub, rtol), 0.3, rtol)

    for p in (1, 2):
        out = []
        for fn in (fused, unfused):
            a = x.clone().requires_grad_()
            b = a if case == "shared" else y.clone().requires_grad_()
            with spectral_method(method):
                value = fn(a, b, p)
            value.backward()
            out.append((float(value), a.grad, None if b is a else b.grad))
        (v1, ga1, gb1), (v0, ga0, gb0) = out
        assert abs(v1 - v0) < 1e-12 * max(1.0, abs(v0)), (p, v1, v0)
        torch.testing.assert_close(ga1, ga0, rtol=1e-10, atol=1e-12)
        if gb0 is not None:
            torch.testing.assert_close(gb1, gb0, rtol=1e-10, atol=1e-12)
