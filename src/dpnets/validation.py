"""Validating a kinetic model: implied timescales against the lag, with bootstrap intervals.

A transfer-operator model is trustworthy when its implied timescales do not depend on the
lag at which it was estimated (Markovianity in the span of its features): plot them against
the lag and look for the plateau, as MSM practitioners do (Prinz et al., J. Chem. Phys. 134,
174105, 2011; deeptime's ``implied_timescales``). This module refits any dpnets estimator at
each lag, optionally refitting the learned features too, and gives bootstrap intervals that
resample whole trajectories.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpnets.base import BaseEstimator, clone, is_fitted
from dpnets.data import check_lag, check_states
from dpnets.params import check_int, check_real, check_seed

__all__ = [
    "ImpliedTimescales",
    "implied_timescales",
    "cross_validate",
    "ChapmanKolmogorov",
    "ck_test",
    "clone",
]


@dataclass
class ImpliedTimescales:
    """Implied timescales against the lag (:func:`implied_timescales`).

    Attributes
    ----------
    lags : ndarray (n_lags,)
        Lags in frames.
    lag_times : ndarray (n_lags,)
        The same in time units (``lags * dt``).
    timescales : ndarray (n_lags, k)
        The ``k`` slowest finite implied timescales at each lag, in time units (NaN where a
        lag is too long for the data or fewer timescales exist).
    lower, upper : ndarray (n_lags, k) or None
        Bootstrap percentile interval (``confidence``), None without bootstrap.
    samples : ndarray (n_bootstrap, n_lags, k) or None
        The bootstrap timescales.
    confidence : float
    """

    lags: np.ndarray
    lag_times: np.ndarray
    timescales: np.ndarray
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    samples: np.ndarray | None = None
    confidence: float = 0.95

    def plot(self, ax: Any = None, units: str = "", log: bool = True) -> Any:
        """Timescales against lag time with interval bands and the ``timescale = lag`` line
        (below it a process is faster than the lag and cannot be resolved). Needs
        matplotlib (extra ``plot``); returns the axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5.0, 3.6), layout="constrained")
        for i in range(self.timescales.shape[1]):
            (line,) = ax.plot(self.lag_times, self.timescales[:, i], "o-", label=f"process {i + 1}")
            if self.lower is not None:
                ax.fill_between(
                    self.lag_times,
                    self.lower[:, i],
                    self.upper[:, i],
                    color=line.get_color(),
                    alpha=0.25,
                    linewidth=0,
                )
        ax.plot(self.lag_times, self.lag_times, "k--", linewidth=1, label="timescale = lag")
        if log:
            ax.set_yscale("log")
        unit = f" ({units})" if units else ""
        ax.set_xlabel(f"lag time{unit}")
        ax.set_ylabel(f"implied timescale{unit}")
        ax.legend(fontsize="small")
        return ax


