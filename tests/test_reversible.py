"""TransferOperator(reversible=...) (issue 25): the symmetrised estimator equals deeptime's
TICA on the same features, the symmetrised-count MSM on indicator features, keeps close
eigenvalues real, and Koopman reweighting recovers equilibrium from off-equilibrium data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpnets import DPNet, TransferOperator, io, load
from dpnets.operators import dump_operator, restore_operator
from dpnets.systems import LinearGaussian, MarkovChain

deeptime = pytest.importorskip("deeptime")
from deeptime.covariance import KoopmanWeightingEstimator  # noqa: E402
from deeptime.decomposition import TICA  # noqa: E402

A = np.array([[0.9, 0.05, 0.0], [0.05, 0.7, 0.1], [0.0, 0.1, 0.5]])
MIX = np.array([[1.0, 0.3, 0.0], [0.0, 1.0, 0.2], [0.1, 0.0, 1.0]])


@pytest.fixture(scope="module")
def lg() -> LinearGaussian:
    return LinearGaussian(A, noise_std=0.3)


@pytest.fixture(scope="module")
def raw(lg) -> np.ndarray:
    """Raw, correlated features far from the origin (TICA removes the mean, we add 1)."""
    return lg.sample(5000, seed=0) @ MIX + 5.0


def _tica(data, lag: int):
    return TICA(lagtime=lag, scaling=None, dim=3).fit(data).fetch_model()


def _sym_count_eigvals(states: list[np.ndarray], n: int, lag: int = 1) -> np.ndarray:
    """Eigenvalues of the reversible count estimate by hand: C_sym = (C + C^T)/2,
    T = diag(rowsum)^-1 C_sym."""
    c = np.zeros((n, n))
    for s in states:
        np.add.at(c, (s[:-lag], s[lag:]), 1.0)
    sym = 0.5 * (c + c.T)
    t = sym / sym.sum(1, keepdims=True)
    return np.sort(np.linalg.eigvals(t).real)


def _sorted(eigvals: np.ndarray) -> np.ndarray:
    return np.sort(eigvals.real)


# ------------------------------------------------------------------------------ TICA


@pytest.mark.parametrize("lag", [1, 3])
def test_timescales_and_eigenfunctions_equal_deeptime_tica(raw, lg, lag):
    trajs = [lg.sample(n, seed=s) @ MIX + 3.0 for s, n in ((1, 800), (2, 1200), (3, 600))]
    for data in (raw, trajs):
        op = TransferOperator(lag=lag, reversible=True).fit(data)
        tica = _tica(data, lag)
        assert op.constant_ and np.all(op.eig().imag == 0)
        ts = op.implied_timescales()
        assert np.isinf(ts[0])
        np.testing.assert_allclose(ts[1:], tica.timescales(lagtime=lag), rtol=1e-8)
        np.testing.assert_allclose(op.eig()[1:].real, tica.singular_values, rtol=1e-8)
        frames = data if isinstance(data, np.ndarray) else np.concatenate(data)
        ours = op.eigenfunctions(frames)[:, 1:].real
        theirs = tica.transform(frames)
        sign = np.sign(np.sum(ours * theirs, axis=0))
        np.testing.assert_allclose(ours * sign, theirs, atol=1e-8)
    # dt scales the timescales (TICA's are in frames)
    op = TransferOperator(lag=lag, reversible=True, dt=0.5).fit(raw)
    np.testing.assert_allclose(
        op.implied_timescales()[1:], 0.5 * _tica(raw, lag).timescales(lagtime=lag), rtol=1e-8
    )


def test_reversible_spectrum_is_a_biorthogonal_real_decomposition(raw):
    rng = np.random.default_rng(0)
    for ridge in (0.0, 1e-3):
        op = TransferOperator(lag=2, reversible=True, ridge=ridge).fit(raw)
        lam, left, right = op.eig(vectors=True)
        assert left.dtype == right.dtype == np.float64
        assert np.all(np.diff(np.abs(lam)) <= 1e-12)  # decreasing modulus
        np.testing.assert_allclose(op.operator_ @ right, right * lam.real, atol=1e-10)
        np.testing.assert_allclose(left.T @ right, np.eye(4), atol=1e-10)
        # unit empirical norm in the symmetrised covariance, which cx_ holds
        np.testing.assert_allclose(np.einsum("ij,ij->j", right, op.cx_ @ right), 1.0)
        np.testing.assert_allclose(op.cx_, op.cx_.T)
        np.testing.assert_allclose(op.cxy_, op.cxy_.T)
        # forecasts through the modes equal the matrix powers
        x0 = rng.normal(size=(5, 3)) + 5.0
        for t in (1, 2, 5):
            expected = op.transform(x0) @ np.linalg.matrix_power(op.operator_, t - 1)
            np.testing.assert_allclose(
                op.predict(x0, t), expected @ op.state_coef_, rtol=1e-9, atol=1e-9
            )


# ------------------------------------------------------------------------------ Markov chains


def test_indicator_features_equal_the_symmetrised_count_matrix():
    mc = MarkovChain.random(4, seed=3, reversible=True)
    states = [mc.sample(n, seed=s) for s, n in ((0, 3000), (1, 2000))]
    for lag in (1, 2):
        op = TransferOperator(mc.one_hot, lag=lag, reversible=True).fit(states)
        assert not op.constant_  # indicators span the constant
        np.testing.assert_allclose(
            _sorted(op.eig()), _sym_count_eigvals(states, 4, lag), rtol=1e-10, atol=1e-12
        )
        assert np.all(op.eig().imag == 0)


def test_close_real_eigenvalues_stay_real():
    """Two close real eigenvalues: short trajectories make the non-reversible estimate a
    complex pair now and then; the reversible one is real and equals the symmetrised
    counts every time."""
    w = np.array([[8.0, 1.0, 1.0], [1.0, 8.0, 1.05], [1.0, 1.05, 8.0]])
    mc = MarkovChain(w / w.sum(1, keepdims=True))
    assert np.all(mc.eigvals().imag == 0) and abs(mc.eigvals()[1] - mc.eigvals()[2]) < 0.01
    complex_pairs = 0
    for seed in range(10):
        s = mc.sample(300, seed=seed)
        plain = TransferOperator(mc.one_hot).fit(s).eig()
        rev = TransferOperator(mc.one_hot, reversible=True).fit(s).eig()
        complex_pairs += bool(np.any(plain.imag != 0))
        assert np.all(rev.imag == 0)
        np.testing.assert_allclose(_sorted(rev), _sym_count_eigvals([s], 3), atol=1e-12)
    assert complex_pairs >= 1  # seeds 2 and 5


def test_koopman_reweighting_recovers_equilibrium_from_off_equilibrium_starts():
    """Many short trajectories all started in state 0: the symmetrised estimate is biased
    towards state 0; the Koopman-reweighted one is closer to the true stationary
    distribution and eigenvalues, and its weights are the non-reversible MLE's."""
    w = np.array([[50, 5, 2, 0], [5, 50, 0, 2], [2, 0, 200, 20], [0, 2, 20, 200.0]])
    mc = MarkovChain(w / w.sum(1, keepdims=True))  # metastable {0, 1} and {2, 3}
    pi, lam = mc.stationary_distribution(), _sorted(mc.eigvals())
    states = [mc.sample(20, x0=0, seed=s) for s in range(400)]
    sym = TransferOperator(mc.one_hot, reversible=True).fit(states)
    rew = TransferOperator(mc.one_hot, reversible="reweight").fit(states)
    plain = TransferOperator(mc.one_hot).fit(states)

    def stationary(op):
        v = np.real(op.eig(vectors=True)[1][:, 0])
        return v / v.sum()

    err_sym, err_rew = np.abs(stationary(sym) - pi).sum(), np.abs(stationary(rew) - pi).sum()
    assert err_rew < 0.1 * err_sym, (err_rew, err_sym)  # 0.045 against 1.05
    assert np.abs(_sorted(rew.eig()) - lam).max() < np.abs(_sorted(sym.eig()) - lam).max()
    assert np.all(rew.eig().imag == 0)
    # the reweighted equilibrium is the non-reversible estimate's stationary vector, and
    # stationary_weights gives the Koopman weights (mean 1 over the training inputs)
    w = rew.stationary_weights()
    assert abs(w.mean() - 1.0) < 1e-12
    x = np.concatenate([s[:-1] for s in states])
    pi_w = np.bincount(x, weights=w, minlength=4) / x.size
    np.testing.assert_allclose(pi_w, stationary(rew), atol=1e-10)
    pi_plain = np.real(plain.eig(vectors=True)[1][:, 0])
    np.testing.assert_allclose(pi_w, pi_plain / pi_plain.sum(), atol=1e-10)
    # the plain symmetrised estimate takes the data as equilibrium samples
    np.testing.assert_allclose(sym.stationary_weights(), 1.0, atol=1e-10)


