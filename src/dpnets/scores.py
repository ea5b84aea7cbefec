"""DPNets score functionals and the matching torch losses.

Functions (like ``torch.nn.functional``) take feature batches ``x = psi(X)`` and
``y = psi'(X')`` of shape ``(n, r)`` and return a differentiable scalar score to be
*maximised*. The ``nn.Module`` losses (like ``torch.nn``) return the *negative* score, to be
minimised.

Equation numbers refer to the ICLR 2024 paper (``shared/paper/dpnets-iclr2024.tex``):

* covariances: Eq. (8) and the empirical version in Sec. 4;
* metric distortion ``R(C) = tr(C^2 - C - ln C)``: Sec. 3;
* projection score ``P^gamma``: Eq. (7);
* relaxed score ``S^gamma``: Eq. (9);
* Theorem 1 (Eq. 10): ``S^0 <= P^0 <= sum_{i<=r} sigma_i(T)^2``;
* the multi-step (Chapman–Kolmogorov) consistency penalty, :func:`multistep_penalty`, an
  addition of ours (not in the paper).

Scale of ``gamma`` (the paper's): the penalty is ``gamma * (R(Cx) + R(Cy)) / (2 d)`` for
``d x d`` covariances, i.e. ``R`` averaged over the ``2 d`` eigenvalues, as in the authors'
code (kooplearn). So ``gamma = 1`` is the setting of the paper's experiments (App. F), and
the same ``gamma`` means the same trade-off whatever the feature dimension. The generator
score uses ``gamma * R(Cx) / d``.

The constant function: with ``constant=True`` the scores are those of the feature map
``[1, psi]`` (a column of ones prepended to ``x`` and ``y``), i.e. the paper's scores of
``r + 1`` functions of which one is fixed to the constant. ``r`` learned features then
describe ``r`` non-trivial processes, and the penalty's optimum ``Cov([1, psi]) = I`` makes
``psi`` centred and white. For the VAMP scores (centred, ``+1``) the constant is already
implicit; ``constant`` then only enters the penalty.

Numerical choices
-----------------
* Covariances are computed in the input dtype (TF32 is switched off for them on GPU); all
  spectral work on the ``r x r`` matrices happens in float64 and is cast back.
* Pseudo-inverses come from a symmetric eigendecomposition with a relative rank cut-off
  (:mod:`dpnets.linalg`), with a gradient that is finite at repeated eigenvalues.
* Without sample weights, the projection score (and VAMP-2) is one autograd function of
  the Gram matrix of ``[1, X, 1, Y]`` with a closed-form backward (few kernels).
* On a GPU (:func:`dpnets.linalg.spectral_method`, ``"auto"``) the projection, VAMP-2,
  generator scores, the metric distortion and the consistency penalty use a Cholesky
  factorisation instead (:func:`dpnets.linalg.torch_sym_chol`): no host synchronisation
  and a few kernels per step, the same values to round-off wherever no eigenvalue is near
  the cut-off (certified on the device), and the Tikhonov surrogate ``(C + floor I)^{-1}``
  where one is. No step synchronises there: the relaxed score's operator norms come
  from repeated squaring (:func:`dpnets.linalg.max_eigval_by_squaring`, within ``1e-10``
  relative of ``eigh``'s whatever the gaps) and VAMP-1's nuclear norm is ``tr(U^T K)``
  with ``U`` the polar factor by QDWH (:func:`dpnets.linalg.nuclear_norm`: QR and
  Cholesky, no ``svdvals``).
* ``ln C`` in the metric distortion uses eigenvalues clamped at ``rtol * max(1, lambda_max)``
  so that ``R`` stays finite and differentiable for (near-)singular ``C``; the quadratic
  part ``tr(C^2 - C)`` is computed exactly and still pushes small eigenvalues up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from dpnets.distributed import global_sums, reducing
from dpnets.linalg import (
    SymChol,
    SymEig,
    cached_eye,
    cholesky_maps,
    default_rtol,
    eigh_maps,
    max_eigval,
    max_eigval_by_squaring,
    max_eigval_maps,
    nuclear_norm,
    spectral_power,
    spectral_trace,
    torch_sym_chol,
    torch_sym_eig,
    torch_sym_inv_sqrt,
    uses_cholesky,
)

__all__ = [
    "covariances",
    "metric_distortion",
    "projection_score",
    "relaxed_score",
    "vamp_score",
    "projection_score_from_covariances",
    "relaxed_score_from_covariances",
    "ProjectionLoss",
    "RelaxedLoss",
    "VAMPLoss",
    "SCORES",
    "make_loss",
    "with_constant",
    "multistep_penalty",
    "MultistepLoss",
    "pair_objective",
]


@contextlib.contextmanager
def no_tf32(device: torch.device) -> Iterator[None]:
    """Disable TF32 matmuls on CUDA for the duration of the block (covariance maths)."""
    if device.type != "cuda":
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _check_pair(x: Tensor, y: Tensor) -> None:
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(
            f"features must be 2-D (n, r); got shapes {tuple(x.shape)} and {tuple(y.shape)}"
        )
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"x and y must have the same number of samples; got {x.shape[0]} and {y.shape[0]}"
        )


def covariances(
    x: Tensor,
    y: Tensor | None = None,
    center: bool = False,
    weights: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Empirical covariances ``(Cx, Cy, Cxy)`` of two feature batches.

    ``Cx = X^T X / n``, ``Cy = Y^T Y / n``, ``Cxy = X^T Y / n`` (paper Eq. 8 and Sec. 4),
    uncentred by default as in the paper.

    Parameters
    ----------
    x, y : Tensor of shape (n, r) and (n, r')
        Features ``psi(X)`` and ``psi'(X')``. If ``y`` is None, ``y = x``.
    center : bool, default False
        Subtract each batch's (weighted) mean first.
    weights : Tensor of shape (n,), optional
        Non-negative sample weights; normalised to sum to one. Default: uniform ``1/n``.

    Returns
    -------
    cx, cy, cxy : Tensor
        Shapes (r, r), (r', r') and (r, r').
    """
    if y is None:
        y = x
    _check_pair(x, y)
    # sums divided by the total weight; inside a distributed fit the sums and the weight
    # are those of the global batch (dpnets.distributed; outside, global_sums is a no-op)
    n = x.shape[0]
    w = None
    if weights is None:
        count = _count(x)
    else:
        w = weights.to(x.dtype).reshape(-1)
        if w.shape[0] != n:
            raise ValueError(f"weights has {w.shape[0]} entries for {n} samples")
        count = w.sum().reshape(1)
    with no_tf32(x.device):
        if center:
            sx = x.sum(0) if w is None else (w[:, None] * x).sum(0)
            sy = y.sum(0) if w is None else (w[:, None] * y).sum(0)
            sx, sy, total = _global_sums(sx, sy, count=count)
            x, y = x - sx / total, y - sy / total
        if w is None:  # one Gram matrix of [X, Y], summed and divided as one tensor
            return _gram_blocks(_gram(x, y, count), x.shape[1], y is x)
        xw, yw = x * w[:, None], y * w[:, None]
        cx, cy, cxy, total = _global_sums(xw.T @ x, yw.T @ y, xw.T @ y, count=count)
    return cx / total, cy / total, cxy / total


