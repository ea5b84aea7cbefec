"""Operator regression on a feature map and the downstream tasks (paper Sec. 4, App. D).

:class:`TransferOperator` fits the least-squares estimator ``T = (Cx + ridge I)^+ Cxy`` on
features ``psi`` (Eq. 15 and App. D.2) and offers its eigen-decomposition (Eq. 16),
eigenfunctions, multi-step forecasts through the modal decomposition (Eq. 17 and App. D.3),
Koopman modes and implied timescales. With ``reversible=True`` (or ``"reweight"``, Koopman
reweighting of off-equilibrium data first) it fits the reversible estimator on symmetrised
covariances instead, whose spectrum is real (TICA on the same features).

The class holds what is the estimator's (its parameters, fitted state and hooks of the
model contract); the mechanics are functions beside it: the pairs of the data into float64
moments chunk by chunk (:func:`add_pairs`, :func:`pair_moments`, which the bootstrap of
:mod:`dpnets.resampling` uses too), and the checks of a fit's arguments.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import DataLoader

from dpnets import diagnostics
from dpnets.base import BaseEstimator, clone, fit_data, is_fitted
from dpnets.biased import RescaledSegment, rescaled_segments, weighted_chunks
from dpnets.diagnostics import Diagnostic
from dpnets.estimation import (
    REVERSIBLE_CHOICES,
    estimate_operator,
    operator_products,
    operator_spectrum,
)
from dpnets.exceptions import check_is_fitted
from dpnets.io import InvalidModelFile, arrays_to_tensors, register, tensors_to_arrays
from dpnets.moments import FIT_CHUNK, Moments
from dpnets.pairs import PairSegment, check_lag, pair_segments, resolve_lag
from dpnets.params import Constraint, boolean, check_choice, one_of, satisfies
from dpnets.spectral import (
    OPTIONAL_ARRAYS,
    DiscreteTimeModel,
    FeatureMap,
    StateAndFeatures,
    as_feature_map,
    dump_feature_map,
    dump_fitted_scalars,
    features_on_demand,
    regression_constraints,
    restore_feature_map,
    restore_fitted_state,
    without_state,
)
from dpnets.states import check_state_shape, check_states, is_streaming

__all__ = [
    "TransferOperator",
    "add_pairs",
    "pair_moments",
    "dump_operator",
    "restore_operator",
]


# ---------------------------------------------------------------- the pairs into moments
def add_pairs(
    stats: Moments,
    fmap: FeatureMap,
    x: np.ndarray,
    y: np.ndarray,
    weights: Any = None,
    phi_x: np.ndarray | None = None,
) -> None:
    """Accumulate the features of one chunk of pairs and the ``Y`` states (and the ``X``
    states when ``stats`` holds their product), weighted by ``weights`` if given."""
    phi_x = fmap(x) if phi_x is None else phi_x
    phi_y = fmap(y)
    if phi_y.shape != phi_x.shape:
        raise ValueError(f"features of X and Y differ in shape: {phi_x.shape}, {phi_y.shape}")
    blocks = {"x": phi_x, "y": phi_y, "t": np.reshape(y, (y.shape[0], -1))}
    if ("y", "s") in stats.products:
        blocks["s"] = np.reshape(x, (x.shape[0], -1))
    stats.update(blocks, weights)


def _read_pairs(
    data: Any,
    pair_lag: int,
    fmap: FeatureMap,
    stats: Moments,
    log_weights: Any = None,
    span: Any = None,
    fitted: Any = None,
) -> tuple[list, tuple[int, ...], Any]:
    """Add the pairs of ``data`` at ``pair_lag`` to ``stats``, chunk by chunk
    (:data:`dpnets.moments.FIT_CHUNK` pairs; a Dataset/DataLoader batch by batch); with
    ``log_weights``, the weighted pairs in rescaled time
    (:func:`dpnets.biased.rescaled_segments`). With a ``fitted`` model (the earlier pieces
    of a :meth:`TransferOperator.partial_fit`) the state shape must be its
    ``state_shape_``, checked before any pair is added (after, for streamed data).

    Returns the sources of the pairs (the training inputs: ``PairSegment`` objects, or the
    DataLoader), the state shape, and ``span`` (a previous ``(min, max)`` of the states, or
    None) widened by the states read (:func:`state_range`; None for streamed data).
    """

    def check_shape(shape: tuple[int, ...]) -> None:
        if fitted is not None:
            check_state_shape(shape, fitted.state_shape_, type(fitted).__name__)

    if log_weights is None and is_streaming(data):
        loader, shape = _stream_pairs(data, fmap, stats)
        check_shape(shape)
        return [loader], shape, None
    if log_weights is not None:
        sources: list = rescaled_segments(data, pair_lag, log_weights)
    else:
        sources = pair_segments(data, pair_lag)
    shape = sources[0].state_shape
    check_shape(shape)
    for seg in sources:
        for x, y, w in weighted_chunks(seg, FIT_CHUNK):
            add_pairs(stats, fmap, x, y, w)
            span = state_range(span, x, y)
    return sources, shape, span


def _stream_pairs(data: Any, fmap: FeatureMap, stats: Moments) -> tuple[DataLoader, tuple]:
    """Accumulate a Dataset/DataLoader of pairs batch by batch; the states are never held
    in memory together. Returns the loader (the training inputs) and the state shape."""
    loader = data if isinstance(data, DataLoader) else DataLoader(data, batch_size=8192)
    shape = None
    for xb, yb in _loader_pairs(loader):
        add_pairs(stats, fmap, xb, yb)
        shape = tuple(yb.shape[1:])
    if shape is None:
        raise ValueError("the Dataset/DataLoader yielded no samples")
    return loader, shape


def pair_moments(
    sources: list,
    features: Any,
    products: tuple[tuple[str, str], ...],
    weight: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Moments:
    """The moments ``products`` of the pairs of ``sources`` (``PairSegment`` objects, or
    DataLoaders of pairs that can be iterated again) on ``features``, chunk by chunk, each
    pair weighted by ``weight(phi_x)`` when given (the second pass of Koopman reweighting)."""
    stats = Moments(products)
    fmap = as_feature_map(features)
    for x, y in _pair_chunks(sources):
        phi_x = fmap(x)
        w = None if weight is None else weight(phi_x)
        add_pairs(stats, fmap, x, y, w, phi_x=phi_x)
    return stats


def _pair_chunks(sources: list) -> Any:
    """The pairs of ``sources`` again, chunk by chunk: ``PairSegment`` chunks, or every
    batch of a DataLoader."""
    for src in sources:
        yield from src.chunks(FIT_CHUNK) if isinstance(src, PairSegment) else _loader_pairs(src)


def _loader_pairs(loader: Any) -> Any:
    """The validated ``(x, y)`` batches of a DataLoader of pairs."""
    for xb, yb in loader:
        yield check_states(xb, "X batch"), check_states(yb, "Y batch")


def state_range(span: Any, *states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(min, max)`` of each flattened coordinate over ``states`` and ``span`` (a previous
    ``(min, max)``, or None)."""
    flat = [np.reshape(s, (s.shape[0], -1)) for s in states if len(s)]
    lo = np.min([f.min(axis=0) for f in flat], axis=0).astype(np.float64)
    hi = np.max([f.max(axis=0) for f in flat], axis=0).astype(np.float64)
    if span is not None and span[0] is not None:
        lo, hi = np.minimum(lo, span[0]), np.maximum(hi, span[1])
    return lo, hi


