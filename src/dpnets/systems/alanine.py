r"""Alanine dipeptide (Ace-Ala-NMe) simulated with OpenMM, and its Markov-state-model reference.

This is the molecular-kinetics experiment that stands in for the paper's Chignolin study
(Sec. 5, Table 2, App. F): the Chignolin data (D. E. Shaw Research) is not public, so we
simulate the standard benchmark of the field ourselves.

Simulation (:func:`simulate_alanine_dipeptide`)
    The 22-atom structure ``data/alanine-dipeptide.pdb`` (from the ``openmmtools`` wheel, MIT
    licence, see ``data/README.md``), the Amber14 force field (``amber14-all.xml``) in vacuum
    (``solvent="vacuum"``, no cutoff) or in OBC2 implicit solvent (``solvent="obc2"``, adds
    ``implicit/obc2.xml``), hydrogen-mass repartitioning (hydrogens at 4 amu, bonds to hydrogen
    constrained), a :class:`openmm.LangevinMiddleIntegrator` with a 4 fs step and a 1/ps
    friction, frames every 1 ps by default. ``initial_phi`` starts a run in a chosen basin
    (restrained equilibration, released before the first frame), and
    :func:`simulate_alanine_ensemble` runs many trajectories in parallel processes. The run
    is seeded (velocities and integrator random numbers),
    so that on the ``Reference`` platform the same parameters give bit-identical frames.
    Trajectories are cached in the user cache (:func:`dpnets.systems._utils.cache_path`),
    keyed by all parameters.

Stored data (:class:`AlanineDipeptideTrajectory`)
    ``positions``: the 10 **heavy atoms** (C, N, O), shape ``(T, 10, 3)``, float32, in
    **Ångström** (the unit of SchNet's cutoff in :class:`dpnets.nn.schnet.SchNetEncoder`);
    ``atomic_numbers``: ``(10,)``; ``phi``/``psi``: the backbone dihedrals in **degrees** in
    ``(-180, 180]``, computed in numpy from the positions (:func:`dihedral`). The dihedrals are
    for analysis and for the reference only, never the input of a learned encoder.

Reference (:func:`msm_reference`)
    A Markov state model on a fine regular ``(phi, psi)`` grid: with one-hot indicator
    features of the grid cells, the least-squares transfer operator
    :class:`dpnets.TransferOperator` (Eq. 15) is exactly the count-based maximum-likelihood
    MSM estimator ``T = diag(counts)^{-1} C(lag)``. We use the reversible maximum-likelihood
    variant (deeptime's ``MaximumLikelihoodMSM(reversible=True)``, valid for ensembles of
    short trajectories started out of equilibrium) restricted to the largest strongly
    connected set of cells; implied timescales
    ``t_i = -lag / ln |lambda_i|`` are reported against the lag time, and the free-energy
    difference ``Delta G = -kT ln(p_B / p_A)`` between the two main basins from the MSM
    stationary populations: ``A`` = C7eq/beta/alpha_R (``phi`` outside ``(0, 120)`` deg) and
    ``B`` = C7ax/alpha_L (``0 < phi < 120`` deg). In vacuum the slowest process is the
    ``phi`` flip between the two basins.
"""

from __future__ import annotations

import dataclasses
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ._utils import cache_path, check_finite_scalar, check_positive_int, read_cache, write_cache

#: arrays of a cached trajectory
_CACHED = ("positions", "atomic_numbers", "phi", "psi", "wall_s")

__all__ = [
    "AlanineDipeptideTrajectory",
    "simulate_alanine_dipeptide",
    "simulate_alanine_ensemble",
    "build_simulation",
    "dihedral",
    "msm_reference",
    "basin_delta_g",
    "pdb_path",
    "HEAVY_ATOM_NAMES",
    "PHI_ATOMS",
    "PSI_ATOMS",
    "KB_KCAL",
]

#: Boltzmann constant in kcal/(mol K).
KB_KCAL = 0.0019872041

