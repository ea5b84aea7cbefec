"""Operator regression on a feature map and the downstream tasks (paper Sec. 4, App. D).

:class:`TransferOperator` fits the least-squares estimator ``T = (Cx + ridge I)^+ Cxy`` on
features ``psi`` (Eq. 15 and App. D.2) and offers its eigen-decomposition (Eq. 16),
eigenfunctions, multi-step forecasts through the modal decomposition (Eq. 17 and App. D.3),
Koopman modes and implied timescales.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from dpnets.base import BaseEstimator
from dpnets.data import check_states, chunks, is_streaming, pairs, resolve_lag, to_numpy
from dpnets.exceptions import check_is_fitted
from dpnets.io import (
    InvalidModelFile,
    arrays_to_tensors,
    dump_features,
    register,
    restore_features,
    save,
)
from dpnets.linalg import eig_biorthogonal, sym_matrix_function
from dpnets.params import check_choice, check_int, check_real
from dpnets.representation import DPNet

__all__ = [
    "SpectralModel",
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

        def run_module(x: np.ndarray) -> np.ndarray:
            p = next(module.parameters(), None)
            device = p.device if p is not None else torch.device("cpu")
            dtype = p.dtype if p is not None else torch.float32
            module.eval()
            out = []
            with torch.no_grad():
                for sl in chunks(x.shape[0], 8192):
                    out.append(module(torch.as_tensor(x[sl]).to(device=device, dtype=dtype)).cpu())
            return torch.cat(out).numpy()

        return lambda x: _as_features(run_module(x), x.shape[0])
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


def _resolve_constant(setting: Any, phi: np.ndarray) -> bool:
    """``constant="auto"``: add the constant unless the features already span it."""
    if setting == "auto":
        return not constant_in_span(phi)
    return bool(setting)


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
    """Shared downstream API of the linear models on a feature map.

    Subclasses set, in ``fit``: ``operator_`` (r, r), ``cx_``, ``_cx_pinv``,
    ``features_x_`` (training features), ``state_coef_`` (least-squares coefficients of the
    state observable), ``n_samples_``, ``n_features_``, ``state_shape_``, and call
    :meth:`_set_spectrum`. They implement :meth:`_time_factor` (the eigenvalue weight of
    a forecast ``t`` steps or time units ahead), :meth:`_power` (the matrix counterpart, used
    when the eigenvector matrix is ill-conditioned) and :meth:`implied_timescales`.
    Coefficients of observables are always least squares on ``features_x_``:
    ``(Cx + ridge I)^+ Phi_X^T F / n`` where ``F`` holds the observable's values on the
    samples that :meth:`_observable_coef` documents per subclass.
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
        self._cx_pinv = cx_pinv
        self.rank_ = rank

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
        return self._basis(as_feature_map(self.features)(x))

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
        coef = self._cx_pinv @ (self._training_features().T @ f_flat) / self.n_samples_
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
        """VAMP score of the estimator's features on (held-out) data, higher is better.

        ``kind="vamp2"``: ``1 + ||K||_F^2`` and ``kind="vamp1"``: ``1 + ||K||_*`` with
        ``K = Cx^{-1/2} Cxy Cy^{-1/2}`` of the *centred* features (the constant counted as
        the 1; Mardt et al., :func:`dpnets.scores.vamp_score`), over the lagged pairs of
        ``X`` at ``lag`` (default: the fitted ``lag_``). Equal to deeptime's
        ``VAMP(...).score(r, test_model=...)`` with all dimensions kept (tested to 1e-8),
        and to the projection score ``P^0`` of ``[1, psi]`` for ``"vamp2"``. Scores are
        comparable between models with the same number of features. It makes
        scikit-learn's ``GridSearchCV`` work (``score(X_test)``); ``y`` is ignored.
        """
        from dpnets.scores import vamp_score

        check_is_fitted(self, "operator_")
        check_choice("kind", kind, ("vamp1", "vamp2"))
        lag = self.lag_ if lag is None else lag
        if lag is None:
            raise ValueError("the model's lag is unknown: pass score(X, lag=k)")
        p = pairs(X, resolve_lag(X, lag)[0])
        fx, fy = self.transform(p.X), self.transform(p.Y)
        if getattr(self, "constant_", False):  # the constant is the "+1" of the VAMP scores
            fx, fy = fx[:, 1:], fy[:, 1:]
        with torch.no_grad():
            return float(vamp_score(torch.as_tensor(fx), torch.as_tensor(fy), p=int(kind[-1])))

    def save(self, path: str) -> None:
        """Save to ``path`` atomically (see :func:`dpnets.load`)."""
        save(self, path)