# ------------------------------------------------------- the fit's arguments, checked
def _unfitted_estimator(features: Any) -> bool:
    """Whether ``features`` is an unfitted dpnets estimator (the composite model)."""
    return (
        isinstance(features, BaseEstimator)
        and hasattr(features, "transform")
        and not is_fitted(features)
    )


def _train_features(features: Any, data: Any, lag: int | None, log_weights: Any = None) -> Any:
    """``features``, or, when it is an unfitted dpnets estimator, a copy of it trained on
    ``data`` at the operator's ``lag`` (in rescaled time with ``log_weights``): the
    features of the composite model (:meth:`TransferOperator.fit`)."""
    if not _unfitted_estimator(features):
        return features
    f = clone(features)
    own = getattr(f, "lag", None)
    if lag is not None and own is not None and check_lag(lag) != own:
        warnings.warn(
            f"the operator's lag={lag} overrides the lag={own} of its unfitted "
            f"{type(f).__name__}: the features are trained at lag {lag}",
            stacklevel=5,
        )
    if lag is not None and "lag" in f.get_params(deep=False):
        f.set_params(lag=lag)
    if log_weights is None:
        return f.fit(data)
    if "log_weights" not in inspect.signature(f.fit).parameters:
        raise ValueError(
            f"log_weights: the unfitted {type(f).__name__} of features cannot train on "
            "a biased run (its fit takes no log_weights); fit it first, or use a DPNet"
        )
    return f.fit(data, log_weights=log_weights)


