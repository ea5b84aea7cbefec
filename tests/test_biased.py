"""Slow modes from biased simulations (issue 44): pairs in rescaled time
(``log_weights`` of ``TransferOperator.fit`` and ``DPNet.fit``) and the generator from biased
samples (importance weights), against the exact timescale of a double well under two static
biases (:mod:`dpnets.experiments.biased_double_well`)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpnets import DPNet, Generator, TransferOperator
from dpnets.biased import rescaled_pair_indices, rescaled_pairs
from dpnets.datasets import BOLTZMANN, DataFileError, read_bias_rows, read_log_weights
from dpnets.experiments import biased_double_well as bdw

EXACT = bdw.exact_timescale()  # 18.01 time units
FRAME = bdw.DT * bdw.EVERY


@pytest.fixture(scope="module")
def runs():
    """1000 chains of 40 time units under each bias (about 1.5 s each)."""
    return {bias: bdw.simulate(bias, 1000, 40.0, seed=0) for bias in bdw.BIASES}


def _error(ts: float) -> float:
    return abs(ts / EXACT - 1.0)


# ---------------------------------------------------------------------- rescaled pairs
def test_rescaled_pairs_by_hand():
    # frames lasting 1/2, 1/2, 1 and 2 frames: rescaled edges 0, .5, 1, 2, 4; lag 1
    i, j, w, span = rescaled_pair_indices(np.log([0.5, 0.5, 1.0, 2.0]), 1)
    assert span == 4.0
    np.testing.assert_array_equal(i, [0, 1, 2, 3])
    np.testing.assert_array_equal(j, [2, 2, 3, 3])
    np.testing.assert_allclose(w, [0.5, 0.5, 1.0, 1.0])
    i, j, w, _ = rescaled_pair_indices(np.log([1.0, 2.0, 1.0]), 1)
    np.testing.assert_array_equal(np.stack([i, j]), [[0, 1, 1], [1, 1, 2]])
    np.testing.assert_allclose(w, 1.0)


def test_rescaled_pairs_weigh_each_frame_by_its_duration():
    lw = np.random.default_rng(0).normal(0.0, 1.5, 500)
    i, j, w, span = rescaled_pair_indices(lw, 7)
    assert w.sum() == pytest.approx(span - 7)
    assert np.all(j >= i) and len(i) <= 2 * len(lw)
    # a frame starts pairs for as long as it lasts (those near the end: until span - lag)
    starts = np.bincount(i, weights=w, minlength=len(lw))
    edges = np.concatenate([[0.0], np.cumsum(np.exp(lw))])
    full = edges[1:] <= span - 7
    np.testing.assert_allclose(starts[full], np.exp(lw)[full])


def test_no_bias_gives_the_ordinary_fit():
    rng = np.random.default_rng(1)
    x = np.cumsum(rng.normal(size=(400, 2)), axis=0) * 0.1
    plain = TransferOperator(lag=3).fit(x)
    zero = TransferOperator(lag=3).fit(x, log_weights=np.zeros(400))
    np.testing.assert_allclose(zero.operator_, plain.operator_, atol=1e-12)
    p = rescaled_pairs([x, x[:50]], 3, [np.zeros(400), np.zeros(50)])
    np.testing.assert_array_equal(p.j - p.i, 3)
    assert len(p) == 397 + 47


def test_a_constant_bias_rescales_the_lag():
    # every frame lasting 2 frames: pairs 2 frames apart in rescaled time are 1 frame apart
    x = np.cumsum(np.random.default_rng(2).normal(size=(300, 1)), axis=0)
    one = TransferOperator(lag=1).fit(x)
    two = TransferOperator(lag=2).fit(x, log_weights=np.full(300, np.log(2.0)))
    np.testing.assert_allclose(two.operator_, one.operator_, atol=1e-10)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"log_weights": np.zeros(99)}, r"log_weights has shape \(99,\); expected \(100,\)"),
        ({"log_weights": np.r_[np.zeros(99), np.nan]}, "log_weights contains 1 NaN or inf"),
        ({"log_weights": np.full(100, 800.0)}, "log_weights reaches 800.*overflows"),
        ({"log_weights": np.full(100, -5.0)}, r"rescaled trajectory lasts 0.67.*lag=10"),
        ({"log_weights": [np.zeros(100), np.zeros(3)]}, "list of 2 arrays for 1 traject"),
    ],
)
def test_bad_log_weights_are_refused_in_one_line(kwargs, match):
    x = np.random.default_rng(3).normal(size=(100, 2))
    with pytest.raises(ValueError, match=match) as err:
        TransferOperator(lag=10).fit(x, **kwargs)
    assert "\n" not in str(err.value)


def test_a_biased_fit_is_saved_as_such_and_refused_by_the_validation(tmp_path):
    from dpnets import load
    from dpnets.validation import ck_test, implied_timescales

    x = np.cumsum(np.random.default_rng(5).normal(size=(300, 1)), axis=0)
    op = TransferOperator(lag=2).fit(x, log_weights=np.full(300, 0.1))
    assert op.rescaled_time_ and not TransferOperator(lag=2).fit(x).rescaled_time_
    op.save(tmp_path / "op.pt")
    loaded = load(tmp_path / "op.pt")
    assert loaded.rescaled_time_
    np.testing.assert_allclose(loaded.operator_, op.operator_)
    for model in (op, loaded):
        with pytest.raises(ValueError, match="fitted on a biased run in rescaled time"):
            implied_timescales(model, x, lags=[1, 2])
        with pytest.raises(ValueError, match="fitted on a biased run in rescaled time"):
            ck_test(model, x, [1, 2], lambda s: np.ones((len(s), 1)))
    with pytest.raises(ValueError, match="observable: a fit on a biased run"):
        op.predict(x[:3], observable=np.ones(len(x)))


def test_log_weights_need_trajectories_and_no_koopman_reweighting():
    x = np.random.default_rng(4).normal(size=(100, 2))
    with pytest.raises(ValueError, match="log_weights needs trajectories"):
        TransferOperator().fit((x[:-1], x[1:]), log_weights=np.zeros(99))
    with pytest.raises(ValueError, match="reversible='reweight'"):
        TransferOperator(reversible="reweight").fit(x, log_weights=np.zeros(100))
    with pytest.raises(ValueError, match="trajectory 1: the rescaled trajectory"):
        TransferOperator(lag=5).fit([x, x[:20]], log_weights=[np.zeros(100), np.full(20, -3.0)])
    with pytest.raises(ValueError, match="sample_weight weighs the samples of the generator"):
        DPNet(epochs=1).fit(x, sample_weight=np.ones(100))
    with pytest.raises(ValueError, match="set consistency=0"):
        DPNet(epochs=1, consistency=1.0).fit(x, log_weights=np.zeros(100))


# ---------------------------------------------------------------------- exactness
def test_rescaled_time_recovers_the_unbiased_timescale(runs):
    """Bias on the wells only: time rescaling within 5%, unweighted off by more than 30%."""
    trajs, lw = runs["wells"]
    weighted = bdw.fit_routes("wells", trajs, lw, weighted=True)
    plain = bdw.fit_routes("wells", trajs, lw, weighted=False)
    assert _error(weighted["transfer"]) < 0.05, weighted
    assert _error(plain["transfer"]) > 0.30, plain
    assert _error(weighted["generator"]) < 0.05, weighted
    assert _error(plain["generator"]) > 0.30, plain


def test_only_the_generator_survives_a_bias_on_the_barrier(runs):
    """Bias flattening the barrier: importance weights within 5%; time rescaling (its
    assumption broken) and the unweighted fits off by more than 30%."""
    trajs, lw = runs["barrier"]
    weighted = bdw.fit_routes("barrier", trajs, lw, weighted=True)
    plain = bdw.fit_routes("barrier", trajs, lw, weighted=False)
    assert _error(weighted["generator"]) < 0.05, weighted
    assert _error(plain["generator"]) > 0.30, plain
    assert _error(weighted["transfer"]) > 0.30, weighted
    # the grid says why: the rescaled process itself is that fast
    assert bdw.rescaled_limit("barrier") == pytest.approx(weighted["transfer"], rel=0.1)
    assert _error(bdw.rescaled_limit("wells")) < 0.02


def test_generator_log_weights_equal_sample_weight(runs):
    trajs, lw = runs["barrier"]
    x = np.concatenate([t[::40] for t in trajs[:200]])
    v = np.concatenate([w[::40] for w in lw[:200]])
    sde = bdw.system().sde()
    a = Generator(bdw.GaussianBasis(), sde=sde, form="dirichlet").fit(x, log_weights=v)
    b = Generator(bdw.GaussianBasis(), sde=sde, form="dirichlet").fit(x, sample_weight=np.exp(v))
    np.testing.assert_allclose(a.eigvals_, b.eigvals_, rtol=1e-10)
    with pytest.raises(ValueError, match="either sample_weight .* or log_weights"):
        Generator(bdw.GaussianBasis(), sde=sde).fit(x, sample_weight=np.exp(v), log_weights=v)


def test_dpnet_pairs_in_rescaled_time(runs):
    """The composite TransferOperator(DPNet) on every 10th frame of 300 chains of the wells
    run (-0.1% with the weights, -67% without)."""
    trajs, lw = runs["wells"]
    sub, sub_lw = [t[::10] for t in trajs[:300]], [w[::10] for w in lw[:300]]
    found = {}
    for weighted in (True, False):
        net = DPNet(r=1, lag=5, epochs=4, seed=0, progress=False)
        op = TransferOperator(net, lag=5, dt=10 * FRAME)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op.fit(sub, log_weights=sub_lw if weighted else None)
        found[weighted] = float(op.implied_timescales()[1])
    assert _error(found[True]) < 0.05, found
    assert _error(found[False]) > 0.30, found


def test_dpnet_generator_from_biased_samples(runs):
    """DPNet(objective="dirichlet") and its Generator with importance weights, on every
    40th frame of the barrier run (-2.3% with the weights, -93% without)."""
    trajs, lw = runs["barrier"]
    x = np.concatenate([t[::40] for t in trajs])
    w = np.exp(np.concatenate([v[::40] for v in lw]))
    sde = bdw.system().sde()
    found = {}
    for weights in (w, None):
        net = DPNet(r=1, objective="dirichlet", sde=sde, lr=1e-2, epochs=5, seed=0)
        net.set_params(progress=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net.fit(x, sample_weight=weights)
            gen = Generator(net, form="dirichlet").fit(x, sample_weight=weights)
        found[weights is not None] = float(np.nanmax(gen.implied_timescales()[1:]))
    assert _error(found[True]) < 0.05, found
    assert _error(found[False]) > 0.30, found


# ---------------------------------------------------------------------- engine files
def _colvar(path, rows, fields="time x metad.bias"):
    lines = [f"#! FIELDS {fields}", "#! SET min_x -pi"]
    lines += [" ".join(f"{v:.6f}" for v in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_plumed_colvar(tmp_path):
    rows = [(0.1 * k, np.sin(k), 2.0 * k) for k in range(5)]
    path = _colvar(tmp_path / "COLVAR", rows)
    beta = 1.0 / (BOLTZMANN["kJ/mol"] * 300.0)
    np.testing.assert_allclose(read_log_weights(path, temperature=300.0), beta * 2.0 * np.arange(5))
    np.testing.assert_allclose(read_log_weights(path, "metad.bias", units="kT"), 2.0 * np.arange(5))
    np.testing.assert_allclose(read_log_weights(path, 1, units="kT"), np.sin(np.arange(5)), 1e-6)
    kcal = read_log_weights(path, temperature=300.0, units="kcal/mol")
    np.testing.assert_allclose(kcal, 2.0 * np.arange(5) / (BOLTZMANN["kcal/mol"] * 300.0))
    np.save(tmp_path / "bias.npy", 2.0 * np.arange(5))
    np.testing.assert_allclose(
        read_log_weights(tmp_path / "bias.npy", units="kT"), 2 * np.arange(5)
    )


def test_bad_colvar_files_are_refused_naming_the_file(tmp_path):
    path = _colvar(tmp_path / "COLVAR", [(0.0, 1.0, 2.0)])
    with pytest.raises(DataFileError, match=r"COLVAR: no column 'opes.bias'; columns: time, x"):
        read_log_weights(path, "opes.bias", units="kT")
    two = _colvar(tmp_path / "TWO", [(0, 1, 2, 3)], "time x metad.bias opes.bias")
    with pytest.raises(
        DataFileError,
        match="several ends in '.bias'.*the total bias of several actions is their sum: "
        "metad.bias[+]opes.bias",
    ):
        read_log_weights(two, units="kT")
    np.testing.assert_array_equal(read_log_weights(two, "metad.bias+opes.bias", units="kT"), [5])
    np.testing.assert_array_equal(read_log_weights(two, "2+3", units="kT"), [5])
    with pytest.raises(ValueError, match="temperature is needed"):
        read_log_weights(path)
    with pytest.raises(DataFileError, match="SHORT: line 4 has 2 values for 3 columns"):
        read_log_weights(_colvar(tmp_path / "SHORT", [(0, 1, 2), (0, 1)]), units="kT")
    restarted = tmp_path / "RESTART"
    restarted.write_text("#! FIELDS time a.bias\n0 1\n#! FIELDS time b.bias\n1 2\n")
    with pytest.raises(DataFileError, match="later '#! FIELDS' header names other columns"):
        read_log_weights(restarted, units="kT")
    with pytest.raises(
        DataFileError, match=r"bias holds 1 NaN or inf value\(s\) \(first in data row 2"
    ):
        read_log_weights(_colvar(tmp_path / "NAN", [(0, 1, 2), (1, 1, np.nan)]), units="kT")
    with pytest.raises(DataFileError, match="column 0 is the time, not a bias"):
        read_log_weights(path, 0, units="kT")


def test_restarted_colvar_keeps_the_continued_run(tmp_path):
    """PLUMED appends a restarted run from its checkpoint (time 3) after rows up to time 5:
    the repeated rows are the continued run's (bias 10 + t), the first run's from time 3 on
    are dropped with a warning naming the line, and the time runs 0..7 once."""
    first = [(t, 0.0, float(t)) for t in range(6)]
    again = [(t, 0.0, 10.0 + t) for t in range(3, 8)]
    path = _colvar(tmp_path / "COLVAR", first)
    with open(path, "a") as fh:
        fh.write("#! FIELDS time x metad.bias\n#! SET min_x -pi\n")
        fh.write("".join(f"{t} {x} {v}\n" for t, x, v in again))
    with pytest.warns(
        UserWarning, match=r"COLVAR: line 11: the time goes back from 5 to 3 .* the 3 earlier row"
    ):
        lw, times = read_bias_rows(path, units="kT")
    np.testing.assert_array_equal(times, np.arange(8.0))
    np.testing.assert_array_equal(lw, [0, 1, 2, 13, 14, 15, 16, 17])


def test_colvar_with_rows_missing_is_refused_naming_the_line(tmp_path):
    rows = [(0.5 * k, 0.0, 1.0) for k in range(10) if k != 6]
    path = _colvar(tmp_path / "COLVAR", rows)
    with pytest.raises(
        DataFileError,
        match=r"COLVAR: line 9: the time steps from 2.5 to 3.5, where the rows are 0.5 apart",
    ):
        read_log_weights(path, units="kT")


# ---------------------------------------------------------------------- command line
def test_cli_fit_with_plumed_bias_files(tmp_path, capsys):
    """A constant bias ln 2 kT makes every frame last 2 frames of unbiased time: the
    Ornstein-Uhlenbeck timescale (1 time unit) reads 2 in the report; the bias is stored in
    config.toml and named in the report."""
    from dpnets.cli import main
    from dpnets.fitfolder import load_config
    from dpnets.systems import OrnsteinUhlenbeck

    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    kt = BOLTZMANN["kJ/mol"] * 300.0
    paths, biases = [], []
    for s in range(3):
        x = ou.sample(1500, seed=s).astype(np.float64)
        np.save(tmp_path / f"traj_{s}.npy", x)
        rows = [(0.1 * k, x[k, 0], np.log(2.0) * kt) for k in range(len(x))]
        _colvar(tmp_path / f"COLVAR.{s}", rows)
        paths.append(str(tmp_path / f"traj_{s}.npy"))
        biases.append(f"{tmp_path / f'COLVAR.{s}'}:metad.bias")
    fit = ["--dt", "0.1", "--epochs", "3", "--dim", "2", "--quiet"]
    out = tmp_path / "fit"
    bias = ["--bias", *biases, "--temperature", "300"]
    assert main(["fit", *paths, "--lag", "4", *bias, *fit, "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "Bias: " in report and "mean acceleration 2" in report
    rows = [r for r in report.splitlines() if r.startswith("| 1 |")]
    assert 1.6 < float(rows[0].split("|")[3].split()[0]) < 2.4  # 2 time units
    config = load_config(out / "config.toml")["data"]
    assert config["bias"] == biases and config["temperature"] == 300.0
    capsys.readouterr()
    assert main(["analyze", str(out), "--quiet"]) == 2  # no unweighted refits of a biased run
    assert "fitted on a biased run (--bias)" in capsys.readouterr().err
    assert main(["fit", *paths, "--bias", *biases, *fit, "--out", str(tmp_path / "a")]) == 2
    assert "--bias needs --temperature" in capsys.readouterr().err
    one = ["--bias", biases[0], "--temperature", "300"]
    assert main(["fit", *paths, *one, *fit, "--out", str(tmp_path / "b")]) == 2
    assert "1 bias file(s) for 3 trajectories" in capsys.readouterr().err
    np.save(tmp_path / "traj_0.npy", np.load(paths[0])[:1000])
    short = ["fit", paths[0], *one, "--stride", "2", *fit, "--out", str(tmp_path / "c")]
    assert main(short) == 2
    assert "COLVAR.0: 750 bias rows (one row in 2)" in capsys.readouterr().err


def test_cli_matches_colvar_rows_to_frames_by_time(tmp_path, capsys):
    """A COLVAR printed twice as often as the trajectory (PLUMED's classic stride mismatch):
    with the frames' time in ps, one row in 2 is read, and the fit equals the one on a
    COLVAR of one row per frame; without it, or with another time step, it is refused."""
    from dpnets.cli import main
    from dpnets.systems import OrnsteinUhlenbeck

    x = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1).sample(400, seed=0)
    np.save(tmp_path / "traj.npy", x.astype(np.float64))
    bias = np.log(1.0 + x[:, 0] ** 2)  # in kT, one per frame
    per_frame = _colvar(tmp_path / "COLVAR", [(0.1 * k, x[k, 0], bias[k]) for k in range(400)])
    fine = [(0.05 * k, 0.0, bias[k // 2] if k % 2 == 0 else 99.0) for k in range(799)]
    twice = _colvar(tmp_path / "COLVAR.fine", fine)
    fit = [str(tmp_path / "traj.npy"), "--lag", "3", "--epochs", "1", "--dim", "2", "--quiet"]
    fit += ["--bias-units", "kT", "--dt", "0.1", "--time-unit", "ps"]
    assert main(["fit", *fit, "--bias", str(per_frame), "--out", str(tmp_path / "a")]) == 0
    with pytest.warns(
        UserWarning,
        match=r"a row every 0.05 ps and a frame of .* every 0.1 ps: one row in 2 is read",
    ):
        assert main(["fit", *fit, "--bias", str(twice), "--out", str(tmp_path / "b")]) == 0
    eig = [
        [r for r in (tmp_path / f / "report.md").read_text().splitlines() if r.startswith("| 1 |")]
        for f in "ab"
    ]
    assert eig[0] == eig[1] and eig[0]
    capsys.readouterr()
    frames = fit[:-4]
    assert main(["fit", *frames, "--bias", str(twice), "--out", str(tmp_path / "c")]) == 2
    assert "799 bias rows for the 400 frames" in (err := capsys.readouterr().err)
    assert "2 times as many rows as frames" in err and "--time-unit ps" in err
    other = [*frames, "--dt", "0.25", "--time-unit", "ps"]
    assert main(["fit", *other, "--bias", str(per_frame), "--out", str(tmp_path / "d")]) == 2
    assert "a row every 0.1 ps (its time column, PLUMED's ps" in capsys.readouterr().err


def test_cli_refuses_a_bias_whose_frames_outlast_the_lag(tmp_path, capsys):
    """A bias of 1.5 to 3 kT at lag 2: frames last 4.5 to 20 frames of rescaled time, so
    most pairs are a frame with itself (what a bias in kJ/mol read as kcal/mol, or a wrong
    temperature, gives): refused before training, naming the share and the options; the
    same bias read at 1/4 of the strength (0.375 to 0.75 kT) fits."""
    from dpnets.cli import main
    from dpnets.systems import OrnsteinUhlenbeck

    x = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1).sample(300, seed=0)
    np.save(tmp_path / "traj.npy", x.astype(np.float64))
    bias = 1.5 + 1.5 * (np.arange(300) % 2)  # alternating 1.5 and 3 (kT)
    rows = [(0.1 * k, x[k, 0], bias[k] * 2.494) for k in range(300)]  # kJ/mol at 300 K
    path = str(_colvar(tmp_path / "COLVAR", rows))
    fit = [str(tmp_path / "traj.npy"), "--lag", "2", "--epochs", "1", "--dim", "2", "--quiet"]
    bad = ["--bias", path, "--temperature", "300", "--bias-units", "kcal/mol"]
    assert main(["fit", *fit, *bad, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert (
        "--bias: at --lag 2, " in err
        and "of the pairs in rescaled time pair a frame with itself" in err
    )
    assert "check --temperature and --bias-units" in err
    share = int(err.split("--lag 2, ")[1].split("%")[0])
    assert 50 < share <= 100
    good = ["--bias", path, "--temperature", "1200"]
    assert main(["fit", *fit, *good, "--out", str(tmp_path / "b")]) == 0
    rbias = str(_colvar(tmp_path / "R", rows, "time x metad.rbias"))
    with pytest.warns(UserWarning, match="metad.rbias: a reweighting bias .* time rescaling"):
        rb = ["--bias", f"{rbias}:metad.rbias", "--temperature", "1200"]
        assert main(["fit", *fit, *rb, "--out", str(tmp_path / "c")]) == 0


def test_transition_state_shift_by_hand():
    """``exp(beta c)`` is the mean of ``exp(beta V)`` over the frames outside both phi cores
    (here phi = 0 and 110 degrees), the minimum without such a frame."""
    from dpnets.experiments import biased_alanine as ba

    phi = np.array([-80.0, 0.0, 110.0, 70.0, 170.0])
    bv = np.array([5.0, 1.0, 3.0, 7.0, 2.0])
    c = ba.transition_state_shift(phi, bv, ba.CONFIG)
    assert np.isclose(c, np.log((np.e + np.e**3) / 2))
    assert ba.transition_state_shift(phi[[0, 3, 4]], bv[[0, 3, 4]], ba.CONFIG) == 2.0
    # a kept frame of a strided run lasts its block's rescaled time: log-mean-exp per block
    blocks = ba._block_log_mean_exp(bv, 2)
    assert np.allclose(np.exp(blocks), [(np.e**5 + np.e) / 2, (np.e**3 + np.e**7) / 2, np.e**2])


def test_biased_alanine_quick_log_weights_are_the_engines_bias(tmp_path, monkeypatch):
    """``dpnets reproduce biased-alanine --quick``: every production frame's bias energy is
    OpenMM's final metadynamics bias at the frame's psi (static: its grid interpolated), the
    build deposited Gaussians, and the log-weights written for DeepTICA are ``beta V - beta c``
    of those frames, with ``c`` of :func:`transition_state_shift`."""
    pytest.importorskip("openmm")
    import json

    from dpnets.experiments import EXPERIMENTS
    from dpnets.experiments import biased_alanine as ba

    assert EXPERIMENTS["biased-alanine"][0] == ba.__name__
    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ba.run(quick=True, out=tmp_path / "out", progress=False)
    kT = 0.00831446261815324 * ba.QUICK["temperature"]
    data = np.load(tmp_path / "out" / "biased_alanine_data.npz")
    runs = [ba.psi_metadynamics(ba.QUICK["run_seed0"] + k, ba.QUICK) for k in range(2)]
    beta_v, phi = [], []
    for r in runs:
        first = int(r["first_prod"])
        assert first == 20 and np.ptp(r["bias_kj"][:first]) > 1.0  # Gaussians deposited
        final = np.interp(np.deg2rad(r["psi"][first:]), r["bias_grid"], r["bias_final_kj"])
        assert np.abs(r["bias_kj"][first:] - final).max() < 0.01 * np.ptp(r["bias_final_kj"])
        beta_v.append(r["bias_kj"][first:] / kT)
        phi.append(r["phi"][first:])
    beta_v, phi = np.concatenate(beta_v), np.concatenate(phi)
    shift = ba.transition_state_shift(phi, beta_v, ba.QUICK)
    lw = data["log_weights"]
    assert np.allclose(lw, beta_v - shift)
    assert data["features"].shape == (len(beta_v), 4)
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert np.isclose(res["log_weight_shift_beta_c"]["transition"], shift)
    assert np.isclose(res["production_ns_rescaled"]["transition"], np.exp(lw).sum() / 1000)
    # the other convention: the mean weight is 1 (PLUMED's metad.rbias)
    assert np.isclose(np.exp(data["log_weights_rbias"]).mean(), 1.0)