def implied_timescales(
    estimator: Any,
    data: Any,
    lags: Sequence[int],
    *,
    k: int = 3,
    dt: float = 1.0,
    refit_features: bool = False,
    n_bootstrap: int = 0,
    confidence: float = 0.95,
    n_blocks: int = 10,
    seed: int | None = None,
) -> ImpliedTimescales:
    """Refit an estimator at each lag and collect its slowest implied timescales.

    Parameters
    ----------
    estimator : estimator or callable
        A dpnets linear model (``TransferOperator``, ``DMD``, ``EDMD``, kernel models,
        ``Generator`` excluded), cloned and refitted at every lag; or a factory
        ``lag -> unfitted estimator``. With ``refit_features=True`` a ``DPNet`` feature map
        of the estimator (fitted or not) is cloned and retrained at every lag too;
        otherwise fitted features stay as they are (only the operator is refitted). An
        unfitted feature estimator, ``TransferOperator(DPNet(...))``, is always trained at
        every lag (the composite model).
    data : array or list of arrays
        One trajectory ``(T, ...)`` or several.
    lags : sequence of int
        Lags in frames.
    k : int, default 3
        Number of timescales (the stationary one excluded).
    dt : float, default 1.0
        Time between frames: timescales and lag times are in its units.
    refit_features : bool, default False
    n_bootstrap : int, default 0
        Bootstrap resamples. Each draws whole trajectories with replacement (a single
        trajectory is cut into ``n_blocks`` contiguous blocks, which are drawn instead), and
        refits at every lag.
    confidence : float, default 0.95
        Coverage of the percentile interval.
    n_blocks : int, default 10
    seed : int, optional
        Seeds the bootstrap draws.

    Returns
    -------
    ImpliedTimescales
    """
    lags = np.array([check_lag(int(lag)) for lag in lags], dtype=np.int64)
    if lags.size == 0:
        raise ValueError("lags is empty")
    k = check_int("k", k, 1)
    dt = check_real("dt", dt, 0.0, low_open=True)
    n_bootstrap = check_int("n_bootstrap", n_bootstrap, 0)
    confidence = check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    n_blocks = check_int("n_blocks", n_blocks, 2)
    rng = np.random.default_rng(check_seed(seed))
    trajs = _trajectories(data)
    factory = _factory(estimator, refit_features)
    ts = _scan(factory, trajs, lags, k, dt)
    out = ImpliedTimescales(lags, lags * dt, ts, confidence=confidence)
    if n_bootstrap:
        units = trajs if len(trajs) > 1 else _blocks(trajs[0], n_blocks)
        samples = np.empty((n_bootstrap, lags.size, k))
        for b in range(n_bootstrap):
            pick = rng.integers(len(units), size=len(units))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # lag-mismatch notices
                samples[b] = _scan(factory, [units[i] for i in pick], lags, k, dt)
        alpha = 100 * (1 - confidence) / 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            out.lower = np.nanpercentile(samples, alpha, axis=0)
            out.upper = np.nanpercentile(samples, 100 - alpha, axis=0)
        out.samples = samples
    return out


def _trajectories(data: Any) -> list[np.ndarray]:
    if isinstance(data, (list, tuple)):
        if isinstance(data, tuple):
            raise TypeError("give trajectories (an array or a list of arrays), not (X, Y) pairs")
        if not data:
            raise ValueError("empty list of trajectories")
        return [check_states(t, f"trajectory {i}") for i, t in enumerate(data)]
    return [check_states(data, "trajectory")]


def _blocks(traj: np.ndarray, n_blocks: int) -> list[np.ndarray]:
    if traj.shape[0] < 2 * n_blocks:
        raise ValueError(
            f"a trajectory of {traj.shape[0]} frames is too short for {n_blocks} bootstrap "
            "blocks; pass several trajectories or fewer n_blocks"
        )
    return list(np.array_split(traj, n_blocks))


def _factory(estimator: Any, refit_features: bool) -> Callable[[int, list], Any]:
    """``build(lag, trajectories)`` -> an estimator to fit at ``lag``.

    A dpnets feature estimator that is not fitted (``TransferOperator(DPNet(...))``, or
    every clone when ``refit_features``) is trained by the operator's own ``fit`` (the
    composite model); otherwise the fitted feature map is kept and only the operator is
    refitted.
    """
    if isinstance(estimator, BaseEstimator):
        if not hasattr(estimator, "implied_timescales") or not hasattr(estimator, "fit"):
            raise TypeError(f"{type(estimator).__name__} has no implied timescales")

        def make(lag: int) -> Any:
            est = clone(estimator)
            if "features" in estimator.get_params(deep=False) and not refit_features:
                fitted = getattr(estimator, "features_", None)
                est.set_params(features=estimator.features if fitted is None else fitted)
            return est

    elif callable(estimator):
        make = estimator
    else:
        raise TypeError("estimator must be a dpnets estimator or a callable lag -> estimator")

    def build(lag: int, trajs: list[np.ndarray]) -> Any:
        est = make(lag)
        features = (
            est.get_params(deep=False).get("features") if hasattr(est, "get_params") else None
        )
        if refit_features and isinstance(features, BaseEstimator) and is_fitted(features):
            est.set_params(features=clone(features))
        return est

    return build


