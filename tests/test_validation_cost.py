"""Validation at the cost of a few fits (issue 25, item 4): bootstrap resamples and refits at
other lags come from per-trajectory (or per-block) sums, features encoded once, and equal
the refits on the resampled trajectories to round-off."""

from __future__ import annotations

import numpy as np
import pytest

from dpnets import TransferOperator
from dpnets.baselines import EDMD, MonomialFeatures
from dpnets.chapman_kolmogorov import _ck_curves
from dpnets.estimation import OperatorFit
from dpnets.moments import Moments
from dpnets.resampling import (
    TrajectorySums,
    fit_at_lag,
    fixed_feature_operator,
    interval_of,
    refit_at_lag,
    resampling_units,
    whole_trajectories,
)
from dpnets.systems import MarkovChain, OrnsteinUhlenbeck
from dpnets.validation import (
    bootstrap_spectrum,
    bootstrap_trajectories,
    ck_test,
    implied_timescales,
    pcca,
)

# the comparisons use few resamples on purpose (the warning about it is tested elsewhere)
pytestmark = pytest.mark.filterwarnings("ignore:n_bootstrap=.* is too few:RuntimeWarning")

P = np.array([[0.90, 0.09, 0.01], [0.06, 0.90, 0.04], [0.01, 0.07, 0.92]])


def one_hot(s):
    return np.eye(3)[np.asarray(s).reshape(-1).astype(int)]


def _chain(n_traj=6, length=400):
    return [MarkovChain(P).sample(length, seed=s)[:, None].astype(float) for s in range(n_traj)]


def _ou(n_traj=5, length=600, offset=0.0):
    return [OrnsteinUhlenbeck(dt=0.1).sample(length, seed=s) + offset for s in range(n_traj)]


def test_combined_moments_equal_moments_of_the_repeated_samples():
    rng = np.random.default_rng(0)
    parts, blocks = [], []
    for j in range(4):  # different offsets, so that the pilots differ
        a = rng.normal(size=(50 + j, 3)) + 1e4 * j
        b = rng.normal(size=(50 + j, 2)) - 3.0 * j
        m = Moments([("a", "a"), ("a", "b")])
        m.update({"a": a[:20], "b": b[:20]})
        m.update({"a": a[20:], "b": b[20:]})
        parts.append(m)
        blocks.append((a, b))
    counts = [2, 0, 1, 3]
    direct = Moments([("a", "a"), ("a", "b")])
    for (a, b), c in zip(blocks, counts, strict=True):
        for _ in range(c):
            direct.update({"a": a, "b": b})
    comb = Moments.combine(parts, counts)
    assert comb.count == direct.count and comb.weight == direct.weight
    np.testing.assert_allclose(comb.mean("a"), direct.mean("a"), rtol=1e-13)
    np.testing.assert_allclose(comb.cov("a", "a"), direct.cov("a", "a"), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(comb.cov("a", "b"), direct.cov("a", "b"), rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="non-negative"):
        Moments.combine(parts, [1, -1, 1, 1])
    with pytest.raises(ValueError, match="4 parts but 3 counts"):
        Moments.combine(parts, [1, 1, 1])


def _same_fit(a: OperatorFit, b: TransferOperator) -> None:
    """A fitted result from sums against the fitted attributes of a direct fit."""
    assert isinstance(a, OperatorFit)
    assert a.constant == b.constant_ and a.n_samples == b.n_samples_
    for name in ("operator", "cx", "cxy", "cy", "state_coef", "features_mean", "eigvals"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name + "_"), rtol=1e-10, atol=1e-10)
    if b.reweighting_coef_ is not None:
        np.testing.assert_allclose(a.reweighting_coef, b.reweighting_coef_, rtol=1e-10, atol=1e-10)


def _sums_of(template: TransferOperator, *args, **kwargs) -> TrajectorySums:
    """The sums of :mod:`dpnets.validation` for an operator's features and parameters."""
    features, params = fixed_feature_operator(template)
    return TrajectorySums(features, params, *args, **kwargs)