def test_reweighting_equals_deeptime_koopman_weighting_with_tica(lg):
    rng = np.random.default_rng(1)
    trajs = [lg.sample(40, seed=s) for s in range(200)]  # started in equilibrium, then
    trajs = [t + 1.5 * np.exp(-0.1 * np.arange(40))[:, None] * [1, 0, 0] for t in trajs]
    trajs = [t + 0.05 * rng.normal(size=t.shape) for t in trajs]  # relaxing, off equilibrium
    lag = 2
    op = TransferOperator(lag=lag, reversible="reweight").fit(trajs)
    weights = KoopmanWeightingEstimator(lagtime=lag).fit(trajs).fetch_model()
    tica = TICA(lagtime=lag, scaling=None, dim=3).fit(trajs, weights=weights).fetch_model()
    assert np.linalg.eigvalsh(op.cx_).min() > 0  # positive definite: no rank cut
    np.testing.assert_allclose(op.eig()[1:].real, tica.singular_values, rtol=1e-8)
    np.testing.assert_allclose(op.implied_timescales()[1:], tica.timescales(lagtime=lag), rtol=1e-8)
    ours = op.stationary_weights()
    theirs = np.concatenate([weights.weights(t[:-lag]).ravel() for t in trajs])
    np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=1e-10)
    # it differs from the plain symmetrised estimate on these data
    sym = TransferOperator(lag=lag, reversible=True).fit(trajs)
    assert np.abs(sym.eig()[1:] - op.eig()[1:]).max() > 1e-3