class TransferOperator(SpectralModel):
    """Least-squares transfer operator on a feature map (paper Sec. 4, App. D).

    Fits ``T = (Cx + ridge I)^+ Cxy`` with ``Cx = Phi_X^T Phi_X / n`` and
    ``Cxy = Phi_X^T Phi_Y / n`` (the same feature map on both sides, App. D.3), so that
    ``E[h(X_t) | X_0 = x] ~ psi(x)^T T^t z`` for ``h = psi^T z``.

    Parameters
    ----------
    features : DPNet, nn.Module, callable or None
        Feature map ``psi``: a fitted :class:`dpnets.DPNet`, any callable mapping states
        ``(n, *state_shape)`` to ``(n, r)`` (numpy or torch), or ``None`` for the identity on
        flattened states (DMD).
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
    operator_ : ndarray (r, r)
        The estimator matrix ``T`` (``r`` counts the constant when it was added).
    constant_ : bool
        Whether the constant function was added to the features.
    feature_shift_, feature_scale_ : ndarray (r,) or None
        Standardisation of the features in the basis with the constant (None without).
    cx_, cxy_ : ndarray (r, r)
        Empirical covariances.
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
    def _fit_lag(self, data: Any, lag: Any) -> tuple[int, int | None]:
        """Pairing and model lag; defaults to (and checks against) a DPNet's own lag."""
        feature_lag = getattr(self.features, "lag_", None)
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
        fmap = as_feature_map(self.features)
        pair_lag, self.lag_ = self._fit_lag(data, lag)
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
        self.constant_ = _resolve_constant(self.constant, phi_x)
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
        # least-squares coefficients of the state at time lag on psi(X_0) (App. D.2)
        self.state_coef_ = self._cx_pinv @ xty / n
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
        u = np.real(self._cx_pinv @ np.conj(self.left_eigvecs_[:, k]))
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


def timescales_from_eigvals(eigvals: np.ndarray, lag_time: float) -> np.ndarray:
    """``-lag_time / ln|lambda|``; ``inf`` where ``1 - |lambda| <= STATIONARY_TOL``."""
    mod = np.abs(np.asarray(eigvals))
    out = np.full(mod.shape, np.inf)
    ok = mod < 1.0 - STATIONARY_TOL
    with np.errstate(divide="ignore"):
        out[ok] = -float(lag_time) / np.log(mod[ok])
    return out


# ---------------------------------------------------------------------------- generator
# Continuous-time estimator (paper Sec. 3 "Generator learning", App. E).


def _torch_features(features: Any, dtype: torch.dtype) -> tuple[Callable, torch.device]:
    """A torch feature function on ``dtype`` inputs, and its device.

    Modules (and a fitted DPNet's encoder) are copied and cast to ``dtype``, so that the
    estimator's Itô derivatives are computed in float64 whatever the training precision.
    """
    import copy

    if features is None:
        return (lambda x: x.reshape(x.shape[0], -1)), torch.device("cpu")
    if isinstance(features, DPNet):  # its standardisation and encoder, on raw states
        features = features.feature_module()
    if isinstance(features, torch.nn.Module):
        module = copy.deepcopy(features)
        p = next(module.parameters(), None)
        device = p.device if p is not None else torch.device("cpu")
        if p is not None and p.is_floating_point():
            module = module.to(dtype)
        module.eval()
        return module, device
    if callable(features):
        return features, torch.device("cpu")
    raise TypeError(
        "Generator features must be None (identity), a fitted DPNet, a torch.nn.Module or a "
        "torch callable states -> (n, r)"
    )


