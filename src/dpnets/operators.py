"""Operator regression on a feature map and the downstream tasks (paper Sec. 4, App. D).

:class:`TransferOperator` fits the least-squares estimator ``T = (Cx + ridge I)^+ Cxy`` on
features ``psi`` (Eq. 15 and App. D.2) and offers its eigen-decomposition (Eq. 16),
eigenfunctions, multi-step forecasts through the modal decomposition (Eq. 17 and App. D.3),
Koopman modes and implied timescales.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from dpnets.base import BaseEstimator, clone, fit_lag, is_fitted
from dpnets.data import (
    check_lag,
    check_state_shape,
    check_states,
    is_streaming,
    pair_segments,
    resolve_lag,
)
from dpnets.exceptions import check_is_fitted
from dpnets.io import arrays_to_tensors, register, tensors_to_arrays
from dpnets.moments import FIT_CHUNK, Moments
from dpnets.spectral import (
    OPTIONAL_ARRAYS,
    DiscreteTimeModel,
    FeatureMap,
    as_feature_map,
    dump_feature_map,
    dump_fitted_scalars,
    features_on_demand,
    restore_feature_map,
    restore_fitted_state,
)

__all__ = ["TransferOperator", "dump_operator", "restore_operator"]


def _with_constant(c: np.ndarray, mean_a: np.ndarray, mean_b: np.ndarray) -> np.ndarray:
    """``E[[1, a] [1, b]^T]`` from ``c = E[a b^T]`` and the means of ``a`` and ``b``."""
    out = np.empty((c.shape[0] + 1, c.shape[1] + 1))
    out[0, 0] = 1.0
    out[0, 1:] = mean_b
    out[1:, 0] = mean_a
    out[1:, 1:] = c
    return out


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


#: saved arrays; the n x r training features are not saved (file size independent of n)
_OPERATOR_ARRAYS = ("operator_", "cx_", "cxy_", "cx_pinv_", "state_coef_")


def dump_operator(model: Any, tensors: dict[str, torch.Tensor]) -> dict:
    """The saved form of a fitted :class:`TransferOperator` (and of DMD/EDMD, which add their
    own parameters to it): parameters, fitted scalars, arrays in ``tensors``, feature map."""
    check_is_fitted(model, "operator_")
    arrays_to_tensors(model, _OPERATOR_ARRAYS, tensors)
    for name in OPTIONAL_ARRAYS:
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


def restore_operator(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> TransferOperator:
    """Inverse of :func:`dump_operator` (``kw``: :func:`dpnets.load`'s keyword arguments)."""
    features, fitted = restore_feature_map(cfg, tensors, **kw)
    op = TransferOperator(features, **cfg["params"])
    op.features_ = fitted
    tensors_to_arrays(op, tensors, _OPERATOR_ARRAYS)
    restore_fitted_state(op, cfg["fitted"], tensors)
    return op


register("TransferOperator", TransferOperator, dump_operator, restore_operator)
