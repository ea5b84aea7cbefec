"""Physics and pipeline tests of the flow-past-a-cylinder data (paper Sec. 5, App. F).

A small 40x80 channel (cylinder of diameter 8, blockage 0.2) keeps the whole file at a few
seconds; the physics checked is the same as at the experiment's 100x200.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpnets.systems.fluid import (
    CylinderFlow,
    LatticeBoltzmann2D,
    dominant_frequency,
    strouhal_number,
)

SMALL = {
    "shape": (40, 80),
    "diameter": 8,
    "warmup": 3000,
    "stride": 16,
    "n_snapshots": 100,
    "seed": 0,
}


@pytest.fixture(scope="module")
def small_flow():
    return CylinderFlow(**SMALL).generate()


def test_strouhal_number_at_re_100(small_flow):
    # confined (blockage 0.2) shedding at Re = 100: above the unconfined 0.165, below 0.25
    st = small_flow.strouhal()
    assert 0.14 <= st <= 0.25, st
    # the shedding is fully developed: the probe oscillates with a steady amplitude
    probe = small_flow.probe
    half = probe.size // 2
    a1, a2 = np.ptp(probe[:half]), np.ptp(probe[half:])
    assert a1 > 0.5 and abs(a1 - a2) / a2 < 0.05


def test_strouhal_estimator_on_a_sine():
    t = np.arange(3000)
    f = 1.0 / 437.0
    signal = np.sin(2 * np.pi * f * t + 0.3) + 0.2 * np.sin(4 * np.pi * f * t)
    assert dominant_frequency(signal) == pytest.approx(f, rel=2e-3)
    assert strouhal_number(signal, 1.0, 8.0, 0.1) == pytest.approx(f * 80.0, rel=2e-3)
    with pytest.raises(ValueError):
        dominant_frequency(np.ones(100))
    with pytest.raises(ValueError):
        strouhal_number(signal, 1.0, -1.0, 0.1)


def test_mass_exactly_conserved_in_closed_channel():
    # periodic in x, free-slip walls, bounce-back cylinder: every population is conserved
    ny, nx = 24, 48
    yy, xx = np.mgrid[0:ny, 0:nx]
    solid = (xx - 12) ** 2 + (yy - 11.5) ** 2 < 16
    rng = np.random.default_rng(1)
    lbm = LatticeBoltzmann2D(
        solid,
        nu=0.01,
        kappa=0.01,
        u_inlet=0.1,
        c_inlet=np.linspace(0, 1, ny),
        open_x=False,
        v0=0.02 * rng.standard_normal((ny, nx)),
    )
    m0 = lbm.mass()
    lbm.step(400)
    assert lbm.mass() == pytest.approx(m0, rel=1e-12)
    assert lbm.c.min() >= 0.0 and lbm.c.max() <= 1.0


def test_open_channel_mass_balance_and_scalar_bounds(small_flow):
    # open inlet/outlet: mass is not exactly conserved, but inflow and outflow balance: the
    # total mass only oscillates with the shedding (weak compressibility, ~0.2%) without drift
    mass = small_flow.mass / small_flow.mass.mean()
    assert np.ptp(mass) < 5e-3
    t = np.arange(mass.size)
    slope = np.polyfit(t, mass, 1)[0]
    assert abs(slope) * mass.size < 5e-4
    c = small_flow.snapshots[:, 3]
    assert c.min() >= 0.0 and c.max() <= 1.0
    # the scalar is actually transported: it varies in time in the wake
    assert c.std(axis=0).max() > 0.1
    # the density stays close to 1 (low Mach number) and the fields are finite
    assert np.all(np.isfinite(small_flow.snapshots))
    assert np.abs(small_flow.snapshots[:, 2]).max() < 10.0


def test_seeded_reproducibility():
    kw = {"shape": (16, 32), "diameter": 4, "warmup": 60, "stride": 2, "n_snapshots": 5}
    a = CylinderFlow(**kw, seed=3).generate()
    b = CylinderFlow(**kw, seed=3).generate()
    c = CylinderFlow(**kw, seed=4).generate()
    np.testing.assert_array_equal(a.snapshots, b.snapshots)
    assert not np.array_equal(a.snapshots, c.snapshots)


def test_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path))
    flow = CylinderFlow(shape=(16, 32), diameter=4, warmup=20, stride=2, n_snapshots=4)
    first = flow.load()
    path = flow.cache_file()
    assert path.exists() and path.parent == tmp_path
    second = flow.load()
    np.testing.assert_array_equal(first.snapshots, second.snapshots)
    np.testing.assert_array_equal(first.probe, second.probe)
    assert second.params["version"] == first.params["version"]
    assert second.params["diameter"] == 4
    # a different parameter gives a different cache file
    other = CylinderFlow(shape=(16, 32), diameter=4, warmup=21, stride=2, n_snapshots=4)
    assert other.cache_file() != path


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shape": (10, 200)},
        {"shape": (40, 80), "diameter": 30},
        {"reynolds": -1.0},
        {"peclet": float("nan")},
        {"u_inlet": 0.5},
        {"stride": 0},
        {"collision": "mrt"},
        {"seed": 1.5},
        {"shape": (20, 40), "diameter": 4, "reynolds": 1000.0},  # tau too close to 1/2
    ],
)
def test_invalid_parameters(kwargs):
    with pytest.raises(ValueError):
        CylinderFlow(**kwargs).params()


def test_end_to_end_forecast_beats_mean(small_flow):
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from dpnets import DPNet, TransferOperator
    from dpnets.experiments.fluid_flow import relative_rmse, standardise
    from dpnets.nn import MLP

    # subsample 2x in space to keep the test fast
    z, _, _ = standardise(small_flow.snapshots[:, :, ::2, ::2], 80)
    train, test = z[:80], z[80:]
    torch.manual_seed(0)
    enc = MLP(int(np.prod(z.shape[1:])), (64, 64), 16, activation="relu")
    net = DPNet(
        enc,
        gamma=1.0,
        lr=1e-3,
        epochs=150,
        batch_size=79,
        val_fraction=0.0,
        seed=0,
        progress=False,
    ).fit(train)
    model = TransferOperator(net).fit(train)
    ts = np.arange(1, test.shape[0] + 1)
    pred = model.predict(train[-1:], t=ts)[:, 0]
    assert np.all(np.isfinite(pred))
    scale = float(z[:, 3].std())
    err = relative_rmse(pred[:, 3], test[:, 3], scale)
    err_mean = relative_rmse(
        np.repeat(train[:, 3].mean(axis=0, keepdims=True), test.shape[0], axis=0),
        test[:, 3],
        scale,
    )
    assert err.mean() < 0.5 * err_mean.mean()


# -- the start-up (transient) regime: dpnets.experiments.fluid_transient ----------------------

#: The quick transient experiment's flow (40x80, impulsive start, small perturbation).
STARTUP = {
    "shape": (40, 80),
    "warmup": 0,
    "stride": 26,
    "n_snapshots": 250,
    "seed": 0,
    "perturbation": 0.01,
}


@pytest.fixture(scope="module")
def startup_cache(tmp_path_factory):
    """A cache folder holding the start-up flow, shared by the transient tests."""
    cache = tmp_path_factory.mktemp("fluid-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DPNETS_CACHE", str(cache))
        data = CylinderFlow(**STARTUP).load()
    return cache, data


def test_startup_is_transient_growth_then_saturation(startup_cache):
    from dpnets.experiments.fluid_transient import wake_amplitude

    _, data = startup_cache
    period = int(round(data.params["diameter"] / (0.21 * data.params["u_inlet"])))
    env = wake_amplitude(data.probe, period)  # probe amplitude per shedding period (v / U0)
    assert env.size == 250 * 26 // period
    # symmetric start-up wake: after the impulsive start has passed, no shedding yet
    assert env[2:4].max() < 0.05
    # the instability grows by more than a factor 30 (exponential onset) ...
    assert env[10] > 30 * env[3]
    assert np.all(np.diff(env[4:11]) > 0)
    growth = env[1:] / env[:-1]
    assert np.all(growth[5:9] > 1.4)  # about x2 per shedding period during the onset
    # ... and saturates into shedding of (nearly) constant amplitude, ~1.25 U0 on this grid
    last = env[-3:]
    assert 1.0 < last.mean() < 1.6 and np.all(growth[-2:] < 1.02)
    # the quick experiment's split (150 snapshots) ends during the saturation
    at_split = np.ptp(data.probe[(150 - 15) * 26 : 150 * 26])
    assert 0.5 * last.mean() < at_split < 0.95 * last.mean()
    with pytest.raises(ValueError):
        wake_amplitude(data.probe, 1)


def test_perturbation_parameter():
    # the default flow keeps its cache key (no "perturbation" entry), a smaller one changes it
    assert "perturbation" not in CylinderFlow().params()
    assert CylinderFlow(perturbation=0.01).params()["perturbation"] == 0.01
    assert CylinderFlow(perturbation=0.01).cache_file() != CylinderFlow().cache_file()
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            CylinderFlow(perturbation=bad).params()
    # the initial transverse velocity scales with it
    kw = {"shape": (40, 80), "seed": 2}
    v_big = np.abs(CylinderFlow(**kw).solver().v).max()
    v_small = np.abs(CylinderFlow(**kw, perturbation=0.01).solver().v).max()
    assert v_small == pytest.approx(0.01 * v_big, rel=1e-9)
    assert v_big > 0.01 * 0.1  # 0.1-0.2 U0 with U0 = 0.1


def test_quick_transient_experiment_writes_per_seed_results(startup_cache, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import json

    from dpnets.experiments import EXPERIMENTS
    from dpnets.experiments.fluid_transient import QUICK_CONFIG, run

    assert EXPERIMENTS["fluid-flow-transient"][0] == "dpnets.experiments.fluid_transient"
    assert QUICK_CONFIG["flow"] == {**STARTUP, "reynolds": 100.0, "peclet": 100.0}
    cache, _ = startup_cache
    monkeypatch.setenv("DPNETS_CACHE", str(cache))
    methods = ("DPNets", "DMD", "Persistence", "Mean")
    table = run(
        quick=True,
        seeds=2,
        out=tmp_path,
        progress=False,
        config={"epochs": 2, "hidden": (32,), "methods": methods},
    )
    assert (tmp_path / "table.md").read_text().startswith("Start-up of the cylinder wake")
    assert "±" in table and "C long (t=51-100)" in table
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["n_seeds"] == 2 and res["data"]["params"]["perturbation"] == 0.01
    r = res["results"]
    assert set(r) == set(methods) and all(r[m]["error"] is None for m in methods)
    # per-seed numbers: two network seeds, one run of each deterministic method
    assert np.asarray(r["DPNets"]["rmse_C"]).shape == (2, 100)
    assert np.asarray(r["DMD"]["rmse_C"]).shape == (1, 100)
    assert len(r["DPNets"]["long_C"]) == 2 and r["DPNets"]["long_C"][0] != r["DPNets"]["long_C"][1]
    # DMD fitted on the growing oscillation has eigenvalues outside the unit circle: it beats
    # persistence over the first period but its forecast amplitude overshoots the saturation
    dmd = r["DMD"]
    assert dmd["max_abs_eig"][0] > 1.005 and dmd["n_eig_above_1"][0] >= 2
    assert dmd["short_C"][0] < 0.8 * r["Persistence"]["short_C"][0]
    assert dmd["long_C"][0] > r["Persistence"]["long_C"][0]
    assert dmd["amplitude_ratio"][0] > 1.15
    # persistence has zero oscillation; the mean field's error is flat in t
    assert r["Persistence"]["amplitude_ratio"] == [0.0]
    mean_err = np.asarray(r["Mean"]["rmse_C"][0])
    assert 0.2 < mean_err.mean() < 1.0 and np.ptp(mean_err) < 0.5 * mean_err.mean()
