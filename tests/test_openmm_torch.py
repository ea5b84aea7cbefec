"""The exported slow mode inside OpenMM-Torch (issue 33, item 3).

Runs where ``openmmtorch`` imports (OpenMM-Torch 1.10's CPU wheel needs torch < 2.13: the side
environment of ``benchmarks/openmm_torch_side_env.sh``) and skips elsewhere. A dihedral fit
on a heavy-atom topology, exported with ``--input positions --topology`` the 22-atom engine
PDB, gives in OpenMM-Torch the CV of ``dpnets transform`` on the same frames, forces equal to
finite differences of OpenMM's energies, and runs inside OpenMM's ``Metadynamics``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

openmm = pytest.importorskip("openmm")
pytest.importorskip("openmmtorch")
md = pytest.importorskip("mdtraj")
torch = pytest.importorskip("torch")

from openmm import app, unit  # noqa: E402
from openmmtorch import TorchForce  # noqa: E402

from dpnets.cli import main  # noqa: E402
from dpnets.engines import openmm_torch_cv  # noqa: E402
from dpnets.systems.alanine import pdb_path  # noqa: E402

T = 400.0


def _system():
    pdb = app.PDBFile(str(pdb_path()))
    system = app.ForceField("amber14-all.xml").createSystem(
        pdb.topology, nonbondedMethod=app.NoCutoff, constraints=app.HBonds
    )
    return pdb, system


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Short OpenMM runs, a heavy-atom dihedral fit, the float64 positions-in export."""
    work = tmp_path_factory.mktemp("omm")
    pdb, system = _system()
    integ = openmm.LangevinMiddleIntegrator(T, 1.0, 0.002)
    integ.setRandomNumberSeed(3)
    sim = app.Simulation(
        pdb.topology, system, integ, openmm.Platform.getPlatformByName("Reference")
    )
    sim.context.setPositions(pdb.positions)
    sim.context.setVelocitiesToTemperature(T, 3)
    xyz = []
    for _ in range(300):
        sim.step(25)
        pos = sim.context.getState(getPositions=True).getPositions(asNumpy=True)
        xyz.append(pos.value_in_unit(unit.nanometer))
    top = md.load_topology(str(pdb_path()))
    traj = md.Trajectory(np.array(xyz, dtype=np.float32), top)
    traj.save_dcd(str(work / "full.dcd"))
    heavy = traj.atom_slice(top.select("not element H"))
    heavy[0].save_pdb(str(work / "heavy.pdb"))
    heavy.save_dcd(str(work / "heavy.dcd"))
    cwd = os.getcwd()
    os.chdir(work)
    try:
        fit = ["fit", "heavy.dcd", "--topology", "heavy.pdb", "--features", "dihedrals"]
        assert (
            main([*fit, "--lag", "2", "--epochs", "3", "--dim", "2", "--out", "fit", "--quiet"])
            == 0
        )
        ex = ["export", "fit", "--input", "positions", "--topology", str(pdb_path()), "--double"]
        assert main([*ex, "--out", "cv.pt"]) == 0
        tr = ["transform", "fit", "heavy.dcd", "--eigenfunctions", "--out", "ef.npy"]
        assert main(tr) == 0
    finally:
        os.chdir(cwd)

    openmm_torch_cv(work / "cv.pt")  # the recipe's wrapper: one mode as a scalar
    ref = np.real(np.load(work / "ef.npy")[:, 1])
    return work, traj.xyz.astype(np.float64), ref


def _context(path: Path, platform: str, n: int, outputs_forces: bool = False, cv: bool = False):
    system = openmm.System()
    for _ in range(n):
        system.addParticle(12.0)
    force = TorchForce(str(path))
    force.setOutputsForces(outputs_forces)
    if cv:  # inside a CustomCVForce (the Metadynamics path), as 2 s
        force = _twice(force)
    force.setForceGroup(1)
    system.addForce(force)
    props = {"Threads": "1"} if platform == "CPU" else {}
    return openmm.Context(
        system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName(platform), props
    )


