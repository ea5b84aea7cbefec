"""Alanine dipeptide: reproducible OpenMM runs, dihedrals, the MSM reference, end to end."""

import numpy as np
import pytest

from dpnets.systems.alanine import (
    HEAVY_ATOM_NAMES,
    KB_KCAL,
    PHI_ATOMS,
    PSI_ATOMS,
    basin_delta_g,
    dihedral,
    msm_reference,
    pdb_path,
)


def _short(seed: int, n: int = 4, **kw):
    from dpnets.systems.alanine import simulate_alanine_dipeptide

    # 4 frames of 50 steps after 50 steps of equilibration: 250 steps in all
    return simulate_alanine_dipeptide(
        n, frame_interval_ps=0.2, equilibration_ps=0.2, seed=seed, cache=False, **kw
    )


def test_packaged_pdb():
    text = pdb_path().read_text()
    assert text.count("ATOM") == 22
    assert len(HEAVY_ATOM_NAMES) == 10


def test_simulation_is_reproducible_with_a_seed():
    pytest.importorskip("openmm")
    a = _short(seed=3)
    b = _short(seed=3)
    c = _short(seed=4)
    assert a.positions.shape == (4, 10, 3) and a.positions.dtype == np.float32
    np.testing.assert_array_equal(a.positions, b.positions)
    assert not np.allclose(a.positions, c.positions)
    assert a.atomic_numbers.tolist() == [6, 6, 8, 7, 6, 6, 6, 8, 7, 6]
    # Ångström: a C-N peptide bond (ACE C - ALA N) is about 1.33 Å
    cn = np.linalg.norm(a.positions[:, 1] - a.positions[:, 3], axis=-1)
    assert np.all((cn > 1.2) & (cn < 1.5))
    np.testing.assert_allclose(a.phi, dihedral(a.positions, PHI_ATOMS), atol=1e-4)
    assert a.kT == pytest.approx(KB_KCAL * 400.0)


def test_simulation_cache(tmp_path, monkeypatch):
    pytest.importorskip("openmm")
    from dpnets.systems.alanine import simulate_alanine_dipeptide

    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path))
    kw = dict(frame_interval_ps=0.2, equilibration_ps=0.0, seed=1)
    a = simulate_alanine_dipeptide(2, **kw)
    assert len(list(tmp_path.glob("alanine-dipeptide-*.npz"))) == 1
    b = simulate_alanine_dipeptide(2, **kw)
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.psi, b.psi)


def test_bad_parameters():
    from dpnets.systems.alanine import simulate_alanine_dipeptide

    with pytest.raises(ValueError):
        simulate_alanine_dipeptide(10, solvent="water", cache=False)
    with pytest.raises(ValueError):
        simulate_alanine_dipeptide(10, frame_interval_ps=0.003, cache=False)
    with pytest.raises(ValueError):
        simulate_alanine_dipeptide(0, cache=False)


def test_dihedral_hand_built():
    # b -> c along z; a along +x; d rotated by theta about z
    for theta in (-150.0, -60.0, 0.0, 45.0, 120.0, 180.0):
        t = np.radians(theta)
        pos = np.array(
            [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.5], [np.cos(t), np.sin(t), 1.5]]
        )
        got = dihedral(pos, (0, 1, 2, 3))
        assert abs(abs(got) - abs(theta)) < 1e-9
    # the sign follows the IUPAC convention (checked against OpenMM below)
    assert dihedral(pos[None], (0, 1, 2, 3)).shape == (1,)


