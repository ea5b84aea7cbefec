"""The model contract: what every estimator of a transfer operator or generator offers.

:class:`SpectralModel` is the contract (paper Sec. 4, App. D-E): a feature map, the
least-squares operator on it and its eigen-decomposition (Eq. 16), eigenfunctions,
forecasts through the modal decomposition (Eq. 17), scores, persistence; the fitted state
it names and the hooks its implementations override are declared on it.
:class:`DiscreteTimeModel` adds what a transfer operator at a lag has (modes, implied
timescales, equilibrium reweighting). The implementations are
:class:`dpnets.TransferOperator` (:mod:`dpnets.operators`), :class:`dpnets.Generator`
(:mod:`dpnets.generator`) and the baselines (:mod:`dpnets.baselines`). This module also
holds what they share: feature maps (:func:`as_feature_map`), the constant function
(:func:`constant_in_span`, :func:`prepend_ones`), timescales and the saved form of the
contract's fitted state.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, SequentialSampler

from dpnets.base import BaseEstimator, TransformerMixin, clone
from dpnets.diagnostics import (
    ABOVE_ONE_TOL,
    Diagnostic,
    range_diagnostics,
    spectrum_diagnostics,
)
from dpnets.diagnostics import warn as warn_diagnostics
from dpnets.exceptions import check_is_fitted
from dpnets.heldout import HELDOUT_KINDS, basis_score, heldout_pairs
from dpnets.io import (
    InvalidModelFile,
    dump_features,
    restore_features,
    tensors_to_arrays,
    write_model,
)
from dpnets.linalg import eig_biorthogonal, sym_matrix_function
from dpnets.moments import FIT_CHUNK
from dpnets.nn.utils import encode
from dpnets.pairs import PairSegment, check_lag
from dpnets.params import Constraint, check_choice, check_real, one_of, real, satisfies
from dpnets.states import check_frames, check_state_shape, check_states, to_numpy

__all__ = [
    "SpectralModel",
    "DiscreteTimeModel",
    "FeatureMap",
    "StateAndFeatures",
    "without_state",
    "as_feature_map",
    "constant_in_span",
    "constant_in_span_moments",
    "prepend_ones",
    "timescales_from_eigvals",
    "horizon_steps",
    "HORIZON_UNITS",
    "modal_forecast",
    "stationary_coef",
    "STATIONARY_TOL",
    "features_on_demand",
    "dump_fitted_scalars",
    "dump_feature_map",
    "restore_feature_map",
    "restore_fitted_state",
    "check_fitted_arrays",
    "OPTIONAL_ARRAYS",
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


class StateAndFeatures:
    """The feature map ``x -> [x (flattened), psi(x)]``: the state appended to features
    ``psi`` (``TransferOperator(..., append_state=True)``).

    Learned features need not span the state, so an operator on ``psi`` alone may forecast
    the state worse than persistence (the forecasting tutorial shows it on Lorenz-63). With
    the state in the basis the regression contains DMD, and the learned features add to it.
    """

    def __init__(self, features: Any) -> None:
        self.features = features

    def __call__(self, x: Any) -> np.ndarray:
        x = np.asarray(to_numpy(x))
        phi = as_feature_map(self.features)(x)
        return np.concatenate([np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1), phi], 1)

    def __repr__(self) -> str:
        return f"StateAndFeatures({self.features!r})"


def without_state(features: Any) -> Any:
    """The inner feature map of a :class:`StateAndFeatures` (``features`` otherwise)."""
    return features.features if isinstance(features, StateAndFeatures) else features


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


def prepend_ones(phi: np.ndarray) -> np.ndarray:
    """``[1, phi]``: the constant function as the first column of features ``phi`` (n, r),
    float64."""
    phi = np.asarray(phi, dtype=np.float64)
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


#: the constraints of the regression parameters (:mod:`dpnets.params`), shared by the
#: ``_parameter_constraints`` tables of the models that have them
#: (:func:`regression_constraints`)
REGRESSION_CONSTRAINTS: dict[str, Constraint] = {
    "ridge": real(0.0),
    "rtol": real(0.0, 1.0, low_open=True, high_open=True, none=True),
    "dt": real(0.0, low_open=True, none=True),
    "constant": one_of("auto", True, False),
    "lag": satisfies(check_lag, none=True),
}


def regression_constraints(*names: str) -> dict[str, Constraint]:
    """The entries ``names`` of :data:`REGRESSION_CONSTRAINTS`, for a model's table:
    ``{**regression_constraints("ridge", "rtol", "dt"), ...}``."""
    return {name: REGRESSION_CONSTRAINTS[name] for name in names}


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
    * ``state_min_``, ``state_max_`` (d,): the range of each (flattened) state coordinate
      over the training pairs, where the estimator records it (saved); :meth:`predict`
      warns (:class:`dpnets.diagnostics.DiagnosticWarning`) on inputs outside it;
    * ``features_x_`` (n, r): the training inputs' features, for observables given on the
      training samples (not saved to files). :class:`TransferOperator` and
      :class:`dpnets.Generator` do not store it: they keep a reference to the training
      inputs (no copy) and compute the features chunk by chunk when needed.

    Least squares: the coefficients of an observable are ``(Cx + ridge I)^+ Phi_X^T F / n``,
    computed by :meth:`solve_lstsq` from ``cx_pinv_`` (:func:`dpnets.estimation.regress`).
    An estimator whose basis is orthonormal by construction (kernel regression, whitened
    features) overrides :meth:`solve_lstsq` instead. Subclasses implement :meth:`_time_factor` (the
    eigenvalue weight of a forecast ``t`` steps or time units ahead), :meth:`_power` (its
    matrix counterpart, used when the eigenvector matrix is ill-conditioned) and
    :meth:`implied_timescales`.
    """

    # -- parameters every implementation has (constructor arguments)
    features: Any
    ridge: float
    rtol: float | None

    # -- the fitted state named above (set by ``fit`` or restored from a file)
    features_: Any
    operator_: np.ndarray
    cx_: np.ndarray
    cx_pinv_: np.ndarray
    cx_rank_: int
    eigvals_: np.ndarray
    left_eigvecs_: np.ndarray
    right_eigvecs_: np.ndarray
    state_coef_: np.ndarray
    n_samples_: int
    n_features_: int
    state_shape_: tuple[int, ...]
    lag_: int | None
    constant_: bool
    state_min_: np.ndarray | None = None
    state_max_: np.ndarray | None = None

    # -- private state of the chunked fits (TransferOperator, Generator): the accumulated
    # statistics that partial_fit adds to, and references to the training inputs from which
    # features_x_ is computed on demand; None for a model loaded from a file
    _stats: Any = None
    _train_inputs: list | None = None

    @property
    def holds_training_data(self) -> bool:
        """Whether observables given on the training samples can be used (:meth:`predict`,
        :meth:`modes` with ``observable=``): False for a model loaded from a file, which
        stores no n-sized training data."""
        if self._train_inputs is not None:
            return True
        return vars(self).get("features_x_") is not None

    def _set_spectrum(self) -> None:
        self.eigvals_, self.left_eigvecs_, self.right_eigvecs_ = eig_biorthogonal(
            self.operator_, metric=self.cx_
        )

    def check_regression_params(self) -> None:
        """Deprecated: the regression parameters are entries of the class's
        ``_parameter_constraints`` table; call ``_check_params()``, which checks them all."""
        warnings.warn(
            "check_regression_params() is deprecated: the regression parameters are in the "
            "class's _parameter_constraints table, which _check_params() checks",
            FutureWarning,
            stacklevel=2,
        )
        self._check_params()

    def solve_lstsq(self, rhs: np.ndarray) -> np.ndarray:
        """``(Cx + ridge I)^+ rhs``: least-squares coefficients from ``rhs = Phi_X^T F`` (/ n)."""
        return self.cx_pinv_ @ rhs

    # -- hooks the implementations override
    def _time_factor(self, t: float) -> np.ndarray:  # pragma: no cover - abstract
        """The eigenvalue weights of a forecast ``t`` ahead (``lambda^(t-1)`` or
        ``exp(lambda t)``)."""
        raise NotImplementedError

    def _power(self, t: float) -> np.ndarray:  # pragma: no cover - abstract
        """The matrix counterpart of :meth:`_time_factor` (defective estimators)."""
        raise NotImplementedError

    def implied_timescales(self, dt: float | None = None) -> np.ndarray:  # pragma: no cover
        """Implied timescales of the eigenvalues, in time units."""
        raise NotImplementedError

    def _check_time(self, t: Any, unit: str = "steps") -> float:
        """The horizon ``t`` (in ``unit``) as a whole number of lag steps, or a one-line
        ``ValueError`` naming the horizons this model can forecast (:meth:`predict`)."""
        return horizon_steps(t, unit, getattr(self, "lag_", None), getattr(self, "dt", None))

    # -- shared
    #: whether ``eigvals_`` are a generator's (stable for real parts at most 0)
    _generator_spectrum = False
    #: where the values of an observable given to :meth:`predict` are taken
    _observable_values = "its value at each training sample"

    def diagnostics(self, units: str | None = None) -> list[Diagnostic]:
        """What makes this fit untrustworthy, each with its remedy
        (:mod:`dpnets.diagnostics`): first those of learned features' own training (a
        :class:`dpnets.DPNet`'s or VAMPNet's ``diagnostics()``, e.g. not converged), then
        eigenvalues of modulus above 1 (a generator's: of positive real part), complex slow
        modes (a note), timescales longer than all the training trajectories together; a
        :class:`dpnets.TransferOperator` also checks for no process resolved at the lag,
        too few pairs per basis function and a rank-deficient basis. ``fit`` warns with
        those that warn (:class:`dpnets.diagnostics.DiagnosticWarning`; the features'
        when they are trained).

        Parameters
        ----------
        units : str, optional
            The name of the time unit of ``dt`` in the messages (default: "frames" for
            ``dt = 1``, else "time units").

        Returns
        -------
        list of Diagnostic
        """
        check_is_fitted(self, "operator_")
        features = self.features_
        if isinstance(features, StateAndFeatures):  # the learned map inside
            features = features.features
        learned = getattr(features, "diagnostics", None)
        return (list(learned()) if callable(learned) else []) + self._diagnostics(units=units)

    def _basis_mean(self) -> np.ndarray | None:
        """The mean of the regression basis on the training inputs (``features_mean_``;
        with the constant function first, the first column of ``cx_``), None if unknown."""
        mean = getattr(self, "features_mean_", None)
        if mean is None and getattr(self, "constant_", False):
            mean = self.cx_[:, 0]
        return mean

    def _diagnostics(
        self, n_samples: int | None = None, units: str | None = None
    ) -> list[Diagnostic]:
        # the constant function's eigenvalue is the first wherever the basis spans it
        cosine = constant_cosines(self.right_eigvecs_[:, :1], self.cx_, self._basis_mean())
        dt = float(getattr(self, "dt", 1.0) or 1.0)
        lag_time = None if self.lag_ is None else self.lag_ * dt
        span = _total_frames(self._train_inputs)
        return spectrum_diagnostics(
            self.eigvals_,
            constant=bool(cosine.size and cosine[0] >= CONSTANT_COSINE),
            n_samples=n_samples,
            lag_time=lag_time,
            span=None if span is None else span * dt,
            units=units or ("frames" if dt == 1.0 else "time units"),
            generator=self._generator_spectrum,
            params=self.get_params(deep=False),
        )

    def eig(self, vectors: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Eigenvalues of the estimator (Eq. 16): the constant function's first (``k = 0``)
        when the basis holds it, then by decreasing modulus.

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
        """Features used by the estimator at ``X``, float64 (n, n_features_); a list of
        trajectories gives the features of their frames, in order.

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
        return prepend_ones(phi)

    def _check_X(self, X: Any) -> np.ndarray:
        x = check_frames(X, "X")  # a list of trajectories: their frames, in order
        want = tuple(self.state_shape_)
        if getattr(X, "ndim", None) == 1 and len(want) == 1 and want != (1,) and len(X) == want[0]:
            # one state given as a 1-D vector (x[-1], the last frame) reads as a column of
            # scalar states: scikit-learn's wording, then what was meant
            raise ValueError(
                f"X has 1 features, but {type(self).__name__} is expecting {want[0]} features "
                f"as input: a 1-D X is {len(X)} states of 1 feature each; give one state of "
                f"shape ({want[0]},) as a row, x[None] (X[-1:] for the last frame)"
            )
        check_state_shape(x.shape[1:], want, type(self).__name__)
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
                f"{self._observable_values}; got {f.shape[0]} rows"
            )
        f_flat = self._weigh(np.asarray(f, dtype=np.float64).reshape(f.shape[0], -1))
        coef = self.solve_lstsq(self._training_product(f_flat)) / self.n_samples_
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

    def predict(
        self, X: Any, t: Any = 1, observable: Any = None, unit: str = "steps"
    ) -> np.ndarray:
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
            Initial states (one state as a row: ``x[None]``, ``X[-1:]`` for the last frame;
            a 1-D ``X`` is ``m`` states of one coordinate).
        t : scalar or sequence
            Forecast horizon(s), in ``unit``; ``t=0`` returns the input states (a
            transfer operator refuses ``t=0`` with an ``observable``, whose values it holds
            one lag ahead; a generator gives the observable's least-squares value).
        observable : array (n_samples_, ...), optional
            Observable values on the training samples. For a transfer operator, at the
            *lagged* state of each training pair: ``f(x[lag:])`` for one trajectory ``x``
            (``f(x[:-lag])`` would forecast one lag behind), those of each trajectory
            concatenated for a list, ``f(Y)`` for pairs ``(X, Y)``; for a generator, at
            each training sample. Default: the state itself.
        unit : {"steps", "frames", "time"}, default "steps"
            ``"steps"``: whole lag steps of the model (``lag_`` frames each, kooplearn's
            ``t``); ``"frames"``: frames of the data, a multiple of ``lag_``; ``"time"``:
            time in the units of ``dt``, a multiple of ``lag_ * dt``. Any other horizon is
            refused in one line naming the ones that work (a transfer operator forecasts
            in whole steps of its lag; refit at a lag that divides the horizon).
            :class:`dpnets.Generator` forecasts at any real time ``t >= 0``.

        Returns
        -------
        ndarray
            ``(m, *obs_shape)`` for a scalar ``t``; ``(len(t), m, *obs_shape)`` otherwise.
        """
        check_is_fitted(self, "operator_")
        scalar = np.ndim(t) == 0
        ts = [self._check_time(s, unit) for s in ([t] if scalar else list(t))]
        if not ts:
            raise ValueError("t is empty: give a horizon or a non-empty sequence of horizons")
        # a generator's observable coefficients are equal-time (App. E): at t = 0 the
        # model's least-squares value of the observable; a transfer operator's hold one lag
        equal_time = observable is not None and self._generator_spectrum
        if observable is not None and not equal_time and any(s == 0 for s in ts):
            raise ValueError(
                "t=0 with an observable: its values at the input states are not the model's; "
                "forecast from t=1 step on (t=0 returns the input states themselves)"
            )
        coef, obs_shape = self._observable_coef(observable)
        ahead = [s for s in ts if s != 0 or equal_time]
        if ahead:
            self._warn_out_of_range(X)
        out = iter(self.modal_forecast(self.transform(X), coef, ahead) if ahead else [])
        x = None if len(ahead) == len(ts) else self._check_X(X).astype(np.float64)
        shaped = [
            x.reshape(x.shape[0], *obs_shape)
            if s == 0 and not equal_time
            else (o := next(out)).reshape(o.shape[0], *obs_shape)
            for s in ts
        ]
        return shaped[0] if scalar else np.stack(shaped)

    def _warn_out_of_range(self, X: Any) -> None:
        """Warn (:class:`dpnets.diagnostics.DiagnosticWarning`) when forecasts start from
        states outside the training data's range (``state_min_``, ``state_max_``; models
        that do not record it are not checked)."""
        low, high = getattr(self, "state_min_", None), getattr(self, "state_max_", None)
        if low is None or high is None:
            return
        warn_diagnostics(range_diagnostics(self._check_X(X), low, high))

    def modal_forecast(self, phi: np.ndarray, coef: np.ndarray, ts: list) -> list[np.ndarray]:
        """:meth:`predict` from the basis values ``phi`` (m, r) and the coefficients ``coef``
        (r, l) of the observable, one (m, l) array per horizon in ``ts``. Linear in the rows
        of ``phi``, so a weighted sum of rows forecasts the weighted sum of the forecasts
        (the Chapman-Kolmogorov sums of :mod:`dpnets.validation`); see :func:`modal_forecast`."""
        return modal_forecast(
            phi, coef, ts, self.left_eigvecs_, self.right_eigvecs_, self._time_factor, self._power
        )

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
        dimensions. Computed by :func:`dpnets.heldout.heldout_score`, the held-out score of
        every estimator (and of :func:`dpnets.validation.cross_validate`).
        """
        check_is_fitted(self, "operator_")
        check_choice("kind", kind, HELDOUT_KINDS)
        lag = self.lag_ if lag is None else lag
        if lag is None:
            raise ValueError("the model's lag is unknown: pass score(X, lag=k)")
        p = heldout_pairs(X, lag)
        training, rtol = None, None
        if kind == "vampE":
            training = tuple(
                getattr(self, name, None)
                for name in ("cx_", "cxy_", "cy_", "features_mean_", "features_mean_y_")
            )
            if any(t is None for t in training):
                raise ValueError(
                    "VAMP-E needs the training covariances of the lagged features (cy_), "
                    f"which this {type(self).__name__} does not hold: refit it"
                )
            rtol = self.rtol
        return basis_score(
            self.transform(p.X),
            self.transform(p.Y),
            kind,
            constant=bool(getattr(self, "constant_", False)),
            training=training,
            rtol=rtol,
        )

    def save(self, path: str) -> None:
        """Save to ``path`` atomically (see :func:`dpnets.load`; :func:`dpnets.io.save` says
        when loading needs a custom feature map back)."""
        write_model(self, path)


class DiscreteTimeModel(SpectralModel):
    """A :class:`SpectralModel` of a transfer operator at the lag ``lag_``: forecasts in whole
    lag steps (Eq. 17), Koopman modes, implied timescales and equilibrium reweighting.

    Subclasses regress ``operator_`` so that the state's coefficients ``state_coef_`` are
    those of ``X_{t + lag}`` on ``psi(X_t)`` (so ``t`` steps use ``T^{t-1}``); observables
    passed to :meth:`predict` hold values at the lagged states of the training pairs.
    """

    _observable_values = (
        "its value at the lagged state of each training pair: f(x[lag:]) for a trajectory "
        "x (not f(x[:-lag]), one lag behind), those of each trajectory concatenated for a "
        "list, f(Y) for pairs (X, Y)"
    )

    def _time_factor(self, t: float) -> np.ndarray:
        return self.eigvals_ ** (int(t) - 1)

    def _power(self, t: float) -> np.ndarray:
        return np.linalg.matrix_power(self.operator_, int(t) - 1)

    def modes(self, observable: Any = None) -> np.ndarray:
        """Koopman modes ``m_i = l_i^H D_f / lambda_i`` (App. D.3), complex ``(r, *obs_shape)``.

        With them ``E[f(X_t) | X_0 = x] ~ sum_i lambda_i^t phi_i(x) m_i`` where ``phi_i`` are the
        right eigenfunctions. Modes of (numerically) zero eigenvalues are set to 0.

        Parameters
        ----------
        observable : array (n_samples_, ...), optional
            The observable's values at the lagged state of each training pair, as for
            :meth:`predict` (``f(x[lag:])`` for one trajectory). Default: the state itself.
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
            ``|lambda|`` within ``1e-10`` below to ``1e-6`` above 1), ``nan`` for an
            eigenvalue of modulus above that (a growing mode: the fit warns,
            :mod:`dpnets.diagnostics`), ``0`` for ``lambda = 0``.

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
        X : array or list of arrays, optional
            States to weigh (a list of trajectories: their frames, in order; default: the
            training inputs).

        Returns
        -------
        ndarray (n,)
            Weights, normalised to mean 1 over the training inputs.
        """
        check_is_fitted(self, "operator_")
        u = self.stationary_coef()
        if X is not None:
            return self.transform(X) @ u
        return np.concatenate([phi @ u for phi in self._training_feature_chunks()])

    def stationary_coef(self) -> np.ndarray:
        """``u`` with ``stationary_weights(X) = transform(X) @ u`` (see there), normalised to
        mean weight 1 over the training inputs (:func:`stationary_coef`)."""
        mean = getattr(self, "features_mean_", None)
        if mean is None:
            mean = self._training_product(np.ones((self.n_samples_, 1)))[:, 0] / self.n_samples_
        return stationary_coef(self.eigvals_, self.left_eigvecs_, self.solve_lstsq, mean)


def modal_forecast(
    phi: np.ndarray,
    coef: np.ndarray,
    ts: list,
    left: np.ndarray,
    right: np.ndarray,
    time_factor: Callable[[Any], np.ndarray],
    power: Callable[[Any], np.ndarray],
) -> list[np.ndarray]:
    """Forecasts ``sum_i w_i(t) (phi^T r_i) (l_i^H coef)`` for each horizon ``t`` in ``ts``
    (Eq. 17; ``time_factor(t)``: the eigenvalue weights), or ``phi @ power(t) @ coef`` (the
    matrix function) when the eigenvector matrix is ill-conditioned or its left and right
    eigenvectors are not biorthogonal. One (m, l) array per horizon."""
    out = []
    if _modal_ok(left, right):
        phi_r = phi @ right  # (m, r)
        lc = left.conj().T @ coef  # (r, l)
        for s in ts:
            out.append(((phi_r * time_factor(s)) @ lc).real)
    else:  # defective estimator: fall back to the matrix function
        for s in ts:
            out.append(phi @ power(s) @ coef)
    return out


def stationary_coef(
    eigvals: np.ndarray,
    left: np.ndarray,
    solve_lstsq: Callable[[np.ndarray], np.ndarray],
    mean: np.ndarray,
) -> np.ndarray:
    """Coefficients ``u = Cx^+ v`` of the Koopman weights ``w(x) = b(x)^T u``, ``v`` the left
    eigenvector of the eigenvalue closest to 1 (see
    :meth:`DiscreteTimeModel.stationary_weights`), normalised to mean weight 1 under the
    training inputs' basis mean ``mean``."""
    k = int(np.argmin(np.abs(eigvals - 1.0)))
    u = np.real(solve_lstsq(np.conj(left[:, k])))
    norm = float(mean @ u)
    if not abs(norm) > 0:
        raise ValueError(
            "the stationary eigenvector has zero mean weight on the training data; add the "
            "constant function to the features"
        )
    return u / norm


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