def _twice(force):
    out = openmm.CustomCVForce("2 * s")
    out.addCollectiveVariable("s", force)
    return out


def _energy(ctx, x: np.ndarray) -> float:
    ctx.setPositions(x)
    return ctx.getState(getEnergy=True, groups={1}).getPotentialEnergy()._value


@pytest.mark.parametrize("platform", ["Reference", "CPU"])
def test_values_and_forces_in_openmm_torch(exported, platform):
    work, xyz, ref = exported
    ctx = _context(work / "cv_openmm.pt", platform, xyz.shape[1])
    got = np.array([_energy(ctx, x) for x in xyz[::5]])
    span = np.ptp(ref)
    # float32 features of the fit (mdtraj) against float64 torsions inside: measured ~4e-7
    assert np.abs(got - ref[::5]).max() / span < 1e-5
    h = 1e-5
    for i in (0, 150):
        x = xyz[i]
        ctx.setPositions(x)
        f = ctx.getState(getForces=True, groups={1}).getForces(asNumpy=True)._value
        fd = np.zeros_like(x)
        for a in range(x.shape[0]):
            for k in range(3):
                e = np.zeros_like(x)
                e[a, k] = h
                fd[a, k] = -(_energy(ctx, x + e) - _energy(ctx, x - e)) / (2 * h)
        assert np.abs(f - fd).max() < 1e-6 * np.abs(fd).max()  # measured ~3e-8


def test_torchforce_cv_in_openmm_metadynamics(exported):
    work, _, ref = exported
    pdb, system = _system()
    cv = TorchForce(str(work / "cv_openmm.pt"))
    bias = app.BiasVariable(cv, float(ref.min()) - 0.5, float(ref.max()) + 0.5, 0.05, False, 100)
    meta = app.Metadynamics(
        system, [bias], T * unit.kelvin, 8.0, 1.0 * unit.kilojoule_per_mole, 100
    )
    integ = openmm.LangevinMiddleIntegrator(T, 1.0, 0.002)
    integ.setRandomNumberSeed(5)
    sim = app.Simulation(
        pdb.topology, system, integ, openmm.Platform.getPlatformByName("CPU"), {"Threads": "1"}
    )
    sim.context.setPositions(pdb.positions)
    meta.step(sim, 2000)
    fes = meta.getFreeEnergy().value_in_unit(unit.kilojoule_per_mole)
    assert np.ptp(fes) > 0  # hills were deposited on the CV
    pos = sim.context.getState(getPositions=True).getPositions(asNumpy=True)
    s_file = float(torch.jit.load(str(work / "cv.pt"))(torch.tensor(pos._value))[0])
    assert abs(meta.getCollectiveVariables(sim)[0] - s_file) < 1e-6 * np.ptp(ref)


def test_periodic_box_from_openmm_torch(exported):
    """With ``setUsesPeriodicBoundaryConditions(True)`` OpenMM-Torch passes the box vectors:
    atoms moved by whole (triclinic) box vectors give the CV of the whole molecule."""
    work, xyz, _ = exported
    a, b, c = [2.0, 0.0, 0.0], [0.5, 2.2, 0.0], [-0.4, 0.7, 2.6]  # OpenMM's reduced form
    system = openmm.System()
    system.setDefaultPeriodicBoxVectors(
        openmm.Vec3(*a) * unit.nanometer,
        openmm.Vec3(*b) * unit.nanometer,
        openmm.Vec3(*c) * unit.nanometer,
    )
    for _ in range(xyz.shape[1]):
        system.addParticle(12.0)
    force = TorchForce(str(work / "cv_openmm.pt"))
    force.setUsesPeriodicBoundaryConditions(True)
    force.setForceGroup(1)
    system.addForce(force)
    ctx = openmm.Context(
        system, openmm.VerletIntegrator(0.001), openmm.Platform.getPlatformByName("Reference")
    )
    whole = _context(work / "cv_openmm.pt", "Reference", xyz.shape[1])
    box = np.array([a, b, c])
    rng = np.random.default_rng(0)
    for i in (0, 100, 200):
        moved = xyz[i] + rng.integers(-1, 2, size=(xyz.shape[1], 3)) @ box
        assert abs(_energy(ctx, moved) - _energy(whole, xyz[i])) < 1e-9
        assert abs(_energy(whole, moved) - _energy(whole, xyz[i])) > 1e-4  # the box matters


