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
from dpnets.data import check_frames, check_lag, check_states
from dpnets.params import check_int, check_real, check_seed

__all__ = [
    "ImpliedTimescales",
    "implied_timescales",
    "cross_validate",
    "ChapmanKolmogorov",
    "ck_test",
    "Spectrum",
    "bootstrap_spectrum",
    "bootstrap_trajectories",
    "percentile_interval",
    "MetastableSets",
    "pcca",
    "check_lags",
    "sets_from_gap",
    "resamples_needed",
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

    def __repr__(self) -> str:
        """A summary: one row per lag, ``timescale [lower, upper]`` per process."""
        head = f"ImpliedTimescales({self.timescales.shape[1]} processes, {self.lags.size} lags"
        if self.samples is not None:
            head += f", {100 * self.confidence:g}% intervals from {len(self.samples)} resamples"
        rows = [
            head + ")",
            "  lag time | " + " | ".join(f"t{i + 1}" for i in range(self.timescales.shape[1])),
        ]
        for j, t in enumerate(self.lag_times):
            cells = [
                _cell(self.timescales[j, i], self.lower, self.upper, (j, i))
                for i in range(self.timescales.shape[1])
            ]
            rows.append(f"  {t:8.4g} | " + " | ".join(cells))
        return "\n".join(rows)

    def plot(self, ax: Any = None, units: str = "", log: bool = True) -> Any:
        """Timescales against lag time with interval bands and the ``timescale = lag`` line
        (:func:`dpnets.plot.implied_timescales`); returns the axes."""
        from dpnets.plot import implied_timescales as plot_its

        return plot_its(self, ax=ax, units=units, log=log)


def implied_timescales(
    estimator: Any,
    data: Any,
    lags: Sequence[int],
    *,
    k: int = 3,
    dt: float | None = None,
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
    dt : float, optional
        Time between frames: timescales and lag times are in its units. Default: the
        estimator's ``dt`` (e.g. ``TransferOperator(..., dt=0.1)``), else 1 (frames).
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

    Warns
    -----
    RuntimeWarning
        When more than one real eigenvalue equals 1 (disconnected data, or a feature exactly
        constant along each trajectory), or when a timescale is longer than the longest
        trajectory (no such data can resolve it; the usual cause is a learned feature that is
        nearly constant along each trajectory, whose eigenvalue does not decay with the lag:
        its timescale then grows in proportion to the lag).
    """
    k = check_int("k", k, 1)
    dt = _time_step(estimator, dt)
    n_bootstrap, confidence, n_blocks, rng = _bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed
    )
    trajs = _trajectories(data)
    lags = check_lags(lags, "lags", max(t.shape[0] for t in trajs))
    factory = _factory(estimator, refit_features)
    stationary: list[tuple[float, int]] = []
    ts = _scan(factory, trajs, lags, k, dt, stationary)
    _warn_unresolvable(ts, lags, dt, max(t.shape[0] for t in trajs))
    if stationary:
        warnings.warn(
            f"{max(n for _, n in stationary)} real eigenvalues equal to 1 at lag(s) "
            f"{', '.join(f'{t:g}' for t, _ in stationary)}: besides the stationary one, some "
            "feature combination never decays, so the data look split into parts that never "
            "exchange (a feature constant along each trajectory, or trajectories that never "
            "visit each other's states). Those modes have infinite timescales and are left "
            "out of the table; check the features and the connectivity of the data.",
            RuntimeWarning,
            stacklevel=2,
        )
    out = ImpliedTimescales(lags, lags * dt, ts, confidence=confidence)
    if n_bootstrap:
        out.samples = _bootstrap(
            trajs, n_bootstrap, n_blocks, rng, lambda t: _scan(factory, t, lags, k, dt)
        )
        out.lower, out.upper = _interval(out.samples, confidence)
        _warn_outside(out.timescales, out.lower, out.upper, "timescales", confidence)
    return out


def _time_step(model: Any, dt: Any) -> float:
    """The time per frame: ``dt`` when given, else the model's ``dt`` parameter, else 1."""
    if dt is None:
        dt = getattr(model, "dt", None)
        dt = 1.0 if dt is None else dt
    return check_real("dt", dt, 0.0, low_open=True)


def _cell(value: float, lower: Any, upper: Any, index: tuple) -> str:
    """``value [lower, upper]`` (or ``value`` without an interval), 4 significant digits."""
    if lower is None or upper is None:
        return f"{value:.4g}"
    return f"{value:.4g} [{lower[index]:.4g}, {upper[index]:.4g}]"


def _bootstrap_settings(
    n_bootstrap: Any, confidence: Any, n_blocks: Any, seed: Any, minimum: int = 0
) -> tuple[int, float, int, np.random.Generator]:
    """Checked bootstrap parameters and the random generator of the draws; warns when
    ``n_bootstrap`` is too few for ``confidence`` (:func:`resamples_needed`)."""
    n = check_int("n_bootstrap", n_bootstrap, minimum)
    confidence = check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    needed = resamples_needed(confidence)
    if 0 < n < needed:
        warnings.warn(
            f"n_bootstrap={n} is too few for {100 * confidence:g}% intervals: a percentile "
            f"interval needs at least {needed} resamples for each tail to hold one, so these "
            f"bounds are just the extreme resamples; use n_bootstrap >= {needed}",
            RuntimeWarning,
            stacklevel=3,
        )
    return (
        n,
        confidence,
        check_int("n_blocks", n_blocks, 2),
        np.random.default_rng(check_seed(seed)),
    )


def resamples_needed(confidence: float) -> int:
    """Fewest bootstrap resamples whose percentile interval at ``confidence`` has at least
    one resample in each tail: ``ceil(2 / (1 - confidence))`` (40 for 95%)."""
    return int(np.ceil(2.0 / (1.0 - float(confidence)) - 1e-9))


def _warn_outside(estimate: Any, lower: Any, upper: Any, what: str, confidence: float) -> None:
    """Flag estimates that lie outside their own bootstrap interval (the resampled fits are
    then biased against the full fit, and the interval is no error bar for it)."""
    est, lo, hi = (np.asarray(a, dtype=np.float64) for a in (estimate, lower, upper))
    tol = 1e-9 * np.maximum(1.0, np.abs(est))  # round-off (the stationary eigenvalue 1)
    with np.errstate(invalid="ignore"):
        beyond = (est < lo - tol) | (est > hi + tol)
        out = np.isfinite(est) & np.isfinite(lo) & np.isfinite(hi) & beyond
    if not out.any():
        return
    i = tuple(np.argwhere(out)[0])
    warnings.warn(
        f"{int(out.sum())} {what} lie outside their own {100 * confidence:g}% bootstrap "
        f"interval (e.g. {est[i]:.4g} [{lo[i]:.4g}, {hi[i]:.4g}]): the refits on resamples are "
        "biased against the fit on all the data (few trajectories or blocks, or few "
        "resamples), so these intervals are no error bars for the estimates; use more "
        "trajectories (or n_blocks) and resamples",
        RuntimeWarning,
        stacklevel=3,
    )


def _bootstrap(
    trajs: list[np.ndarray],
    n_bootstrap: int,
    n_blocks: int,
    rng: np.random.Generator,
    statistic: Callable[[list[np.ndarray]], Any],
) -> np.ndarray:
    """``statistic`` on ``n_bootstrap`` resamples of whole trajectories (drawn with
    replacement; a single trajectory is cut into ``n_blocks`` contiguous blocks, drawn
    instead), stacked along a new first axis."""
    units = trajs if len(trajs) > 1 else _blocks(trajs[0], n_blocks)
    out = []
    for _ in range(n_bootstrap):
        pick = rng.integers(len(units), size=len(units))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # lag-mismatch notices
            out.append(np.asarray(statistic([units[i] for i in pick])))
    return np.stack(out)


def bootstrap_trajectories(
    trajs: Sequence[np.ndarray],
    statistic: Callable[[list[np.ndarray]], Any],
    n_bootstrap: int,
    *,
    n_blocks: int = 10,
    seed: int | None = 0,
) -> np.ndarray:
    """``statistic`` on ``n_bootstrap`` resamples of whole trajectories.

    The resampling behind :func:`implied_timescales` and :func:`bootstrap_spectrum`, for any
    statistic: trajectories are drawn with replacement (a single trajectory is cut into
    ``n_blocks`` contiguous blocks, which are drawn instead), so correlations within a
    trajectory are kept.

    Parameters
    ----------
    trajs : sequence of ndarray
        The trajectories (any arrays whose first axis is time).
    statistic : callable
        ``statistic(list_of_trajectories) -> array``, the same shape for every resample.
    n_bootstrap : int
        Number of resamples, >= 1.
    n_blocks : int, default 10
        Blocks of a single trajectory.
    seed : int or None, default 0
        Seed of the draws.

    Returns
    -------
    ndarray (n_bootstrap, ...)
        The statistic of each resample, stacked along a new first axis.
    """
    n_bootstrap, _, n_blocks, rng = _bootstrap_settings(n_bootstrap, 0.5, n_blocks, seed, 1)
    trajs = list(trajs)
    if not trajs:
        raise ValueError("trajs must hold at least one trajectory")
    return _bootstrap(trajs, n_bootstrap, n_blocks, rng, statistic)


def percentile_interval(
    samples: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap ``samples`` over their first axis, ignoring NaNs
    (columns whose every sample is ``+inf``, e.g. the timescale of an eigenvalue 1, give
    ``inf``)."""
    confidence = check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    return _interval(np.asarray(samples, dtype=float), confidence)


def _interval(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap ``samples`` (first axis), ignoring NaNs."""
    alpha = 100 * (1 - confidence) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns, inf - inf
        lower = np.nanpercentile(samples, alpha, axis=0)
        upper = np.nanpercentile(samples, 100 - alpha, axis=0)
    stationary = np.all(np.isposinf(samples), axis=0)  # e.g. the timescale of lambda = 1
    lower[stationary] = upper[stationary] = np.inf
    return lower, upper


def _fit_at(est: Any, trajs: Any, lag: int) -> Any:
    """``est`` fitted on ``trajs`` at ``lag`` (its parameter ``lag``; a factory's estimator
    without one is fitted as it is). Fitted features of another lag, and the lag of an
    unfitted feature estimator, are meant to be overridden here: those notices are muted."""
    if hasattr(est, "get_params") and "lag" in est.get_params(deep=False):
        est.set_params(lag=int(lag))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*validating across lags")
        warnings.filterwarnings("ignore", message=".*overrides the lag")
        return est.fit(trajs)


def _refit_at(model: Any, trajs: list[np.ndarray], lag: int) -> Any:
    """A copy of a fitted model refitted on ``trajs`` at ``lag``, its feature map kept."""
    refit = clone(model)
    if "features" in model.get_params(deep=False):
        refit.set_params(features=model.features_)
    return _fit_at(refit, trajs, lag)


@dataclass
class Spectrum:
    """Eigenvalues and implied timescales of a fitted model with bootstrap intervals
    (:func:`bootstrap_spectrum`).

    Attributes
    ----------
    eigvals : ndarray (k,), complex
        The model's ``k`` leading eigenvalues (decreasing modulus).
    timescales : ndarray (k,)
        Their implied timescales in time units (``inf`` for the stationary one).
    modulus_lower, modulus_upper, lower, upper : ndarray (k,)
        Percentile intervals of ``|eigvals|`` and of the timescales over resamples of whole
        trajectories, the ``i``-th values of each resample ranked by modulus.
    samples : ndarray (n_bootstrap, k), complex
        The bootstrap eigenvalues.
    confidence : float
    """

    eigvals: np.ndarray
    timescales: np.ndarray
    modulus_lower: np.ndarray
    modulus_upper: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    samples: np.ndarray
    confidence: float = 0.95

    def __repr__(self) -> str:
        """A summary: one row per eigenvalue, ``|lambda| [interval]`` and timescale."""
        rows = [
            f"Spectrum({self.eigvals.size} eigenvalues, {100 * self.confidence:g}% intervals "
            f"from {len(self.samples)} resamples)",
            "  k | eigenvalue | |eigenvalue| [interval] | timescale [interval]",
        ]
        for i, lam in enumerate(self.eigvals):
            mod = _cell(abs(lam), self.modulus_lower, self.modulus_upper, (i,))
            ts = _cell(self.timescales[i], self.lower, self.upper, (i,))
            rows.append(f"  {i} | {lam:.4g} | {mod} | {ts}")
        return "\n".join(rows)


def bootstrap_spectrum(
    model: Any,
    data: Any,
    *,
    k: int = 4,
    dt: float | None = None,
    n_bootstrap: int = 100,
    confidence: float = 0.95,
    n_blocks: int = 10,
    refit_features: bool = False,
    seed: int | None = None,
) -> Spectrum:
    """Bootstrap intervals for the eigenvalues and implied timescales of a fitted model.

    The model is refitted at its lag on resamples of whole trajectories (a single
    trajectory: contiguous blocks), keeping its feature map (``refit_features=True``: a
    DPNet feature map is retrained on each resample too, which is slower and includes the
    representation's variance).

    Parameters
    ----------
    model : fitted TransferOperator, DMD, EDMD or kernel model
    data : array or list of arrays
        The trajectories the model was fitted on.
    k : int, default 4
        Leading eigenvalues to report (the stationary one included).
    dt : float, optional
        Time per frame; default the model's ``dt``.
    n_bootstrap, confidence, n_blocks, seed
        As :func:`implied_timescales`.
    """
    if getattr(model, "operator_", None) is None or getattr(model, "lag_", None) is None:
        raise ValueError("bootstrap_spectrum needs a model fitted on trajectories (lag_ set)")
    k = check_int("k", k, 1)
    n_eig = int(np.asarray(model.eig()).size)
    if k > n_eig:
        raise ValueError(
            f"k={k} exceeds the model's {n_eig} eigenvalues (the stationary one included); "
            f"use k <= {n_eig}"
        )
    n_bootstrap, confidence, n_blocks, rng = _bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed, minimum=1
    )
    trajs = _trajectories(data)
    tau = int(model.lag_)
    build = _factory(model, refit_features)

    def leading(est: Any) -> np.ndarray:
        vals = np.full(k, np.nan, dtype=np.complex128)
        ev = np.asarray(est.eig())[:k]
        vals[: ev.size] = ev
        return vals

    def statistic(sample: list[np.ndarray]) -> np.ndarray:
        if refit_features:
            return leading(_fit_at(build(tau, sample), sample, tau))
        return leading(_refit_at(model, sample, tau))

    samples = _bootstrap(trajs, n_bootstrap, n_blocks, rng, statistic)
    vals = leading(model)
    from dpnets.spectral import timescales_from_eigvals

    step = tau * (
        getattr(model, "dt", 1.0) if dt is None else check_real("dt", dt, 0.0, low_open=True)
    )
    mod_lo, mod_hi = _interval(np.abs(samples), confidence)
    ts_samples = timescales_from_eigvals(np.nan_to_num(np.abs(samples), nan=0.0), step)
    ts_samples[np.isnan(samples.real)] = np.nan
    ts_lo, ts_hi = _interval(ts_samples, confidence)
    _warn_outside(np.abs(vals), mod_lo, mod_hi, "eigenvalue moduli", confidence)
    return Spectrum(
        vals,
        timescales_from_eigvals(vals, step),
        mod_lo,
        mod_hi,
        ts_lo,
        ts_hi,
        samples,
        confidence,
    )


def check_lags(values: Any, name: str, longest: int, unit: int = 1) -> np.ndarray:
    """Validate a sequence of lags (or CK steps of ``unit`` frames each): positive integers,
    never rounded, each ``value * unit`` shorter than the ``longest`` trajectory (else no
    pair exists). Returns them as an int64 array; a clear ``ValueError`` names ``name``."""
    if values is None or isinstance(values, (str, bytes)) or np.ndim(values) != 1:
        raise ValueError(f"{name} must be a sequence of positive integers, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be positive integers, got {v!r} (nothing is rounded)")
        if int(v) * unit >= longest:
            what = f"{name[:-1]} {int(v)}" + (f" ({int(v) * unit} frames)" if unit > 1 else "")
            raise ValueError(
                f"{what} is not shorter than the longest trajectory ({longest} frames): no "
                "pair of frames that far apart exists"
            )
        out.append(int(v))
    if not out:
        raise ValueError(f"{name} is empty: give at least one")
    return np.asarray(out, dtype=np.int64)


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


def _warn_unresolvable(ts: np.ndarray, lags: np.ndarray, dt: float, longest: int) -> None:
    """Warn when a timescale exceeds the longest trajectory: no data can resolve it, and the
    usual cause is a feature that is (nearly) constant along each trajectory, whose
    eigenvalue does not decay with the lag (its timescale then grows in proportion to it)."""
    duration = longest * dt
    bad = np.isfinite(ts) & (ts > duration)
    if not bad.any():
        return
    rows = np.flatnonzero(bad.any(axis=1))
    worst = float(np.nanmax(np.where(bad, ts, np.nan)))
    warnings.warn(
        f"implied timescales up to {worst:.4g} at lag(s) "
        f"{', '.join(f'{lags[j] * dt:g}' for j in rows)} are longer than the longest "
        f"trajectory ({duration:g}): these data cannot resolve them. The usual cause is a "
        "feature that is nearly constant along each trajectory (its eigenvalue does not decay "
        "with the lag, so its timescale grows in proportion to the lag); check the learned "
        "features (e.g. fewer of them, or another seed) or use longer trajectories.",
        RuntimeWarning,
        stacklevel=3,
    )


def _scan(
    build: Callable,
    trajs: list[np.ndarray],
    lags: np.ndarray,
    k: int,
    dt: float,
    stationary: list[tuple[float, int]] | None = None,
):
    """The ``k`` slowest finite timescales at each lag; ``stationary`` (if given) collects
    ``(lag time, count)`` where more than one real eigenvalue is 1 (infinite timescales)."""
    out = np.full((lags.size, k), np.nan)
    longest = max(t.shape[0] for t in trajs)
    for j, lag in enumerate(lags):
        usable = [t for t in trajs if t.shape[0] > lag]
        if lag >= longest or not usable:
            continue
        est = _fit_at(build(int(lag), usable), usable, int(lag))
        ts = np.asarray(est.implied_timescales(dt), dtype=np.float64)
        if stationary is not None:
            eig = np.asarray(est.eig())
            n_unit = int(np.sum(np.isposinf(ts) & (np.abs(eig.imag) < 1e-8) & (eig.real > 0)))
            if n_unit > 1:
                stationary.append((float(lag * dt), n_unit))
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
        est = _fit_at(build(lag, train), train, lag)
        scores[f] = est.score(folds[f], lag=lag, kind=kind)
    return scores


@dataclass
class ChapmanKolmogorov:
    """A Chapman–Kolmogorov test (:func:`ck_test`).

    ``predictions[k, i, j]`` is the probability, predicted by the model at lag ``tau``
    propagated ``steps[k]`` times, to be in set ``j`` at ``steps[k] * tau`` when starting in
    set ``i`` from the model's equilibrium; ``estimates[k, i, j]`` the same from a model
    refitted at lag ``steps[k] * tau``. A Markovian model has predictions equal to estimates
    (within the intervals, when bootstrapped).

    ``*_lower``/``*_upper``: percentile intervals over resamples of whole trajectories
    (None without bootstrap).
    """

    steps: np.ndarray
    lag_times: np.ndarray
    predictions: np.ndarray
    estimates: np.ndarray
    predictions_lower: np.ndarray | None = None
    predictions_upper: np.ndarray | None = None
    estimates_lower: np.ndarray | None = None
    estimates_upper: np.ndarray | None = None
    confidence: float = 0.95

    def plot(self, units: str = "", names: Sequence[str] | None = None) -> Any:
        """The grid of predicted against estimated curves (:func:`dpnets.plot.ck_test`)."""
        from dpnets.plot import ck_test as plot_ck

        return plot_ck(self, units=units, names=names)


def ck_test(
    model: Any,
    data: Any,
    steps: Sequence[int],
    memberships: Callable[[np.ndarray], np.ndarray],
    *,
    dt: float | None = None,
    include_lag0: bool = True,
    n_bootstrap: int = 0,
    confidence: float = 0.95,
    n_blocks: int = 10,
    seed: int | None = None,
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
    model : fitted TransferOperator (or DMD/EDMD, kernel models, autoencoders)
        Fitted at its lag ``tau`` (``lag_``) on ``data``.
    data : array or list of arrays
    steps : sequence of int
        Multiples ``k`` of the lag.
    memberships : callable
        States ``(n, ...)`` -> memberships ``(n, n_sets)`` (e.g.
        :attr:`MetastableSets.memberships_of` from :func:`pcca`).
    dt : float, optional
        Time between frames (for ``lag_times``); default the model's ``dt``, else 1.
    include_lag0 : bool, default True
        Start the curves at lag 0 with the value the estimator gives there,
        ``E_pi[m_i m_j] / E_pi[m_i]`` on the data: the identity for crisp sets (the default
        of :meth:`MetastableSets.memberships_of`), the sets' self-overlap for fuzzy ones.
    n_bootstrap : int, default 0
        Resamples of whole trajectories (a single trajectory: ``n_blocks`` contiguous
        blocks); the model is refitted at ``tau`` on each, its features kept, and both
        curves recomputed.
    confidence : float, default 0.95
    n_blocks : int, default 10
    seed : int, optional
    """
    if getattr(model, "operator_", None) is None or getattr(model, "lag_", None) is None:
        raise ValueError("ck_test needs a transfer-operator model fitted on trajectories")
    dt = _time_step(model, dt)
    n_bootstrap, confidence, n_blocks, rng = _bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed
    )
    trajs = _trajectories(data)
    tau = int(model.lag_)
    steps = check_lags(steps, "steps", max(t.shape[0] for t in trajs), unit=tau)
    lag0 = bool(include_lag0)
    pred, est = _ck_curves(model, trajs, steps, memberships, lag0)
    shown = np.concatenate([[0], steps]) if lag0 else steps
    out = ChapmanKolmogorov(shown, shown * tau * dt, pred, est, confidence=confidence)
    if n_bootstrap:

        def statistic(sample: list[np.ndarray]) -> np.ndarray:
            refit = _refit_at(model, sample, tau)
            return np.stack(_ck_curves(refit, sample, steps, memberships, lag0))

        samples = _bootstrap(trajs, n_bootstrap, n_blocks, rng, statistic)
        lower, upper = _interval(samples, confidence)
        out.predictions_lower, out.estimates_lower = lower
        out.predictions_upper, out.estimates_upper = upper
    return out


def _ck_curves(
    model: Any,
    trajs: list[np.ndarray],
    steps: np.ndarray,
    memberships: Callable,
    lag0: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted and estimated set-to-set probabilities, (len(steps), n_sets, n_sets) each;
    with ``lag0`` both start with the value at lag 0, ``E_pi[m_i m_j] / E_pi[m_i]`` on the
    data (the identity for crisp sets, the self-overlap of fuzzy ones; never drawn)."""
    from dpnets.data import pairs

    tau = int(model.lag_)
    if not model.holds_training_data:  # a loaded model: its operator re-estimated on trajs
        model = _refit_at(model, trajs, tau)
    x0 = pairs(trajs, tau).X
    weights = np.real(model.stationary_weights(x0))
    m0 = _memberships(memberships, x0)
    norm = (weights[:, None] * m0).sum(0)  # E_pi[m_i], up to the sample count

    def propagate(op: Any, t: int, lag: int) -> np.ndarray:
        values = _memberships(memberships, pairs(trajs, lag).Y)
        km = np.real(op.predict(x0, t=t, observable=values))  # (n, n_sets): K^t m_j at x0
        return (weights[:, None] * m0).T @ km / norm[:, None]

    predictions, estimates = [], []
    if lag0:
        overlap = (weights[:, None] * m0).T @ m0 / norm[:, None]
        predictions.append(overlap)
        estimates.append(overlap)
    for k in steps:
        predictions.append(propagate(model, int(k), tau))
        estimates.append(propagate(_refit_at(model, trajs, int(k) * tau), 1, int(k) * tau))
    return np.array(predictions), np.array(estimates)


def _memberships(memberships: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    m = np.asarray(memberships(x), dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != x.shape[0]:
        raise ValueError(f"memberships must return (n, n_sets) for n = {x.shape[0]}; got {m.shape}")
    return m


# ------------------------------------------------------------------------------ PCCA+
@dataclass
class MetastableSets:
    """Metastable sets of a model by PCCA+ (:func:`pcca`).

    Attributes
    ----------
    memberships : ndarray (n_frames, n_sets)
        Fuzzy memberships of the frames (non-negative, rows sum to 1).
    assignments : ndarray (n_frames,)
        The set of largest membership of each frame.
    coarse_transition_matrix : ndarray (n_sets, n_sets)
        Transition probabilities between the sets in one lag (row-stochastic).
    stationary : ndarray (n_sets,)
        Equilibrium probability of each set.
    rotation : ndarray (n_sets, n_sets)
        ``memberships = [1, phi_1, ..., phi_{n-1}] @ rotation`` in the normalised eigenfunctions.
    """

    memberships: np.ndarray
    assignments: np.ndarray
    coarse_transition_matrix: np.ndarray
    stationary: np.ndarray
    rotation: np.ndarray
    _model: Any = None
    _scale: np.ndarray | None = None

    def memberships_of(self, X: Any, crisp: bool = True) -> np.ndarray:
        """Memberships of states (e.g. for :func:`ck_test`).

        ``crisp=True`` (default): the indicator of each state's most likely set, so that a
        Chapman-Kolmogorov test on the sets reads as transition probabilities between
        them (fuzzy memberships mix the sets' self-overlap ``E[m^2] / E[m]`` into every
        curve, which reads as "not metastable" on a metastable system). ``crisp=False``:
        the fuzzy PCCA+ memberships, clipped and renormalised as for the frames.
        """
        phi = np.real(self._model.eigenfunctions(X))[:, : self.rotation.shape[0]] / self._scale
        phi[:, 0] = 1.0
        fuzzy = _clip_rows(phi @ self.rotation)
        if not crisp:
            return fuzzy
        return np.eye(fuzzy.shape[1])[np.argmax(fuzzy, axis=1)]

    def fuzzy_memberships_of(self, X: Any) -> np.ndarray:
        """The fuzzy PCCA+ memberships of states (``memberships_of(X, crisp=False)``)."""
        return self.memberships_of(X, crisp=False)


def sets_from_gap(eigvals: Any, max_sets: int = 6) -> tuple[int, str]:
    """The number of metastable sets the spectrum suggests, and why.

    ``n`` sets describe the ``n - 1`` slowest processes; the choice is the ``n`` in
    ``2..max_sets`` with the largest gap ``|lambda_{n-1}| - |lambda_n|`` between the moduli
    of the eigenvalues (decreasing; the first is the stationary one), a process the model
    does not hold counting as ``|lambda| = 0`` (unresolved at the lag). Returns
    ``(n, reason)``.
    """
    check_int("max_sets", max_sets, 2)
    mod = np.sort(np.abs(np.asarray(eigvals)))[::-1][1:]  # without the stationary one
    if mod.size == 0:
        raise ValueError("the model has no non-stationary eigenvalue: no metastable sets")
    top = min(int(max_sets), mod.size + 1)
    padded = np.concatenate([mod, [0.0]])
    gaps = [padded[n - 2] - padded[n - 1] for n in range(2, top + 1)]
    best = int(np.argmax(gaps)) + 2
    return best, (
        f"the largest gap in |eigenvalue| is after {best - 1} process(es): "
        f"{padded[best - 2]:.3g} then {padded[best - 1]:.3g}"
    )


def pcca(model: Any, X: Any, n_sets: int, weights: Any = None) -> MetastableSets:
    """PCCA+ metastable sets from the leading eigenfunctions of a model, evaluated at frames.

    The algorithm is deeptime's PCCA+ (Röblitz and Weber, Adv. Data Anal. Classif. 7, 147,
    2013: the inner simplex algorithm, then the Nelder–Mead optimisation of the crispness of
    the memberships), applied to the eigenfunction values at the frames ``X`` instead of the
    eigenvectors of a transition matrix. Written here because deeptime's public ``pcca``
    takes a row-stochastic matrix on discrete states, which a model on continuous features
    does not have; on indicator features of a Markov chain, evaluated at its states, it gives
    deeptime's memberships (tested).

    Parameters
    ----------
    model : fitted TransferOperator (or another model with real leading eigenvalues)
        Its ``n_sets`` leading eigenvalues must be real (a reversible process).
    X : array (n, ...) or list of arrays
        Frames on which the sets are defined (e.g. the training trajectories: a list is
        taken frame by frame, in order).
    n_sets : int
        Number of metastable sets (>= 2).
    weights : array (n,), optional
        Equilibrium weights of the frames (default: the model's
        :meth:`~dpnets.TransferOperator.stationary_weights`, which handles off-equilibrium
        data); they normalise the eigenfunctions and weigh the coarse-grained matrix.

    Returns
    -------
    MetastableSets
        With the Galerkin coarse-grained matrix
        ``P_c = (chi^T W chi)^{-1} chi^T W Phi Lambda A`` (``W`` the weights,
        ``chi = Phi A``), renormalised to be row-stochastic.
    """
    n_sets = check_int("n_sets", n_sets, 2)
    lam = np.asarray(model.eig())
    if n_sets > lam.size:
        raise ValueError(f"n_sets={n_sets} exceeds the model's {lam.size} eigenvalues")
    lead = lam[:n_sets]
    if np.any(np.abs(lead.imag) > 1e-8 * np.maximum(1.0, np.abs(lead))):
        raise ValueError(
            f"the {n_sets} leading eigenvalues are not all real ({np.round(lead, 4)}): PCCA+ needs "
            "a reversible model; choose n_sets so as not to split a complex pair"
        )
    x = check_frames(X, "X")  # a list of trajectories: their frames, in order
    phi = np.real(model.eigenfunctions(x))[:, :n_sets]
    w = np.real(model.stationary_weights(x)) if weights is None else np.asarray(weights, float)
    if w.shape != (x.shape[0],) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be {x.shape[0]} finite values; got shape {w.shape}")
    w = np.clip(w, 0.0, None)
    w = w / w.sum()
    col0 = phi[:, 0]
    if np.ptp(col0) > 1e-6 * max(1.0, float(np.abs(col0).max())):
        raise ValueError(
            "the leading eigenfunction is not constant on X: the model has no stationary "
            "eigenvalue 1 in front (add the constant function, constant=True)"
        )
    scale = np.sqrt(w @ phi**2)  # unit norm under the equilibrium weights
    evecs = phi / scale
    evecs[:, 0] = 1.0
    rot = _pcca_isa(evecs)
    rot = _pcca_optimise(evecs, rot)
    chi = _clip_rows(evecs @ rot)
    # Galerkin coarse graining under the equilibrium weights
    wchi = chi * w[:, None]
    pc = np.linalg.solve(chi.T @ wchi, wchi.T @ (evecs * lead.real) @ rot)
    pc = np.clip(pc, 0.0, None)
    pc = pc / pc.sum(1, keepdims=True)
    stationary = chi.T @ w
    return MetastableSets(
        chi, np.argmax(chi, axis=1), pc, stationary / stationary.sum(), rot, model, scale
    )


def _clip_rows(chi: np.ndarray) -> np.ndarray:
    chi = np.clip(chi, 0.0, 1.0)
    return chi / chi.sum(1, keepdims=True)


def _pcca_isa(evecs: np.ndarray) -> np.ndarray:
    """Inner simplex algorithm (Deuflhard and Weber 2005): the rotation that maps the
    ``n`` most simplex-vertex-like frames to the unit vectors."""
    n = evecs.shape[1]
    ortho = evecs.copy()
    ind = np.zeros(n, dtype=np.int64)
    ind[0] = int(np.argmax(np.linalg.norm(evecs, axis=1)))
    ortho -= evecs[ind[0]]
    for k in range(1, n):
        temp = ortho[ind[k - 1]].copy()
        ortho -= np.outer(ortho @ temp, temp)
        dist = np.linalg.norm(ortho, axis=1)
        dist[ind[:k]] = -1.0
        ind[k] = int(np.argmax(dist))
        ortho /= np.linalg.norm(ortho[ind[k]])
    return np.linalg.inv(evecs[ind])


def _pcca_fill(crop: np.ndarray, evecs: np.ndarray) -> np.ndarray:
    """The feasible rotation from its inner block (memberships >= 0 summing to 1)."""
    full = np.concatenate([-crop.sum(1, keepdims=True), crop], axis=1)
    top = np.max(-(evecs[:, 1:] @ full), axis=0, keepdims=True)
    return np.concatenate([top, full], axis=0) / top.sum()


def _pcca_optimise(evecs: np.ndarray, rot: np.ndarray) -> np.ndarray:
    """Maximise the crispness ``sum_ij A_ji^2 / A_0i`` over feasible rotations (Nelder–Mead)."""
    from scipy.optimize import fmin

    n = evecs.shape[1]

    def objective(v: np.ndarray) -> float:
        a = _pcca_fill(v.reshape(n - 1, n - 1), evecs)
        return -float(np.sum(a**2 / a[0][None, :]))

    best = fmin(objective, rot[1:, 1:].ravel(), disp=False)
    return _pcca_fill(best.reshape(n - 1, n - 1), evecs)
