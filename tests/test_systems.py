"""Tests for ``dpnets.systems`` against exact ground truth.

Statistical tolerances are ``Z`` standard errors (``Z = 5``), with the standard errors derived
from the known law of each process; all samplers use fixed seeds, so the tests are
deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import beta as beta_function
from scipy.special import binom

from dpnets.systems import LinearGaussian, LogisticMap, MarkovChain, OrnsteinUhlenbeck

Z = 5.0  # number of standard errors allowed in statistical checks


# --------------------------------------------------------------------------- LogisticMap
@pytest.fixture(scope="module")
def logistic() -> LogisticMap:
    return LogisticMap(N=20)


def chebyshev_features(x: np.ndarray, degree: int = 6) -> np.ndarray:
    """Chebyshev polynomials T_0..T_degree of 2x - 1 (the paper's "Cheby-T" dictionary)."""
    return np.polynomial.chebyshev.chebvander(2.0 * np.asarray(x)[:, 0] - 1.0, degree)


def test_logistic_eigvals(logistic: LogisticMap) -> None:
    ev = logistic.eigvals()
    assert ev.shape == (21,)
    expected = np.array([1.0, -0.1933 + 0.1909j, -0.1933 - 0.1909j, -0.0267, 0.0221])
    np.testing.assert_allclose(ev[:5], expected, rtol=0, atol=1e-4)
    assert abs(ev[0] - 1.0) < 1e-12
    assert np.all(np.diff(np.abs(ev)) <= 1e-12)


def test_logistic_svals(logistic: LogisticMap) -> None:
    sv = logistic.svals()
    assert sv.shape == (21,)
    np.testing.assert_allclose(sv[:5], [1.0, 0.9232, 0.8923, 0.6964, 0.6573], rtol=0, atol=1e-4)
    assert abs(sv[0] - 1.0) < 1e-8
    assert np.all(np.diff(sv) <= 0)
    # The L^2(pi) singular values dominate the moduli of the eigenvalues (Weyl).
    assert np.all(np.cumprod(np.abs(logistic.eigvals())[:8]) <= np.cumprod(sv[:8]) + 1e-12)


def test_logistic_svals_lebesgue(logistic: LogisticMap) -> None:
    sv = logistic.svals_lebesgue()
    np.testing.assert_allclose(sv[:3], [1.2416, 0.8774, 0.7683], rtol=0, atol=1e-4)


def test_logistic_quadrature_converged() -> None:
    coarse, fine = LogisticMap(N=20, n_panels=64), LogisticMap(N=20, n_panels=256)
    np.testing.assert_allclose(coarse.eigvals()[:5], fine.eigvals()[:5], atol=1e-12)
    np.testing.assert_allclose(coarse.svals(), fine.svals(), atol=1e-12)
    np.testing.assert_allclose(coarse.svals_lebesgue(), fine.svals_lebesgue(), atol=1e-12)


def test_logistic_invariant_density(logistic: LogisticMap) -> None:
    nodes, weights = np.polynomial.legendre.leggauss(400)  # independent of the class's rule
    x, w = 0.5 * (nodes + 1.0), 0.5 * weights
    assert abs(w @ logistic.invariant_density(x) - 1.0) < 1e-10
    grid = np.linspace(0.0, 1.0, 2001)
    values = logistic.invariant_density(grid)
    assert values.shape == grid.shape
    assert values.min() > 0.0
    assert logistic.invariant_density(grid[:, None]).shape == (2001, 1)
    # Invariance checked directly against the kernel p(x, y) = c_N cos^N(pi (y - F(x))).
    c_n = np.pi / beta_function(10.5, 0.5)
    y = np.linspace(0.0, 1.0, 37)
    kernel = c_n * np.cos(np.pi * (y[None, :] - LogisticMap.F(x)[:, None])) ** 20
    pushed = (w * logistic.invariant_density(x)) @ kernel
    np.testing.assert_allclose(pushed, logistic.invariant_density(y), rtol=0, atol=1e-10)


def test_logistic_noise_features_factorise_kernel(logistic: LogisticMap) -> None:
    x = np.array([0.03, 0.4, 0.77])
    y = np.array([0.1, 0.5, 0.95, 0.999])
    c_n = logistic.noise_normalisation
    kernel = c_n * np.cos(np.pi * (y[None, :] - LogisticMap.F(x)[:, None])) ** 20
    factor = logistic.noise_features_composed(x) @ logistic.noise_features(y).T
    np.testing.assert_allclose(factor, kernel, rtol=1e-12, atol=1e-12)
    assert logistic.noise_features(x[:, None]).shape == (3, 21)
    # The r-dimensional NoiseKernel baseline uses the smallest binomial coefficients first.
    sub = logistic.noise_features(x, n_features=4)
    np.testing.assert_allclose(sub, logistic.noise_features(x)[:, [0, 20, 1, 19]])
    np.testing.assert_allclose(LogisticMap.F([0.0, 0.25, 0.5]), [0.0, 0.75, 1.0])


def test_logistic_noise_sampler_is_exact(logistic: LogisticMap) -> None:
    n = 20
    c_n = np.pi / beta_function(0.5 * (n + 1), 0.5)
    j = np.arange(1, n // 2 + 1)

    def cdf(xi: np.ndarray) -> np.ndarray:  # exact CDF from the Fourier series of cos^N
        xi = np.asarray(xi, dtype=float)[..., None]
        series = binom(n, n // 2) * (xi[..., 0] + 0.5) + np.sum(
            binom(n, n // 2 - j) * np.sin(2 * np.pi * j * xi) / (np.pi * j), axis=-1
        )
        return c_n * series / 2.0**n

    assert abs(cdf(0.5) - 1.0) < 1e-12
    xi = logistic.sample_noise(50_000, seed=1)
    assert xi.shape == (50_000,) and np.all(np.abs(xi) < 0.5)
    assert stats.kstest(xi, cdf).pvalue > 1e-3
    np.testing.assert_array_equal(xi, logistic.sample_noise(50_000, seed=1))


def test_logistic_sample_basic(logistic: LogisticMap) -> None:
    traj = logistic.sample(1000, x0=0.3, seed=0)
    assert traj.shape == (1000, 1) and traj.dtype == np.float64
    assert traj[0, 0] == 0.3
    assert np.all((traj >= 0.0) & (traj < 1.0))
    np.testing.assert_array_equal(traj, logistic.sample(1000, x0=0.3, seed=0))
    assert not np.array_equal(traj, logistic.sample(1000, x0=0.3, seed=1))
    # Each step is F(x) plus a noise increment of modulus < 1/2 on the circle.
    step = traj[1:, 0] - LogisticMap.F(traj[:-1, 0])
    circ = (step + 0.5) % 1.0 - 0.5
    assert np.all(np.abs(circ) < 0.5)


def test_logistic_histogram_matches_invariant_density(logistic: LogisticMap) -> None:
    n, n_bins, batch = 200_000, 20, 1000
    traj = logistic.sample(n + 1, seed=123)[1:, 0]  # drop x0 (the chain mixes in a few steps)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    expected = np.array(
        [
            integrate.quad(logistic.invariant_density, a, b)[0]
            for a, b in zip(edges[:-1], edges[1:], strict=True)
        ]
    )
    assert abs(expected.sum() - 1.0) < 1e-10
    bins = np.minimum((traj * n_bins).astype(int), n_bins - 1)
    one_hot = np.eye(n_bins)[bins]
    freq = one_hot.mean(axis=0)
    # Standard errors by non-overlapping batch means (valid for this geometrically ergodic
    # chain, whose correlations decay like 0.27^k); 200 batches of length 1000.
    batch_means = one_hot.reshape(n // batch, batch, n_bins).mean(axis=1)
    se = batch_means.std(axis=0, ddof=1) / np.sqrt(n // batch)
    assert np.all(np.abs(freq - expected) < Z * se)
    # Sanity: the batch-means SE is of the order of the i.i.d. one.
    iid_se = np.sqrt(expected * (1 - expected) / n)
    assert np.all(se < 3 * iid_se)


def test_representation_metrics_exact_with_range_features(logistic: LogisticMap) -> None:
    # phi_k o F span the range of T, an invariant subspace containing all eigenfunctions.
    out = logistic.representation_metrics(logistic.noise_features_composed)
    true = logistic.eigvals()
    big = np.abs(true) > 1e-6  # tiny eigenvalues of this non-normal T are ill-conditioned
    np.testing.assert_allclose(out["eigvals"][big], true[big], rtol=0, atol=1e-6)
    assert out["spectral_error"] < 1e-6
    assert out["spectral_error_paper"] < 1e-6
    assert out["n_features"] == 21
    assert out["optimality_gap"] >= -1e-10


def test_representation_metrics_noise_features(logistic: LogisticMap) -> None:
    # The noise features phi_k span the co-range side (they contain the invariant density) but
    # not the range of T: the projected spectrum is close to, but not exactly, the true one.
    out = logistic.representation_metrics(logistic.noise_features)
    assert 1e-5 < out["spectral_error"] < 1e-3
    # Paper Table 1, "NoiseKernel" row (r = 7): spectral error 0.19, optimality gap 2.17.
    out7 = logistic.representation_metrics(lambda x: logistic.noise_features(x, 7))
    assert round(out7["spectral_error_paper"], 2) == 0.19
    assert round(out7["optimality_gap_paper"], 2) == 2.17


def test_representation_metrics_chebyshev_paper_row(logistic: LogisticMap) -> None:
    out = logistic.representation_metrics(chebyshev_features)
    assert out["n_features"] == 7
    # Paper Table 1, "Cheby-T" row: spectral error 0.20, optimality gap 1.24.
    assert abs(out["spectral_error_paper"] - 0.2020) < 1e-4
    assert abs(out["optimality_gap_paper"] - 1.2402) < 1e-4
    assert round(out["spectral_error_paper"], 2) == 0.20
    assert round(out["optimality_gap_paper"], 2) == 1.24
    # Distance from the three leading *true* eigenvalues to the estimated spectrum.
    assert abs(out["spectral_error"] - 0.1687) < 1e-4
    assert abs(out["optimality_gap"] - 1.1987) < 1e-4
    assert abs(out["projection_score"] - 2.7110) < 1e-4
    est = out["eigvals"]
    assert est.shape == (7,) and abs(est[0] - 1.0) < 1e-10  # constants are in the span


def test_representation_metrics_full_score_and_invariances(logistic: LogisticMap) -> None:
    sv = logistic.svals()
    # psi spans the range of T and psi' = phi_k / pi spans its co-range in L^2(pi): the score
    # is then the full Hilbert-Schmidt norm ||T||_HS^2 = sum_i sigma_i^2 and the gap vanishes.
    out = logistic.representation_metrics(
        logistic.noise_features_composed,
        lagged_feature_map=lambda x: logistic.noise_features(x) / logistic.invariant_density(x),
    )
    assert abs(out["projection_score"] - np.sum(sv**2)) < 1e-8
    assert abs(out["optimality_gap"]) < 1e-8
    # Score and projected eigenvalues are invariant under invertible linear maps of features.
    mix = np.random.default_rng(0).standard_normal((7, 7))
    ref = logistic.representation_metrics(chebyshev_features)
    mixed = logistic.representation_metrics(lambda x: chebyshev_features(x) @ mix)
    assert abs(ref["projection_score"] - mixed["projection_score"]) < 1e-8
    np.testing.assert_allclose(mixed["eigvals"], ref["eigvals"], atol=1e-8)
    # The score never exceeds the sum of the leading r squared singular values.
    freqs = np.arange(1, 6)

    def fourier(x: np.ndarray) -> np.ndarray:
        t = 2 * np.pi * x[:, :1] * freqs
        return np.hstack([np.ones_like(x), np.cos(t), np.sin(t)])

    assert logistic.representation_metrics(fourier)["optimality_gap"] > 0.0


class _FakeTensor:
    """Mimics the ``.detach().cpu()`` protocol of a torch tensor."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    def detach(self) -> _FakeTensor:
        return self

    def cpu(self) -> _FakeTensor:
        return self

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        return np.asarray(self.data, dtype=dtype)


def test_representation_metrics_accepts_tensors_and_validates(logistic: LogisticMap) -> None:
    ref = logistic.representation_metrics(chebyshev_features)
    out = logistic.representation_metrics(lambda x: _FakeTensor(chebyshev_features(x)))
    assert abs(out["projection_score"] - ref["projection_score"]) < 1e-12
    with pytest.raises(ValueError, match="shape"):
        logistic.representation_metrics(lambda x: np.ones((3, 2)))
    with pytest.raises(ValueError, match="n_eigs"):
        logistic.representation_metrics(chebyshev_features, n_eigs=0)


@pytest.mark.parametrize("bad", [3, -2, 2.0, "20"])
def test_logistic_validation(bad: object) -> None:
    with pytest.raises(ValueError):
        LogisticMap(N=bad)  # type: ignore[arg-type]


def test_logistic_sample_validation(logistic: LogisticMap) -> None:
    with pytest.raises(ValueError):
        logistic.sample(0)
    with pytest.raises(ValueError):
        logistic.sample(10, x0=1.5)


# --------------------------------------------------------------------------- Ornstein-Uhlenbeck
def test_ou_sample_moments() -> None:
    ou = OrnsteinUhlenbeck(theta=0.7, sigma=1.3, dt=0.2, mu=1.5)
    n = 200_000
    traj = ou.sample(n, seed=0)
    assert traj.shape == (n, 1) and traj.dtype == np.float64
    x = traj[:, 0]
    a, s = ou.decay, ou.stationary_std
    assert abs(s - 1.3 / np.sqrt(1.4)) < 1e-15
    # Asymptotic standard errors for a stationary Gaussian AR(1) with coefficient a.
    se_mean = s * np.sqrt((1 + a) / ((1 - a) * n))
    se_var = s**2 * np.sqrt(2 * (1 + a**2) / ((1 - a**2) * n))
    se_rho = np.sqrt((1 - a**2) / n)
    assert abs(x.mean() - ou.mu) < Z * se_mean
    assert abs(x.var() - s**2) < Z * se_var
    xc = x - x.mean()
    rho = np.dot(xc[1:], xc[:-1]) / np.dot(xc, xc)
    assert abs(rho - a) < Z * se_rho


def test_ou_sample_initial_condition_and_seed() -> None:
    ou = OrnsteinUhlenbeck()
    traj = ou.sample(5, x0=3.0, seed=4)
    assert traj[0, 0] == 3.0
    np.testing.assert_array_equal(traj, ou.sample(5, x0=3.0, seed=4))
    assert ou.sample(1, seed=0).shape == (1, 1)
    # One exact step: X_1 = mu + a (x0 - mu) + step_std * Z.
    z = np.random.default_rng(4).standard_normal(4)
    step_std = ou.stationary_std * np.sqrt(1 - ou.decay**2)
    assert abs(traj[1, 0] - (ou.decay * 3.0 + step_std * z[0])) < 1e-12


def test_ou_eigfuns_orthonormal_and_eigen() -> None:
    ou = OrnsteinUhlenbeck(theta=0.5, sigma=0.8, dt=0.3, mu=-0.4)
    k = 8
    z, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / np.sqrt(2 * np.pi)
    x = ou.mu + ou.stationary_std * z
    f = ou.eigfuns(x, k)
    assert f.shape == (40, k)
    np.testing.assert_allclose((f.T * w) @ f, np.eye(k), rtol=0, atol=1e-10)
    # E[f_j(X_1) | X_0 = x0] = exp(-j theta dt) f_j(x0), via Gauss-Hermite on the noise.
    x0 = np.array([-2.0, 0.1, 1.7])
    mean = ou.mu + ou.decay * (x0 - ou.mu)
    step_std = ou.stationary_std * np.sqrt(1 - ou.decay**2)
    nxt = mean[:, None] + step_std * z[None, :]
    cond = np.einsum("q,mqk->mk", w, ou.eigfuns(nxt.ravel(), k).reshape(3, 40, k))
    np.testing.assert_allclose(cond, ou.eigfuns(x0, k) * ou.eigvals(k), atol=1e-10)
    np.testing.assert_allclose(ou.eigfuns(x0[:, None], k), ou.eigfuns(x0, k))


def test_ou_eigvals() -> None:
    ou = OrnsteinUhlenbeck(theta=2.0, dt=0.05)
    np.testing.assert_allclose(ou.generator_eigvals(4), [0.0, -2.0, -4.0, -6.0])
    np.testing.assert_allclose(ou.eigvals(4, lag=3), np.exp(ou.generator_eigvals(4) * 0.15))
    np.testing.assert_allclose(ou.eigvals(3), np.exp(-np.arange(3) * 0.1))


@pytest.mark.parametrize(
    "kwargs", [{"theta": 0.0}, {"sigma": -1.0}, {"dt": 0.0}, {"mu": float("nan")}]
)
def test_ou_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        OrnsteinUhlenbeck(**kwargs)


# --------------------------------------------------------------------------- MarkovChain
def test_markov_stationary_and_spectra() -> None:
    chain = MarkovChain.random(6, seed=0)
    pi = chain.stationary_distribution()
    assert abs(pi.sum() - 1.0) < 1e-14 and np.all(pi > 0)
    np.testing.assert_allclose(pi @ chain.P, pi, rtol=0, atol=1e-14)
    ev = chain.eigvals()
    assert abs(ev[0] - 1.0) < 1e-12 and np.all(np.diff(np.abs(ev)) <= 1e-12)
    sv = chain.svals()
    assert sv.shape == (6,) and abs(sv[0] - 1.0) < 1e-12
    # A random dense chain is not reversible, so svals and |eigvals| differ.
    flux = pi[:, None] * chain.P
    assert not np.allclose(flux, flux.T)
    assert not np.allclose(sv, np.abs(ev))
    # svals are those of D^{1/2} P D^{-1/2}: check against the eigenvalues of T^* T.
    d = np.sqrt(pi)
    sym = d[:, None] * chain.P / d[None, :]
    np.testing.assert_allclose(sv**2, np.sort(np.linalg.eigvalsh(sym.T @ sym))[::-1], atol=1e-12)


def test_markov_reversible_svals_equal_abs_eigvals() -> None:
    chain = MarkovChain.random(7, seed=3, reversible=True)
    pi = chain.stationary_distribution()
    flux = pi[:, None] * chain.P
    np.testing.assert_allclose(flux, flux.T, atol=1e-15)
    np.testing.assert_allclose(chain.svals(), np.sort(np.abs(chain.eigvals()))[::-1], atol=1e-12)
    assert abs(chain.svals()[0] - 1.0) < 1e-12


def test_markov_sample_transition_counts() -> None:
    P = np.array(
        [[0.5, 0.5, 0.0, 0.0], [0.1, 0.2, 0.7, 0.0], [0.0, 0.3, 0.3, 0.4], [0.6, 0.0, 0.1, 0.3]]
    )
    chain = MarkovChain(P)
    n = 100_000
    traj = chain.sample(n, x0=2, seed=0)
    assert traj.shape == (n,) and traj.dtype == np.int64 and traj[0] == 2
    np.testing.assert_array_equal(traj, chain.sample(n, x0=2, seed=0))
    counts = np.zeros((4, 4))
    np.add.at(counts, (traj[:-1], traj[1:]), 1.0)
    visits = counts.sum(axis=1, keepdims=True)
    p_hat = counts / visits
    # Given the visits to i, the next states are i.i.d. Categorical(P[i]) (strong Markov).
    se = np.sqrt(P * (1 - P) / visits)
    assert np.all(np.abs(p_hat - P) <= Z * se)
    assert np.all(counts[P == 0] == 0)
    freq = np.bincount(traj, minlength=4) / n
    np.testing.assert_allclose(freq, chain.stationary_distribution(), atol=0.01)


def test_markov_transient_states_and_one_hot() -> None:
    P = np.array([[0.2, 0.8, 0.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]])  # state 0 is transient
    chain = MarkovChain(P)
    np.testing.assert_allclose(chain.stationary_distribution(), [0.0, 0.5, 0.5], atol=1e-14)
    assert chain.svals().shape == (2,) and abs(chain.svals()[0] - 1.0) < 1e-12
    assert np.all(chain.sample(50, seed=0) > 0)  # started from pi, never visits state 0
    oh = chain.one_hot(np.array([2, 0, 1]))
    np.testing.assert_array_equal(oh, np.eye(3)[[2, 0, 1]])
    assert oh.dtype == np.float64
    with pytest.raises(ValueError):
        chain.one_hot(np.array([3]))


@pytest.mark.parametrize(
    "P",
    [
        np.ones((2, 3)) / 3,
        np.array([[1.5, -0.5], [0.5, 0.5]]),
        np.array([[0.5, 0.4], [0.5, 0.5]]),
        np.eye(2),  # two closed classes: stationary distribution not unique
    ],
)
def test_markov_validation(P: np.ndarray) -> None:
    with pytest.raises(ValueError):
        MarkovChain(P)


# --------------------------------------------------------------------------- LinearGaussian
A2 = np.array([[0.8, 0.3], [-0.2, 0.6]])


def test_linear_stationary_cov_solves_lyapunov() -> None:
    q = np.array([[0.04, 0.01], [0.01, 0.09]])
    for system in (LinearGaussian(A2, noise_std=[0.2, 0.3]), LinearGaussian(A2, noise_cov=q)):
        sigma = system.stationary_cov()
        np.testing.assert_allclose(sigma, A2 @ sigma @ A2.T + system.noise_cov, atol=1e-14)
        assert np.all(np.linalg.eigvalsh(sigma) > 0)
    np.testing.assert_allclose(LinearGaussian(A2, noise_std=0.1).noise_cov, 0.01 * np.eye(2))


def test_linear_sample_covariance() -> None:
    system = LinearGaussian(A2, noise_std=[0.2, 0.3])
    n = 50_000
    traj = system.sample(n, seed=0)
    assert traj.shape == (n, 2) and traj.dtype == np.float64
    sigma = system.stationary_cov()
    emp = traj.T @ traj / n
    # Bartlett/Isserlis: Var(C_ij) ~ (1/n) sum_k [G_ii(k) G_jj(k) + G_ij(k) G_ji(k)],
    # with autocovariances G(k) = A^k Sigma (k >= 0) and G(-k) = G(k)^T.
    lags = [np.linalg.matrix_power(A2, k) @ sigma for k in range(200)]
    lags = [g.T for g in lags[:0:-1]] + lags
    var = sum(np.outer(np.diag(g), np.diag(g)) + g * g.T for g in lags) / n
    assert np.all(np.abs(emp - sigma) < Z * np.sqrt(var))
    # Lag-one cross-covariance E[x_{t+1} x_t^T] = A Sigma.
    lag1 = traj[1:].T @ traj[:-1] / (n - 1)
    np.testing.assert_allclose(lag1, A2 @ sigma, atol=5 * np.sqrt(var.max()))


def test_linear_sample_initial_condition() -> None:
    system = LinearGaussian(A2, noise_std=0.0)
    traj = system.sample(4, x0=[1.0, -1.0], seed=0)
    expected = [np.linalg.matrix_power(A2, t) @ [1.0, -1.0] for t in range(4)]
    np.testing.assert_allclose(traj, expected, atol=1e-15)


def test_linear_forecast_and_eigvals() -> None:
    system = LinearGaussian(A2)
    x = np.random.default_rng(1).standard_normal((5, 2))
    expected = np.stack([np.linalg.matrix_power(A2, 3) @ row for row in x])
    np.testing.assert_allclose(system.forecast(x, 3), expected, atol=1e-14)
    np.testing.assert_allclose(system.forecast(x, 0), x)
    np.testing.assert_allclose(system.forecast(x[0], 2), A2 @ A2 @ x[0])
    ev = system.eigvals()
    np.testing.assert_allclose(np.sort_complex(ev), np.sort_complex(np.linalg.eigvals(A2)))
    assert np.all(np.diff(np.abs(ev)) <= 1e-12)
    assert LinearGaussian(0.5).eigvals()[0] == 0.5


@pytest.mark.parametrize(
    ("A", "kwargs"),
    [
        (np.array([[1.0, 0.0], [0.0, 0.5]]), {}),
        (np.ones((2, 3)), {}),
        (A2, {"noise_std": [0.1, 0.2, 0.3]}),
        (A2, {"noise_std": -0.1}),
        (A2, {"noise_cov": np.array([[1.0, 0.0], [0.0, -1.0]])}),
        (A2, {"noise_cov": np.array([[1.0, 0.5], [0.0, 1.0]])}),
    ],
)
def test_linear_validation(A: np.ndarray, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        LinearGaussian(A, **kwargs)


# ------------------------------------------------------- worker processes (dpnets.parallel)
# The one process pool of the package: the alanine ensembles simulate in it, and the
# experiments run their fits in it. The jobs here are builtins (they pickle by name).


def test_run_jobs_orders_limits_threads_and_stays_in_process_for_one_worker() -> None:
    import time
    from functools import partial

    import torch

    from dpnets.parallel import run_jobs

    jobs = [partial(pow, 2, k) for k in range(4)]
    expected = [(k, 2**k) for k in range(4)]
    assert list(run_jobs(jobs)) == expected  # workers=1: in this process, in order
    own = torch.get_num_threads()
    # in this process neither threads nor the initializer apply
    assert list(run_jobs([torch.get_num_threads], threads=7, initializer=int)) == [(0, own)]
    # in order, although the first job finishes last
    slow_first = [partial(time.sleep, 1.0), *jobs]
    assert list(run_jobs(slow_first, workers=2))[1:] == [(k + 1, r) for k, r in expected]
    # as completed, with one torch thread in each worker
    slow_first = [partial(time.sleep, 3.0), torch.get_num_threads, torch.get_num_threads]
    done = list(run_jobs(slow_first, workers=2, threads=1, ordered=False))
    assert sorted(i for i, _ in done) == [0, 1, 2] and done[0][0] != 0
    assert [r for i, r in done if i] == [1, 1] and torch.get_num_threads() == own
    with pytest.raises(ValueError, match="workers must be >= 1"):
        list(run_jobs(jobs, workers=0))


def test_run_jobs_stops_the_workers_on_an_error_or_an_interrupt() -> None:
    """A failed job is raised at once (not after the slow ones before it); an error in the
    caller (KeyboardInterrupt) ends the running jobs: no process is left behind."""
    import multiprocessing
    import time
    from functools import partial

    from dpnets.parallel import run_jobs

    slow = partial(time.sleep, 60.0)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="invalid literal"):
        list(run_jobs([slow, partial(int, "x"), slow, slow], workers=2))
    assert time.perf_counter() - t0 < 40.0 and not multiprocessing.active_children()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        for _ in run_jobs([partial(time.sleep, 0.0), slow, slow], workers=2, ordered=False):
            raise KeyboardInterrupt
    assert time.perf_counter() - t0 < 40.0 and not multiprocessing.active_children()
