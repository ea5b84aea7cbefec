"""A learned slow mode in OpenMM-Torch, as a user runs it (issue 33, items 2-3).

Alanine dipeptide in vacuum (amber14, 400 K, 2 fs, H-bond constraints): short unbiased runs,
``dpnets fit`` on the backbone dihedrals of a *heavy-atom* copy of the trajectories (10
atoms), ``dpnets export --input positions --topology`` the 22-atom engine PDB (float64 and
float32 files), then in OpenMM-Torch (``TorchForce``):

* values: the CV that OpenMM computes (the energy of the TorchForce's force group) against
  ``dpnets transform --eigenfunctions`` on the same frames, relative to the CV's range;
* forces: OpenMM's forces of the CV against central finite differences of OpenMM's energies;
* a ``TorchForce`` CV inside OpenMM's ``Metadynamics`` (``BiasVariable``) for a few thousand
  steps (the Metadynamics path: a TorchForce inside a CustomCVForce);
* MD throughput (ns/day) with and without the CV, Reference and CPU (one thread) platforms.

Runs where ``openmmtorch`` imports (its CPU wheel needs torch < 2.13: a side environment,
``benchmarks/openmm_torch_side_env.sh``); elsewhere it says so and exits 0.

    PYTHONPATH=src python benchmarks/bench_openmm_torch.py [--smoke]
        [--out benchmarks/results/openmm_torch]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore", category=DeprecationWarning)

TEMPERATURE = 400.0


def simulate(work: Path, n_runs: int, n_frames: int, stride: int, seed: int = 0) -> None:
    """``full.dcd`` (22 atoms) and ``heavy.dcd``/``heavy.pdb`` (10 heavy atoms)."""
    import mdtraj as md
    import openmm
    from openmm import app, unit

    from dpnets.systems.alanine import pdb_path

    pdb = app.PDBFile(str(pdb_path()))
    system = app.ForceField("amber14-all.xml").createSystem(
        pdb.topology, nonbondedMethod=app.NoCutoff, constraints=app.HBonds
    )
    frames = []
    for run in range(n_runs):
        integ = openmm.LangevinMiddleIntegrator(TEMPERATURE, 1.0, 0.002)
        integ.setRandomNumberSeed(seed + run + 1)
        plat = openmm.Platform.getPlatformByName("Reference")
        sim = app.Simulation(pdb.topology, system, integ, plat)
        sim.context.setPositions(pdb.positions)
        sim.context.setVelocitiesToTemperature(TEMPERATURE, seed + run + 1)
        sim.step(500)
        xyz = np.empty((n_frames, pdb.topology.getNumAtoms(), 3), dtype=np.float32)
        for i in range(n_frames):
            sim.step(stride)
            pos = sim.context.getState(getPositions=True).getPositions(asNumpy=True)
            xyz[i] = pos.value_in_unit(unit.nanometer)
        frames.append(xyz)
    top = md.load_topology(str(pdb_path()))
    traj = md.Trajectory(np.concatenate(frames), top)
    traj.save_dcd(str(work / "full.dcd"))
    heavy = traj.atom_slice(top.select("not element H"))
    heavy[0].save_pdb(str(work / "heavy.pdb"))
    heavy.save_dcd(str(work / "heavy.dcd"))


def cv_context(model: Path, platform_name: str, masses: list[float]):
    import openmm
    from openmmtorch import TorchForce

    system = openmm.System()
    for m in masses:
        system.addParticle(m)
    force = TorchForce(str(model))
    force.setForceGroup(1)
    system.addForce(force)
    props = {"Threads": "1"} if platform_name == "CPU" else {}
    plat = openmm.Platform.getPlatformByName(platform_name)
    return openmm.Context(system, openmm.VerletIntegrator(0.001), plat, props)


def energy(ctx, xyz: np.ndarray) -> float:
    ctx.setPositions(xyz)
    return ctx.getState(getEnergy=True, groups={1}).getPotentialEnergy()._value


def check_values_and_forces(work: Path, ref: np.ndarray, n_fd: int) -> dict:
    import mdtraj as md
    import openmm  # noqa: F401

    from dpnets.engines import openmm_torch_cv
    from dpnets.systems.alanine import pdb_path

    full = md.load(str(work / "full.dcd"), top=str(pdb_path()))
    masses = [a.element.mass for a in full.topology.atoms]
    span = float(np.ptp(ref))
    out: dict = {"cv_range": span, "frames": int(len(full))}
    for name in ("cv64", "cv32"):
        openmm_torch_cv(work / f"{name}.pt", work / f"{name}_openmm.pt")  # the scalar
        for plat in ("Reference", "CPU"):
            ctx = cv_context(work / f"{name}_openmm.pt", plat, masses)
            got = np.array([energy(ctx, full.xyz[i].astype(np.float64)) for i in range(len(full))])
            out[f"{name} {plat}: max |CV - transform| / range"] = float(
                np.abs(got - ref).max() / span
            )
            if name == "cv64":
                errs = []
                h = 1e-5
                for i in np.linspace(0, len(full) - 1, n_fd).astype(int):
                    x = full.xyz[i].astype(np.float64)
                    ctx.setPositions(x)
                    f = ctx.getState(getForces=True, groups={1}).getForces(asNumpy=True)._value
                    fd = np.zeros_like(x)
                    for a in range(x.shape[0]):
                        for k in range(3):
                            e = np.zeros_like(x)
                            e[a, k] = h
                            fd[a, k] = -(energy(ctx, x + e) - energy(ctx, x - e)) / (2 * h)
                    errs.append(np.abs(f - fd).max() / np.abs(fd).max())
                out[f"{name} {plat}: max |F - finite differences| / max |F|"] = float(max(errs))
    return out


def amber_system():
    from openmm import app

    from dpnets.systems.alanine import pdb_path

    pdb = app.PDBFile(str(pdb_path()))
    system = app.ForceField("amber14-all.xml").createSystem(
        pdb.topology, nonbondedMethod=app.NoCutoff, constraints=app.HBonds
    )
    return pdb, system


def metadynamics(work: Path, ref: np.ndarray, steps: int) -> dict:
    import openmm
    import torch
    from openmm import app, unit
    from openmmtorch import TorchForce

    pdb, system = amber_system()
    cv = TorchForce(str(work / "cv64_openmm.pt"))
    lo, hi = float(ref.min()) - 0.5, float(ref.max()) + 0.5
    bias = app.BiasVariable(cv, lo, hi, 0.05, False, 200)
    meta = app.Metadynamics(
        system, [bias], TEMPERATURE * unit.kelvin, 8.0, 1.0 * unit.kilojoule_per_mole, 100
    )
    integ = openmm.LangevinMiddleIntegrator(TEMPERATURE, 1.0, 0.002)
    integ.setRandomNumberSeed(7)
    plat = openmm.Platform.getPlatformByName("CPU")
    sim = app.Simulation(pdb.topology, system, integ, plat, {"Threads": "1"})
    sim.context.setPositions(pdb.positions)
    t0 = time.perf_counter()
    meta.step(sim, steps)
    seconds = time.perf_counter() - t0
    fes = meta.getFreeEnergy().value_in_unit(unit.kilojoule_per_mole)
    s_engine = float(meta.getCollectiveVariables(sim)[0])
    pos = sim.context.getState(getPositions=True).getPositions(asNumpy=True)
    s_file = float(
        torch.jit.load(str(work / "cv64.pt"))(torch.tensor(pos.value_in_unit(unit.nanometer)))[0]
    )
    return {
        "steps": steps,
        "seconds": seconds,
        "hills_deposited": steps // 100,
        "free_energy_range_kJ_mol": float(np.ptp(fes)),
        "cv_engine_minus_file_at_end": abs(s_engine - s_file),
    }


class _Trivial:
    """A trivial TorchScript energy (sum of squared positions): OpenMM-Torch's own cost."""

    @staticmethod
    def save(out: Path) -> None:
        import torch

        class Trivial(torch.nn.Module):
            def forward(self, positions: torch.Tensor) -> torch.Tensor:
                return (positions * positions).sum()

        torch.jit.script(Trivial()).save(str(out))


