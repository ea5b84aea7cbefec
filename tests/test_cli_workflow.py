"""The command line on the user's files (issue 16): ``dpnets fit`` then ``dpnets analyze`` on
real files written here, the same timescales whatever the file format, a repeatable
configuration, and one clear line with exit status 2 for every user error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpnets.cli import main
from dpnets.systems import OrnsteinUhlenbeck

FIT = ["--lag", "2", "--dt", "0.1", "--epochs", "3", "--dim", "2", "--quiet"]


@pytest.fixture(scope="module")
def trajs() -> list[np.ndarray]:
    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    return [ou.sample(1500, seed=s).astype(np.float64) for s in range(4)]


def _timescales(folder) -> list[float]:
    report = (folder / "report.md").read_text()
    rows = [r for r in report.splitlines() if r.startswith("| ") and "+" in r]
    return [float(r.split("|")[3].split()[0]) for r in rows]  # "inf (stationary)"


def test_fit_analyze_transform_forecast_on_npy_files(tmp_path, trajs, capsys):
    for i, t in enumerate(trajs):
        np.save(tmp_path / f"traj_{i}.npy", t)
    out = tmp_path / "fit"
    assert main(["fit", str(tmp_path / "traj_*.npy"), "--out", str(out), *FIT]) == 0
    for name in ("model.pt", "config.toml", "training.png", "report.md"):
        assert (out / name).stat().st_size > 0
    ts = _timescales(out)
    assert np.isinf(ts[0]) and 0.7 < ts[1] < 1.3  # OU: 1 / theta = 1 time unit
    assert main(["analyze", str(out), "--bootstrap", "3", "--quiet"]) == 0
    for name in ("timescales.png", "ck_test.png", "eigenvalues.png", "eigenfunctions.png"):
        assert (out / "analysis" / name).stat().st_size > 5000
    res = json.loads((out / "analysis" / "results.json").read_text())
    assert res["lag"] == 2 and res["time_unit"] == "time units"
    assert res["ck_max_abs_diff"] < 0.1 and abs(sum(res["sets_stationary"]) - 1) < 1e-9
    # 4 trajectories: a bootstrap of 35 distinct resamples, said to be no error bars
    few = [d["message"] for d in res["diagnostics"] if d["kind"] == "few_units"]
    assert few == [
        "the bootstrap intervals resample 4 whole trajectories, which have only 35 distinct "
        "resamples: the intervals are no error bars; use 5 or more independent trajectories"
    ]
    assert (
        "(95% bootstrap intervals over the 4 trajectories)"
        in (out / "analysis" / "report.md").read_text()
    )
    # 3 resamples give no 95% interval: the report says so (once), not only the console
    assert [d["message"] for d in res["diagnostics"] if d["kind"] == "few_resamples"] == [
        "the 95% intervals come from 3 bootstrap resamples, fewer than the 40 a percentile "
        "interval needs for each tail to hold one: their bounds are just the extreme "
        "resamples; --bootstrap 40 or more"
    ]
    # config.toml's dt edited by hand to 0.2: the estimates and their intervals both double
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(out, edited, ignore=shutil.ignore_patterns("analysis"))
    toml = (edited / "config.toml").read_text()
    (edited / "config.toml").write_text(toml.replace("dt = 0.1\n", "dt = 0.2\n"))
    assert main(["analyze", str(edited), "--bootstrap", "3", "--quiet"]) == 0
    twice = json.loads((edited / "analysis" / "results.json").read_text())
    np.testing.assert_allclose(twice["timescales"][1:], 2 * np.array(res["timescales"][1:]))
    np.testing.assert_allclose(
        np.array(twice["timescales_interval"])[:, 1:],
        2 * np.array(res["timescales_interval"])[:, 1:],
    )
    # a lag that leaves 10 pairs per trajectory: the refit's warning is in the report
    far = tmp_path / "far"
    args = ["analyze", str(out), "--lags", "2", "1490", "--bootstrap", "3", "--quiet"]
    with pytest.warns(UserWarning, match="at lag.s. 149 are longer than the longest"):
        assert main([*args, "--out", str(far)]) == 0
    steps = json.loads((far / "results.json").read_text())["diagnostics"]
    assert [d["message"][:72] for d in steps if d["kind"] == "step_warning"] == [
        "timescales against lag: implied timescales up to 272.5 at lag(s) 149 are"
    ]
    assert "- **step_warning**: timescales against lag:" in (far / "report.md").read_text()
    # the fit's configuration repeats it exactly
    again = tmp_path / "again"
    assert main(["fit", "--config", str(out / "config.toml"), "--out", str(again), "--quiet"]) == 0
    assert _timescales(again) == ts
    feats = tmp_path / "feats.npy"
    assert main(["transform", str(out), str(tmp_path / "traj_0.npy"), "--out", str(feats)]) == 0
    assert np.load(feats).shape == (1500, 3)  # the constant and 2 learned features
    # several trajectories: one array each, in input order, with the eigenfunctions on request
    both = [str(tmp_path / "traj_1.npy"), str(tmp_path / "traj_0.npy")]
    assert main(["transform", str(out), *both, "--out", str(feats)]) == 2  # .npy holds one
    phi = tmp_path / "phi.npz"
    assert main(["transform", str(out), *both, "--eigenfunctions", "--out", str(phi)]) == 0
    from dpnets import load

    model = load(out / "model.pt")
    with np.load(phi) as z:
        assert list(z["sources"]) == both
        for i, src in enumerate(both):
            expect = np.real(model.eigenfunctions(np.load(src)))
            assert z[f"traj_{i}"].shape == (1500, 3)
            assert np.allclose(z[f"traj_{i}"], expect, atol=1e-6)
    pred = tmp_path / "pred.npy"
    assert (
        main(
            ["forecast", str(out), str(tmp_path / "traj_1.npy"), "--steps", "3", "--out", str(pred)]
        )
        == 0
    )
    assert np.load(pred).shape == (3, 1500, 1)


def test_the_same_timescales_from_every_file_format(tmp_path, trajs):
    h5py = pytest.importorskip("h5py")
    files = {}
    np.savez(tmp_path / "all.npz", **{f"t{i}": t for i, t in enumerate(trajs)})
    files["npz"] = [str(tmp_path / "all.npz")]
    for i, t in enumerate(trajs):
        np.savetxt(
            tmp_path / f"t{i}.csv",
            np.hstack([t, t**2]),
            delimiter=",",
            header="x,x2",
            comments="",
            fmt="%.17g",
        )
    files["csv"] = [str(tmp_path / "t*.csv"), "--columns", "x"]
    with h5py.File(tmp_path / "all.h5", "w") as f:
        for i, t in enumerate(trajs):
            f.create_dataset(f"runs/t{i}", data=t)
    files["h5"] = [str(tmp_path / "all.h5")]
    for i, t in enumerate(trajs):
        np.save(tmp_path / f"n{i}.npy", t)
    files["npy"] = [str(tmp_path / "n*.npy")]
    found = {}
    for fmt, args in files.items():
        out = tmp_path / f"fit_{fmt}"
        assert main(["fit", *args, "--out", str(out), *FIT]) == 0, fmt
        found[fmt] = _timescales(out)
    for fmt, ts in found.items():
        np.testing.assert_allclose(ts, found["npy"], rtol=1e-10, err_msg=fmt)


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpnets: error: ")
    return err


def test_user_errors_print_one_line_and_exit_2(tmp_path, trajs, capsys):
    np.save(tmp_path / "a.npy", trajs[0])
    np.save(tmp_path / "b.npy", np.hstack([trajs[1], trajs[1]]))
    out = str(tmp_path / "out")
    assert "nothing.npy" in _error(capsys, ["fit", str(tmp_path / "nothing.npy"), "--out", out])
    assert "lag" in _error(capsys, ["fit", str(tmp_path / "a.npy"), "--lag", "5000", "--out", out])
    err = _error(capsys, ["fit", str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--out", out])
    assert "a.npy" in err and "b.npy" in err  # different state shapes
    good = np.save(tmp_path / "c.npy", trajs[2]) or (tmp_path / "c.npy")
    cut = tmp_path / "cut.npy"
    cut.write_bytes(good.read_bytes()[:500])
    assert "cut.npy" in _error(capsys, ["fit", str(cut), "--out", out])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    err = _error(capsys, ["fit", str(good), "--out", str(tmp_path / "full"), *FIT])
    assert "not empty" in err
    assert "not a dpnets fit folder" in _error(capsys, ["analyze", str(tmp_path)])
    assert "config.toml" in _error(
        capsys, ["fit", "--config", str(tmp_path / "config.toml"), "--out", out]
    )
    assert "--encoder" in _error(
        capsys, ["fit", str(good), "--encoder", "cnn", "--out", str(tmp_path / "o2"), *FIT]
    )
    assert "--dim" in _error(
        capsys, ["fit", str(good), "--dim", "0", "--out", str(tmp_path / "o3"), *FIT[:-3]]
    )
    with pytest.raises(ValueError):  # --debug shows the traceback instead
        main(["--debug", "fit", str(tmp_path / "nothing.npy"), "--out", out])


def test_md_files_from_the_project_simulation(tmp_path, monkeypatch, capsys):
    """An alanine-dipeptide run of the project's OpenMM code saved as .xtc + .pdb and as
    .dcd: fit + analyze on the backbone dihedrals work, and the same dihedral states saved as
    .npy give the same timescales."""
    pytest.importorskip("openmm")
    md = pytest.importorskip("mdtraj")
    from dpnets.datasets import read_trajectories
    from dpnets.systems.alanine import pdb_path, simulate_alanine_dipeptide

    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path / "cache"))
    run = simulate_alanine_dipeptide(600, frame_interval_ps=1.0, seed=0, equilibration_ps=5.0)
    full = md.load(str(pdb_path()))
    heavy = full.topology.select("element != H")
    top = full.atom_slice(heavy)
    top.save_pdb(str(tmp_path / "ala.pdb"))
    traj = md.Trajectory(run.positions / 10.0, top.topology, time=np.arange(600) * 1.0)
    traj.save_xtc(str(tmp_path / "run.xtc"))
    traj.save_dcd(str(tmp_path / "run.dcd"))
    md_args = ["--topology", str(tmp_path / "ala.pdb"), "--features", "dihedrals"]
    md_fit = [a for a in FIT if a not in ("--dt", "0.1")]  # the time per frame from the file
    for ext in ("xtc", "dcd"):
        out = tmp_path / f"fit_{ext}"
        args = ["fit", str(tmp_path / f"run.{ext}"), *md_args, "--out", str(out), *md_fit]
        assert main(args) == 0
        states = read_trajectories(
            tmp_path / f"run.{ext}", topology=tmp_path / "ala.pdb", features="dihedrals"
        )
        assert states.data[0].shape == (600, 4)  # sin/cos of phi and psi
        np.save(tmp_path / f"{ext}.npy", states.data[0])
        npy = tmp_path / f"fit_{ext}_npy"
        assert main(["fit", str(tmp_path / f"{ext}.npy"), "--out", str(npy), *md_fit]) == 0
        np.testing.assert_allclose(_timescales(out), _timescales(npy), rtol=1e-10)
    # the xtc's dihedral states as .npz, .csv and .h5: the same timescales, and analyze runs
    h5py = pytest.importorskip("h5py")
    states = np.load(tmp_path / "xtc.npy")
    np.savez(tmp_path / "states.npz", run=states)
    np.savetxt(
        tmp_path / "states.csv",
        states,
        delimiter=",",
        header="sp,cp,ss,cs",
        comments="",
        fmt="%.9g",
    )
    with h5py.File(tmp_path / "states.h5", "w") as f:
        f.create_dataset("run", data=states)
    for name in ("states.npz", "states.csv", "states.h5"):
        out = tmp_path / f"fit_{name}"
        assert main(["fit", str(tmp_path / name), "--out", str(out), *md_fit]) == 0
        np.testing.assert_allclose(
            _timescales(out), _timescales(tmp_path / "fit_xtc"), rtol=1e-10, err_msg=name
        )
        assert main(["analyze", str(out), "--bootstrap", "2", "--quiet"]) == 0
        assert (out / "analysis" / "timescales.png").stat().st_size > 5000
    assert "= 2 ps" in (tmp_path / "fit_xtc" / "report.md").read_text()  # xtc stores times
    assert "= 2 frames" in (tmp_path / "fit_dcd" / "report.md").read_text()  # dcd does not
    assert main(["analyze", str(tmp_path / "fit_xtc"), "--bootstrap", "2", "--quiet"]) == 0
    # the axes are the two inputs most correlated with the slowest eigenfunction, named as
    # the files name them: the residue of each dihedral (as an angle), the CSV header
    from dpnets.datasets import read_trajectories
    from dpnets.workflow import _plot_coordinates  # noqa: PLC2701 - checked directly here

    read = read_trajectories(
        tmp_path / "run.xtc", topology=tmp_path / "ala.pdb", features="dihedrals"
    )
    assert read.names == ["sin φ ALA2", "cos φ ALA2", "sin ψ ALA2", "cos ψ ALA2"]
    slow = states[:, 0] + 0.1 * states[:, 3]  # follows phi most, then psi
    coords, labels = _plot_coordinates(states, {"features": "dihedrals"}, read.names, slow)
    assert labels == ["φ ALA2 (deg)", "ψ ALA2 (deg)"]
    gap = np.radians(coords[:, 0]) - md.compute_phi(traj)[1][:, 0]
    assert np.abs(np.angle(np.exp(1j * gap))).max() < 0.03  # xtc keeps 1e-3 nm
    csv = read_trajectories(tmp_path / "states.csv", columns=["sp", "ss", "cs"])
    assert csv.names == ["sp", "ss", "cs"]
    x = csv.data[0]
    assert _plot_coordinates(x, {"features": "raw"}, csv.names, x[:, 2] - x[:, 0])[1] == [
        "sp",
        "cs",
    ]
    # atom positions for a SchNet encoder (nm, with the matching 0.5 nm cutoff)
    pytest.importorskip("torch_geometric")
    schnet = tmp_path / "fit_schnet"
    args = [
        "fit",
        str(tmp_path / "run.xtc"),
        "--topology",
        str(tmp_path / "ala.pdb"),
        "--features",
        "positions",
        "--encoder",
        "schnet",
        "--out",
        str(schnet),
        *md_fit,
    ]
    assert main(args) == 0
    ts = _timescales(schnet)
    assert np.isinf(ts[0]) and np.all(np.isfinite(ts[1:])) and ts[1] > 0
    assert main(["fit", str(tmp_path / "run.xtc"), "--out", str(tmp_path / "x")]) == 2
    assert "run.xtc" in capsys.readouterr().err  # no topology: one line naming the file
    assert (tmp_path / "fit_xtc" / "analysis" / "ck_test.png").stat().st_size > 5000


def _skill(folder) -> tuple[float, float]:
    """The report's one-lag forecast RMSE of the model and of persistence."""
    line = next(r for r in (folder / "report.md").read_text().splitlines() if "RMSE" in r)
    model = float(line.split("RMSE ")[1].split(",")[0])
    persistence = float(line.split("persistence ")[1].split(",")[0])
    return model, persistence


