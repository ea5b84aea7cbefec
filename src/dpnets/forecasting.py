"""Forecasting with any dpnets model: errors at horizons, the references every forecast
must beat, a scorer for scikit-learn's searches, delay embeddings and forecast intervals.

A transfer operator's ``score`` is the held-out VAMP-2 score of its features, which grows
with the number of features and falls with the lag: the right criterion to learn
features, not to choose a forecaster. For forecasting, select by the forecast error at the
horizons you need, against persistence (``x_{t+h} = x_t``) and climatology (the training
mean), which a model must beat to be of use:

>>> import numpy as np
>>> from sklearn.model_selection import GridSearchCV
>>> from dpnets import TransferOperator
>>> from dpnets.baselines import DMD
>>> t = np.arange(300)
>>> X = np.stack([np.cos(0.3 * t), np.sin(0.3 * t)], axis=1)
>>> X_train, X_test = X[:200], X[200:]
>>> dmd, op = DMD().fit(X_train), TransferOperator().fit(X_train)
>>> errors = forecast_errors(X_test, {"dmd": dmd, "op": op}, horizons=[1, 10], train=X_train)
>>> search = GridSearchCV(op, {"lag": [1, 2, 5]}, scoring=forecast_scorer([10]))
>>> search.fit(X_train).best_params_["lag"] in (1, 2, 5)
True

Horizons are in frames of the data (so models of different lags compare), each a multiple
of the model's lag (:meth:`dpnets.spectral.SpectralModel.predict` with ``unit="frames"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from dpnets.params import check_int, check_real
from dpnets.resampling import bootstrap_trajectories, interval_of, refit_at_lag
from dpnets.states import check_not_rows, check_states

__all__ = [
    "delay_embed",
    "forecast_rmse",
    "reference_rmse",
    "forecast_errors",
    "forecast_scorer",
    "forecast_interval",
    "ForecastInterval",
]


def _trajectories(X: Any, name: str = "X") -> list[np.ndarray]:
    """``X`` (one trajectory or a list of them) as a list of float64 arrays."""
    if isinstance(X, tuple):
        raise ValueError(
            f"{name} must hold trajectories (an array or a list of arrays) to forecast along "
            "them, not (X, Y) pairs"
        )
    if isinstance(X, list):
        if not X:
            raise ValueError(f"{name} is an empty list of trajectories")
        check_not_rows(X, name)
        return [
            np.asarray(check_states(t, f"{name}[{k}]"), dtype=np.float64) for k, t in enumerate(X)
        ]
    return [np.asarray(check_states(X, name), dtype=np.float64)]


def _horizons(horizons: Any) -> list[int]:
    hs = [horizons] if np.ndim(horizons) == 0 else list(horizons)
    if not hs:
        raise ValueError("horizons is empty: give at least one horizon (in frames)")
    return [check_int("horizons", h, 1) for h in hs]


def _select(x: np.ndarray, coordinates: Any) -> np.ndarray:
    flat = x.reshape(x.shape[0], -1)
    return flat if coordinates is None else flat[:, coordinates]


def _pairs_at(trajs: list[np.ndarray], h: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ``(x_t, x_{t+h})`` along the trajectories (longer than ``h``)."""
    keep = [t for t in trajs if t.shape[0] > h]
    if not keep:
        longest = max(t.shape[0] for t in trajs)
        raise ValueError(
            f"horizon {h} frames is not shorter than the longest trajectory ({longest} "
            "frames): give shorter horizons or longer test data"
        )
    return np.concatenate([t[:-h] for t in keep]), np.concatenate([t[h:] for t in keep])


