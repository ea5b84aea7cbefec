"""Forecasting (issue 40): errors at horizons against persistence and climatology, the
scorer for scikit-learn's searches, horizons in frames and time, the state appended to
learned features, the stabilised estimate, delay embeddings and forecast intervals."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import dpnets
from dpnets import DPNet, TransferOperator
from dpnets.baselines import DMD, KernelDMD, NystromKernelDMD
from dpnets.diagnostics import DiagnosticWarning
from dpnets.estimation import stabilize_spectrum
from dpnets.forecasting import (
    delay_embed,
    forecast_errors,
    forecast_interval,
    forecast_rmse,
    forecast_scorer,
    reference_rmse,
)
from dpnets.systems import LinearGaussian


def linear_gaussian(d: int, seed: int) -> LinearGaussian:
    """A stable linear-Gaussian system of ``d`` coordinates (spectral radius 0.9)."""
    m = np.random.default_rng(seed).normal(size=(d, d))
    return LinearGaussian(0.9 * m / np.max(np.abs(np.linalg.eigvals(m))), noise_std=0.5)


def lorenz63(n: int, dt: float = 0.01, seed: int = 0, burn: int = 500) -> np.ndarray:
    """Lorenz-63 (sigma 10, rho 28, beta 8/3) sampled every ``dt``, after a burn-in."""
    rng = np.random.default_rng(seed)

    def f(_t, u):
        return [10 * (u[1] - u[0]), u[0] * (28 - u[2]) - u[1], u[0] * u[1] - 8 / 3 * u[2]]

    t = np.arange(n + burn) * dt
    sol = solve_ivp(f, (0, t[-1]), rng.normal(size=3) + [0, 0, 20], t_eval=t, rtol=1e-9, atol=1e-9)
    return sol.y.T[burn:]


def kuramoto_sivashinsky(n: int, N: int = 32, L: float = 22.0, dt: float = 1.0, seed: int = 0):
    """``u_t = -u u_x - u_xx - u_xxxx`` on a periodic grid of ``N`` points, by ETDRK4
    (Kassam and Trefethen 2005, 4 steps per frame), sampled every ``dt`` after a burn-in."""
    rng = np.random.default_rng(seed)
    sub, burn = 4, 400
    v = np.fft.rfft(0.1 * rng.normal(size=N))
    k = 2 * np.pi / L * np.arange(N // 2 + 1)
    lin = k**2 - k**4
    h = dt / sub
    e, e2 = np.exp(h * lin), np.exp(h * lin / 2)
    r = np.exp(1j * np.pi * (np.arange(1, 17) - 0.5) / 16)
    lr = h * lin[:, None] + r[None, :]
    q = h * np.real(np.mean((np.exp(lr / 2) - 1) / lr, 1))
    f1 = h * np.real(np.mean((-4 - lr + np.exp(lr) * (4 - 3 * lr + lr**2)) / lr**3, 1))
    f2 = h * np.real(np.mean((2 + lr + np.exp(lr) * (-2 + lr)) / lr**3, 1))
    f3 = h * np.real(np.mean((-4 - 3 * lr - lr**2 + np.exp(lr) * (4 - lr)) / lr**3, 1))

    def nonlinear(w):
        return -0.5j * k * np.fft.rfft(np.fft.irfft(w, N) ** 2)

    out = []
    for i in range((n + burn) * sub):
        nv = nonlinear(v)
        a = e2 * v + q * nv
        na = nonlinear(a)
        b = e2 * v + q * na
        nb = nonlinear(b)
        c = e2 * a + q * (2 * nb - nv)
        v = e * v + nv * f1 + 2 * (na + nb) * f2 + nonlinear(c) * f3
        if (i + 1) % sub == 0:
            out.append(np.fft.irfft(v, N))
    return np.array(out[burn:])


@pytest.mark.parametrize("system", ["lorenz63", "kuramoto_sivashinsky"])
def test_recommended_setup_beats_persistence_one_step_ahead(system):
    """The recommended forecaster, a DPNet's features with the state appended
    (``TransferOperator(DPNet(...), append_state=True)``), beats persistence one step
    ahead on held-out chaotic data (issue 40: the default was worse than persistence)."""
    if system == "lorenz63":
        x = lorenz63(2500)
        net = DPNet(r=8, epochs=2, seed=0, progress=False)
        model = TransferOperator(net, append_state=True, dt=0.01)
    else:
        x = kuramoto_sivashinsky(3000)
        net = DPNet(r=16, epochs=10, seed=0, progress=False)
        model = TransferOperator(net, append_state=True, ridge=1e-6)
    train, test = x[:-500], x[-500:]
    model.fit(train)
    errors = forecast_errors(test, {"model": model}, horizons=1, train=train)
    assert errors["model"][0] < 0.9 * errors["persistence"][0], errors
    assert errors["persistence"][0] < errors["climatology"][0]


def test_errors_are_the_rmse_of_predict_and_of_the_references():
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.normal(size=(300, 2)), 0) * 0.1
    train, test = x[:200], x[200:]
    model = DMD(lag=2).fit(train)
    pred = model.predict(test[:-4], t=2)  # 2 lag steps = 4 frames
    want = np.sqrt(np.mean((pred - test[4:]) ** 2))
    np.testing.assert_allclose(forecast_rmse(model, test, [4]), [want], rtol=1e-12)
    ref = reference_rmse(test, [1, 4], train=train)
    np.testing.assert_allclose(
        ref["persistence"][1], np.sqrt(np.mean((test[:-4] - test[4:]) ** 2)), rtol=1e-12
    )
    np.testing.assert_allclose(
        ref["climatology"][0], np.sqrt(np.mean((train.mean(0) - test[1:]) ** 2)), rtol=1e-12
    )
    with pytest.raises(ValueError, match="not a multiple of the model's lag"):
        forecast_rmse(model, test, [3])


def test_scorer_selects_by_forecast_error_in_a_grid_search():
    """GridSearchCV with forecast_scorer picks the lag by the 2-frame forecast error, where
    the VAMP-2 score cannot compare lags: on a linear-Gaussian system the exact operator at
    any lag forecasts equally well, so the scores are close and all finite."""
    from sklearn.model_selection import GridSearchCV

    x = linear_gaussian(2, seed=0).sample(2000, seed=0)
    folds = [(np.arange(1000), np.arange(1000, 2000))]
    search = GridSearchCV(DMD(), {"lag": [1, 2]}, scoring=forecast_scorer([2]), cv=folds)
    search.fit(x)
    scores = search.cv_results_["mean_test_score"]
    want = -forecast_rmse(DMD(lag=1).fit(x[:1000]), x[1000:], [2])[0]
    np.testing.assert_allclose(scores[0], want, rtol=1e-12)
    assert np.all(np.isfinite(scores)) and abs(scores[0] - scores[1]) < 0.05 * abs(scores[0])


def test_predict_in_frames_time_and_t0():
    x = linear_gaussian(2, seed=1).sample(500, seed=0)
    model = TransferOperator(lag=2, dt=0.5).fit(x)
    np.testing.assert_allclose(model.predict(x[:5], t=3), model.predict(x[:5], t=6, unit="frames"))
    np.testing.assert_allclose(model.predict(x[:5], t=3), model.predict(x[:5], t=3.0, unit="time"))
    np.testing.assert_array_equal(model.predict(x[:5], t=0), x[:5])
    both = model.predict(x[:5], t=[0, 1])
    np.testing.assert_array_equal(both[0], x[:5])
    np.testing.assert_allclose(both[1], model.predict(x[:5], t=1))
    with pytest.raises(ValueError, match=r"t=5 frames is not a multiple of the model's lag \(2"):
        model.predict(x[:5], t=5, unit="frames")
    with pytest.raises(ValueError, match="not a whole number of lag steps"):
        model.predict(x[:5], t=2.5)
    with pytest.raises(ValueError, match="unit must be one of"):
        model.predict(x[:5], t=1, unit="seconds")


def test_an_observable_is_given_at_the_lagged_states():
    """OU, lag 2: the observable x at the pairs' lagged states, x[2:], forecasts as the
    state itself (exact e^{-0.6} x at 3 steps of 0.2); the whole trajectory is refused
    in one line saying which values, and x[:-2] (one lag behind) is what it warns off."""
    from dpnets.systems import OrnsteinUhlenbeck

    x = OrnsteinUhlenbeck(dt=0.1).sample(20_000, seed=0)
    op = TransferOperator(lag=2, dt=0.1).fit(x)
    x0 = np.array([[1.0], [2.0]])
    exact = np.exp(-0.6) * x0.ravel()
    right = op.predict(x0, t=3, observable=x[2:, 0])
    np.testing.assert_allclose(right, op.predict(x0, t=3).ravel(), rtol=1e-10)
    np.testing.assert_allclose(right, exact, rtol=0.05)
    behind = op.predict(x0, t=3, observable=x[:-2, 0])
    assert np.all(np.abs(behind / exact - 1) > 0.1)  # one lag behind: e^{-0.4} x
    with pytest.raises(ValueError) as info:
        op.predict(x0, t=3, observable=x)
    assert str(info.value) == (
        "observable must hold one value per training sample (19998), its value at the "
        "lagged state of each training pair: f(x[lag:]) for a trajectory x (not "
        "f(x[:-lag]), one lag behind), those of each trajectory concatenated for a list, "
        "f(Y) for pairs (X, Y); got 20000 rows"
    )


def test_multi_step_forecast_from_the_last_frame_is_the_var_forecast():
    """A VAR(1) far from the origin (raw units): affine DMD's forecasts 1, 2 and 5 steps
    from the last frame are the least-squares VAR's with intercept, iterated (the optimal
    forecast of the fitted model), from a trajectory, from (X, Y) pairs and from the
    identity basis; one state given as a 1-D vector is refused naming the fix."""
    rng = np.random.default_rng(0)
    a, v = np.array([[0.8, 0.3], [-0.3, 0.8]]), np.zeros((500, 2))
    for t in range(1, 500):
        v[t] = a @ v[t - 1] + 0.5 * rng.normal(size=2)
    v += [1000.0, -50.0]
    coef = np.linalg.lstsq(np.c_[v[:-1], np.ones(499)], v[1:], rcond=None)[0]
    truth, y = [], v[-1]
    for k in range(1, 6):
        y = coef[:2].T @ y + coef[2]
        if k in (1, 2, 5):
            truth.append(y)
    for model in (DMD(constant=True).fit(v), DMD(constant=True).fit(v[:-1], v[1:])):
        pred = model.predict(v[-1:], t=[1, 2, 5])
        assert pred.shape == (3, 1, 2)  # (horizons, states, *state_shape)
        np.testing.assert_allclose(pred[:, 0], truth, rtol=0, atol=1e-8)
    np.testing.assert_allclose(
        TransferOperator(None).fit(v).predict(v[-1:], t=5)[0], truth[2], rtol=0, atol=1e-8
    )
    with pytest.raises(ValueError) as info:
        DMD(constant=True).fit(v).predict(v[-1], t=1)
    assert str(info.value) == (
        "X has 1 features, but DMD is expecting 2 features as input: a 1-D X is 2 states of "
        "1 feature each; give one state of shape (2,) as a row, x[None] (X[-1:] for the last "
        "frame)"
    )


def test_a_constant_column_changes_no_spectrum_and_keeps_the_constant_first():
    """A constant coordinate (a dummy column in a table): EDMD's Chebyshev dictionary then
    holds several constant functions, and a function vanishing on the data has an
    eigenvalue 0 whose eigenvector's cosine with the constant was round-off over round-off
    (1.06): it was put at k = 0. Now the spectrum is EDMD's on the series alone, the
    constant first; DMD and the forecasts keep the column's value."""
    rng = np.random.default_rng(1)
    x = np.zeros(400)
    for t in range(1, 400):
        x[t] = 0.8 * x[t - 1] + rng.normal()
    with_column = np.c_[x, np.full(400, 5.0)]
    alone = dpnets.baselines.EDMD().fit(x[:, None]).eig()[:4]
    np.testing.assert_allclose(alone[0], 1.0, atol=1e-12)
    np.testing.assert_allclose(dpnets.baselines.EDMD().fit(with_column).eig()[:4], alone, atol=1e-8)
    pred = DMD().fit(with_column).predict(with_column[-1:], t=[1, 3])
    np.testing.assert_allclose(pred[:, 0, 1], 5.0, atol=1e-10)