def test_fit_and_forecast_say_when_persistence_forecasts_better(tmp_path):
    """A forecaster's series (issue 40 on the command line): the report scores the
    forecast of the state against persistence; a random walk with drift, which the learned
    features do not follow, is flagged in the report and by ``dpnets forecast``; an AR(1)
    is forecast near its optimum (one-step RMSE = the noise's sd, 1) and not flagged."""
    from dpnets.diagnostics import DiagnosticWarning

    rng = np.random.default_rng(0)
    walk = np.cumsum(rng.normal(size=(300, 2)) + [1.0, 0.5], axis=0)
    ar = np.zeros(600)
    for t in range(1, 600):
        ar[t] = 0.9 * ar[t - 1] + rng.normal()
    args = ["--epochs", "20", "--quiet", "--seed", "0"]
    for name, x in (("walk", walk), ("ar", ar[:, None])):
        np.save(tmp_path / f"{name}.npy", x)
        assert (
            main(["fit", str(tmp_path / f"{name}.npy"), "--out", str(tmp_path / name), *args]) == 0
        )
    persistence = float(np.sqrt(np.mean((walk[1:] - walk[:-1]) ** 2)))
    model, reported = _skill(tmp_path / "walk")
    assert reported == pytest.approx(persistence, rel=1e-3) and model > 2 * persistence
    report = (tmp_path / "walk" / "report.md").read_text()
    assert "- **worse_than_persistence**: the model forecasts the state worse than " in report
    assert "model a stationary series (its differences" in report
    pred = tmp_path / "pred.npy"
    with pytest.warns(DiagnosticWarning, match=r"worse than persistence .* at 1 lag\(s\)"):
        fc = [str(tmp_path / "walk"), str(tmp_path / "walk.npy"), "--steps", "2"]
        assert main(["forecast", *fc, "--out", str(pred)]) == 0
    assert np.load(pred).shape == (2, 300, 2)
    model, reported = _skill(tmp_path / "ar")
    assert reported == pytest.approx(np.sqrt(np.mean(np.diff(ar) ** 2)), rel=1e-3)
    assert model < reported and abs(model - 1.0) < 0.1
    assert "worse_than_persistence" not in (tmp_path / "ar" / "report.md").read_text()


def test_single_trajectory_blocks_shorter_than_the_slowest_timescale_are_flagged():
    """1000 frames of 0.1 in 10 blocks: blocks of 10 time units, shorter than a slowest
    timescale of 12 (flagged, with --blocks) and longer than one of 8 (not flagged); whole
    trajectories are independent units (not flagged)."""
    from dpnets.workflow import _short_blocks

    one = [np.zeros((1000, 1))]
    (d,) = _short_blocks(one, 10, [np.inf, 12.0, 3.0], 0.1, "ns")
    assert d.kind == "short_blocks" and d.message(cli=True) == (
        "the 10 bootstrap blocks of the single trajectory last 10 ns each, shorter than the "
        "slowest timescale (12 ns): neighbouring blocks are correlated, which the block "
        "bootstrap assumes they are not: its intervals are unreliable; use fewer --blocks "
        "(longer blocks), or several independent trajectories"
    )
    assert _short_blocks(one, 10, [np.inf, 8.0], 0.1, "ns") == []
    assert _short_blocks(one * 2, 10, [np.inf, 12.0], 0.1, "ns") == []
