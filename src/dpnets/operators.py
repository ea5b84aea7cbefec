"""Operator regression on a feature map and the downstream tasks (paper Sec. 4, App. D).

:class:`TransferOperator` fits the least-squares estimator ``T = (Cx + ridge I)^+ Cxy`` on
features ``psi`` (Eq. 15 and App. D.2) and offers its eigen-decomposition (Eq. 16),
eigenfunctions, multi-step forecasts through the modal decomposition (Eq. 17 and App. D.3),
Koopman modes and implied timescales.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, SequentialSampler

from dpnets.base import BaseEstimator, TransformerMixin, clone, fit_lag, is_fitted
from dpnets.data import (
    PairSegment,
    check_lag,
    check_state_shape,
    check_states,
    is_streaming,
    pair_segments,
    pairs,
    resolve_lag,
    to_numpy,
)
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
from dpnets.moments import FIT_CHUNK, Moments
from dpnets.nn.utils import encode
from dpnets.params import check_choice, check_real

__all__ = [
    "SpectralModel",
    "DiscreteTimeModel",
    "TransferOperator",
    "FeatureMap",
    "as_feature_map",
    "constant_in_span",
    "constant_in_span_moments",
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
        # read-only states (memory-mapped files) are copied a chunk at a time for torch
        return lambda x: _as_features(encode(module, _writeable(x)).numpy(), x.shape[0])
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

    It does when some combination ``c^T phi`` of the features is constant and non-zero on
    the data: ``c`` in the null space of the (centred) feature covariance with
    ``c^T mu != 0``, ``mu`` the feature mean. The test runs on the correlation matrix (the
    covariance of the standardised features), so features of any offset and scale give
    the same answer: raw coordinates far from the origin do not span it (the constant is
    then added and the regression stays well conditioned), indicator features of a
    partition and dictionaries holding the constant do. See
    :func:`constant_in_span_moments`, which takes the moments instead of the features.
    """
    phi = np.asarray(phi, dtype=np.float64)
    mean = phi.mean(0)
    centred = phi - mean
    return constant_in_span_moments(mean, centred.T @ centred / phi.shape[0], tol)


def constant_in_span_moments(mean: np.ndarray, cov: np.ndarray, tol: float = 1e-8) -> bool:
    """:func:`constant_in_span` from the feature mean and covariance.

    A feature whose spread is below the round-off of its values is a constant (in the span
    when non-zero). On the others, with ``R = V diag(s) V^T`` the correlation matrix and
    ``m = mu / std`` the standardised means, the squared distance of ``1`` to the span of
    the combinations of (numerically) zero variance is ``1 / (1 + sum_i (v_i^T m)^2 / s_i)``
    over the eigenvalues ``s_i <= tol * max(s)``; the constant is in the span when that
    distance is at most ``tol``.

    Parameters
    ----------
    mean : ndarray (r,)
        ``E[phi]`` on the data.
    cov : ndarray (r, r)
        The centred covariance ``E[(phi - mean)(phi - mean)^T]`` on the data (from
        :meth:`dpnets.moments.Moments.cov`, accurate whatever the offset of the features).
    tol : float, default 1e-8
        Relative variance below which a combination of features counts as constant, and
        largest squared distance of the constant function to the span counted as zero.

    Returns
    -------
    bool
    """
    mean = np.asarray(mean, dtype=np.float64)
    cov = np.asarray(cov, dtype=np.float64)
    eps = np.finfo(np.float64).eps
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    flat = sd <= 64.0 * eps * np.abs(mean)  # constant up to the round-off of its values
    if np.any(flat & (mean != 0)):
        return True
    keep = ~flat
    if not keep.any():  # every feature vanishes on the data
        return False
    sdk = sd[keep]
    corr = cov[np.ix_(keep, keep)] / np.outer(sdk, sdk)
    s, v = np.linalg.eigh(0.5 * (corr + corr.T))
    top = max(float(s.max()), 0.0)
    null = s <= tol * top
    if not null.any():
        return False
    proj = v[:, null].T @ (mean[keep] / sdk)
    ratio = float(np.sum(proj**2 / np.maximum(s[null], eps * top)))
    return bool(1.0 / (1.0 + ratio) <= tol)