def throughput(work: Path, steps: dict, rounds: int) -> list[dict]:
    """ns/day of each (platform, CV) set-up: interleaved rounds, the best of each (a shared
    machine's load only slows a run down)."""
    import openmm
    from openmm import app
    from openmmtorch import TorchForce

    _Trivial.save(work / "trivial_openmm.pt")
    sims = {}
    for plat_name in ("Reference", "CPU"):
        for cv in (None, "trivial", "cv32", "cv64"):
            pdb, system = amber_system()
            if cv is not None:  # the CV as a (linear) bias: its cost is the bias's cost
                system.addForce(TorchForce(str(work / f"{cv}_openmm.pt")))
            integ = openmm.LangevinMiddleIntegrator(TEMPERATURE, 1.0, 0.002)
            props = {"Threads": "1"} if plat_name == "CPU" else {}
            plat = openmm.Platform.getPlatformByName(plat_name)
            sim = app.Simulation(pdb.topology, system, integ, plat, props)
            sim.context.setPositions(pdb.positions)
            sim.step(20)
            sims[(plat_name, cv)] = sim
    best: dict = {k: 0.0 for k in sims}
    for _ in range(rounds):
        for key, sim in sims.items():
            n = steps["plain" if key[1] is None else "cv"]
            t0 = time.perf_counter()
            sim.step(n)
            sec = time.perf_counter() - t0
            best[key] = max(best[key], n * 0.002e-3 / sec * 86400)
    return [
        {
            "platform": plat + (" (1 thread)" if plat == "CPU" else ""),
            "cv": cv or "none",
            "steps": steps["plain" if cv is None else "cv"],
            "rounds": rounds,
            "ns_per_day": v,
        }
        for (plat, cv), v in best.items()
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny: seconds, no file written")
    ap.add_argument("--out", default="benchmarks/results/openmm_torch")
    args = ap.parse_args()
    try:
        import openmm
        import openmmtorch  # noqa: F401
    except ImportError:
        print(
            "openmmtorch is not importable here (its CPU wheel needs torch < 2.13): run "
            "benchmarks/openmm_torch_side_env.sh; nothing measured"
        )
        return
    import torch

    from dpnets.cli import main as dpnets

    torch.set_num_threads(1)
    if args.smoke:
        runs, frames, stride, epochs, n_fd, meta_steps, rounds = 1, 60, 50, 1, 1, 200, 1
        steps = {"plain": 200, "cv": 50}
    else:
        runs, frames, stride, epochs, n_fd, meta_steps, rounds = 4, 500, 250, 30, 3, 4000, 5
        steps = {"plain": 10000, "cv": 2000}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        simulate(work, runs, frames, stride)
        cwd = os.getcwd()
        os.chdir(work)
        try:
            fit = ["fit", "heavy.dcd", "--topology", "heavy.pdb", "--features", "dihedrals"]
            fit += ["--lag", "4", "--epochs", str(epochs), "--dim", "3", "--out", "fit"]
            assert dpnets([*fit, "--quiet"]) == 0
            from dpnets.systems.alanine import pdb_path

            for name, extra in (("cv64", ["--double"]), ("cv32", [])):
                ex = ["export", "fit", "--input", "positions", "--topology", str(pdb_path())]
                assert dpnets([*ex, *extra, "--out", f"{name}.pt"]) == 0
            tr = ["transform", "fit", "heavy.dcd", "--eigenfunctions", "--out", "ef.npy"]
            assert dpnets(tr) == 0
        finally:
            os.chdir(cwd)
        ref = np.real(np.load(work / "ef.npy")[:, 1])  # the file exports real parts
        result = {
            "versions": {
                "torch": torch.__version__,
                "openmm": openmm.__version__,
                "openmmtorch": _version("acellera-openmmtorch-cpu"),
                "python": platform.python_version(),
            },
            "system": "alanine dipeptide in vacuum, amber14, 400 K, 2 fs, HBonds constraints",
            "fit": f"{runs} runs x {frames} frames every {stride * 0.002:.2f} ps; dpnets fit "
            "--features dihedrals on the 10-atom heavy-atom topology; exported with --input "
            "positions --topology (22-atom engine PDB)",
            "setup_seconds": time.perf_counter() - t0,
            "values_and_forces": check_values_and_forces(work, ref, n_fd),
            "metadynamics": metadynamics(work, ref, meta_steps),
            "throughput": throughput(work, steps, rounds),
        }
    print(json.dumps(result, indent=1))
    if args.smoke:
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "openmm_torch.json").write_text(json.dumps(result, indent=1))
    lines = [
        f"OpenMM-Torch {result['versions']['openmmtorch']}, openmm "
        f"{result['versions']['openmm']}, torch {result['versions']['torch']}; alanine "
        "dipeptide in vacuum, 2 fs; best of interleaved rounds on a shared 2-core VM. "
        "trivial: a TorchScript energy sum(x^2) (OpenMM-Torch's own cost per step); cv32 / "
        "cv64: the positions-in slow mode (float32 / float64 file).",
        "",
        "| platform | CV | ns/day |",
        "|---|---|---|",
        *[
            f"| {r['platform']} | {r['cv']} | {r['ns_per_day']:,.0f} |"
            for r in result["throughput"]
        ],
    ]
    (out / "throughput.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