def _pairing_lag(features: Any, data: Any, lag: Any, stacklevel: int = 3) -> tuple[int, int | None]:
    """Pairing and model lag; defaults to (and checks against) a DPNet's own lag (a warning
    ``stacklevel`` frames up: the caller of ``fit`` or ``partial_fit``)."""
    feature_lag = getattr(without_state(features), "lag_", None)
    if lag is None and feature_lag is not None:
        lag = feature_lag
    elif lag is not None and feature_lag is not None and lag != feature_lag:
        warnings.warn(
            f"the operator is fitted at lag={lag} on features trained at lag="
            f"{feature_lag}; this is intended only when validating across lags (the "
            "operator's lag sets its timescales)",
            stacklevel=stacklevel,
        )
    return resolve_lag(data, lag)


def _piece_lag(data: Any, lag: Any, fitted_lag: int | None) -> tuple[int, int | None]:
    """Pairing and model lag of a further piece of a ``partial_fit``: the earlier pieces'."""
    pair_lag, lag_ = resolve_lag(data, fitted_lag if lag is None else lag)
    if lag_ != fitted_lag:
        raise ValueError(
            f"lag={lag_} differs from the lag of the pieces already fitted (lag_="
            f"{fitted_lag}): pair every piece at the same lag"
        )
    return pair_lag, lag_


def _check_log_weights(log_weights: Any, reversible: bool | str) -> None:
    """Refuse ``log_weights`` with ``reversible="reweight"``."""
    if log_weights is not None and reversible == "reweight":
        raise ValueError(
            "log_weights with reversible='reweight': the pairs in rescaled time already "
            "sample the unbiased law; use reversible=True or False"
        )


def _check_products(needed: tuple[tuple[str, str], ...], m: Moments) -> None:
    """The accumulated statistics ``m`` must hold the products this fit needs."""
    if set(needed) - set(m.products):
        raise ValueError(
            "reversible was set after the first partial_fit, whose statistics lack the "
            "moments a reversible fit needs: call fit, or set reversible before the first "
            "partial_fit"
        )