class Generator(SpectralModel):
    r"""Least-squares estimator of the generator of an SDE on a feature map (App. E).

    For ``dX = A(X) dt + B(X) dW`` (Eq. 11) and samples ``x_1..x_n`` of the invariant law,
    fits ``L = (Cx + ridge I)^+ C_d`` with ``Cx = Phi^T Phi / n`` and
    ``C_d = Phi^T dPhi / n``, where ``dPhi`` holds the Itô derivatives of the features
    (Eqs. 12-13, :func:`dpnets.ito.ito_derivative`). Its eigen-decomposition (App. E) gives
    the generator's eigenvalues ``lambda_i`` (rates, ``Re lambda <= 0``), eigenfunctions, the
    implied timescales ``-1 / lambda_i`` and forecasts at any real time ``t >= 0``:
    ``E[f(X_t) | X_0 = x] ~ sum_i exp(lambda_i t) phi_i(x) l_i^H D_f`` with
    ``D_f = (Cx + ridge I)^+ Phi^T F / n`` the *equal-time* least-squares coefficients of the
    observable (App. E, continuous-time KMD).

    Parameters
    ----------
    features : DPNet, nn.Module, callable or None
        Feature map ``psi`` as a differentiable torch function (twice, for ``form="ito"``):
        a fitted :class:`dpnets.DPNet` (e.g. trained with ``score="generator"``), a
        ``torch.nn.Module``, a callable on torch tensors, or ``None`` for linear features
        (the flattened state). Modules are evaluated in ``dtype`` (a float64 copy).
    sde : dpnets.ito.SDE, optional
        The process; default: ``features.sde`` for a DPNet trained in generator mode.
        Alternatively give ``drift`` and ``diffusion``.
    drift, diffusion : optional
        ``A`` and ``B`` as in :class:`dpnets.ito.SDE` (instead of ``sde``).
    form : {"ito", "dirichlet"}, default "ito"
        ``"ito"``: ``C_d = E[psi (L psi)^T]`` from second derivatives (any diffusion).
        ``"dirichlet"``: ``C_d = -1/2 E[grad psi B B^T grad psi^T]``, first derivatives
        only and symmetric; valid for reversible diffusions only (equal to ``"ito"`` in
        expectation there).
    symmetrize : bool, default False
        Replace ``C_d`` by its symmetric part (for reversible processes: a self-adjoint
        estimator with real spectrum; leave False otherwise).
    constant : {"auto", True, False}, default "auto"
        Add the constant function (eigenvalue 0, the stationary state) to the features;
        "auto" adds it unless the features already span it, as in
        :class:`TransferOperator`.
    ridge : float, default 0.0
        Tikhonov regularisation added to ``Cx``.
    rtol : float, optional
        Relative rank cut-off of the pseudo-inverse (default ``r * eps``).
    batch_size : int, default 8192
        States per derivative evaluation.
    dtype : torch.dtype, default torch.float64

    Attributes
    ----------
    operator_ : ndarray (r, r)
        ``L``.
    cx_, cxd_ : ndarray (r, r)
        ``Cx`` and ``C_d``.
    eigvals_ : ndarray (rank_,), complex
        Eigenvalues sorted by *decreasing real part* (``lambda_0 ~ 0`` first).
    left_eigvecs_, right_eigvecs_ : ndarray (r, rank_), complex
        Biorthogonal eigenvectors (``L^H R = I``); right eigenfunctions have unit empirical
        norm (in the ``Cx + ridge I`` metric).
    partial_trace_ : float
        ``tr((Cx + ridge I)^+ C_d)``, the generator score ``P_d^0`` of the features (Eq. 14).
    rank_, n_samples_, n_features_, state_shape_

    Notes
    -----
    The eigen-decomposition is computed on the range of ``Cx + ridge I`` (whitened Ritz
    problem): a rank-deficient feature map (``rank_ < n_features_``) gives ``rank_``
    eigenpairs, without the spurious zero eigenvalues of the pseudo-inverse's null space.
    Raise ``rtol`` to cut ill-conditioned directions of large fixed dictionaries. A loaded
    model has ``sde=None``: it predicts and decomposes, but needs an SDE to be refitted.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from dpnets import Generator
    >>> from dpnets.ito import SDE
    >>> ou = SDE(lambda x: -x, 2**0.5, reversible=True)          # dX = -X dt + sqrt(2) dW
    >>> psi = lambda x: torch.cat([x**0, x, x**2 - 1], dim=1)    # Hermite polynomials
    >>> x = np.random.default_rng(0).standard_normal((1000, 1))
    >>> np.round(Generator(psi, ou).fit(x).eig().real, 8) + 0.0
    array([ 0., -1., -2.])
    """

    def __init__(
        self,
        features: Any = None,
        sde: Any = None,
        *,
        drift: Callable | None = None,
        diffusion: Any = None,
        form: str = "ito",
        symmetrize: bool = False,
        ridge: float = 0.0,
        rtol: float | None = None,
        batch_size: int = 8192,
        dtype: torch.dtype = torch.float64,
        constant: str | bool = "auto",
    ) -> None:
        self.features = features
        self.sde = sde
        self.drift = drift
        self.diffusion = diffusion
        self.form = form
        self.symmetrize = symmetrize
        self.ridge = ridge
        self.rtol = rtol
        self.batch_size = batch_size
        self.dtype = dtype
        self.constant = constant

    # ------------------------------------------------------------------ helpers
    def _resolve_sde(self):
        from dpnets.ito import SDE

        if self.sde is not None:
            if self.drift is not None or self.diffusion is not None:
                raise ValueError("give either sde or drift and diffusion, not both")
            if not isinstance(self.sde, SDE):
                raise TypeError(f"sde must be a dpnets.ito.SDE, got {type(self.sde).__name__}")
            return self.sde
        if self.drift is not None or self.diffusion is not None:
            if self.drift is None or self.diffusion is None:
                raise ValueError("drift and diffusion must be given together")
            return SDE(self.drift, self.diffusion)
        inherited = getattr(self.features, "sde", None)
        if isinstance(inherited, SDE):
            return inherited
        raise ValueError(
            "the SDE is unknown: pass sde=dpnets.ito.SDE(...) (or drift= and diffusion=)"
        )

    def _evaluate(self, x: np.ndarray, what: str, sde: Any = None, constant: bool = False):
        """Features (and derivatives) of states ``x`` in chunks, as float64 numpy; with
        ``constant`` the constant function comes first (its derivatives are zero)."""
        from dpnets.ito import diffusion_jacobian, ito_derivative
        from dpnets.scores import with_constant

        fn, device = _torch_features(self.features, self.dtype)
        if constant:
            base = fn

            def fn(xb: torch.Tensor) -> torch.Tensor:
                return with_constant(base(xb))

        outs: list[list[np.ndarray]] = []
        with torch.no_grad():
            for sl in chunks(x.shape[0], int(self.batch_size)):
                xb = torch.as_tensor(x[sl]).to(device=device, dtype=self.dtype)
                if what == "features":
                    res = (fn(xb),)
                elif what == "ito":
                    res = ito_derivative(fn, xb, sde)
                else:
                    res = diffusion_jacobian(fn, xb, sde)
                outs.append([to_numpy(r).astype(np.float64) for r in res])
        arrays = [np.concatenate(parts) for parts in zip(*outs, strict=True)]
        phi = arrays[0]
        if phi.ndim != 2 or phi.shape[0] != x.shape[0]:
            raise ValueError(f"feature map must return shape (n, r); got {phi.shape}")
        for a in arrays:
            if not np.all(np.isfinite(a)):
                raise ValueError("the feature map or its derivatives returned NaN or inf")
        return arrays

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Any, sample_weight: Any = None) -> Generator:
        """Estimate the generator from samples ``X`` of the invariant distribution.

        Parameters
        ----------
        X : array (n, *state_shape) or list of arrays
            States distributed according to the invariant law (e.g. a long trajectory, or
            trajectories observed at irregular times); their order does not matter.
        sample_weight : array (n,), optional
            Non-negative weights of the samples (e.g. quadrature weights, or importance
            weights for samples of a biased law); all expectations, including the
            observables' least-squares coefficients, are weighted. Default: uniform.

        Returns
        -------
        self
        """
        if self.form not in ("ito", "dirichlet"):
            raise ValueError(f"form must be 'ito' or 'dirichlet', got {self.form!r}")
        self._check_regression_params()
        check_int("batch_size", self.batch_size, 1)
        from dpnets.ito import check_samples, warn_if_piecewise_linear

        sde = self._resolve_sde()
        if self.form == "dirichlet" and not sde.reversible:
            raise ValueError(
                "form='dirichlet' needs a reversible SDE (SDE(..., reversible=True)); use "
                "form='ito' otherwise"
            )
        x = check_samples(X)
        if self.form == "ito" and isinstance(
            getattr(self.features, "encoder_", None), torch.nn.Module
        ):
            warn_if_piecewise_linear(self.features.encoder_)
        elif self.form == "ito" and isinstance(self.features, torch.nn.Module):
            warn_if_piecewise_linear(self.features)
        w = self._check_weights(sample_weight, x.shape[0])
        phi, d = self._evaluate(x, self.form, sde, constant=True)
        self.constant_ = _resolve_constant(self.constant, phi[:, 1:])
        if not self.constant_:
            phi, d = phi[:, 1:], d[:, 1:]
        n, r = phi.shape
        if n < r:
            raise ValueError(f"fewer samples ({n}) than features (r={r}); provide more data")
        phi_w = phi if w is None else phi * w[:, None]
        cx = phi_w.T @ phi / n
        if self.form == "ito":
            cxd = phi_w.T @ d / n
        elif w is None:
            cxd = -0.5 * np.einsum("nim,njm->ij", d, d) / n
        else:
            cxd = -0.5 * np.einsum("n,nim,njm->ij", w, d, d) / n
        if self.symmetrize:
            cxd = 0.5 * (cxd + cxd.T)
        self._regress(cx, cxd)
        self.cxd_ = cxd
        self.partial_trace_ = float(np.trace(self.operator_))
        self.n_samples_, self.n_features_ = n, r
        self.state_shape_ = tuple(x.shape[1:])
        self.features_x_ = phi
        self.sample_weight_ = w
        # equal-time least-squares coefficients of the state (App. E)
        x_flat = np.asarray(x, dtype=np.float64).reshape(n, -1)
        self.state_coef_ = self._cx_pinv @ (phi_w.T @ x_flat) / n
        self._set_spectrum()
        return self

    @staticmethod
    def _check_weights(sample_weight: Any, n: int) -> np.ndarray | None:
        """Weights normalised to mean one, or None for uniform weights."""
        if sample_weight is None:
            return None
        w = np.asarray(to_numpy(sample_weight), dtype=np.float64).reshape(-1)
        if w.shape[0] != n:
            raise ValueError(f"sample_weight has {w.shape[0]} entries for {n} samples")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("sample_weight must be finite, non-negative and not all zero")
        return w * (n / w.sum())

    def _observable_coef(self, observable: Any) -> tuple[np.ndarray, tuple[int, ...]]:
        """Equal-time (weighted) least-squares coefficients of an observable (App. E)."""
        w = getattr(self, "sample_weight_", None)
        if observable is None or w is None:
            return super()._observable_coef(observable)
        f = check_states(observable, "observable")
        if f.shape[0] != self.n_samples_:
            raise ValueError(
                f"observable must hold one value per training sample ({self.n_samples_}), "
                f"got {f.shape[0]} rows"
            )
        f_flat = np.asarray(f, dtype=np.float64).reshape(f.shape[0], -1) * w[:, None]
        coef = self._cx_pinv @ (self._training_features().T @ f_flat) / self.n_samples_
        return coef, (() if np.ndim(observable) == 1 else tuple(f.shape[1:]))

    def _set_spectrum(self) -> None:
        """Eigen-decomposition on the range of ``Cx`` (the Ritz problem), by whitening.

        With ``Cx + ridge I = U S U^T`` restricted to the ``k = rank_`` eigenvalues above the
        cut-off, ``M = S^{-1/2} U^T C_d U S^{-1/2}`` (k x k) is similar to ``L`` on the range;
        its eigenvectors map back to ``R = U S^{-1/2} V`` and ``L = U S^{1/2} W``. A
        rank-deficient feature map thus yields ``rank_`` genuine eigenpairs, without the
        spurious zero eigenvalues of the pseudo-inverse's null space.
        """
        from dpnets.linalg import default_rtol

        r = self.cx_.shape[0]
        reg = self.cx_ + float(self.ridge) * np.eye(r)
        s, u = np.linalg.eigh(0.5 * (reg + reg.T))
        rtol = default_rtol(r) if self.rtol is None else float(self.rtol)
        keep = s > rtol * max(s.max(), 0.0)
        if not keep.any():
            raise ValueError("the feature covariance is zero: the features vanish on the data")
        uk, sk = u[:, keep], s[keep]
        whiten = uk / np.sqrt(sk)
        m = whiten.T @ self.cxd_ @ whiten
        w, left, right = eig_biorthogonal(m)
        order = np.lexsort((-w.imag, -w.real))
        self.eigvals_ = w[order]
        self.right_eigvecs_ = whiten @ right[:, order]
        self.left_eigvecs_ = (uk * np.sqrt(sk)) @ left[:, order]

    def transform(self, X: Any) -> np.ndarray:
        """Features ``psi(X)`` (evaluated in ``dtype``), float64 (n, r)."""
        check_is_fitted(self, "operator_")
        return self._evaluate(self._check_X(X), "features", constant=self.constant_)[0]

    # ------------------------------------------------------------------ time
    def _check_time(self, t: Any) -> float:
        if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)):
            raise ValueError(f"t must be a real number >= 0, got {t!r}")
        if not (np.isfinite(t) and t >= 0):
            raise ValueError(f"t must be a finite real number >= 0, got {t!r}")
        return float(t)

    def _time_factor(self, t: float) -> np.ndarray:
        return np.exp(self.eigvals_ * float(t))

    def _power(self, t: float) -> np.ndarray:
        import scipy.linalg

        return scipy.linalg.expm(self.operator_ * float(t))

    def implied_timescales(self) -> np.ndarray:
        """Implied timescales ``-1 / Re(lambda_i)``.

        Returns
        -------
        ndarray (rank_,)
            In the order of :meth:`eig`, in the time units of the SDE; ``inf`` where
            ``Re(lambda_i) >= -tol`` with ``tol = r * eps * max|lambda|`` (the stationary
            eigenvalue 0 up to round-off).
        """
        check_is_fitted(self, "operator_")
        re = self.eigvals_.real
        tol = re.size * np.finfo(np.float64).eps * max(np.abs(self.eigvals_).max(), 1e-300)
        out = np.full(re.shape, np.inf)
        ok = re < -tol
        out[ok] = -1.0 / re[ok]
        return out


