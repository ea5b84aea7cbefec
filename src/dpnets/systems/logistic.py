r"""Noisy logistic map with trigonometric noise (DPNets paper, Sec. 5 and App. F.1).

The dynamics on :math:`\mathcal{X} = [0, 1)` is

.. math::

    X_{t+1} = \bigl(F(X_t) + \xi_t\bigr) \bmod 1, \qquad F(x) = 4x(1 - x),

where :math:`\xi_t` are i.i.d. with density :math:`c_N \cos^N(\pi \xi)` on
:math:`(-1/2, 1/2)` (``N`` even). Because :math:`\cos^N(\pi\,\cdot)` is 1-periodic for even
``N``, the transition kernel is :math:`p(x, y) = c_N \cos^N(\pi (y - F(x)))` on the circle
:math:`[0, 1)`, and the binomial expansion of
:math:`\cos(a - b) = \cos a \cos b + \sin a \sin b` gives the exact rank-``N + 1``
factorisation

.. math::

    p(x, y) = \sum_{k=0}^{N} \phi_k(F(x))\, \phi_k(y), \qquad
    \phi_k(z) = \sqrt{\beta_k}\, \cos^k(\pi z) \sin^{N-k}(\pi z), \quad
    \beta_k = c_N \binom{N}{k}.

The transfer (Koopman) operator :math:`(\mathsf{T} f)(x) = \mathbb{E}[f(X_{t+1}) | X_t = x]
= \sum_k \phi_k(F(x)) \langle \phi_k, f \rangle_{L^2(dx)}` therefore has finite rank, and all
its spectral quantities reduce to ``(N + 1) x (N + 1)`` matrices of integrals, which are
evaluated here with composite Gauss-Legendre quadrature (accurate to ~1e-13).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike
from scipy.special import beta as beta_function
from scipy.special import binom

from ._utils import check_finite_scalar, check_positive_int, sort_by_modulus, to_numpy

__all__ = ["LogisticMap"]

_GL_ORDER = 32  # Gauss-Legendre nodes per panel.


@dataclass(frozen=True)
class _Spectral:
    """Cached quadrature data and spectral quantities of the transfer operator."""

    nodes: np.ndarray  # (m,) quadrature nodes on [0, 1]
    weights: np.ndarray  # (m,) quadrature weights
    phi: np.ndarray  # (m, N + 1) noise features phi_k at the nodes
    phi_f: np.ndarray  # (m, N + 1) composed features phi_k(F(x)) at the nodes
    density_coef: np.ndarray  # (N + 1,) invariant density pi = sum_k c_k phi_k
    density: np.ndarray  # (m,) invariant density at the nodes
    eigvals: np.ndarray  # (N + 1,) complex eigenvalues, decreasing modulus
    svals: np.ndarray  # (N + 1,) singular values on L^2(pi)
    svals_lebesgue: np.ndarray  # (N + 1,) singular values on L^2([0, 1], dx)


def _gauss_legendre_01(n_panels: int, order: int = _GL_ORDER) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre nodes and weights on ``[0, 1]``."""
    t, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(0.0, 1.0, n_panels + 1)
    left, right = edges[:-1, None], edges[1:, None]
    half = 0.5 * (right - left)
    nodes = (left + half * (t + 1.0)).ravel()
    weights = (half * w).ravel()
    return nodes, weights