#: the least cosine (in the ``cx`` metric) between an eigenvector and the constant function
#: for it to count as the constant function's
CONSTANT_COSINE = 0.99


#: an eigenvector ``r`` with ``r^H cx r`` at most this times ``|cx| |r|^2`` lies in the null
#: space of the covariance (a function that vanishes on the data)
_NULL_RTOL = 1e-10


def constant_cosines(right: np.ndarray, cx: np.ndarray, mean: np.ndarray | None) -> np.ndarray:
    """The cosine, in the ``cx`` metric, between each right eigenvector (columns of
    ``right``) and the constant function, whose coefficients ``c = cx^+ mean`` are the least
    squares of 1 on the basis (``mean``: the basis' mean on the training inputs); zeros when
    the basis does not span the constant (``1 - c . mean``, its squared residual, above
    ``1e-6``) or ``mean`` is None."""
    if mean is None or right.size == 0:
        return np.zeros(right.shape[1] if right.ndim == 2 else 0)
    mean = np.asarray(mean, dtype=np.float64)
    pinv, _ = sym_matrix_function(cx, -1.0, None)
    explained = float(mean @ pinv @ mean)  # |c|^2 in the cx metric: 1 if spanned
    if not abs(1.0 - explained) <= 1e-6:
        return np.zeros(right.shape[1])
    norms = np.sqrt(np.abs(np.einsum("ij,ij->j", np.conj(right), cx @ right)))
    # an eigenvector in cx's null space (a function that is zero on the data: collinear
    # features, a constant coordinate in a dictionary) has a norm and a mean of round-off
    # size whose ratio means nothing: it is not the constant function
    floor = np.sqrt(_NULL_RTOL * np.linalg.norm(cx, 2)) * np.linalg.norm(right, axis=0)
    return np.abs(mean @ right) / np.where(norms > floor, norms, np.inf) / np.sqrt(explained)


