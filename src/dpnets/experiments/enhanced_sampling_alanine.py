r"""Enhanced sampling of alanine dipeptide with a learned slow mode in OpenMM (issue 27).

``dpnets reproduce enhanced-sampling-alanine [--quick] [--seeds K] [--out DIR]``

The molecular half of the enhanced-sampling experiment (the 2-D model potential is
:mod:`dpnets.experiments.enhanced_sampling`): the slowest eigenfunction of a DPNet fitted on
the backbone dihedrals of short unbiased runs is exported to TorchScript, put into OpenMM as
a tabulated function of the two torsions, and biased with OpenMM's own well-tempered
metadynamics (``openmm.app.Metadynamics``).

Setting
-------
* System: alanine dipeptide in vacuum, Amber14, 400 K, Langevin (1/ps), 4 fs steps with
  hydrogen-mass repartitioning: the settings of :mod:`dpnets.systems.alanine` and of
  ``dpnets reproduce alanine-dipeptide``. All simulations run on OpenMM's ``Reference``
  platform (a CPU platform; for this 22-atom system it is about seven times faster than the
  ``CPU`` platform with one thread: 210 against 30 ps/s measured here; ``platform`` in the
  configuration picks the ``CPU`` one).
* Learning: ``train_runs`` unbiased runs of ``train_ps`` each, started alternately in
  C7eq/beta (``phi = -80``) and C7ax/alpha_L (``phi = +70``) by a restrained equilibration
  that is released before the first frame (:func:`dpnets.systems.alanine.
  simulate_alanine_ensemble`); a DPNet (MLP 4-32-32-3, CELU) on ``[sin phi, cos phi, sin
  psi, cos psi]`` at a lag of 10 ps and its :class:`dpnets.TransferOperator`. Its slowest
  non-constant eigenfunction ``s = phi_1`` is exported with :func:`dpnets.export` taking the
  raw torsions (radians) through :class:`dpnets.export.TorsionInputs`.
* Into the engine: OpenMM-Torch's CPU wheel (``acellera-openmmtorch-cpu`` 1.10) needs
  torch < 2.13, so it cannot share dpnets' environment; here the exported file is tabulated
  on a periodic ``n_grid x n_grid`` grid of (phi, psi) as a ``Continuous2DFunction`` of two
  ``CustomTorsionForce`` angles inside a ``CustomCVForce``
  (:func:`dpnets.engines.openmm_torsion_cv`). The tabulated CV is checked against the
  TorchScript file at the centres of the grid cells (the interpolation error) and, during
  the run, at every saved frame (the engine's CV value against the file at the frame's
  torsions). ``run(engine="openmm-torch")`` evaluates the network itself at every step
  instead: the slow mode exported with the 22 atoms' positions in
  (:class:`dpnets.export.PositionTorsions`) in an OpenMM-Torch ``TorchForce`` (needs
  ``openmmtorch``, a side environment: ``benchmarks/openmm_torch_side_env.sh``).
* Biasing: ``openmm.app.Metadynamics`` on that CV (one non-periodic ``BiasVariable``
  covering the whole range of the table; well-tempered, bias factor 4, Gaussians of
  1 kJ/mol every ps with a width of ``sigma_fraction`` of the CV's range) for ``build_ps``,
  then a production run of ``prod_ps`` under the final, static bias (no more Gaussians).
  The equilibrium free energy is recovered by reweighting the production frames with
  ``exp(V(s) / kT)``, ``V`` the bias force's energy at the frame (exact for a static bias;
  no c(t) estimate is needed).
* Unbiased run of the same length (build + production) from the same start (the PDB's
  C7eq structure, 100 ps of equilibration).

Reference (``reference_runs``)
    The first ``reference_runs`` trajectories of ``dpnets reproduce alanine-dipeptide``'s
    ensemble (same seeds and parameters, so they share its cache: 20 ns each, frames every
    5 ps, started alternately in both basins) and the reversible maximum-likelihood Markov
    state model of that experiment on a 24 x 24 grid of (phi, psi)
    (:func:`dpnets.systems.alanine.msm_reference`, lag 500 ps, the experiment's training
    lag). The reference free energy of a cell is ``-kT ln pi`` of the MSM's stationary
    distribution, with the populations of the two basins (``0 < phi < 120`` against the
    rest) set to the committed full-ensemble value of the alanine experiment (1.92 us, 96
    trajectories: ``Delta G = 2.19 +- 0.19 kcal/mol``, :data:`REFERENCE_DELTA_G`): the
    within-basin shape converges in a few ns, the basin ratio needs the long data. The free
    energy with the subset's own basin ratio is reported too.

Metrics
-------
* ``transition_rate_ratio``: committed transitions between the cores C7eq/beta/alpha_R
  (``phi <= -40`` or ``phi >= 160`` degrees) and C7ax/alpha_L (``30 <= phi <= 100``; a
  transition is counted when the other core is reached) per ns, biased (build and
  production) over unbiased. With no unbiased transition the ratio is reported as a lower
  bound with one (``transition_rate_ratio_is_lower_bound``).
* ``fes_max_error_kT``: the largest ``|F_reweighted - F_reference|`` over the 15-degree
  cells whose reference free energy is within 5 kT of its minimum, after aligning the two
  by their Boltzmann-weighted mean difference (``inf`` if the metadynamics missed such a
  cell; the same error over the cells it visited, and the missed cells, are reported too).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpnets.experiments._common import (
    markdown_table,
    mean_std,
    output_dir,
    pyplot,
    torch_threads,
    write_results,
)

__all__ = [
    "run",
    "CONFIG",
    "QUICK",
    "REFERENCE_DELTA_G",
    "transitions",
    "dihedral_features",
    "torsion_atoms",
    "simulate_metadynamics",
]

#: Gas constant in kJ/(mol K) (OpenMM's energies are in kJ/mol).
R_KJ = 0.00831446261815324
#: ``Delta G = G(C7ax/alpha_L) - G(C7eq/beta)`` (kcal/mol) and its bootstrap standard error
#: from the reversible MSM of ``dpnets reproduce alanine-dipeptide`` on its full 1.92 us
#: ensemble (``benchmarks/results/alanine_dipeptide/results.json``: ``reference.delta_g``,
#: ``reference_bootstrap.delta_g_std``).
REFERENCE_DELTA_G: tuple[float, float] = (2.1895589264868596, 0.19216713956758183)

#: the full experiment (about half an hour on one core, most of it the reference ensemble,
#: which is cached and shared with ``dpnets reproduce alanine-dipeptide``)
CONFIG: dict[str, Any] = {
    "temperature": 400.0,
    "solvent": "vacuum",
    "timestep_fs": 4.0,
    "friction_per_ps": 1.0,
    "platform": "Reference",
    # learning: short unbiased runs started in both basins
    "train_runs": 16,
    "train_ps": 1000.0,
    "train_frame_ps": 1.0,
    "train_seed0": 1000,
    "seed_phis": (-80.0, 70.0),
    "equilibration_ps": 100.0,
    "lag": 10,
    "hidden": [32, 32],
    "r": 3,
    "epochs": 20,
    "n_grid": 121,
    # metadynamics (openmm.app.Metadynamics) and the unbiased run of the same length
    "build_ps": 10_000.0,
    "prod_ps": 50_000.0,
    "save_ps": 1.0,
    "height_kj": 1.0,
    "pace_steps": 250,
    "bias_factor": 4.0,  # 8 missed the FES goal (cell noise in the deep basin), see README
    "sigma_fraction": 0.02,
    "run_seed0": 2000,
    # reference: the first runs of the alanine-dipeptide experiment's ensemble
    "reference_runs": 12,
    "reference_lag_ps": 500.0,
    # analysis
    "core_a_outside": (-40.0, 160.0),
    "core_b": (30.0, 100.0),
    "fes_bins": 24,
    "fes_window_kT": 5.0,
}
#: ``--quick``: a smoke test of some seconds (its numbers do not meet the goals)
QUICK: dict[str, Any] = {
    **CONFIG,
    "train_runs": 4,
    "train_ps": 40.0,
    "equilibration_ps": 10.0,
    "lag": 2,
    "hidden": [8],
    "epochs": 2,
    "n_grid": 25,
    "build_ps": 40.0,
    "prod_ps": 40.0,
    "save_ps": 2.0,
    "reference_runs": 0,  # the reference is two unbiased runs of reference_ps instead
    "reference_ps": 40.0,
    "reference_lag_ps": 10.0,
}


def dihedral_features(phi_deg: np.ndarray, psi_deg: np.ndarray) -> np.ndarray:
    """``[sin phi, cos phi, sin psi, cos psi]`` (float32) of angles in degrees: the states of
    :class:`dpnets.export.TorsionInputs` (and of ``dpnets fit``'s dihedral features)."""
    a, b = np.deg2rad(np.asarray(phi_deg, float)), np.deg2rad(np.asarray(psi_deg, float))
    return np.stack([np.sin(a), np.cos(a), np.sin(b), np.cos(b)], 1).astype(np.float32)


def _in_core(phi: np.ndarray, cfg: dict[str, Any]) -> np.ndarray:
    """``+1`` in the C7ax/alpha_L core, ``-1`` in the C7eq/beta/alpha_R core, else 0."""
    phi = np.asarray(phi, dtype=np.float64)
    lo, hi = cfg["core_a_outside"]
    b_lo, b_hi = cfg["core_b"]
    out = np.zeros(phi.shape, dtype=np.int64)
    out[(phi <= lo) | (phi >= hi)] = -1
    out[(phi >= b_lo) & (phi <= b_hi)] = 1
    return out


def transitions(phi: np.ndarray, cfg: dict[str, Any] | None = None) -> int:
    """Committed core-to-core transitions of one ``phi`` trajectory (degrees).

    The trajectory is assigned to the last core it visited (``cfg``'s ``core_a_outside``:
    C7eq/beta/alpha_R where ``phi`` is outside that interval; ``core_b``: C7ax/alpha_L); a
    transition is counted when it reaches the other core, so that recrossings of the
    barrier that do not commit are not counted.
    """
    cores = _in_core(phi, CONFIG if cfg is None else cfg)
    state, total = 0, 0
    for c in cores[cores != 0]:
        if state != 0 and c != state:
            total += 1
        state = int(c)
    return total


def _edges(cfg: dict[str, Any]) -> np.ndarray:
    return np.linspace(-180.0, 180.0, int(cfg["fes_bins"]) + 1)


def _fes(phi: np.ndarray, psi: np.ndarray, weights: np.ndarray, cfg: dict[str, Any]) -> np.ndarray:
    """``-ln p`` (kT units) of the (weighted) 2-D histogram on ``fes_bins`` cells a side."""
    e = _edges(cfg)
    hist, _, _ = np.histogram2d(phi, psi, bins=(e, e), weights=weights)
    with np.errstate(divide="ignore"):
        return -np.log(hist / hist.sum())


def _reference(cfg: dict[str, Any], progress: bool) -> dict[str, Any]:
    """The reference free energy (kT units) on the ``fes_bins`` grid, see the module doc."""
    from dpnets.experiments import alanine_dipeptide as ad
    from dpnets.systems.alanine import KB_KCAL, msm_reference, simulate_alanine_dipeptide

    n = int(cfg["reference_runs"])
    t0 = time.perf_counter()
    if n > 0:
        runs, common = ad.ensemble_runs(ad.CONFIG)
        runs = runs[:n]
        dt = float(ad.CONFIG["frame_ps"])
        what = (
            f"first {n} trajectories of `dpnets reproduce alanine-dipeptide`'s ensemble "
            f"({n} x {ad.CONFIG['run_ns']:g} ns, frames every {dt:g} ps, seeded alternately at "
            f"phi = {ad.CONFIG['seed_phis']}); reversible ML MSM on a {cfg['fes_bins']} x "
            f"{cfg['fes_bins']} (phi, psi) grid at lag {cfg['reference_lag_ps']:g} ps"
        )
    else:  # --quick: two short runs, one per basin
        dt = float(cfg["save_ps"])
        frames = int(round(float(cfg["reference_ps"]) / dt))
        runs = [
            {"n_frames": frames, "seed": 3000 + i, "initial_phi": float(p)}
            for i, p in enumerate(cfg["seed_phis"])
        ]
        common = {"temperature": float(cfg["temperature"]), "frame_interval_ps": dt}
        common["equilibration_ps"] = float(cfg["equilibration_ps"])
        what = "quick mode: two short unbiased runs (not a converged reference)"
    trajs = []
    for k, r in enumerate(runs):
        trajs.append(simulate_alanine_dipeptide(**{**common, **r}))
        if progress:
            print(f"reference: {k + 1}/{len(runs)} runs, {time.perf_counter() - t0:.0f} s")
    kT = KB_KCAL * float(cfg["temperature"])
    lag = max(int(round(float(cfg["reference_lag_ps"]) / dt)), 1)
    msm = msm_reference(
        [t.phi for t in trajs],
        [t.psi for t in trajs],
        dt_ps=dt,
        kT=kT,
        lags=(lag,),
        n_bins=int(cfg["fes_bins"]),
    )
    nb = int(cfg["fes_bins"])
    p = np.zeros(nb * nb)
    p[np.asarray(msm["active_cells"], dtype=np.int64)] = msm["stationary"]
    p = p.reshape(nb, nb)
    centers = 0.5 * (_edges(cfg)[1:] + _edges(cfg)[:-1])
    in_b = ((centers > 0.0) & (centers < 120.0))[:, None] & np.ones(nb, bool)[None, :]
    pb_target = 1.0 / (1.0 + np.exp(REFERENCE_DELTA_G[0] / kT))
    fixed = p.copy()
    if p[in_b].sum() > 0 and p[~in_b].sum() > 0:
        fixed[in_b] *= pb_target / p[in_b].sum()
        fixed[~in_b] *= (1.0 - pb_target) / p[~in_b].sum()
    with np.errstate(divide="ignore"):
        f_fixed, f_own = -np.log(fixed / fixed.sum()), -np.log(p / p.sum())
    simulated = sum(float(t.params.get("wall_s", 0.0)) for t in trajs)
    return {
        "what": what,
        "fes": f_fixed,
        "fes_own_ratio": f_own,
        "delta_g_subset_kcal": float(msm["delta_g"]),
        "delta_g_used_kcal": REFERENCE_DELTA_G[0] if n > 0 else float(msm["delta_g"]),
        "slowest_ps_subset": float(msm["slowest_ps"]),
        "total_ns": float(sum(len(t) for t in trajs) * dt / 1000.0),
        "simulation_s_when_made": simulated,
        "seconds": time.perf_counter() - t0,
        "fixed_ratio": n > 0,
        "phi": np.concatenate([t.phi for t in trajs]),
    }


def _fit_cv(seed: int, cfg: dict[str, Any], out: Path, progress: bool) -> dict[str, Any]:
    """Short unbiased runs, the DPNet and its operator; the exported slowest mode."""
    from dpnets import DPNet, TransferOperator, export
    from dpnets.export import TorsionInputs
    from dpnets.nn import MLP
    from dpnets.systems.alanine import simulate_alanine_ensemble

    t0 = time.perf_counter()
    frame = float(cfg["train_frame_ps"])
    n_frames = int(round(float(cfg["train_ps"]) / frame))
    phis = tuple(cfg["seed_phis"])
    runs = [
        {"n_frames": n_frames, "seed": int(cfg["train_seed0"]) + i, "initial_phi": phis[i % 2]}
        for i in range(int(cfg["train_runs"]))
    ]
    trajs = simulate_alanine_ensemble(
        runs,
        temperature=float(cfg["temperature"]),
        solvent=cfg["solvent"],
        timestep_fs=float(cfg["timestep_fs"]),
        friction_per_ps=float(cfg["friction_per_ps"]),
        frame_interval_ps=frame,
        equilibration_ps=float(cfg["equilibration_ps"]),
        platform=cfg["platform"],
    )
    t_sim = time.perf_counter() - t0
    feats = [dihedral_features(t.phi, t.psi) for t in trajs]
    enc = MLP(4, tuple(cfg["hidden"]), int(cfg["r"]), activation="celu")
    net = DPNet(enc, lag=int(cfg["lag"]), epochs=int(cfg["epochs"]), seed=seed, progress=progress)
    net.fit(feats)
    op = TransferOperator(net, dt=frame).fit(feats)
    path = out / f"cv_seed{seed}.pt"
    export(
        op,
        path,
        modes=[1],
        inputs=TorsionInputs(1),
        input_shape=(2,),
        input_names=["phi", "psi"],
        metadata={"engine_inputs": "backbone torsions phi, psi (radians)"},
    )
    positions_path = None
    if cfg.get("engine", "tabulated") == "openmm-torch":  # the 22 atoms' positions in
        from dpnets.export import PositionTorsions

        phi_atoms, psi_atoms = torsion_atoms()
        positions_path = out / f"cv_seed{seed}_positions.pt"
        export(
            op,
            positions_path,
            modes=[1],
            inputs=PositionTorsions([phi_atoms, psi_atoms], 1),
            input_shape=(22, 3),
            metadata={"engine_inputs": "positions of the 22 atoms (nm)"},
        )
    # the file against the model on the training frames (its inputs are the raw torsions)
    cv = torch.jit.load(str(path))
    ang = np.deg2rad(np.concatenate([[t.phi, t.psi] for t in trajs], axis=1).T)
    with torch.no_grad():
        s_file = cv(torch.tensor(ang, dtype=torch.float32))[:, 0].double().numpy()
    s_model = op.eigenfunctions(np.concatenate(feats)).real[:, 1]
    file_err = float(np.abs(s_file - s_model).max() / max(np.ptp(s_model), 1e-300))
    phi_all = np.concatenate([t.phi for t in trajs])
    return {
        "path": path,
        "positions_path": positions_path,
        "cv": cv,
        "eigenvalue_1": float(op.eig()[1].real),
        "timescale_1_ps": float(op.implied_timescales()[1]),
        "file_vs_model_rel": file_err,
        "train_ns": float(len(phi_all) * frame / 1000.0),
        "train_frames_in_c7ax": float(np.mean((phi_all > 0) & (phi_all < 120))),
        "train_transitions": int(sum(transitions(t.phi, cfg) for t in trajs)),
        "seconds": {"simulate": t_sim, "fit": time.perf_counter() - t0 - t_sim},
        "train_phi": phi_all,
        "train_psi": np.concatenate([t.psi for t in trajs]),
        "train_s": s_file,
    }


def torsion_atoms() -> tuple[list[int], list[int]]:
    """0-based indices (all 22 atoms) of the phi and psi atoms of the packaged PDB."""
    from openmm import app

    from dpnets.systems.alanine import PHI_ATOMS, PSI_ATOMS, pdb_path

    top = app.PDBFile(str(pdb_path())).topology
    heavy = [a.index for a in top.atoms() if a.element.atomic_number > 1]
    return [heavy[i] for i in PHI_ATOMS], [heavy[i] for i in PSI_ATOMS]


def simulate_metadynamics(
    cfg: dict[str, Any], seed: int, steps: int, meta_cfg: dict[str, Any] | None, progress: bool
) -> dict[str, Any]:
    """One run from the PDB's C7eq structure (minimised, ``equilibration_ps`` unbiased):
    plain, or metadynamics for ``build`` steps then the static final bias. Returns phi, psi
    (degrees) of every saved frame, and for metadynamics the engine's CV and bias energy."""
    import openmm
    from openmm import app, unit

    from dpnets.systems.alanine import PHI_ATOMS, PSI_ATOMS, build_simulation, dihedral

    holder: dict[str, Any] = {}

    def prepare(system: Any) -> None:
        if meta_cfg is None:
            return
        holder["meta"] = app.Metadynamics(
            system,
            [meta_cfg["variable"]],
            float(cfg["temperature"]) * unit.kelvin,
            float(cfg["bias_factor"]),
            float(cfg["height_kj"]) * unit.kilojoule_per_mole,
            int(cfg["pace_steps"]),
        )
        holder["group"] = system.getForce(system.getNumForces() - 1).getForceGroup()

    t0 = time.perf_counter()
    sim, heavy = build_simulation(
        temperature=float(cfg["temperature"]),
        timestep_fs=float(cfg["timestep_fs"]),
        friction_per_ps=float(cfg["friction_per_ps"]),
        solvent=cfg["solvent"],
        seed=seed,
        platform=cfg["platform"],
        threads=1,
        prepare=prepare,
    )
    openmm.LocalEnergyMinimizer.minimize(sim.context, 10.0, 1000)
    sim.context.setVelocitiesToTemperature(float(cfg["temperature"]) * unit.kelvin, seed + 1)
    sim.step(int(round(float(cfg["equilibration_ps"]) * 1000.0 / float(cfg["timestep_fs"]))))
    per_save = int(round(float(cfg["save_ps"]) * 1000.0 / float(cfg["timestep_fs"])))
    n_save = steps // per_save
    build = 0 if meta_cfg is None else int(meta_cfg["build_steps"]) // per_save
    meta = holder.get("meta")
    pos = np.empty((n_save, len(heavy), 3))
    s = np.full(n_save, np.nan)
    v = np.zeros(n_save)
    report = max(n_save // 10, 1)
    for i in range(n_save):
        if meta is not None and i < build:
            meta.step(sim, per_save)  # deposits a Gaussian every pace_steps
        else:
            sim.step(per_save)  # unbiased, or the final bias kept static
        state = sim.context.getState(getPositions=True)
        pos[i] = state.getPositions(asNumpy=True).value_in_unit(unit.nanometer)[heavy]
        if meta is not None:
            s[i] = meta.getCollectiveVariables(sim)[0]
            e = sim.context.getState(getEnergy=True, groups={holder["group"]})
            v[i] = e.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        if progress and (i + 1) % report == 0:
            kind = "metadynamics" if meta is not None else "unbiased"
            print(f"{kind}: {i + 1}/{n_save} frames, {time.perf_counter() - t0:.0f} s")
    out = {
        "phi": dihedral(pos, PHI_ATOMS),
        "psi": dihedral(pos, PSI_ATOMS),
        "s": s,
        "bias_kj": v,
        "first_prod": build,
        "seconds": time.perf_counter() - t0,
    }
    if meta is not None:
        var = meta_cfg["variable"]
        out["bias_grid"] = np.linspace(var.minValue, var.maxValue, var.gridWidth)
        fe = meta.getFreeEnergy().value_in_unit(unit.kilojoule_per_mole)
        out["bias_final_kj"] = -fe * (float(cfg["bias_factor"]) - 1.0) / float(cfg["bias_factor"])
    return out


def _fes_error(est: np.ndarray, ref: np.ndarray, window: float) -> tuple[float, list[float]]:
    """Largest ``|est - ref|`` where ``ref - min(ref) <= window`` after the Boltzmann-weighted
    alignment; ``inf`` if ``est`` misses a cell there. Also the (phi, psi, F_ref) of it."""
    region = np.isfinite(ref) & (ref - ref[np.isfinite(ref)].min() <= window)
    if (region & ~np.isfinite(est)).any():
        return float("inf"), []
    p = np.exp(-ref[region])
    diff = est[region] - ref[region]
    shift = float((p * diff).sum() / p.sum())
    k = int(np.argmax(np.abs(diff - shift)))
    i, j = np.argwhere(region)[k]
    width = 360.0 / ref.shape[0]
    where = [-180.0 + (i + 0.5) * width, -180.0 + (j + 0.5) * width]
    return float(np.abs(diff - shift)[k]), where + [float(ref[i, j] - ref[region].min())]


def _fes_error_visited(est: np.ndarray, ref: np.ndarray, window: float) -> tuple[float, list]:
    """:func:`_fes_error` over the window's cells that ``est`` visited, and the (phi, psi,
    F_ref) of the cells it missed."""
    region = np.isfinite(ref) & (ref - ref[np.isfinite(ref)].min() <= window)
    missed = region & ~np.isfinite(est)
    width = 360.0 / ref.shape[0]
    fmin = ref[region].min()
    where = [
        [-180.0 + (i + 0.5) * width, -180.0 + (j + 0.5) * width, float(ref[i, j] - fmin)]
        for i, j in np.argwhere(missed)
    ]
    keep = region & ~missed
    if not keep.any():
        return float("inf"), where
    p = np.exp(-ref[keep])
    diff = est[keep] - ref[keep]
    shift = float((p * diff).sum() / p.sum())
    return float(np.abs(diff - shift).max()), where


def _delta_g_kT(phi: np.ndarray, weights: np.ndarray) -> float:
    b = (phi > 0.0) & (phi < 120.0)
    pb, pa = float(weights[b].sum()), float(weights[~b].sum())
    return float(-np.log(pb / pa)) if pb > 0 and pa > 0 else float("nan")


def _require_openmm_torch() -> Any:
    """OpenMM-Torch's ``TorchForce``, or one ImportError saying how to get it."""
    try:
        from openmmtorch import TorchForce
    except ImportError as err:
        raise ImportError(
            "engine='openmm-torch' needs OpenMM-Torch (its CPU wheel acellera-openmmtorch-cpu "
            "1.10 needs torch < 2.13: benchmarks/openmm_torch_side_env.sh builds such an "
            "environment)"
        ) from err
    return TorchForce


def _torch_force(fit: dict[str, Any], out: Path, seed: int, n_grid: int) -> tuple[Any, Any]:
    """The positions-in file as an OpenMM-Torch ``TorchForce`` (the network at every step),
    and the file's values on the (phi, psi) grid (the CV's range, as the table gives it)."""
    from dpnets.engines import openmm_torch_cv

    TorchForce = _require_openmm_torch()
    wrapped = openmm_torch_cv(fit["positions_path"], out / f"cv_seed{seed}_openmm.pt")
    g = np.linspace(-np.pi, np.pi, n_grid)
    ga, gb = np.meshgrid(g, g, indexing="ij")
    with torch.no_grad():
        grid = fit["cv"](torch.tensor(np.stack([ga.ravel(), gb.ravel()], 1)))[:, 0].numpy()
    return TorchForce(str(wrapped)), grid


def _one_seed(
    seed: int, cfg: dict[str, Any], ref: dict[str, Any], out: Path, progress: bool
) -> dict[str, Any]:
    from openmm import app

    from dpnets.engines import openmm_torsion_cv

    kT = R_KJ * float(cfg["temperature"])
    fit = _fit_cv(seed, cfg, out, progress)
    phi_atoms, psi_atoms = torsion_atoms()
    if cfg.get("engine", "tabulated") == "openmm-torch":
        force, table = _torch_force(fit, out, seed, int(cfg["n_grid"]))
        interp = 0.0  # the network itself at every step
    else:
        force, interp = openmm_torsion_cv(fit["path"], [phi_atoms, psi_atoms], n_grid=cfg["n_grid"])
        table = np.asarray(force.getTabulatedFunction(0).getFunctionParameters()[2])
    lo, hi = float(table.min()), float(table.max())
    pad = 0.05 * (hi - lo)
    sigma = float(cfg["sigma_fraction"]) * (hi - lo)
    variable = app.BiasVariable(force, lo - pad, hi + pad, sigma, False)
    steps_per_ps = 1000.0 / float(cfg["timestep_fs"])
    build_steps = int(round(float(cfg["build_ps"]) * steps_per_ps))
    total = build_steps + int(round(float(cfg["prod_ps"]) * steps_per_ps))
    run_seed = int(cfg["run_seed0"]) + seed
    biased = simulate_metadynamics(
        cfg, run_seed, total, {"variable": variable, "build_steps": build_steps}, progress
    )
    free = simulate_metadynamics(cfg, run_seed, total, None, progress)
    # the engine's CV at every saved frame against the TorchScript file at its torsions
    ang = np.deg2rad(np.stack([biased["phi"], biased["psi"]], 1))
    with torch.no_grad():
        s_file = fit["cv"](torch.tensor(ang, dtype=torch.float32))[:, 0].double().numpy()
    engine_err = float(np.abs(biased["s"] - s_file).max() / (hi - lo))
    ns = total / steps_per_ps / 1000.0
    n_free, n_bias = transitions(free["phi"], cfg), transitions(biased["phi"], cfg)
    n_bias_prod = transitions(biased["phi"][biased["first_prod"] :], cfg)
    lower = n_free == 0
    ratio = n_bias / max(n_free, 1)
    # reweighting of the static-bias production frames with exp(V / kT)
    first = int(biased["first_prod"])
    v = biased["bias_kj"][first:]
    w = np.exp((v - v.max()) / kT)
    phi_p, psi_p = biased["phi"][first:], biased["psi"][first:]
    fes_meta = _fes(phi_p, psi_p, w, cfg)
    fes_free = _fes(free["phi"], free["psi"], np.ones(len(free["phi"])), cfg)
    window = float(cfg["fes_window_kT"])
    err, where = _fes_error(fes_meta, ref["fes"], window)
    err_own, _ = _fes_error(fes_meta, ref["fes_own_ratio"], window)
    err_free, _ = _fes_error(fes_free, ref["fes"], window)
    err_visited, missed = _fes_error_visited(fes_meta, ref["fes"], window)
    dg_meta = _delta_g_kT(phi_p, w)
    dg_ref = ref["delta_g_used_kcal"] / (kT / 4.184)
    result = {
        "seed": seed,
        "cv": {
            "eigenvalue_1": fit["eigenvalue_1"],
            "timescale_1_ps": fit["timescale_1_ps"],
            "file_vs_model_max_rel_error": fit["file_vs_model_rel"],
            "table_interpolation_rel_error": interp,
            "engine_vs_file_max_rel_error": engine_err,
            "range": [lo, hi],
            "sigma": sigma,
            "train_ns": fit["train_ns"],
            "train_frames_in_c7ax": fit["train_frames_in_c7ax"],
            "train_transitions": fit["train_transitions"],
        },
        "ns_each": ns,
        "transitions_unbiased": n_free,
        "transitions_biased": n_bias,
        "transitions_biased_production": n_bias_prod,
        "rate_unbiased_per_ns": n_free / ns,
        "rate_biased_per_ns": n_bias / ns,
        "transition_rate_ratio": ratio,
        "transition_rate_ratio_is_lower_bound": lower,
        "fes_max_error_kT": err,
        "fes_max_error_at_phi_psi_Fref": where,
        "fes_max_error_kT_visited_cells": err_visited,
        "fes_cells_missed_phi_psi_Fref": missed,
        "fes_max_error_kT_subset_own_basin_ratio": err_own,
        "fes_max_error_kT_unbiased_same_length": err_free,
        "delta_g_kT_reweighted": dg_meta,
        "delta_g_kT_reference": dg_ref,
        "delta_g_kT_reference_subset": ref["delta_g_subset_kcal"] / (kT / 4.184),
        "fes_reweighted_kT": _nullable(fes_meta),
        "fes_unbiased_kT": _nullable(fes_free),
        "reweighting_ess": float(w.sum() ** 2 / (w**2).sum()),
        "production_frames": int(len(w)),
        "frames_in_c7ax_unbiased": float(np.mean((free["phi"] > 0) & (free["phi"] < 120))),
        "seconds": {**fit["seconds"], "metadynamics": biased["seconds"]},
    }
    result["seconds"]["unbiased"] = free["seconds"]
    result["speed_ps_per_s"] = {
        "metadynamics": 1000.0 * ns / biased["seconds"],
        "unbiased": 1000.0 * ns / free["seconds"],
    }
    if seed == 0:
        _figure(out, cfg, fit, biased, free, fes_meta, fes_free, ref)
    return result


def _figure(out, cfg, fit, biased, free, fes_meta, fes_free, ref) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - matplotlib missing
        return
    fig, axes = plt.subplots(2, 3, figsize=(14, 8), layout="constrained")
    e = _edges(cfg)
    g = np.linspace(-np.pi, np.pi, 121)
    ga, gb = np.meshgrid(g, g, indexing="ij")
    with torch.no_grad():
        x = torch.tensor(np.stack([ga.ravel(), gb.ravel()], 1), dtype=torch.float32)
        s = fit["cv"](x)[:, 0].numpy().reshape(ga.shape)
    ax = axes[0, 0]
    m = ax.contourf(np.degrees(ga), np.degrees(gb), s, levels=20, cmap="coolwarm")
    fig.colorbar(m, ax=ax, label="exported s = φ₁")
    ax.plot(fit["train_phi"][::5], fit["train_psi"][::5], ",", color="k", alpha=0.3)
    ax.set_title("learned slow mode (TorchScript file) and training frames")
    ax.set_xlabel("φ (deg)")
    ax.set_ylabel("ψ (deg)")
    dt_ns = float(cfg["save_ps"]) / 1000.0
    for ax, run, title in (
        (axes[0, 1], free, "unbiased run"),
        (axes[0, 2], biased, "metadynamics on s (OpenMM), build | static"),
    ):
        t = np.arange(len(run["phi"])) * dt_ns
        ax.plot(t, run["phi"], ",", color="C0")
        ax.axhspan(*cfg["core_b"], color="C1", alpha=0.15, lw=0)
        ax.set_xlabel("time (ns)")
        ax.set_ylabel("φ (deg)")
        ax.set_ylim(-180, 180)
        ax.set_title(title)
    axes[0, 2].axvline(biased["first_prod"] * dt_ns, color="k", ls=":", lw=1)
    vmax = 8.0
    fmin = float(ref["fes"][np.isfinite(ref["fes"])].min())
    for ax, f, title in (
        (axes[1, 0], ref["fes"], "reference F (kT)"),
        (axes[1, 1], fes_meta, "reweighted metadynamics F (kT)"),
    ):
        mask = np.isfinite(f)
        shift = fmin if f is ref["fes"] else float(f[mask].min())
        z = np.where(mask, np.clip(f - shift, 0, vmax), np.nan)
        m = ax.pcolormesh(e, e, z.T, cmap="viridis", vmin=0, vmax=vmax)
        fig.colorbar(m, ax=ax)
        ax.set_title(title)
        ax.set_xlabel("φ (deg)")
        ax.set_ylabel("ψ (deg)")
    ax = axes[1, 2]
    centers = 0.5 * (e[1:] + e[:-1])
    for f, label, style in (
        (ref["fes"], "reference", "k-"),
        (fes_meta, "reweighted metadynamics", "o"),
        (fes_free, "unbiased, same length", "s"),
    ):
        with np.errstate(divide="ignore", over="ignore"):
            f1 = -np.log(np.exp(-np.where(np.isfinite(f), f, np.inf)).sum(1))
        ok = np.isfinite(f1)
        ax.plot(centers[ok], f1[ok] - f1[ok].min(), style, ms=3, label=label)
    ax.set_xlabel("φ (deg)")
    ax.set_ylabel("F(φ) (kT)")
    ax.set_ylim(-0.5, 12)
    ax.set_title("free energy along φ")
    ax.legend(fontsize="small")
    fig.savefig(out / "enhanced_sampling_alanine.png", dpi=110)
    plt.close(fig)


def run(
    *,
    quick: bool = False,
    seeds: int | None = None,
    out: str | Path = Path("dpnets-out") / "enhanced-sampling-alanine",
    device: str | None = None,
    progress: bool = True,
    engine: str = "tabulated",
) -> str:
    """Fit on short runs, export the slowest mode, bias it in OpenMM, and compare.

    Parameters
    ----------
    quick : bool, default False
        A smoke test (:data:`QUICK`: picoseconds of simulation, a two-run reference; its
        numbers do not meet the goals).
    seeds : int, optional
        Independent repetitions (default 1): network seed and the seeds of the biased and
        unbiased runs (the training data and the reference are shared).
    out : path
        Output folder: ``results.json``, ``table.md``, ``enhanced_sampling_alanine.png`` and
        the exported ``cv_seed*.pt`` files.
    device : str, optional
        Ignored (CPU: the simulation is the cost; accepted for the common interface).
    progress : bool, default True
        Progress lines of the simulations and fits.
    engine : {"tabulated", "openmm-torch"}, default "tabulated"
        How OpenMM evaluates the CV: the file tabulated on a (phi, psi) grid
        (:func:`dpnets.engines.openmm_torsion_cv`, dpnets' own environment), or the network
        itself at every step, a file taking the 22 atoms' positions in an OpenMM-Torch
        ``TorchForce`` (needs ``openmmtorch``: a side environment,
        ``benchmarks/openmm_torch_side_env.sh``).

    Returns
    -------
    str
        The results table (markdown).
    """
    del device
    if engine not in ("tabulated", "openmm-torch"):
        raise ValueError(f"engine must be 'tabulated' or 'openmm-torch', got {engine!r}")
    if engine == "openmm-torch":
        _require_openmm_torch()  # before minutes of simulation and training, not after
    cfg = {**(QUICK if quick else CONFIG), "engine": engine}
    n_seeds = 1 if seeds is None else int(seeds)
    if n_seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    out = output_dir(out)
    t0 = time.perf_counter()
    with torch_threads(1):
        ref = _reference(cfg, progress)
        results = [_one_seed(s, cfg, ref, out, progress) for s in range(n_seeds)]
    wall = time.perf_counter() - t0
    ratio = [r["transition_rate_ratio"] for r in results]
    err = [r["fes_max_error_kT"] for r in results]
    bound = "≥ " if any(r["transition_rate_ratio_is_lower_bound"] for r in results) else ""
    r0 = results[0]
    table = markdown_table(
        ["metric", "value", "goal"],
        [
            ["transition_rate_ratio (biased / unbiased)", bound + mean_std(ratio), ">= 10"],
            ["fes_max_error_kT (2-D, 15° cells, F_ref <= 5 kT)", mean_std(err), "<= 1"],
            [
                "same, over the cells the metadynamics visited (cells missed)",
                f"{mean_std([r['fes_max_error_kT_visited_cells'] for r in results])} "
                f"({len(r0['fes_cells_missed_phi_psi_Fref'])})",
                "",
            ],
            [
                "same, reference with the subset's own basin ratio",
                mean_std([r["fes_max_error_kT_subset_own_basin_ratio"] for r in results]),
                "",
            ],
            [
                "same error, unbiased run of the same length",
                mean_std([r["fes_max_error_kT_unbiased_same_length"] for r in results]),
                "",
            ],
            [
                "ΔG C7ax − C7eq (kT): reweighted / reference",
                f"{mean_std([r['delta_g_kT_reweighted'] for r in results])} / "
                f"{r0['delta_g_kT_reference']:.3g}",
                "",
            ],
            [
                "transitions unbiased / biased (seed 0)",
                f"{r0['transitions_unbiased']} / {r0['transitions_biased']} in "
                f"{r0['ns_each']:g} ns each",
                "",
            ],
        ],
    )
    command = (
        "dpnets reproduce enhanced-sampling-alanine"
        + (" --quick" if quick else "")
        + (f" --seeds {n_seeds}" if seeds is not None else "")
    )
    payload = {
        "experiment": "enhanced-sampling/alanine_dipeptide",
        "mode": "quick" if quick else "full",
        "command": command,
        "config": cfg,
        "kT_kJ_per_mol": R_KJ * float(cfg["temperature"]),
        "reference": {k: v for k, v in ref.items() if k not in ("fes", "fes_own_ratio", "phi")},
        "reference_fes_kT": _nullable(ref["fes"]),
        "reference_fes_kT_subset_own_basin_ratio": _nullable(ref["fes_own_ratio"]),
        "transition_rate_ratio": float(np.mean(ratio)),
        "transition_rate_ratio_is_lower_bound": bool(bound),
        "fes_max_error_kT": float(np.mean(err)),
        "wall_s": wall,
        "per_seed": results,
    }
    write_results(out, table, json.loads(json.dumps(payload, default=_json_default)))
    return table


def _nullable(f: np.ndarray) -> list:
    """A free-energy array for JSON: ``None`` where it is infinite (an empty cell)."""
    return np.where(np.isfinite(f), f, None).tolist()


def _json_default(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