def _with_constant(c: np.ndarray, mean_a: np.ndarray, mean_b: np.ndarray) -> np.ndarray:
    """``E[[1, a] [1, b]^T]`` from ``c = E[a b^T]`` and the means of ``a`` and ``b``."""
    out = np.empty((c.shape[0] + 1, c.shape[1] + 1))
    out[0, 0] = 1.0
    out[0, 1:] = mean_b
    out[1:, 0] = mean_a
    out[1:, 1:] = c
    return out


def _input_chunks(sources: list, size: int = FIT_CHUNK) -> Iterator[np.ndarray]:
    """The training inputs ``X`` of a chunked fit, in order: ``PairSegment`` rows, or the
    ``x`` of every batch of a (replayable) DataLoader."""
    for src in sources:
        if isinstance(src, PairSegment):
            yield from src.x_chunks(size)
            continue
        sampler = getattr(src, "sampler", None)
        if not (isinstance(sampler, SequentialSampler) or isinstance(src.dataset, IterableDataset)):
            raise ValueError(
                "the model was fitted on a DataLoader that draws its samples at random, whose "
                "order cannot be replayed: fit on arrays, a Dataset or a DataLoader with "
                "shuffle=False to use observables given on the training samples"
            )
        for batch in src:
            yield check_states(batch[0], "X batch")


def _writeable(x: Any) -> Any:
    """``x``, or a copy of it when it is a read-only numpy array (torch warns on those)."""
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        return np.array(x)
    return x


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


