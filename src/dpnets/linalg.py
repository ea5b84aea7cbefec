"""Numerically careful linear algebra: the one place where it lives.

Everything that inverts, square-roots or diagonalises a matrix in dpnets goes through
this module:

* symmetric pseudo-inverses and inverse square roots, computed from a symmetric
  eigendecomposition with a *relative* rank cut-off (eigenvalues below
  ``rtol * max eigenvalue`` are treated as zero);
* in torch, the same maps with a gradient that stays finite when eigenvalues are
  degenerate (e.g. at the optimum of the DPNets scores, where the covariances equal the
  identity) — we never backpropagate through eigenvectors;
* the biorthogonal eigendecomposition of a (non-symmetric) matrix, in numpy only:
  dpnets never backpropagates through a non-symmetric ``eig``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch

__all__ = [
    "default_rtol",
    "sym_pinv",
    "sym_inv_sqrt",
    "sym_matrix_function",
    "torch_sym_pinv",
    "torch_sym_inv_sqrt",
    "eig_biorthogonal",
]


def default_rtol(dim: int, dtype: np.dtype | torch.dtype = np.float64) -> float:
    """Relative rank cut-off used by default: ``dim * eps(dtype)``, as in ``numpy.linalg.pinv``
    style rules (``max(M, N) * eps``), but never below ``1e-12``.

    Parameters
    ----------
    dim : int
        Matrix dimension.
    dtype : numpy or torch dtype
        Dtype whose machine epsilon sets the scale.
    """
    if isinstance(dtype, torch.dtype):
        eps = torch.finfo(dtype).eps
    else:
        eps = np.finfo(dtype).eps
    return max(float(dim) * float(eps), 1e-12)


# ----------------------------------------------------------------------------- numpy


def _sym_eigh(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {a.shape}")
    a = 0.5 * (a + a.T)
    return scipy.linalg.eigh(a)


def sym_matrix_function(
    a: np.ndarray, power: float, rtol: float | None = None
) -> tuple[np.ndarray, int]:
    """``A^power`` of a symmetric PSD matrix on the range of ``A`` (zero on its null space).

    Parameters
    ----------
    a : ndarray of shape (r, r)
        Symmetric positive semi-definite matrix (symmetrised internally).
    power : float
        Exponent; ``-1`` is the pseudo-inverse, ``-0.5`` the pseudo-inverse square root.
    rtol : float, optional
        Relative cut-off: eigenvalues ``<= rtol * max(eigenvalue)`` are treated as zero.
        Defaults to :func:`default_rtol`.

    Returns
    -------
    out : ndarray of shape (r, r)
    rank : int
        Number of eigenvalues kept.
    """
    s, u = _sym_eigh(a)
    if rtol is None:
        rtol = default_rtol(s.shape[0])
    smax = s.max(initial=0.0)
    keep = s > rtol * smax if smax > 0 else np.zeros_like(s, dtype=bool)
    f = np.zeros_like(s)
    f[keep] = s[keep] ** power
    return (u * f) @ u.T, int(keep.sum())


def sym_pinv(a: np.ndarray, rtol: float | None = None) -> np.ndarray:
    """Pseudo-inverse of a symmetric PSD matrix from its eigendecomposition.

    See :func:`sym_matrix_function` for the cut-off rule.
    """
    return sym_matrix_function(a, -1.0, rtol)[0]


def sym_inv_sqrt(a: np.ndarray, rtol: float | None = None) -> np.ndarray:
    """Pseudo-inverse square root ``A^{+/2}`` of a symmetric PSD matrix."""
    return sym_matrix_function(a, -0.5, rtol)[0]


def eig_biorthogonal(
    a: np.ndarray, metric: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigen-triplets of a square matrix, normalised biorthogonally.

    Returns eigenvalues sorted by decreasing modulus (complex-conjugate pairs with the
    positive imaginary part first), right eigenvectors ``R`` and left eigenvectors ``L``
    with ``A R = R diag(lam)``, ``L^H A = diag(lam) L^H`` and ``L^H R = I``.

    Parameters
    ----------
    a : ndarray of shape (r, r)
    metric : ndarray of shape (r, r), optional
        Symmetric PSD Gram matrix ``G``; right eigenvectors are scaled so that
        ``r_i^H G r_i = 1`` (unit-norm eigenfunctions when ``G`` is the feature covariance).
        Without it, right eigenvectors have unit Euclidean norm.

    Returns
    -------
    eigvals : ndarray of shape (r,), complex
    left : ndarray of shape (r, r), complex
        Columns are left eigenvectors.
    right : ndarray of shape (r, r), complex
        Columns are right eigenvectors.
    """
    a = np.asarray(a, dtype=np.float64)
    w, vl, vr = scipy.linalg.eig(a, left=True, right=True)
    order = np.lexsort((-w.imag, -np.round(np.abs(w), 10)))
    w, vl, vr = w[order], vl[:, order], vr[:, order]
    if metric is not None:
        norms = np.sqrt(np.abs(np.einsum("ji,jk,ki->i", vr.conj(), metric, vr)))
    else:
        norms = np.linalg.norm(vr, axis=0)
    norms = np.where(norms > 0, norms, 1.0)
    vr = vr / norms
    # biorthogonal scaling: l_i^H r_i = 1
    d = np.einsum("ji,ji->i", vl.conj(), vr)
    d = np.where(np.abs(d) > np.finfo(np.float64).tiny, d, 1.0)
    vl = vl / d.conj()
    return w, vl, vr