@pytest.mark.parametrize(
    "make, trajs",
    [
        (lambda: TransferOperator(one_hot, constant=False), _chain()),
        (lambda: TransferOperator(one_hot), _chain()),
        (lambda: TransferOperator(MonomialFeatures(3), ridge=1e-6), _ou(offset=50.0)),
        (lambda: TransferOperator(MonomialFeatures(2), reversible=True), _ou()),
        (lambda: TransferOperator(MonomialFeatures(2), reversible="reweight"), _ou(3, 300)),
        (lambda: TransferOperator(None), _ou(offset=1e3)),  # raw coordinates, constant added
    ],
)
def test_a_refit_from_sums_equals_the_fit_on_the_resampled_trajectories(make, trajs):
    template = make()
    pieces = whole_trajectories(trajs)
    sums = _sums_of(template, trajs, [1, 3], [pieces])
    rng = np.random.default_rng(1)
    for _ in range(3):
        pick = rng.integers(len(trajs), size=len(trajs))
        counts = np.bincount(pick, minlength=len(trajs))
        for lag in (1, 3):
            fast = sums.fit(lag, 0, counts)
            direct = make().set_params(lag=lag).fit([trajs[i] for i in pick])
            _same_fit(fast, direct)


def test_blocks_of_a_single_trajectory_are_the_bootstrap_units():
    s = MarkovChain(P).sample(3000, seed=5)[:, None].astype(float)
    units = resampling_units([s], 10)
    assert len(units) == 10 and units[0][1] == 0 and units[-1][2] == 3000
    blocks = np.array_split(s, 10)
    sums = _sums_of(TransferOperator(one_hot), [s], [2], [whole_trajectories([s]), units])
    pick = np.array([3, 3, 0, 9, 5, 5, 5, 1, 2, 7])
    fast = sums.fit(2, 1, np.bincount(pick, minlength=10))
    _same_fit(fast, TransferOperator(one_hot, lag=2).fit([blocks[i] for i in pick]))
    _same_fit(sums.fit(2, 0, [1]), TransferOperator(one_hot, lag=2).fit(s))


def _slow_timescales(make, lags, k):
    def statistic(sample):
        out = np.full((len(lags), k), np.nan)
        for j, lag in enumerate(lags):
            usable = [t for t in sample if t.shape[0] > lag]
            ts = fit_at_lag(make(), usable, lag).implied_timescales()
            ts = np.sort(ts[np.isfinite(ts) & (ts > 0)])[::-1][:k]
            out[j, : ts.size] = ts
        return out

    return statistic


@pytest.mark.parametrize("single", [False, True])
def test_implied_timescales_bootstrap_equals_refits_on_the_same_resamples(single):
    trajs = [np.concatenate(_chain(6, 500))] if single else _chain(8, 300)
    lags = [1, 2, 5]
    res = implied_timescales(
        TransferOperator(one_hot, constant=False), trajs, lags, k=2, n_bootstrap=12, seed=3
    )
    make = lambda: TransferOperator(one_hot, constant=False)  # noqa: E731
    slow = bootstrap_trajectories(trajs, _slow_timescales(make, lags, 2), 12, seed=3)
    np.testing.assert_allclose(res.samples, slow, rtol=1e-10)
    direct = _slow_timescales(make, lags, 2)(trajs)
    np.testing.assert_allclose(res.timescales, direct, rtol=1e-10)


def test_implied_timescales_skip_trajectories_shorter_than_the_lag():
    trajs = [*_chain(4, 400), MarkovChain(P).sample(4, seed=9)[:, None].astype(float)]
    res = implied_timescales(
        TransferOperator(one_hot, constant=False), trajs, [1, 6], k=2, n_bootstrap=8, seed=0
    )
    make = lambda: TransferOperator(one_hot, constant=False)  # noqa: E731
    slow = bootstrap_trajectories(trajs, _slow_timescales(make, [1, 6], 2), 8, seed=0)
    np.testing.assert_allclose(res.samples, slow, rtol=1e-10)


