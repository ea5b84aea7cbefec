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

from typing import NamedTuple

import numpy as np
import scipy.linalg
import torch

__all__ = [
    "default_rtol",
    "sym_pinv",
    "sym_inv_sqrt",
    "sym_matrix_function",
    "SymEig",
    "torch_sym_eig",
    "spectral_trace",
    "spectral_power",
    "max_eigval",
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
        # r_i^H G r_i for every i through one BLAS product (O(r^3) in BLAS, not in einsum)
        norms = np.sqrt(np.abs(np.sum(vr.conj() * (np.asarray(metric) @ vr), axis=0)))
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


class SymEig(NamedTuple):
    """Symmetric eigendecomposition of a (batch of) float64 matrices, for stable gradients.

    ``a`` is the symmetrised float64 input (it carries the autograd graph); ``s`` and ``u``
    are its eigenvalues (ascending) and eigenvectors, computed without gradient. Spectral
    functions built from it get their gradient from first-order perturbation theory
    (``d s_i = u_i^T dA u_i`` and the Daleckii-Krein divided differences), never from
    ``eigh``'s own backward, which divides by eigenvalue gaps and is NaN/inf at repeated
    eigenvalues.
    """

    a: torch.Tensor
    s: torch.Tensor
    u: torch.Tensor


def torch_sym_eig(a: torch.Tensor) -> SymEig:
    """Decompose symmetric ``a`` of shape (..., r, r) once; see :class:`SymEig`."""
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"expected square matrices, got shape {tuple(a.shape)}")
    a64 = a.to(torch.float64)
    a64 = 0.5 * (a64 + a64.transpose(-1, -2))
    with torch.no_grad():
        s, u = torch.linalg.eigh(a64.detach())
    return SymEig(a64, s, u)


def _delta(e: SymEig) -> torch.Tensor | None:
    """``A - A.detach()``: zero-valued, carries the graph (None without gradient)."""
    return e.a - e.a.detach() if e.a.requires_grad else None


def _rot(e: SymEig, m: torch.Tensor) -> torch.Tensor:
    """``U m U^T``."""
    return e.u @ m @ e.u.transpose(-1, -2)


def spectral_trace(e: SymEig, f, fprime) -> torch.Tensor:
    """``tr f(A) = sum_i f(s_i)`` with gradient ``U diag(f'(s)) U^T``."""
    with torch.no_grad():
        value = f(e.s).sum(-1)
    d = _delta(e)
    if d is None:
        return value
    grad = _rot(e, torch.diag_embed(fprime(e.s)))
    return value + (grad * d).sum((-1, -2))


def max_eigval(e: SymEig) -> torch.Tensor:
    """Largest eigenvalue (the operator norm of a PSD matrix) with gradient ``u u^T``."""
    value = e.s[..., -1]
    d = _delta(e)
    if d is None:
        return value
    top = e.u[..., :, -1]
    return value + torch.einsum("...i,...ij,...j->...", top, d, top)


def spectral_power(e: SymEig, power: float, rtol: float | None = None) -> torch.Tensor:
    """``A^power`` on the range of PSD ``A`` (power -1: pseudo-inverse, -1/2: inverse root).

    Eigenvalues ``<= rtol * max(s)`` are treated as zero and those directions held fixed
    in the gradient. The gradient uses divided differences in closed form, finite for
    repeated eigenvalues.
    """
    with torch.no_grad():
        s = e.s
        if rtol is None:
            rtol = default_rtol(s.shape[-1], torch.float32)
        smax = s[..., -1:].clamp_min(0.0)
        keep = s > rtol * smax
        s_safe = torch.where(keep, s, torch.ones_like(s))
        if power == -1.0:
            f = torch.where(keep, 1.0 / s_safe, torch.zeros_like(s))
            dd = -f[..., :, None] * f[..., None, :]  # (1/si - 1/sj)/(si - sj)
        elif power == -0.5:
            rs = torch.sqrt(s_safe)
            f = torch.where(keep, 1.0 / rs, torch.zeros_like(s))
            dd = -(f[..., :, None] * f[..., None, :]) / (rs[..., :, None] + rs[..., None, :])
        else:
            raise ValueError(f"unsupported power {power}; use -1 or -0.5")
        value = _rot(e, torch.diag_embed(f))
    d = _delta(e)
    if d is None:
        return value
    ut = e.u.transpose(-1, -2)
    return value + _rot(e, (ut @ d @ e.u) * dd)


def torch_sym_pinv(a: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Differentiable pseudo-inverse of a symmetric PSD torch matrix (float64 inside).

    Value: ``U diag(1/s) U^T`` over eigenvalues ``s > rtol * max(s)``. Gradient:
    ``-A^+ G A^+`` (exact where the rank is constant), finite for repeated eigenvalues.
    """
    if rtol is None:
        rtol = default_rtol(a.shape[-1], a.dtype)
    return spectral_power(torch_sym_eig(a), -1.0, rtol).to(a.dtype)


def torch_sym_inv_sqrt(a: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Differentiable pseudo-inverse square root ``A^{+/2}`` of a symmetric PSD matrix."""
    if rtol is None:
        rtol = default_rtol(a.shape[-1], a.dtype)
    return spectral_power(torch_sym_eig(a), -0.5, rtol).to(a.dtype)