class TransferOperator(DiscreteTimeModel):
    """Least-squares transfer operator on a feature map (paper Sec. 4, App. D).

    Fits ``T = (Cx + ridge I)^+ Cxy`` with ``Cx = Phi_X^T Phi_X / n`` and
    ``Cxy = Phi_X^T Phi_Y / n`` (the same feature map on both sides, App. D.3; the
    estimator of Eq. 15 with the empirical covariances of Eq. 8), so that
    ``E[h(X_t) | X_0 = x] ~ psi(x)^T T^t z`` for ``h = psi^T z``; its eigen-decomposition
    (Eq. 16) gives the eigenfunctions, and the modal decomposition (Eq. 17) the forecasts.
    With ``reversible`` the covariances are symmetrised over the two time directions,
    ``C0 = (Cx + Cy) / 2``, ``Ct = (Cxy + Cxy^T) / 2`` and ``T = (C0 + ridge I)^+ Ct``
    (``Cy = Phi_Y^T Phi_Y / n``): a real spectrum from a symmetric eigensolver, TICA's on
    ``[1, psi]`` (the concepts page of the documentation, "Reversible estimation and Koopman
    reweighting", has the derivation and its limits).

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
        every feature map gives correct timescales. ``False`` is plain (E)DMD on the
        features as given. With the constant the regression works in the basis
        ``[1, (psi - mean) / std]`` (the same span, well conditioned for features of any
        offset and scale); ``ridge`` then acts on the standardised features.
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
    reversible : {False, True, "reweight"}, default False
        ``False``: the least-squares estimator above, for any dynamics (driven,
        non-equilibrium, or data too short to show detailed balance). ``True``: the
        reversible estimator on symmetrised covariances, for equilibrium data of a process
        in detailed balance: a real spectrum and real eigenfunctions, lower variance, equal
        to TICA. ``"reweight"``: for data that do not sample equilibrium (short
        trajectories started away from it), Koopman weights ``w(x) = b(x)^T u`` from the
        non-reversible estimator first (``Cxy^T u = Cx u``; Wu et al., J. Chem. Phys. 146,
        154104, 2017), then covariances symmetrised with these weights (a second pass over
        the data; needs the constant in the span of the features). With either, ``cx_``,
        ``cxy_`` and ``cy_`` hold ``C0``, ``Ct`` and ``C0``, ``features_mean_`` the mean over
        both time directions, and :meth:`stationary_weights` the Koopman weights.
    append_state : bool, default False
        Regress on ``[x, psi(x)]``: the (flattened) state appended to the features
        (:class:`dpnets.spectral.StateAndFeatures`), so the basis contains DMD's and the
        state's own forecast is a regression on it: the recommended setting for forecasting
        the state with learned features, which need not span it. ``features_`` is then the
        composite map; a file stores the inner one and this flag.
    stabilize : bool, default False
        The stabilised estimate: eigenvalues of modulus above 1 (sampling noise on a
        stationary or chaotic series, or a growing mode a short series cannot tell from
        one) projected onto the unit circle, ``lambda / |lambda|`` (frequency kept), and
        ``operator_`` rebuilt from them (eigenvectors unchanged;
        :func:`dpnets.estimation.stabilize_spectrum`), as PyDMD's
        ``BOPDMD(eig_constraints={"stable"})``: forecasts bounded at every horizon, a
        genuinely growing process no longer described. Bootstrap refits
        (:mod:`dpnets.resampling`) are stabilised too.

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
        Eigenvalues, decreasing modulus (imaginary parts exactly 0 when ``reversible``).
    left_eigvecs_, right_eigvecs_ : ndarray (r, r), complex
        Biorthogonal (``L^H R = I``) eigenvectors; right eigenfunctions have unit empirical
        norm ``r_i^H Cx r_i = 1``.
    lag_ : int or None
        Lag in frames (from ``fit``; None for pre-paired data fitted without ``lag``).
    rescaled_time_ : bool
        Whether the pairs were formed in rescaled time (``fit(X, log_weights=...)``, a
        biased run): the validation refits of :mod:`dpnets.validation` then refuse the
        model (they would pair the biased frames without the bias).
    reweighting_coef_ : ndarray (r,) or None
        ``reversible="reweight"``: the Koopman weights ``w(x) = transform(x) @ u`` of the
        training inputs (mean 1 over them); None otherwise.
    n_samples_ : int
    n_features_ : int
    features_x_ : ndarray (n_samples_, n_features_) or None
        The training inputs' features, computed on demand (chunk by chunk) from a reference
        to the training inputs; nothing of size ``n`` is stored on the model. None for a
        model loaded from a file.

    Examples
    --------
    An AR(1) process ``x_t = 0.9 x_{t-1} + noise`` on the features ``[x, x^2]`` (with the
    constant, the Hermite polynomials up to degree 2, eigenvalues 1, 0.9 and 0.81):

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = np.zeros((2000, 1))
    >>> for t in range(1, 2000):
    ...     x[t] = 0.9 * x[t - 1] + rng.normal(size=1)
    >>> op = TransferOperator(lambda s: np.hstack([s, s**2])).fit(x)
    >>> op.eig().real.round(2)
    array([1.  , 0.9 , 0.82])
    >>> op.implied_timescales().round(1)
    array([inf, 9.6, 5. ])
    """

    def __init__(
        self,
        features: Any = None,
        ridge: float = 0.0,
        rtol: float | None = None,
        constant: str | bool = "auto",
        dt: float = 1.0,
        lag: int | None = None,
        reversible: bool | str = False,
        append_state: bool = False,
        stabilize: bool = False,
    ):
        self.features = features
        self.ridge = ridge
        self.rtol = rtol
        self.constant = constant
        self.dt = dt
        self.lag = lag
        self.reversible = reversible
        self.append_state = append_state
        self.stabilize = stabilize

    #: every constructor parameter's accepted values (:mod:`dpnets.params`), checked by
    #: ``fit``, ``partial_fit``, ``fit_from_moments`` and :func:`dpnets.load`
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "features": satisfies(as_feature_map),
        **regression_constraints("ridge", "rtol", "constant", "dt", "lag"),
        "reversible": one_of(*REVERSIBLE_CHOICES),
        "append_state": boolean(),
        "stabilize": boolean(),
    }

    def _reversible(self) -> bool | str:
        """The validated ``reversible`` (False for subclasses without the parameter)."""
        return check_choice("reversible", getattr(self, "reversible", False), REVERSIBLE_CHOICES)

    def _with_state(self, features: Any) -> Any:
        """``features``, with the state appended when ``append_state``."""
        if getattr(self, "append_state", False):
            return StateAndFeatures(features)
        return features

    # ------------------------------------------------------------------ fitting
    def _fit_features(self, data: Any, lag: int | None, log_weights: Any = None) -> Any:
        """The feature map to regress on: ``features``, or a trained copy of an unfitted
        dpnets estimator (the composite model, :func:`_train_features`)."""
        return self._with_state(_train_features(self.features, data, lag, log_weights))

    def fit(
        self, X: Any, y: Any = None, *, lag: int | None = None, log_weights: Any = None
    ) -> TransferOperator:
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
        y : array, optional
            The time-lagged partner of each row of ``X``: ``fit(X, Y)`` is ``fit((X, Y))``
            (same checks; :func:`dpnets.base.fit_data`). A 1-D vector of one value per row
            of multi-dimensional states (scikit-learn's target) is ignored with a warning.
        lag : int, optional
            Deprecated: the lag is the constructor parameter ``lag``; given here it
            overrides it for this fit, with a ``FutureWarning``.
        log_weights : array (n_frames,) or list of arrays, optional
            Trajectories of a biased simulation: ``beta V`` of every frame (one array of
            all frames in order, or one per trajectory; :func:`dpnets.read_log_weights`
            reads PLUMED's files). The pairs are then formed at ``lag`` frames of
            *rescaled* time, each weighted by the rescaled time it spans
            (:mod:`dpnets.biased`, which says when this is valid): the operator and
            timescales of the *unbiased* dynamics. The composite model trains its DPNet on
            the same weighted pairs. Refused, each in one line: non-finite values, a length
            other than the frames', a rescaled trajectory not longer than ``lag``,
            pre-paired or streamed data, and ``reversible="reweight"`` (the rescaled pairs
            are already reweighted).

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
        self._fit_operator(*fit_data(self, X, y, lag), log_weights)
        return self

    def _fit_operator(self, data: Any, lag: int | None, log_weights: Any = None) -> None:
        """:meth:`fit` at a resolved ``lag`` (subclasses build their features first)."""
        self._check_params()
        _check_log_weights(log_weights, self._reversible())
        features = self._fit_features(data, lag, log_weights)
        pair_lag, lag_ = _pairing_lag(features, data, lag, stacklevel=4)
        self._accumulate(data, pair_lag, features, lag_, fresh=True, log_weights=log_weights)

    def partial_fit(
        self, X: Any, y: Any = None, *, lag: int | None = None, log_weights: Any = None
    ) -> TransferOperator:
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
        y : array, optional
            The time-lagged partner of each row of ``X``: ``fit(X, Y)`` is ``fit((X, Y))``
            (same checks; :func:`dpnets.base.fit_data`). A 1-D vector of one value per row
            of multi-dimensional states (scikit-learn's target) is ignored with a warning.
        lag : int, optional
            Deprecated, as in :meth:`fit`; every piece is paired at the lag of the first
            (``lag_``).
        log_weights : array or list of arrays, optional
            This piece's ``beta V`` per frame: pairs in rescaled time (as in :meth:`fit`).

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
        self._check_params()
        _check_log_weights(log_weights, self._reversible())
        data, lag = fit_data(self, X, y, lag)
        fresh = getattr(self, "_stats", None) is None
        if fresh and "operator_" in vars(self):
            raise ValueError(
                "this model holds no accumulated statistics (it was loaded from a file): "
                "call fit, or partial_fit on a new model"
            )
        if fresh:
            features = self._partial_features()
            pair_lag, lag_ = _pairing_lag(features, data, lag)
        else:
            features, (pair_lag, lag_) = self.features_, _piece_lag(data, lag, self.lag_)
        self._accumulate(data, pair_lag, features, lag_, fresh, log_weights)
        return self

    def _partial_features(self) -> Any:
        """The fixed feature map a fresh :meth:`partial_fit` accumulates on."""
        f = self.features
        if _unfitted_estimator(f):
            raise ValueError(
                f"partial_fit needs a fixed feature map, but features is an unfitted "
                f"{type(f).__name__}: fit it first (features.fit(data)), or call fit, which "
                "trains a copy of it on the data"
            )
        return self._with_state(f)

    def moment_products(self) -> tuple[tuple[str, str], ...]:
        """The blocks of :class:`dpnets.moments.Moments` a fit of these parameters
        accumulates (:func:`dpnets.estimation.operator_products`)."""
        return operator_products(self._reversible())

    def _accumulate(
        self,
        data: Any,
        pair_lag: int,
        features: Any,
        lag_: Any,
        fresh: bool,
        log_weights: Any = None,
    ) -> None:
        """Add the pairs of ``data`` to the statistics (new ones when ``fresh``;
        :func:`_read_pairs`), then refit. The statistics change only once the whole piece
        has been read, so a piece that fails (bad values, a feature map error) leaves the
        model as it was."""
        if not fresh:
            _check_products(self.moment_products(), self._stats)
        stats = Moments(self.moment_products()) if fresh else copy.deepcopy(self._stats)
        span = None if fresh else (self.state_min_, self.state_max_)
        known = fresh or self.state_min_ is not None  # (None after streamed pieces)
        fmap, fitted = as_feature_map(features), None if fresh else self
        new, shape, span = _read_pairs(data, pair_lag, fmap, stats, log_weights, span, fitted)
        sources = new if fresh else [*self._train_inputs, *new]
        # the training range, for predict's out-of-range warning (not from streamed data) and
        # the fit's own finding of data that never change; restored if the fit fails
        before = (self.state_min_, self.state_max_)
        self.state_min_, self.state_max_ = span if known and span else (None, None)
        try:
            self.fit_from_moments(stats, sources, features, lag_, shape)
        except BaseException:
            self.state_min_, self.state_max_ = before
            raise

    def fit_from_moments(
        self, stats: Moments, sources: list, features: Any, lag_: Any, shape: tuple
    ) -> None:
        """The fitted model from accumulated moments ``stats`` of the pairs of ``sources``
        (the training inputs, referenced) on ``features`` at ``lag_``: the one place where
        the estimator's statistics become its fit (:meth:`fit`, :meth:`partial_fit`). The
        parameters are validated first; the regression is
        :func:`dpnets.estimation.estimate_operator` (which :mod:`dpnets.validation` calls
        on the summed moments of resampled trajectories), and every fitted attribute is set
        from its :class:`~dpnets.estimation.OperatorFit`."""
        self._check_params()
        self.features_, self.lag_ = features, lag_
        self._stats, self._train_inputs = stats, sources
        self.rescaled_time_ = any(isinstance(src, RescaledSegment) for src in sources)
        self.state_shape_ = tuple(shape)
        _check_products(self.moment_products(), stats)
        fit = estimate_operator(
            stats,
            ridge=float(self.ridge),
            rtol=self.rtol,
            constant=self.constant,
            reversible=self._reversible(),
            reweigh=self._weighted_moments,
            stabilize=bool(getattr(self, "stabilize", False)),
        )
        fit.apply_to(self)  # every fitted array, from the one regression
        diagnostics.warn(self._diagnostics())

    def _diagnostics(
        self, n_samples: int | None = None, units: str | None = None
    ) -> list[Diagnostic]:
        """The spectrum's findings with the noise level of ``n_samples_`` pairs (no
        process resolved at the lag), too few pairs per basis function, and a basis of
        lower numerical rank than its size; training states that are all the same state
        (``state_min_ == state_max_``) are that finding alone."""
        n = self.n_samples_
        still = diagnostics.no_change_diagnostics(self.state_min_, self.state_max_)
        if still:  # the findings of the spectrum (unresolved, rank) follow from it
            return still
        return (
            super()._diagnostics(n, units)
            + diagnostics.sample_diagnostics(
                n, self.n_features_, "basis functions", "fewer features", "a smaller --dim"
            )
            + diagnostics.rank_diagnostics(self.cx_rank_, self.n_features_, self.eigvals_)
        )

    #: :func:`add_pairs`, also as ``TransferOperator.add_pairs``
    add_pairs = staticmethod(add_pairs)

    def _weighted_moments(self, weight: Callable[[np.ndarray], np.ndarray]) -> Moments:
        """The moments of every training pair weighted by ``weight(phi_x)`` (the second
        pass of ``reversible="reweight"``, :func:`dpnets.estimation.estimate_operator`)."""
        return pair_moments(self._train_inputs, self.features_, self.moment_products(), weight)

    def _set_spectrum(self) -> None:
        """The eigen-decomposition of a restored operator
        (:func:`dpnets.estimation.operator_spectrum`, as in the fit)."""
        self.eigvals_, self.left_eigvecs_, self.right_eigvecs_ = operator_spectrum(
            self.operator_,
            self.cx_,
            self.cxy_,
            float(self.ridge),
            self.rtol,
            self._reversible(),
            self._basis_mean(),
            bool(getattr(self, "stabilize", False)),
        )

    def _observable_coef(self, observable: Any) -> tuple[np.ndarray, tuple[int, ...]]:
        if observable is not None and getattr(self, "rescaled_time_", False):
            raise ValueError(
                "observable: a fit on a biased run (log_weights) pairs frames in rescaled time, "
                "so there is no one training sample per frame to give values on; pass the "
                "observable's values at states you give (or forecast the state itself)"
            )
        return super()._observable_coef(observable)

    def _weigh(self, f: np.ndarray) -> np.ndarray:
        """Observable values on the training samples times the Koopman weights of a
        ``"reweight"`` fit (its covariances are weighted by them), else as they are."""
        if getattr(self, "reweighting_coef_", None) is None:
            return f
        return f * self.stationary_weights()[:, None]

    def stationary_weights(self, X: Any = None) -> np.ndarray:
        """Equilibrium weights of states relative to the training data (see
        :meth:`dpnets.spectral.DiscreteTimeModel.stationary_weights`); for
        ``reversible="reweight"`` the Koopman weights of the fit (``reweighting_coef_``)."""
        u = getattr(self, "reweighting_coef_", None)
        if u is None:
            return super().stationary_weights(X)
        check_is_fitted(self, "operator_")
        if X is not None:
            return self.transform(X) @ u
        return np.concatenate([phi @ u for phi in self._training_feature_chunks()])

    features_x_ = property(
        lambda self: features_on_demand(self),
        doc="The training inputs' features in the basis of :meth:`transform`, float64 "
        "(n, r), computed on demand from the training inputs (they are not stored; None "
        "for a model loaded from a file).",
    )


#: saved arrays; the n x r training features are not saved (file size independent of n)
_OPERATOR_ARRAYS = ("operator_", "cx_", "cxy_", "cx_pinv_", "state_coef_")
#: saved when set (files written before ``reversible`` lack them)
_OPERATOR_OPTIONAL = ("reweighting_coef_",)


def dump_operator(model: Any, tensors: dict[str, torch.Tensor]) -> dict:
    """The saved form of a fitted :class:`TransferOperator` (and of DMD/EDMD, which add their
    own parameters to it): parameters, fitted scalars, arrays in ``tensors``, feature map."""
    check_is_fitted(model, "operator_")
    arrays_to_tensors(model, _OPERATOR_ARRAYS, tensors)
    for name in (*OPTIONAL_ARRAYS, *_OPERATOR_OPTIONAL):
        if getattr(model, name, None) is not None:
            arrays_to_tensors(model, (name,), tensors)
    params = {
        "ridge": float(model.ridge),
        "rtol": model.rtol,
        "constant": model.constant,
        "dt": float(model.dt),
    }
    own = model.get_params(deep=False)
    for name in ("lag", "reversible", "append_state", "stabilize"):  # as the model has them
        if name in own:
            params[name] = own[name]
    fitted = dump_fitted_scalars(model)
    if getattr(model, "rescaled_time_", False):  # (older files and DMD/EDMD: absent)
        fitted["rescaled_time_"] = True
    return {"params": params, "fitted": fitted, **dump_feature_map(model, tensors)}


def restore_operator(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> TransferOperator:
    """Inverse of :func:`dump_operator` (``kw``: :func:`dpnets.load`'s keyword arguments)."""
    features, fitted = restore_feature_map(cfg, tensors, **kw)
    # files written before ``reversible`` lack the key: they hold non-reversible fits
    op = TransferOperator(features, **cfg["params"])
    try:
        op._check_params()
    except (TypeError, ValueError) as err:
        raise InvalidModelFile(str(err)) from err
    op.features_ = op._with_state(fitted)
    tensors_to_arrays(op, tensors, _OPERATOR_ARRAYS, _OPERATOR_OPTIONAL)
    try:
        op._reversible()
    except ValueError as err:
        raise InvalidModelFile(str(err)) from err
    restore_fitted_state(op, cfg["fitted"], tensors)
    op.rescaled_time_ = cfg["fitted"].get("rescaled_time_") is True
    u = op.reweighting_coef_
    if u is not None and u.shape != (op.n_features_,):
        raise InvalidModelFile(
            f"reweighting_coef_ has shape {u.shape}, expected ({op.n_features_},)"
        )
    return op


register("TransferOperator", TransferOperator, dump_operator, restore_operator)
