"""TransferOperator against ground truth: linear-Gaussian AR(1), finite Markov chains."""

import numpy as np
import pytest

from dpnets import TransferOperator
from dpnets.systems import LinearGaussian, MarkovChain

A = np.array([[0.85, 0.25, 0.0], [-0.2, 0.75, 0.1], [0.0, 0.05, 0.5]])


@pytest.fixture(scope="module")
def ar1():
    sys = LinearGaussian(A, noise_std=0.5)
    return sys, sys.sample(100_000, seed=0)


def test_ar1_eigenvalues_and_forecasts(ar1):
    sys, x = ar1
    op = TransferOperator().fit(x)
    est = op.eig()
    ref = sys.eigvals()
    # match each true eigenvalue to the nearest estimate
    assert max(np.min(np.abs(est - lam)) for lam in ref) < 0.02
    x0 = np.array([[1.0, -2.0, 0.5], [0.3, 0.4, -1.0]])
    for t in (1, 2, 5):
        np.testing.assert_allclose(op.predict(x0, t), sys.forecast(x0, t), atol=0.02)
    stacked = op.predict(x0, [1, 2, 5])
    assert stacked.shape == (3, 2, 3)
    np.testing.assert_allclose(stacked[2], op.predict(x0, 5))


def test_predict_is_consistent_with_matrix_powers(ar1):
    _, x = ar1
    rng = np.random.default_rng(0)
    feats = lambda s: np.hstack([np.ones((len(s), 1)), s, s[:, :1] ** 2])  # noqa: E731
    op = TransferOperator(feats, ridge=1e-6).fit(x[:20_000])
    z = rng.normal(size=(5, 2))
    phi_y = feats(x[1:20_000])
    x0 = rng.normal(size=(4, 3))
    for t in (1, 3, 7):
        expected = feats(x0) @ np.linalg.matrix_power(op.operator_, t) @ z
        np.testing.assert_allclose(op.predict(x0, t, observable=phi_y @ z), expected, atol=1e-8)
    # Koopman modes reproduce the forecast: sum_i lambda_i^t phi_i(x) m_i
    modes = op.modes(observable=phi_y @ z)
    phi = op.eigenfunctions(x0)
    for t in (1, 4):
        rec = ((phi * op.eig() ** t) @ modes).real
        np.testing.assert_allclose(rec, op.predict(x0, t, observable=phi_y @ z), atol=1e-8)


def test_eigenfunctions_are_eigenfunctions(ar1):
    _, x = ar1
    op = TransferOperator(constant=False).fit(x)
    lam, left, right = op.eig(vectors=True)
    np.testing.assert_allclose(op.operator_ @ right, right * lam, atol=1e-10)
    np.testing.assert_allclose(left.conj().T @ right, np.eye(3), atol=1e-10)
    phi = op.eigenfunctions(x[:1000])
    np.testing.assert_allclose(phi, x[:1000] @ right)
    xi = op.eigenfunctions(x[:10], side="left")
    np.testing.assert_allclose(xi, x[:10] @ left.conj())
    # right eigenfunctions have unit norm under the training measure
    norms = np.mean(np.abs(op.eigenfunctions(x[:-1])) ** 2, axis=0)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-8)


def test_markov_chain_one_hot_recovers_transition_matrix():
    chain = MarkovChain.random(6, seed=2)
    s = chain.sample(200_000, seed=1)
    op = TransferOperator(chain.one_hot).fit(s)
    np.testing.assert_allclose(op.operator_, chain.P, atol=0.02)
    est, ref = op.eig(), chain.eigvals()
    assert max(np.min(np.abs(est - lam)) for lam in ref) < 0.02
    # forecasting an observable f(state) = E[f(X_t) | X_0 = i] = (P^t f)_i
    f = np.arange(6.0)
    obs = f[s[1:]]
    pred = op.predict(np.arange(6), t=3, observable=obs)
    np.testing.assert_allclose(pred, np.linalg.matrix_power(chain.P, 3) @ f, atol=0.05)


def test_implied_timescales():
    sys = LinearGaussian(np.diag([0.9, 0.5]), noise_std=0.3)
    x = sys.sample(50_000, seed=3)
    op = TransferOperator(lag=2).fit(x)
    ts = op.implied_timescales()
    # the constant is added (linear features do not span it): the stationary mode is inf
    assert op.constant_ and ts[0] == np.inf
    ref = -2.0 / np.log(np.array([0.81, 0.25]))
    np.testing.assert_allclose(ts[1:], ref, rtol=0.05)
    # dt is the time per frame: the lag of fit multiplies it
    np.testing.assert_allclose(op.implied_timescales(dt=0.1), 0.1 * ts)
    np.testing.assert_allclose(
        TransferOperator(dt=0.1, lag=2).fit(x).implied_timescales(), 0.1 * ts
    )


