"""The Chapman–Kolmogorov test of a model: predicted against re-estimated set-to-set
transitions at multiples of the lag, with bootstrap intervals over whole trajectories; a
plain :class:`dpnets.TransferOperator` on fixed features is tested from membership-weighted
sums (:class:`dpnets.resampling.TrajectorySums`), without refitting an estimator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpnets.estimation import OperatorFit
from dpnets.operators import TransferOperator
from dpnets.resampling import (
    TrajectorySums,
    as_trajectories,
    bootstrap_settings,
    check_units,
    encode_trajectory,
    estimate_text,
    evaluate_memberships,
    fixed_feature_operator,
    interval_of,
    refit_at_lag,
    refuse_rescaled,
    resample_trajectories,
    resample_units,
    resampling_units,
    time_step,
    whole_trajectories,
)
from dpnets.timescales import check_lags

__all__ = ["ChapmanKolmogorov", "ck_test"]


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
    # set's interval by interval_of (ck_test checked every set's mass on the whole data)
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
                p = estimate_text(
                    self.predictions[idx], self.predictions_lower, self.predictions_upper, idx
                )
                e = estimate_text(
                    self.estimates[idx], self.estimates_lower, self.estimates_upper, idx
                )
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
    refuse_rescaled(model)
    dt = time_step(model, dt)
    n_bootstrap, confidence, n_blocks, rng = bootstrap_settings(
        n_bootstrap, confidence, n_blocks, seed
    )
    trajs = as_trajectories(data)
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
            refit = refit_at_lag(model, sample, tau)
            return np.stack(_ck_curves(refit, sample, steps, memberships, lag0))

        desc = "Chapman-Kolmogorov test: bootstrap resamples"
        samples = resample_trajectories(
            trajs, n_bootstrap, n_blocks, rng, statistic, progress, desc
        )
        _set_ck_intervals(out, samples)
    return out


def _set_ck_intervals(out: ChapmanKolmogorov, samples: np.ndarray) -> None:
    lower, upper = interval_of(samples, out.confidence)
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
    """:func:`ck_test` from the sums of :class:`TrajectorySums` (see :func:`_ck_from_sums`)."""
    tau = int(model.lag_)
    lags = [tau, *(int(k) * tau for k in steps)]
    whole = whole_trajectories(trajs)
    check_units(trajs, whole, lags)  # the errors of a fit on trajs at each lag
    units = resampling_units(trajs, n_blocks) if n_bootstrap else whole
    if units != whole:
        check_units(trajs, units, lags)
    sets = [whole] if units == whole else [whole, units]
    features, params = fixed_feature_operator(model)
    sums = TrajectorySums(features, params, trajs, sorted(set(lags)), sets, memberships, tau)
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
        _set_ck_intervals(
            out, resample_units(len(units), n_bootstrap, rng, statistic, progress, desc)
        )
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
    from dpnets.pairs import lagged_pairs

    tau = int(model.lag_)
    if not model.holds_training_data:  # a loaded model: its operator re-estimated on trajs
        model = refit_at_lag(model, trajs, tau)
    x0 = lagged_pairs(trajs, tau).X
    weights = np.real(model.stationary_weights(x0))
    m0 = evaluate_memberships(memberships, x0)
    norm = (weights[:, None] * m0).sum(0)  # E_pi[m_i], up to the sample count

    def propagate(op: Any, t: int, lag: int) -> np.ndarray:
        values = evaluate_memberships(memberships, lagged_pairs(trajs, lag).Y)
        km = np.real(op.predict(x0, t=t, observable=values))  # (n, n_sets): K^t m_j at x0
        return (weights[:, None] * m0).T @ km / norm[:, None]

    predictions, estimates = [], []
    if lag0:
        overlap = (weights[:, None] * m0).T @ m0 / norm[:, None]
        predictions.append(overlap)
        estimates.append(overlap)
    for k in steps:
        predictions.append(propagate(model, int(k), tau))
        estimates.append(propagate(refit_at_lag(model, trajs, int(k) * tau), 1, int(k) * tau))
    return np.array(predictions), np.array(estimates)


def _check_memberships(memberships: Any, trajs: list[np.ndarray]) -> None:
    """``ck_test``'s ``memberships`` before anything is computed: a callable whose values
    on the data are valid (:func:`evaluate_memberships`), with the same number of sets on every
    trajectory, and every set with some mass on the data."""
    if not callable(memberships):
        raise TypeError(
            "memberships must be a callable, states (n, ...) -> memberships (n, n_sets) (e.g. "
            f"pcca(...).memberships_of); got {type(memberships).__name__}"
        )
    mass: np.ndarray | None = None
    for traj in trajs:
        total = encode_trajectory(lambda x: evaluate_memberships(memberships, x), traj).sum(0)
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