def _total_frames(sources: list | None) -> float | None:
    """The frames of all training trajectories together (pairs of one trajectory: the
    states they index; a biased one's rescaled length, ``span``), None where the inputs are
    pre-paired or unknown."""
    lengths = [
        getattr(seg, "span", int(seg.x_states.shape[0]))
        for seg in sources or ()
        if getattr(seg, "x_states", None) is not None and seg.x_states is seg.y_states
    ]
    return sum(lengths) if lengths else None


#: the units of a forecast horizon (:meth:`SpectralModel.predict`)
HORIZON_UNITS = ("steps", "frames", "time")


def horizon_steps(t: Any, unit: str, lag: int | None, dt: float | None) -> int:
    """A forecast horizon ``t`` in ``unit`` (:data:`HORIZON_UNITS`) as a whole number of
    lag steps (>= 0) of a model of lag ``lag`` frames and ``dt`` time per frame; anything
    else is a one-line ``ValueError`` naming the horizons that work."""
    check_choice("unit", unit, HORIZON_UNITS)
    real = isinstance(t, (int, float, np.integer, np.floating)) and not isinstance(t, bool)
    if not real or not np.isfinite(t) or t < 0:
        raise ValueError(f"t must be a finite number >= 0 (a forecast horizon), got {t!r}")
    if unit == "steps":
        if float(t) != int(t):
            raise ValueError(
                f"t={t!r} is not a whole number of lag steps: a transfer operator forecasts "
                "in steps of its lag; give t in frames (unit='frames') or in time "
                "(unit='time'), a multiple of the lag"
            )
        return int(t)
    if lag is None:
        raise ValueError(
            "the model's lag is unknown (pre-paired data fitted without lag=): give t in "
            "lag steps (unit='steps'), or the lag as the model's parameter"
        )
    step = float(lag) if unit == "frames" else float(lag) * float(1.0 if dt is None else dt)
    k = round(float(t) / step)
    if abs(float(t) - k * step) > 1e-9 * max(1.0, abs(float(t))):
        what = "frames" if unit == "frames" else "time units"
        raise ValueError(
            f"t={t!r} {what} is not a multiple of the model's lag ({step:g} {what}): it "
            f"forecasts at 0, {step:g}, {2 * step:g}, ...; refit at a lag that divides t"
        )
    return int(k)