def delay_embed(X: Any, n_delays: int, step: int = 1) -> Any:
    """Delay (Hankel) embedding: ``z_t = [x_t, x_{t-step}, ..., x_{t-(n_delays-1) step}]``.

    For scalar or partially observed series, whose current value alone is not a Markov
    state (Takens): fit and forecast on ``z`` (as PyDMD's ``HankelDMD`` and kooplearn's
    context windows); the forecast of ``x`` is the first block of ``z``'s forecast
    (``predict(...)[:, :d]``, or ``coordinates=slice(0, d)`` in :func:`forecast_rmse`).

    Parameters
    ----------
    X : array (T, *state_shape) or list of arrays
        A trajectory (a 1-D array: a scalar series) or a list of them.
    n_delays : int
        Number of frames stacked, >= 1 (1: the flattened states themselves).
    step : int, default 1
        Frames between stacked frames.

    Returns
    -------
    ndarray (T - (n_delays - 1) step, n_delays * d), or a list of them
        The most recent frame first; the first ``(n_delays - 1) step`` frames start no
        row. A list in, a list out.
    """
    n_delays = check_int("n_delays", n_delays, 1)
    step = check_int("step", step, 1)
    trajs = _trajectories(X)
    span = (n_delays - 1) * step
    out = []
    for k, t in enumerate(trajs):
        if t.shape[0] <= span:
            raise ValueError(
                f"trajectory {k} has {t.shape[0]} frames, too few for n_delays={n_delays} "
                f"at step={step} (needs more than {span})"
            )
        flat = t.reshape(t.shape[0], -1)
        n = flat.shape[0] - span
        out.append(
            np.hstack([flat[span - j * step : span - j * step + n] for j in range(n_delays)])
        )
    return out if isinstance(X, list) else out[0]


def forecast_rmse(model: Any, X: Any, horizons: Any = 1, coordinates: Any = None) -> np.ndarray:
    """Root-mean-square error of ``model.predict`` at each horizon along held-out
    trajectories ``X``: ``sqrt(mean |x_{t+h} - predict(x_t, h)|^2)`` over every start ``t``
    and coordinate.

    Parameters
    ----------
    model : fitted dpnets model
        Any model with ``predict(X, t, unit="frames")`` (every transfer operator).
    X : array (T, *state_shape) or list of arrays
        Held-out trajectories (in the model's state space: delay-embedded if it was).
    horizons : int or sequence of int, default 1
        Horizons in frames of ``X``, each a multiple of the model's lag.
    coordinates : index, optional
        The coordinates of the flattened state that are scored (e.g. ``slice(0, d)``: the
        current frame of a delay embedding); default all.

    Returns
    -------
    ndarray (len(horizons),)
    """
    trajs = _trajectories(X)
    out = []
    for h in _horizons(horizons):
        x0, xh = _pairs_at(trajs, h)
        pred = np.asarray(model.predict(x0, t=h, unit="frames"), dtype=np.float64)
        out.append(np.sqrt(np.mean((_select(pred, coordinates) - _select(xh, coordinates)) ** 2)))
    return np.asarray(out)


def reference_rmse(
    X: Any, horizons: Any = 1, train: Any = None, coordinates: Any = None
) -> dict[str, np.ndarray]:
    """The errors every forecast must beat, at each horizon (frames) along ``X``:
    ``"persistence"`` (``x_{t+h} = x_t``) and ``"climatology"`` (the mean of ``train``;
    of ``X`` itself when no training data are given, which flatters it).

    Returns
    -------
    dict
        ``{"persistence": ndarray (len(horizons),), "climatology": ndarray}``.
    """
    trajs = _trajectories(X)
    ref = trajs if train is None else _trajectories(train, "train")
    mean = _select(np.concatenate(ref), coordinates).mean(0)
    pers, clim = [], []
    for h in _horizons(horizons):
        x0, xh = _pairs_at(trajs, h)
        target = _select(xh, coordinates)
        pers.append(np.sqrt(np.mean((_select(x0, coordinates) - target) ** 2)))
        clim.append(np.sqrt(np.mean((mean - target) ** 2)))
    return {"persistence": np.asarray(pers), "climatology": np.asarray(clim)}


def forecast_errors(
    X: Any,
    models: Any,
    horizons: Any = 1,
    train: Any = None,
    coordinates: Any = None,
) -> dict[str, np.ndarray]:
    """RMSE at each horizon of every model and of the references, in one call.

    Parameters
    ----------
    X : array or list of arrays
        Held-out trajectories.
    models : dict name -> fitted model, or one fitted model (named ``"model"``)
    horizons : int or sequence of int, default 1
        In frames (each a multiple of every model's lag).
    train : array or list of arrays, optional
        Training data, whose mean is the climatology forecast (default: ``X``'s mean).
    coordinates : index, optional
        Scored coordinates of the flattened state (see :func:`forecast_rmse`).

    Returns
    -------
    dict name -> ndarray (len(horizons),)
        ``"persistence"``, ``"climatology"``, then the models in the order given.
    """
    if not isinstance(models, dict):
        models = {"model": models}
    out = reference_rmse(X, horizons, train, coordinates)
    for name, model in models.items():
        out[name] = forecast_rmse(model, X, horizons, coordinates)
    return out