def test_a_forecasters_data_frame():
    """pandas tables as a forecaster holds them: a date column is refused naming it and the
    columns to select (it was "dtype object with non-numeric values (... 'Timestamp')"), a
    year column read as data warns naming the others, a gap names its first row and the
    fix; numbers stored as objects are numbers."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    values = rng.normal(size=40)
    dated = pd.DataFrame({"date": pd.date_range("1958-03-29", periods=40, freq="W"), "co2": values})
    with pytest.raises(ValueError) as info:
        DMD().fit(dated)
    assert str(info.value) == (
        "trajectory has non-numeric column(s) ['date'] (a date, time or label is not a "
        "coordinate of the state): select the numeric ones, df[['co2']]; the time between "
        "rows is the model's dt="
    )
    yearly = pd.DataFrame({"YEAR": 1700.0 + np.arange(40), "SUNACTIVITY": values})
    with pytest.warns(UserWarning, match=r"column 'YEAR' rises by 1 every row: .*df\[\['SUN"):
        DMD().fit(yearly)
    gaps = dated[["co2"]].copy()
    gaps.iloc[[3, 7], 0] = np.nan
    with pytest.raises(ValueError) as info:
        DMD().fit(gaps)
    assert str(info.value).startswith(
        "trajectory contains 2 NaN or inf value(s) (first at sample 3): missing values: a "
        "trajectory must be complete and evenly sampled; fill or interpolate the gaps"
    )
    np.testing.assert_allclose(
        DMD().fit(dated[["co2"]].astype(object)).eig(), DMD().fit(values).eig(), rtol=1e-12
    )
    # dropna() on a weekly series leaves gaps in time: the rows are no longer evenly spaced
    weekly = dated.set_index("date")
    with pytest.warns(
        DiagnosticWarning, match=r"index is unevenly spaced \(steps from 7 days 00:00:00 to 14"
    ):
        DMD().fit(gaps.set_index(weekly.index).dropna())
    monthly = pd.Series(values, index=pd.date_range("2000-01-01", periods=40, freq="MS"))
    with warnings.catch_warnings(record=True) as caught:  # monthly: 28 to 31 days
        warnings.simplefilter("always")
        for table in (weekly, gaps.set_index(weekly.index).interpolate(), monthly):
            DMD(dt=7.0).fit(table)
    assert not [w for w in caught if "index" in str(w.message)]


def test_a_series_shorter_than_the_features_names_them_truly():
    """5 frames, 4 pairs, for the default r = 4 and the constant: the count was labelled
    "r=5"."""
    with pytest.raises(ValueError) as info:
        TransferOperator(DPNet(epochs=1, seed=0, progress=False)).fit(np.arange(5.0))
    assert str(info.value) == (
        "fewer training samples (4) than features (5: r = 4 and the constant function); "
        "provide more data or learn fewer features (r=, --dim on the command line)"
    )


def test_append_state_contains_dmd_and_round_trips(tmp_path):
    x = linear_gaussian(3, seed=2).sample(1000, seed=0)
    square = lambda z: z**2  # noqa: E731 - a feature map that misses the state
    alone = TransferOperator(square).fit(x)
    both = TransferOperator(square, append_state=True).fit(x)
    dmd = DMD(constant=True).fit(x)
    e = forecast_errors(x, {"alone": alone, "both": both, "dmd": dmd})
    assert e["both"][0] <= e["dmd"][0] + 1e-12 < e["alone"][0]  # nested least squares
    assert both.n_features_ == 1 + 3 + 3
    with pytest.warns(UserWarning, match=r"custom feature map .* dpnets\.load\(path, features"):
        both.save(tmp_path / "m.pt")  # the file needs the callable back: said at save
    back = dpnets.load(tmp_path / "m.pt", features=square)
    np.testing.assert_allclose(back.predict(x[:7], t=3), both.predict(x[:7], t=3), rtol=1e-10)


def test_stabilize_projects_growing_eigenvalues_onto_the_unit_circle(tmp_path):
    """A rotation growing by 2% a step: the stabilised estimate keeps the frequency and
    modulus 1, and bounded forecasts."""
    a = 1.02 * np.array([[np.cos(0.3), -np.sin(0.3)], [np.sin(0.3), np.cos(0.3)]])
    x = np.zeros((200, 2))
    x[0] = [1.0, 0.0]
    rng = np.random.default_rng(0)
    for t in range(199):
        x[t + 1] = a @ x[t] + 1e-3 * rng.normal(size=2)
    plain, stable = DMD().fit(x), DMD(stabilize=True).fit(x)
    np.testing.assert_allclose(np.abs(plain.eig()), 1.02, rtol=1e-4)
    np.testing.assert_allclose(np.abs(stable.eig()), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.angle(stable.eig())), 0.3, rtol=1e-4)
    assert np.abs(stable.predict(x[:1], t=500)).max() < 1.1
    assert np.abs(plain.predict(x[:1], t=500)).max() > 1e3
    stable.save(tmp_path / "s.pt")
    np.testing.assert_allclose(dpnets.load(tmp_path / "s.pt").eig(), stable.eig(), rtol=1e-10)
    vals, left, right, op = stabilize_spectrum(*plain.eig(vectors=True))
    np.testing.assert_allclose(op, stable.operator_, atol=1e-12)


def test_delay_embedding():
    s = np.arange(10.0)
    z = delay_embed(s, 3, step=2)
    np.testing.assert_array_equal(z[0], [4.0, 2.0, 0.0])
    assert z.shape == (6, 3)
    both = delay_embed([s, s + 1], 2)
    assert isinstance(both, list) and both[1][0].tolist() == [2.0, 1.0]
    with pytest.raises(ValueError, match="too few for n_delays=11"):
        delay_embed(s, 11)
    # an AR(2) series is not Markov in its value but is in a 2-delay embedding
    rng = np.random.default_rng(0)
    y = np.zeros(3000)
    for t in range(2, 3000):
        y[t] = 1.6 * y[t - 1] - 0.8 * y[t - 2] + rng.normal()
    one = forecast_rmse(DMD().fit(y[:2000]), y[2000:], 1)
    z = delay_embed(y, 2)
    two = forecast_rmse(DMD().fit(z[:2000]), z[2000:], 1, coordinates=slice(0, 1))
    assert two[0] < 0.7 * one[0]
    np.testing.assert_allclose(two[0], 1.0, rtol=0.1)  # the noise's standard deviation


def test_forecast_interval_covers_the_truth():
    x = linear_gaussian(2, seed=3).sample(3000, seed=0)
    train, test = x[:2000], x[2000:]
    model = DMD().fit(train)
    out = forecast_interval(model, test[:-1], 1, train, n_bootstrap=40, confidence=0.9)
    assert out.forecast.shape == out.lower.shape == out.mean_upper.shape == (999, 2)
    assert np.all(out.lower <= out.mean_lower) and np.all(out.mean_upper <= out.upper)
    covered = np.mean((out.lower <= test[1:]) & (test[1:] <= out.upper))
    assert 0.85 < covered < 0.95, covered


@pytest.mark.parametrize("make", [KernelDMD, NystromKernelDMD])
def test_kernel_models_take_dt(make, tmp_path):
    """``KernelDMD('rbf', rank=5, dt=0.01)`` raised TypeError (issue 40): timescales are now
    in time units on every estimator, and the file keeps ``dt``."""
    x = linear_gaussian(2, seed=4).sample(300, seed=0)
    kw = {"n_centers": 60, "seed": 0} if make is NystromKernelDMD else {}
    model = make("rbf", rank=3, dt=0.01, **kw).fit(x)
    frames = make("rbf", rank=3, **kw).fit(x).implied_timescales()
    np.testing.assert_allclose(model.implied_timescales(), 0.01 * frames, rtol=1e-12)
    model.save(tmp_path / "k.pt")
    assert dpnets.load(tmp_path / "k.pt").dt == 0.01
    with pytest.raises(ValueError, match="dt must be in"):
        make("rbf", rank=3, dt=0.0, **kw).fit(x)


# ------------------------------------------------------------------------------ guardrails
def test_dpnet_warns_on_a_saturated_score_and_on_few_gradient_steps():
    """Lorenz-63 at dt = 0.01, lag 1: every smooth feature is almost perfectly correlated
    one frame later, so the projection score reaches its ceiling r + 1 = 5 within two
    epochs (the issue: 'saturated from epoch 3, and nothing says so'); 1349 pairs at batch
    128 for 5 epochs are 55 gradient steps."""
    from dpnets.diagnostics import DiagnosticWarning

    x = lorenz63(1500)
    with pytest.warns(DiagnosticWarning) as rec:
        net = DPNet(seed=0, epochs=5, batch_size=128, progress=False).fit(x)
    found = {d.kind: d for d in net.diagnostics()}
    assert {"saturated", "few_steps"} <= set(found), found
    sat, steps = found["saturated"], found["few_steps"]
    assert "of 5" in sat.problem and "append_state=True" in sat.python and "r=" in sat.python
    assert "--dim" in sat.cli
    assert "training took 55 gradient steps (5 epoch(s)" in steps.problem
    assert "epochs=10" in steps.python and "batch_size=" in steps.python
    assert "--epochs 10" in steps.cli
    assert any("at its ceiling" in str(w.message) for w in rec)
    # the thresholds, on histories: 4.7 of 5 is 0.925 of the non-trivial part (not flagged)
    from dpnets.diagnostics import saturation_diagnostics, steps_diagnostics

    assert saturation_diagnostics({"val_score": [4.0, 4.7]}, r=4, trivial=1) == []
    (d,) = saturation_diagnostics({"val_score": [4.0, 4.7, 4.81, 4.9]}, r=4, trivial=1)
    assert "from epoch 3 of 4 on" in d.problem
    assert steps_diagnostics(250, 1024, 30)[0].problem.startswith("training took 30 gradient")
    assert steps_diagnostics(10_000, 1024, 10) == []  # 100 steps


def test_predict_warns_on_inputs_outside_the_training_range(tmp_path):
    """A rising series (weekly CO2's case: the test period above the training range) is
    forecast from states the model never saw: predict says so, naming the remedy; inside
    the range it is silent, and the range is saved with the model."""
    from dpnets.diagnostics import DiagnosticWarning

    rng = np.random.default_rng(0)
    t = np.arange(600)
    x = np.column_stack([0.01 * t + np.sin(t / 8), np.cos(t / 8)]) + 0.05 * rng.normal(
        size=(600, 2)
    )
    model = DMD().fit(x[:400])
    np.testing.assert_allclose(model.state_min_, x[:400].min(0))
    np.testing.assert_allclose(model.state_max_, x[:400].max(0))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DiagnosticWarning)
        model.predict(x[:400:7], t=2)
    with pytest.warns(
        DiagnosticWarning, match=r"states lie outside the training data's range"
    ) as rec:
        model.predict(x[500:], t=1)
    msg = str(rec[0].message)
    assert "coordinate 0" in msg and "its differences" in msg
    model.save(tmp_path / "dmd.pt")
    loaded = dpnets.load(tmp_path / "dmd.pt")
    np.testing.assert_array_equal(loaded.state_min_, model.state_min_)
    with pytest.warns(DiagnosticWarning, match="outside the training data's range"):
        loaded.predict(x[500:], t=1)
    # partial_fit widens the range piece by piece; t=0 forecasts nothing and is silent
    piece = TransferOperator().partial_fit(x[:200]).partial_fit(x[200:400])
    np.testing.assert_allclose(piece.state_max_, x[:400].max(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DiagnosticWarning)
        piece.predict(x[500:], t=0)


def test_standardisation_of_fields_is_said_truly():
    """Snapshots (T, 2, 4, 5) fed to the default MLP (which flattens them into a Linear
    layer): 'auto' leaves fields as given without the false 'first operation is not
    affine' warning (near-constant pixels are normal in a field); a field of extreme
    overall scale warns naming standardize='global'."""
    import warnings

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2, 4, 5)).cumsum(0) * 0.1
    x[:, 0, 0, :] = 1.0 + 1e-5 * rng.normal(size=(300, 5))  # near-constant pixels
    net = DPNet(r=2, epochs=1, seed=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        net.fit(x)
    assert net.input_shift_ is None
    with pytest.warns(RuntimeWarning, match=r"are fields.*standardize='global'") as rec:
        DPNet(r=2, epochs=1, seed=0, progress=False).fit(x * 1e5)
    assert not any("not affine" in str(w.message) for w in rec)
    glob = DPNet(r=2, epochs=1, seed=0, progress=False, standardize="global").fit(x * 1e5)
    assert np.ndim(glob.input_shift_) == 0 or np.size(glob.input_shift_) == 1


# ------------------------------------------------------------------------------------ plots
def _damped_waves(n: int = 600, shape: tuple = (24,), seed: int = 0) -> np.ndarray:
    """Two noise-driven damped oscillations (moduli 0.97 and 0.9) seen on a field: DMD
    finds two complex pairs inside the unit disc."""
    rng = np.random.default_rng(seed)

    def rot(rho, th):
        return rho * np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])

    a = np.zeros((4, 4))
    a[:2, :2], a[2:, 2:] = rot(0.97, 0.3), rot(0.9, 0.05)
    z = np.zeros((n, 4))
    for t in range(1, n):
        z[t] = a @ z[t - 1] + rng.normal(size=4)
    field = z @ rng.normal(size=(4, int(np.prod(shape))))
    return field.reshape(n, *shape)


def test_plots_label_a_conjugate_pair_once_and_draw_modes(tmp_path):
    pytest.importorskip("matplotlib")
    from dpnets import plot
    from dpnets.validation import ImpliedTimescales

    x = _damped_waves()
    model = DMD(rank=4, dt=0.1).fit(x)
    lam = model.eig()
    assert np.sum(np.abs(lam.imag) > 1e-8) == 4  # two complex pairs
    fig = plot.eigenvalues(model)
    labels = [t.get_text() for t in fig.axes[1].texts]
    assert len(labels) == 2 and all(s.endswith("(pair)") for s in labels), labels
    # one label between each pair's two points, not two on top of each other ("44.944.9")
    assert [t.xy[0] for t in fig.axes[1].texts] == [0.5, 2.5]  # DMD: no constant
    # the timescale plot: a pair's equal columns are one line
    res = ImpliedTimescales(
        lags=np.array([1, 2]),
        lag_times=np.array([0.1, 0.2]),
        timescales=np.array([[5.0, 5.0, 1.0], [5.1, 5.1, 1.1]]),
    )
    legend = [t.get_text() for t in plot.implied_timescales(res).axes[0].get_legend().texts]
    assert legend == ["processes 1, 2 (pair)", "process 3", "timescale = lag"]
    fig = plot.eigenfunctions(model, x, k=2)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]  # not the colour bars
    assert [t[:2] for t in titles] == ["φ0", "φ2"] and all("±" in t for t in titles)
    fig = plot.modes(model, k=2, units="s")
    assert len(fig.axes) == 2 and all("±" in ax.get_title() for ax in fig.axes)
    fig.savefig(tmp_path / "modes1d.png")
    field = _damped_waves(600, (2, 4, 6))
    op = TransferOperator().fit(field)
    fig = plot.modes(op, k=3, channel=1)
    assert len(fig.axes) == 6  # three images and their colour bars
    fig.savefig(tmp_path / "modes2d.png")
    assert (tmp_path / "modes2d.png").stat().st_size > 5000
    with pytest.raises(ValueError, match="not one of the 2 channels"):
        plot.modes(op, channel=2)
    with pytest.raises(ValueError, match="does not hold the 48 values"):
        plot.modes(op, shape=(5, 5))


def test_exact_kernel_dmd_guards_its_size_and_shows_progress(monkeypatch, capsys):
    """Exact KernelDMD is O(n^3) (35 s at n = 6000, issue 40): above EXACT_MAX_SAMPLES it
    warns naming NystromKernelDMD; from PROGRESS_MIN_SAMPLES on its stages show on a bar."""
    pytest.importorskip("tqdm")
    from dpnets.baselines import kernels

    x = linear_gaussian(2, seed=0).sample(120, seed=0)
    monkeypatch.setattr(kernels, "EXACT_MAX_SAMPLES", 100)
    monkeypatch.setattr(kernels, "PROGRESS_MIN_SAMPLES", 50)
    with pytest.warns(UserWarning, match=r"exact KernelDMD on 119 pairs.*NystromKernelDMD"):
        KernelDMD("rbf", rank=3).fit(x)
    assert "KernelDMD" in capsys.readouterr().err
    KernelDMD("rbf", rank=3, progress=False).fit(x[:60])
    assert "KernelDMD" not in capsys.readouterr().err
    with pytest.raises(TypeError, match="progress must be True or False, got 'yes'"):
        KernelDMD(progress="yes").fit(x)