def _scan(build: Callable, trajs: list[np.ndarray], lags: np.ndarray, k: int, dt: float):
    out = np.full((lags.size, k), np.nan)
    longest = max(t.shape[0] for t in trajs)
    for j, lag in enumerate(lags):
        usable = [t for t in trajs if t.shape[0] > lag]
        if lag >= longest or not usable:
            continue
        est = build(int(lag), usable)
        with warnings.catch_warnings():  # fixed features at other lags: intended here
            warnings.filterwarnings("ignore", message=".*validating across lags")
            est.fit(usable, lag=int(lag))
        ts = np.asarray(est.implied_timescales(dt), dtype=np.float64)
        finite = np.sort(ts[np.isfinite(ts) & (ts > 0)])[::-1][:k]
        out[j, : finite.size] = finite
    return out


def cross_validate(
    estimator: Any,
    data: Any,
    *,
    lag: int = 1,
    cv: int = 5,
    kind: str = "vamp2",
    refit_features: bool = False,
    seed: int | None = None,
) -> np.ndarray:
    """Held-out VAMP scores, splitting by whole trajectories.

    The trajectories are shuffled (``seed``) and split into ``cv`` folds; a single
    trajectory is cut into ``cv`` contiguous blocks instead, so that no pair straddles the
    train/test boundary. For each fold the estimator is cloned, fitted on the other folds
    at ``lag`` (with ``refit_features``, a DPNet feature map is retrained on them too;
    otherwise fitted features are used as they are, which leaks their training data into
    the test folds) and scored on the held-out fold with ``score(kind=...)``
    (``"vamp1"``/``"vamp2"``: comparable across models with the same number of features).

    Returns
    -------
    ndarray (cv,)
        One score per fold.
    """
    lag = check_lag(lag)
    cv = check_int("cv", cv, 2)
    trajs = _trajectories(data)
    if len(trajs) >= cv:
        order = np.random.default_rng(check_seed(seed)).permutation(len(trajs))
        folds = [[trajs[i] for i in part] for part in np.array_split(order, cv)]
    else:
        if len(trajs) > 1:
            raise ValueError(f"{len(trajs)} trajectories cannot make {cv} folds; lower cv")
        folds = [[block] for block in _blocks(trajs[0], cv)]
    build = _factory(estimator, refit_features)
    scores = np.empty(cv)
    for f in range(cv):
        train = [t for g, fold in enumerate(folds) if g != f for t in fold]
        est = build(lag, train)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*validating across lags")
            est.fit(train, lag=lag)
        scores[f] = est.score(folds[f], lag=lag, kind=kind)
    return scores


@dataclass
class ChapmanKolmogorov:
    """A Chapman–Kolmogorov test (:func:`ck_test`).

    ``predictions[k, i, j]`` is the probability, predicted by the model at lag ``tau``
    propagated ``steps[k]`` times, to be in set ``j`` at ``steps[k] * tau`` when starting in
    set ``i`` from the model's equilibrium; ``estimates[k, i, j]`` the same from a model
    refitted at lag ``steps[k] * tau``. A Markovian model has predictions equal to estimates.
    """

    steps: np.ndarray
    lag_times: np.ndarray
    predictions: np.ndarray
    estimates: np.ndarray

    def plot(self, units: str = "") -> Any:
        """The ``n_sets x n_sets`` grid of predicted (line) against estimated (markers)
        curves over the lag time; needs matplotlib. Returns the figure."""
        import matplotlib.pyplot as plt

        n = self.predictions.shape[1]
        fig, axes = plt.subplots(
            n,
            n,
            figsize=(2.2 * n + 1, 2.0 * n + 0.5),
            sharex=True,
            sharey=True,
            layout="constrained",
            squeeze=False,
        )
        unit = f" ({units})" if units else ""
        for i in range(n):
            for j in range(n):
                ax = axes[i, j]
                ax.plot(self.lag_times, self.predictions[:, i, j], "-", label="predicted")
                ax.plot(self.lag_times, self.estimates[:, i, j], "o", label="estimated")
                ax.set_title(f"{i} → {j}", fontsize="small")
                ax.set_ylim(-0.05, 1.05)
                if i == n - 1:
                    ax.set_xlabel(f"lag time{unit}")
                if j == 0:
                    ax.set_ylabel("probability")
        axes[0, 0].legend(fontsize="x-small")
        return fig