#: Heavy atoms kept, in PDB order (residue, atom name).
HEAVY_ATOM_NAMES: tuple[tuple[str, str], ...] = (
    ("ACE", "CH3"),
    ("ACE", "C"),
    ("ACE", "O"),
    ("ALA", "N"),
    ("ALA", "CA"),
    ("ALA", "CB"),
    ("ALA", "C"),
    ("ALA", "O"),
    ("NME", "N"),
    ("NME", "C"),  # OpenMM renames NME's CH3 to C
)
#: Indices into the heavy-atom array of the phi (C-N-CA-C) and psi (N-CA-C-N) dihedrals.
PHI_ATOMS: tuple[int, int, int, int] = (1, 3, 4, 6)
PSI_ATOMS: tuple[int, int, int, int] = (3, 4, 6, 8)

_VERSION = 1
#: Force constant (kJ/mol/rad^2) of the phi restraint while seeding a trajectory.
_RESTRAINT_KJ = 500.0
_OPENMM_HINT = (
    "Simulating alanine dipeptide needs OpenMM: pip install 'dpnets[molecules]' "
    "(or pip install openmm)."
)


def pdb_path() -> Path:
    """Path of the packaged 22-atom alanine-dipeptide PDB (openmmtools, MIT licence)."""
    return Path(str(resources.files("dpnets.systems").joinpath("data/alanine-dipeptide.pdb")))


def _import_openmm() -> Any:
    try:
        import openmm  # noqa: F401
        import openmm.app  # noqa: F401
        import openmm.unit  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(_OPENMM_HINT) from exc
    return openmm


def dihedral(positions: np.ndarray, indices: tuple[int, int, int, int]) -> np.ndarray:
    """Dihedral angle (degrees, in ``(-180, 180]``) of four atoms, for every frame.

    IUPAC convention (the one of OpenMM/MDTraj): looking along the bond ``b -> c``, the angle
    from ``a`` to ``d``, positive clockwise.

    Parameters
    ----------
    positions : ndarray, shape (T, n_atoms, 3) or (n_atoms, 3)
    indices : 4 atom indices ``(a, b, c, d)``.
    """
    x = np.asarray(positions, dtype=np.float64)
    single = x.ndim == 2
    if single:
        x = x[None]
    if x.ndim != 3 or x.shape[-1] != 3:
        raise ValueError(f"positions must have shape (T, n_atoms, 3), got {np.shape(positions)}.")
    a, b, c, d = (x[:, i] for i in indices)
    b0, b1, b2 = a - b, c - b, d - c
    b1n = b1 / np.linalg.norm(b1, axis=-1, keepdims=True)
    v = b0 - np.sum(b0 * b1n, axis=-1, keepdims=True) * b1n
    w = b2 - np.sum(b2 * b1n, axis=-1, keepdims=True) * b1n
    xx = np.sum(v * w, axis=-1)
    yy = np.sum(np.cross(b1n, v) * w, axis=-1)
    out = np.degrees(np.arctan2(yy, xx))
    return out[0] if single else out


@dataclasses.dataclass
class AlanineDipeptideTrajectory:
    """A simulated alanine-dipeptide trajectory (heavy atoms).

    Attributes
    ----------
    positions : ndarray, shape (T, 10, 3), float32
        Heavy-atom positions in Ångström (order :data:`HEAVY_ATOM_NAMES`).
    atomic_numbers : ndarray, shape (10,), int64
    phi, psi : ndarray, shape (T,)
        Backbone dihedrals in degrees, ``(-180, 180]``.
    dt_ps : float
        Time between frames in picoseconds.
    temperature : float
        Kelvin.
    params : dict
        All simulation parameters (the cache key) and the wall time.
    """

    positions: np.ndarray
    atomic_numbers: np.ndarray
    phi: np.ndarray
    psi: np.ndarray
    dt_ps: float
    temperature: float
    params: dict

    @property
    def kT(self) -> float:
        """Thermal energy in kcal/mol."""
        return KB_KCAL * self.temperature

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    def slice(self, stop: int, step: int = 1) -> AlanineDipeptideTrajectory:
        """The first ``stop`` frames, every ``step``-th (``dt_ps`` is scaled accordingly)."""
        sl = slice(0, stop, step)
        return dataclasses.replace(
            self,
            positions=self.positions[sl],
            phi=self.phi[sl],
            psi=self.psi[sl],
            dt_ps=self.dt_ps * step,
        )


