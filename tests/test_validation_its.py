"""Implied timescales against lag (issue 15, first part): equal to deeptime's MSM on
indicator features, bootstrap intervals that cover the truth, refitted learned features."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpnets import DPNet, TransferOperator
from dpnets.nn import MLP
from dpnets.systems import MarkovChain
from dpnets.validation import ImpliedTimescales, clone, implied_timescales

P = np.array([[0.90, 0.09, 0.01], [0.06, 0.90, 0.04], [0.01, 0.07, 0.92]])


def one_hot(s):
    return np.eye(3)[np.asarray(s).reshape(-1).astype(int)]


def exact(lag: int, dt: float = 1.0) -> np.ndarray:
    mod = np.sort(np.abs(np.linalg.eigvals(P)))[::-1][1:]
    return -dt / np.log(mod)  # independent of the lag for a Markov chain


def test_equal_to_deeptime_msm_on_indicator_features():
    deeptime = pytest.importorskip("deeptime.markov.msm")
    dtrajs = [MarkovChain(P).sample(3000, seed=s) for s in range(3)]
    lags = [1, 2, 5, 10]
    res = implied_timescales(TransferOperator(one_hot, constant=False), dtrajs, lags, k=2)
    for j, lag in enumerate(lags):
        msm = deeptime.MaximumLikelihoodMSM(reversible=False, lagtime=lag).fit(dtrajs)
        ref = msm.fetch_model().timescales(2)
        np.testing.assert_allclose(res.timescales[j], ref, rtol=1e-8)


def test_bootstrap_intervals_cover_the_exact_timescales():
    """50 independent datasets of 20 short trajectories: the 95% interval of the slowest
    timescale at lag 2 covers the exact value in at least 90% of them."""
    est = TransferOperator(one_hot, constant=False)
    hits = 0
    for d in range(50):
        trajs = [MarkovChain(P).sample(150, seed=1000 * d + i) for i in range(20)]
        res = implied_timescales(est, trajs, [2], k=1, n_bootstrap=60, seed=d)
        hits += bool(res.lower[0, 0] <= exact(2)[0] <= res.upper[0, 0])
    assert hits >= 45


def test_single_trajectory_blocks_and_dt_units():
    s = MarkovChain(P).sample(20_000, seed=3)
    res = implied_timescales(
        TransferOperator(one_hot, constant=False), s, [1, 3], k=2, dt=0.5, n_bootstrap=20, seed=0
    )
    assert isinstance(res, ImpliedTimescales)
    np.testing.assert_array_equal(res.lag_times, [0.5, 1.5])
    np.testing.assert_allclose(res.timescales, np.tile(exact(1, 0.5), (2, 1)), rtol=0.1)
    assert np.all(res.lower <= res.timescales) and np.all(res.timescales <= res.upper)
    assert res.samples.shape == (20, 2, 2)
    # a lag as long as the data is refused, never reported as NaN or dropped
    with pytest.raises(ValueError, match=r"lag 60 is not shorter than the longest trajectory"):
        implied_timescales(TransferOperator(one_hot, constant=False), s[:50], [1, 60], k=1)


def test_learned_features_fixed_or_refitted_at_each_lag():
    s = MarkovChain(P).sample(20_000, seed=0)
    x = np.array([[0.0, 0.0], [2.0, 0.5], [1.0, 2.0]])[s]
    x = x + 0.2 * np.random.default_rng(1).standard_normal(x.shape)
    torch.manual_seed(0)
    net = DPNet(MLP(2, (32, 32), 2), epochs=10, seed=0, progress=False).fit(x)
    fixed = implied_timescales(TransferOperator(net), x, [1, 4], k=2)
    refit = implied_timescales(TransferOperator(net), x, [1, 4], k=2, refit_features=True)
    for res in (fixed, refit):
        np.testing.assert_allclose(res.timescales, np.tile(exact(1), (2, 1)), rtol=0.12)
    assert not np.allclose(fixed.timescales, refit.timescales)
    assert net.lag_ == 1  # the given DPNet is not retrained


def test_clone_and_bad_arguments():
    op = TransferOperator(one_hot, ridge=1e-3, dt=2.0)
    twin = clone(op)
    assert type(twin) is TransferOperator and twin.ridge == 1e-3 and twin.dt == 2.0
    with pytest.raises(TypeError, match="cannot clone"):
        clone(object())
    s = MarkovChain(P).sample(500, seed=0)
    with pytest.raises(ValueError, match="lags is empty"):
        implied_timescales(op, s, [])
    with pytest.raises(ValueError, match="lags must be positive integers, got 0"):
        implied_timescales(op, s, [0])
    with pytest.raises(TypeError, match="not \\(X, Y\\) pairs"):
        implied_timescales(op, (s, s), [1])
    with pytest.raises(ValueError, match="confidence must be"):
        implied_timescales(op, s, [1], confidence=1.0)


def test_plot_is_headless_and_labelled(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    s = MarkovChain(P).sample(5000, seed=0)
    res = implied_timescales(
        TransferOperator(one_hot, constant=False), s, [1, 2, 5], k=2, n_bootstrap=10, seed=0
    )
    fig = res.plot(units="steps")  # every plot function returns its figure
    (ax,) = fig.axes
    assert ax.get_xlabel() == "lag time (steps)" and ax.get_ylabel() == "implied timescale (steps)"
    fig.savefig(tmp_path / "its.png")
    assert (tmp_path / "its.png").stat().st_size > 1000


def test_vamp_scores_equal_deeptime_on_held_out_data():
    vamp = pytest.importorskip("deeptime.decomposition")
    rng = np.random.default_rng(0)
    x = np.sin(20 * np.cumsum(rng.standard_normal((4000, 3)), axis=0) * 0.01)
    train, test = x[:3000], x[3000:]
    features = lambda z: np.hstack([z, z**2])  # noqa: E731
    op = TransferOperator(features, lag=2).fit(train)
    m = vamp.VAMP(lagtime=2).fit(features(train)).fetch_model()
    t = vamp.VAMP(lagtime=2).fit(features(test)).fetch_model()
    for r in (1, 2, "E"):
        np.testing.assert_allclose(
            op.score(test, kind=f"vamp{r}"), m.score(r, test_model=t), rtol=1e-8
        )
    # without the constant in the basis: the same VAMP scores, and P^0 of the raw basis
    raw = TransferOperator(features, constant=False, lag=2).fit(train)
    np.testing.assert_allclose(raw.score(test, kind="vampE"), m.score("E", test_model=t), rtol=1e-8)
    np.testing.assert_allclose(op.score(test, kind="projection"), op.score(test), rtol=1e-10)
    assert raw.score(test, kind="projection") < raw.score(test) - 0.5
    # VAMP-E rewards the training model only as far as it holds on the test data
    assert m.score("E", test_model=t) < op.score(train, kind="vampE")
    with pytest.raises(ValueError, match="kind must be one of"):
        op.score(test, kind="vamp3")


def test_cross_validation_by_trajectories_prefers_the_right_features():
    from dpnets.validation import cross_validate

    trajs = [MarkovChain(P).sample(400, seed=s) for s in range(10)]
    good = cross_validate(TransferOperator(one_hot), trajs, lag=1, cv=5, seed=0)
    poor = cross_validate(
        TransferOperator(lambda s: (np.asarray(s) == 0).astype(float).reshape(-1, 1)),
        trajs,
        lag=1,
        cv=5,
        seed=0,
    )
    assert good.shape == (5,) and np.all(good > poor)
    # the population VAMP-2 of the indicators: 1 + the squared non-trivial eigenvalues
    lam = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
    assert good.mean() == pytest.approx(np.sum(lam**2), abs=0.05)
    single = cross_validate(TransferOperator(one_hot), np.concatenate(trajs), cv=4)
    assert single.shape == (4,)
    with pytest.raises(ValueError, match="cannot make 5 folds"):
        cross_validate(TransferOperator(one_hot), trajs[:3], cv=5)


def test_ck_test_equals_deeptime_and_detects_a_non_markovian_model(tmp_path):
    msm = pytest.importorskip("deeptime.markov.msm")
    from deeptime.markov._base import MembershipsObservable
    from deeptime.util.validation import ck_test as deeptime_ck

    from dpnets.validation import ck_test

    dtrajs = [MarkovChain(P).sample(3000, seed=s) for s in range(3)]
    sets = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])  # {0, 1} and {2}
    tau, steps = 2, [1, 2, 3, 4]
    op = TransferOperator(one_hot, constant=False, lag=tau).fit(dtrajs)
    ours = ck_test(op, dtrajs, steps, lambda s: one_hot(s) @ sets)
    models = [
        msm.MaximumLikelihoodMSM(reversible=False, lagtime=k * tau).fit(dtrajs).fetch_model()
        for k in steps
    ]
    ref = deeptime_ck(models, MembershipsObservable(models[0], sets), test_model=models[0])
    np.testing.assert_allclose(ours.predictions, np.array(ref.predictions), atol=1e-10)
    np.testing.assert_allclose(ours.estimates, np.array(ref.estimates), atol=1e-10)
    np.testing.assert_array_equal(ours.lag_times, ref.lagtimes)
    # the full 3-state MSM is Markovian: predictions and estimates agree
    assert np.max(np.abs(ours.predictions - ours.estimates)) < 0.03
    # a chain whose states 0 (fast exit) and 1 (slow exit) are lumped into one set: the full
    # MSM passes the test, the lumped 2-state model fails it clearly
    q = np.array([[0.7, 0.0, 0.3], [0.0, 0.98, 0.02], [0.15, 0.05, 0.8]])
    qtrajs = [MarkovChain(q).sample(5000, seed=s) for s in range(3)]
    lumped = lambda s: one_hot(s) @ sets  # noqa: E731
    full = TransferOperator(one_hot, constant=False, lag=1).fit(qtrajs)
    good = ck_test(full, qtrajs, [2, 4, 8, 16], lumped)
    assert np.max(np.abs(good.predictions - good.estimates)) < 0.02
    coarse = TransferOperator(lumped, constant=False, lag=1).fit(qtrajs)
    bad = ck_test(coarse, qtrajs, [2, 4, 8, 16], lumped)
    assert np.max(np.abs(bad.predictions - bad.estimates)) > 0.1
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    fig = ours.plot(units="steps")
    fig.savefig(tmp_path / "ck.png")
    assert len(fig.axes) == 4 and (tmp_path / "ck.png").stat().st_size > 1000


def test_bootstrap_trajectories_and_percentile_interval_cover_a_known_mean():
    from dpnets.validation import bootstrap_trajectories, percentile_interval

    rng = np.random.default_rng(0)
    trajs = [rng.normal(2.0, 1.0, size=(400, 1)) for _ in range(20)]
    samples = bootstrap_trajectories(trajs, lambda t: np.concatenate(t).mean(0), 200, seed=1)
    assert samples.shape == (200, 1)
    lo, hi = percentile_interval(samples, 0.95)
    # the standard error of the mean of 8,000 unit-variance draws is 0.011
    assert lo[0] < 2.0 < hi[0] and 0.02 < hi[0] - lo[0] < 0.07
    again = bootstrap_trajectories(trajs, lambda t: np.concatenate(t).mean(0), 200, seed=1)
    np.testing.assert_array_equal(samples, again)
    # one trajectory: resampled in blocks
    one = bootstrap_trajectories(trajs[:1], lambda t: np.concatenate(t).mean(0), 50, n_blocks=8)
    assert one.shape == (50, 1) and np.std(one) > 0
    with pytest.raises(ValueError, match="n_bootstrap"):
        bootstrap_trajectories(trajs, np.mean, 0)
    with pytest.raises(ValueError, match="confidence"):
        percentile_interval(samples, 1.5)
    lo, hi = percentile_interval(np.full((10, 2), np.inf))
    assert np.all(np.isinf(lo)) and np.all(np.isinf(hi))


def _ar1_with_label(n: int, label_noise: float, seed: int) -> list[np.ndarray]:
    """Four AR(1) trajectories (coefficient 0.5) with a second coordinate equal to a
    trajectory label 0 or 1, plus white noise of std ``label_noise``."""
    rng = np.random.default_rng(seed)
    trajs = []
    for label in (0.0, 1.0, 0.0, 1.0):
        x = np.zeros(n)
        for t in range(1, n):
            x[t] = 0.5 * x[t - 1] + rng.normal()
        lab = np.full(n, label)
        if label_noise:
            lab = lab + label_noise * rng.normal(size=n)
        trajs.append(np.stack([x, lab], axis=1))
    return trajs


def test_warns_when_a_timescale_is_longer_than_the_data():
    """A feature constant along each trajectory (a trajectory label) has an eigenvalue that
    does not decay with the lag: its timescale grows like the lag and exceeds the data."""
    import warnings

    # the label with a little white noise: |lambda| = 0.25 / (0.25 + 0.05^2) = 0.99 at every
    # lag, i.e. timescales 100 x lag
    trajs = _ar1_with_label(200, 0.05, seed=0)
    with pytest.warns(RuntimeWarning, match="longer than the longest trajectory") as rec:
        res = implied_timescales(TransferOperator(lambda z: z), trajs, [1, 5, 20], k=1)
    assert "lag(s) 5, 20 " in str(rec[0].message)
    np.testing.assert_allclose(res.timescales[:, 0], [100, 500, 2000], rtol=0.5)
    # without the label the fast AR(1) timescale (-1 / ln 0.5 = 1.44) raises nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = implied_timescales(TransferOperator(lambda z: z[:, :1]), trajs, [1, 2], k=1)
    np.testing.assert_allclose(ok.timescales[0, 0], 1 / np.log(2), rtol=0.25)


def test_warns_when_a_second_eigenvalue_is_exactly_one():
    trajs = _ar1_with_label(150, 0.0, seed=1)  # an exact trajectory label
    with pytest.warns(RuntimeWarning, match="2 real eigenvalues equal to 1 at lag"):
        res = implied_timescales(TransferOperator(lambda z: z), trajs, [1, 3], k=1)
    np.testing.assert_allclose(res.timescales[0, 0], 1 / np.log(2), rtol=0.3)


def test_k_beyond_the_models_timescales_is_refused_not_padded_with_nan():
    """Three indicator functions: three eigenvalues, one stationary, so two timescales; k=3 or
    k=5 is refused as bootstrap_spectrum refuses it (not a table padded with NaN columns)."""
    s = MarkovChain(P).sample(3000, seed=0)
    op = TransferOperator(one_hot, constant=False)
    for k in (3, 5):
        with pytest.raises(ValueError) as err:
            implied_timescales(op, s, [1, 2], k=k)
        assert str(err.value) == (
            f"k={k} exceeds the 2 timescales the model has (3 eigenvalues, 1 of them "
            "stationary); use k <= 2"
        )
    res = implied_timescales(op, s, [1, 2], k=2)  # the largest k: every entry finite
    assert np.isfinite(res.timescales).all()
    np.testing.assert_allclose(res.timescales[0], exact(1), rtol=0.1)
    default = implied_timescales(op, s, [1, 2])  # 3, or all the model has if fewer
    np.testing.assert_array_equal(default.timescales, res.timescales)