class SpectralModel(TransformerMixin, BaseEstimator):
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
    * ``features_x_`` (n, r): the training inputs' features, for observables given on the
      training samples (not saved to files). :class:`TransferOperator` and
      :class:`dpnets.Generator` do not store it: they keep a reference to the training
      inputs (no copy) and compute the features chunk by chunk when needed.

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

    def _use_constant_moments(self, mean: np.ndarray, cov: np.ndarray) -> bool:
        """:meth:`_use_constant` from the features' mean and (centred) covariance."""
        if self.constant == "auto":
            return not constant_in_span_moments(mean, cov)
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
        check_state_shape(x.shape[1:], self.state_shape_, type(self).__name__)
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
        f_flat = self._weigh(np.asarray(f, dtype=np.float64).reshape(f.shape[0], -1))
        coef = self._lstsq(self._training_product(f_flat)) / self.n_samples_
        # a 1-D observable (one scalar per sample) gives 1-D forecasts
        return coef, (() if np.ndim(observable) == 1 else tuple(f.shape[1:]))

    def _weigh(self, f: np.ndarray) -> np.ndarray:
        """Observable values times the sample weights of the fit (none here)."""
        return f

    def _training_feature_chunks(self) -> Iterator[np.ndarray]:
        """The training inputs' features (the basis of :meth:`transform`), chunk by chunk,
        in the order of the training samples.

        Estimators that store ``features_x_`` yield it; chunked fits (which keep a reference
        to their training inputs in ``_train_inputs``) compute it from the inputs. Model
        files hold neither, as their size must not grow with the data.
        """
        stored = vars(self).get("features_x_")
        sources = getattr(self, "_train_inputs", None)
        if stored is None and sources is None:
            raise ValueError(
                "this model was loaded from a file, which does not store the training features "
                "(n x r): refit it to use observables given on the training samples, or pass "
                "the states X explicitly; forecasts of the state itself work as they are"
            )
        if stored is not None:
            yield stored
            return
        for x in _input_chunks(sources):
            yield self.transform(x)

    def _training_features(self) -> np.ndarray:
        """The training inputs' features (n, r), all at once (see
        :meth:`_training_feature_chunks`)."""
        return np.concatenate(list(self._training_feature_chunks()))

    def _training_product(self, f: np.ndarray) -> np.ndarray:
        """``Phi_X^T f`` over the training inputs, chunk by chunk (``f``: (n_samples_, l))."""
        out, start = None, 0
        for phi in self._training_feature_chunks():
            part = phi.T @ f[start : start + phi.shape[0]]
            out = part if out is None else out + part
            start += phi.shape[0]
        if start != self.n_samples_ or out is None:
            raise ValueError(
                f"the training inputs now hold {start} samples, the model was fitted on "
                f"{self.n_samples_}: they changed since fit; refit the model"
            )
        return out

    def predict(self, X: Any, t: Any = 1, observable: Any = None) -> np.ndarray:
        """Forecast ``E[f(X_t) | X_0 = x]`` through the modal decomposition.

        ``sum_i w_i(t) (psi(x)^T r_i) (l_i^H D_f)`` with ``D_f`` the least-squares
        coefficients of the observable and ``w_i(t)`` the eigenvalue weight
        (``lambda_i^{t-1}`` for a transfer operator, Eq. 17; ``exp(lambda_i t)`` for a
        generator, App. E). If the eigenvector matrix is ill-conditioned (a defective
        estimator) or its computed left and right eigenvectors are not biorthogonal (a
        repeated eigenvalue), the matrix function is used instead.

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
        if self._modal_ok():
            phi_r = phi @ self.right_eigvecs_  # (m, r)
            lc = self.left_eigvecs_.conj().T @ coef  # (r, l)
            for s in ts:
                out.append(((phi_r * self._time_factor(s)) @ lc).real)
        else:  # defective estimator: fall back to the matrix function
            for s in ts:
                out.append(phi @ self._power(s) @ coef)
        shaped = [o.reshape(o.shape[0], *obs_shape) for o in out]
        return shaped[0] if scalar else np.stack(shaped)

    def _modal_ok(self) -> bool:
        """Whether forecasts may go through the eigen-decomposition: a well-conditioned
        eigenvector matrix whose computed left and right eigenvectors are biorthogonal
        (``L^H R = I``; not so for a (nearly) repeated eigenvalue of a non-normal
        estimator, whose eigenvectors round-off alone decides)."""
        return _modal_ok(self.left_eigvecs_, self.right_eigvecs_)

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
                "the lag of the training pairs is unknown: for pre-paired data or a Dataset, "
                "give it as the model's parameter (lag=k), so that timescales are in time units"
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
        if mean is None:
            mean = self._training_product(np.ones((self.n_samples_, 1)))[:, 0] / self.n_samples_
        norm = float(mean @ u)
        if not abs(norm) > 0:
            raise ValueError(
                "the stationary eigenvector has zero mean weight on the training data; add the "
                "constant function to the features"
            )
        if X is not None:
            return (self.transform(X) @ u) / norm
        return np.concatenate([phi @ u for phi in self._training_feature_chunks()]) / norm


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
    lag : int, optional
        Lag in frames between the paired states of trajectories. Default (None): the lag
        the feature map was trained at (a fitted DPNet's ``lag_``, or an unfitted one's
        ``lag``), else 1. A lag given here trains the copy of an unfitted feature
        estimator at this lag (so ``set_params(lag=k)`` and grid searches over ``lag``
        move the whole composite model); a fitted feature map of another lag is used with
        a warning (intended only when validating across lags). Pre-paired ``(X, Y)`` data
        and Datasets are used as they are: ``lag`` then records the lag they were paired
        at, for the timescales (None: unknown).

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
    features_x_ : ndarray (n_samples_, n_features_) or None
        The training inputs' features, computed on demand (chunk by chunk) from a reference
        to the training inputs; nothing of size ``n`` is stored on the model. None for a
        model loaded from a file.
    """

    def __init__(
        self,
        features: Any = None,
        ridge: float = 0.0,
        rtol: float | None = None,
        constant: str | bool = "auto",
        dt: float = 1.0,
        lag: int | None = None,
    ):
        self.features = features
        self.ridge = ridge
        self.rtol = rtol
        self.constant = constant
        self.dt = dt
        self.lag = lag

    # ------------------------------------------------------------------ fitting
    def _fit_features(self, data: Any, lag: int | None) -> Any:
        """The feature map to regress on: ``features``, or a trained copy of an unfitted
        dpnets estimator (the composite model)."""
        f = self.features
        if isinstance(f, BaseEstimator) and hasattr(f, "transform") and not is_fitted(f):
            f = clone(f)
            own = getattr(f, "lag", None)
            if lag is not None and own is not None and check_lag(lag) != own:
                warnings.warn(
                    f"the operator's lag={lag} overrides the lag={own} of its unfitted "
                    f"{type(f).__name__}: the features are trained at lag {lag}",
                    stacklevel=4,
                )
            if lag is not None and "lag" in f.get_params(deep=False):
                f.set_params(lag=lag)
            return f.fit(data)
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

    def fit(self, X: Any, y: Any = None, *, lag: int | None = None) -> TransferOperator:
        """Estimate the operator from ``X`` (same forms as :meth:`dpnets.DPNet.fit`).

        One pass over the pairs in chunks of :data:`dpnets.moments.FIT_CHUNK`: the features
        of each chunk are computed and their counts, means and second moments accumulated
        in float64 (:class:`dpnets.moments.Moments`), so the memory does not grow with the
        number of samples. The states are not copied: memory-mapped arrays
        (``np.load(path, mmap_mode="r")``) and HDF5 datasets (``h5py.Dataset``) are read a
        chunk at a time. ``fit`` is :meth:`partial_fit` on a fresh model.

        Parameters
        ----------
        X : array, list of arrays, tuple (X, Y), Dataset or DataLoader
            The arrays may be memory-mapped or ``h5py.Dataset`` objects.
        y : None
            Ignored (scikit-learn's target; the lag is the parameter ``lag``).
        lag : int, optional
            Deprecated: the lag is the constructor parameter ``lag``; given here it
            overrides it for this fit, with a ``FutureWarning``.

        Returns
        -------
        self

        Notes
        -----
        The model keeps a reference to its training inputs (not a copy), from which the
        features of the training samples are recomputed when an observable is given on
        them (:meth:`predict`, :meth:`modes`) or for :meth:`stationary_weights`: change
        those arrays after ``fit`` and these use the changed values.
        """
        self._fit_operator(X, fit_lag(self, lag, y))
        return self

    def _fit_operator(self, data: Any, lag: int | None) -> None:
        """:meth:`fit` at a resolved ``lag`` (subclasses build their features first)."""
        self._check_regression_params()
        features = self._fit_features(data, lag)
        pair_lag, lag_ = self._fit_lag(features, data, lag)
        self._accumulate(data, pair_lag, features, lag_, fresh=True)

    def partial_fit(self, X: Any, y: Any = None, *, lag: int | None = None) -> TransferOperator:
        """Add ``data`` to the statistics of the fit and update the operator.

        For data that arrive in pieces: each call accumulates the pairs of one piece (a
        trajectory, a list of trajectories, an ``(X, Y)`` tuple or a Dataset; pairs never
        cross pieces) and refits the operator on everything seen so far, so that
        ``partial_fit`` over pieces equals :meth:`fit` on the list of them (to
        round-off). A call on a fresh model starts the statistics; :meth:`fit` restarts
        them.

        Parameters
        ----------
        X : array, list of arrays, tuple (X, Y), Dataset or DataLoader
            One piece.
        y : None
            Ignored.
        lag : int, optional
            Deprecated, as in :meth:`fit`; every piece is paired at the lag of the first
            (``lag_``).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            If the feature map is not fixed (an unfitted :class:`dpnets.DPNet` composite,
            which only :meth:`fit` trains), if ``lag`` or the state shape differs from the
            earlier pieces, or if the model holds no statistics to add to (a model loaded
            from a file). With fewer samples than features so far, the piece is kept (the
            next pieces add to it) and a ``ValueError`` asks for more data.
        """
        self._check_regression_params()
        data = X
        lag = fit_lag(self, lag, y)
        if getattr(self, "_stats", None) is None:
            if "operator_" in vars(self):
                raise ValueError(
                    "this model holds no accumulated statistics (it was loaded from a file): "
                    "call fit, or partial_fit on a new model"
                )
            features = self._partial_features()
            pair_lag, lag_ = self._fit_lag(features, data, lag)
            self._accumulate(data, pair_lag, features, lag_, fresh=True)
            return self
        pair_lag, lag_ = resolve_lag(data, self.lag_ if lag is None else lag)
        if lag_ != self.lag_:
            raise ValueError(
                f"lag={lag_} differs from the lag of the pieces already fitted (lag_="
                f"{self.lag_}): pair every piece at the same lag"
            )
        self._accumulate(data, pair_lag, self.features_, lag_, fresh=False)
        return self

    def _partial_features(self) -> Any:
        """The fixed feature map a fresh :meth:`partial_fit` accumulates on."""
        f = self.features
        if isinstance(f, BaseEstimator) and hasattr(f, "transform") and not is_fitted(f):
            raise ValueError(
                f"partial_fit needs a fixed feature map, but features is an unfitted "
                f"{type(f).__name__}: fit it first (features.fit(data)), or call fit, which "
                "trains a copy of it on the data"
            )
        return f

    #: blocks of the accumulated moments: features of X ("x") and Y ("y"), the Y states ("t")
    _PRODUCTS = (("x", "x"), ("x", "y"), ("y", "y"), ("x", "t"))

    def _accumulate(self, data: Any, pair_lag: int, features: Any, lag_: Any, fresh: bool) -> None:
        """Add the pairs of ``data`` to the statistics (new ones when ``fresh``), then refit.

        The statistics change only once the whole piece has been read, so a piece that
        fails (bad values, a feature map error) leaves the model as it was.
        """
        stats = Moments(self._PRODUCTS) if fresh else copy.deepcopy(self._stats)
        fmap = as_feature_map(features)
        if is_streaming(data):
            loader, shape = self._stream(data, fmap, stats)
            new_inputs: list = [loader]
        else:
            new_inputs = pair_segments(data, pair_lag)
            shape = new_inputs[0].state_shape
            self._check_piece_shape(shape, fresh)
            for seg in new_inputs:
                for x, y in seg.chunks(FIT_CHUNK):
                    self._add_chunk(stats, fmap, x, y)
        self._check_piece_shape(shape, fresh)
        sources = new_inputs if fresh else [*self._train_inputs, *new_inputs]
        self.features_, self.lag_ = features, lag_
        self._stats, self._train_inputs = stats, sources
        self.state_shape_ = tuple(shape)
        self._finish()

    def _check_piece_shape(self, shape: tuple[int, ...], fresh: bool) -> None:
        if not fresh:
            check_state_shape(shape, self.state_shape_, type(self).__name__)

    @staticmethod
    def _add_chunk(stats: Moments, fmap: FeatureMap, x: np.ndarray, y: np.ndarray) -> None:
        """Accumulate the features of one chunk of pairs and the ``Y`` states."""
        phi_x, phi_y = fmap(x), fmap(y)
        if phi_y.shape != phi_x.shape:
            raise ValueError(f"features of X and Y differ in shape: {phi_x.shape}, {phi_y.shape}")
        stats.update({"x": phi_x, "y": phi_y, "t": np.reshape(y, (y.shape[0], -1))})

    def _finish(self) -> None:
        """The operator and every fitted array from the accumulated moments.

        With the constant the basis is ``[1, (psi - mean) / std]``: its moments are those
        of the centred features (covariances) scaled by the standard deviations, so no
        offset of the features cancels. Without it, the uncentred moments of ``psi``.
        """
        m: Moments = self._stats
        n = m.count
        mx, my = m.mean("x"), m.mean("y")
        cov_x = m.cov("x", "x")
        self.constant_ = self._use_constant_moments(mx, cov_x)
        k = mx.shape[0]
        r = k + int(self.constant_)
        if n < r:
            raise ValueError(f"fewer samples ({n}) than features (r={r}); provide more data")
        shift, scale = np.zeros(k), np.ones(k)
        self.feature_shift_ = self.feature_scale_ = None
        if self.constant_:
            sd = np.sqrt(np.maximum(np.diag(cov_x), 0.0))
            # a feature constant on the data (up to the round-off of its values) is left
            # unscaled: it then vanishes once centred, and the pseudo-inverse drops it
            flat = sd <= 64.0 * np.finfo(np.float64).eps * np.abs(mx)
            shift, scale = mx, np.where((sd > 0) & ~flat, sd, 1.0)
            self.feature_shift_, self.feature_scale_ = shift, scale
        ss = np.outer(scale, scale)
        ex, ey = (mx - shift) / scale, (my - shift) / scale
        cx = m.second("x", "x", shift, shift) / ss
        cxy = m.second("x", "y", shift, shift) / ss
        cy = m.second("y", "y", shift, shift) / ss
        xt = m.second("x", "t", shift, 0.0) / scale[:, None]
        if self.constant_:
            cx, cy = _with_constant(cx, ex, ex), _with_constant(cy, ey, ey)
            cxy = _with_constant(cxy, ex, ey)
            xt = np.vstack([m.mean("t")[None, :], xt])
            ex, ey = np.concatenate([[1.0], ex]), np.concatenate([[1.0], ey])
        self._regress(cx, cxy)
        self.cxy_ = cxy
        self.n_samples_, self.n_features_ = n, r
        self.features_mean_ = ex
        # moments of the lagged side, for the VAMP-E score of held-out data
        self.cy_ = cy
        self.features_mean_y_ = ey
        # least-squares coefficients of the state at time lag on psi(X_0) (App. D.2)
        self.state_coef_ = self._lstsq(xt)
        self._set_spectrum()

    def _stream(self, data: Any, fmap: FeatureMap, stats: Moments) -> tuple[DataLoader, tuple]:
        """Accumulate a Dataset/DataLoader of pairs batch by batch; the states are never held
        in memory together. Returns the loader (the training inputs) and the state shape."""
        loader = data if isinstance(data, DataLoader) else DataLoader(data, batch_size=8192)
        shape = None
        for xb, yb in loader:
            xb = check_states(xb, "X batch")
            yb = check_states(yb, "Y batch")
            self._add_chunk(stats, fmap, xb, yb)
            shape = tuple(yb.shape[1:])
        if shape is None:
            raise ValueError("the Dataset/DataLoader yielded no samples")
        return loader, shape

    features_x_ = property(
        lambda self: features_on_demand(self),
        doc="The training inputs' features in the basis of :meth:`transform`, float64 "
        "(n, r), computed on demand from the training inputs (they are not stored; None "
        "for a model loaded from a file).",
    )


