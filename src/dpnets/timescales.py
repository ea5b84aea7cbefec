"""Implied timescales against the lag, and the bootstrap spectrum of a model.

A transfer-operator model is trustworthy when its implied timescales do not depend on the
lag at which it was estimated (Markovianity in the span of its features): plot them against
the lag and look for the plateau, as MSM practitioners do (Prinz et al., J. Chem. Phys. 134,
174105, 2011; deeptime's ``implied_timescales``). :func:`implied_timescales` refits any dpnets
estimator at each lag, optionally refitting the learned features too, and gives bootstrap
intervals that resample whole trajectories (:mod:`dpnets.resampling`);
:func:`bootstrap_spectrum` gives those of one model's eigenvalues and timescales.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpnets.estimation import OperatorFit, operator_products
from dpnets.params import check_int, check_real
from dpnets.resampling import (
    TrajectorySums,
    as_trajectories,
    bootstrap_settings,
    check_units,
    estimate_text,
    fit_at_lag,
    fixed_feature_operator,
    interval_of,
    refit_at_lag,
    refit_factory,
    resample_trajectories,
    resample_units,
    resampling_units,
    time_step,
    warn_outside_interval,
    whole_trajectories,
)
from dpnets.training import progress_bar

__all__ = [
    "ImpliedTimescales",
    "implied_timescales",
    "Spectrum",
    "bootstrap_spectrum",
    "check_lags",
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
                estimate_text(self.timescales[j, i], self.lower, self.upper, (j, i))
                for i in range(self.timescales.shape[1])
            ]
            rows.append(f"  {t:8.4g} | " + " | ".join(cells))
        return "\n".join(rows)

    def plot(self, ax: Any = None, units: str = "", log: bool = True) -> Any:
        """Timescales against lag time with interval bands and the ``timescale = lag`` line
        (:func:`dpnets.plot.implied_timescales`); returns the figure."""
        from dpnets.plot import implied_timescales as plot_its

        return plot_its(self, ax=ax, units=units, log=log)


def implied_timescales(
    estimator: Any,
    data: Any,
    lags: Sequence[int],
    *,
    k: int | None = None,
    dt: float | None = None,
    refit_features: bool = False,
    n_bootstrap: int = 0,
    confidence: float = 0.95,
    n_blocks: int = 10,
    seed: int | None = None,
    progress: bool = False,
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
    k : int, optional
        Number of timescales (the stationary one excluded); default 3, or all the model has
        if fewer. A ``ValueError`` when ``k`` is given and the model has fewer (its
        eigenvalues less the stationary ones, at the lag where it has most), as
        :func:`bootstrap_spectrum` does; NaN is left only where a lag's fit has fewer finite
        timescales than another's (e.g. a negative eigenvalue).
    dt : float, optional
        Time between frames: timescales and lag times are in its units. Default: the
        estimator's ``dt`` (e.g. ``TransferOperator(..., dt=0.1)``), else 1 (frames).
    refit_features : bool, default False
    n_bootstrap : int, default 0
        Bootstrap resamples. Each draws whole trajectories with replacement (a single
        trajectory is cut into ``n_blocks`` contiguous blocks, which are drawn instead), and
        refits the operator at every lag. A :class:`TransferOperator` does so from sums: the
        features of each trajectory are computed once (once per lag where the features are
        trained at each lag), the moments of each trajectory (or block) at each lag once,
        and a resample is their weighted sum (the trajectories' draw counts) followed by the
        operator's own estimator, the same as a fit on the resampled trajectories to
        round-off, at the cost of a few fits in all. Features trained at each lag
        (``refit_features``, or an unfitted feature estimator) are trained once per lag on
        all the data and kept for the resamples at that lag: the intervals are those of the
        operator on those features (:func:`bootstrap_spectrum` with ``refit_features=True``
        also retrains the features on every resample). Other estimators are refitted on
        each resample.
    confidence : float, default 0.95
        Coverage of the percentile interval.
    n_blocks : int, default 10
    seed : int, optional
        Seeds the bootstrap draws.
    progress : bool, default False
        Progress bars over the lags and the resamples (needs tqdm, the ``progress`` extra;
        none without it).

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
    k = None if k is None else check_int("k", k, 1)
    dt = time_step(estimator, dt)
    n_bootstrap, confidence, n_blocks, rng = bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed
    )
    trajs = as_trajectories(data)
    lags = check_lags(lags, "lags", max(t.shape[0] for t in trajs))
    stationary: list[tuple[float, int]] = []
    boot = n_blocks if n_bootstrap else None
    scan = _LagScan(estimator, refit_features, trajs, lags, boot, progress)
    k = _check_k(k, [(est, int(lag)) for est, lag in zip(scan.fits, lags, strict=True)], dt)
    ts = np.full((lags.size, k), np.nan)
    for j, est in enumerate(scan.fits):
        ts[j] = _slowest(est, k, dt, int(lags[j]), stationary)
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
        out.samples = resample_units(
            scan.n_units,
            n_bootstrap,
            rng,
            lambda pick: np.stack(
                [
                    _slowest(e, k, dt, lag)
                    for e, lag in zip(scan.resample(pick), scan.lags, strict=True)
                ]
            ),
            progress,
            "implied timescales: bootstrap resamples",
        )
        out.lower, out.upper = interval_of(out.samples, confidence)
        warn_outside_interval(out.timescales, out.lower, out.upper, "timescales", confidence)
    return out


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
            mod = estimate_text(abs(lam), self.modulus_lower, self.modulus_upper, (i,))
            ts = estimate_text(self.timescales[i], self.lower, self.upper, (i,))
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
    progress: bool = False,
) -> Spectrum:
    """Bootstrap intervals for the eigenvalues and implied timescales of a fitted model.

    The model is refitted at its lag on resamples of whole trajectories (a single
    trajectory: contiguous blocks), keeping its feature map (``refit_features=True``: a
    DPNet feature map is retrained on each resample too, which is slower and includes the
    representation's variance). A :class:`TransferOperator` with its features kept is
    refitted from sums (the features of each trajectory computed once, a resample the
    draw-weighted sum of the trajectories' moments; see :func:`implied_timescales`).

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
    progress : bool, default False
        A progress bar over the resamples (needs tqdm).
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
    n_bootstrap, confidence, n_blocks, rng = bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed, minimum=1
    )
    trajs = as_trajectories(data)
    tau = int(model.lag_)
    build = refit_factory(model, refit_features)

    def leading(est: Any) -> np.ndarray:
        vals = np.full(k, np.nan, dtype=np.complex128)
        ev = _eigvals(est)[:k]
        vals[: ev.size] = ev
        return vals

    desc = "eigenvalues: bootstrap resamples"
    regression = fixed_feature_operator(model, refit_features)
    if regression is not None:  # refits from sums
        units = resampling_units(trajs, n_blocks)
        check_units(trajs, units, [tau])
        sums = TrajectorySums(*regression, trajs, [tau], [units])
        samples = resample_units(
            len(units),
            n_bootstrap,
            rng,
            lambda pick: leading(sums.fit(tau, 0, np.bincount(pick, minlength=len(units)))),
            progress,
            desc,
        )
    else:

        def statistic(sample: list[np.ndarray]) -> np.ndarray:
            if refit_features:
                return leading(fit_at_lag(build(tau, sample), sample, tau))
            return leading(refit_at_lag(model, sample, tau))

        samples = resample_trajectories(
            trajs, n_bootstrap, n_blocks, rng, statistic, progress, desc
        )
    vals = leading(model)
    from dpnets.spectral import timescales_from_eigvals

    step = tau * (
        getattr(model, "dt", 1.0) if dt is None else check_real("dt", dt, 0.0, low_open=True)
    )
    mod_lo, mod_hi = interval_of(np.abs(samples), confidence)
    ts_samples = timescales_from_eigvals(np.nan_to_num(np.abs(samples), nan=0.0), step)
    ts_samples[np.isnan(samples.real)] = np.nan
    ts_lo, ts_hi = interval_of(ts_samples, confidence)
    warn_outside_interval(np.abs(vals), mod_lo, mod_hi, "eigenvalue moduli", confidence)
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
            # "lag 60", "step 4 (40 frames)"; an option keeps its own name: "--lags 99999"
            label = name if name.startswith("-") else name[:-1]
            what = f"{label} {int(v)}" + (f" ({int(v) * unit} frames)" if unit > 1 else "")
            raise ValueError(
                f"{what} is not shorter than the longest trajectory ({longest} frames): no "
                "pair of frames that far apart exists"
            )
        out.append(int(v))
    if not out:
        raise ValueError(f"{name} is empty: give at least one")
    return np.asarray(out, dtype=np.int64)


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


def _check_k(k: int | None, fits: list[tuple[Any, int]], dt: float) -> int:
    """``k``, refused when larger than the number of timescales the fits have (at the lag
    where they have most): their eigenvalues less the stationary ones (infinite timescales);
    the table would otherwise be padded with NaN columns, as if those timescales were
    unresolved. ``k=None``: 3, or all they have if fewer (at least 1)."""
    most, n_eig, n_inf = -1, 0, 0
    for est, lag in fits:
        if est is None:
            continue
        ts = (
            est.implied_timescales(lag * dt)
            if isinstance(est, OperatorFit)
            else np.asarray(est.implied_timescales(dt), dtype=np.float64)
        )
        inf = int(np.sum(np.isposinf(ts)))
        if ts.size - inf > most:
            most, n_eig, n_inf = ts.size - inf, ts.size, inf
    if k is None:
        return max(1, min(3, most))
    if most < 0 or k <= most:
        return k
    stationary = f", {n_inf} of them stationary" if n_inf else ""
    remedy = f"use k <= {most}" if most else "the model needs more basis functions"
    raise ValueError(
        f"k={k} exceeds the {most} timescales the model has ({n_eig} eigenvalues{stationary}); "
        f"{remedy}"
    )


def _eigvals(est: Any) -> np.ndarray:
    """The eigenvalues of a fitted estimator or of a fitted result (:class:`OperatorFit`)."""
    return est.eigvals if isinstance(est, OperatorFit) else np.asarray(est.eig())


def _slowest(
    est: Any,
    k: int,
    dt: float,
    lag: int,
    stationary: list[tuple[float, int]] | None = None,
) -> np.ndarray:
    """The ``k`` slowest finite timescales of a fit at ``lag`` (an estimator or an
    :class:`OperatorFit`; NaN where fewer exist, or all NaN for no fit); ``stationary`` (if
    given) collects ``(lag time, count)`` where more than one real eigenvalue is 1 (infinite
    timescales)."""
    out = np.full(k, np.nan)
    if est is None:
        return out
    if isinstance(est, OperatorFit):
        ts = est.implied_timescales(lag * dt)
    else:
        ts = np.asarray(est.implied_timescales(dt), dtype=np.float64)
    if stationary is not None:
        eig = _eigvals(est)
        n_unit = int(np.sum(np.isposinf(ts) & (np.abs(eig.imag) < 1e-8) & (eig.real > 0)))
        if n_unit > 1:
            stationary.append((float(lag * dt), n_unit))
    finite = np.sort(ts[np.isfinite(ts) & (ts > 0)])[::-1][:k]
    out[: finite.size] = finite
    return out


class _LagScan:
    """The fits of :func:`implied_timescales` at each lag on all the data (``fits``), and
    refits at every lag on resamples of the bootstrap units (:meth:`resample`).

    A plain :class:`TransferOperator` on a fixed feature map is fitted from the sums of
    :class:`TrajectorySums` (the features of each trajectory computed once for all the lags that
    share them); one whose features are trained at each lag is trained on all the data,
    and its resamples use the sums on the trained features. Other estimators are refitted
    on each resample (``n_blocks``: bootstrap units are prepared, None: no bootstrap).
    """

    def __init__(
        self,
        estimator: Any,
        refit_features: bool,
        trajs: list[np.ndarray],
        lags: np.ndarray,
        n_blocks: int | None,
        progress: bool = False,
    ):
        build = refit_factory(estimator, refit_features)
        self.build, self.trajs, self.lags = build, trajs, [int(v) for v in lags]
        boot = n_blocks is not None
        whole = whole_trajectories(trajs)
        self.units = resampling_units(trajs, n_blocks) if boot else whole
        self.n_units = len(self.units)
        sets = [whole] if self.units == whole else [whole, self.units]
        self.boot = len(sets) - 1
        self.fits: list[Any] = [None] * len(self.lags)
        # per lag: (sums, regression parameters, set of pieces) for the refits from sums,
        # or None (refit on each resample)
        self.sums: list[tuple[TrajectorySums, dict, int] | None] = [None] * len(self.lags)
        groups: dict[tuple, list[int]] = {}
        regressions: dict[int, tuple[Any, dict]] = {}
        fixed = fixed_feature_operator(estimator, refit_features)  # the same at every lag
        for j in progress_bar(range(len(self.lags)), progress, "implied timescales: lags"):
            lag = self.lags[j]
            usable = [t for t in trajs if t.shape[0] > lag]
            est = None if fixed is not None else build(lag, usable)
            regression = fixed if fixed is not None else fixed_feature_operator(est, refit_features)
            if regression is not None:  # fitted from the sums below
                regressions[j] = regression
                features, params = regression
                key = (id(features), operator_products(params["reversible"]))
                groups.setdefault(key, []).append(j)
                continue
            self.fits[j] = fit_at_lag(est, usable, lag)  # trains the features at this lag
            trained = fixed_feature_operator(self.fits[j])
            if boot and trained is not None:
                self.sums[j] = (TrajectorySums(*trained, trajs, [lag], [self.units]), trained[1], 0)
        ones = [1] * len(trajs)
        for js in groups.values():
            sums = TrajectorySums(*regressions[js[0]], trajs, [self.lags[j] for j in js], sets)
            for j in js:
                params = regressions[j][1]
                self.fits[j] = sums.fit(self.lags[j], 0, ones, params)
                self.sums[j] = (sums, params, self.boot)

    def resample(self, pick: np.ndarray) -> list[Any]:
        """The fits at every lag on the units ``pick`` (None where no unit is longer)."""
        counts = np.bincount(pick, minlength=self.n_units)
        out = []
        for lag, plan in zip(self.lags, self.sums, strict=True):
            if plan is not None:
                sums, params, which = plan
                out.append(sums.fit(lag, which, counts, params))
                continue
            units = [self.trajs[i][a:b] for i, a, b in (self.units[p] for p in pick)]
            usable = [t for t in units if t.shape[0] > lag]
            out.append(fit_at_lag(self.build(lag, usable), usable, lag) if usable else None)
        return out