def forecast_scorer(horizons: Any = 1, coordinates: Any = None) -> Callable[[Any, Any, Any], float]:
    """A scikit-learn scorer: minus the mean RMSE over ``horizons`` (frames) of a fitted
    model on held-out trajectories (higher is better), for ``GridSearchCV(...,
    scoring=forecast_scorer([1, 10]))`` over ``lag``, ``r``, ``ridge``... (horizons in
    frames, so models of different lags compare; each must divide every horizon)."""
    hs = _horizons(horizons)

    def scorer(estimator: Any, X: Any, y: Any = None) -> float:
        return -float(np.mean(forecast_rmse(estimator, X, hs, coordinates)))

    return scorer


class ForecastInterval(NamedTuple):
    """A forecast with its bootstrap intervals (arrays of the shape of ``predict``'s)."""

    forecast: np.ndarray  #: the fitted model's forecast
    lower: np.ndarray  #: lower end of the prediction interval (estimate and noise)
    upper: np.ndarray  #: upper end of the prediction interval
    mean_lower: np.ndarray  #: lower end of the confidence interval of the conditional mean
    mean_upper: np.ndarray  #: upper end of the confidence interval of the conditional mean


def forecast_interval(
    model: Any,
    X: Any,
    t: int,
    data: Any,
    *,
    n_bootstrap: int = 100,
    confidence: float = 0.9,
    n_blocks: int = 10,
    seed: int | None = 0,
) -> ForecastInterval:
    """Forecast ``t`` frames ahead of states ``X`` with bootstrap intervals.

    The model is refitted (its feature map kept, :func:`dpnets.resampling.refit_at_lag`)
    on ``n_bootstrap`` resamples of the training trajectories ``data`` (whole trajectories,
    or blocks of a single one: :func:`dpnets.resampling.bootstrap_trajectories`), giving
    the confidence interval of the conditional mean ``E[x_{t} | x_0]``. The prediction
    interval adds to each resample's forecast a residual ``x_{s+t} - predict(x_s, t)`` of
    the fitted model on ``data``, drawn at random (so it holds the noise of the dynamics
    too; never a variance, so never negative).

    Parameters
    ----------
    model : fitted transfer operator
    X : array (m, *state_shape)
        Initial states.
    t : int
        Horizon in frames (a multiple of the model's lag).
    data : array or list of arrays
        The training trajectories of ``model``.
    n_bootstrap : int, default 100
    confidence : float, default 0.9
    n_blocks : int, default 10
        Blocks of a single trajectory.
    seed : int or None, default 0

    Returns
    -------
    ForecastInterval
    """
    t = check_int("t", t, 1)
    confidence = check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    trajs = _trajectories(data, "data")
    lag = getattr(model, "lag_", None) or 1
    forecast = np.asarray(model.predict(X, t=t, unit="frames"), dtype=np.float64)
    x0, xt = _pairs_at(trajs, t)
    resid = (xt - np.asarray(model.predict(x0, t=t, unit="frames"))).reshape(x0.shape[0], -1)
    means = bootstrap_trajectories(
        trajs,
        lambda ts: refit_at_lag(model, ts, lag).predict(X, t=t, unit="frames"),
        n_bootstrap,
        n_blocks=n_blocks,
        seed=seed,
    )
    rng = np.random.default_rng(seed)
    draws = resid[rng.integers(0, resid.shape[0], size=means.shape[0])]
    noisy = means + draws.reshape(means.shape[0], 1, *forecast.shape[1:])
    mean_lower, mean_upper = interval_of(means, confidence)
    lower, upper = interval_of(noisy, confidence)
    return ForecastInterval(forecast, lower, upper, mean_lower, mean_upper)