#: saved arrays; the n x r training features are not saved (file size independent of n)
_GENERATOR_ARRAYS = ("operator_", "cx_", "cxd_", "_cx_pinv", "state_coef_")


def _dump_generator(model: Generator, tensors: dict) -> dict:
    check_is_fitted(model, "operator_")
    arrays_to_tensors(model, _GENERATOR_ARRAYS, tensors)
    if getattr(model, "sample_weight_", None) is not None:
        arrays_to_tensors(model, ("sample_weight_",), tensors)
    return {
        "params": {
            "form": model.form,
            "symmetrize": bool(model.symmetrize),
            "ridge": float(model.ridge),
            "rtol": model.rtol,
            "batch_size": int(model.batch_size),
            "constant": model.constant,
        },
        "fitted": {
            "constant_": bool(model.constant_),
            "rank_": int(model.rank_),
            "partial_trace_": float(model.partial_trace_),
            "n_samples_": int(model.n_samples_),
            "n_features_": int(model.n_features_),
            "state_shape_": list(model.state_shape_),
        },
        "features": dump_features(model.features, tensors),
    }


def _restore_generator(cfg: dict, tensors: dict, **kw: Any) -> Generator:
    params = {"constant": False, **cfg["params"]}  # files before the constant: none added
    gen = Generator(restore_features(cfg["features"], tensors, **kw), **params)
    gen.constant_ = False
    for name in _GENERATOR_ARRAYS:
        setattr(gen, name, tensors[name].numpy())
    _restore_optional(gen, tensors, ("features_x_",))  # files before the size limit
    sw = tensors.get("sample_weight_")
    gen.sample_weight_ = None if sw is None else sw.numpy()
    for name, value in cfg["fitted"].items():
        setattr(gen, name, tuple(value) if name == "state_shape_" else value)
    gen._set_spectrum()
    return gen