# ----------------------------------------------------------------------------- torch


def _torch_spectral(a: torch.Tensor, power: float, rtol: float | None) -> torch.Tensor:
    """``A^power`` on the range of symmetric PSD ``A`` with a stable first-order gradient.

    The forward value comes from ``eigh`` on the detached matrix (in float64). The
    gradient is the Fréchet derivative of the spectral function, written with divided
    differences ``(f(s_i) - f(s_j)) / (s_i - s_j)`` in closed form, so it is finite even
    for repeated eigenvalues (where ``eigh``'s own backward divides by zero). Directions
    below the rank cut-off are held fixed (their divided differences are set to zero).
    """
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {tuple(a.shape)}")
    out_dtype = a.dtype
    a64 = a.to(torch.float64)
    a64 = 0.5 * (a64 + a64.T)
    with torch.no_grad():
        s, u = torch.linalg.eigh(a64.detach())
        if rtol is None:
            rtol = default_rtol(a.shape[0], out_dtype)
        smax = s.max().clamp_min(0.0)
        keep = s > rtol * smax
        s_safe = torch.where(keep, s, torch.ones_like(s))
        if power == -1.0:
            f = torch.where(keep, 1.0 / s_safe, torch.zeros_like(s))
            # (1/si - 1/sj)/(si - sj) = -1/(si sj)
            dd = -torch.outer(f, f)
        elif power == -0.5:
            rs = torch.sqrt(s_safe)
            f = torch.where(keep, 1.0 / rs, torch.zeros_like(s))
            # (si^-1/2 - sj^-1/2)/(si - sj) = -1/(sqrt(si) sqrt(sj) (sqrt(si) + sqrt(sj)))
            dd = -torch.outer(f, f) / (rs[:, None] + rs[None, :])
            dd = dd * (keep[:, None] & keep[None, :])
        else:  # pragma: no cover - internal use only
            raise ValueError(f"unsupported power {power}")
        value = (u * f) @ u.T
    if a.requires_grad:
        delta = a64 - a64.detach()  # zero-valued, carries the graph
        value = value + u @ ((u.T @ delta @ u) * dd) @ u.T
    return value.to(out_dtype)


def torch_sym_pinv(a: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Differentiable pseudo-inverse of a symmetric PSD torch matrix.

    Value: ``U diag(1/s) U^T`` over eigenvalues ``s > rtol * max(s)``. Gradient:
    ``-A^+ G A^+`` (exact where the rank is constant), finite for degenerate eigenvalues.
    """
    return _torch_spectral(a, -1.0, rtol)


def torch_sym_inv_sqrt(a: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Differentiable pseudo-inverse square root ``A^{+/2}`` of a symmetric PSD matrix."""
    return _torch_spectral(a, -0.5, rtol)