def _build_simulation(
    temperature: float,
    timestep_fs: float,
    friction_per_ps: float,
    solvent: str,
    seed: int,
    platform: str,
    threads: int,
    initial_phi: float | None = None,
    prepare: Any = None,
) -> Any:
    """The OpenMM ``Simulation`` of :func:`simulate_alanine_dipeptide`'s settings, at the
    packaged PDB's positions. ``prepare(system)``, if given, is called on the ``System``
    before the ``Simulation`` is made (e.g. to add a metadynamics bias force)."""
    openmm = _import_openmm()
    app, unit = openmm.app, openmm.unit
    pdb = app.PDBFile(str(pdb_path()))
    files = ["amber14-all.xml"] + (["implicit/obc2.xml"] if solvent == "obc2" else [])
    forcefield = app.ForceField(*files)
    system = forcefield.createSystem(
        pdb.topology,
        nonbondedMethod=app.NoCutoff,
        constraints=app.HBonds,
        hydrogenMass=4.0 * unit.amu,
    )
    if initial_phi is not None:
        # Harmonic phi restraint for the seeding equilibration; switched off (k_phi = 0) before
        # the production run, so that the stored dynamics is unbiased.
        heavy = [a.index for a in pdb.topology.atoms() if a.element.atomic_number > 1]
        restraint = openmm.CustomTorsionForce(
            "0.5*k_phi*d^2; d = min(dt, 2*pi - dt); dt = abs(theta - theta0); pi = 3.1415926535"
        )
        restraint.addGlobalParameter("k_phi", _RESTRAINT_KJ)
        restraint.addPerTorsionParameter("theta0")
        restraint.addTorsion(*[heavy[i] for i in PHI_ATOMS], [np.deg2rad(initial_phi)])
        system.addForce(restraint)
    integrator = openmm.LangevinMiddleIntegrator(
        temperature * unit.kelvin,
        friction_per_ps / unit.picosecond,
        timestep_fs * unit.femtoseconds,
    )
    integrator.setRandomNumberSeed(int(seed) + 1)  # 0 would mean "pick a random seed"
    if prepare is not None:
        prepare(system)
    plat = openmm.Platform.getPlatformByName(platform)
    props = {"Threads": str(threads)} if platform == "CPU" else {}
    sim = app.Simulation(pdb.topology, system, integrator, plat, props)
    sim.context.setPositions(pdb.positions)
    return sim


def build_simulation(
    *,
    temperature: float = 400.0,
    timestep_fs: float = 4.0,
    friction_per_ps: float = 1.0,
    solvent: str = "vacuum",
    seed: int = 0,
    platform: str = "Reference",
    threads: int = 1,
    prepare: Any = None,
) -> tuple[Any, np.ndarray]:
    """The OpenMM ``Simulation`` of :func:`simulate_alanine_dipeptide` (same force field,
    integrator and seeding), at the packaged PDB's positions, for running it yourself.

    Parameters
    ----------
    temperature, timestep_fs, friction_per_ps, solvent, seed, platform, threads
        As in :func:`simulate_alanine_dipeptide` (no ``initial_phi`` restraint).
    prepare : callable, optional
        ``prepare(system)`` is called on the ``openmm.System`` before the ``Simulation`` is
        made, e.g. to add a metadynamics bias (``openmm.app.Metadynamics`` adds its force to
        the system it is given).

    Returns
    -------
    (openmm.app.Simulation, ndarray)
        The simulation (not minimised, no velocities) and the 0-based indices of the heavy
        atoms among all atoms (order :data:`HEAVY_ATOM_NAMES`).
    """
    if solvent not in ("vacuum", "obc2"):
        raise ValueError(f"solvent must be 'vacuum' or 'obc2', got {solvent!r}.")
    if platform not in ("Reference", "CPU"):
        raise ValueError(f"platform must be 'Reference' or 'CPU', got {platform!r}.")
    sim = _build_simulation(
        check_finite_scalar(temperature, "temperature"),
        check_finite_scalar(timestep_fs, "timestep_fs"),
        check_finite_scalar(friction_per_ps, "friction_per_ps"),
        solvent,
        check_positive_int(seed, "seed", minimum=0),
        platform,
        check_positive_int(threads, "threads"),
        prepare=prepare,
    )
    return sim, _heavy_indices_and_numbers(sim)[0]