#: saved arrays; the n x r training features are not saved (file size independent of n)
_OPERATOR_ARRAYS = ("operator_", "cx_", "cxy_", "_cx_pinv", "state_coef_")


def dump_operator(model: Any, tensors: dict[str, torch.Tensor]) -> dict:
    """The saved form of a fitted :class:`TransferOperator` (and of DMD/EDMD, which add their
    own parameters to it): parameters, fitted scalars, arrays in ``tensors``, feature map."""
    check_is_fitted(model, "operator_")
    arrays_to_tensors(model, _OPERATOR_ARRAYS, tensors)
    if getattr(model, "features_mean_", None) is not None:
        arrays_to_tensors(model, ("features_mean_",), tensors)
    if getattr(model, "feature_shift_", None) is not None:
        arrays_to_tensors(model, ("feature_shift_", "feature_scale_"), tensors)
    return {
        "params": {
            "ridge": float(model.ridge),
            "rtol": model.rtol,
            "constant": model.constant,
            "dt": float(model.dt),
        },
        "fitted": {
            "constant_": bool(model.constant_),
            "lag_": model.lag_,
            "rank_": int(model.rank_),
            "n_samples_": int(model.n_samples_),
            "n_features_": int(model.n_features_),
            "state_shape_": list(model.state_shape_),
        },
        "features": dump_features(model.features, tensors),
    }


