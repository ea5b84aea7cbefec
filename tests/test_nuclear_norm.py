"""The nuclear norm without an SVD (issue 32): QDWH's polar factor against ``svdvals``.

``dpnets.linalg.nuclear_norm`` (and VAMP-1 on the Cholesky path, the GPU default) against
``torch.linalg.svdvals``: values to 1e-10 relative in float64 on random, rank-deficient,
clustered, graded, zero and tiny matrices; gradients against ``svdvals``' backward
``U_svd V_svd^T``; the score path calls no SVD, eigendecomposition or ``cholesky`` (which
check their status on the host) and a bounded number of aten operations.
"""

from __future__ import annotations

import pytest
import torch
from helpers import top_level_aten_ops

from dpnets import scores
from dpnets.linalg import QDWH_L0, nuclear_norm, polar_factor, spectral_method

F64 = torch.float64

#: bound on the aten operations (views included) called from Python or the autograd engine
#: by VAMP-1's forward + backward on the Cholesky path (gamma = 0.1, the constant, batch
#: 2000, float32): measured 312 for r = 8 and 64 with torch 2.13 on the CPU, of which 58
#: are the nuclear norm's (forward + backward; svdvals': 8); the eigh path measures 225
VAMP1_CHOLESKY_OPS = 320


def _orthogonal(r: int, g: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(r, r, generator=g, dtype=F64))
    return q