def test_bootstrap_spectrum_equals_refits_on_the_same_resamples():
    trajs = _ou(6, 500)
    model = TransferOperator(MonomialFeatures(3), lag=2, dt=0.1).fit(trajs)
    spec = bootstrap_spectrum(model, trajs, k=3, n_bootstrap=10, seed=7)

    def leading(sample):
        return np.asarray(refit_at_lag(model, sample, 2).eig())[:3]

    slow = bootstrap_trajectories(trajs, leading, 10, seed=7)
    np.testing.assert_allclose(spec.samples, slow, rtol=1e-10, atol=1e-12)


def _hidden_chain():
    """The hidden 4-state chain of tests/test_validation_honest.py, shorter."""
    p = np.full((4, 4), 0.02 / 3) + np.eye(4) * (0.98 - 0.02 / 3)
    corners = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    rng = np.random.default_rng(0)
    trajs = []
    for k in range(5):
        s = MarkovChain(p).sample(3000, seed=k)
        trajs.append(100.0 * (corners[s] + 0.15 * rng.normal(size=(len(s), 2))) + 40.0)

    def bumps(x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x) - 40.0) / 100.0
        return np.exp(-((z[:, None, :] - corners[None]) ** 2).sum(-1) / (2 * 0.8**2))

    return trajs, bumps


@pytest.mark.parametrize("crisp, reversible", [(True, True), (False, True), (True, False)])
def test_ck_test_from_sums_equals_the_refits(crisp, reversible):
    trajs, bumps = _hidden_chain()
    op = TransferOperator(bumps, lag=3, dt=0.5, reversible=reversible).fit(trajs)
    sets = pcca(TransferOperator(bumps, lag=3, reversible=True).fit(trajs), trajs, 4)
    members = sets.memberships_of if crisp else sets.fuzzy_memberships_of
    steps = np.array([1, 2, 4])
    ck = ck_test(op, trajs, [1, 2, 4], members, n_bootstrap=8, seed=2)
    pred, est = _ck_curves(op, trajs, steps, members, True)
    np.testing.assert_allclose(ck.predictions, pred, atol=1e-10)
    np.testing.assert_allclose(ck.estimates, est, atol=1e-10)

    def curves(sample):
        return np.stack(_ck_curves(refit_at_lag(op, sample, 3), sample, steps, members, True))

    slow = bootstrap_trajectories(trajs, curves, 8, seed=2)
    lower, upper = interval_of(slow, 0.95)
    np.testing.assert_allclose(ck.predictions_lower, lower[0], atol=1e-10)
    np.testing.assert_allclose(ck.estimates_upper, upper[1], atol=1e-10)
    np.testing.assert_allclose(ck.estimates_lower, lower[1], atol=1e-10)


def test_ck_test_on_a_single_trajectory_and_a_loaded_model(tmp_path):
    from dpnets import load

    s = MarkovChain(P).sample(6000, seed=1)[:, None].astype(float)
    op = TransferOperator(MonomialFeatures(2), lag=2).fit(s)

    def members(x):
        return one_hot(x)

    ck = ck_test(op, s, [1, 3], members, include_lag0=False, n_bootstrap=6, seed=0)
    pred, est = _ck_curves(op, [s], np.array([1, 3]), members)
    np.testing.assert_allclose(ck.predictions, pred, atol=1e-10)
    np.testing.assert_allclose(ck.estimates, est, atol=1e-10)
    blocks = np.array_split(s, 10)
    units = bootstrap_trajectories(
        blocks,
        lambda t: np.stack(_ck_curves(refit_at_lag(op, t, 2), t, np.array([1, 3]), members)),
        6,
        seed=0,
    )
    assert units.shape == (6, 2, 2, 3, 3)
    np.testing.assert_allclose(ck.estimates_upper, interval_of(units, 0.95)[1][1], atol=1e-10)
    # a loaded model holds no training data: its operator is re-estimated on the data
    op.save(tmp_path / "m.pt")
    again = ck_test(
        load(tmp_path / "m.pt", features=MonomialFeatures(2)),
        s,
        [1, 3],
        members,
        include_lag0=False,
    )
    np.testing.assert_allclose(again.predictions, pred, atol=1e-10)
    # a block shorter than a step is the error of a fit on it
    with pytest.raises(ValueError, match="lag=300 is not shorter than trajectory"):
        short = TransferOperator(MonomialFeatures(2), lag=2).fit(s[:1000])
        ck_test(short, s[:1000], [150], members, n_bootstrap=2, seed=0)