def test_dihedral_matches_openmm():
    openmm = pytest.importorskip("openmm")
    from openmm import unit

    rng = np.random.default_rng(0)
    pos = rng.normal(size=(6, 3))
    system = openmm.System()
    for _ in range(6):
        system.addParticle(1.0)
    quads = [(0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (5, 1, 3, 0)]
    for k, q in enumerate(quads):
        force = openmm.CustomTorsionForce("theta")
        force.addTorsion(*q, [])
        force.setForceGroup(k)
        system.addForce(force)
    ctx = openmm.Context(
        system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    ctx.setPositions(pos * unit.nanometer)
    for k, q in enumerate(quads):
        e = ctx.getState(getEnergy=True, groups={k}).getPotentialEnergy()
        ref = np.degrees(e.value_in_unit(unit.kilojoule_per_mole))
        assert dihedral(pos, q) == pytest.approx(ref, abs=1e-6)


def test_packaged_structure_dihedrals():
    """phi/psi of the packaged PDB from our heavy-atom order, against OpenMM's topology."""
    app = pytest.importorskip("openmm.app")
    pdb = app.PDBFile(str(pdb_path()))
    atoms = list(pdb.topology.atoms())
    xyz = np.array(pdb.getPositions(asNumpy=True)._value) * 10.0
    heavy = [a.index for a in atoms if a.element.atomic_number > 1]
    names = [(atoms[i].residue.name, atoms[i].name) for i in heavy]
    assert [n[0] for n in names] == [n[0] for n in HEAVY_ATOM_NAMES]
    by_name = {(atoms[i].residue.name, atoms[i].name): i for i in range(len(atoms))}
    phi_ref = dihedral(
        xyz,
        tuple(by_name[k] for k in [("ACE", "C"), ("ALA", "N"), ("ALA", "CA"), ("ALA", "C")]),
    )
    psi_ref = dihedral(
        xyz,
        tuple(by_name[k] for k in [("ALA", "N"), ("ALA", "CA"), ("ALA", "C"), ("NME", "N")]),
    )
    assert dihedral(xyz[heavy], PHI_ATOMS) == pytest.approx(phi_ref)
    assert dihedral(xyz[heavy], PSI_ATOMS) == pytest.approx(psi_ref)
    # the packaged structure is the extended (beta/C5-like) conformation, phi = psi = 180
    assert abs(abs(phi_ref) - 180.0) < 1.0 and abs(abs(psi_ref) - 180.0) < 1.0


def _two_state_chain(p: float, q: float, n: int, seed: int) -> np.ndarray:
    """A -> B with prob p, B -> A with prob q per step."""
    rng = np.random.default_rng(seed)
    s = np.zeros(n, dtype=int)
    u = rng.random(n)
    for t in range(1, n):
        s[t] = (u[t] < p) if s[t - 1] == 0 else (u[t] >= q)
    return s


def test_msm_reference_two_state_chain():
    p, q, n = 0.02, 0.06, 100_000
    s = _two_state_chain(p, q, n, 0)
    rng = np.random.default_rng(1)
    # A: phi in (-150, -60); B: phi in (30, 90); psi anywhere in a band
    phi = np.where(s == 0, rng.uniform(-150, -60, n), rng.uniform(30, 90, n))
    psi = rng.uniform(100, 170, n)
    kT = 0.6
    ref = msm_reference(phi, psi, dt_ps=2.0, kT=kT, lags=(1, 5), n_bins=24)
    t_exact = -2.0 / np.log(1.0 - p - q)
    its = np.asarray(ref["timescales_ps"])[:, 0]
    np.testing.assert_allclose(its, t_exact, rtol=0.08)
    dg_exact = -kT * np.log(p / q)  # pi_B / pi_A = p / q
    assert ref["delta_g"] == pytest.approx(dg_exact, abs=0.05)
    assert ref["delta_g_counts"] == pytest.approx(dg_exact, abs=0.05)
    # the second process is intra-basin noise (i.i.d. within a basin): fast
    assert np.asarray(ref["timescales_ps"])[0, 1] < 0.5 * t_exact
    with pytest.raises(ValueError):
        msm_reference(phi[:10], psi[:9], dt_ps=1.0, kT=kT)


def test_basin_delta_g():
    phi = np.array([-100.0] * 90 + [60.0] * 10)
    assert basin_delta_g(phi, 1.0) == pytest.approx(-np.log(10 / 90))
    assert np.isnan(basin_delta_g(np.full(5, -100.0), 1.0))


def test_split_delta_g_synthetic_eigenfunction():
    from dpnets.experiments.alanine_dipeptide import _split_delta_g

    rng = np.random.default_rng(0)
    f = np.concatenate([rng.normal(-1, 0.1, 9000), rng.normal(2, 0.2, 1000)])
    phi = np.concatenate([np.full(9000, -80.0), np.full(1000, 60.0)])
    dg, thr = _split_delta_g(f, phi, kT=0.8)
    assert -0.7 < thr < 1.5
    assert dg == pytest.approx(-0.8 * np.log(1000 / 9000), abs=1e-9)
    # orientation comes from phi only: flipping the eigenfunction's sign changes nothing
    assert _split_delta_g(-f, phi, kT=0.8)[0] == pytest.approx(dg)
    # without any C7ax/alpha_L frame the sides cannot be named; a single mode has no split
    assert np.isnan(_split_delta_g(f, np.full(f.shape, -80.0), kT=0.8)[0])
    mixed = np.where(np.arange(20000) % 7 == 0, 60.0, -80.0)
    assert np.isnan(_split_delta_g(rng.normal(size=20000), mixed, kT=0.8)[0])


def test_end_to_end_short_trajectory_to_timescales():
    """Simulation -> SchNet DPNet -> transfer operator -> timescales, against two references
    on the same 400 frames: the least-squares operator recomputed from the features, and
    the slowest timescale of the (phi, psi) grid MSM and of sin/cos(phi, psi) features."""
    pytest.importorskip("openmm")
    pytest.importorskip("torch_geometric")
    pytest.importorskip("deeptime")  # msm_reference
    from dpnets import DPNet, TransferOperator
    from dpnets.nn.schnet import SchNetEncoder
    from dpnets.systems.alanine import simulate_alanine_dipeptide

    # 400 frames every 0.1 ps (10,000 steps of 4 fs)
    traj = simulate_alanine_dipeptide(
        400, frame_interval_ps=0.1, equilibration_ps=1.0, seed=0, cache=False
    )
    lag = 5
    enc = SchNetEncoder(traj.atomic_numbers.tolist(), out_dim=4, hidden_channels=16, num_filters=16)
    net = DPNet(enc, epochs=40, batch_size=128, seed=0, progress=False, lag=lag).fit(traj.positions)
    op = TransferOperator(net, dt=traj.dt_ps).fit(traj.positions)
    its = op.implied_timescales()
    # 4 learned features and the constant (stationary: inf), at the DPNet's lag of 5 frames
    assert op.lag_ == lag and its.shape == (5,) and its[0] == np.inf
    assert np.all(np.isfinite(its[1:])) and np.all(its[1:] > 0)

    # the same numbers by hand: least squares on [1, features] over the pairs (t, t + lag)
    f = np.column_stack([np.ones(400), np.asarray(net.transform(traj.positions), np.float64)])
    x, y = f[:-lag], f[lag:]
    lam = np.linalg.eigvals(np.linalg.solve(x.T @ x, x.T @ y))
    lam = lam[np.argsort(-np.abs(lam))]
    assert abs(lam[0] - 1) < 1e-8
    np.testing.assert_allclose(its[1:], -lag * traj.dt_ps / np.log(np.abs(lam[1:])), rtol=1e-4)

    # The slowest process in 40 ps at 400 K is a dihedral transition. References at the same
    # lag on the same frames: the 24 x 24 (phi, psi) grid MSM (3.5 ps here) and a linear
    # model on sin/cos(phi, psi) (2.1 ps). Measured for torch seeds 0-5 and simulation seeds
    # 0-1: after 40 epochs the DPNet gives 0.65-0.83 of the MSM's timescale and 1.10-1.28
    # times the dihedral model's; an untrained encoder gives 0.08-0.43 and 0.14-0.66.
    msm = msm_reference(traj.phi, traj.psi, dt_ps=traj.dt_ps, kT=traj.kT, lags=(lag,))
    t_msm = np.asarray(msm["timescales_ps"])[0, 0]
    ang = np.radians(np.column_stack([traj.phi, traj.psi]))
    dihedrals = np.column_stack([np.sin(ang), np.cos(ang)])
    t_dih = TransferOperator(None, dt=traj.dt_ps, lag=lag).fit(dihedrals).implied_timescales()[1]
    assert 0.5 * t_msm < its[1] < t_msm, (its[1], t_msm)
    assert its[1] > 0.8 * t_dih, (its[1], t_dih)


def test_msm_reference_seeded_two_state_ensemble():
    """Short runs started alternately in each basin (far from the 1:3 equilibrium split): the
    list form and the reversible MLE recover the exact timescale and Delta G."""
    p, q, kT = 0.02, 0.06, 0.6
    rng = np.random.default_rng(2)
    phis, psis = [], []
    n = 20  # steps per run, shorter than the relaxation time 1 / (p + q) = 12.5 steps x 2
    for k in range(1200):
        # even runs start in A; odd ones in B (the chain with swapped labels and rates)
        s = _two_state_chain(p, q, n, k) if k % 2 == 0 else 1 - _two_state_chain(q, p, n, k)
        phis.append(np.where(s == 0, rng.uniform(-150, -60, n), rng.uniform(30, 90, n)))
        psis.append(rng.uniform(100, 170, n))
    ref = msm_reference(phis, psis, dt_ps=2.0, kT=kT, lags=(1, 2, 100), n_bins=24)
    t_exact = -2.0 / np.log(1.0 - p - q)
    its = np.asarray(ref["timescales_ps"])[:, 0]
    np.testing.assert_allclose(its[:2], t_exact, rtol=0.1)
    assert np.isnan(its[2])  # lag 100 is longer than every trajectory
    assert ref["delta_g"] == pytest.approx(-kT * np.log(p / q), abs=0.1)
    # the raw frame histogram is biased towards B by the seeding
    assert ref["delta_g_counts"] < ref["delta_g"] - 0.3
    with pytest.raises(ValueError, match="same number"):
        msm_reference(phis, psis[:-1], dt_ps=1.0, kT=kT)


def test_initial_phi_seeds_the_basin_and_ensemble_matches_single_runs():
    pytest.importorskip("openmm")
    from dpnets.systems.alanine import basin_b_mask, simulate_alanine_ensemble

    kw = dict(frame_interval_ps=0.2, equilibration_ps=5.0, cache=False)
    runs = [{"n_frames": 3, "seed": 0, "initial_phi": 70.0}, {"n_frames": 3, "seed": 1}]
    seeded, plain = simulate_alanine_ensemble(runs, workers=2, **kw)
    assert basin_b_mask(seeded.phi).all()  # restrained equilibration put it in C7ax
    assert not basin_b_mask(plain.phi).any()  # the PDB structure is C7eq
    assert seeded.params["initial_phi"] == 70.0 and "initial_phi" not in plain.params
    (serial,) = simulate_alanine_ensemble(runs[:1], **kw)
    np.testing.assert_array_equal(serial.positions, seeded.positions)
    with pytest.raises(ValueError, match="equilibration"):
        simulate_alanine_ensemble(
            [{"n_frames": 2, "initial_phi": 70.0}], equilibration_ps=0.0, cache=False
        )
    with pytest.raises(ValueError, match="runs"):
        simulate_alanine_ensemble([])


def test_experiment_runs_end_to_end_on_a_tiny_ensemble(tmp_path, monkeypatch):
    pytest.importorskip("openmm")
    pytest.importorskip("torch_geometric")
    import json

    from dpnets.experiments.alanine_dipeptide import run

    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path / "cache"))
    tiny = {
        "n_runs": 3,
        "run_ns": 0.3,
        "frame_ps": 2.0,
        "lag_ps": 10.0,
        "heldout_every": 3,
        "n_pairs": 200,
        "n_pairs_baseline": 200,
        "batch_size": 100,
        "nys_centers": 40,
        "nys_pairs": 200,
        "its_lags_ps": (4.0, 10.0),
        "scatter_points": 100,
        "fes_bins": 10,
        "bootstrap": 2,
    }
    table = run(quick=True, out=tmp_path / "out", progress=False, config=tiny, workers=1)
    assert "| DPNets-relaxed |" in table and "Reference: MSM" in table
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["simulation"]["n_trajectories"] == 3
    assert res["split"] == {"train": [0, 1], "held_out": [2]}
    for m in res["methods"][0]:
        assert m["slowest_ps"] > 0 and len(m["its_curve_ps"]) == 2
    for name in ("its.png", "fes.png", "eigenfunctions.png", "ck.png", "table.md"):
        assert (tmp_path / "out" / name).exists()
    main = res["methods"][0][0]  # DPNets-relaxed: bootstrap bands and the CK test
    assert np.all(np.array(main["its_lower_ps"]) <= np.array(main["its_upper_ps"]))
    assert np.array(main["ck_predictions"]).shape == (3, 2, 2)  # lag 0, 1 and 2 x tau
    assert abs(sum(main["pcca_stationary"]) - 1.0) < 1e-9


