"""Bootstrap resampling of whole trajectories, and the per-trajectory sums that make it cheap.

The machinery that :mod:`dpnets.timescales`, :mod:`dpnets.chapman_kolmogorov` and
:mod:`dpnets.cross_validation` share: the bootstrap's settings, draws and percentile intervals
(:func:`bootstrap_trajectories`, :func:`percentile_interval`, :func:`resamples_needed`), the
refit of an estimator at a lag (:func:`refit_factory`, :func:`fit_at_lag`), and, for a plain
:class:`dpnets.TransferOperator` on a fixed feature map, :class:`TrajectorySums`: the features
encoded once, the moments of each trajectory (or block) kept, so that a resample is a
draw-weighted :meth:`dpnets.moments.Moments.combine` and one
:func:`dpnets.estimation.estimate_operator`, no estimator cloned.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpnets.base import BaseEstimator, clone, is_fitted
from dpnets.diagnostics import DiagnosticWarning
from dpnets.estimation import OperatorFit, estimate_operator, operator_products
from dpnets.moments import FIT_CHUNK, Moments
from dpnets.operators import TransferOperator, add_pairs, pair_moments
from dpnets.pairs import PairSegment, pair_segments
from dpnets.params import check_int, check_real, check_seed
from dpnets.spectral import StateAndFeatures, as_feature_map, without_state
from dpnets.states import check_not_rows, check_states, chunks
from dpnets.training import progress_bar

__all__ = ["bootstrap_trajectories", "percentile_interval", "resamples_needed"]


def time_step(model: Any, dt: Any) -> float:
    """The time per frame: ``dt`` when given, else the model's ``dt`` parameter, else 1."""
    if dt is None:
        dt = getattr(model, "dt", None)
        dt = 1.0 if dt is None else dt
    return check_real("dt", dt, 0.0, low_open=True)


def estimate_text(value: float, lower: Any, upper: Any, index: tuple) -> str:
    """``value [lower, upper]`` (or ``value`` without an interval), 4 significant digits."""
    if lower is None or upper is None:
        return f"{value:.4g}"
    return f"{value:.4g} [{lower[index]:.4g}, {upper[index]:.4g}]"


