import numpy as np
import pytest
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