def _quick_sweep_simulate() -> bool:
    """Whether the quick sweep must simulate its two trajectories (skip without OpenMM)."""
    from dpnets.experiments.alanine_sweep import QUICK_CONFIG, _sweep_data

    try:
        _sweep_data(QUICK_CONFIG, simulate=False)
    except FileNotFoundError:
        pytest.importorskip("openmm")
        return True
    return False


def test_sweep_quick_is_budget_matched_with_msm_and_intervals(tmp_path):
    pytest.importorskip("torch_geometric")
    pytest.importorskip("deeptime")
    import json

    from dpnets.experiments.alanine_sweep import (
        NN_METHODS,
        NYSTROM_METHODS,
        QUICK_CONFIG,
        _msm_scan,
        _sweep_data,
        run,
    )

    simulate = _quick_sweep_simulate()
    table = run(quick=True, out=tmp_path, workers=1, device="cpu", simulate=simulate)
    for name in ("table.md", "results.json", "its_r.png"):
        assert (tmp_path / name).exists()
    res = json.loads((tmp_path / "results.json").read_text())
    lags_ps = [10.0, 20.0, 50.0, 100.0]
    assert res["lags_ps"] == lags_ps and res["quick"] is True
    assert len((tmp_path / "fits.jsonl").read_text().splitlines()) == len(res["fits"]) == 20
    assert res["machine"]["torch"] and res["device_name"] and res["wall_s"] > 0
    methods = list(NN_METHODS + NYSTROM_METHODS)
    r_values, n_seeds, n_boot = [2, 4], 2, QUICK_CONFIG["bootstrap"]
    fits = res["fits"]
    assert [(f["method"], f["r"], f["seed"]) for f in fits] == [
        (m, r, s) for m in methods for r in r_values for s in range(n_seeds)
    ]
    # the same number of gradient steps for every trained method (and none for Nyström)
    steps = {f["steps"] for f in fits if f["method"] in NN_METHODS}
    assert len(steps) == 1 and steps.pop() > 0 and len(res["steps"]) == 1
    assert all(f["steps"] is None for f in fits if f["method"] in NYSTROM_METHODS)
    for f in fits:
        its = np.array([row[0] for row in f["its_curve_ps"]])
        assert np.all(np.isfinite(its)) and np.all(its > 0), f["method"]
        samples = np.array(f["its_samples_ps"])
        assert samples.shape == (n_boot, len(lags_ps)) and np.all(samples[np.isfinite(samples)] > 0)
        assert np.isfinite(f["score"]) and f["score"] > 1.0  # VAMP-2 with the constant
    # the MSM row is msm_reference at the same lag; its interval comes from the bootstrap
    data = _sweep_data(QUICK_CONFIG, simulate=False)
    for k, lag_ps in enumerate(lags_ps):
        ref = msm_reference(
            data["phis"], data["psis"], dt_ps=5.0, kT=data["kT"], lags=(int(lag_ps / 5.0),)
        )
        assert res["msm"]["slowest_ps"][k] == pytest.approx(ref["slowest_ps"], rel=1e-12)
    assert np.array(res["msm"]["samples_ps"]).shape == (n_boot, len(lags_ps))
    assert np.all(np.array(res["msm"]["lower_ps"]) <= np.array(res["msm"]["upper_ps"]))
    # the summary: seed means of the curves, pooled bootstrap intervals, relative errors
    for m in methods:
        for r in r_values:
            cell = res["summary"][m][str(r)]
            curves = [
                [row[0] for row in f["its_curve_ps"]]
                for f in fits
                if (f["method"], f["r"]) == (m, r)
            ]
            np.testing.assert_allclose(cell["mean_ps"], np.mean(curves, axis=0))
            np.testing.assert_allclose(
                cell["rel_err"], np.array(cell["mean_ps"]) / np.array(res["msm"]["slowest_ps"]) - 1
            )
            assert np.all(np.array(cell["lower_ps"]) <= np.array(cell["upper_ps"]))
            assert isinstance(cell["goal_met"], bool)
            lo, hi = np.array(cell["rel_err_paired_lower"]), np.array(cell["rel_err_paired_upper"])
            assert lo.shape == (len(lags_ps),) and np.all(lo[np.isfinite(lo)] > -1)
            assert np.all(
                lo[np.isfinite(lo) & np.isfinite(hi)] <= hi[np.isfinite(lo) & np.isfinite(hi)]
            )
    assert "### Reference" in table and "| MSM 24x24 (φ, ψ) |" in table
    assert all(f"### {m}" in table for m in methods)
    # the MSM scan is cached next to the trajectories (read where deeptime is missing)
    cfg = {**QUICK_CONFIG, "_its_lags": [2, 4, 10, 20]}
    again = _msm_scan(data, cfg, n_boot)
    assert again["source"].startswith("alanine-msm-scan-")
    np.testing.assert_allclose(again["timescales_ps"][:, 0], res["msm"]["slowest_ps"])