def _count(x: Tensor) -> Tensor | int:
    """The number of samples of a batch: a tensor to be summed over processes inside a
    distributed fit, else a Python number (no tensor per step)."""
    n = x.shape[0]
    return torch.full((1,), float(n), dtype=x.dtype, device=x.device) if reducing() else n


def _global_sums(*sums: Tensor, count: Tensor | int) -> tuple:
    """:func:`global_sums` of ``sums`` and ``count``; a Python ``count`` (not reducing)
    passes through as it is."""
    if isinstance(count, int):
        return (*sums, count)
    return global_sums(*sums, count)


class _SymGram(torch.autograd.Function):
    """``z^T z`` with the one-GEMM backward ``z (G + G^T)``."""

    @staticmethod
    def forward(ctx, z: Tensor) -> Tensor:  # noqa: D102
        ctx.save_for_backward(z)
        return z.T @ z

    @staticmethod
    def backward(ctx, g: Tensor) -> Tensor:  # noqa: D102
        (z,) = ctx.saved_tensors
        return z @ (g + g.T)


def _gram(x: Tensor, y: Tensor, count: Tensor | int, constant: bool = False) -> Tensor:
    """The covariance (Gram matrix over the count) of ``[X, Y]`` (of ``X`` when ``y is
    x``), with a column of ones before each block when ``constant``: one concatenation,
    one GEMM (:class:`_SymGram`, without TF32), one division."""
    parts = [x] if y is x else [x, y]
    if constant:
        one = torch.ones_like(x[:, :1])
        parts = [t for p in parts for t in (one, p)]
    z = parts[0] if len(parts) == 1 else torch.cat(parts, 1)
    with no_tf32(z.device):
        gram, total = _global_sums(_SymGram.apply(z), count=count)
    return gram / total