def restore_operator(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> TransferOperator:
    """Inverse of :func:`dump_operator` (``kw``: :func:`dpnets.load`'s keyword arguments)."""
    op = TransferOperator(restore_features(cfg["features"], tensors, **kw), **cfg["params"])
    for name in _OPERATOR_ARRAYS:
        setattr(op, name, tensors[name].numpy())
    _restore_optional(op, tensors, ("features_x_", "features_mean_"))
    shift = tensors.get("feature_shift_")
    op.feature_shift_ = None if shift is None else shift.numpy()
    op.feature_scale_ = None if shift is None else tensors["feature_scale_"].numpy()
    restore_fitted_operator(op, cfg["fitted"])
    return op


def _restore_optional(model: Any, tensors: dict[str, torch.Tensor], names: Sequence[str]) -> None:
    for name in names:
        t = tensors.get(name)
        setattr(model, name, None if t is None else t.numpy())


def restore_fitted_operator(model: Any, fitted: dict) -> None:
    """Set the fitted scalars saved by :func:`dump_operator`, check them against the arrays
    and recompute the spectrum."""
    model.constant_ = bool(fitted.get("constant_", False))
    model.lag_ = fitted["lag_"]
    model.rank_ = fitted["rank_"]
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
    if not (isinstance(model.rank_, int) and 0 <= model.rank_ <= r):
        raise InvalidModelFile(f"invalid rank_={model.rank_!r} for {r} features")
    if model.lag_ is not None and not (isinstance(model.lag_, int) and model.lag_ >= 1):
        raise InvalidModelFile(f"invalid lag_={model.lag_!r}")
    if not all(isinstance(d, int) and d >= 1 for d in model.state_shape_):
        raise InvalidModelFile(f"invalid state_shape_={model.state_shape_!r}")
    d = int(np.prod(model.state_shape_))
    shapes = {"operator_": (r, r), "cx_": (r, r), "_cx_pinv": (r, r), "features_x_": (n, r)}
    shapes["state_coef_"] = (r, d)
    for name, shape in shapes.items():
        value = getattr(model, name, None)
        if value is not None and tuple(np.shape(value)) != shape:
            raise InvalidModelFile(
                f"{name} has shape {tuple(np.shape(value))}, expected {shape} for "
                f"n_features_={r}, n_samples_={n}"
            )


register("TransferOperator", TransferOperator, dump_operator, restore_operator)
register("generator", Generator, _dump_generator, _restore_generator)
__all__ += [
    "Generator",
    "dump_operator",
    "restore_operator",
    "restore_fitted_operator",
    "check_fitted_arrays",
]