# ------------------------------------------------------------------------------ API


@pytest.mark.parametrize("mode", [True, "reweight"])
def test_partial_fit_over_pieces_equals_fit(lg, mode):
    pieces = [lg.sample(n, seed=s) + 2.0 for s, n in ((4, 700), (5, 900), (6, 500))]
    full = TransferOperator(lag=2, reversible=mode).fit(pieces)
    part = TransferOperator(lag=2, reversible=mode)
    for p in pieces:
        part.partial_fit(p)
    np.testing.assert_allclose(part.eig(), full.eig(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(part.cx_, full.cx_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(part.state_coef_, full.state_coef_, rtol=1e-9, atol=1e-10)
    # statistics of a non-reversible start cannot become a reversible fit
    late = TransferOperator(lag=2).partial_fit(pieces[0]).set_params(reversible=mode)
    with pytest.raises(ValueError, match="reversible was set after the first partial_fit"):
        late.partial_fit(pieces[1])
    assert late.n_samples_ == pieces[0].shape[0] - 2  # the failed piece left it as it was


@pytest.mark.parametrize("mode", [True, "reweight"])
def test_dataloader_and_memmap_inputs_equal_arrays(tmp_path, lg, mode):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    x = lg.sample(3000, seed=7) + 1.0
    ref = TransferOperator(lag=1, reversible=mode).fit(x)
    pairs = TensorDataset(torch.from_numpy(x[:-1]), torch.from_numpy(x[1:]))
    for loader in (
        DataLoader(pairs, batch_size=700),
        DataLoader(pairs, batch_size=512, shuffle=True),
    ):
        op = TransferOperator(lag=1, reversible=mode).fit(loader)
        np.testing.assert_allclose(op.eig(), ref.eig(), rtol=1e-10, atol=1e-12)
    np.save(tmp_path / "x.npy", x)
    mm = TransferOperator(lag=1, reversible=mode).fit(np.load(tmp_path / "x.npy", mmap_mode="r"))
    np.testing.assert_allclose(mm.eig(), ref.eig(), rtol=1e-12, atol=1e-14)


def test_observables_on_training_samples(lg):
    """An observable given on the training samples is the forward regression, weighted by
    the Koopman weights after reweighting: for an observable in the span of the features
    its one-step forecast is then ``psi(x)^T C0^+ E_w[b(x) f(y)]``."""
    x = lg.sample(2000, seed=8) + 1.0
    for mode in (True, "reweight"):
        op = TransferOperator(lag=1, reversible=mode).fit(x)
        f = x[1:, :1] ** 2
        w = op.stationary_weights()
        bx = op.transform(x[:-1])
        expected = op.transform(x[:5]) @ op.cx_pinv_ @ (bx.T @ (w[:, None] * f)) / f.shape[0]
        np.testing.assert_allclose(op.predict(x[:5], 1, observable=f), expected, rtol=1e-9)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # few bootstrap resamples
def test_bootstrap_refits_of_a_reweighted_operator_are_real(lg):
    from dpnets.validation import bootstrap_spectrum, implied_timescales

    trajs = [lg.sample(60, seed=s) + 2.0 * np.exp(-0.1 * np.arange(60))[:, None] for s in range(30)]
    op = TransferOperator(lag=2, reversible="reweight").fit(trajs)
    spec = bootstrap_spectrum(op, trajs, k=3, n_bootstrap=5, seed=0)
    assert spec.samples.shape == (5, 3) and np.all(spec.samples.imag == 0)
    np.testing.assert_allclose(spec.samples[:, 0], 1.0, atol=1e-10)  # the constant
    assert np.all(np.isfinite(spec.lower[1:])) and np.all(np.isfinite(spec.upper[1:]))
    its = implied_timescales(TransferOperator(reversible="reweight"), trajs, [1, 2], k=2)
    for i, lag in enumerate([1, 2]):
        ref = TransferOperator(lag=lag, reversible="reweight").fit(trajs).implied_timescales()
        np.testing.assert_allclose(np.asarray(its.timescales)[i], ref[1:3], rtol=1e-8)


@pytest.mark.parametrize("mode", [True, "reweight"])
def test_save_load_round_trip(tmp_path, lg, mode):
    trajs = [lg.sample(600, seed=s) + 1.0 for s in range(3)]
    op = TransferOperator(lag=1, reversible=mode).fit(trajs)
    op.save(tmp_path / "m.pt")
    back = load(tmp_path / "m.pt")
    assert back.reversible == mode
    np.testing.assert_array_equal(back.eig(), op.eig())
    np.testing.assert_allclose(back.eig(vectors=True)[2], op.eig(vectors=True)[2])
    np.testing.assert_allclose(back.implied_timescales(), op.implied_timescales())
    x0 = trajs[0][:7]
    np.testing.assert_allclose(back.predict(x0, 3), op.predict(x0, 3), rtol=1e-12)
    np.testing.assert_allclose(back.stationary_weights(x0), op.stationary_weights(x0))
    assert (back.reweighting_coef_ is None) == (mode is True)


def test_files_without_the_key_load_as_non_reversible(tmp_path, lg, monkeypatch):
    def legacy_dump(model, tensors):
        cfg = dump_operator(model, tensors)
        del cfg["params"]["reversible"]
        return cfg

    monkeypatch.setitem(
        io._KINDS, "TransferOperator", (TransferOperator, legacy_dump, restore_operator)
    )
    x = lg.sample(500, seed=0)
    op = TransferOperator().fit(x)
    op.save(tmp_path / "old.pt")
    monkeypatch.undo()
    back = load(tmp_path / "old.pt")
    assert back.reversible is False
    np.testing.assert_array_equal(back.eig(), op.eig())


@pytest.mark.parametrize("bad", ["yes", 1, "True", None])
def test_bad_values_are_refused(raw, bad):
    with pytest.raises(ValueError, match="reversible must be one of False, True, 'reweight'"):
        TransferOperator(reversible=bad).fit(raw)
    with pytest.raises(ValueError, match="reversible"):
        TransferOperator(reversible=bad).partial_fit(raw)


def test_composite_dpnet_features_trained_as_usual(lg):
    x = lg.sample(3000, seed=2)
    net = DPNet(lag=1, r=2, epochs=2, batch_size=512, seed=0, progress=False)
    op = TransferOperator(net, reversible=True).fit(x)
    assert np.all(op.eig().imag == 0)
    # the features are the ones the non-reversible composite trains (same seed)
    plain = TransferOperator(net).fit(x)
    np.testing.assert_allclose(op.features_.transform(x), plain.features_.transform(x))
    again = TransferOperator(op.features_, reversible=True).fit(x)
    np.testing.assert_allclose(again.eig(), op.eig(), rtol=1e-10, atol=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # few bootstrap resamples
def test_implied_timescales_of_validation_are_real(lg):
    from dpnets.validation import implied_timescales

    trajs = [lg.sample(800, seed=s) for s in range(4)]
    its = implied_timescales(
        TransferOperator(reversible=True), trajs, [1, 2, 3], k=2, n_bootstrap=4, seed=0
    )
    ts = np.asarray(its.timescales)
    assert ts.dtype == np.float64 and np.all(np.isfinite(ts)) and np.all(ts > 0)
    for i, lag in enumerate([1, 2, 3]):
        ref = TransferOperator(lag=lag, reversible=True).fit(trajs).implied_timescales()
        np.testing.assert_allclose(ts[i], ref[1:3], rtol=1e-8)


# ------------------------------------------------------------------------------ CLI

FIT = ["--lag", "2", "--dt", "0.1", "--epochs", "2", "--dim", "2", "--quiet"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # few bootstrap resamples
def test_cli_fit_and_analyze_reversible(tmp_path):
    from dpnets.cli import main
    from dpnets.systems import OrnsteinUhlenbeck

    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    for i in range(3):
        np.save(tmp_path / f"t{i}.npy", ou.sample(800, seed=i).astype(np.float64))
    out = tmp_path / "fit"
    files = str(tmp_path / "t*.npy")
    assert main(["fit", files, "--out", str(out), *FIT, "--reversible"]) == 0
    assert "reversible = true" in (out / "config.toml").read_text()
    assert "Transfer operator: reversible, symmetrised" in (out / "report.md").read_text()
    op = load(out / "model.pt")
    assert op.reversible is True and np.all(op.eig().imag == 0)
    ref = TransferOperator(op.features_, lag=2, dt=0.1, reversible=True)
    ref.fit([np.load(tmp_path / f"t{i}.npy") for i in range(3)])
    np.testing.assert_allclose(op.eig(), ref.eig(), rtol=1e-10)
    # analyze re-estimates the operator as asked
    args = ["analyze", str(out), "--bootstrap", "2", "--quiet", "--lags", "1", "2"]
    assert main([*args, "--reversible", "reweight"]) == 0
    res = json.loads((out / "analysis" / "results.json").read_text())
    assert res["reversible"] == "reweight"
    assert all(v[1] == 0 for v in res["eigenvalues"])
    report = (out / "analysis" / "report.md").read_text()
    assert "re-estimated on the fit's features: reversible after Koopman reweighting" in report
    assert main([*args, "--reversible", "false"]) == 0
    assert json.loads((out / "analysis" / "results.json").read_text())["reversible"] is False
    # the fit's config repeats it; a bad value in it is one clear line
    text = (out / "config.toml").read_text().replace("reversible = true", 'reversible = "yes"')
    (tmp_path / "bad.toml").write_text(text)
    assert main(["fit", "--config", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "b")]) == 2