def ck_test(
    model: Any,
    data: Any,
    steps: Sequence[int],
    memberships: Callable[[np.ndarray], np.ndarray],
    *,
    dt: float = 1.0,
    include_lag0: bool = True,
) -> ChapmanKolmogorov:
    """Chapman–Kolmogorov test of a fitted transfer-operator model on sets of states.

    With ``m_i`` the membership functions of the sets (indicators, or fuzzy memberships
    summing to one), the model at lag ``tau`` predicts
    ``p_k[i, j] = E_pi[m_i(X_0) (K^k m_j)(X_0)] / E_pi[m_i(X_0)]`` (``K^k m_j`` from
    :meth:`predict` with the values of ``m_j`` at the lagged training states), and a model
    refitted at lag ``k tau`` on the same features estimates it with ``K_{k tau} m_j``. The
    equilibrium ``pi`` is the model's (:meth:`TransferOperator.stationary_weights` on its
    training inputs), so off-equilibrium data are handled. On indicator features this is
    deeptime's ``ck_test`` with a ``MembershipsObservable`` of the same sets (tested to 1e-8).

    Parameters
    ----------
    model : fitted TransferOperator (or DMD/EDMD)
        Fitted at its lag ``tau`` (``lag_``) on ``data``.
    data : array or list of arrays
    steps : sequence of int
        Multiples ``k`` of the lag.
    memberships : callable
        States ``(n, ...)`` -> memberships ``(n, n_sets)``.
    dt : float, default 1.0
        Time between frames (for ``lag_times``).
    include_lag0 : bool, default True
        Start the curves at lag 0 (the identity).
    """
    from dpnets.data import pairs

    if getattr(model, "operator_", None) is None or getattr(model, "lag_", None) is None:
        raise ValueError("ck_test needs a transfer-operator model fitted on trajectories")
    steps = np.array([check_lag(int(k)) for k in steps], dtype=np.int64)
    dt = check_real("dt", dt, 0.0, low_open=True)
    trajs = _trajectories(data)
    tau = int(model.lag_)
    base = pairs(trajs, tau)
    x0 = base.X
    weights = np.real(model.stationary_weights(x0))
    m0 = _memberships(memberships, x0)
    norm = (weights[:, None] * m0).sum(0)  # E_pi[m_i], up to the sample count

    def propagate(op: Any, t: int, lag: int) -> np.ndarray:
        p = pairs(trajs, lag)
        values = _memberships(memberships, p.Y)
        km = np.real(op.predict(x0, t=t, observable=values))  # (n, n_sets): K^t m_j at x0
        return (weights[:, None] * m0).T @ km / norm[:, None]

    predictions, estimates = [], []
    for k in steps:
        predictions.append(propagate(model, int(k), tau))
        refit = clone(model)
        if "features" in model.get_params(deep=False):
            refit.set_params(features=model.features_)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*validating across lags")
            refit.fit(trajs, lag=int(k) * tau)
        estimates.append(propagate(refit, 1, int(k) * tau))
    predictions, estimates = np.array(predictions), np.array(estimates)
    if include_lag0:
        eye = np.eye(m0.shape[1])[None]
        predictions = np.concatenate([eye, predictions])
        estimates = np.concatenate([eye, estimates])
        steps = np.concatenate([[0], steps])
    return ChapmanKolmogorov(steps, steps * tau * dt, predictions, estimates)


def _memberships(memberships: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    m = np.asarray(memberships(x), dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != x.shape[0]:
        raise ValueError(f"memberships must return (n, n_sets) for n = {x.shape[0]}; got {m.shape}")
    return m
