"""Operator estimation as pure functions: accumulated moments in, an immutable fit out.

The numerics of :class:`dpnets.TransferOperator` (paper Eq. 15, App. D.2; reversible and
Koopman-reweighted variants) and :class:`dpnets.Generator` (App. E) from the float64 sums of
:class:`dpnets.moments.Moments`, with nothing read from or written to an estimator (as
deeptime's ``fit_from_covariances``): :func:`estimate_operator` and
:func:`estimate_generator` return an :class:`OperatorFit`. The estimators set their fitted
attributes from it (:meth:`OperatorFit.apply_to`), :mod:`dpnets.validation` refits bootstrap
resamples and other lags from combined moments and reads the fits directly (no estimator is
cloned), and :func:`dpnets.load` recomputes a saved operator's spectrum with the same
functions (:func:`operator_spectrum`, :func:`generator_spectrum`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpnets.linalg import default_rtol, eig_biorthogonal, sym_matrix_function
from dpnets.moments import Moments
from dpnets.spectral import (
    CONSTANT_COSINE,
    constant_cosines,
    constant_in_span_moments,
    modal_forecast,
    prepend_ones,
    stationary_coef,
    timescales_from_eigvals,
)

__all__ = [
    "OperatorFit",
    "estimate_operator",
    "estimate_generator",
    "operator_products",
    "operator_spectrum",
    "generator_spectrum",
    "regress",
    "stabilize_spectrum",
    "use_constant",
    "REVERSIBLE_CHOICES",
]

#: the values of ``TransferOperator(reversible=...)``
REVERSIBLE_CHOICES = (False, True, "reweight")

#: blocks of the accumulated moments: features of X ("x") and Y ("y"), the Y states ("t");
#: reversible fits add the X states ("s") against the features of Y
_PRODUCTS = (("x", "x"), ("x", "y"), ("y", "y"), ("x", "t"))


def operator_products(reversible: bool | str = False) -> tuple[tuple[str, str], ...]:
    """The blocks of :class:`dpnets.moments.Moments` an operator fit accumulates: features of
    X and Y and the Y states, and for reversible fits the X states against the features of
    Y."""
    return (*_PRODUCTS, ("y", "s")) if reversible else _PRODUCTS


@dataclass(frozen=True, eq=False)
class OperatorFit:
    """The result of a least-squares operator (or generator) regression; immutable.

    Each field ``name`` is the estimator's fitted attribute ``name_`` (see
    :class:`dpnets.TransferOperator`): ``operator = (cx + ridge I)^+ cxy`` in the basis
    ``[1, (psi - feature_shift) / feature_scale]`` (or ``psi`` without the constant),
    ``cx_pinv`` the pseudo-inverse of rank ``cx_rank``, the biorthogonal eigen-decomposition,
    the least-squares coefficients ``state_coef`` of the (lagged) state, the means of the
    basis on both sides (for VAMP-E), and the Koopman weights' coefficients of a
    ``reversible="reweight"`` fit. For a generator ``cxy`` holds ``C_d`` and ``cy``,
    ``feature_shift``/``feature_scale`` and the means are None.
    """

    operator: np.ndarray
    cx: np.ndarray
    cxy: np.ndarray
    cx_pinv: np.ndarray
    cx_rank: int
    eigvals: np.ndarray
    left_eigvecs: np.ndarray
    right_eigvecs: np.ndarray
    state_coef: np.ndarray
    constant: bool
    n_samples: int
    n_features: int
    cy: np.ndarray | None = None
    feature_shift: np.ndarray | None = None
    feature_scale: np.ndarray | None = None
    features_mean: np.ndarray | None = None
    features_mean_y: np.ndarray | None = None
    reweighting_coef: np.ndarray | None = None

    def apply_to(self, model: Any, **rename: str) -> None:
        """Set every field ``name`` on ``model`` as its fitted attribute ``name_`` (``rename``
        maps a field to another attribute name, e.g. ``cxy="cxd_"``)."""
        for field in dataclasses.fields(self):
            setattr(model, rename.get(field.name, field.name + "_"), getattr(self, field.name))

    @classmethod
    def from_model(cls, model: Any) -> OperatorFit:
        """The fit a fitted estimator holds, read from its public fitted attributes."""
        return cls(**{f.name: getattr(model, f.name + "_", None) for f in dataclasses.fields(cls)})

    def basis(self, phi: np.ndarray) -> np.ndarray:
        """The regression basis from raw features ``phi`` (n, k)."""
        return _basis(phi, self.constant, self.feature_shift, self.feature_scale)

    def solve_lstsq(self, rhs: np.ndarray) -> np.ndarray:
        """``(Cx + ridge I)^+ rhs``: least-squares coefficients from ``rhs = Phi_X^T F / n``."""
        return self.cx_pinv @ rhs

    def stationary_coef(self) -> np.ndarray:
        """Coefficients of the Koopman weights (see
        :meth:`dpnets.spectral.DiscreteTimeModel.stationary_coef`)."""
        return stationary_coef(
            self.eigvals, self.left_eigvecs, self.solve_lstsq, self.features_mean
        )

    def implied_timescales(self, lag_time: float) -> np.ndarray:
        """Implied timescales of a transfer operator whose step is ``lag_time``."""
        return timescales_from_eigvals(self.eigvals, lag_time)

    def forecast(self, phi: np.ndarray, coef: np.ndarray, steps: list) -> list[np.ndarray]:
        """Forecasts of a transfer operator ``steps`` lags ahead (see
        :meth:`dpnets.spectral.SpectralModel.modal_forecast`)."""
        return modal_forecast(
            phi,
            coef,
            steps,
            self.left_eigvecs,
            self.right_eigvecs,
            lambda t: self.eigvals ** (int(t) - 1),
            lambda t: np.linalg.matrix_power(self.operator, int(t) - 1),
        )


def _basis(
    phi: np.ndarray, constant: bool, shift: np.ndarray | None, scale: np.ndarray | None
) -> np.ndarray:
    """``[1, (phi - shift) / scale]`` (``[1, phi]`` without a shift), or ``phi`` without the
    constant."""
    if not constant:
        return phi
    if shift is not None:
        phi = (phi - shift) / scale
    return prepend_ones(phi)


def use_constant(constant: str | bool, mean: np.ndarray, cov: np.ndarray) -> bool:
    """``constant`` resolved: ``"auto"`` adds the constant unless the features (mean, centred
    covariance) already span it (:func:`dpnets.spectral.constant_in_span_moments`)."""
    if constant == "auto":
        return not constant_in_span_moments(mean, cov)
    return bool(constant)


def regress(
    cx: np.ndarray, c: np.ndarray, ridge: float, rtol: float | None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Least squares ``(Cx + ridge I)^+ C`` (App. D.2 / App. E): ``(operator, pinv, rank)``
    with the relative rank cut-off ``rtol`` (default ``r * eps``)."""
    if not np.any(cx):
        raise ValueError(
            "the feature covariance is zero: the features vanish on the data (a collapsed "
            "or untrained feature map)"
        )
    cx_pinv, rank = sym_matrix_function(cx + float(ridge) * np.eye(cx.shape[0]), -1.0, rtol)
    return cx_pinv @ c, cx_pinv, rank