def _gram_blocks(c: Tensor, r: int, shared: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(Cx, Cy, Cxy)`` as views of the Gram matrix ``c`` of ``[X, Y]`` (``shared``:
    ``y is x``, ``c`` is the one block). One GEMM forward and one backward
    (:class:`_SymGram`), instead of three and six."""
    if shared:
        return c, c, c
    return c[:r, :r], c[r:, r:], c[:r, r:]


Decomposition = SymEig | SymChol


def _eigs(cx: Tensor, cy: Tensor, rtol: float | None = None) -> tuple[Decomposition, ...]:
    """The float64 decompositions of ``Cx`` and ``Cy`` for the spectral work.

    Equally shaped matrices (the usual case) give **one** decomposition of the stacked
    ``(2, r, r)`` batch, ``(e,)``: one ``eigh`` (or ``cholesky_ex``) call, and every
    spectral map after it (pseudo-inverses, metric distortions) runs once on the batch,
    with half the kernel launches of two separate passes. Otherwise ``(ex, ey)``.
    With ``rtol`` (the maps' cut-off) and :func:`dpnets.linalg.uses_cholesky`, Cholesky
    decompositions (:class:`dpnets.linalg.SymChol`, no host synchronisation); without,
    always eigendecompositions (:class:`dpnets.linalg.SymEig`).
    """
    if rtol is not None and uses_cholesky(cx):

        def dec(a: Tensor) -> Decomposition:
            return torch_sym_chol(a, rtol)

    else:
        dec = torch_sym_eig
    if cx.shape == cy.shape:
        return (dec(torch.stack([cx, cy])),)
    return dec(cx), dec(cy)


def _pinv(e: Decomposition, rtol: float) -> Tensor:
    """``C^+`` with the relative cut-off ``rtol`` from a decomposition (float64)."""
    if isinstance(e, SymChol):
        return e.inv
    return spectral_power(e, -1.0, rtol)


def _pair(
    es: tuple[Decomposition, ...], fn: Callable[[Decomposition], Tensor]
) -> tuple[Tensor, Tensor]:
    """``(fn(ex), fn(ey))`` from :func:`_eigs`' result (``fn`` batched when stacked)."""
    if len(es) == 1:
        out = fn(es[0])
        return out[0], out[1]
    return fn(es[0]), fn(es[1])


def _whiten(e: Decomposition, rtol: float) -> Tensor:
    """A whitening ``W`` with ``W C W^T`` the projector on the range of ``C``:
    ``C^{+/2}`` (symmetric) from an eigendecomposition, ``L^{-1}`` from a Cholesky one. Any
    two differ by an orthogonal factor on the left, which Frobenius norms and singular
    values of ``W_x M W_y^T`` do not see."""
    if isinstance(e, SymChol):
        return e.whiten
    return spectral_power(e, -0.5, rtol)


def _metric_distortion(e: Decomposition, rtol: float) -> Tensor:
    """``tr(C^2 - C) - sum_i ln max(s_i, floor)`` from a decomposition (float64).

    Batched: a decomposition of shape ``(..., r, r)`` gives values of shape ``(...)``. The
    clamp ``floor = rtol * max(1, lambda_max)`` stays a tensor (no host synchronisation).
    """
    quadratic = (e.a * e.a).sum((-1, -2)) - torch.diagonal(e.a, dim1=-2, dim2=-1).sum(-1)
    if isinstance(e, SymChol):
        return quadratic - e.logdet
    floor = rtol * torch.clamp(e.s[..., -1:], min=1.0)

    def log_clamped(s: Tensor) -> Tensor:
        return torch.log(torch.maximum(s, floor))

    def dlog(s: Tensor) -> Tensor:
        return torch.where(s > floor, 1.0 / torch.maximum(s, floor), torch.zeros_like(s))

    return quadratic - spectral_trace(e, log_clamped, dlog)


def metric_distortion(c: Tensor, rtol: float | None = None) -> Tensor:
    """Metric distortion loss ``R(C) = tr(C^2 - C - ln C)`` (paper Sec. 3).

    ``R(C) >= 0`` with equality iff ``C = I``. Eigenvalues entering ``ln`` are clamped at
    ``rtol * max(1, lambda_max)`` so that the value and gradient stay finite for singular
    ``C``; the exact quadratic part still pushes vanishing eigenvalues up.

    Parameters
    ----------
    c : Tensor of shape (r, r)
        Symmetric positive semi-definite matrix.
    rtol : float, optional
        Relative clamp; default ``r * eps(dtype of c)``.
    """
    if rtol is None:
        rtol = default_rtol(c.shape[0], c.dtype)
    e = torch_sym_chol(c, rtol) if uses_cholesky(c) else torch_sym_eig(c)
    return _metric_distortion(e, rtol).to(c.dtype)


def _reg(es: tuple[Decomposition, ...], gamma: float, rtol: float) -> Tensor | float:
    """``gamma (R(Cx) + R(Cy)) / (2 d)``: the paper's scale (module docstring), from
    :func:`_eigs`' decompositions (``d``: the dimension of ``Cx``)."""
    if gamma == 0.0:
        return 0.0
    coef = gamma / (2 * es[0].a.shape[-1])
    return coef * sum(_metric_distortion(e, rtol).sum() for e in es)


def with_constant(x: Tensor) -> Tensor:
    """``[1, x]``: a column of ones prepended to features ``x`` of shape (n, r)."""
    if x.ndim != 2:
        raise ValueError(f"features must be 2-D (n, r); got shape {tuple(x.shape)}")
    return torch.cat([torch.ones_like(x[:, :1]), x], dim=1)


def projection_score_from_covariances(
    cx: Tensor, cy: Tensor, cxy: Tensor, gamma: float = 0.0, rtol: float | None = None
) -> Tensor:
    """``P^gamma`` (Eq. 7) from covariance matrices; see :func:`projection_score`."""
    if rtol is None:
        rtol = default_rtol(cx.shape[0], cxy.dtype)
    es = _eigs(cx, cy, rtol)
    cx_pinv, cy_pinv = _pair(es, lambda e: _pinv(e, rtol))
    cxy64 = cxy.to(torch.float64)
    # ||Cx^{+/2} Cxy Cy^{+/2}||_HS^2 = tr(Cx^+ Cxy Cy^+ Cxy^T)
    score = torch.sum((cx_pinv @ cxy64) * (cxy64 @ cy_pinv))
    return (score - _reg(es, gamma, rtol)).to(cxy.dtype)


def relaxed_score_from_covariances(
    cx: Tensor, cy: Tensor, cxy: Tensor, gamma: float = 0.0, rtol: float | None = None
) -> Tensor:
    """``S^gamma`` (Eq. 9) from covariance matrices; see :func:`relaxed_score`."""
    if rtol is None:
        rtol = default_rtol(cx.shape[0], cxy.dtype)
    tiny = torch.finfo(cxy.dtype).tiny
    if uses_cholesky(cxy):  # no eigh: no host synchronisation on a GPU
        if cx.shape == cy.shape:
            nx, ny = max_eigval_by_squaring(torch.stack([cx, cy]))
        else:
            nx, ny = max_eigval_by_squaring(cx), max_eigval_by_squaring(cy)
        reg = _reg(_eigs(cx, cy, rtol), gamma, rtol) if gamma != 0.0 else 0.0
    else:
        es = _eigs(cx, cy)
        nx, ny = _pair(es, max_eigval)
        reg = _reg(es, gamma, rtol)
    denom = torch.clamp(nx * ny, min=tiny)
    score = (cxy.to(torch.float64) ** 2).sum() / denom
    return (score - reg).to(cxy.dtype)


def _gram_moments(c: Tensor, r: int, shared: bool) -> tuple[Tensor, Tensor]:
    """``(A, B)`` in float64 from the covariance ``c`` of ``[X, Y]`` (of ``X`` when
    ``shared``): ``A`` the symmetrised ``(2, r, r)`` stack ``[Cx, Cy]``, ``B = Cxy``."""
    c64 = c.to(torch.float64)
    if shared:
        return (0.5 * (c64 + c64.T)).expand(2, r, r), c64
    a = torch.stack([c64[:r, :r], c64[r:, r:]])
    return 0.5 * (a + a.transpose(-1, -2)), c64[:r, r:]


def _inverse_maps(a: Tensor, rtol: float, cholesky: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(C^+, ln det_floor C, C^+_floor)`` of the stacked covariances ``a`` without
    autograd: :func:`dpnets.linalg.cholesky_maps` (the GPU path; its surrogate where it does
    not certify ``C``, the inverse serving both) or :func:`dpnets.linalg.eigh_maps`."""
    if cholesky:
        inv, logdet, _, _ = cholesky_maps(a, rtol)
        return inv, logdet, inv
    return eigh_maps(a, rtol)


def _distortions(a: Tensor, logdet: Tensor) -> Tensor:
    """``R(C) = tr(C^2 - C) - ln det_floor C`` of a batch, from its clamped log-determinants."""
    return (a * a).sum((-1, -2)) - torch.diagonal(a, dim1=-2, dim2=-1).sum(-1) - logdet


def _distortion_gradient(a: Tensor, dlog: Tensor, coef: float) -> Tensor:
    """The gradient of ``- coef R(C)``: ``- coef (2C - I - C^+_floor)`` (batched)."""
    return coef * (dlog - 2.0 * a + cached_eye(a.shape[-1], a.dtype, a.device))


def _gram_gradient(gx: Tensor, gy: Tensor, half_gb: Tensor, shared: bool) -> Tensor:
    """The gradient with respect to the covariance ``c`` of ``[X, Y]`` from those with
    respect to ``Cx``, ``Cy`` and (twice ``half_gb``) ``Cxy``: the symmetric gradient,
    ``half_gb`` in both off-diagonal blocks (``shared``: all three are ``c``)."""
    if shared:
        return gx + gy + 2.0 * half_gb
    return torch.cat([torch.cat([gx, half_gb], 1), torch.cat([half_gb.T, gy], 1)])


class _ProjectionFromGram(torch.autograd.Function):
    """``P^gamma`` from the covariance ``c`` of ``[X, Y]`` with a closed-form backward: a
    handful of kernels forward and backward, the two ``r x r`` blocks decomposed as one
    batch. ``cholesky``: :func:`dpnets.linalg.cholesky_maps` (the GPU path, no host
    synchronisation), the values and gradients of :func:`projection_score_from_covariances`
    to round-off wherever it certifies both covariances, else its surrogate; otherwise
    :func:`dpnets.linalg.eigh_maps`, those of :func:`projection_score_from_covariances`
    to round-off everywhere.

    With ``B = Cxy``, ``Ax = Cx^+``, ``Ay = Cy^+``, ``K = Ax B Ay``: ``dP/dB = 2K``,
    ``dP/dCx = -K (Ax B)^T``, ``dP/dCy = -K^T (B Ay)`` (the range held fixed) and
    ``dR(C)/dC = 2C - I - C^+_floor``.
    """

    @staticmethod
    def forward(  # noqa: D102
        ctx, c: Tensor, r: int, shared: bool, gamma: float, rtol: float, cholesky: bool
    ):
        a, b = _gram_moments(c, r, shared)
        inv, logdet, dlog = _inverse_maps(a, rtol, cholesky)
        axb, bay = inv[0] @ b, b @ inv[1]
        score = (axb * bay).sum()
        coef = gamma / (2 * r)
        if gamma != 0.0:
            score = score - coef * _distortions(a, logdet).sum()
        ctx.save_for_backward(a, inv, dlog, axb, bay)
        ctx.meta = (r, shared, coef, c.dtype)
        return score.to(c.dtype)

    @staticmethod
    def backward(ctx, g: Tensor):  # noqa: D102
        a, inv, dlog, axb, bay = ctx.saved_tensors
        r, shared, coef, dtype = ctx.meta
        k = axb @ inv[1]  # Ax B Ay: dP/dB = 2K
        gx, gy = -(k @ axb.T), -(k.T @ bay)
        if coef != 0.0:
            reg = _distortion_gradient(a, dlog, coef)
            gx, gy = gx + reg[0], gy + reg[1]
        grad = _gram_gradient(gx, gy, k, shared)
        return (g.to(torch.float64) * grad).to(dtype), None, None, None, None, None


class _DistortionsFromGram(torch.autograd.Function):
    """The penalty ``coef (R(Cx) + R(Cy))`` from the covariance ``c`` of ``[X, Y]`` with a
    closed-form backward (as :class:`_ProjectionFromGram`, whose penalty it is): the
    metric distortions of the VAMP scores (:func:`vamp_score`), whose core is of the
    centred features. ``cholesky``: :func:`dpnets.linalg.cholesky_maps`, else
    :func:`dpnets.linalg.eigh_maps`."""

    @staticmethod
    def forward(  # noqa: D102
        ctx, c: Tensor, r: int, shared: bool, coef: float, rtol: float, cholesky: bool
    ):
        a, _ = _gram_moments(c, r, shared)
        _, logdet, dlog = _inverse_maps(a, rtol, cholesky)
        ctx.save_for_backward(a, dlog)
        ctx.meta = (r, shared, coef, c.dtype)
        return (coef * _distortions(a, logdet).sum()).to(c.dtype)

    @staticmethod
    def backward(ctx, g: Tensor):  # noqa: D102
        a, dlog = ctx.saved_tensors
        r, shared, coef, dtype = ctx.meta
        grad = -_distortion_gradient(a, dlog, coef)  # of + coef R
        grad = _gram_gradient(grad[0], grad[1], torch.zeros_like(a[0]), shared)
        return (g.to(torch.float64) * grad).to(dtype), None, None, None, None, None


class _RelaxedFromGram(torch.autograd.Function):
    """``S^gamma`` from the covariance ``c`` of ``[X, Y]`` with a closed-form backward (as
    :class:`_ProjectionFromGram`). ``cholesky``: the operator norms by repeated squaring
    and the metric distortions by :func:`dpnets.linalg.cholesky_maps` (the GPU path, no
    host synchronisation); otherwise by ``eigh``.

    With ``B = Cxy``, ``f = ||B||_F^2``, ``nx``, ``ny`` the operator norms and ``Px``, ``Py``
    their gradients (top eigenprojectors): ``dS/dB = 2B / (nx ny)``, ``dS/dCx = -f /
    (nx^2 ny) Px``, ``dS/dCy = -f / (nx ny^2) Py`` (zero where ``nx ny`` is clamped at
    ``tiny``).
    """

    @staticmethod
    def forward(  # noqa: D102
        ctx, c: Tensor, r: int, shared: bool, gamma: float, rtol: float, cholesky: bool
    ):
        a, b = _gram_moments(c, r, shared)
        norms, proj = max_eigval_maps(a, squaring=cholesky)
        prod = norms[0] * norms[1]
        tiny = torch.finfo(c.dtype).tiny
        denom = prod.clamp_min(tiny)
        f = (b * b).sum()
        score = f / denom
        coef = gamma / (2 * r)
        dlog = None
        if gamma != 0.0:
            _, logdet, dlog = _inverse_maps(a, rtol, cholesky)
            score = score - coef * _distortions(a, logdet).sum()
        # d(f / denom) / d norms, zero where clamped
        dnorm = torch.where(prod > tiny, -f / (denom * denom), torch.zeros_like(f)) * norms.flip(0)
        saved = (a, b, denom, dnorm, proj) + (() if dlog is None else (dlog,))
        ctx.save_for_backward(*saved)
        ctx.meta = (r, shared, coef, c.dtype)
        return score.to(c.dtype)

    @staticmethod
    def backward(ctx, g: Tensor):  # noqa: D102
        a, b, denom, dnorm, proj, *dlog = ctx.saved_tensors
        r, shared, coef, dtype = ctx.meta
        gxy = dnorm[:, None, None] * proj
        gx, gy = gxy[0], gxy[1]
        if dlog:
            reg = _distortion_gradient(a, dlog[0], coef)
            gx, gy = gx + reg[0], gy + reg[1]
        grad = _gram_gradient(gx, gy, b / denom, shared)
        return (g.to(torch.float64) * grad).to(dtype), None, None, None, None, None


def projection_score(
    x: Tensor,
    y: Tensor,
    gamma: float = 0.0,
    *,
    weights: Tensor | None = None,
    rtol: float | None = None,
    constant: bool = False,
) -> Tensor:
    """Projection score ``P^gamma`` (paper Eq. 7).

    ``P^gamma = ||Cx^{+/2} Cxy Cy^{+/2}||_HS^2 - gamma (R(Cx) + R(Cy)) / (2r)`` with
    uncentred covariances (``gamma`` on the paper's scale, see the module docstring).
    Computed as ``tr(Cx^+ Cxy Cy^+ Cxy^T)``; the pseudo-inverses use a symmetric
    eigendecomposition with relative cut-off ``rtol`` (default
    ``r * eps(dtype)``). Cost ``O(n r^2 + r^3)``.

    Parameters
    ----------
    x, y : Tensor of shape (n, r)
        Features ``psi(X)`` and ``psi'(X')`` of paired samples.
    gamma : float, default 0.0
        Weight of the metric distortion penalty.
    weights : Tensor of shape (n,), optional
        Sample weights (see :func:`covariances`).
    rtol : float, optional
        Relative rank cut-off for the pseudo-inverses.
    constant : bool, default False
        Score the feature map ``[1, psi]`` (module docstring).

    Returns
    -------
    Tensor
        Scalar score, to be maximised.
    """
    _check_pair(x, y)
    if weights is None and x.shape[1] == y.shape[1]:  # fused: one Gram, one function
        r = x.shape[1] + int(constant)
        c = _gram(x, y, _count(x), constant)
        if rtol is None:
            rtol = default_rtol(r, c.dtype)
        chol = uses_cholesky(c)
        return _ProjectionFromGram.apply(c, r, y is x, float(gamma), float(rtol), chol)
    if constant:
        x, y = with_constant(x), with_constant(y)
    cx, cy, cxy = covariances(x, y, weights=weights)
    return projection_score_from_covariances(cx, cy, cxy, gamma, rtol)


def relaxed_score(
    x: Tensor,
    y: Tensor,
    gamma: float = 0.0,
    *,
    weights: Tensor | None = None,
    constant: bool = False,
) -> Tensor:
    """Relaxed score ``S^gamma`` (paper Eq. 9).

    ``S^gamma = ||Cxy||_HS^2 / (||Cx|| ||Cy||) - gamma (R(Cx) + R(Cy)) / (2r)``, where the
    denominator holds operator norms. No matrix inversion: well conditioned by design.
    Theorem 1: ``S^0 <= P^0``. On a GPU (:func:`dpnets.linalg.spectral_method`) the
    operator norms come from repeated squaring
    (:func:`dpnets.linalg.max_eigval_by_squaring`; no host synchronisation), elsewhere
    from ``eigh``: the same values to ``1e-10`` relative.

    When to prefer it over :func:`projection_score`: when the feature covariances are so
    ill-conditioned that the pseudo-inverses of ``P^gamma`` are unreliable (very large ``r``
    against the batch size, or features of wildly different scales), as for the paper's
    fluid-flow example. It is a *lower bound* whose maximisers weigh the features by their
    correlation, so at a small budget it resolves the slowest processes less sharply than
    ``P^gamma``: measured on ``benchmarks/bench_out_of_box.py`` it gives timescales further
    from the reference on most systems, which is why it is not the default.

    Parameters
    ----------
    x, y : Tensor of shape (n, r)
        Features ``psi(X)`` and ``psi'(X')`` of paired samples.
    gamma : float, default 0.0
        Weight of the metric distortion penalty.
    weights : Tensor of shape (n,), optional
        Sample weights (see :func:`covariances`).
    constant : bool, default False
        Score the feature map ``[1, psi]`` (module docstring).
    """
    _check_pair(x, y)
    if weights is None and x.shape[1] == y.shape[1]:  # fused: one Gram, one function
        r = x.shape[1] + int(constant)
        c = _gram(x, y, _count(x), constant)
        rtol = default_rtol(r, c.dtype)
        chol = uses_cholesky(c)
        return _RelaxedFromGram.apply(c, r, y is x, float(gamma), float(rtol), chol)
    if constant:
        x, y = with_constant(x), with_constant(y)
    cx, cy, cxy = covariances(x, y, weights=weights)
    return relaxed_score_from_covariances(cx, cy, cxy, gamma)


def vamp_score(
    x: Tensor,
    y: Tensor,
    p: int = 2,
    gamma: float = 0.0,
    *,
    weights: Tensor | None = None,
    rtol: float | None = None,
    constant: bool = False,
) -> Tensor:
    """VAMP-p score of VAMPNets (Mardt et al. 2018), ``p in {1, 2}``.

    Convention (as in VAMPNets and deeptime): the features are centred, the Koopman matrix
    ``K = Cx^{+/2} Cxy Cy^{+/2}`` is formed from the centred covariances, and ``1`` is added
    for the constant function, which is always implicitly in the span::

        VAMP-2 = 1 + ||K||_HS^2,     VAMP-1 = 1 + ||K||_*  (nuclear norm).

    Hence ``vamp_score(x, y, 2) == projection_score([1, x], [1, y])`` with uncentred
    features (tested). With ``gamma > 0`` the metric distortion of the *uncentred*
    covariances is subtracted, as for the DPNets scores (of ``[1, psi]`` with
    ``constant=True``; the VAMP part already holds the constant and does not change).

    Parameters
    ----------
    x, y : Tensor of shape (n, r)
    p : {1, 2}
    gamma : float, default 0.0
    weights : Tensor of shape (n,), optional
    rtol : float, optional
        Relative rank cut-off for the pseudo-inverses.
    """
    if p not in (1, 2):
        raise ValueError(f"vamp_score supports p=1 or p=2, got p={p!r}")
    core = None
    _check_pair(x, y)
    if p == 2 and weights is None and x.shape[1] == y.shape[1]:  # fused (projection_score)
        count = _count(x)
        sx, sy, total = _global_sums(x.sum(0), y.sum(0), count=count)
        c = _gram(x - sx / total, y - sy / total, count)
        dtype = c.dtype
        if rtol is None:
            rtol = default_rtol(x.shape[1], dtype)
        chol = uses_cholesky(c)
        core = _ProjectionFromGram.apply(c, x.shape[1], False, 0.0, float(rtol), chol)
        core = core.to(torch.float64)
    else:
        cx, cy, cxy = covariances(x, y, center=True, weights=weights)
        dtype = cxy.dtype
        if rtol is None:
            rtol = default_rtol(cx.shape[0], dtype)
    if p == 2 and core is None:
        core = projection_score_from_covariances(cx, cy, cxy, 0.0, rtol).to(torch.float64)
    elif p == 1:
        # whitened K (Cx^{+/2} or, by Cholesky, L_x^{-1}: the same singular values)
        wx, wy = _pair(_eigs(cx, cy, rtol), lambda e: _whiten(e, rtol))
        k = wx @ cxy.to(torch.float64) @ wy.transpose(-1, -2)
        # on a GPU without svdvals (a host synchronisation): QDWH's polar factor
        core = nuclear_norm(k) if uses_cholesky(k) else torch.linalg.svdvals(k).sum()
    score = 1.0 + core
    if gamma != 0.0 and weights is None and x.shape[1] == y.shape[1]:  # fused penalty
        d = x.shape[1] + int(constant)
        c = _gram(x, y, _count(x), constant)
        chol = uses_cholesky(c)
        coef = gamma / (2 * d)
        penalty = _DistortionsFromGram.apply(c, d, y is x, coef, float(rtol), chol)
        score = score - penalty.to(torch.float64)
    elif gamma != 0.0:
        if constant:
            x, y = with_constant(x), with_constant(y)
        ux, uy, _ = covariances(x, y, weights=weights)
        score = score - _reg(_eigs(ux, uy, rtol), gamma, rtol)
    return score.to(dtype)


# ------------------------------------------------------------------------------ modules


class ProjectionLoss(nn.Module):
    """Negative projection score ``-P^gamma`` (Eq. 7). See :func:`projection_score`."""

    def __init__(
        self, gamma: float = 0.0, rtol: float | None = None, constant: bool = False
    ) -> None:
        super().__init__()
        self.gamma = float(gamma)
        self.rtol = rtol
        self.constant = bool(constant)

    def forward(self, x: Tensor, y: Tensor, weights: Tensor | None = None) -> Tensor:
        return -projection_score(
            x, y, self.gamma, weights=weights, rtol=self.rtol, constant=self.constant
        )


class RelaxedLoss(nn.Module):
    """Negative relaxed score ``-S^gamma`` (Eq. 9). See :func:`relaxed_score`."""

    def __init__(self, gamma: float = 0.0, constant: bool = False) -> None:
        super().__init__()
        self.gamma = float(gamma)
        self.constant = bool(constant)

    def forward(self, x: Tensor, y: Tensor, weights: Tensor | None = None) -> Tensor:
        return -relaxed_score(x, y, self.gamma, weights=weights, constant=self.constant)


class VAMPLoss(nn.Module):
    """Negative VAMP-p score. See :func:`vamp_score`."""

    def __init__(
        self, p: int = 2, gamma: float = 0.0, rtol: float | None = None, constant: bool = False
    ) -> None:
        super().__init__()
        if p not in (1, 2):
            raise ValueError(f"VAMPLoss supports p=1 or p=2, got p={p!r}")
        self.p = p
        self.gamma = float(gamma)
        self.rtol = rtol
        self.constant = bool(constant)

    def forward(self, x: Tensor, y: Tensor, weights: Tensor | None = None) -> Tensor:
        return -vamp_score(
            x, y, self.p, self.gamma, weights=weights, rtol=self.rtol, constant=self.constant
        )


def multistep_penalty(
    x: Tensor, ys: Tensor, *, constant: bool = False, rtol: float | None = None
) -> Tensor:
    r"""Multi-step (Chapman–Kolmogorov) consistency of a feature map, to be *minimised*.

    ``sum_{k=2}^{K} ||K_k - K_1^k||_F^2`` with the whitened compressions
    ``K_k = Cx^{+/2} C_{0k} Cx^{+/2}``, ``Cx = E[psi(x_t) psi(x_t)^T]`` and
    ``C_{0k} = E[psi(x_t) psi(x_{t + k tau})^T]`` (uncentred, Eq. 8). If the span of ``psi``
    is invariant under the transfer operator ``T`` of lag ``tau``, the compression of
    ``T^k`` is the ``k``-th power of that of ``T`` (Chapman–Kolmogorov), so the penalty is
    zero; it grows with the non-invariance that moves eigenvalues, at almost no cost in
    the projection score. An addition of ours, not in the paper (``DPNet(consistency=)``;
    its results on the noisy logistic map: ``benchmarks/results/logistic_map``).

    Parameters
    ----------
    x : Tensor (n, r)
        Features ``psi(x_t)``.
    ys : Tensor (n, K, r), K >= 2
        Features of the same feature map at ``x_{t + tau}, ..., x_{t + K tau}``.
    constant : bool, default False
        Prepend the constant function to the features (as the scores do).
    rtol : float, optional
        Relative cut-off of ``Cx^{+/2}``.

    Returns
    -------
    Tensor
        A float64 scalar (the spectral work is done in float64).
    """
    if x.ndim != 2 or ys.ndim != 3 or ys.shape[0] != x.shape[0] or ys.shape[2] != x.shape[1]:
        raise ValueError(
            f"x must be (n, r) and ys (n, K, r); got {tuple(x.shape)} and {tuple(ys.shape)}"
        )
    if ys.shape[1] < 2:
        raise ValueError(f"the penalty needs K >= 2 steps; got ys with K = {ys.shape[1]}")
    if constant:
        x = with_constant(x)
        ys = torch.cat([torch.ones_like(ys[:, :, :1]), ys], dim=2)
    with no_tf32(x.device):  # sums of the global batch in a distributed fit
        count = _count(x)
        # [C_00, C_01, ..., C_0K] from one GEMM: x^T [x, y_1, ..., y_K]
        steps = ys.shape[1]
        grams = x.T @ torch.cat([x[:, None], ys], 1).flatten(1)
        *sums, total = _global_sums(*grams.unflatten(1, (steps + 1, -1)).unbind(1), count=count)
        cx, c0k = sums[0] / total, (torch.stack(sums[1:]) / total).double()
    cx = cx.double()
    if uses_cholesky(cx):
        # W = L^{-1}: W C W^T = Q (C^{-1/2} C C^{-1/2}) Q^T with Q orthogonal, so every
        # ||K_k - K_1^k||_F is that of the symmetric whitening
        if rtol is None:
            rtol = default_rtol(cx.shape[0], torch.float64)
        w = torch_sym_chol(cx, rtol).whiten
    else:
        w = torch_sym_inv_sqrt(cx, rtol)
    ks = w @ c0k @ w.transpose(-1, -2)  # K_1, ..., K_K in one batched product
    k1 = ks[0]
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    power = k1
    for k in range(1, steps):
        power = power @ k1
        total = total + ((ks[k] - power) ** 2).sum()
    return total


class MultistepLoss(nn.Module):
    """A one-step loss plus ``weight`` times :func:`multistep_penalty`, on windows.

    ``forward(x, ys)`` with ``x = psi(x_t)`` (n, r) and ``ys`` (n, K, r) the features
    ``K`` lags ahead: ``base(x, ys[:, 0]) + weight * multistep_penalty(x, ys)``.
    """

    def __init__(self, base: nn.Module, weight: float, constant: bool = False) -> None:
        super().__init__()
        self.base = base
        self.weight = float(weight)
        self.constant = bool(constant)

    def forward(self, x: Tensor, ys: Tensor) -> Tensor:
        loss = self.base(x, ys[:, 0])
        if self.weight == 0.0:
            return loss
        penalty = multistep_penalty(x, ys, constant=self.constant)
        return loss + (self.weight * penalty).to(loss.dtype)


def pair_objective(
    psi: Callable[[Tensor], Tensor],
    psi_lag: Callable[[Tensor], Tensor] | None,
    objective: str,
    gamma: float,
    constant: bool,
    device: torch.device,
    dtype: torch.dtype,
    steps: int = 0,
    consistency: float = 0.0,
) -> tuple[Callable[[Sequence[Tensor]], tuple[Tensor, ...]], nn.Module]:
    """The training objective of lagged pairs: ``(outputs, loss)``, where ``outputs(batch)``
    moves a batch ``(x, y[, weights])`` to ``device``/``dtype`` and returns what ``loss``
    (:func:`make_loss` of ``objective``, ``gamma``, ``constant``) takes: the features
    ``psi(x)``, ``psi'(y)`` (``psi_lag``; None: ``psi``, one forward pass on the stacked
    batch) and the batch's weights, if any. With ``steps`` (windows ``y`` of shape
    ``(batch, steps, *state_shape)``, a shared encoder), the loss is :class:`MultistepLoss`
    with weight ``consistency``."""
    loss = make_loss(objective, float(gamma), constant=bool(constant))
    if steps:
        loss = MultistepLoss(loss, float(consistency), bool(constant))

    def to_dev(t: Tensor) -> Tensor:  # batches are standardised at conversion
        return t.to(device, non_blocking=True).to(dtype)

    def features(xb: Tensor, yb: Tensor) -> tuple[Tensor, Tensor]:
        if steps:  # windows: yb is (batch, K, *state_shape); the encoder is shared
            fx, fy = psi(torch.cat([xb, yb.flatten(0, 1)])).split(
                [xb.shape[0], yb.shape[0] * steps]
            )
            return fx, fy.unflatten(0, (xb.shape[0], steps))
        if psi_lag is None:  # shared weights: one forward pass on the stacked batch
            fx, fy = psi(torch.cat([xb, yb])).split([xb.shape[0], yb.shape[0]])
            return fx, fy
        return psi(xb), psi_lag(yb)

    # batches of weighted pairs (a biased run in rescaled time) carry the weights third
    def outputs(batch: Sequence[Tensor]) -> tuple[Tensor, ...]:
        return (*features(to_dev(batch[0]), to_dev(batch[1])), *batch[2:])

    return outputs, loss


#: Score names accepted by :class:`dpnets.DPNet` and :func:`make_loss`.
SCORES: tuple[str, ...] = ("projection", "relaxed", "vamp1", "vamp2")


def make_loss(score: str, gamma: float = 0.0, constant: bool = False) -> nn.Module:
    """Build the loss module for a score name in :data:`SCORES`."""
    if score == "projection":
        return ProjectionLoss(gamma, constant=constant)
    if score == "relaxed":
        return RelaxedLoss(gamma, constant=constant)
    if score == "vamp1":
        return VAMPLoss(1, gamma, constant=constant)
    if score == "vamp2":
        return VAMPLoss(2, gamma, constant=constant)
    raise ValueError(f"unknown score {score!r}; expected one of {', '.join(SCORES)}")


# ------------------------------------------------------------------------------ generator score
# Continuous-time DPNets (paper Sec. 3 "Generator learning", Thm. 2, Eq. 14). The features'
# Itô derivatives come from :mod:`dpnets.ito`.

#: Score names of the continuous-time (generator) training mode of :class:`dpnets.DPNet`.
GENERATOR_SCORES: tuple[str, ...] = ("generator", "dirichlet")


def generator_score_from_covariances(
    cx: Tensor, cd: Tensor, gamma: float = 0.0, rtol: float | None = None
) -> Tensor:
    """``P_d^gamma`` (Eq. 14) from ``Cx`` and ``C_d = E[psi dpsi^T]`` (:func:`generator_score`).

    ``tr(Cx^+ C_d)`` equals ``tr(Cx^{+/2} sym(C_d) Cx^{+/2})``, the sum of the finite
    eigenvalues of the symmetric generalised eigenproblem ``sym(C_d) v = lambda Cx v``
    (``Cx^+`` is symmetric, so only the symmetric part of ``C_d`` contributes). One float64
    eigendecomposition of ``Cx`` serves the pseudo-inverse (relative cut-off from the input
    dtype) and the metric distortion, with gradients stable at repeated eigenvalues.
    """
    if rtol is None:
        rtol = default_rtol(cx.shape[0], cd.dtype)
    e = torch_sym_chol(cx, rtol) if uses_cholesky(cx) else torch_sym_eig(cx)
    score = torch.sum(_pinv(e, rtol) * cd.to(torch.float64).T)
    if gamma != 0.0:
        score = score - (gamma / cx.shape[0]) * _metric_distortion(e, rtol)
    return score.to(cd.dtype)


def generator_score(
    x: Tensor,
    dx: Tensor,
    gamma: float = 0.0,
    *,
    weights: Tensor | None = None,
    rtol: float | None = None,
) -> Tensor:
    r"""Generator score ``P_d^gamma = tr(Cx^+ C_d) - gamma R(Cx) / r`` (paper Thm. 2, Eq. 14).

    ``Cx = E[psi psi^T]`` and ``C_d = E[psi (d psi)^T]`` with ``d psi`` the Itô derivative of
    the features (Eqs. 12-13, :func:`dpnets.ito.ito_derivative`), estimated on samples of the
    invariant distribution. For a self-adjoint generator (a reversible diffusion) with
    eigenvalues ``0 = lambda_0 >= lambda_1 >= ...``, ``P_d^0 <= lambda_0 + ... + lambda_{r-1}``
    with equality for the leading eigenfunctions (Thm. 2). ``R`` is needed: a
    rank-deficient ``Cx`` (e.g. collapsed, constant features) gives a larger partial trace.

    Numerics: ``tr(Cx^+ C_d)`` is the sum of the finite eigenvalues of the *symmetric*
    generalised eigenproblem ``sym(C_d) v = lambda Cx v`` (only the symmetric part of
    ``C_d`` enters the trace, so symmetrising is exact, not an approximation); it is computed
    in float64 from one symmetric eigendecomposition of ``Cx`` (:mod:`dpnets.linalg`; relative rank
    cut-off ``rtol`` from the input dtype, gradient finite at degenerate eigenvalues), never
    with an explicit inverse or a non-symmetric eigensolver.

    Parameters
    ----------
    x, dx : Tensor of shape (n, r)
        Features ``psi(X)`` and their Itô derivatives ``d psi(X)`` at samples ``X ~ pi``.
    gamma : float, default 0.0
        Weight of the metric distortion penalty ``R(Cx) / r`` (``R`` averaged over the
        eigenvalues, the scale of the discrete scores).
    weights : Tensor of shape (n,), optional
        Sample weights (e.g. quadrature weights); see :func:`covariances`.
    rtol : float, optional
        Relative rank cut-off of the pseudo-inverse (default ``r * eps(dtype)``).

    Returns
    -------
    Tensor
        Scalar score, to be maximised.
    """
    cx, _, cd = covariances(x, dx, weights=weights)
    return generator_score_from_covariances(cx, cd, gamma, rtol)


def dirichlet_form(jac: Tensor, weights: Tensor | None = None) -> Tensor:
    r"""Dirichlet-form matrix ``E = 1/2 E[J J^T]`` from ``J = grad psi^T B`` of shape (n, r, m).

    For a reversible diffusion, ``E = -E_pi[psi (L psi)^T]``: symmetric positive
    semi-definite, with first derivatives only (:func:`dpnets.ito.diffusion_jacobian`).
    """
    if jac.ndim != 3:
        raise ValueError(f"jac must have shape (n, r, m); got {tuple(jac.shape)}")
    n = jac.shape[0]
    with no_tf32(jac.device):
        # sums divided by the total weight (of the global batch in a distributed fit)
        if weights is None:
            count = _count(jac)
            e = torch.einsum("nim,njm->ij", jac, jac)
        else:
            w = weights.to(jac.dtype).reshape(-1)
            if w.shape[0] != n:
                raise ValueError(f"weights has {w.shape[0]} entries for {n} samples")
            count = w.sum().reshape(1)
            e = torch.einsum("n,nim,njm->ij", w, jac, jac)
        e, total = _global_sums(e, count=count)
        return 0.5 * e / total


def dirichlet_score(
    x: Tensor,
    jac: Tensor,
    gamma: float = 0.0,
    *,
    weights: Tensor | None = None,
    rtol: float | None = None,
) -> Tensor:
    r"""Generator score in Dirichlet form, ``-tr(Cx^+ E) - gamma R(Cx)``, reversible diffusions.

    Same population value as :func:`generator_score` when the generator is self-adjoint
    (``E = -C_d``, integration by parts), but with first derivatives only and a symmetric
    ``E`` by construction; for overdamped Langevin ``E = (kT / friction) E[grad psi
    grad psi^T]``. Do not use it for non-reversible processes.

    Parameters
    ----------
    x : Tensor of shape (n, r)
        Features ``psi(X)`` at samples ``X ~ pi``.
    jac : Tensor of shape (n, r, m)
        ``grad psi(X)^T B(X)`` (:func:`dpnets.ito.diffusion_jacobian`).
    gamma, weights, rtol
        As in :func:`generator_score`.
    """
    if x.ndim != 2 or jac.shape[:2] != x.shape:
        raise ValueError(
            f"x must be (n, r) and jac (n, r, m); got {tuple(x.shape)}, {tuple(jac.shape)}"
        )
    cx, _, _ = covariances(x, x, weights=weights)
    return generator_score_from_covariances(cx, -dirichlet_form(jac, weights), gamma, rtol)


class GeneratorLoss(nn.Module):
    """Negative generator score ``-P_d^gamma`` (Eq. 14).

    ``form="ito"``: ``forward(psi, dpsi)`` (see :func:`generator_score`);
    ``form="dirichlet"``: ``forward(psi, jac)`` (see :func:`dirichlet_score`).
    ``constant=True`` scores ``[1, psi]`` (the constant's derivatives are zero).
    """

    def __init__(
        self,
        gamma: float = 0.0,
        form: str = "ito",
        rtol: float | None = None,
        constant: bool = False,
    ) -> None:
        super().__init__()
        if form not in ("ito", "dirichlet"):
            raise ValueError(f"form must be 'ito' or 'dirichlet', got {form!r}")
        self.gamma = float(gamma)
        self.form = form
        self.rtol = rtol
        self.constant = bool(constant)

    def forward(self, x: Tensor, d: Tensor, weights: Tensor | None = None) -> Tensor:
        if self.constant:  # [1, psi]: the constant's derivatives vanish
            x = with_constant(x)
            d = torch.cat([torch.zeros_like(d[:, :1]), d], dim=1)
        if self.form == "ito":
            return -generator_score(x, d, self.gamma, rtol=self.rtol, weights=weights)
        return -dirichlet_score(x, d, self.gamma, rtol=self.rtol, weights=weights)


__all__ += [
    "GENERATOR_SCORES",
    "generator_score",
    "generator_score_from_covariances",
    "dirichlet_form",
    "dirichlet_score",
    "GeneratorLoss",
]
