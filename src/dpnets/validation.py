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
from dpnets.data import (
    PairSegment,
    check_frames,
    check_lag,
    check_not_rows,
    check_states,
    chunks,
    pair_segments,
)
from dpnets.estimation import OperatorFit, estimate_operator, operator_products
from dpnets.heldout import HELDOUT_KINDS, basis_score, heldout_pairs
from dpnets.moments import FIT_CHUNK, Moments
from dpnets.operators import TransferOperator, pair_moments
from dpnets.params import check_choice, check_int, check_real, check_seed
from dpnets.spectral import as_feature_map
from dpnets.training import progress_bar

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
        (:func:`dpnets.plot.implied_timescales`); returns the figure."""
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
    k : int, default 3
        Number of timescales (the stationary one excluded).
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
    k = check_int("k", k, 1)
    dt = _time_step(estimator, dt)
    n_bootstrap, confidence, n_blocks, rng = _bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed
    )
    trajs = _trajectories(data)
    lags = check_lags(lags, "lags", max(t.shape[0] for t in trajs))
    stationary: list[tuple[float, int]] = []
    boot = n_blocks if n_bootstrap else None
    scan = _LagScan(estimator, refit_features, trajs, lags, boot, progress)
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
        out.samples = _resample(
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
    progress: bool = False,
    desc: str = "bootstrap resamples",
) -> np.ndarray:
    """``statistic`` on ``n_bootstrap`` resamples of whole trajectories (drawn with
    replacement; a single trajectory is cut into ``n_blocks`` contiguous blocks, drawn
    instead), stacked along a new first axis."""
    units = trajs if len(trajs) > 1 else _blocks(trajs[0], n_blocks)
    return _resample(
        len(units),
        n_bootstrap,
        rng,
        lambda pick: statistic([units[i] for i in pick]),
        progress,
        desc,
    )


def _resample(
    n_units: int,
    n_bootstrap: int,
    rng: np.random.Generator,
    statistic: Callable[[np.ndarray], Any],
    progress: bool = False,
    desc: str = "bootstrap resamples",
) -> np.ndarray:
    """``statistic(pick)`` on ``n_bootstrap`` draws ``pick`` of ``n_units`` unit indices with
    replacement (the draws of :func:`_bootstrap`, in the same order), stacked along a new
    first axis; a progress bar over the resamples with ``progress``."""
    out = []
    for _ in progress_bar(range(n_bootstrap), progress, desc):
        pick = rng.integers(n_units, size=n_units)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # lag-mismatch notices
            out.append(np.asarray(statistic(pick)))
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


# ------------------------------------------------------------- resampling from sufficient sums
# Resampling whole trajectories only reweights per-trajectory sums: a plain TransferOperator
# on a fixed feature map needs only the counts, sums and products of its features over the
# pairs (dpnets.moments.Moments), so the features of each trajectory are computed once, the
# moments of each trajectory (or bootstrap block) at each lag once, and a resample is their
# sum weighted by how often each was drawn, then the operator's estimator on those moments
# (dpnets.estimation.estimate_operator), whose fitted result (an OperatorFit) is read
# directly: no estimator is cloned or refitted. The refits are those of a fit on the
# resampled trajectories, to round-off (tests/test_validation_cost.py).

#: the parameters of a TransferOperator that the regression on moments reads
_REGRESSION_PARAMS = ("ridge", "rtol", "constant", "reversible")


def _operator_only(est: Any, refit_features: bool = False) -> tuple[Any, dict] | None:
    """``(features, regression parameters)`` when refitting ``est`` means refitting only the
    regression of a plain :class:`TransferOperator` on a fixed feature map (its fitted
    ``features_``, unless ``refit_features``), else None: a feature estimator that is
    trained at each fit (unfitted, or retrained with ``refit_features``), or another
    estimator."""
    if type(est) is not TransferOperator:
        return None
    params = est.get_params(deep=False)
    features = params["features"]
    if not refit_features and getattr(est, "features_", None) is not None:
        features = est.features_
    if isinstance(features, BaseEstimator) and hasattr(features, "transform"):
        if refit_features or not is_fitted(features):
            return None
    return features, {name: params[name] for name in _REGRESSION_PARAMS}


def _encode(fmap: Callable[[np.ndarray], np.ndarray], traj: np.ndarray) -> np.ndarray:
    """``fmap`` on every frame of ``traj``, :data:`FIT_CHUNK` frames at a time, float64."""
    parts = [
        np.asarray(fmap(np.asarray(traj[sl])), dtype=np.float64)
        for sl in chunks(traj.shape[0], FIT_CHUNK)
    ]
    return np.concatenate(parts)


@dataclass
class _Piece:
    """A trajectory or a bootstrap block of one: its states and its sums at each lag."""

    states: np.ndarray
    moments: dict  # lag -> Moments of the pairs (None: the piece is not longer than the lag)
    g: np.ndarray | None = None  # (S, q, q): sum over the X frames at tau of m_i z z^T
    h: np.ndarray | None = None  # (S, S, q): sum over the same frames of m_i m_j z
    xm: dict | None = None  # lag -> (q, S): sum over the pairs of z(x) m(y)^T


class _Sums:
    """Sufficient statistics of a plain :class:`TransferOperator` on a fixed feature map over
    pieces of trajectories (whole trajectories, and bootstrap blocks of a single one), for
    refits at ``lags`` from any weighted choice of pieces.

    Every trajectory is encoded once (pieces are slices of it: the features are pointwise).
    With ``memberships`` (a Chapman-Kolmogorov test at lag ``tau``) the sums of
    :func:`_ck_from_sums` are kept too, on the basis ``z = [1, (psi - pilot) / spread]``
    (the mean and spread of the first trajectory's features), in which every fitted
    model's basis is an affine image (:func:`_basis_map`).
    """

    def __init__(
        self,
        features: Any,
        params: dict,
        trajs: list[np.ndarray],
        lags: Sequence[int],
        pieces: list[list[tuple[int, int, int]]],
        memberships: Callable | None = None,
        tau: int | None = None,
    ):
        self.features, self.params = features, params
        self.shape = tuple(trajs[0].shape[1:])
        self.lags = [int(v) for v in lags]
        products = operator_products(params["reversible"])
        fmap = as_feature_map(features)
        self.pilot = self.spread = None
        self._reference: dict[int, Moments] = {}
        done: dict[tuple[int, int, int], _Piece] = {}
        for i, traj in enumerate(trajs):
            phi = _encode(fmap, traj)
            m = (
                None
                if memberships is None
                else _encode(lambda x: _memberships(memberships, x), traj)
            )
            if self.pilot is None:
                self.pilot = phi.mean(0)
                sd = phi.std(0)
                self.spread = np.where(sd > 0, sd, 1.0)
            for key in {key for bounds in pieces for key in bounds if key[0] == i}:
                a, b = key[1], key[2]
                mb = None if m is None else m[a:b]
                done[key] = self._piece(traj[a:b], phi[a:b], mb, products, tau)
        self.pieces = [[done[key] for key in bounds] for bounds in pieces]

    def _piece(
        self,
        states: np.ndarray,
        phi: np.ndarray,
        m: np.ndarray | None,
        products: tuple,
        tau: int | None,
    ) -> _Piece:
        n = states.shape[0]
        moments = {}
        for lag in self.lags:
            if n <= lag:
                moments[lag] = None
                continue
            stats = Moments(products)
            for sl in chunks(n - lag, FIT_CHUNK):
                py = phi[lag:][sl]
                TransferOperator.add_pairs(
                    stats, lambda _y, py=py: py, states[sl], states[lag:][sl], phi_x=phi[sl]
                )
            # every piece's sums about the first piece's pilots: resamples then add up
            # without moving them (Moments.combine)
            ref = self._reference.setdefault(lag, stats)
            moments[lag] = stats if stats is ref else Moments.combine([stats], [1], like=ref)
        piece = _Piece(states, moments)
        if m is not None and tau is not None:
            z = np.concatenate([np.ones((n, 1)), (phi - self.pilot) / self.spread], axis=1)
            s, q = m.shape[1], z.shape[1]
            n0 = max(n - tau, 0)
            zx, mx = z[:n0], m[:n0]
            piece.g = np.stack([(zx * mx[:, i : i + 1]).T @ zx for i in range(s)])
            piece.h = ((mx[:, :, None] * mx[:, None, :]).reshape(n0, s * s).T @ zx).reshape(s, s, q)
            piece.xm = {
                lag: (z[: n - lag].T @ m[lag:] if n > lag else np.zeros((q, s)))
                for lag in self.lags
            }
        return piece

    def fit(
        self, lag: int, which: int, counts: Sequence[int], params: dict | None = None
    ) -> OperatorFit | None:
        """The operator (regression parameters ``params``, default those of the sums)
        fitted at ``lag`` on the pieces of set ``which``, each taken ``counts[j]`` times
        (None when no piece is longer than the lag)."""
        parts = [
            (p, int(c))
            for p, c in zip(self.pieces[which], counts, strict=True)
            if c and p.moments[lag] is not None
        ]
        if not parts:
            return None
        stats = Moments.combine([p.moments[lag] for p, _ in parts], [c for _, c in parts])
        params = self.params if params is None else params
        sources = [
            PairSegment(p.states, p.states, 0, lag, p.states.shape[0] - lag)
            for p, c in parts
            for _ in range(c)
        ]
        return estimate_operator(
            stats,
            ridge=float(params["ridge"]),
            rtol=params["rtol"],
            constant=params["constant"],
            reversible=params["reversible"],
            reweigh=lambda weight: pair_moments(sources, self.features, stats.products, weight),
        )

    def ck_sums(self, which: int, counts: Sequence[int]) -> tuple:
        """The membership sums ``(g, h, xm)`` of the pieces of set ``which``, weighted."""
        c = np.asarray(counts, dtype=np.float64)
        pieces = self.pieces[which]
        g = np.tensordot(c, np.stack([p.g for p in pieces]), axes=1)
        h = np.tensordot(c, np.stack([p.h for p in pieces]), axes=1)
        xm = {
            lag: np.tensordot(c, np.stack([p.xm[lag] for p in pieces]), axes=1) for lag in self.lags
        }
        return g, h, xm


def _whole(trajs: list[np.ndarray]) -> list[tuple[int, int, int]]:
    """Each trajectory as one piece ``(trajectory, start, stop)``."""
    return [(i, 0, t.shape[0]) for i, t in enumerate(trajs)]


def _unit_pieces(trajs: list[np.ndarray], n_blocks: int) -> list[tuple[int, int, int]]:
    """The bootstrap units of :func:`_bootstrap` as pieces: the trajectories, or the
    ``n_blocks`` contiguous blocks of a single one."""
    if len(trajs) > 1:
        return _whole(trajs)
    sizes = [b.shape[0] for b in _blocks(trajs[0], n_blocks)]
    ends = np.cumsum(sizes)
    return [(0, int(e - s), int(e)) for s, e in zip(sizes, ends, strict=True)]


def _check_pieces(
    trajs: list[np.ndarray], pieces: list[tuple[int, int, int]], lags: Sequence[int]
) -> None:
    """The error a fit on these pieces would raise at the first of ``lags`` (in order) that
    some piece is not longer than (:func:`dpnets.data.pair_segments`), if any."""
    shortest = min(b - a for _, a, b in pieces)
    for lag in lags:
        if shortest <= lag:
            pair_segments([trajs[i][a:b] for i, a, b in pieces], int(lag))


def _basis_map(op: OperatorFit, pilot: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """``B`` with ``op.transform(x) = B @ [1, (psi(x) - pilot) / spread]`` (the basis of a
    fit is affine in the raw features ``psi``: ``[1, (psi - shift) / scale]`` or ``psi``)."""
    k = pilot.size
    raw = np.concatenate([pilot[:, None], np.diag(spread)], axis=1)  # psi = raw @ z
    if not op.constant:
        return raw
    shift = op.feature_shift if op.feature_shift is not None else np.zeros(k)
    scale = op.feature_scale if op.feature_scale is not None else np.ones(k)
    raw[:, 0] -= shift
    return np.concatenate([np.eye(1, k + 1), raw / scale[:, None]], axis=0)


def _ck_from_sums(
    model: OperatorFit,
    tau: int,
    refit: Callable[[int], OperatorFit],
    sums: tuple,
    steps: np.ndarray,
    lag0: bool,
    pilot: np.ndarray,
    spread: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_ck_curves` from sums over the frames: with ``w(x) = v^T z(x)`` the model's
    stationary weights and ``op.transform(x) = B z(x)``, ``sum_x w m_i op.transform(x) =
    B g_i v``, so a forecast of those rows (linear in them, :meth:`OperatorFit.forecast`) is
    the sum of the forecasts; the coefficients of ``m_j`` are ``(Cx + ridge)^+ B xm / n``. The
    model at ``tau`` and its refits are fitted results."""
    g, h, xm = sums
    v = _basis_map(model, pilot, spread).T @ np.real(model.stationary_coef())
    gv = g @ v  # (S, q): sum_x w(x) m_i(x) z(x)
    norm = gv[:, 0]  # E_pi[m_i], up to the sample count
    # a resample that draws no frame of a set says nothing of it: NaN, left out of that
    # set's interval by _interval (ck_test checked every set's mass on the whole data)
    norm = np.where(norm != 0, norm, np.nan)

    def propagate(op: OperatorFit, t: int, lag: int) -> np.ndarray:
        b = _basis_map(op, pilot, spread)
        coef = op.solve_lstsq(b @ xm[lag]) / op.n_samples
        return op.forecast(gv @ b.T, coef, [t])[0] / norm[:, None]

    predictions, estimates = [], []
    if lag0:
        overlap = (h @ v) / norm[:, None]
        predictions.append(overlap)
        estimates.append(overlap)
    for k in steps:
        predictions.append(propagate(model, int(k), tau))
        estimates.append(propagate(refit(int(k) * tau), 1, int(k) * tau))
    return np.array(predictions), np.array(estimates)


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
    n_bootstrap, confidence, n_blocks, rng = _bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed, minimum=1
    )
    trajs = _trajectories(data)
    tau = int(model.lag_)
    build = _factory(model, refit_features)

    def leading(est: Any) -> np.ndarray:
        vals = np.full(k, np.nan, dtype=np.complex128)
        ev = _eigvals(est)[:k]
        vals[: ev.size] = ev
        return vals

    desc = "eigenvalues: bootstrap resamples"
    regression = _operator_only(model, refit_features)
    if regression is not None:  # refits from sums
        units = _unit_pieces(trajs, n_blocks)
        _check_pieces(trajs, units, [tau])
        sums = _Sums(*regression, trajs, [tau], [units])
        samples = _resample(
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
                return leading(_fit_at(build(tau, sample), sample, tau))
            return leading(_refit_at(model, sample, tau))

        samples = _bootstrap(trajs, n_bootstrap, n_blocks, rng, statistic, progress, desc)
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


def _trajectories(data: Any) -> list[np.ndarray]:
    if isinstance(data, (list, tuple)):
        if isinstance(data, tuple):
            raise TypeError("give trajectories (an array or a list of arrays), not (X, Y) pairs")
        if not data:
            raise ValueError("empty list of trajectories")
        check_not_rows(data, "data")
        return [check_states(t, f"trajectory {i}") for i, t in enumerate(data)]
    if data is None:
        raise TypeError("data is None: pass the trajectories (an array or a list of arrays)")
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
    :class:`_Sums` (the features of each trajectory computed once for all the lags that
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
        build = _factory(estimator, refit_features)
        self.build, self.trajs, self.lags = build, trajs, [int(v) for v in lags]
        boot = n_blocks is not None
        whole = _whole(trajs)
        self.units = _unit_pieces(trajs, n_blocks) if boot else whole
        self.n_units = len(self.units)
        sets = [whole] if self.units == whole else [whole, self.units]
        self.boot = len(sets) - 1
        self.fits: list[Any] = [None] * len(self.lags)
        # per lag: (sums, regression parameters, set of pieces) for the refits from sums,
        # or None (refit on each resample)
        self.sums: list[tuple[_Sums, dict, int] | None] = [None] * len(self.lags)
        groups: dict[tuple, list[int]] = {}
        regressions: dict[int, tuple[Any, dict]] = {}
        fixed = _operator_only(estimator, refit_features)  # the same at every lag
        for j in progress_bar(range(len(self.lags)), progress, "implied timescales: lags"):
            lag = self.lags[j]
            usable = [t for t in trajs if t.shape[0] > lag]
            est = None if fixed is not None else build(lag, usable)
            regression = fixed if fixed is not None else _operator_only(est, refit_features)
            if regression is not None:  # fitted from the sums below
                regressions[j] = regression
                features, params = regression
                key = (id(features), operator_products(params["reversible"]))
                groups.setdefault(key, []).append(j)
                continue
            self.fits[j] = _fit_at(est, usable, lag)  # trains the features at this lag
            trained = _operator_only(self.fits[j])
            if boot and trained is not None:
                self.sums[j] = (_Sums(*trained, trajs, [lag], [self.units]), trained[1], 0)
        ones = [1] * len(trajs)
        for js in groups.values():
            sums = _Sums(*regressions[js[0]], trajs, [self.lags[j] for j in js], sets)
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
            out.append(_fit_at(self.build(lag, usable), usable, lag) if usable else None)
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
    regression = _operator_only(estimator, refit_features)
    if regression is not None:
        return _cross_validate_from_sums(*regression, folds, lag, kind)
    build = _factory(estimator, refit_features)
    scores = np.empty(cv)
    for f in range(cv):
        train = [t for g, fold in enumerate(folds) if g != f for t in fold]
        est = _fit_at(build(lag, train), train, lag)
        scores[f] = est.score(folds[f], lag=lag, kind=kind)
    return scores


def _cross_validate_from_sums(
    features: Any, params: dict, folds: list[list[np.ndarray]], lag: int, kind: str
) -> np.ndarray:
    """:func:`cross_validate` of a plain :class:`TransferOperator` on fixed features: each
    fold's operator from the summed moments of the other folds' trajectories (encoded once),
    scored on the held-out fold by :func:`dpnets.heldout.basis_score` (the score of
    :meth:`TransferOperator.score`)."""
    check_choice("kind", kind, HELDOUT_KINDS)
    trajs = [t for fold in folds for t in fold]
    fold_of = [f for f, fold in enumerate(folds) for _ in fold]
    _check_pieces(trajs, _whole(trajs), [lag])
    sums = _Sums(features, params, trajs, [lag], [_whole(trajs)])
    fmap = as_feature_map(features)
    scores = np.empty(len(folds))
    for f, fold in enumerate(folds):
        fit = sums.fit(lag, 0, [int(g != f) for g in fold_of])
        p = heldout_pairs(fold, lag)
        training = (fit.cx, fit.cxy, fit.cy, fit.features_mean, fit.features_mean_y)
        bx, by = fit.basis(fmap(p.X)), fit.basis(fmap(p.Y))
        scores[f] = basis_score(
            bx, by, kind, constant=fit.constant, training=training, rtol=params["rtol"]
        )
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

    def __repr__(self) -> str:
        """A summary: per set, the probability to stay in it, predicted against estimated at
        each lag time (with intervals when bootstrapped), and the largest disagreement."""
        n = self.predictions.shape[1]
        bands = self.predictions_lower is not None and self.estimates_lower is not None
        head = f"ChapmanKolmogorov({n} sets, {self.steps.size} lag times"
        if bands:
            head += f", {100 * self.confidence:g}% intervals"
        gap = float(np.max(np.abs(self.predictions - self.estimates)))
        rows = [
            head + f"; largest |predicted - estimated| = {gap:.3g})",
            "  lag time | " + " | ".join(f"stay in {i}: predicted / estimated" for i in range(n)),
        ]
        for k, t in enumerate(self.lag_times):
            cells = []
            for i in range(n):
                idx = (k, i, i)
                p = _cell(
                    self.predictions[idx], self.predictions_lower, self.predictions_upper, idx
                )
                e = _cell(self.estimates[idx], self.estimates_lower, self.estimates_upper, idx)
                cells.append(f"{p} / {e}")
            rows.append(f"  {t:8.4g} | " + " | ".join(cells))
        return "\n".join(rows)

    def plot(self, units: str = "", names: Sequence[str] | None = None) -> Any:
        """The grid of predicted against estimated curves (:func:`dpnets.plot.ck_test`);
        returns the figure."""
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
    progress: bool = False,
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
        :attr:`MetastableSets.memberships_of` from :func:`pcca`): finite, non-negative, one
        row per state, and every set with some mass on ``data``. They are checked on the
        data before anything is computed (``TypeError`` if not callable, ``ValueError``
        naming the problem otherwise).
    dt : float, optional
        Time between frames (for ``lag_times``); default the model's ``dt``, else 1.
    include_lag0 : bool, default True
        Start the curves at lag 0 with the value the estimator gives there,
        ``E_pi[m_i m_j] / E_pi[m_i]`` on the data: the identity for crisp sets (the default
        of :meth:`MetastableSets.memberships_of`), the sets' self-overlap for fuzzy ones.
    n_bootstrap : int, default 0
        Resamples of whole trajectories (a single trajectory: ``n_blocks`` contiguous
        blocks); the model is refitted at ``tau`` on each, its features kept, and both
        curves recomputed. For a :class:`TransferOperator` both curves are computed from
        sums over the frames: the features and memberships of each trajectory once, their
        moments at each lag ``k tau`` and the membership-weighted sums once per trajectory
        (or block), and each resample is their draw-weighted sum (the same curves as
        refits on the resampled trajectories, to round-off, at the cost of a few fits).
    confidence : float, default 0.95
    n_blocks : int, default 10
    seed : int, optional
    progress : bool, default False
        A progress bar over the resamples (needs tqdm).
    """
    if getattr(model, "operator_", None) is None or getattr(model, "lag_", None) is None:
        raise ValueError("ck_test needs a transfer-operator model fitted on trajectories")
    dt = _time_step(model, dt)
    n_bootstrap, confidence, n_blocks, rng = _bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed
    )
    trajs = _trajectories(data)
    _check_memberships(memberships, trajs)
    tau = int(model.lag_)
    steps = check_lags(steps, "steps", max(t.shape[0] for t in trajs), unit=tau)
    lag0 = bool(include_lag0)
    shown = np.concatenate([[0], steps]) if lag0 else steps
    if _ck_from_sums_applies(model, trajs):
        return _ck_test_from_sums(
            model,
            trajs,
            steps,
            memberships,
            lag0,
            n_bootstrap,
            n_blocks,
            rng,
            progress,
            ChapmanKolmogorov(shown, shown * tau * dt, None, None, confidence=confidence),
        )
    pred, est = _ck_curves(model, trajs, steps, memberships, lag0)
    out = ChapmanKolmogorov(shown, shown * tau * dt, pred, est, confidence=confidence)
    if n_bootstrap:

        def statistic(sample: list[np.ndarray]) -> np.ndarray:
            refit = _refit_at(model, sample, tau)
            return np.stack(_ck_curves(refit, sample, steps, memberships, lag0))

        desc = "Chapman-Kolmogorov test: bootstrap resamples"
        samples = _bootstrap(trajs, n_bootstrap, n_blocks, rng, statistic, progress, desc)
        _set_ck_intervals(out, samples)
    return out


def _set_ck_intervals(out: ChapmanKolmogorov, samples: np.ndarray) -> None:
    lower, upper = _interval(samples, out.confidence)
    out.predictions_lower, out.estimates_lower = lower
    out.predictions_upper, out.estimates_upper = upper


def _ck_from_sums_applies(model: Any, trajs: list[np.ndarray]) -> bool:
    """Whether :func:`ck_test` can run from sums: a plain :class:`TransferOperator` (not
    ``reversible="reweight"``) whose training samples are the pairs of ``trajs`` at its lag
    (or that holds none, a loaded model, which is re-estimated on ``trajs``)."""
    if type(model) is not TransferOperator:
        return False
    if model.get_params(deep=False).get("reversible") == "reweight":
        # observables are regressed with the Koopman weights of each fit, a sum of third
        # order in the features: refitted on each resample instead
        return False
    if not model.holds_training_data:
        return True
    n = sum(max(t.shape[0] - int(model.lag_), 0) for t in trajs)
    return model.n_samples_ == n and getattr(model, "features_mean_", None) is not None


def _ck_test_from_sums(
    model: TransferOperator,
    trajs: list[np.ndarray],
    steps: np.ndarray,
    memberships: Callable,
    lag0: bool,
    n_bootstrap: int,
    n_blocks: int,
    rng: np.random.Generator,
    progress: bool,
    out: ChapmanKolmogorov,
) -> ChapmanKolmogorov:
    """:func:`ck_test` from the sums of :class:`_Sums` (see :func:`_ck_from_sums`)."""
    tau = int(model.lag_)
    lags = [tau, *(int(k) * tau for k in steps)]
    whole = _whole(trajs)
    _check_pieces(trajs, whole, lags)  # the errors of a fit on trajs at each lag
    units = _unit_pieces(trajs, n_blocks) if n_bootstrap else whole
    if units != whole:
        _check_pieces(trajs, units, lags)
    sets = [whole] if units == whole else [whole, units]
    features, params = _operator_only(model)
    sums = _Sums(features, params, trajs, sorted(set(lags)), sets, memberships, tau)
    ones = [1] * len(trajs)
    # the model's own fit where it holds its training data, else re-estimated on trajs
    point = OperatorFit.from_model(model) if model.holds_training_data else sums.fit(tau, 0, ones)
    out.predictions, out.estimates = _ck_from_sums(
        point,
        tau,
        lambda lag: sums.fit(lag, 0, ones),
        sums.ck_sums(0, ones),
        steps,
        lag0,
        sums.pilot,
        sums.spread,
    )
    if n_bootstrap:
        resampled = len(sets) - 1  # the set of pieces the resamples draw from

        def statistic(pick: np.ndarray) -> np.ndarray:
            counts = np.bincount(pick, minlength=len(units))
            curves = _ck_from_sums(
                sums.fit(tau, resampled, counts),
                tau,
                lambda lag: sums.fit(lag, resampled, counts),
                sums.ck_sums(resampled, counts),
                steps,
                lag0,
                sums.pilot,
                sums.spread,
            )
            return np.stack(curves)

        desc = "Chapman-Kolmogorov test: bootstrap resamples"
        _set_ck_intervals(out, _resample(len(units), n_bootstrap, rng, statistic, progress, desc))
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
    """The values of ``memberships`` at the states ``x``: ``(n, n_sets)``, finite and
    non-negative (a ``ValueError`` naming ``memberships`` and the problem otherwise)."""
    try:
        m = np.asarray(memberships(x), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"memberships must return numbers, an array (n, n_sets); it returned values that "
            f"are not ({str(err).splitlines()[0]})"
        ) from None
    if m.ndim != 2 or m.shape[0] != x.shape[0] or m.shape[1] < 1:
        raise ValueError(
            f"memberships must return (n, n_sets) for n = {x.shape[0]} states (one row per "
            f"state, one column per set); got {m.shape}"
        )
    bad = ~np.isfinite(m)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"memberships returned {int(bad.sum())} NaN or inf value(s) (first at state "
            f"{row}): memberships must be finite"
        )
    if (m < 0).any():
        raise ValueError(
            f"memberships must be non-negative (probabilities of the sets); "
            f"{int((m < 0).sum())} value(s) are negative (smallest {m.min():.3g})"
        )
    return m


def _check_memberships(memberships: Any, trajs: list[np.ndarray]) -> None:
    """``ck_test``'s ``memberships`` before anything is computed: a callable whose values
    on the data are valid (:func:`_memberships`), with the same number of sets on every
    trajectory, and every set with some mass on the data."""
    if not callable(memberships):
        raise TypeError(
            "memberships must be a callable, states (n, ...) -> memberships (n, n_sets) (e.g. "
            f"pcca(...).memberships_of); got {type(memberships).__name__}"
        )
    mass: np.ndarray | None = None
    for traj in trajs:
        total = _encode(lambda x: _memberships(memberships, x), traj).sum(0)
        if mass is not None and total.shape != mass.shape:
            raise ValueError(
                f"memberships returned {mass.size} sets on one trajectory and {total.size} on "
                "another: the number of sets must not depend on the states"
            )
        mass = total if mass is None else mass + total
    assert mass is not None
    empty = np.flatnonzero(~(mass > 0))
    if empty.size:
        raise ValueError(
            f"memberships of set(s) {empty.tolist()} are zero on every frame of the data: each "
            "set needs some mass (frames that belong to it) for its probabilities to be defined"
        )


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
    if not callable(getattr(model, "eigenfunctions", None)):
        raise TypeError(
            f"model must be a fitted dpnets model (with eig and eigenfunctions); got "
            f"{type(model).__name__}"
        )
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
    if weights is None:  # estimated: tiny negative values of an off-equilibrium fit clipped
        w = np.clip(np.real(model.stationary_weights(x)), 0.0, None)
        if not (np.all(np.isfinite(w)) and w.sum() > 0):
            raise ValueError(
                "the model's stationary weights on X are not positive anywhere (no "
                "equilibrium distribution); pass weights= explicitly"
            )
    else:
        w = _pcca_weights(weights, x.shape[0])
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
    sums = pc.sum(1, keepdims=True)
    if not (np.all(np.isfinite(pc)) and np.all(sums > 0)):
        raise ValueError(
            "PCCA+ failed: the memberships of some metastable set vanish on X (weighted by "
            "weights), so its coarse-grained transition row is undefined; use fewer sets "
            "(n_sets) or frames that visit every set"
        )
    pc = pc / sums
    stationary = chi.T @ w
    return MetastableSets(
        chi, np.argmax(chi, axis=1), pc, stationary / stationary.sum(), rot, model, scale
    )


def _pcca_weights(weights: Any, n: int) -> np.ndarray:
    """User-given PCCA+ weights: ``n`` finite non-negative values, not all zero."""
    try:
        w = np.asarray(weights, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"weights must be an array of {n} numbers, got {weights!r}") from None
    if w.shape != (n,) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be {n} finite values (one per frame); got shape {w.shape}")
    if np.any(w < 0):
        raise ValueError(
            f"weights must be non-negative (equilibrium weights of the frames); "
            f"{int(np.sum(w < 0))} are negative (smallest {w.min():.3g})"
        )
    if not w.sum() > 0:
        raise ValueError("weights are all zero: at least one frame needs a positive weight")
    return w


def _clip_rows(chi: np.ndarray) -> np.ndarray:
    """Memberships in [0, 1] summing to 1; a frame whose memberships all clip to zero (it
    lies outside the simplex) goes wholly to the set it is nearest to."""
    clipped = np.clip(chi, 0.0, 1.0)
    sums = clipped.sum(1, keepdims=True)
    empty = sums[:, 0] <= 0
    if np.any(empty):
        clipped[empty] = np.eye(chi.shape[1])[np.argmax(chi[empty], axis=1)]
        sums[empty] = 1.0
    return clipped / sums


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
    # the fill takes a maximum of linear functions over the frames: attained at the vertices
    # of their convex hull, so the optimisation needs only those (a few hundred frames, not
    # every frame of the data: the same rotation, at a fraction of the cost)
    evecs = evecs[_hull_rows(evecs[:, 1:])]

    def objective(v: np.ndarray) -> float:
        a = _pcca_fill(v.reshape(n - 1, n - 1), evecs)
        return -float(np.sum(a**2 / a[0][None, :]))

    best = fmin(objective, rot[1:, 1:].ravel(), disp=False)
    return _pcca_fill(best.reshape(n - 1, n - 1), evecs)


def _hull_rows(points: np.ndarray) -> np.ndarray:
    """Indices of rows of ``points`` (n, d) that include every vertex of their convex hull
    (all distinct rows where the hull is degenerate)."""
    _, rows = np.unique(points, axis=0, return_index=True)
    if points.shape[1] == 1:
        return np.array([np.argmin(points[:, 0]), np.argmax(points[:, 0])])
    if rows.size <= 4 * (points.shape[1] + 1):
        return rows
    from scipy.spatial import ConvexHull, QhullError

    try:
        return rows[ConvexHull(points[rows]).vertices]
    except QhullError:  # flat or degenerate: every distinct row
        return rows