def test_multiple_trajectories_never_cross_boundaries():
    # two constant trajectories at different levels: a crossing pair would add (a, b)
    t1, t2 = np.full((50, 1), 1.0), np.full((30, 1), 3.0)
    op = TransferOperator(lambda s: np.hstack([np.ones_like(s), s]), lag=2).fit([t1, t2])
    assert op.n_samples_ == 48 + 28
    np.testing.assert_allclose(op.predict(np.array([[1.0], [3.0]]), 1), [[1.0], [3.0]], atol=1e-10)


def test_ridge_shrinks_operator():
    x = LinearGaussian(np.diag([0.9, 0.5]), noise_std=0.3).sample(5000, seed=0)
    big = TransferOperator(ridge=10.0).fit(x)
    small = TransferOperator().fit(x)
    assert np.max(np.abs(big.eig())) < np.max(np.abs(small.eig()))


def test_stationary_weights_reweigh_off_equilibrium_ensemble_to_pi():
    """Koopman reweighting: many short runs all started in state 0 (far from equilibrium);
    with one-hot features the weights recover the exact stationary law."""
    chain = MarkovChain.random(6, seed=2)
    trajs = [chain.sample(12, x0=0, seed=k) for k in range(3000)]
    op = TransferOperator(chain.one_hot, lag=1).fit(trajs)
    pi = chain.stationary_distribution()
    x0 = np.concatenate([t[:-1] for t in trajs])
    w = op.stationary_weights()
    assert w.shape == x0.shape and abs(w.mean() - 1.0) < 1e-12
    est = np.bincount(x0, weights=w, minlength=6) / w.sum()
    raw = np.bincount(x0, minlength=6) / len(x0)
    np.testing.assert_allclose(est, pi, atol=0.01)
    assert np.abs(raw - pi).max() > 0.05  # the unweighted histogram is biased
    # weights of given states, and the same function evaluated elsewhere
    np.testing.assert_allclose(op.stationary_weights(np.arange(6)), est / raw, rtol=1e-8)


def test_the_operator_is_a_pure_function_of_the_moments():
    """estimation.estimate_operator: counts of a Markov chain in, the count estimator out,
    as an immutable result that the estimator's fitted attributes are set from."""
    import dataclasses

    from dpnets.estimation import OperatorFit, estimate_operator, operator_products
    from dpnets.moments import Moments

    chain = MarkovChain.random(4, seed=3)
    s = chain.sample(5000, seed=0)
    stats = Moments(operator_products())
    TransferOperator.add_pairs(stats, chain.one_hot, s[:-1], s[1:])
    fit = estimate_operator(stats, constant=False)
    counts = np.zeros((4, 4))
    np.add.at(counts, (s[:-1], s[1:]), 1.0)
    # one-hot features: T = Cx^+ Cxy is the row-normalised count matrix, exactly
    np.testing.assert_allclose(fit.operator, counts / counts.sum(1, keepdims=True), atol=1e-12)
    assert fit.n_samples == 4999 and fit.n_features == 4 and not fit.constant
    with pytest.raises(dataclasses.FrozenInstanceError):
        fit.operator = None
    # the estimator's fit is this result, attribute for attribute
    op = TransferOperator(chain.one_hot, constant=False).fit(s)
    same = OperatorFit.from_model(op)
    for field in dataclasses.fields(OperatorFit):
        a, b = getattr(fit, field.name), getattr(same, field.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        else:
            assert a == b, field.name
    # "auto" finds the constant in the span of the indicators: the same regression
    auto = estimate_operator(stats)
    assert not auto.constant
    np.testing.assert_array_equal(auto.operator, fit.operator)


def test_fewer_pairs_than_basis_functions_says_what_the_basis_holds():
    x = np.random.default_rng(0).normal(size=(6, 8))
    with pytest.raises(ValueError) as info:
        TransferOperator(constant=True).fit(x)
    assert str(info.value) == (
        "fewer samples (5 pairs) than basis functions (9: 8 features and the constant "
        "function); provide more data or fewer features"
    )