def features_on_demand(model: SpectralModel) -> np.ndarray | None:
    """``features_x_`` of a chunked fit (:class:`TransferOperator`, :class:`dpnets.Generator`):
    the training inputs' features computed from the reference to those inputs the fit
    keeps, or None (a model loaded from a file)."""
    if getattr(model, "_train_inputs", None) is None:
        return None
    return model._training_features()


def _modal_ok(left: np.ndarray, right: np.ndarray) -> bool:
    """See :meth:`SpectralModel._modal_ok` (``O(r^3)``; cached per eigenvector pair, so
    :meth:`SpectralModel.predict` changes nothing on the estimator)."""
    key = (id(left), id(right))
    hit = _MODAL_CACHE.get(key)
    if hit is not None and hit[0] is left and hit[1] is right:
        return hit[2]
    ok = bool(np.linalg.cond(right) < 1e8)
    if ok:
        gram = left.conj().T @ right
        ok = bool(np.abs(gram - np.eye(gram.shape[0])).max() < 1e-6)
    if len(_MODAL_CACHE) >= 16:
        _MODAL_CACHE.pop(next(iter(_MODAL_CACHE)))
    _MODAL_CACHE[key] = (left, right, ok)
    return ok


#: ``(id(L), id(R)) -> (L, R, modal ok)`` for the last few spectra (holding the arrays keeps
#: their ids unique while cached)
_MODAL_CACHE: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, bool]] = {}


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
    # the training features and inputs are not in files (their size must not grow with the
    # data); chunked fits compute ``features_x_`` (a property) from their inputs instead
    if not isinstance(getattr(type(model), "features_x_", None), property):
        model.features_x_ = None
    model._train_inputs = model._stats = None
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
        value = vars(model).get(name)  # stored arrays only (no on-demand features_x_)
        if value is not None and tuple(np.shape(value)) != shape:
            raise InvalidModelFile(
                f"{name} has shape {tuple(np.shape(value))}, expected {shape} for "
                f"n_features_={r}, n_samples_={n}"
            )


register("TransferOperator", TransferOperator, dump_operator, restore_operator)
__all__ += [
    "features_on_demand",
    "dump_operator",
    "restore_operator",
    "restore_fitted_operator",
    "check_fitted_arrays",
    "dump_fitted_scalars",
    "dump_feature_map",
    "restore_feature_map",
]
