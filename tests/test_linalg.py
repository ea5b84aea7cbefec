import numpy as np
import pytest
import scipy.linalg
import torch

from dpnets.linalg import (
    eig_biorthogonal,
    sym_inv_sqrt,
    sym_matrix_function,
    sym_pinv,
    torch_sym_inv_sqrt,
    torch_sym_pinv,
)


def _psd(rank, dim, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim, rank))
    return a @ a.T


def test_sym_pinv_matches_numpy_on_rank_deficient():
    a = _psd(3, 6)
    np.testing.assert_allclose(sym_pinv(a), np.linalg.pinv(a, hermitian=True), atol=1e-10)
    _, rank = sym_matrix_function(a, -1.0)
    assert rank == 3


def test_sym_inv_sqrt_squares_to_pinv():
    a = _psd(4, 4)
    s = sym_inv_sqrt(a)
    np.testing.assert_allclose(s @ s, np.linalg.inv(a), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(s @ a @ s, np.eye(4), atol=1e-8)


def test_relative_cutoff_is_scale_invariant():
    a = _psd(3, 5)
    for scale in (1e-8, 1.0, 1e8):
        assert sym_matrix_function(scale * a, -1.0)[1] == 3


def test_torch_pinv_value_and_gradient():
    a = torch.tensor(_psd(5, 5, seed=1), dtype=torch.float64, requires_grad=True)
    np.testing.assert_allclose(
        torch_sym_pinv(a).detach().numpy(), np.linalg.inv(a.detach().numpy()), rtol=1e-8
    )
    w = torch.randn(5, 5, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda m: (torch_sym_pinv(m + m.T) * w).sum(), (a,))
    assert torch.autograd.gradcheck(lambda m: (torch_sym_inv_sqrt(m + m.T) * w).sum(), (a,))


@pytest.mark.parametrize("fn", [torch_sym_pinv, torch_sym_inv_sqrt])
def test_torch_gradients_finite_at_repeated_eigenvalues(fn):
    # eigh's own backward divides by eigenvalue gaps: NaN/inf at the identity
    a = torch.eye(4, dtype=torch.float64, requires_grad=True)
    (fn(a) * torch.randn(4, 4, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(a.grad).all()
    # d tr(A^{-1}) / dA = -A^{-2} = -I at A = I
    b = torch.eye(3, dtype=torch.float64, requires_grad=True)
    torch.trace(torch_sym_pinv(b)).backward()
    np.testing.assert_allclose(b.grad.numpy(), -np.eye(3), atol=1e-12)


def test_eig_biorthogonal():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(6, 6))
    g = _psd(6, 6, seed=4) + np.eye(6)
    w, left, right = eig_biorthogonal(a, metric=g)
    np.testing.assert_allclose(a @ right, right * w, atol=1e-10)
    np.testing.assert_allclose(left.conj().T @ a, w[:, None] * left.conj().T, atol=1e-10)
    np.testing.assert_allclose(left.conj().T @ right, np.eye(6), atol=1e-10)
    np.testing.assert_allclose(np.einsum("ji,jk,ki->i", right.conj(), g, right).real, 1.0)
    assert np.all(np.diff(np.abs(w)) <= 1e-12)


# ----------------------------------------------------------------------------- eig_biorthogonal
EPS = np.finfo(np.float64).eps


def _similar(blocks: np.ndarray, seed: int) -> np.ndarray:
    """``V B V^{-1}`` for a random (well-conditioned, non-orthogonal) ``V``."""
    v = np.random.default_rng(seed).normal(size=blocks.shape)
    return v @ blocks @ np.linalg.inv(v)


def _rotation_blocks(radii, angles) -> np.ndarray:
    """Block-diagonal matrix of scaled 2 x 2 rotations: eigenvalues ``radius * exp(+-i angle)``."""
    blocks = [
        rho * np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
        for rho, t in zip(radii, angles, strict=True)
    ]
    return scipy.linalg.block_diag(*blocks)


def _jordan_plus(lam: float, k: int, rest: np.ndarray) -> np.ndarray:
    """A ``k x k`` Jordan block of ``lam`` next to ``diag(rest)``."""
    j = lam * np.eye(k) + np.eye(k, k=1)
    return scipy.linalg.block_diag(j, np.diag(rest))


def _eig_cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    b = rng.normal(size=(5, 5))
    near = np.linspace(0.95, 0.05, 20)
    near[1] = near[0] - 1e-9
    repeated = np.linspace(0.95, 0.05, 20)
    repeated[1:3] = repeated[0]
    return {
        "random 40": rng.normal(size=(40, 40)),
        "complex pairs": _similar(
            _rotation_blocks([0.99, 0.9, 0.7, 0.5, 0.2], [0.1, 0.5, 1.0, 2.0, 3.0]), 1
        ),
        "near-degenerate 1e-9": _similar(np.diag(near), 2),
        "triple eigenvalue, non-normal": _similar(np.diag(repeated), 3),
        # LAPACK's left and right vectors of each repeated eigenvalue come from unrelated
        # bases of the eigenspace here: only the dual basis makes them biorthogonal
        "blockdiag(B, B, B), non-normal": _similar(scipy.linalg.block_diag(b, b, b), 4),
        "repeated complex pair": _similar(_rotation_blocks([0.9, 0.9, 0.5], [0.7, 0.7, 1.3]), 5),
        # nearly defective: a Jordan block split by a 1e-10 perturbation (cond(R) ~ 1e7)
        "perturbed Jordan block": _similar(_jordan_plus(0.9, 3, np.linspace(0.8, 0.1, 9)), 6)
        + 1e-10 * rng.normal(size=(12, 12)),
    }


def _check_triplets(a: np.ndarray, w: np.ndarray, left: np.ndarray, right: np.ndarray, tol: float):
    """``A R = R diag(w)``, ``L^H A = diag(w) L^H`` and ``L^H R = I``, relative to scale."""
    na = np.linalg.norm(a, 2)
    lh = left.conj().T
    assert np.linalg.norm(a @ right - right * w, 2) <= tol * na * np.linalg.norm(right, 2)
    assert np.linalg.norm(lh @ a - w[:, None] * lh, 2) <= tol * na * np.linalg.norm(left, 2)
    assert np.abs(lh @ right - np.eye(a.shape[0])).max() <= tol


@pytest.mark.parametrize("with_metric", [False, True])
@pytest.mark.parametrize("name", list(_eig_cases()))
def test_eig_biorthogonal_triplets_against_scipy(name, with_metric):
    a = _eig_cases()[name]
    r = a.shape[0]
    g = _psd(r, r, seed=r) / r + np.eye(r) if with_metric else None
    w, left, right = eig_biorthogonal(a, metric=g)
    # ground truth: scipy's eigenvalues, in the same order (decreasing modulus, conjugate
    # pairs with the positive imaginary part first)
    ref = scipy.linalg.eig(a, right=False)
    cond = np.linalg.cond(right)
    assert np.all(np.diff(np.round(np.abs(w), 10)) <= 0)
    np.testing.assert_allclose(
        np.sort_complex(w), np.sort_complex(ref), atol=1e3 * EPS * cond * np.abs(ref).max()
    )
    _check_triplets(a, w, left, right, tol=1e3 * EPS * cond)
    # each right vector is scipy's eigenvector of the same (simple) eigenvalue, up to scale
    _, vr = scipy.linalg.eig(a)
    simple = (np.abs(ref[:, None] - ref[None, :]) + np.eye(r)).min(axis=1) > 1e-6
    for i in np.flatnonzero(simple):
        j = int(np.argmin(np.abs(w - ref[i])))
        cos = np.abs(np.vdot(right[:, j], vr[:, i])) / np.linalg.norm(right[:, j])
        assert cos == pytest.approx(1.0, abs=1e3 * EPS * cond)
    # unit norm of the right vectors: Euclidean, or r_i^H G r_i = 1 with the metric
    g = np.eye(r) if g is None else g
    quad = np.einsum("ji,jk,ki->i", right.conj(), g, right)
    np.testing.assert_allclose(quad, 1.0, rtol=1e-12)


def test_eig_biorthogonal_defective_block_spoils_no_other_vector():
    """An exactly defective eigenvalue (a 3 x 3 Jordan block at 0, as the null space of a
    rank-deficient estimator can give) next to a stationary eigenvalue 1: the block's own
    vectors are ill-conditioned (``cond(R) ~ 1e10``, no biorthogonal ``L`` exists), but
    every other triplet keeps full accuracy: its left vector is LAPACK's, never mixed with
    the block's."""
    a = _similar(_jordan_plus(0.0, 3, np.r_[1.0, np.linspace(0.8, 0.1, 8)]), 8)
    w, left, right = eig_biorthogonal(a)
    assert np.linalg.cond(right) > 1e8
    good = np.abs(w) > 1e-3
    assert good.sum() == 9 and w[0] == pytest.approx(1.0)
    lh = left.conj().T
    na = np.linalg.norm(a, 2)
    for i in np.flatnonzero(good):
        assert np.linalg.norm(lh[i] @ a - w[i] * lh[i]) <= 1e-13 * na * np.linalg.norm(lh[i])
        assert np.linalg.norm(a @ right[:, i] - w[i] * right[:, i]) <= 1e-13 * na
    np.testing.assert_allclose(lh[good] @ right, np.eye(12)[good], atol=1e-12)
    # the stationary left vector is scipy's, up to scale
    vl = scipy.linalg.eig(a, left=True, right=False)[1]
    ref = vl[:, np.argmin(np.abs(scipy.linalg.eigvals(a) - 1.0))]
    assert np.abs(np.vdot(ref, left[:, 0])) / np.linalg.norm(left[:, 0]) == pytest.approx(1.0)


def test_eig_biorthogonal_complex_pairs_are_conjugate():
    a = _eig_cases()["complex pairs"]
    g = _psd(10, 10, seed=7) + np.eye(10)
    w, left, right = eig_biorthogonal(a, metric=g)
    assert np.iscomplexobj(left) and np.iscomplexobj(right)
    np.testing.assert_allclose(np.abs(w), np.repeat([0.99, 0.9, 0.7, 0.5, 0.2], 2), atol=1e-12)
    assert np.all(w.imag[0::2] > 0)
    np.testing.assert_allclose(w[1::2], w[0::2].conj(), atol=0)
    np.testing.assert_allclose(right[:, 1::2], right[:, 0::2].conj(), atol=0)
    np.testing.assert_allclose(left[:, 1::2], left[:, 0::2].conj(), atol=1e-12)
    _check_triplets(a, w, left, right, tol=1e-12)
    # the metric normalisation r_i^H G r_i = 1
    np.testing.assert_allclose(np.einsum("ji,jk,ki->i", right.conj(), g, right).real, 1.0)


def test_eig_biorthogonal_real_spectrum_gives_real_vectors():
    a = _similar(np.diag(np.linspace(1.0, 0.1, 8)), 8)
    w, left, right = eig_biorthogonal(a, metric=np.eye(8))
    assert not np.iscomplexobj(left) and not np.iscomplexobj(right)
    assert np.iscomplexobj(w)
    np.testing.assert_allclose(w.real, np.linspace(1.0, 0.1, 8), atol=1e-12)
    _check_triplets(a, w, left, right, tol=1e-12)


def test_eig_biorthogonal_of_a_rank_deficient_operator():
    """``Cx^+ Cxy`` of duplicated features: a repeated eigenvalue 0 (the pseudo-inverse's null
    space) next to the genuine ones, with the covariance as the metric."""
    rng = np.random.default_rng(9)
    x = np.sin(np.cumsum(rng.normal(size=(3000, 2)) * 0.05, axis=0))
    phi = np.tanh(x @ rng.normal(size=(2, 8)))
    phi = np.hstack([phi, phi[:, :3], phi[:, :2] @ rng.normal(size=(2, 3))])  # rank 8 of 14
    px, py = phi[:-1], phi[1:]
    cx, cxy = px.T @ px / len(px), px.T @ py / len(px)
    pinv, rank = sym_matrix_function(cx, -1.0)
    assert rank == 8
    t = pinv @ cxy
    w, left, right = eig_biorthogonal(t, metric=cx)
    assert np.sum(np.abs(w) < 1e-10) == 6
    _check_triplets(t, w, left, right, tol=1e3 * EPS * np.linalg.cond(right))
    genuine = np.abs(w) > 1e-10
    quad = np.einsum("ji,jk,ki->i", right.conj(), cx, right).real
    np.testing.assert_allclose(quad[genuine], 1.0, rtol=1e-8)


def test_eig_biorthogonal_rejects_bad_input():
    with pytest.raises(ValueError, match="square"):
        eig_biorthogonal(np.ones((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        eig_biorthogonal(np.array([[1.0, np.nan], [0.0, 1.0]]))


def test_sym_matrix_function_is_exactly_symmetric():
    a = _psd(30, 30, seed=12)
    for power in (-1.0, -0.5, 0.5):
        out, _ = sym_matrix_function(a, power)
        np.testing.assert_array_equal(out, out.T)
    np.testing.assert_allclose(sym_matrix_function(a, 0.5)[0] @ sym_matrix_function(a, 0.5)[0], a)


# ------------------------------------------------------------ Cholesky maps (GPU path)


def test_torch_sym_chol_maps_equal_numpy_where_certified():
    """inv, logdet and whiten of a well-conditioned batch against numpy, ``exact`` True;
    rank-deficient: not certified, finite Tikhonov surrogate ``(A + floor I)^{-1}``."""
    from dpnets.linalg import default_rtol, torch_sym_chol

    a = np.stack([_psd(6, 6, seed=1) + 0.1 * np.eye(6), _psd(6, 6, seed=2) + np.eye(6)])
    rtol = default_rtol(6, torch.float32)
    e = torch_sym_chol(torch.tensor(a), rtol)
    assert e.exact.tolist() == [True, True]
    np.testing.assert_allclose(e.inv.numpy(), np.linalg.inv(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(e.logdet.numpy(), np.linalg.slogdet(a)[1], rtol=1e-12)
    w = e.whiten.numpy()
    np.testing.assert_allclose(w @ a @ w.transpose(0, 2, 1), np.stack([np.eye(6)] * 2), atol=1e-10)
    assert np.allclose(np.triu(w[0], 1), 0.0)  # L^{-1}: lower triangular

    sing = torch.tensor(_psd(3, 6))
    e = torch_sym_chol(sing, rtol)
    assert not bool(e.exact)
    a = sing.numpy()  # floor: rtol * max(1, min(||A||_F, ||A||_inf))
    floor = rtol * max(1.0, min(np.linalg.norm(a), np.abs(a).sum(1).max()))
    np.testing.assert_allclose(
        e.inv.numpy(), np.linalg.inv(sing.numpy() + floor * np.eye(6)), rtol=1e-6
    )
    assert torch.isfinite(e.logdet)


def test_torch_sym_chol_gradcheck_and_repeated_eigenvalues():
    from dpnets.linalg import torch_sym_chol

    g = torch.Generator().manual_seed(0)
    b = torch.randn(2, 5, 5, dtype=torch.float64, generator=g)
    a = (b @ b.transpose(-1, -2) + torch.eye(5, dtype=torch.float64)).requires_grad_()

    def maps(a):
        e = torch_sym_chol(a, 1e-6)
        return e.inv, e.logdet, e.whiten

    assert torch.autograd.gradcheck(maps, (a,))
    # the identity (every eigenvalue repeated): finite gradients, those of A^{-1}, ln det A
    eye = torch.eye(4, dtype=torch.float64, requires_grad=True)
    e = torch_sym_chol(eye, 1e-6)
    (e.inv.sum() + e.logdet + e.whiten.sum()).backward()
    assert torch.isfinite(eye.grad).all()


def test_torch_sym_chol_certificate_is_tight_near_the_identity():
    """An eigenvalue 20 times the cut-off of a 65 x 65 near-identity covariance (float32's
    cut-off) is certified, and the maps are exact; at 1.5 times it is not (surrogate)."""
    from dpnets.linalg import default_rtol, torch_sym_chol

    rtol = default_rtol(65, torch.float32)
    q, _ = torch.linalg.qr(
        torch.randn(65, 65, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    )
    for factor, certified in ((20.0, True), (1.5, False)):
        s = torch.ones(65, dtype=torch.float64)
        s[0] = factor * rtol
        a = q @ torch.diag(s) @ q.T
        e = torch_sym_chol(a, rtol)
        assert bool(e.exact) is certified
        if certified:
            ref = q @ torch.diag(1.0 / s) @ q.T
            torch.testing.assert_close(e.inv, ref, rtol=1e-9, atol=1e-9 / float(s[0]))
            assert abs(float(e.logdet) - float(torch.log(s).sum())) < 1e-9


def test_max_eigval_by_squaring_against_eigh_whatever_the_gaps():
    """The sync-free operator norm (repeated squaring, the relaxed score's on a GPU) is
    ``eigh``'s largest eigenvalue to 1e-10 relative: random, rank-deficient, huge and tiny
    scales, and the worst case of its error bound (every other eigenvalue at a relative
    gap ``k / 2^40`` below the top, where ``A^N`` separates them least); its gradient is
    ``u u^T`` for a simple top eigenvalue and (to round-off amplified by ``N``) the
    average projector ``P / m`` over an ``m``-fold one; ``A = 0`` gives 0 with a finite gradient."""
    from dpnets.linalg import max_eigval_by_squaring

    g = torch.Generator().manual_seed(0)
    mats = []
    for d in (1, 3, 8, 64):
        m = torch.randn(2, d, d, generator=g, dtype=torch.float64)
        mats.append(m @ m.transpose(-1, -2) / d)
    m = torch.randn(40, 3, generator=g, dtype=torch.float64)
    mats += [m @ m.T, 1e-150 * (m @ m.T), 1e150 * (m @ m.T)]
    q, _ = torch.linalg.qr(torch.randn(64, 64, generator=g, dtype=torch.float64))
    for k in (0.3, 1.0, 3.0, 1e3):
        s = torch.full((64,), 1.0 - k / 2.0**40, dtype=torch.float64)
        s[-1] = 1.0
        mats.append((q * s) @ q.T)
    for a in mats:
        ref = torch.linalg.eigvalsh(a)[..., -1]
        got = max_eigval_by_squaring(a)
        assert torch.all((got - ref).abs() <= 1e-10 * ref.abs()), (got, ref)
    # gradients: a simple top eigenvalue, a 3-fold one, zero
    q5, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
    s = torch.tensor([0.1, 0.5, 2.0, 2.0, 2.0], dtype=torch.float64)
    for top, m_fold in ((torch.tensor([0.1, 0.5, 1.0, 1.5, 2.0]), 1), (s, 3)):
        a = ((q5 * top.double()) @ q5.T).requires_grad_()
        max_eigval_by_squaring(a).backward()
        u = torch.linalg.eigh(a.detach())[1][:, -m_fold:]
        # eigenvalues equal up to round-off (1e-16 relative) weigh exp(-1e-16 N) apart
        # in A^N: the average projector to 1e-4, a subgradient all the same
        atol = 1e-12 if m_fold == 1 else 1e-3
        torch.testing.assert_close(a.grad, u @ u.T / m_fold, rtol=0, atol=atol)
        assert abs(torch.trace(a.grad).item() - 1.0) < 1e-12
    a = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    value = max_eigval_by_squaring(a)
    value.backward()
    assert value.item() == 0.0 and torch.isfinite(a.grad).all()
    b = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(max_eigval_by_squaring, (b,))
    with pytest.raises(ValueError, match="square"):
        max_eigval_by_squaring(torch.ones(2, 3))
