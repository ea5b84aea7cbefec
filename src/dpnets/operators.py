"""Operator regression on a feature map and the downstream tasks (paper Sec. 4, App. D).

:class:`TransferOperator` fits the least-squares estimator ``T = (Cx + ridge I)^+ Cxy`` on
features ``psi`` (Eq. 15 and App. D.2) and offers its eigen-decomposition (Eq. 16),
eigenfunctions, multi-step forecasts through the modal decomposition (Eq. 17 and App. D.3),
Koopman modes and implied timescales.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from dpnets.base import BaseEstimator, clone, is_fitted
from dpnets.data import check_states, is_streaming, pairs, resolve_lag, to_numpy
from dpnets.exceptions import check_is_fitted
from dpnets.io import (
    InvalidModelFile,
    arrays_to_tensors,
    dump_features,
    register,
    restore_features,
    save,
    tensors_to_arrays,
)
from dpnets.linalg import eig_biorthogonal, sym_matrix_function
from dpnets.nn.utils import encode
from dpnets.params import check_choice, check_real

__all__ = [
    "SpectralModel",
    "DiscreteTimeModel",
    "TransferOperator",
    "FeatureMap",
    "as_feature_map",
    "constant_in_span",
    "timescales_from_eigvals",
]

FeatureMap = Callable[[np.ndarray], np.ndarray]


def as_feature_map(features: Any) -> FeatureMap:
    """Normalise ``features`` to a function ``states -> float64 array (n, r)``.

    ``None`` is the identity on flattened states (linear features: DMD). A fitted
    :class:`dpnets.DPNet`, a ``torch.nn.Module`` or any callable returning numpy or torch
    arrays is accepted.
    """
    if features is None:
        return lambda x: np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)
    if isinstance(features, torch.nn.Module):
        module = features
        return lambda x: _as_features(encode(module, x).numpy(), x.shape[0])
    if hasattr(features, "transform") and callable(features.transform):
        return lambda x: _as_features(features.transform(x), x.shape[0])
    if callable(features):
        return lambda x: _as_features(features(x), x.shape[0])
    raise TypeError(
        "features must be None, a fitted DPNet, a torch.nn.Module or a callable states -> (n, r)"
    )


#: ``1 - |lambda|`` below which an eigenvalue counts as stationary (implied timescale inf)
STATIONARY_TOL = 1e-10


def constant_in_span(phi: np.ndarray, tol: float = 1e-8) -> bool:
    """Whether the constant function lies in the span of features ``phi`` (n, r) on the data.

    The squared empirical distance of ``1`` to the span is ``1 - mu^T Cx^+ mu`` with
    ``mu`` the feature mean and ``Cx`` the uncentred covariance; it is in the span when that
    is at most ``tol``. The columns are first scaled to unit root mean square, so features
    of any scale (raw coordinates far from the origin) give the same answer.
    """
    n = phi.shape[0]
    rms = np.sqrt(np.mean(phi * phi, axis=0))
    phi = phi / np.where(rms > 0, rms, 1.0)
    mu = phi.mean(0)
    cx_pinv, _ = sym_matrix_function(phi.T @ phi / n, -1.0)
    return bool(1.0 - float(mu @ cx_pinv @ mu) <= tol)


def _prepend_ones(phi: np.ndarray) -> np.ndarray:
    return np.concatenate([np.ones((phi.shape[0], 1)), phi], axis=1)


def _as_features(phi: Any, n: int) -> np.ndarray:
    phi = np.asarray(to_numpy(phi), dtype=np.float64)
    if phi.ndim == 1:
        phi = phi[:, None]
    if phi.ndim != 2 or phi.shape[0] != n:
        raise ValueError(f"feature map must return shape (n, r) = ({n}, r); got {phi.shape}")
    if not np.all(np.isfinite(phi)):
        raise ValueError("feature map returned NaN or inf values")
    return phi


class SpectralModel(BaseEstimator):
    """The model contract: every estimator of a transfer operator or generator on a feature map.

    Public API (the same for :class:`TransferOperator`, :class:`dpnets.Generator`, the
    baselines and the Koopman autoencoders): :meth:`eig`, :meth:`transform`,
    :meth:`eigenfunctions`, :meth:`predict` (with ``observable=``), :meth:`modes`,
    :meth:`implied_timescales`, :meth:`score` and :meth:`save`.

    Fitted state that every subclass sets in ``fit`` (public, documented):

    * ``features_``: the feature map in use (the fitted one when ``fit`` trained it);
    * ``operator_`` (r, r): the matrix acting on coefficient vectors in the basis of
      :meth:`transform`; ``cx_`` (r, r): the covariance of that basis on the training inputs;
    * ``eigvals_``, ``left_eigvecs_``, ``right_eigvecs_``: from :meth:`_set_spectrum`;
    * ``state_coef_`` (r, d): least-squares coefficients of the (flattened) state observable;
    * ``n_samples_``, ``n_features_``, ``state_shape_``, ``lag_`` (None where unknown);
    * ``features_x_`` (n, r): the training inputs' features, kept in memory after ``fit`` for
      observables given on the training samples (not saved to files).

    Least squares: the coefficients of an observable are ``(Cx + ridge I)^+ Phi_X^T F / n``,
    computed by :meth:`_lstsq` from ``cx_pinv_`` (set by :meth:`_regress`). An estimator
    whose basis is orthonormal by construction (kernel regression, whitened features)
    overrides :meth:`_lstsq` instead. Subclasses implement :meth:`_time_factor` (the
    eigenvalue weight of a forecast ``t`` steps or time units ahead), :meth:`_power` (its
    matrix counterpart, used when the eigenvector matrix is ill-conditioned) and
    :meth:`implied_timescales`.
    """

    features: Any

    def _set_spectrum(self) -> None:
        self.eigvals_, self.left_eigvecs_, self.right_eigvecs_ = eig_biorthogonal(
            self.operator_, metric=self.cx_
        )

    def _check_regression_params(self) -> None:
        check_real("ridge", self.ridge, 0.0)
        if self.rtol is not None:
            check_real("rtol", self.rtol, 0.0, 1.0, low_open=True, high_open=True)
        if getattr(self, "dt", 1.0) is not None:
            check_real("dt", getattr(self, "dt", 1.0), 0.0, low_open=True)
        if hasattr(self, "constant") and not isinstance(self.constant, bool):
            check_choice("constant", self.constant, ("auto", True, False))

    def _regress(self, cx: np.ndarray, c: np.ndarray) -> None:
        """Least squares ``operator_ = (Cx + ridge I)^+ C`` (App. D.2 / App. E) and its state."""
        r = cx.shape[0]
        if not np.any(cx):
            raise ValueError(
                "the feature covariance is zero: the features vanish on the data (a collapsed "
                "or untrained feature map)"
            )
        cx_pinv, rank = sym_matrix_function(cx + float(self.ridge) * np.eye(r), -1.0, self.rtol)
        self.operator_ = cx_pinv @ c
        self.cx_ = cx
        self.cx_pinv_ = cx_pinv
        self.cx_rank_ = rank

    def _lstsq(self, rhs: np.ndarray) -> np.ndarray:
        """``(Cx + ridge I)^+ rhs``: least-squares coefficients from ``rhs = Phi_X^T F`` (/ n)."""
        return self.cx_pinv_ @ rhs

    def _use_constant(self, phi: np.ndarray) -> bool:
        """``constant="auto"``: add the constant unless the features already span it."""
        if self.constant == "auto":
            return not constant_in_span(phi)
        return bool(self.constant)

    # -- hooks
    def _time_factor(self, t: float) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _power(self, t: float) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_time(self, t: Any) -> float:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
            raise ValueError(f"t must be an integer >= 1, got {t!r}")
        return int(t)

    # -- shared
    def eig(self, vectors: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Eigenvalues of the estimator (decreasing modulus; Eq. 16).

        Parameters
        ----------
        vectors : bool, default False
            Also return the biorthogonal left and right eigenvectors ``(vals, L, R)`` with
            ``T R = R diag(vals)``, ``L^H T = diag(vals) L^H``, ``L^H R = I``.
        """
        check_is_fitted(self, "operator_")
        if vectors:
            return self.eigvals_, self.left_eigvecs_, self.right_eigvecs_
        return self.eigvals_

    def transform(self, X: Any) -> np.ndarray:
        """Features used by the estimator at ``X``, float64 (n, n_features_).

        ``psi(X)``; when the estimator added the constant function (``constant_``), the
        basis ``[1, (psi(X) - feature_shift_) / feature_scale_]`` (see
        :meth:`TransferOperator.fit`).
        """
        check_is_fitted(self, "operator_")
        x = self._check_X(X)
        return self._basis(as_feature_map(self.features_)(x))

    def _basis(self, phi: np.ndarray) -> np.ndarray:
        """The regression basis from raw features: ``[1, (phi - shift) / scale]`` or ``phi``."""
        if not getattr(self, "constant_", False):
            return phi
        shift = getattr(self, "feature_shift_", None)
        if shift is not None:
            phi = (phi - shift) / self.feature_scale_
        return _prepend_ones(phi)

    def _check_X(self, X: Any) -> np.ndarray:
        x = check_states(X, "X")
        if tuple(x.shape[1:]) != self.state_shape_:
            raise ValueError(
                f"X has state shape {tuple(x.shape[1:])}; the model was fitted on "
                f"{self.state_shape_}"
            )
        return x

    def eigenfunctions(self, X: Any, side: str = "right") -> np.ndarray:
        """Eigenfunctions evaluated at states ``X`` (Eq. 16), complex (n, r).

        ``side="right"``: ``phi_i(x) = psi(x)^T r_i`` (normalised to unit empirical norm);
        ``side="left"``: ``xi_i(x) = l_i^H psi(x)``.
        """
        check_is_fitted(self, "operator_")
        if side not in ("right", "left"):
            raise ValueError(f"side must be 'right' or 'left', got {side!r}")
        phi = self.transform(X)
        if side == "right":
            return phi @ self.right_eigvecs_
        return phi @ self.left_eigvecs_.conj()

    def _observable_coef(self, observable: Any) -> tuple[np.ndarray, tuple[int, ...]]:
        """LS coefficients ``(Cx + ridge)^+ Phi_X^T F / n`` of an observable (r, l)."""
        if observable is None:
            return self.state_coef_, self.state_shape_
        f = check_states(observable, "observable")
        if f.shape[0] != self.n_samples_:
            raise ValueError(
                f"observable must hold one value per training sample ({self.n_samples_}), "
                f"got {f.shape[0]} rows"
            )
        f_flat = np.asarray(f, dtype=np.float64).reshape(f.shape[0], -1)
        coef = self._lstsq(self._training_features().T @ f_flat) / self.n_samples_
        # a 1-D observable (one scalar per sample) gives 1-D forecasts
        return coef, (() if np.ndim(observable) == 1 else tuple(f.shape[1:]))

    def _training_features(self) -> np.ndarray:
        """The training inputs' features (kept in memory after ``fit``, not in model files,
        whose size must not grow with the data)."""
        phi = getattr(self, "features_x_", None)
        if phi is None:
            raise ValueError(
                "this model was loaded from a file, which does not store the training features "
                "(n x r): refit it to use observables given on the training samples, or pass "
                "the states X explicitly; forecasts of the state itself work as they are"
            )
        return phi

    def predict(self, X: Any, t: Any = 1, observable: Any = None) -> np.ndarray:
        """Forecast ``E[f(X_t) | X_0 = x]`` through the modal decomposition.

        ``sum_i w_i(t) (psi(x)^T r_i) (l_i^H D_f)`` with ``D_f`` the least-squares
        coefficients of the observable and ``w_i(t)`` the eigenvalue weight
        (``lambda_i^{t-1}`` for a transfer operator, Eq. 17; ``exp(lambda_i t)`` for a
        generator, App. E). If the eigenvector matrix is ill-conditioned (a defective
        estimator), the matrix function is used instead.

        Parameters
        ----------
        X : array (m, *state_shape)
            Initial states.
        t : scalar or sequence
            Forecast horizon(s).
        observable : array (n_samples_, ...), optional
            Observable values on the training samples (see the class docstring). Default:
            the state itself.

        Returns
        -------
        ndarray
            ``(m, *obs_shape)`` for a scalar ``t``; ``(len(t), m, *obs_shape)`` otherwise.
        """
        check_is_fitted(self, "operator_")
        scalar = np.ndim(t) == 0
        ts = [self._check_time(s) for s in ([t] if scalar else list(t))]
        if not ts:
            raise ValueError("t is empty: give a horizon or a non-empty sequence of horizons")
        coef, obs_shape = self._observable_coef(observable)
        phi = self.transform(X)
        out = []
        if np.linalg.cond(self.right_eigvecs_) < 1e8:
            phi_r = phi @ self.right_eigvecs_  # (m, r)
            lc = self.left_eigvecs_.conj().T @ coef  # (r, l)
            for s in ts:
                out.append(((phi_r * self._time_factor(s)) @ lc).real)
        else:  # defective estimator: fall back to the matrix function
            for s in ts:
                out.append(phi @ self._power(s) @ coef)
        shaped = [o.reshape(o.shape[0], *obs_shape) for o in out]
        return shaped[0] if scalar else np.stack(shaped)

    def score(self, X: Any, y: Any = None, lag: int | None = None, kind: str = "vamp2") -> float:
        """Score of the model on (held-out) data, higher is better.

        ``X`` holds trajectories, paired at ``lag`` (default: the fitted ``lag_``); ``y`` is
        ignored (scikit-learn's ``GridSearchCV`` calls ``score(X_test)``).

        * ``"vamp2"`` (default): ``1 + ||K||_F^2`` and ``"vamp1"``: ``1 + ||K||_*``, with
          ``K = Cx^{-1/2} Cxy Cy^{-1/2}`` of the *centred* features on ``X`` (the constant
          counted as the 1; Mardt et al., :func:`dpnets.scores.vamp_score`): how much of the
          dynamics the model's *features* capture on ``X``; the operator itself is not used.
          ``"vamp2"`` equals the projection score ``P^0`` of ``[1, psi]`` (Eq. 7).
        * ``"vampE"`` (Wu and Noé 2020, Eq. 30): the Koopman model *fitted on the training
          data* (its singular functions and values, from the training covariances) scored
          against the covariances of ``X``: ``1 + tr(2 S U^T C0t V - S U^T C00 U S V^T Ctt
          V)``. It penalises a model that overfits its training data, so it is the one to
          compare models by on held-out data. Needs ``cy_`` (models fitted since it was
          added).
        * ``"projection"``: ``P^0`` of the model's basis (:meth:`transform`) on ``X``,
          uncentred (Eq. 7); equal to ``"vamp2"`` when the model added the constant.

        All equal deeptime's ``VAMP(...).score(r, test_model=...)`` with all dimensions kept
        (tested to 1e-8). VAMP-1/2 scores are comparable only between models with the same
        number of features (more features never lower them); VAMP-E is comparable across
        dimensions.
        """
        from dpnets.scores import projection_score, vamp_score

        check_is_fitted(self, "operator_")
        check_choice("kind", kind, ("vamp1", "vamp2", "vampE", "projection"))
        lag = self.lag_ if lag is None else lag
        if lag is None:
            raise ValueError("the model's lag is unknown: pass score(X, lag=k)")
        p = pairs(X, resolve_lag(X, lag)[0])
        fx, fy = self.transform(p.X), self.transform(p.Y)
        if kind == "projection":
            with torch.no_grad():
                return float(projection_score(torch.as_tensor(fx), torch.as_tensor(fy)))
        if getattr(self, "constant_", False):  # the constant is the "+1" of the VAMP scores
            fx, fy = fx[:, 1:], fy[:, 1:]
        if kind == "vampE":
            return self._vamp_e(fx, fy)
        with torch.no_grad():
            return float(vamp_score(torch.as_tensor(fx), torch.as_tensor(fy), p=int(kind[-1])))

    def _vamp_e(self, fx: np.ndarray, fy: np.ndarray) -> float:
        """VAMP-E of the training Koopman model against test features (see :meth:`score`)."""
        cy, my = getattr(self, "cy_", None), getattr(self, "features_mean_y_", None)
        if cy is None or my is None or getattr(self, "features_mean_", None) is None:
            raise ValueError(
                "VAMP-E needs the training covariances of the lagged features (cy_), which "
                f"this {type(self).__name__} does not hold: refit it"
            )
        k = 1 if getattr(self, "constant_", False) else 0  # drop the constant column
        mx, my = self.features_mean_[k:], my[k:]

        def centred(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return c[k:, k:] - np.outer(a, b)

        l0, _ = sym_matrix_function(centred(self.cx_, mx, mx), -0.5, self.rtol)
        lt, _ = sym_matrix_function(centred(cy, my, my), -0.5, self.rtol)
        a, s, bt = np.linalg.svd(l0 @ centred(self.cxy_, mx, my) @ lt)
        u, v = l0 @ a, lt @ bt.T
        n = fx.shape[0]
        x0, y0 = fx - fx.mean(0), fy - fy.mean(0)
        t00, t0t, ttt = x0.T @ x0 / n, x0.T @ y0 / n, y0.T @ y0 / n
        su = u * s
        return float(1.0 + np.trace(2.0 * su.T @ t0t @ v - su.T @ t00 @ su @ v.T @ ttt @ v))

    def save(self, path: str) -> None:
        """Save to ``path`` atomically (see :func:`dpnets.load`)."""
        save(self, path)


class DiscreteTimeModel(SpectralModel):
    """A :class:`SpectralModel` of a transfer operator at the lag ``lag_``: forecasts in whole
    lag steps (Eq. 17), Koopman modes, implied timescales and equilibrium reweighting.

    Subclasses regress ``operator_`` so that the state's coefficients ``state_coef_`` are
    those of ``X_{t + lag}`` on ``psi(X_t)`` (so ``t`` steps use ``T^{t-1}``); observables
    passed to :meth:`predict` hold values at the lagged states of the training pairs.
    """

    def _time_factor(self, t: float) -> np.ndarray:
        return self.eigvals_ ** (int(t) - 1)

    def _power(self, t: float) -> np.ndarray:
        return np.linalg.matrix_power(self.operator_, int(t) - 1)

    def modes(self, observable: Any = None) -> np.ndarray:
        """Koopman modes ``m_i = l_i^H D_f / lambda_i`` (App. D.3), complex ``(r, *obs_shape)``.

        With them ``E[f(X_t) | X_0 = x] ~ sum_i lambda_i^t phi_i(x) m_i`` where ``phi_i`` are the
        right eigenfunctions. Modes of (numerically) zero eigenvalues are set to 0.
        """
        check_is_fitted(self, "operator_")
        coef, obs_shape = self._observable_coef(observable)
        lam = self.eigvals_
        proj = self.left_eigvecs_.conj().T @ coef
        small = np.abs(lam) <= np.finfo(np.float64).eps * max(1.0, np.abs(lam).max())
        safe = np.where(small, 1.0, lam)
        m = np.where(small[:, None], 0.0, proj / safe[:, None])
        return m.reshape(m.shape[0], *obs_shape)

    def implied_timescales(self, dt: float | None = None) -> np.ndarray:
        """Implied timescales ``-lag_ * dt / ln|lambda_i|`` from the eigenvalues.

        Parameters
        ----------
        dt : float, optional
            Physical time between consecutive frames; default: the estimator's ``dt``
            (1: timescales in frames). The lag is the one of ``fit`` (``lag_``).

        Returns
        -------
        ndarray (r,)
            In the order of :meth:`eig`: ``inf`` for the stationary eigenvalue (and any
            ``|lambda| >= 1 - 1e-10``), ``0`` for ``lambda = 0``.

        Raises
        ------
        ValueError
            If the lag is unknown (pre-paired data fitted without ``lag=``) or ``dt`` is not
            a finite positive number.
        """
        check_is_fitted(self, "operator_")
        dt = check_real("dt", getattr(self, "dt", 1.0) if dt is None else dt, 0.0, low_open=True)
        if self.lag_ is None:
            raise ValueError(
                "the lag of the training pairs is unknown: pass it when fitting on pre-paired "
                "data or a Dataset, fit(data, lag=k), so that timescales are in time units"
            )
        return timescales_from_eigvals(self.eigvals_, self.lag_ * dt)

    def stationary_weights(self, X: Any = None) -> np.ndarray:
        r"""Equilibrium weights of states relative to the training data (Koopman reweighting).

        For data that do not sample the invariant distribution ``pi`` (short trajectories
        started in chosen states), ``w = dpi / d rho_0`` with ``rho_0`` the distribution of the
        training inputs ``X_t`` is estimated in the span of the features: ``w(x) = psi(x)^T u``
        with ``Cxy^T u = Cx u`` (the weighted input and output distributions agree on every
        feature), i.e. ``u = Cx^+ v`` for the eigenvector ``T^T v = v`` of the eigenvalue
        closest to 1 (Wu et al., J. Chem. Phys. 146, 154104, 2017). Reweighted averages
        ``sum_t w(x_t) f(x_t) / sum_t w(x_t)`` then estimate equilibrium expectations. The
        estimate is exact for indicator features of a finite partition (the Markov state
        model's stationary vector) and needs the constant function in the span of the
        features; individual weights can be slightly negative where the span is poor.

        Parameters
        ----------
        X : array, optional
            States to weigh (default: the training inputs).

        Returns
        -------
        ndarray (n,)
            Weights, normalised to mean 1 over the training inputs.
        """
        check_is_fitted(self, "operator_")
        k = int(np.argmin(np.abs(self.eigvals_ - 1.0)))
        u = np.real(self._lstsq(np.conj(self.left_eigvecs_[:, k])))
        mean = getattr(self, "features_mean_", None)
        mean = self._training_features().mean(0) if mean is None else mean
        norm = float(mean @ u)
        if not abs(norm) > 0:
            raise ValueError(
                "the stationary eigenvector has zero mean weight on the training data; add the "
                "constant function to the features"
            )
        phi = self._training_features() if X is None else self.transform(X)
        return (phi @ u) / norm


class TransferOperator(DiscreteTimeModel):
    """Least-squares transfer operator on a feature map (paper Sec. 4, App. D).

    Fits ``T = (Cx + ridge I)^+ Cxy`` with ``Cx = Phi_X^T Phi_X / n`` and
    ``Cxy = Phi_X^T Phi_Y / n`` (the same feature map on both sides, App. D.3), so that
    ``E[h(X_t) | X_0 = x] ~ psi(x)^T T^t z`` for ``h = psi^T z``.

    Parameters
    ----------
    features : DPNet, nn.Module, callable or None
        Feature map ``psi``: a fitted :class:`dpnets.DPNet` (or another fitted dpnets
        estimator with ``transform``), any callable mapping states ``(n, *state_shape)`` to
        ``(n, r)`` (numpy or torch), or ``None`` for the identity on flattened states (DMD).
        An *unfitted* dpnets estimator (``DPNet(...)``, ``VAMPNet(...)``) makes this the
        composite model: ``fit`` trains a copy of it on the same data and lag
        (``features_``), then regresses the operator, and :meth:`save` stores both in one
        file. ``features`` itself is never changed.
    ridge : float, default 0.0
        Tikhonov regularisation added to ``Cx``.
    rtol : float, optional
        Relative rank cut-off for the pseudo-inverse of ``Cx + ridge I``, in ``(0, 1)``
        (default ``r * eps``).
    constant : {"auto", True, False}, default "auto"
        Regress on ``[1, psi]``: the constant function (the stationary eigenfunction, with
        eigenvalue 1 and timescale inf) is added to the features. "auto" adds it unless
        the features already span it on the training data (:func:`constant_in_span`), so
        every feature map gives correct timescales: DPNets (whose features are centred by
        default), VAMPNets (centred by construction), autoencoders, dictionaries.
        ``False`` is plain (E)DMD on the features as given. With the constant the
        regression works in the basis ``[1, (psi - mean) / std]`` (means and standard
        deviations of the training inputs' features): the same span, so the same estimator,
        but well conditioned for features of any offset and scale (raw coordinates in
        DMD); ``ridge`` then acts on the standardised features.
    dt : float, default 1.0
        Physical time between consecutive frames of the data; timescales are in its units
        (``lag_ * dt`` is the time of one estimator step).

    Attributes
    ----------
    features_ : object
        The feature map in use: ``features`` itself, or the copy trained by ``fit``.
    operator_ : ndarray (r, r)
        The estimator matrix ``T`` (``r`` counts the constant when it was added).
    constant_ : bool
        Whether the constant function was added to the features.
    feature_shift_, feature_scale_ : ndarray (r,) or None
        Standardisation of the features in the basis with the constant (None without).
    cx_, cxy_ : ndarray (r, r)
        Empirical covariances.
    cx_pinv_ : ndarray (r, r)
        ``(Cx + ridge I)^+``; ``cx_rank_`` its rank (below ``r`` for redundant features).
    eigvals_ : ndarray (r,), complex
        Eigenvalues, decreasing modulus.
    left_eigvecs_, right_eigvecs_ : ndarray (r, r), complex
        Biorthogonal (``L^H R = I``) eigenvectors; right eigenfunctions have unit empirical
        norm ``r_i^H Cx r_i = 1``.
    lag_ : int or None
        Lag in frames (from ``fit``; None for pre-paired data fitted without ``lag``).
    n_samples_ : int
    n_features_ : int
    """

    def __init__(
        self,
        features: Any = None,
        ridge: float = 0.0,
        rtol: float | None = None,
        constant: str | bool = "auto",
        dt: float = 1.0,
    ):
        self.features = features
        self.ridge = ridge
        self.rtol = rtol
        self.constant = constant
        self.dt = dt

    # ------------------------------------------------------------------ fitting
    def _fit_features(self, data: Any, lag: int | None) -> Any:
        """The feature map to regress on: ``features``, or a trained copy of an unfitted
        dpnets estimator (the composite model)."""
        f = self.features
        if isinstance(f, BaseEstimator) and hasattr(f, "transform") and not is_fitted(f):
            return clone(f).fit(data, lag)
        return f

    def _fit_lag(self, features: Any, data: Any, lag: Any) -> tuple[int, int | None]:
        """Pairing and model lag; defaults to (and checks against) a DPNet's own lag."""
        feature_lag = getattr(features, "lag_", None)
        if lag is None and feature_lag is not None:
            lag = feature_lag
        elif lag is not None and feature_lag is not None and lag != feature_lag:
            warnings.warn(
                f"the operator is fitted at lag={lag} on features trained at lag="
                f"{feature_lag}; this is intended only when validating across lags (the "
                "operator's lag sets its timescales)",
                stacklevel=3,
            )
        return resolve_lag(data, lag)

    def fit(self, data: Any, lag: int | None = None) -> TransferOperator:
        """Estimate the operator from ``data`` (same forms as :meth:`dpnets.DPNet.fit`).

        Parameters
        ----------
        data : array, list of arrays, tuple (X, Y), Dataset or DataLoader
        lag : int, optional
            Trajectories: lag in frames (default: the lag the feature map was trained at,
            else 1; a different lag warns). Pre-paired data: the lag of the pairs, recorded
            for the timescales.

        Returns
        -------
        self
        """
        self._check_regression_params()
        features = self._fit_features(data, lag)
        fmap = as_feature_map(features)
        pair_lag, lag_ = self._fit_lag(features, data, lag)
        if is_streaming(data):
            phi_x, phi_y, raw_xty, sum_y, state_shape = self._stream(data, fmap)
        else:
            p = pairs(data, pair_lag)
            phi_x = fmap(p.X)
            phi_y = fmap(p.Y)
            y_flat = np.asarray(p.Y, dtype=np.float64).reshape(len(p), -1)
            raw_xty, sum_y = phi_x.T @ y_flat, y_flat.sum(0)
            state_shape = p.state_shape
        if phi_y.shape != phi_x.shape:
            raise ValueError(f"features of X and Y differ in shape: {phi_x.shape}, {phi_y.shape}")
        self.features_, self.lag_ = features, lag_
        self.constant_ = self._use_constant(phi_x)
        self.feature_shift_ = self.feature_scale_ = None
        if self.constant_:
            sd = phi_x.std(0)
            self.feature_shift_ = phi_x.mean(0)
            self.feature_scale_ = np.where(sd > 0, sd, 1.0)
            phi_x, phi_y = self._basis(phi_x), self._basis(phi_y)
            # Phi^T Y in the basis [1, (phi - shift) / scale], from the raw sums
            centred = raw_xty - self.feature_shift_[:, None] * sum_y[None, :]
            raw_xty = np.vstack([sum_y[None, :], centred / self.feature_scale_[:, None]])
        xty = raw_xty
        n, r = phi_x.shape
        if n < r:
            raise ValueError(f"fewer samples ({n}) than features (r={r}); provide more data")
        cx = phi_x.T @ phi_x / n
        cxy = phi_x.T @ phi_y / n
        self._regress(cx, cxy)
        self.cxy_ = cxy
        self.n_samples_, self.n_features_ = n, r
        self.state_shape_ = tuple(state_shape)
        self.features_x_ = phi_x
        self.features_mean_ = phi_x.mean(0)
        # moments of the lagged side, for the VAMP-E score of held-out data
        self.cy_ = phi_y.T @ phi_y / n
        self.features_mean_y_ = phi_y.mean(0)
        # least-squares coefficients of the state at time lag on psi(X_0) (App. D.2)
        self.state_coef_ = self._lstsq(xty) / n
        self._set_spectrum()
        return self

    def _stream(self, data: Any, fmap: FeatureMap):
        """Features of a Dataset/DataLoader of pairs, batch by batch; the states are never
        held in memory together (only the r-dimensional features, ``Phi_X^T Y`` and the sum
        of the ``Y`` states)."""
        loader = data if isinstance(data, DataLoader) else DataLoader(data, batch_size=8192)
        phx, phy = [], []
        xty = sum_y = None
        shape: tuple[int, ...] = ()
        for xb, yb in loader:
            xb = check_states(xb, "X batch")
            yb = check_states(yb, "Y batch")
            fx = fmap(xb)
            phx.append(fx)
            phy.append(fmap(yb))
            y_flat = np.asarray(yb, dtype=np.float64).reshape(yb.shape[0], -1)
            part, total = fx.T @ y_flat, y_flat.sum(0)
            xty = part if xty is None else xty + part
            sum_y = total if sum_y is None else sum_y + total
            shape = tuple(yb.shape[1:])
        if xty is None:
            raise ValueError("the Dataset/DataLoader yielded no samples")
        return np.concatenate(phx), np.concatenate(phy), xty, sum_y, shape


def timescales_from_eigvals(eigvals: np.ndarray, lag_time: float) -> np.ndarray:
    """``-lag_time / ln|lambda|``; ``inf`` where ``1 - |lambda| <= STATIONARY_TOL``."""
    mod = np.abs(np.asarray(eigvals))
    out = np.full(mod.shape, np.inf)
    ok = mod < 1.0 - STATIONARY_TOL
    with np.errstate(divide="ignore"):
        out[ok] = -float(lag_time) / np.log(mod[ok])
    return out


#: saved arrays; the n x r training features are not saved (file size independent of n)
_OPERATOR_ARRAYS = ("operator_", "cx_", "cxy_", "cx_pinv_", "state_coef_")
#: arrays that only some models (or files written since they were added) hold
_OPTIONAL_ARRAYS = (
    "features_mean_",
    "feature_shift_",
    "feature_scale_",
    "cy_",
    "features_mean_y_",
)


def dump_operator(model: Any, tensors: dict[str, torch.Tensor]) -> dict:
    """The saved form of a fitted :class:`TransferOperator` (and of DMD/EDMD, which add their
    own parameters to it): parameters, fitted scalars, arrays in ``tensors``, feature map."""
    check_is_fitted(model, "operator_")
    arrays_to_tensors(model, _OPERATOR_ARRAYS, tensors)
    for name in _OPTIONAL_ARRAYS:
        if getattr(model, name, None) is not None:
            arrays_to_tensors(model, (name,), tensors)
    return {
        "params": {
            "ridge": float(model.ridge),
            "rtol": model.rtol,
            "constant": model.constant,
            "dt": float(model.dt),
        },
        "fitted": dump_fitted_scalars(model),
        **dump_feature_map(model, tensors),
    }


def dump_fitted_scalars(model: Any) -> dict:
    """The fitted scalars every :class:`SpectralModel` file holds."""
    return {
        "constant_": bool(getattr(model, "constant_", False)),
        "lag_": model.lag_,
        "cx_rank_": int(model.cx_rank_),
        "n_samples_": int(model.n_samples_),
        "n_features_": int(model.n_features_),
        "state_shape_": list(model.state_shape_),
    }


def dump_feature_map(model: Any, tensors: dict[str, torch.Tensor]) -> dict:
    """The fitted feature map ``features_``, and whether ``fit`` trained it from an unfitted
    ``features`` (the composite model), so that both are restored."""
    return {
        "features": dump_features(model.features_, tensors),
        "features_trained": model.features_ is not getattr(model, "features", model.features_),
    }


def restore_feature_map(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> tuple:
    """``(features, features_)`` from :func:`dump_feature_map`'s output."""
    fitted = restore_features(cfg["features"], tensors, **kw)
    return (clone(fitted) if cfg.get("features_trained") else fitted), fitted


def restore_operator(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> TransferOperator:
    """Inverse of :func:`dump_operator` (``kw``: :func:`dpnets.load`'s keyword arguments)."""
    features, fitted = restore_feature_map(cfg, tensors, **kw)
    op = TransferOperator(features, **cfg["params"])
    op.features_ = fitted
    tensors_to_arrays(op, tensors, _OPERATOR_ARRAYS)
    restore_fitted_operator(op, cfg["fitted"], tensors)
    return op


def restore_fitted_operator(model: Any, fitted: dict, tensors: dict[str, torch.Tensor]) -> None:
    """Set the fitted scalars of :func:`dump_fitted_scalars` and the optional arrays, check
    them against the arrays and recompute the spectrum."""
    tensors_to_arrays(model, tensors, (), _OPTIONAL_ARRAYS)
    model.features_x_ = None  # not in files (their size must not grow with the data)
    model.constant_ = bool(fitted.get("constant_", False))
    model.lag_ = fitted.get("lag_")
    model.cx_rank_ = fitted.get("cx_rank_", fitted.get("rank_"))
    model.n_samples_ = fitted["n_samples_"]
    model.n_features_ = fitted["n_features_"]
    model.state_shape_ = tuple(fitted["state_shape_"])
    check_fitted_arrays(model)
    model._set_spectrum()


def check_fitted_arrays(model: Any) -> None:
    """The restored operator's scalars and arrays must agree (``InvalidModelFile`` if not)."""
    r, n = model.n_features_, model.n_samples_
    if not (isinstance(r, int) and isinstance(n, int) and 1 <= r <= n):
        raise InvalidModelFile(f"invalid n_features_={r!r} / n_samples_={n!r}")
    rank = getattr(model, "cx_rank_", None)
    if rank is not None and not (isinstance(rank, int) and 0 <= rank <= r):
        raise InvalidModelFile(f"invalid cx_rank_={rank!r} for {r} features")
    if model.lag_ is not None and not (isinstance(model.lag_, int) and model.lag_ >= 1):
        raise InvalidModelFile(f"invalid lag_={model.lag_!r}")
    if not all(isinstance(d, int) and d >= 1 for d in model.state_shape_):
        raise InvalidModelFile(f"invalid state_shape_={model.state_shape_!r}")
    d = int(np.prod(model.state_shape_))
    shapes = {"operator_": (r, r), "cx_": (r, r), "cx_pinv_": (r, r), "features_x_": (n, r)}
    shapes.update({"cy_": (r, r), "features_mean_": (r,), "features_mean_y_": (r,)})
    shapes["state_coef_"] = (r, d)
    for name, shape in shapes.items():
        value = getattr(model, name, None)
        if value is not None and tuple(np.shape(value)) != shape:
            raise InvalidModelFile(
                f"{name} has shape {tuple(np.shape(value))}, expected {shape} for "
                f"n_features_={r}, n_samples_={n}"
            )


register("TransferOperator", TransferOperator, dump_operator, restore_operator)
__all__ += [
    "dump_operator",
    "restore_operator",
    "restore_fitted_operator",
    "check_fitted_arrays",
    "dump_fitted_scalars",
    "dump_feature_map",
    "restore_feature_map",
]