def test_a_reweighted_model_is_refitted_on_each_resample_in_the_ck_test():
    trajs = _ou(4, 500)
    op = TransferOperator(MonomialFeatures(3), lag=2, reversible="reweight").fit(trajs)

    def members(x):
        return np.stack([x[:, 0] < 0, x[:, 0] >= 0], axis=1).astype(float)

    ck = ck_test(op, trajs, [1, 3], members, n_bootstrap=4, seed=0)
    pred, est = _ck_curves(op, trajs, np.array([1, 3]), members, True)
    np.testing.assert_allclose(ck.predictions, pred, atol=1e-12)
    np.testing.assert_allclose(ck.estimates, est, atol=1e-12)


def test_other_estimators_and_progress_bars_still_work(capsys):
    trajs = _ou(4, 400)
    model = EDMD("monomial", degree=2, lag=2).fit(trajs)  # refitted on each resample
    spec = bootstrap_spectrum(model, trajs, k=2, n_bootstrap=4, seed=0, progress=True)
    assert spec.samples.shape == (4, 2)
    res = implied_timescales(model, trajs, [1, 2], k=1, n_bootstrap=4, seed=0, progress=True)
    assert np.all(np.isfinite(res.samples))
    op = TransferOperator(MonomialFeatures(2), lag=2).fit(trajs)
    ck = ck_test(op, trajs, [1, 2], lambda x: np.ones((len(x), 1)), n_bootstrap=4, progress=True)
    np.testing.assert_allclose(ck.estimates, 1.0, atol=1e-12)


def test_features_trained_at_each_lag_are_kept_for_the_resamples_at_that_lag():
    """A composite TransferOperator(DPNet(...)) is trained once per lag; the resamples at
    that lag refit the operator on those features (not one training per resample)."""
    from dpnets import DPNet
    from dpnets.nn import MLP

    trajs = [np.concatenate([t, -t], axis=1) for t in _ou(4, 500)]
    net = DPNet(MLP(2, (8,), 2), epochs=2, seed=0, progress=False)
    plain = implied_timescales(TransferOperator(net), trajs, [1, 3], k=1)
    res = implied_timescales(TransferOperator(net), trajs, [1, 3], k=1, n_bootstrap=5, seed=0)
    np.testing.assert_allclose(res.timescales, plain.timescales, rtol=1e-10)
    assert res.samples.shape == (5, 2, 1) and np.all(np.isfinite(res.samples))
    # OU with rate 1: the slowest timescale is 1 (time units of dt = 0.1 frames: 10 frames)
    np.testing.assert_allclose(np.median(res.samples, axis=0), 10.0, rtol=0.3)


@pytest.mark.parametrize("kind", ["vamp1", "vamp2", "vampE"])
@pytest.mark.parametrize("single", [False, True])
def test_cross_validate_from_sums_equals_fit_and_score_on_each_fold(kind, single):
    from dpnets.validation import cross_validate

    trajs = [np.concatenate(_ou(4, 300))] if single else _ou(6, 300)
    make = lambda: TransferOperator(MonomialFeatures(2), lag=2)  # noqa: E731
    scores = cross_validate(make(), trajs, lag=2, cv=3, kind=kind, seed=1)
    if single:
        folds = [[b] for b in np.array_split(trajs[0], 3)]
    else:
        order = np.random.default_rng(1).permutation(len(trajs))
        folds = [[trajs[i] for i in part] for part in np.array_split(order, 3)]
    for f in range(3):
        train = [t for g, fold in enumerate(folds) if g != f for t in fold]
        direct = make().fit(train).score(folds[f], kind=kind)
        assert abs(scores[f] - direct) < 1e-10 * max(1.0, abs(direct))