def _svals_of_factorisation(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    r"""Singular values of :math:`U V^*` given quadrature-weighted samples of ``U`` and ``V``.

    ``left`` and ``right`` are ``(m, r)`` matrices whose columns are the functions spanning the
    two factors, multiplied by the square root of the quadrature weights (times the density of
    the relevant measure), so that ``G_U = left.T @ left`` and ``G_V = right.T @ right`` are
    Gram matrices. With factors ``G = L L^T``, the non-zero singular values of ``U V^*`` are
    those of the small matrix ``L_U^T L_V``.
    """
    return scipy.linalg.svdvals(_psd_factor(left.T @ left).T @ _psd_factor(right.T @ right))


def _psd_factor(gram: np.ndarray) -> np.ndarray:
    """A factor ``L`` with ``L @ L.T == gram`` for a symmetric PSD matrix (eigh-based)."""
    evals, evecs = np.linalg.eigh(0.5 * (gram + gram.T))
    return evecs * np.sqrt(np.clip(evals, 0.0, None))


def _sym_pinv_power(mat: np.ndarray, power: float, rcond: float) -> np.ndarray:
    """``mat^power`` for a symmetric PSD matrix, on the eigenvalues above ``rcond * max``."""
    mat = 0.5 * (mat + mat.T)
    evals, evecs = np.linalg.eigh(mat)
    top = evals.max(initial=0.0)
    if top <= 0.0:
        return np.zeros_like(mat)
    keep = evals > rcond * top
    vecs = evecs[:, keep]
    return (vecs * evals[keep] ** power) @ vecs.T


class LogisticMap:
    r"""Noisy logistic map :math:`x' = (4x(1-x) + \xi) \bmod 1` with trigonometric noise.

    The noise :math:`\xi` has density :math:`c_N \cos^N(\pi \xi)` on :math:`(-1/2, 1/2)`, with
    :math:`c_N = \pi / B((N+1)/2, 1/2)`. The associated transfer operator has rank ``N + 1``
    and its spectrum, singular values and invariant density are computed exactly (up to
    quadrature round-off) from the finite-rank factorisation of the transition kernel, see the
    module docstring. All spectral quantities are computed lazily and cached.

    Parameters
    ----------
    N : int, default=20
        Even, non-negative exponent of the trigonometric noise; larger ``N`` means less noise.
    n_panels : int, default=128
        Number of panels of the composite 32-point Gauss-Legendre rule on ``[0, 1]`` used for
        all integrals. The default is accurate to ~1e-13 for ``N = 20``; increase it for much
        larger ``N`` or for non-smooth feature maps in :meth:`representation_metrics`.

    Raises
    ------
    ValueError
        If ``N`` is not an even non-negative integer or ``n_panels`` is not a positive integer.

    Examples
    --------
    >>> lm = LogisticMap(N=20)
    >>> traj = lm.sample(1000, seed=0)  # (1000, 1)
    >>> [complex(v) for v in lm.eigvals()[:3].round(5)]
    [(1+0j), (-0.19334+0.19094j), (-0.19334-0.19094j)]
    """

    def __init__(self, N: int = 20, n_panels: int = 128) -> None:
        N = check_positive_int(N, "N", minimum=0)
        if N % 2 != 0:
            raise ValueError(
                f"N must be even (cos^N(pi x) is 1-periodic only for even N), got N={N}."
            )
        self.N = N
        self.n_panels = check_positive_int(n_panels, "n_panels")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(N={self.N}, n_panels={self.n_panels})"

    # ------------------------------------------------------------------ basic functions
    @property
    def rank(self) -> int:
        """Rank ``N + 1`` of the transfer operator."""
        return self.N + 1

    @property
    def noise_normalisation(self) -> float:
        r"""Normalising constant :math:`c_N = \pi / B((N+1)/2, 1/2)` of the noise density."""
        return float(np.pi / beta_function(0.5 * (self.N + 1), 0.5))

    @staticmethod
    def F(x: ArrayLike) -> np.ndarray:
        """Deterministic part of the map, ``F(x) = 4 x (1 - x)`` (elementwise)."""
        x = np.asarray(x, dtype=np.float64)
        return 4.0 * x * (1.0 - x)

    def noise_density(self, xi: ArrayLike) -> np.ndarray:
        r"""Density :math:`c_N \cos^N(\pi \xi)` of the noise on ``(-1/2, 1/2)`` (0 outside)."""
        xi = np.asarray(xi, dtype=np.float64)
        inside = np.abs(xi) < 0.5
        return np.where(inside, self.noise_normalisation * np.cos(np.pi * xi) ** self.N, 0.0)

    def _noise_feature_order(self) -> np.ndarray:
        # Smallest binomial coefficients first, ties in index order: [0, N, 1, N - 1, ...].
        return np.argsort(binom(self.N, np.arange(self.N + 1)), kind="stable")

    def noise_features(self, x: ArrayLike, n_features: int | None = None) -> np.ndarray:
        r"""Features of the trigonometric noise kernel (the "NoiseKernel" baseline).

        Returns :math:`\phi_k(x) = \sqrt{\beta_k} \cos^k(\pi x) \sin^{N-k}(\pi x)`,
        :math:`\beta_k = c_N \binom{N}{k}`, so that
        :math:`p(x, y) = \sum_k \phi_k(F(x)) \phi_k(y)`. They span the trigonometric
        polynomials of degree ``<= N/2`` on the unit circle, which contains the invariant density
        (and every left eigenfunction), but *not* the range of the transfer operator acting on
        functions (for that use :meth:`noise_features_composed`).

        Parameters
        ----------
        x : array_like of shape (m,) or (m, 1)
            States.
        n_features : int, optional
            If given, return only ``n_features`` of the functions, those with the smallest
            binomial coefficients first (order ``k = 0, N, 1, N - 1, 2, ...``), which is how the
            authors' code builds the ``r``-dimensional NoiseKernel baseline of Table 1.

        Returns
        -------
        numpy.ndarray of shape (m, N + 1) or (m, n_features)
        """
        z = self._as_states(x)
        k = np.arange(self.N + 1)
        scale = np.sqrt(self.noise_normalisation * binom(self.N, k))
        angle = np.pi * z[:, None]
        feats = scale * np.cos(angle) ** k * np.sin(angle) ** (self.N - k)
        if n_features is None:
            return feats
        n_features = check_positive_int(n_features, "n_features")
        if n_features > self.N + 1:
            raise ValueError(f"n_features must be <= N + 1 = {self.N + 1}, got {n_features}.")
        return feats[:, self._noise_feature_order()[:n_features]]

    def noise_features_composed(self, x: ArrayLike) -> np.ndarray:
        r"""Composed noise features :math:`\phi_k(F(x))`, shape ``(m, N + 1)``.

        Their span is exactly the range of the transfer operator
        :math:`\mathsf{T} f = \sum_k \phi_k \circ F\, \langle \phi_k, f\rangle`, hence it is
        invariant and contains every eigenfunction with a non-zero eigenvalue: projecting
        onto it recovers the spectrum of ``T`` exactly.
        """
        return self.noise_features(self.F(self._as_states(x)))

    @staticmethod
    def _as_states(x: ArrayLike) -> np.ndarray:
        z = np.asarray(x, dtype=np.float64)
        if z.ndim == 2:
            if z.shape[1] != 1:
                raise ValueError(f"states must have shape (m,) or (m, 1), got {z.shape}.")
            z = z[:, 0]
        elif z.ndim > 2:
            raise ValueError(f"states must have shape (m,) or (m, 1), got {z.shape}.")
        return np.atleast_1d(z)

    # ------------------------------------------------------------------ simulation
    def sample_noise(self, size: int | tuple[int, ...], seed: int | None = None) -> np.ndarray:
        r"""Draw i.i.d. noise samples exactly.

        If :math:`B \sim \mathrm{Beta}((N+1)/2, (N+1)/2)` then
        :math:`\xi = \arcsin(2B - 1)/\pi` has density :math:`c_N \cos^N(\pi \xi)` on
        :math:`(-1/2, 1/2)` (change of variables :math:`u = \sin(\pi\xi)`).

        Parameters
        ----------
        size : int or tuple of int
            Output shape.
        seed : int, optional
            Seed for :func:`numpy.random.default_rng`.

        Returns
        -------
        numpy.ndarray of float64 with shape ``size``.
        """
        rng = np.random.default_rng(seed)
        return self._draw_noise(rng, size)

    def _draw_noise(self, rng: np.random.Generator, size: int | tuple[int, ...]) -> np.ndarray:
        a = 0.5 * (self.N + 1)
        b = rng.beta(a, a, size=size)
        return np.arcsin(2.0 * b - 1.0) / np.pi

    def sample(self, n: int, x0: float = 0.5, seed: int | None = None) -> np.ndarray:
        """Simulate a trajectory.

        Parameters
        ----------
        n : int
            Number of states returned (including the initial one).
        x0 : float, default=0.5
            Initial state in ``[0, 1]`` (``1`` is identified with ``0``).
        seed : int, optional
            Seed for :func:`numpy.random.default_rng`.

        Returns
        -------
        numpy.ndarray of shape (n, 1)
            The trajectory; the first row is ``x0``.
        """
        n = check_positive_int(n, "n")
        x = check_finite_scalar(x0, "x0")
        if not 0.0 <= x <= 1.0:
            raise ValueError(f"x0 must lie in [0, 1], got {x0}.")
        rng = np.random.default_rng(seed)
        noise = self._draw_noise(rng, n - 1).tolist()
        out = np.empty(n, dtype=np.float64)
        out[0] = x
        for t, xi in enumerate(noise, start=1):
            y = 4.0 * x * (1.0 - x) + xi
            y -= np.floor(y)
            x = 0.0 if y >= 1.0 else y  # guards against round-off in (-tiny) mod 1 == 1.0
            out[t] = x
        return out[:, None]

    # ------------------------------------------------------------------ spectral data
    @cached_property
    def _spectral(self) -> _Spectral:
        nodes, weights = _gauss_legendre_01(self.n_panels)
        phi = self.noise_features(nodes)
        phi_f = self.noise_features(self.F(nodes))
        # Matrix of T on span{phi_k o F}: T(phi_j o F) = sum_k (phi_k o F) K[k, j].
        koop = (phi * weights[:, None]).T @ phi_f
        eigvals = sort_by_modulus(scipy.linalg.eigvals(koop))
        # Invariant density pi = sum_k c_k phi_k with c = K^T c (left eigenvector for 1).
        _, _, vh = np.linalg.svd(koop.T - np.eye(self.N + 1))
        coef = vh[-1]
        coef = coef / (weights @ (phi @ coef))
        density = phi @ coef
        if density.min() <= 0.0:  # pragma: no cover - cannot happen for a valid kernel
            raise RuntimeError("Invariant density is not positive; increase n_panels.")
        # On L^2(pi): T = U W^* with U c = sum c_k phi_k o F and W c = sum c_k phi_k / pi.
        sqw = np.sqrt(weights)
        svals = _svals_of_factorisation(
            phi_f * (sqw * np.sqrt(density))[:, None], phi * (sqw / np.sqrt(density))[:, None]
        )
        svals_leb = _svals_of_factorisation(phi_f * sqw[:, None], phi * sqw[:, None])
        return _Spectral(
            nodes=nodes,
            weights=weights,
            phi=phi,
            phi_f=phi_f,
            density_coef=coef,
            density=density,
            eigvals=eigvals,
            svals=svals,
            svals_lebesgue=svals_leb,
        )

    def eigvals(self) -> np.ndarray:
        """The ``N + 1`` eigenvalues of the transfer operator (all others are zero).

        Returns
        -------
        numpy.ndarray of complex128, shape (N + 1,)
            Sorted by decreasing modulus (conjugate pairs: positive imaginary part first).
            The leading eigenvalue is 1. The leading eigenvalues are accurate to ~1e-15;
            those of modulus below ~1e-8 only to ~1e-9 in absolute value, as ``T`` is
            strongly non-normal and they are ill-conditioned.
        """
        return self._spectral.eigvals.copy()

    def svals(self) -> np.ndarray:
        r"""Singular values of :math:`\mathsf{T}: L^2(\pi) \to L^2(\pi)`, decreasing.

        Here :math:`\mathsf{T} f(x) = \mathbb{E}[f(X_{t+1}) | X_t = x]` and :math:`\pi` is the
        invariant density, so the largest singular value is exactly 1.

        Returns
        -------
        numpy.ndarray of shape (N + 1,)
        """
        return self._spectral.svals.copy()

    def svals_lebesgue(self) -> np.ndarray:
        """Singular values of the same kernel operator on Lebesgue ``L^2([0, 1])``.

        This is what the authors' code (kooplearn's ``LogisticMap.svals``) computes and what
        the optimality gap of Table 1 in the paper uses; the leading value is ~1.2416 > 1 for
        ``N = 20``. Prefer :meth:`svals` for the mathematically consistent quantity.

        Returns
        -------
        numpy.ndarray of shape (N + 1,)
        """
        return self._spectral.svals_lebesgue.copy()

    def invariant_density(self, x: ArrayLike) -> np.ndarray:
        r"""Invariant density :math:`\pi(x)` (normalised on ``[0, 1]``), elementwise.

        :math:`\pi` is the left eigenfunction of eigenvalue 1, a trigonometric polynomial in
        the span of :meth:`noise_features`; it is 1-periodic and strictly positive.

        Parameters
        ----------
        x : array_like
            Points (any shape).

        Returns
        -------
        numpy.ndarray
            Density values, same shape as ``x``.
        """
        x = np.asarray(x, dtype=np.float64)
        flat = self.noise_features(x.ravel()) @ self._spectral.density_coef
        return flat.reshape(x.shape)

    # ------------------------------------------------------------------ representations
    def _evaluate_feature_map(self, feature_map: Callable[[np.ndarray], Any]) -> np.ndarray:
        nodes = self._spectral.nodes
        feats = to_numpy(feature_map(nodes[:, None]))
        if feats.ndim == 1:
            feats = feats[:, None]
        if feats.ndim != 2 or feats.shape[0] != nodes.shape[0]:
            raise ValueError(
                f"feature_map must map states of shape (m, 1) to features of shape (m, r); "
                f"got output of shape {feats.shape} for m={nodes.shape[0]}."
            )
        if not np.all(np.isfinite(feats)):
            raise ValueError("feature_map returned non-finite values.")
        return feats

    def representation_metrics(
        self,
        feature_map: Callable[[np.ndarray], Any],
        lagged_feature_map: Callable[[np.ndarray], Any] | None = None,
        n_eigs: int = 3,
        rcond: float = 1e-10,
    ) -> dict[str, Any]:
        r"""Population metrics of a representation, computed by quadrature under :math:`\pi`.

        With :math:`\psi` = ``feature_map`` and :math:`\psi'` = ``lagged_feature_map``
        (defaults to :math:`\psi`), the population covariances are
        :math:`C_X = \mathbb{E}_\pi[\psi(X)\psi(X)^\top]`,
        :math:`C_Y = \mathbb{E}_\pi[\psi'(X)\psi'(X)^\top]` (:math:`\pi` is invariant) and
        :math:`C_{XY} = \mathbb{E}[\psi(X)\psi'(X')^\top]
        = \int \pi(x)\psi(x)(\mathsf{T}\psi')(x)^\top dx`, using the exact finite-rank form of
        :math:`\mathsf{T}`. Pseudo-inverses and square roots use a symmetric eigendecomposition
        with eigenvalues below ``rcond * max`` discarded.

        Parameters
        ----------
        feature_map : callable
            Maps a float64 array of states of shape ``(m, 1)`` to features ``(m, r)``; numpy
            arrays and torch tensors (converted via ``.detach().cpu()``) are accepted. Torch
            modules must be wrapped to accept numpy input.
        lagged_feature_map : callable, optional
            Feature map :math:`\psi'` for the future state, used only in the projection score.
        n_eigs : int, default=3
            Number of leading eigenvalues used by the spectral errors.
        rcond : float, default=1e-10
            Relative eigenvalue cut-off of the pseudo-inverses.

        Returns
        -------
        dict
            ``"projection_score"``
                :math:`\mathcal{P}^0 = \|C_X^{+1/2} C_{XY} C_Y^{+1/2}\|_{HS}^2`.
            ``"optimality_gap"``
                :math:`\sum_{i \le r} \sigma_i^2(\mathsf{T}) - \mathcal{P}^0` with the
                :math:`L^2(\pi)` singular values :meth:`svals` (``r`` = smaller feature
                dimension), which is always :math:`\ge 0`.
            ``"optimality_gap_paper"``
                Same with :meth:`svals_lebesgue`, as in the authors' code / paper Table 1.
            ``"eigvals"``
                Eigenvalues of the projected operator :math:`P_H \mathsf{T}|_H`, i.e. of the
                ``r x r`` matrix :math:`C_X^+ C_{XX'}` with :math:`\psi' = \psi` (always built
                from ``feature_map`` alone), sorted by decreasing modulus.
            ``"spectral_error"``
                :math:`\max_{i \le n} \min_j |\lambda_i(\mathsf{T}) - \mu_j|`: the worst
                distance from each of the ``n_eigs`` leading *true* eigenvalues to the
                estimated spectrum :math:`\{\mu_j\}`.
            ``"spectral_error_paper"``
                :math:`\max_{i \le n} \min_j |\mu_i - \lambda_j(\mathsf{T})|`: the directed
                Hausdorff distance from the ``n_eigs`` leading *estimated* eigenvalues to the
                full true spectrum. This is the paper's formula and what the authors' code
                computes (reproduces Table 1).
            ``"n_features"``
                The feature dimension ``r``.
        """
        n_eigs = check_positive_int(n_eigs, "n_eigs")
        if n_eigs > self.N + 1:
            raise ValueError(f"n_eigs must be <= N + 1 = {self.N + 1}, got {n_eigs}.")
        spec = self._spectral
        wpi = spec.weights * spec.density
        lebesgue_proj = spec.phi.T * spec.weights  # (N + 1, m): g -> <phi_k, g>_dx

        def transfer(g: np.ndarray) -> np.ndarray:  # (T g)(nodes) for columns of g
            return spec.phi_f @ (lebesgue_proj @ g)

        psi = self._evaluate_feature_map(feature_map)
        cov_x = (psi.T * wpi) @ psi
        cross_same = (psi.T * wpi) @ transfer(psi)
        if lagged_feature_map is None:
            cov_y, cross = cov_x, cross_same
            r = psi.shape[1]
        else:
            psi_lag = self._evaluate_feature_map(lagged_feature_map)
            cov_y = (psi_lag.T * wpi) @ psi_lag
            cross = (psi.T * wpi) @ transfer(psi_lag)
            r = min(psi.shape[1], psi_lag.shape[1])

        whitened = _sym_pinv_power(cov_x, -0.5, rcond) @ cross @ _sym_pinv_power(cov_y, -0.5, rcond)
        score = float(np.sum(whitened**2))

        def top_sq_sum(values: np.ndarray) -> float:
            return float(np.sum(values[:r] ** 2))

        est = sort_by_modulus(np.linalg.eigvals(_sym_pinv_power(cov_x, -1.0, rcond) @ cross_same))
        true = spec.eigvals
        dist = np.abs(true[:, None] - est[None, :])  # (N + 1, r)
        spectral_error = float(dist[:n_eigs].min(axis=1).max())
        spectral_error_paper = float(dist[:, :n_eigs].min(axis=0).max())
        return {
            "projection_score": score,
            "optimality_gap": top_sq_sum(spec.svals) - score,
            "optimality_gap_paper": top_sq_sum(spec.svals_lebesgue) - score,
            "eigvals": est,
            "spectral_error": spectral_error,
            "spectral_error_paper": spectral_error_paper,
            "n_features": int(psi.shape[1]),
        }