def _with_constant(c: np.ndarray, mean_a: np.ndarray, mean_b: np.ndarray) -> np.ndarray:
    """``E[[1, a] [1, b]^T]`` from ``c = E[a b^T]`` and the means of ``a`` and ``b``."""
    out = np.empty((c.shape[0] + 1, c.shape[1] + 1))
    out[0, 0] = 1.0
    out[0, 1:] = mean_b
    out[1:, 0] = mean_a
    out[1:, 1:] = c
    return out


def _standardisation(centre: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shift and scale of the basis ``[1, (psi - shift) / scale]`` from the features'
    mean and centred covariance. A feature constant on the data (up to the round-off of its
    values) is left unscaled: it then vanishes once centred, and the pseudo-inverse drops
    it."""
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    flat = sd <= 64.0 * np.finfo(np.float64).eps * np.abs(centre)
    return centre, np.where((sd > 0) & ~flat, sd, 1.0)


class _BasisMoments:
    """Moments of the regression basis (with the constant when there is one) from
    accumulated :class:`Moments` of the raw features: ``cx = E[b(x) b(x)^T]``,
    ``cxy = E[b(x) b(y)^T]``, ``cy = E[b(y) b(y)^T]``, the means ``ex``, ``ey``, and the
    cross moments with the states ``xt = E[b(x) y^T]`` and (reversible fits) ``ys =
    E[b(y) x^T]`` (None when not accumulated)."""

    def __init__(self, m: Moments, shift: np.ndarray, scale: np.ndarray, constant: bool):
        ss = np.outer(scale, scale)
        mx, my = m.mean("x"), m.mean("y")
        ex, ey = (mx - shift) / scale, (my - shift) / scale
        cx = m.second("x", "x", shift, shift) / ss
        cxy = m.second("x", "y", shift, shift) / ss
        cy = m.second("y", "y", shift, shift) / ss
        xt = m.second("x", "t", shift, 0.0) / scale[:, None]
        ys = None
        if ("y", "s") in m.products:
            ys = m.second("y", "s", shift, 0.0) / scale[:, None]
        if constant:
            cx, cy = _with_constant(cx, ex, ex), _with_constant(cy, ey, ey)
            cxy = _with_constant(cxy, ex, ey)
            xt = np.vstack([m.mean("t")[None, :], xt])
            if ys is not None:
                ys = np.vstack([m.mean("s")[None, :], ys])
            ex, ey = np.concatenate([[1.0], ex]), np.concatenate([[1.0], ey])
        self.cx, self.cxy, self.cy, self.ex, self.ey = cx, cxy, cy, ex, ey
        self.xt, self.ys = xt, ys


def estimate_operator(
    moments: Moments,
    *,
    ridge: float = 0.0,
    rtol: float | None = None,
    constant: str | bool = "auto",
    reversible: bool | str = False,
    reweigh: Callable[[Callable[[np.ndarray], np.ndarray]], Moments] | None = None,
    stabilize: bool = False,
) -> OperatorFit:
    """The least-squares transfer operator from the moments of the pairs (paper Eq. 15).

    With the constant the basis is ``[1, (psi - mean) / std]``: its moments are those of the
    centred features (covariances) scaled by the standard deviations, so no offset of the
    features cancels. Without it, the uncentred moments of ``psi``. Reversible fits centre
    and scale by the moments over both time directions and symmetrise the covariances (after
    reweighting them for ``"reweight"``); their spectrum comes from a symmetric eigensolver.
    See :class:`dpnets.TransferOperator` for the parameters.

    Parameters
    ----------
    moments : Moments
        Sums over the pairs of the blocks :func:`operator_products` names: features of
        ``X`` ("x") and ``Y`` ("y"), the flattened ``Y`` states ("t"), and for reversible
        fits the flattened ``X`` states ("s").
    ridge, rtol, constant, reversible
        As :class:`dpnets.TransferOperator`'s parameters (validated by the caller).
    reweigh : callable, optional
        Needed by ``reversible="reweight"``: ``reweigh(weight)`` returns the moments of the
        same pairs with each pair weighted by ``weight(phi_x)`` (``phi_x``: the raw features
        of its ``X``), a second pass over the data.
    stabilize : bool, default False
        Project eigenvalues of modulus above 1 onto the unit circle
        (:func:`stabilize_spectrum`; ``TransferOperator(stabilize=True)``).

    Returns
    -------
    OperatorFit
    """
    m, n = moments, moments.count
    mx, my = m.mean("x"), m.mean("y")
    if reversible:  # the mean and covariance over both time directions
        centre = 0.5 * (mx + my)
        cov = 0.5 * (m.second("x", "x", centre, centre) + m.second("y", "y", centre, centre))
    else:
        centre, cov = mx, m.cov("x", "x")
    const = use_constant(constant, centre, cov)
    k = mx.shape[0]
    r = k + int(const)
    if n < r:
        what = f"{r}: {k} features and the constant function" if const else f"{r}"
        raise ValueError(
            f"fewer samples ({n} pairs) than basis functions ({what}); provide more data or "
            "fewer features"
        )
    shift, scale = np.zeros(k), np.ones(k)
    if const:
        shift, scale = _standardisation(centre, cov)
    b = _BasisMoments(m, shift, scale, const)
    u = None
    if reversible == "reweight":
        if reweigh is None:
            raise ValueError("reversible='reweight' needs the second pass over the pairs (reweigh)")
        u = _koopman_weights(b, ridge, rtol)
        # w(x) in the basis of the first fit, [1, (psi - shift) / scale]
        mw = reweigh(lambda phi, u=u, a=shift, s=scale: _basis(phi, const, a, s) @ u)
        if mw.count != n:
            raise ValueError(
                f"reversible='reweight' reads the training data twice, but the second pass "
                f"gave {mw.count} pairs and the first {n}: fit on arrays, a Dataset or "
                "a DataLoader that can be iterated again"
            )
        if const:
            # the basis is centred and scaled by the weighted moments over both time
            # directions (C0 = blockdiag(1, S), as TICA's weighted mean-free features),
            # and the weights' coefficients rewritten in it: w(x) is unchanged
            cw = 0.5 * (mw.mean("x") + mw.mean("y"))
            cov_w = 0.5 * (mw.second("x", "x", cw, cw) + mw.second("y", "y", cw, cw))
            shift_w, scale_w = _standardisation(cw, cov_w)
            u0 = u[0] + u[1:] @ ((shift_w - shift) / scale)
            u = np.concatenate([[u0], u[1:] * scale_w / scale])
            shift, scale = shift_w, scale_w
        b = _BasisMoments(mw, shift, scale, const)
    cx, cxy, cy, ex, ey, xt = b.cx, b.cxy, b.cy, b.ex, b.ey, b.xt
    if reversible:
        cx = cy = 0.5 * (b.cx + b.cy)
        cxy = 0.5 * (b.cxy + b.cxy.T)
        ex = ey = 0.5 * (b.ex + b.ey)
        xt = 0.5 * (b.xt + b.ys)
    operator, cx_pinv, rank = regress(
        cx, cxy, ridge, _c0_rtol(cx, ridge, rtol) if reversible else rtol
    )
    eigvals, left, right = operator_spectrum(operator, cx, cxy, ridge, rtol, reversible, ex)
    if stabilize:
        eigvals, left, right, stable = stabilize_spectrum(eigvals, left, right)
        operator = operator if stable is None else stable
        eigvals, left, right = constant_first(eigvals, left, right, cx, ex)
    return OperatorFit(
        operator=operator,
        cx=cx,
        cxy=cxy,
        cx_pinv=cx_pinv,
        cx_rank=rank,
        eigvals=eigvals,
        left_eigvecs=left,
        right_eigvecs=right,
        # least-squares coefficients of the state at time lag on psi(X_0) (App. D.2)
        state_coef=cx_pinv @ xt,
        constant=const,
        n_samples=n,
        n_features=r,
        # moments of the lagged side, for the VAMP-E score of held-out data
        cy=cy,
        feature_shift=shift if const else None,
        feature_scale=scale if const else None,
        features_mean=ex,
        features_mean_y=ey,
        reweighting_coef=u,
    )


def operator_spectrum(
    operator: np.ndarray,
    cx: np.ndarray,
    cxy: np.ndarray,
    ridge: float,
    rtol: float | None,
    reversible: bool | str = False,
    mean: np.ndarray | None = None,
    stabilize: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The eigen-decomposition of a transfer operator ``(vals, L, R)``: biorthogonal, right
    eigenvectors of unit ``cx``-norm; for a reversible fit by a symmetric eigensolver (real
    eigenvalues and eigenvectors, :func:`_symmetric_spectrum`); with ``stabilize`` the
    eigenvalues above 1 in modulus projected onto the unit circle
    (:func:`stabilize_spectrum`). By decreasing modulus, except that where the basis spans
    the constant function (``mean``: the basis' mean on the training inputs) its triplet
    comes first (:func:`constant_first`)."""
    if not reversible:
        vals, left, right = eig_biorthogonal(operator, metric=cx)
    else:
        vals, left, right = _symmetric_spectrum(cx, cxy, float(ridge), _c0_rtol(cx, ridge, rtol))
    if stabilize:
        vals, left, right, _ = stabilize_spectrum(vals, left, right)
    return constant_first(vals, left, right, cx, mean)


def constant_first(
    vals: np.ndarray, left: np.ndarray, right: np.ndarray, cx: np.ndarray, mean: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The eigen-triplets with the constant function's first, the others in their order.

    Least squares maps the constant function to itself whenever the basis spans it
    (``Cx c = E[b] = Cxy c`` for its coefficients ``c``): ``c`` is an eigenvector of the
    eigenvalue 1 (0 for a generator). Sorting by modulus alone can put it behind spurious
    eigenvalues of modulus above 1 (or of positive real part); this puts it at ``k = 0``,
    where every consumer of the spectrum expects it. The triplet whose right eigenvector
    is closest to the constant (:func:`constant_cosines`, at least
    :data:`CONSTANT_COSINE`) moves; without one nothing moves. ``mean``: the basis' mean
    on the training inputs.
    """
    if vals.size < 2:
        return vals, left, right
    cosine = constant_cosines(right, cx, mean)
    j = int(np.argmax(cosine))
    if j == 0 or not cosine[j] >= CONSTANT_COSINE:
        return vals, left, right
    order = np.r_[j, np.delete(np.arange(vals.size), j)]
    return vals[order], left[:, order], right[:, order]


def stabilize_spectrum(
    eigvals: np.ndarray, left: np.ndarray, right: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Eigenvalues of modulus above 1 projected onto the unit circle, ``lambda / |lambda|``
    (their phase, the oscillation frequency, kept): ``(vals, L, R, operator)`` with the
    operator ``R diag(vals) L^H`` rebuilt from them (None when none moved).

    The stabilised estimate of ``TransferOperator(stabilize=True)``, as PyDMD's
    ``BOPDMD(eig_constraints={"stable"})`` (continuous-time eigenvalues with a positive real
    part moved to the imaginary axis): forecasts no longer grow without bound. Eigenvectors
    are kept (biorthogonal, ``L^H R = I``), so the modes and eigenfunctions are unchanged;
    the spectrum is ordered by decreasing modulus (ties on the unit circle by decreasing
    real, then imaginary part), so that a reloaded model lists it in the same order.
    """
    mod = np.abs(eigvals)
    big = mod > 1.0
    vals = np.where(big, eigvals / np.where(big, mod, 1.0), eigvals)
    order = np.lexsort((-vals.imag, -np.round(vals.real, 10), -np.round(np.abs(vals), 10)))
    vals, left, right = vals[order], left[:, order], right[:, order]
    if not big.any():
        return vals, left, right, None
    operator = (right * vals[None, :]) @ left.conj().T
    if np.iscomplexobj(operator):
        operator = operator.real  # conjugate pairs moved together: real to round-off
    return vals, left, right, operator


def _c0_rtol(c0: np.ndarray, ridge: float, rtol: float | None) -> float:
    """The rank cut-off of a reversible fit's ``C0 + ridge I``: ``rtol`` (default
    ``r * eps``), raised to drop every eigenvalue not above ``|min eigenvalue|`` when
    ``C0`` is indefinite (covariances reweighted by Koopman weights, some negative):
    the directions a negative eigenvalue shows to be noise, as deeptime does."""
    r = c0.shape[0]
    rtol = default_rtol(r) if rtol is None else float(rtol)
    s = np.linalg.eigvalsh(0.5 * (c0 + c0.T) + float(ridge) * np.eye(r))
    smax = float(s.max(initial=0.0))
    if smax > 0 and s[0] < 0:
        rtol = max(rtol, -float(s[0]) / smax * (1.0 + 1e-9))
    return rtol


def _koopman_weights(b: _BasisMoments, ridge: float, rtol: float | None) -> np.ndarray:
    """Koopman reweighting (Wu et al. 2017): coefficients ``u`` of the weights
    ``w(x) = b(x)^T u`` with ``Cxy^T u = Cx u`` (``u = Cx^+ v`` for the eigenvector
    ``K^T v = v`` of the non-reversible estimator ``K`` at the eigenvalue closest to 1),
    normalised to mean 1 over the training inputs."""
    r = b.cx.shape[0]
    pinv, _ = sym_matrix_function(b.cx + float(ridge) * np.eye(r), -1.0, rtol)
    vals, left, _ = eig_biorthogonal(pinv @ b.cxy, metric=b.cx)
    j = int(np.argmin(np.abs(vals - 1.0)))
    u = np.real(pinv @ np.conj(left[:, j]))
    norm = float(b.ex @ u)
    if not (abs(norm) > 0 and abs(vals[j].imag) == 0):
        raise ValueError(
            "reversible='reweight' found no stationary vector of the non-reversible "
            f"estimator (eigenvalue closest to 1: {vals[j]:.6g}); add the constant "
            "function to the features (constant='auto')"
        )
    return u / norm


def _symmetric_spectrum(
    c0: np.ndarray, ct: np.ndarray, ridge: float, rtol: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigen-triplets of ``T = (C0 + ridge I)^+ Ct`` for symmetric ``C0`` (PSD) and ``Ct``.

    ``T`` is self-adjoint in the inner product of ``C0 + ridge I``, so its spectrum is real:
    with ``C0 + ridge I = U diag(s) U^T`` (the eigenvalues ``s > rtol * max(s)`` kept, the
    same cut-off as ``cx_pinv_``) and ``W = U_k diag(s_k)^{-1/2}`` the whitening, the
    symmetric ``W^T Ct W = V diag(lam) V^T`` (``eigh``) gives the right eigenvectors
    ``R = W V`` and the left ones ``L = (C0 + ridge I) R = U_k diag(s_k)^{1/2} V``, real,
    with ``L^T R = I``; each direction of the null space of ``C0 + ridge I`` is an
    eigenvector of the eigenvalue 0 on both sides (so that ``R L^T = I``, the forecast at
    one step). Right eigenvectors are scaled to unit empirical norm ``r^T C0 r = 1`` (as
    :func:`dpnets.linalg.eig_biorthogonal` with ``metric=C0``). Returns the eigenvalues
    (complex dtype, imaginary parts exactly 0) by decreasing modulus, ``L`` and ``R``.
    """
    r = c0.shape[0]
    c0 = 0.5 * (c0 + c0.T)
    s, u = np.linalg.eigh(c0 + ridge * np.eye(r))
    rtol = default_rtol(r) if rtol is None else rtol
    smax = s.max(initial=0.0)
    keep = s > rtol * smax if smax > 0 else np.zeros(r, dtype=bool)
    white = u[:, keep] / np.sqrt(s[keep])
    m = white.T @ (0.5 * (ct + ct.T)) @ white
    lam, v = np.linalg.eigh(0.5 * (m + m.T))
    right = white @ v
    left = (u[:, keep] * np.sqrt(s[keep])) @ v
    norms = np.sqrt(np.abs(np.einsum("ij,ij->j", right, c0 @ right)))
    norms = np.where(norms > np.finfo(np.float64).tiny, norms, 1.0)
    right, left = right / norms, left * norms
    vals = np.concatenate([lam, np.zeros(r - lam.size)])
    right = np.hstack([right, u[:, ~keep]])
    left = np.hstack([left, u[:, ~keep]])
    order = np.lexsort((-vals, -np.round(np.abs(vals), 10)))
    return vals[order].astype(np.complex128), left[:, order], right[:, order]


def estimate_generator(
    moments: Moments,
    dirichlet: np.ndarray | None = None,
    *,
    form: str = "ito",
    symmetrize: bool = False,
    ridge: float = 0.0,
    rtol: float | None = None,
    constant: str | bool = "auto",
) -> OperatorFit:
    """The least-squares generator ``L = (Cx + ridge I)^+ C_d`` (App. E) from the moments of
    the samples.

    Parameters
    ----------
    moments : Moments
        Sums over the samples of ``[1, psi]`` ("x", the constant function first), the
        flattened states ("t") and, for ``form="ito"``, the Itô derivatives ("d").
    dirichlet : ndarray (r + 1, r + 1), optional
        ``form="dirichlet"``: the (weighted) sum of ``grad b B B^T grad b^T`` over the
        samples.
    form, symmetrize, ridge, rtol, constant
        As :class:`dpnets.Generator`'s parameters.

    Returns
    -------
    OperatorFit
        ``cxy`` holds ``C_d``; the eigen-decomposition is :func:`generator_spectrum`'s.
    """
    m = moments
    second = m.second("x", "x")  # uncentred, the constant function first
    const = use_constant(constant, m.mean("x")[1:], m.cov("x", "x")[1:, 1:])
    keep = slice(0 if const else 1, None)
    cx = second[keep, keep]
    if form == "ito":
        cxd = m.second("x", "d")[keep, keep]
    else:
        cxd = -0.5 * dirichlet[keep, keep] / m.weight
    n, r = m.count, cx.shape[0]
    if n < r:
        raise ValueError(f"fewer samples ({n}) than features (r={r}); provide more data")
    if symmetrize:
        cxd = 0.5 * (cxd + cxd.T)
    operator, cx_pinv, rank = regress(cx, cxd, ridge, rtol)
    eigvals, left, right = generator_spectrum(cx, cxd, ridge, rtol, second[0, keep])
    return OperatorFit(
        operator=operator,
        cx=cx,
        cxy=cxd,
        cx_pinv=cx_pinv,
        cx_rank=rank,
        eigvals=eigvals,
        left_eigvecs=left,
        right_eigvecs=right,
        # equal-time least-squares coefficients of the state (App. E)
        state_coef=cx_pinv @ m.second("x", "t")[keep],
        constant=const,
        n_samples=n,
        n_features=r,
    )


def generator_spectrum(
    cx: np.ndarray,
    cxd: np.ndarray,
    ridge: float,
    rtol: float | None,
    mean: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigen-decomposition of a generator on the range of ``Cx`` (the Ritz problem), by
    whitening; eigenvalues by decreasing real part.

    With ``Cx + ridge I = U S U^T`` restricted to the ``k = cx_rank_`` eigenvalues above the
    cut-off, ``M = S^{-1/2} U^T C_d U S^{-1/2}`` (k x k) is similar to ``L`` on the range;
    its eigenvectors map back to ``R = U S^{-1/2} V`` and ``L = U S^{1/2} W``. A
    rank-deficient feature map thus yields ``cx_rank_`` genuine eigenpairs, without the
    spurious zero eigenvalues of the pseudo-inverse's null space. Where the basis spans the
    constant function (``mean``: the basis' mean) its triplet comes first
    (:func:`constant_first`).
    """
    r = cx.shape[0]
    reg = cx + float(ridge) * np.eye(r)
    s, u = np.linalg.eigh(0.5 * (reg + reg.T))
    rtol = default_rtol(r) if rtol is None else float(rtol)
    keep = s > rtol * max(s.max(), 0.0)
    if not keep.any():
        raise ValueError("the feature covariance is zero: the features vanish on the data")
    uk, sk = u[:, keep], s[keep]
    whiten = uk / np.sqrt(sk)
    w, left, right = eig_biorthogonal(whiten.T @ cxd @ whiten)
    order = np.lexsort((-w.imag, -w.real))
    spectrum = w[order], (uk * np.sqrt(sk)) @ left[:, order], whiten @ right[:, order]
    return constant_first(*spectrum, cx, mean)