def timescales_from_eigvals(eigvals: np.ndarray, lag_time: float) -> np.ndarray:
    """``-lag_time / ln|lambda|``; ``inf`` where ``|1 - |lambda|| <= STATIONARY_TOL`` (within
    :data:`dpnets.diagnostics.ABOVE_ONE_TOL` above 1: round-off of the stationary
    eigenvalue), ``nan`` above that (a growing mode relaxes on no timescale)."""
    mod = np.abs(np.asarray(eigvals))
    out = np.full(mod.shape, np.inf)
    ok = mod < 1.0 - STATIONARY_TOL
    with np.errstate(divide="ignore"):
        out[ok] = -float(lag_time) / np.log(mod[ok])
    out[mod > 1.0 + ABOVE_ONE_TOL] = np.nan
    return out


#: arrays that only some models (or files written since they were added) hold
OPTIONAL_ARRAYS = (
    "features_mean_",
    "feature_shift_",
    "feature_scale_",
    "cy_",
    "features_mean_y_",
    "state_min_",
    "state_max_",
)


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
    fitted = without_state(model.features_)  # the state is the parameter append_state
    return {
        "features": dump_features(fitted, tensors),
        "features_trained": fitted is not getattr(model, "features", fitted),
    }


def restore_feature_map(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> tuple:
    """``(features, features_)`` from :func:`dump_feature_map`'s output."""
    fitted = restore_features(cfg["features"], tensors, **kw)
    return (clone(fitted) if cfg.get("features_trained") else fitted), fitted


def restore_fitted_state(model: Any, fitted: dict, tensors: dict[str, torch.Tensor]) -> None:
    """Set the fitted scalars of :func:`dump_fitted_scalars` and the optional arrays, check
    them against the arrays and recompute the spectrum."""
    tensors_to_arrays(model, tensors, (), OPTIONAL_ARRAYS)
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
    shapes.update({"state_min_": (d,), "state_max_": (d,)})
    for name, shape in shapes.items():
        value = vars(model).get(name)  # stored arrays only (no on-demand features_x_)
        if value is not None and tuple(np.shape(value)) != shape:
            raise InvalidModelFile(
                f"{name} has shape {tuple(np.shape(value))}, expected {shape} for "
                f"n_features_={r}, n_samples_={n}"
            )