def _heavy_indices_and_numbers(sim: Any) -> tuple[np.ndarray, np.ndarray]:
    atoms = list(sim.topology.atoms())
    idx = [a.index for a in atoms if a.element.atomic_number > 1]
    if len(idx) != len(HEAVY_ATOM_NAMES):  # pragma: no cover - packaged PDB is fixed
        raise RuntimeError(f"expected {len(HEAVY_ATOM_NAMES)} heavy atoms, found {len(idx)}")
    z = np.asarray([atoms[i].element.atomic_number for i in idx], dtype=np.int64)
    return np.asarray(idx), z


def simulate_alanine_dipeptide(
    n_frames: int,
    *,
    temperature: float = 400.0,
    timestep_fs: float = 4.0,
    frame_interval_ps: float = 1.0,
    friction_per_ps: float = 1.0,
    solvent: str = "vacuum",
    equilibration_ps: float = 100.0,
    seed: int = 0,
    initial_phi: float | None = None,
    platform: str = "Reference",
    threads: int = 1,
    cache: bool | str = True,
    progress: bool = False,
) -> AlanineDipeptideTrajectory:
    """Simulate (or load from the cache) an alanine-dipeptide trajectory.

    Parameters
    ----------
    n_frames : int
        Number of stored frames (``frame_interval_ps`` apart).
    temperature : float, default 400.0
        Kelvin. In vacuum at 400 K the C7ax/alpha_L basin (about 6% of the population) is
        entered about once per 70 ns and left after about 4 ns (measured on 1.9 us of
        seeded runs), so that converged statistics need many trajectories started in both
        basins (``initial_phi``) or several microseconds of one run.
    timestep_fs : float, default 4.0
        Integration step (with hydrogen-mass repartitioning to 4 amu and H-bond constraints).
    frame_interval_ps : float, default 1.0
        Must be a multiple of the step.
    friction_per_ps : float, default 1.0
    solvent : {"vacuum", "obc2"}, default "vacuum"
    equilibration_ps : float, default 100.0
        Discarded equilibration after energy minimisation.
    seed : int, default 0
        Seeds the initial velocities and the integrator's random numbers.
    initial_phi : float, optional
        Seed the trajectory at this backbone ``phi`` (degrees): the equilibration runs with a
        harmonic restraint of ``phi`` (500 kJ/mol/rad^2), which is switched off before the
        first stored frame. Default: no restraint (start from the PDB's C7eq structure). Used
        to start trajectories in the rarely visited C7ax/alpha_L basin (``initial_phi=70``),
        as in an ensemble of short, off-equilibrium runs; such data need estimators that do
        not assume the frames are in equilibrium (:func:`msm_reference`'s reversible maximum
        likelihood, :meth:`dpnets.TransferOperator.stationary_weights`).
    platform : {"Reference", "CPU"}, default "Reference"
        ``Reference`` is deterministic and, for 22 atoms, as fast as ``CPU``.
    threads : int, default 1
        Threads of the ``CPU`` platform (ignored by ``Reference``).
    cache : bool or "only", default True
        Load/store the result in the user cache (``$DPNETS_CACHE`` or ``~/.cache/dpnets``).
        ``"only"``: load it from the cache and never simulate (a missing trajectory raises).
    progress : bool, default False
        Print the progress every 10%.

    Returns
    -------
    AlanineDipeptideTrajectory

    Raises
    ------
    FileNotFoundError
        With ``cache="only"``, if the trajectory is not in the cache.
    """
    n_frames = check_positive_int(n_frames, "n_frames")
    temperature = check_finite_scalar(temperature, "temperature")
    timestep_fs = check_finite_scalar(timestep_fs, "timestep_fs")
    frame_interval_ps = check_finite_scalar(frame_interval_ps, "frame_interval_ps")
    friction_per_ps = check_finite_scalar(friction_per_ps, "friction_per_ps")
    equilibration_ps = check_finite_scalar(equilibration_ps, "equilibration_ps")
    seed = check_positive_int(seed, "seed", minimum=0)
    if temperature <= 0 or timestep_fs <= 0 or frame_interval_ps <= 0 or friction_per_ps <= 0:
        raise ValueError(
            "temperature, timestep_fs, frame_interval_ps and friction_per_ps must be > 0."
        )
    if equilibration_ps < 0:
        raise ValueError("equilibration_ps must be >= 0.")
    if solvent not in ("vacuum", "obc2"):
        raise ValueError(f"solvent must be 'vacuum' or 'obc2', got {solvent!r}.")
    if platform not in ("Reference", "CPU"):
        raise ValueError(f"platform must be 'Reference' or 'CPU', got {platform!r}.")
    if initial_phi is not None:
        initial_phi = check_finite_scalar(initial_phi, "initial_phi")
        if equilibration_ps <= 0:
            raise ValueError("initial_phi needs equilibration_ps > 0 (the restrained seeding).")
    steps_per_frame = frame_interval_ps * 1000.0 / timestep_fs
    if abs(steps_per_frame - round(steps_per_frame)) > 1e-9:
        raise ValueError("frame_interval_ps must be a multiple of timestep_fs.")
    steps_per_frame = int(round(steps_per_frame))
    params = {
        "version": _VERSION,
        "n_frames": n_frames,
        "temperature": temperature,
        "timestep_fs": timestep_fs,
        "frame_interval_ps": frame_interval_ps,
        "friction_per_ps": friction_per_ps,
        "solvent": solvent,
        "equilibration_ps": equilibration_ps,
        "seed": seed,
        "platform": platform,
        "threads": threads if platform == "CPU" else 1,
    }
    if initial_phi is not None:  # absent key: unchanged cache names of unseeded runs
        params["initial_phi"] = initial_phi
    if cache not in (True, False, "only"):
        raise ValueError(f"cache must be True, False or 'only', got {cache!r}.")
    path = cache_path("alanine-dipeptide", params) if cache else None
    f = None if path is None else read_cache(path, _CACHED)
    if f is None and cache == "only":
        raise FileNotFoundError(
            f"this alanine-dipeptide trajectory is not in the cache ({path}) and cache='only' "
            "never simulates: fill the cache first (e.g. `dpnets reproduce alanine-dipeptide`) "
            "or pass cache=True"
        )
    if f is not None:
        return AlanineDipeptideTrajectory(
            positions=f["positions"],
            atomic_numbers=f["atomic_numbers"],
            phi=f["phi"],
            psi=f["psi"],
            dt_ps=frame_interval_ps,
            temperature=temperature,
            params={**params, "wall_s": float(f["wall_s"]), "cache": str(path)},
        )

    openmm = _import_openmm()
    unit = openmm.unit
    t0 = time.perf_counter()
    sim = _build_simulation(
        temperature, timestep_fs, friction_per_ps, solvent, seed, platform, threads, initial_phi
    )
    heavy, z = _heavy_indices_and_numbers(sim)
    openmm.LocalEnergyMinimizer.minimize(sim.context, 10.0, 1000)
    sim.context.setVelocitiesToTemperature(temperature * unit.kelvin, int(seed) + 1)
    n_eq = int(round(equilibration_ps * 1000.0 / timestep_fs))
    if n_eq:
        sim.step(n_eq)
    if initial_phi is not None:
        sim.context.setParameter("k_phi", 0.0)
    out = np.empty((n_frames, len(heavy), 3), dtype=np.float32)
    report = max(n_frames // 10, 1)
    for i in range(n_frames):
        sim.step(steps_per_frame)
        pos = sim.context.getState(getPositions=True).getPositions(asNumpy=True)
        out[i] = pos.value_in_unit(unit.angstrom)[heavy]
        if progress and (i + 1) % report == 0:
            el = time.perf_counter() - t0
            print(f"alanine-dipeptide: {i + 1}/{n_frames} frames, {el:.0f} s", flush=True)
    wall = time.perf_counter() - t0
    phi = dihedral(out, PHI_ATOMS).astype(np.float32)
    psi = dihedral(out, PSI_ATOMS).astype(np.float32)
    if path is not None:
        write_cache(
            path,
            compress=True,
            positions=out,
            atomic_numbers=z,
            phi=phi,
            psi=psi,
            wall_s=np.float64(wall),
        )
    return AlanineDipeptideTrajectory(
        positions=out,
        atomic_numbers=z,
        phi=phi,
        psi=psi,
        dt_ps=frame_interval_ps,
        temperature=temperature,
        params={**params, "wall_s": wall, "cache": str(path) if path else None},
    )


def simulate_alanine_ensemble(
    runs: list[dict[str, Any]], *, workers: int = 1, **common: Any
) -> list[AlanineDipeptideTrajectory]:
    """Simulate (or load from the cache) several trajectories, in parallel processes.

    Parameters
    ----------
    runs : list of dict
        Per-trajectory keyword arguments of :func:`simulate_alanine_dipeptide` (for instance
        ``{"n_frames": 4000, "seed": 3, "initial_phi": 70.0}``).
    workers : int, default 1
        Processes simulating at once (:func:`dpnets.parallel.run_jobs`; one
        ``Reference``-platform trajectory each, one torch and BLAS thread per process; cached
        trajectories are loaded, not re-run). On the CPU, one process per core is fastest.
    **common
        Keyword arguments shared by all runs (a run's own value wins).

    Returns
    -------
    list of AlanineDipeptideTrajectory
        In the order of ``runs``.
    """
    workers = check_positive_int(workers, "workers")
    if not isinstance(runs, (list, tuple)) or not runs:
        raise ValueError("runs must be a non-empty list of dicts of keyword arguments.")
    kwargs = [{**common, **dict(r)} for r in runs]
    from functools import partial

    from dpnets.parallel import run_jobs

    jobs = [partial(simulate_alanine_dipeptide, **kw) for kw in kwargs]
    return [traj for _, traj in run_jobs(jobs, workers=min(workers, len(jobs)), threads=1)]


# --------------------------------------------------------------------------------------------
# Markov state model reference
# --------------------------------------------------------------------------------------------


def basin_b_mask(phi: np.ndarray) -> np.ndarray:
    """``True`` in the C7ax/alpha_L basin ``0 < phi < 120`` degrees."""
    phi = np.asarray(phi)
    return (phi > 0.0) & (phi < 120.0)


def basin_delta_g(phi: np.ndarray, kT: float, weights: np.ndarray | None = None) -> float:
    """``Delta G = G(C7ax/alpha_L) - G(C7eq/beta)`` in kcal/mol from (weighted) populations."""
    b = basin_b_mask(phi)
    w = np.ones(b.shape) if weights is None else np.asarray(weights, dtype=np.float64)
    pb, pa = float(w[b].sum()), float(w[~b].sum())
    if pb <= 0 or pa <= 0:
        return float("nan")
    return float(-kT * np.log(pb / pa))


def _grid_labels(phi: np.ndarray, psi: np.ndarray, n_bins: int) -> np.ndarray:
    edges = np.linspace(-180.0, 180.0, n_bins + 1)
    i = np.clip(np.digitize(phi, edges) - 1, 0, n_bins - 1)
    j = np.clip(np.digitize(psi, edges) - 1, 0, n_bins - 1)
    return i * n_bins + j


def msm_reference(
    phi: np.ndarray | list[np.ndarray],
    psi: np.ndarray | list[np.ndarray],
    *,
    dt_ps: float,
    kT: float,
    lags: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 200),
    n_bins: int = 24,
    n_timescales: int = 3,
) -> dict[str, Any]:
    r"""Markov state model on an ``n_bins x n_bins`` (phi, psi) grid: timescales and Delta G.

    The grid cells' one-hot indicators make the least-squares transfer operator (Eq. 15,
    :class:`dpnets.TransferOperator`) the count MSM ``diag(c)^{-1} C(lag)``; here the
    reversible maximum-likelihood estimate (deeptime's ``MaximumLikelihoodMSM(reversible=
    True)``, detailed balance; Bowman et al. 2009, Prinz et al. 2011) on the largest strongly
    connected set of the sliding-window counts is used, which is valid for an ensemble of
    short trajectories that do not start in equilibrium. (It replaced our own fixed-point
    iteration: same slowest timescale to 1e-8 on the committed ensemble, twice as fast.)
    Needs deeptime (``pip install dpnets[molecules]``). Its eigenvalues give the implied
    timescales ``t_i(lag) = -lag dt / ln |lambda_i|`` and its stationary vector the basin
    populations.

    Parameters
    ----------
    phi, psi : ndarray (T,) or list of ndarray
        Dihedrals in degrees of one trajectory or of several (counts never cross two).
    dt_ps : float
        Time between frames (ps).
    kT : float
        Thermal energy (kcal/mol) for ``Delta G``.
    lags : tuple of int
        Lag times in frames (lags longer than every trajectory are skipped: ``nan``).
    n_bins : int, default 24
        Cells per dihedral (15 degree cells for 24, so that the basin borders 0 and 120
        degrees are cell edges).
    n_timescales : int, default 3

    Returns
    -------
    dict
        ``lags_ps``, ``timescales_ps`` (``len(lags) x n_timescales``), ``delta_g`` (kcal/mol,
        from the stationary distribution at the largest lag), ``delta_g_counts`` (from the raw
        histogram, biased unless the frames are in equilibrium), ``slowest_ps`` (the slowest
        timescale at the largest lag, the converged value), ``n_states``, ``stationary`` (the
        MSM's stationary probabilities at the largest lag) of the ``active_cells`` (cell
        ``i * n_bins + j`` is phi bin ``i``, psi bin ``j``).
    """
    phis = list(phi) if isinstance(phi, (list, tuple)) else [phi]
    psis = list(psi) if isinstance(psi, (list, tuple)) else [psi]
    if len(phis) != len(psis) or not phis:
        raise ValueError("phi and psi must hold the same number (>= 1) of trajectories.")
    labels_list = []
    for a, b in zip(phis, psis, strict=True):
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if a.shape != b.shape or a.ndim != 1:
            raise ValueError("phi and psi must be 1-D arrays of the same length.")
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            raise ValueError("phi and psi must be finite.")
        labels_list.append(_grid_labels(a, b, n_bins))
    n = n_bins * n_bins
    centers = -180.0 + (np.arange(n_bins) + 0.5) * 360.0 / n_bins
    cphi = np.repeat(centers, n_bins)
    its = np.full((len(lags), n_timescales), np.nan)
    pi_last = None
    n_states = 0
    try:
        from deeptime.markov import TransitionCountEstimator
        from deeptime.markov.msm import MaximumLikelihoodMSM
    except ImportError as err:  # pragma: no cover - optional dependency
        raise ImportError(
            "msm_reference needs deeptime: pip install 'dpnets[molecules]' (or deeptime)"
        ) from err
    for k, lag in enumerate(lags):
        usable = [labels for labels in labels_list if lag < len(labels)]
        if not usable:
            continue
        counts = TransitionCountEstimator(lag, "sliding", n_states=n).fit(usable)
        sub = counts.fetch_model().submodel_largest()
        if sub.n_states < 2:
            continue
        msm = MaximumLikelihoodMSM(reversible=True, maxiter=1_000_000, maxerr=1e-12)
        model = msm.fit(sub).fetch_model()
        ts = model.timescales(min(n_timescales, sub.n_states - 1)) * dt_ps
        its[k, : len(ts)] = ts
        pi_last = (model.stationary_distribution, sub.state_symbols)
        n_states = sub.n_states
    pi, keep = pi_last if pi_last is not None else (np.ones(1), np.zeros(1, int))
    delta_g = basin_delta_g(cphi[keep], kT, weights=pi)
    valid = np.flatnonzero(np.isfinite(its[:, 0]))
    return {
        "lags_ps": [lag * dt_ps for lag in lags],
        "timescales_ps": its.tolist(),
        "slowest_ps": float(its[valid[-1], 0]) if len(valid) else float("nan"),
        "delta_g": delta_g,
        "delta_g_counts": basin_delta_g(np.concatenate(phis), kT),
        "n_states": n_states,
        "n_bins": n_bins,
        "stationary": np.asarray(pi, dtype=np.float64).tolist(),
        "active_cells": np.asarray(keep, dtype=np.int64).tolist(),
    }