def test_enhanced_sampling_alanine_openmm_torch_mode(tmp_path):
    """``enhanced_sampling_alanine.run(engine="openmm-torch")``: the network itself in the
    biased run (a TorchForce on the 22 positions), equal to the file at every saved frame."""
    pytest.importorskip("deeptime")
    import json

    from dpnets.experiments import enhanced_sampling_alanine as esa

    esa.run(quick=True, engine="openmm-torch", out=tmp_path, progress=False)
    res = json.loads((tmp_path / "results.json").read_text())
    cv = res["per_seed"][0]["cv"]
    assert res["config"]["engine"] == "openmm-torch"
    assert cv["table_interpolation_rel_error"] == 0.0
    assert cv["engine_vs_file_max_rel_error"] < 1e-5  # measured 1.9e-7 (tabulated: 3e-4)


@pytest.mark.parametrize("platform", ["Reference", "CPU"])
@pytest.mark.parametrize("cv", [False, True])
def test_forces_output_torchforce_equals_the_autograd_one(exported, platform, cv):
    """``openmm_torch_cv(forces=True)`` with ``setOutputsForces(True)``: the CV and the
    forces computed without autograd, equal to those of the autograd scalar's TorchForce,
    alone and inside a ``CustomCVForce``."""
    work, xyz, _ = exported
    path = openmm_torch_cv(work / "cv.pt", forces=True)
    assert path.name == "cv_openmm_forces.pt"
    auto = _context(work / "cv_openmm.pt", platform, xyz.shape[1], cv=cv)
    hand = _context(path, platform, xyz.shape[1], outputs_forces=True, cv=cv)
    for x in xyz[::50]:
        got = []
        for ctx in (auto, hand):
            ctx.setPositions(x)
            state = ctx.getState(getEnergy=True, getForces=True, groups={1})
            f = state.getForces(asNumpy=True)._value
            got.append((state.getPotentialEnergy()._value, f))
        (e0, f0), (e1, f1) = got
        assert abs(e1 - e0) < 1e-10 * max(1.0, abs(e0))
        assert np.abs(f1 - f0).max() < 1e-9 * np.abs(f0).max()


@pytest.mark.parametrize("platform", ["Reference", "CPU"])
def test_forces_output_of_an_unfused_map_equals_the_autograd_one(exported, platform, monkeypatch):
    """A torsion map not fused with the encoder (a fusing limit of 0 here, as a protein's
    torsions are): ``forces=True`` takes the features' local Jacobians; same energies and
    forces in OpenMM as the autograd scalar of the same file."""
    import sys

    work, xyz, _ = exported
    monkeypatch.setattr(sys.modules["dpnets.export"], "_FUSED_ENTRIES", 0)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        ex = ["export", "fit", "--input", "positions", "--topology", str(pdb_path()), "--double"]
        assert main([*ex, "--out", "local.pt"]) == 0
    finally:
        os.chdir(cwd)
    auto = _context(openmm_torch_cv(work / "local.pt"), platform, xyz.shape[1])
    path = openmm_torch_cv(work / "local.pt", forces=True)
    hand = _context(path, platform, xyz.shape[1], outputs_forces=True)
    for x in xyz[::50]:
        got = []
        for ctx in (auto, hand):
            ctx.setPositions(x)
            state = ctx.getState(getEnergy=True, getForces=True, groups={1})
            got.append((state.getPotentialEnergy()._value, state.getForces(asNumpy=True)._value))
        (e0, f0), (e1, f1) = got
        assert abs(e1 - e0) < 1e-10 * max(1.0, abs(e0))
        assert np.abs(f0).max() > 0
        assert np.abs(f1 - f0).max() < 1e-9 * np.abs(f0).max()