def _with_singular_values(s: list[float] | torch.Tensor, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.as_tensor(s, dtype=F64)
    r = s.shape[0]
    return _orthogonal(r, g) @ torch.diag(s) @ _orthogonal(r, g).T


def _cases() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    cases = {f"random{r}": torch.randn(r, r, generator=g, dtype=F64) for r in (3, 8, 64)}
    a, b = torch.randn(8, 6, generator=g, dtype=F64), torch.randn(6, 8, generator=g, dtype=F64)
    cases["rank r-2"] = a @ b
    cases["clustered"] = _with_singular_values([1, 1, 1, 1, 0.3, 0.3, 0.3, 0.01])
    cases["graded 1e-12..1"] = _with_singular_values(torch.logspace(-12, 0, 10))
    cases["zero"] = torch.zeros(5, 5, dtype=F64)
    cases["tiny 1e-30"] = 1e-30 * torch.randn(6, 6, generator=g, dtype=F64)
    # ||K||_F by squares would underflow / overflow here
    cases["small 1e-170"] = 1e-170 * torch.randn(6, 6, generator=g, dtype=F64)
    cases["huge 1e200"] = 1e200 * torch.randn(6, 6, generator=g, dtype=F64)
    cases["rectangular 5x3"] = torch.randn(5, 3, generator=g, dtype=F64)
    cases["rectangular 3x7"] = torch.randn(3, 7, generator=g, dtype=F64)
    return cases


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_nuclear_norm_equals_svdvals(name):
    k = CASES[name]
    ref = torch.linalg.svdvals(k).sum()
    got = nuclear_norm(k)
    assert abs(float(got - ref)) <= 1e-10 * float(ref), (float(got), float(ref))
    if name == "zero":
        assert float(got) == 0.0


def test_nuclear_norm_batched():
    g = torch.Generator().manual_seed(2)
    k = torch.randn(4, 6, 6, generator=g, dtype=F64)
    k[1] = 0.0
    torch.testing.assert_close(nuclear_norm(k), torch.linalg.svdvals(k).sum(-1), rtol=1e-12, atol=0)


def test_singular_values_below_the_bound_contribute_at_most_their_size():
    """Singular values below ``QDWH_L0 alpha`` (``alpha = sqrt(m n) max_ij |K_ij|``) do not
    converge: the error is at most their sum (plus round-off)."""
    s = [1.0, 0.5, 0.25, 1e-17, 1e-19, 0.0]
    k = _with_singular_values(s, seed=3)
    got = float(nuclear_norm(k))
    assert QDWH_L0 * 6 * float(k.abs().max()) > 1e-17
    assert abs(got - sum(s)) <= 1e-17 + 1e-19 + 8 * torch.finfo(F64).eps * sum(s)


@pytest.mark.parametrize("name", list(CASES))
def test_polar_factor_is_a_contraction_and_isometric_on_the_range(name):
    """``U^T U`` is the projector on the row space of ``k`` (identity where full rank)."""
    k = CASES[name]
    u = polar_factor(k)
    assert torch.linalg.matrix_norm(u, ord=2) <= 1 + 1e-12
    if name.startswith("random") or name == "clustered" or name.startswith("rectangular"):
        small = min(k.shape)
        gram = u.T @ u if k.shape[0] >= k.shape[1] else u @ u.T
        torch.testing.assert_close(gram, torch.eye(small, dtype=F64), rtol=0, atol=1e-13)


@pytest.mark.parametrize("name", ["random3", "random8", "random64", "rectangular 5x3", "graded"])
def test_gradient_equals_svdvals_backward(name):
    """Distinct nonzero singular values: ``U = U_svd V_svd^T`` to 1e-8. (Both are computed
    to ``eps / sigma_min`` only: the graded case keeps ``sigma_min = 1e-4``.)"""
    k = (
        _with_singular_values(torch.logspace(-4, 0, 10), seed=6)
        if name == "graded"
        else CASES[name]
    )
    k1, k2 = k.clone().requires_grad_(), k.clone().requires_grad_()
    (g1,) = torch.autograd.grad(nuclear_norm(k1), k1)
    (g2,) = torch.autograd.grad(torch.linalg.svdvals(k2).sum(), k2)
    torch.testing.assert_close(g1, g2, rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_finite(name):
    k = CASES[name].clone().requires_grad_()
    (g,) = torch.autograd.grad(2.0 * nuclear_norm(k), k)
    assert torch.isfinite(g).all()
    if name == "zero":
        assert (g == 0).all()


@pytest.mark.parametrize("shape", [(5, 5), (4, 2), (2, 3, 3)])
def test_gradcheck(shape):
    g = torch.Generator().manual_seed(4)
    k = torch.randn(*shape, generator=g, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(nuclear_norm, (k,))


def test_bad_shape_raises():
    with pytest.raises(ValueError, match="expected matrices"):
        nuclear_norm(torch.ones(3))


# ------------------------------------------------------------------------- VAMP-1


def _pair_data(n, rx, ry, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, rx, generator=g, dtype=F64) + 0.3
    y = 0.7 * x[:, :ry] + torch.randn(n, ry, generator=g, dtype=F64)
    return x, y


def _vamp1(x, y, method, gamma=0.0, constant=False):
    x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
    with spectral_method(method):
        s = scores.vamp_score(x, y, p=1, gamma=gamma, constant=constant)
    s.backward()
    return s.detach(), x.grad, y.grad


@pytest.mark.parametrize("gamma, constant", [(0.0, False), (0.5, True)])
@pytest.mark.parametrize("rx, ry", [(3, 3), (8, 8), (64, 64), (5, 3)])
def test_vamp1_cholesky_equals_eigh(rx, ry, gamma, constant):
    """VAMP-1 on the GPU path (Cholesky whitening, QDWH) equals the CPU path (eigh, svdvals):
    values to 1e-10, gradients to 1e-9 (float64)."""
    x, y = _pair_data(2000, rx, ry)
    s0, gx0, gy0 = _vamp1(x, y, "eigh", gamma, constant)
    s1, gx1, gy1 = _vamp1(x, y, "cholesky", gamma, constant)
    assert abs(float(s1 - s0)) < 1e-10 * abs(float(s0))
    torch.testing.assert_close(gx1, gx0, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(gy1, gy0, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", ["random", "duplicate columns"])
def test_vamp1_cholesky_float32_finite(case):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(256, 6, generator=g)
    if case == "duplicate columns":
        x = torch.cat([x, x[:, :2], torch.zeros(256, 1)], 1)
    y = x.roll(1, 0) + 0.1 * torch.randn(x.shape, generator=g)
    for gamma, constant in [(0.0, False), (1.0, True)]:
        s, gx, gy = _vamp1(x, y, "cholesky", gamma, constant)
        assert s.dtype == torch.float32 and torch.isfinite(s)
        assert torch.isfinite(gx).all() and torch.isfinite(gy).all()
    if case == "random":  # the same value as the eigh path, to float32 round-off
        s0 = _vamp1(x, y, "eigh")[0]
        s1 = _vamp1(x, y, "cholesky")[0]
        assert abs(float(s1) - float(s0)) <= 8 * torch.finfo(torch.float32).eps * float(s0)


_HOST_CHECKED = {
    torch.linalg: ["svdvals", "svd", "eigh", "eigvalsh", "cholesky", "eig", "eigvals"],
    torch: ["svd", "cholesky", "symeig"],
}


def _forbid_host_checked_linalg(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a decomposition that checks its status on the host was called")

    for module, names in _HOST_CHECKED.items():
        for name in names:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, forbidden)


def test_vamp1_cholesky_path_calls_no_svd_eigh_or_cholesky(monkeypatch):
    x, y = _pair_data(500, 6, 6)
    x.requires_grad_()
    _forbid_host_checked_linalg(monkeypatch)
    with spectral_method("cholesky"):
        s = scores.vamp_score(x, y, p=1, gamma=0.5, constant=True)
        s.backward()
    assert torch.isfinite(x.grad).all()
    with spectral_method("eigh"), pytest.raises(AssertionError, match="host"):
        scores.vamp_score(x, y, p=1)  # the CPU path: svdvals (and eigh), as before


def test_cpu_default_keeps_svdvals(monkeypatch):
    """``"auto"`` on the CPU: VAMP-1 is computed by ``svdvals`` as before."""
    calls = []
    svdvals = torch.linalg.svdvals

    def spy(*args, **kwargs):
        calls.append(1)
        return svdvals(*args, **kwargs)

    monkeypatch.setattr(torch.linalg, "svdvals", spy)
    x, y = _pair_data(300, 4, 4)
    scores.vamp_score(x, y, p=1)
    assert calls == [1]


@pytest.mark.parametrize("r", [8, 64])
def test_vamp1_cholesky_op_count(r):
    x, y = _pair_data(2000, r, r)
    x = x.float().requires_grad_()
    y = y.float()

    def step():
        with spectral_method("cholesky"):
            scores.vamp_score(x, y, p=1, gamma=0.1, constant=True).backward()

    assert top_level_aten_ops(step) <= VAMP1_CHOLESKY_OPS


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_vamp1_on_cuda_reads_nothing_on_the_host():
    """VAMP-1's forward + backward on CUDA (the default ``"auto"``: Cholesky, QDWH) under
    ``set_sync_debug_mode("error")`` (which catches synchronising copies and stream
    synchronisations made through torch, not those inside cuSOLVER), and its value equals
    the CPU's (eigh, svdvals) to 1e-10 in float64."""
    x, y = _pair_data(2000, 16, 16)
    xc, yc = x.cuda().requires_grad_(), y.cuda()

    def step():
        s = scores.vamp_score(xc, yc, p=1, gamma=0.1, constant=True)
        s.backward()
        return s

    step()  # warm up: handles, workspaces, the cached identity
    torch.cuda.synchronize()
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        s = step()
    finally:
        torch.cuda.set_sync_debug_mode(old)
    ref = scores.vamp_score(x, y, p=1, gamma=0.1, constant=True)
    assert abs(float(s) - float(ref)) < 1e-10 * abs(float(ref))