def test_sweep_workers_give_the_same_structure(tmp_path):
    pytest.importorskip("torch_geometric")
    pytest.importorskip("deeptime")
    import json

    from dpnets.experiments.alanine_sweep import run

    simulate = _quick_sweep_simulate()
    kw = dict(
        quick=True,
        r_values=(2,),
        seeds=1,
        methods=("DPNets-relaxed", "Nyström-RRR"),
        device="cpu",
        simulate=simulate,
    )
    run(out=tmp_path / "one", workers=1, **kw)
    run(out=tmp_path / "two", workers=2, **kw)
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    two = json.loads((tmp_path / "two" / "results.json").read_text())

    def shape(x):
        if isinstance(x, dict):
            return {k: shape(v) for k, v in x.items() if k not in ("history",)}
        if isinstance(x, list):
            return [shape(v) for v in x]
        return type(x).__name__

    assert shape(one["fits"]) == shape(two["fits"])
    assert shape(one["summary"]) == shape(two["summary"])
    assert one["steps"] == two["steps"]
    # Nyström needs no torch: the same numbers in a worker process
    np.testing.assert_allclose(
        one["fits"][1]["its_curve_ps"], two["fits"][1]["its_curve_ps"], rtol=1e-6
    )


def test_cache_only_never_simulates(tmp_path, monkeypatch):
    """cache="only" loads a cached trajectory and raises, naming the fix, on a miss (no
    OpenMM needed); other values of cache are refused."""
    from dpnets.systems.alanine import simulate_alanine_dipeptide

    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="cache='only' never simulates"):
        simulate_alanine_dipeptide(10, seed=123, cache="only")
    with pytest.raises(ValueError, match="cache must be True, False or 'only'"):
        simulate_alanine_dipeptide(10, seed=123, cache="yes")