def bootstrap_settings(
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


def warn_outside_interval(
    estimate: Any, lower: Any, upper: Any, what: str, confidence: float
) -> None:
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


def resample_trajectories(
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
    units = trajs if len(trajs) > 1 else split_blocks(trajs[0], n_blocks)
    return resample_units(
        len(units),
        n_bootstrap,
        rng,
        lambda pick: statistic([units[i] for i in pick]),
        progress,
        desc,
    )


def resample_units(
    n_units: int,
    n_bootstrap: int,
    rng: np.random.Generator,
    statistic: Callable[[np.ndarray], Any],
    progress: bool = False,
    desc: str = "bootstrap resamples",
) -> np.ndarray:
    """``statistic(pick)`` on ``n_bootstrap`` draws ``pick`` of ``n_units`` unit indices with
    replacement (the draws of :func:`resample_trajectories`, in the same order), stacked along a new
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
    n_bootstrap, _, n_blocks, rng = bootstrap_settings(n_bootstrap, 0.5, n_blocks, seed, 1)
    trajs = list(trajs)
    if not trajs:
        raise ValueError("trajs must hold at least one trajectory")
    return resample_trajectories(trajs, n_bootstrap, n_blocks, rng, statistic)


def percentile_interval(
    samples: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap ``samples`` over their first axis, ignoring NaNs
    (columns whose every sample is ``+inf``, e.g. the timescale of an eigenvalue 1, give
    ``inf``)."""
    confidence = check_real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
    return interval_of(np.asarray(samples, dtype=float), confidence)


def interval_of(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of bootstrap ``samples`` (first axis), ignoring NaNs."""
    alpha = 100 * (1 - confidence) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns, inf - inf
        lower = np.nanpercentile(samples, alpha, axis=0)
        upper = np.nanpercentile(samples, 100 - alpha, axis=0)
    stationary = np.all(np.isposinf(samples), axis=0)  # e.g. the timescale of lambda = 1
    lower[stationary] = upper[stationary] = np.inf
    return lower, upper


def fit_at_lag(est: Any, trajs: Any, lag: int) -> Any:
    """``est`` fitted on ``trajs`` at ``lag`` (its parameter ``lag``; a factory's estimator
    without one is fitted as it is). Fitted features of another lag, and the lag of an
    unfitted feature estimator, are meant to be overridden here: those notices are muted,
    and so are the refit's diagnostics (:mod:`dpnets.diagnostics`)."""
    if hasattr(est, "get_params") and "lag" in est.get_params(deep=False):
        est.set_params(lag=int(lag))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*validating across lags")
        warnings.filterwarnings("ignore", message=".*overrides the lag")
        # a validation reads each refit's spectrum itself (e.g. long lags, unresolved)
        warnings.simplefilter("ignore", DiagnosticWarning)
        return est.fit(trajs)


def refit_at_lag(model: Any, trajs: list[np.ndarray], lag: int) -> Any:
    """A copy of a fitted model refitted on ``trajs`` at ``lag``, its feature map kept."""
    refit = clone(model)
    if "features" in model.get_params(deep=False):
        refit.set_params(features=without_state(model.features_))
    return fit_at_lag(refit, trajs, lag)


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
_REGRESSION_PARAMS = ("ridge", "rtol", "constant", "reversible", "stabilize")


def fixed_feature_operator(est: Any, refit_features: bool = False) -> tuple[Any, dict] | None:
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
    if params.get("append_state") and not isinstance(features, StateAndFeatures):
        features = StateAndFeatures(features)
    return features, {name: params[name] for name in _REGRESSION_PARAMS}


def encode_trajectory(fmap: Callable[[np.ndarray], np.ndarray], traj: np.ndarray) -> np.ndarray:
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


class TrajectorySums:
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
            phi = encode_trajectory(fmap, traj)
            m = (
                None
                if memberships is None
                else encode_trajectory(lambda x: evaluate_memberships(memberships, x), traj)
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
                add_pairs(stats, lambda _y, py=py: py, states[sl], states[lag:][sl], phi_x=phi[sl])
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
            stabilize=bool(params.get("stabilize", False)),
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


def whole_trajectories(trajs: list[np.ndarray]) -> list[tuple[int, int, int]]:
    """Each trajectory as one piece ``(trajectory, start, stop)``."""
    return [(i, 0, t.shape[0]) for i, t in enumerate(trajs)]


def resampling_units(trajs: list[np.ndarray], n_blocks: int) -> list[tuple[int, int, int]]:
    """The bootstrap units of :func:`resample_trajectories` as pieces: the trajectories, or the
    ``n_blocks`` contiguous blocks of a single one."""
    if len(trajs) > 1:
        return whole_trajectories(trajs)
    sizes = [b.shape[0] for b in split_blocks(trajs[0], n_blocks)]
    ends = np.cumsum(sizes)
    return [(0, int(e - s), int(e)) for s, e in zip(sizes, ends, strict=True)]


def check_units(
    trajs: list[np.ndarray], pieces: list[tuple[int, int, int]], lags: Sequence[int]
) -> None:
    """The error a fit on these pieces would raise at the first of ``lags`` (in order) that
    some piece is not longer than (:func:`dpnets.pairs.pair_segments`), if any."""
    shortest = min(b - a for _, a, b in pieces)
    for lag in lags:
        if shortest <= lag:
            pair_segments([trajs[i][a:b] for i, a, b in pieces], int(lag))


def as_trajectories(data: Any) -> list[np.ndarray]:
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


def split_blocks(traj: np.ndarray, n_blocks: int) -> list[np.ndarray]:
    if traj.shape[0] < 2 * n_blocks:
        raise ValueError(
            f"a trajectory of {traj.shape[0]} frames is too short for {n_blocks} bootstrap "
            "blocks; pass several trajectories or fewer n_blocks"
        )
    return list(np.array_split(traj, n_blocks))


def refuse_rescaled(model: Any) -> None:
    """Refuse a model fitted on a biased run in rescaled time (``rescaled_time_``): a refit
    on the trajectories alone would pair the biased frames without the bias."""
    if getattr(model, "rescaled_time_", False):
        raise ValueError(
            "the model was fitted on a biased run in rescaled time (log_weights): its refits "
            "here would pair the biased frames without the bias; validation of biased fits "
            "is not supported yet"
        )


def refit_factory(estimator: Any, refit_features: bool) -> Callable[[int, list], Any]:
    """``build(lag, trajectories)`` -> an estimator to fit at ``lag``.

    A dpnets feature estimator that is not fitted (``TransferOperator(DPNet(...))``, or
    every clone when ``refit_features``) is trained by the operator's own ``fit`` (the
    composite model); otherwise the fitted feature map is kept and only the operator is
    refitted. A model fitted on a biased run is refused (:func:`refuse_rescaled`).
    """
    refuse_rescaled(estimator)
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


def evaluate_memberships(
    memberships: Callable[[np.ndarray], np.ndarray], x: np.ndarray
) -> np.ndarray:
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
