r"""Slow modes of alanine dipeptide learned from biased runs (issue 44, item 5).

``dpnets reproduce biased-alanine [--quick] [--seeds K] [--out DIR]``

The molecular half of the biased-simulation experiments (the model potential, where the
truth is exact, is :mod:`dpnets.experiments.biased_double_well`).

Setting
-------
* System: alanine dipeptide in vacuum, Amber14, 400 K, Langevin (1/ps), 4 fs steps with
  hydrogen-mass repartitioning, OpenMM's ``Reference`` platform: the settings of
  :mod:`dpnets.systems.alanine` and of ``dpnets reproduce alanine-dipeptide``.
* Bias: OpenMM's own well-tempered metadynamics (``openmm.app.Metadynamics``) along **psi
  only**, a fast coordinate that is *not* the slow one (the slow process is the phi flip
  C7eq/beta <-> C7ax/alpha_L): a periodic ``BiasVariable`` on the psi torsion, Gaussians of
  ``height_kj`` every ``pace_steps`` steps of width ``sigma_rad``, bias factor
  ``bias_factor``, for ``build_ps``; then ``prod_ps`` of production under the final,
  **static** bias (:func:`dpnets.experiments.enhanced_sampling_alanine.
  simulate_metadynamics`). ``runs`` independent runs (seeds ``run_seed0 + k``), each from the
  PDB's C7eq structure. Only the production frames are used (a static bias: time
  rescaling's condition that the bias changes slowly compared with the lag holds exactly).
  The runs are cached in the user cache (``$DPNETS_CACHE`` or ``~/.cache/dpnets``), keyed by
  every parameter, so that reruns do not simulate.
* Log-weights: ``beta (V(frame) - c)``, ``V`` the bias force's energy at the frame (read
  from the engine at every saved frame). Time rescaling needs the absolute level of ``V``:
  the rescaled clock ``dt exp(beta V)`` is the unbiased one where the bias vanishes at the
  transition states (hyperdynamics' condition), and a psi bias does not vanish there. Two
  conventions for the constant ``c``, each fitted:

  - ``"transition"`` (the main one): ``V`` vanishes *on average* at the phi transition
    regions: ``exp(beta c)`` is the mean of ``exp(beta V)`` over the production frames
    outside both phi cores (``-40 < phi < 30`` or ``100 < phi < 160`` degrees, the barrier
    regions of :func:`dpnets.experiments.enhanced_sampling_alanine.transitions`;
    :func:`transition_state_shift`). It uses knowledge of the slow coordinate, and rests on
    the few frames found there.
  - ``"rbias"``: the mean weight over the production frames is 1 (``exp(beta c)`` the mean
    of ``exp(beta V)``: metadynamics' ``c(t)``, PLUMED's ``metad.rbias``, what an mlcolvar
    user passes): rescaled time lasts as long as simulation time.

  ``c`` shifts every log-weight by the same constant: it changes the unit of rescaled time
  (the timescales), not the reweighted free energies.
* Features: ``[sin phi, cos phi, sin psi, cos psi]`` of every ``fit_stride``-th production
  frame (10 ps; the same data for every method;
  :func:`dpnets.experiments.enhanced_sampling_alanine.dihedral_features`); a kept frame
  lasts its block of ``fit_stride`` frames of rescaled time (its log-weight is the
  log-mean-exp of the block's).
* dpnets: :class:`dpnets.DPNet` (MLP ``4-hidden-r``, CELU) and its
  :class:`dpnets.TransferOperator` at a lag of ``lag_ps``, **with** ``log_weights`` (pairs
  in rescaled time, timescales in rescaled ps) and **without** them (the same number of
  frames as lag, in simulation time: what a fit that ignores the bias learns), ``seeds``
  network seeds each on the same data.
* mlcolvar's DeepTICA: the fitted data (features, simulation time, both log-weights, run
  index) is written to ``biased_alanine_data.npz``; ``benchmarks/deeptica_biased_alanine.py``,
  run with the Python of a side environment that has mlcolvar (it is not a dependency of
  dpnets), trains DeepTICA on it with the same log-weights, lag and layer widths and writes
  ``deeptica.json`` next to it; a later run of this experiment puts its rows in the table.

Reference
---------
The reversible maximum-likelihood MSM on a 24 x 24 (phi, psi) grid of the 96 x 20 ns
unbiased ensemble of ``dpnets reproduce alanine-dipeptide``
(``benchmarks/results/alanine_dipeptide/results.json``): slowest implied timescale
``3.77 +- 0.47`` ns at a lag of 1000 ps (``3.87`` ns at 500 ps), ``Delta G = 2.19 +- 0.19``
kcal/mol (:data:`REFERENCE_SLOWEST_NS`, :data:`enhanced_sampling_alanine.REFERENCE_DELTA_G`).

Metrics
-------
``timescale_ns``: the slowest implied timescale of each fitted operator (rescaled time for
the weighted fits, simulation time for the unweighted ones); ``error``: relative to the
reference at the same lag. ``delta_g_kcal``: ``G(C7ax/alpha_L) - G(C7eq/beta)`` of the
production frames reweighted with ``exp(log_weights)`` (a check of the weights, no model).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpnets.experiments._common import (
    jsonable,
    markdown_table,
    mean_std,
    output_dir,
    pyplot,
    torch_threads,
    write_results,
)

__all__ = [
    "CONFIG",
    "QUICK",
    "REFERENCE_SLOWEST_NS",
    "psi_metadynamics",
    "simulate_runs",
    "transition_state_shift",
    "run",
]

#: The reference MSM's slowest implied timescale (ns) and its bootstrap standard error, by
#: lag (ps): ``benchmarks/results/alanine_dipeptide/results.json`` (``reference.slowest_ps``
#: and ``reference_bootstrap.slowest_ps_std`` at 1000 ps; ``reference_slowest_at_training_
#: lag_ps`` at 500 ps, no bootstrap there).
REFERENCE_SLOWEST_NS: dict[float, tuple[float, float]] = {
    1000.0: (3.7666723039314247, 0.46541039240373067),
    500.0: (3.873218423644191, float("nan")),
}

#: cache version of the biased runs (bump when the simulation changes)
_VERSION = 1

#: the full experiment (about ten minutes of simulation on two cores, cached; the fits are
#: minutes)
CONFIG: dict[str, Any] = {
    "temperature": 400.0,
    "solvent": "vacuum",
    "timestep_fs": 4.0,
    "friction_per_ps": 1.0,
    "platform": "Reference",
    "equilibration_ps": 20.0,
    # well-tempered metadynamics on psi, then the final bias kept static
    "bias_factor": 20.0,
    "height_kj": 2.0,
    "pace_steps": 500,
    "sigma_rad": 0.35,
    "build_ps": 2000.0,
    "prod_ps": 20_000.0,
    "save_ps": 2.0,
    "runs": 24,
    "run_seed0": 5000,
    "workers": 2,
    # the fits
    "lag_ps": 1000.0,
    "hidden": [32, 32],
    "r": 3,
    "epochs": 20,
    "batch_size": 1024,
    "fit_stride": 5,
    # analysis (phi cores, degrees; as enhanced_sampling_alanine)
    "core_a_outside": (-40.0, 160.0),
    "core_b": (30.0, 100.0),
    "fes_bins": 30,
}
#: ``--quick``: a smoke test of seconds (its numbers mean nothing)
QUICK: dict[str, Any] = {
    **CONFIG,
    "equilibration_ps": 2.0,
    "pace_steps": 50,
    "build_ps": 20.0,
    "prod_ps": 60.0,
    "save_ps": 1.0,
    "runs": 2,
    "workers": 1,
    "lag_ps": 5.0,
    "hidden": [8],
    "r": 2,
    "epochs": 2,
    "batch_size": 256,
    "fit_stride": 1,
}

_SIM_KEYS = (
    "temperature",
    "solvent",
    "timestep_fs",
    "friction_per_ps",
    "platform",
    "equilibration_ps",
    "bias_factor",
    "height_kj",
    "pace_steps",
    "sigma_rad",
    "build_ps",
    "prod_ps",
    "save_ps",
)
_CACHED = ("phi", "psi", "bias_kj", "first_prod", "bias_grid", "bias_final_kj", "seconds")


def psi_metadynamics(seed: int, cfg: dict[str, Any], cache: bool = True) -> dict[str, np.ndarray]:
    """One run of well-tempered metadynamics on psi, then production under the final static
    bias (or its cached copy).

    Parameters
    ----------
    seed : int
        The run's seed (velocities and the integrator's random numbers).
    cfg : dict
        The simulation keys of :data:`CONFIG` (temperature, bias parameters, lengths).
    cache : bool, default True
        Load/store the run in the user cache, keyed by ``seed`` and the simulation keys.

    Returns
    -------
    dict
        ``phi``, ``psi`` (degrees) and ``bias_kj`` (the bias energy, kJ/mol) of every saved
        frame, ``first_prod`` (index of the first production frame), ``bias_grid`` and
        ``bias_final_kj`` (the final bias on OpenMM's grid of psi, radians), ``seconds``.
    """
    from dpnets.systems._utils import cache_path, read_cache, write_cache

    params = {"version": _VERSION, "seed": int(seed), **{k: cfg[k] for k in _SIM_KEYS}}
    path = cache_path("biased-alanine", params) if cache else None
    found = None if path is None else read_cache(path, _CACHED)
    if found is not None:
        return dict(found)
    import openmm
    from openmm import app

    from dpnets.experiments.enhanced_sampling_alanine import simulate_metadynamics, torsion_atoms

    force = openmm.CustomTorsionForce("theta")
    force.addTorsion(*torsion_atoms()[1])
    variable = app.BiasVariable(force, -np.pi, np.pi, float(cfg["sigma_rad"]), True)
    steps_per_ps = 1000.0 / float(cfg["timestep_fs"])
    build = int(round(float(cfg["build_ps"]) * steps_per_ps))
    total = build + int(round(float(cfg["prod_ps"]) * steps_per_ps))
    out = simulate_metadynamics(
        cfg, int(seed), total, {"variable": variable, "build_steps": build}, False
    )
    arrays = {k: np.asarray(out[k]) for k in _CACHED}
    if path is not None:
        write_cache(path, **arrays)
    return arrays


def simulate_runs(cfg: dict[str, Any], progress: bool = True) -> list[dict[str, np.ndarray]]:
    """The ``cfg["runs"]`` biased runs (:func:`psi_metadynamics`, seeds ``run_seed0 + k``),
    ``cfg["workers"]`` processes in parallel (:func:`dpnets.parallel.run_jobs`, one thread
    each) for those not cached."""
    from functools import partial

    from dpnets.parallel import run_jobs

    n = int(cfg["runs"])
    jobs = [partial(psi_metadynamics, int(cfg["run_seed0"]) + k, cfg) for k in range(n)]
    t0 = time.perf_counter()
    runs: list[Any] = [None] * n
    workers = max(1, min(int(cfg["workers"]), n))
    for done, (k, r) in enumerate(run_jobs(jobs, workers=workers, threads=1, ordered=False)):
        runs[k] = r
        if progress:
            print(f"biased runs: {done + 1}/{n}, {time.perf_counter() - t0:.0f} s")
    return runs


def _barrier_mask(phi: np.ndarray, cfg: dict[str, Any]) -> np.ndarray:
    """Frames outside both phi cores: the transition regions of the phi flip."""
    lo, hi = cfg["core_a_outside"]
    b_lo, b_hi = cfg["core_b"]
    in_a = (phi <= lo) | (phi >= hi)
    in_b = (phi >= b_lo) & (phi <= b_hi)
    return ~in_a & ~in_b


def transition_state_shift(phi: np.ndarray, beta_v: np.ndarray, cfg: dict[str, Any]) -> float:
    """``beta c`` with ``exp(beta c)`` the mean of ``exp(beta V)`` over the frames in the phi
    barrier regions (outside both cores), so that ``beta (V - c)`` vanishes there on
    average; the minimum of ``beta V`` if no frame is there (a smoke test's short runs).

    Parameters
    ----------
    phi : ndarray
        phi of every frame (degrees).
    beta_v : ndarray
        ``beta V`` of every frame.
    cfg : dict
        ``core_a_outside`` and ``core_b`` (degrees).
    """
    phi, beta_v = np.asarray(phi, float), np.asarray(beta_v, float)
    mask = _barrier_mask(phi, cfg)
    if not mask.any():
        return float(beta_v.min())
    b = beta_v[mask]
    return float(b.max() + np.log(np.mean(np.exp(b - b.max()))))


def _slowest(op: Any) -> float:
    ts = np.asarray(op.implied_timescales(), dtype=np.float64)
    ts = ts[np.isfinite(ts)]
    return float(ts.max()) if ts.size else float("nan")


def _fit(
    feats: list[np.ndarray], lw: list[np.ndarray] | None, cfg: dict[str, Any], seed: int
) -> tuple[Any, float, float]:
    """DPNet and its TransferOperator; their slowest timescale (ps) and the seconds."""
    from dpnets import DPNet, TransferOperator
    from dpnets.nn import MLP

    t0 = time.perf_counter()
    frame = float(cfg["save_ps"]) * int(cfg["fit_stride"])  # the frames fitted
    lag = max(int(round(float(cfg["lag_ps"]) / frame)), 1)
    torch.manual_seed(seed)
    enc = MLP(4, tuple(cfg["hidden"]), int(cfg["r"]), activation="celu")
    net = DPNet(
        enc,
        lag=lag,
        epochs=int(cfg["epochs"]),
        batch_size=int(cfg["batch_size"]),
        seed=seed,
        progress=False,
    )
    net.fit(feats, log_weights=lw)
    op = TransferOperator(net, lag=lag, dt=frame)
    op.fit(feats, log_weights=lw)
    return op, _slowest(op), time.perf_counter() - t0


#: the fits: log-weights convention (or none) -> its label in the table
_FITS: dict[str, str] = {
    "transition": "yes, β(V − c), V ≈ 0 on average in the φ barrier regions (uses φ)",
    "rbias": "yes, β(V − c), mean weight 1 (metad.rbias)",
    "unweighted": "no",
}


def _block_log_mean_exp(lw: np.ndarray, stride: int) -> np.ndarray:
    """``log(mean(exp(lw)))`` of each block of ``stride`` frames (the last may be shorter)."""
    n = len(lw)
    starts = np.arange(0, n, stride)
    top = float(lw.max())
    sums = np.add.reduceat(np.exp(lw - top), starts)
    counts = np.diff(np.append(starts, n))
    return np.log(sums / counts) + top


def _delta_g_kcal(phi: np.ndarray, w: np.ndarray, kT_kcal: float) -> float:
    b = (phi > 0.0) & (phi < 120.0)
    pb, pa = float(w[b].sum()), float(w[~b].sum())
    return float(-kT_kcal * np.log(pb / pa)) if pb > 0 and pa > 0 else float("nan")


def _figure(out: Path, cfg: dict[str, Any], data: dict[str, Any], models: dict[str, Any]) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - matplotlib missing
        return
    phi, psi, x, lw = data["phi"], data["psi"], data["x"], data["lw"]
    w = np.exp(lw - lw.max())
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3), layout="constrained")
    ax = axes[0]
    for (name, op), color in zip(models.items(), ("C0", "C3"), strict=False):
        s = op.eigenfunctions(x).real[:, 1]
        s = (s - s.mean()) / s.std()
        edges = np.linspace(s.min(), s.max(), int(cfg["fes_bins"]) + 1)
        c = 0.5 * (edges[1:] + edges[:-1])
        for weights, style, what in ((w, "-", "reweighted"), (None, ":", "biased, raw")):
            h, _ = np.histogram(s, bins=edges, weights=weights)
            with np.errstate(divide="ignore"):
                f = -np.log(h / h.sum())
            ok = np.isfinite(f)
            ax.plot(c[ok], f[ok] - f[ok].min(), style, color=color, label=f"{name}: {what}")
    ax.set_xlabel("learned slowest mode (standardised)")
    ax.set_ylabel("F (kT)")
    ax.set_title("free energy along the learned slow mode")
    ax.legend(fontsize="x-small")
    ax = axes[1]
    s = models["weighted"].eigenfunctions(x).real[:, 1]
    step = max(len(s) // 20000, 1)
    m = ax.scatter(phi[::step], psi[::step], c=s[::step], s=1, cmap="coolwarm")
    fig.colorbar(m, ax=ax, label="slowest mode (weighted fit)")
    ax.set_xlabel("φ (deg)")
    ax.set_ylabel("ψ (deg)")
    ax.set_title("learned slow mode on the biased frames")
    ax = axes[2]
    edges = np.linspace(-180.0, 180.0, 37)
    c = 0.5 * (edges[1:] + edges[:-1])
    for weights, label in ((w, "reweighted exp(βV)"), (None, "biased, raw")):
        h, _ = np.histogram(phi, bins=edges, weights=weights)
        with np.errstate(divide="ignore"):
            f = -np.log(h / h.sum())
        ok = np.isfinite(f)
        ax.plot(c[ok], f[ok] - f[ok].min(), "o-", ms=3, label=label)
    ax.set_xlabel("φ (deg)")
    ax.set_ylabel("F(φ) (kT)")
    ax.set_title("free energy along φ (ψ biased)")
    ax.legend(fontsize="small")
    fig.savefig(out / "fes.png", dpi=110)
    plt.close(fig)


def _deeptica_rows(out: Path, ref: float) -> list[list[str]]:
    """Table rows from ``deeptica.json`` (``benchmarks/deeptica_biased_alanine.py``)."""
    path = out / "deeptica.json"
    if not path.exists():
        return []
    d = json.loads(path.read_text())
    rows = []
    for key, label in (
        ("transition", _FITS["transition"]),
        ("rbias", _FITS["rbias"]),
        ("unweighted", "no"),
    ):
        if key not in d:
            continue
        ts = np.asarray(d[key]["timescale_ns"], dtype=float)
        rows.append(
            [
                f"mlcolvar {d.get('mlcolvar_version', '')} DeepTICA",
                label,
                mean_std(ts),
                f"{100 * (float(ts.mean()) / ref - 1):+.0f}%",
                str(len(ts)),
                d.get("command", ""),
            ]
        )
    return rows


def run(
    *,
    quick: bool = False,
    seeds: int | None = None,
    out: str | Path = Path("dpnets-out") / "biased-alanine",
    device: str | None = None,
    progress: bool = True,
) -> str:
    """Simulate (or load) the psi-biased runs, fit DPNets with and without the weights,
    compare with the reference MSM; write ``results.json``, ``table.md``, ``fes.png`` and
    ``biased_alanine_data.npz`` (the data for mlcolvar's DeepTICA) into ``out``.

    Parameters
    ----------
    quick : bool, default False
        A smoke test (:data:`QUICK`: two runs of 80 ps, a tiny network).
    seeds : int, optional
        Network seeds ``0..seeds-1`` of each fit on the same biased data (default 3; 1 with
        ``quick``).
    out : path
        Output folder.
    device : str, optional
        Ignored (CPU).
    progress : bool, default True
        Progress lines.

    Returns
    -------
    str
        The results table (markdown).
    """
    del device
    from dpnets.experiments.enhanced_sampling_alanine import dihedral_features, transitions
    from dpnets.systems.alanine import KB_KCAL

    cfg = QUICK if quick else CONFIG
    n_seeds = (1 if quick else 3) if seeds is None else int(seeds)
    if n_seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    out = output_dir(out)
    t0 = time.perf_counter()
    runs = simulate_runs(cfg, progress)
    t_sim = time.perf_counter() - t0
    kT_kj = 0.00831446261815324 * float(cfg["temperature"])
    kT_kcal = KB_KCAL * float(cfg["temperature"])
    prod = [
        {k: np.asarray(r[k])[int(r["first_prod"]) :] for k in ("phi", "psi", "bias_kj")}
        for r in runs
    ]
    phi = np.concatenate([p["phi"] for p in prod])
    beta_v = np.concatenate([p["bias_kj"] for p in prod]) / kT_kj
    shifts = {
        "transition": transition_state_shift(phi, beta_v, cfg),
        "rbias": float(beta_v.max() + np.log(np.mean(np.exp(beta_v - beta_v.max())))),
    }
    stride = int(cfg["fit_stride"])
    frame = float(cfg["save_ps"]) * stride
    feats = [dihedral_features(p["phi"][::stride], p["psi"][::stride]) for p in prod]
    # a kept frame lasts its block of `stride` frames of rescaled time: log-mean-exp of the block
    lws = {
        key: [_block_log_mean_exp(p["bias_kj"] / kT_kj - c, stride) for p in prod]
        for key, c in shifts.items()
    }
    lw = np.concatenate(lws["transition"])
    sim_ns = len(phi) * float(cfg["save_ps"]) / 1000.0
    rescaled_ns = {
        k: float(np.exp(np.concatenate(v)).sum()) * frame / 1000.0 for k, v in lws.items()
    }
    n_trans = [transitions(p["phi"], cfg) for p in prod]
    n_trans_all = [transitions(np.asarray(r["phi"]), cfg) for r in runs]
    # the data for mlcolvar's DeepTICA (benchmarks/deeptica_biased_alanine.py)
    np.savez(
        out / "biased_alanine_data.npz",
        features=np.concatenate(feats),
        time_ps=np.concatenate([np.arange(len(f)) * frame for f in feats]),
        run=np.concatenate([np.full(len(f), k) for k, f in enumerate(feats)]),
        log_weights=lw,
        log_weights_rbias=np.concatenate(lws["rbias"]),
        lag_ps=float(cfg["lag_ps"]),
        frame_ps=frame,
        hidden=np.asarray(cfg["hidden"]),
        r=int(cfg["r"]),
        epochs=int(cfg["epochs"]),
        batch_size=int(cfg["batch_size"]),
    )
    fits: dict[str, list[dict[str, float]]] = {k: [] for k in _FITS}
    models: dict[str, Any] = {}
    with torch_threads(1 if quick else 2):
        for seed in range(n_seeds):
            for key in _FITS:
                weights = None if key == "unweighted" else lws[key]
                op, ts_ps, secs = _fit(feats, weights, cfg, seed)
                fits[key].append({"seed": seed, "timescale_ns": ts_ps / 1000.0, "seconds": secs})
                if seed == 0:
                    models[key] = op
                if progress:
                    print(f"{key} fit, seed {seed}: slowest {ts_ps / 1000:.3g} ns ({secs:.0f} s)")
        # the data's spread: seed 0 on each half of the runs
        half = len(feats) // 2
        halves: dict[str, list[float]] = {}
        for key in ("transition", "unweighted"):
            for part in (slice(0, half), slice(half, None)):
                weights = None if key == "unweighted" else lws[key][part]
                ts_ps = _fit(feats[part], weights, cfg, 0)[1]
                halves.setdefault(key, []).append(ts_ps / 1000.0)
        if progress:
            print(f"halves of the runs: {halves} ns")
    x = np.concatenate(feats)
    w = np.exp(lw - lw.max())
    phi_fit = np.concatenate([p["phi"][::stride] for p in prod])
    psi_fit = np.concatenate([p["psi"][::stride] for p in prod])
    fig_models = {"weighted": models["transition"], "unweighted": models["unweighted"]}
    _figure(out, cfg, {"phi": phi_fit, "psi": psi_fit, "x": x, "lw": lw}, fig_models)
    ref, ref_std = REFERENCE_SLOWEST_NS.get(float(cfg["lag_ps"]), REFERENCE_SLOWEST_NS[1000.0])
    command = "dpnets reproduce biased-alanine" + (" --quick" if quick else "")
    command += f" --seeds {n_seeds}" if seeds is not None else ""
    rows = [
        [
            "reference: reversible MSM, 24x24 (φ, ψ), 1.92 µs unbiased",
            "-",
            f"{ref:.3g} ± {ref_std:.2g}",
            "-",
            "-",
            "dpnets reproduce alanine-dipeptide (benchmarks/results/alanine_dipeptide)",
        ]
    ]
    for key in _FITS:
        ts = np.asarray([f["timescale_ns"] for f in fits[key]])
        rows.append(
            [
                "dpnets DPNet + TransferOperator",
                _FITS[key],
                mean_std(ts),
                f"{100 * (float(ts.mean()) / ref - 1):+.0f}%",
                str(len(ts)),
                command,
            ]
        )
    rows += _deeptica_rows(out, ref)
    w_full = np.exp(beta_v - beta_v.max())
    dg = _delta_g_kcal(phi, w_full, kT_kcal)
    dg_raw = _delta_g_kcal(phi, np.ones_like(phi), kT_kcal)
    header = (
        f"Alanine dipeptide (vacuum, 400 K), well-tempered metadynamics on ψ only (bias factor "
        f"{cfg['bias_factor']:g}, {cfg['height_kj']:g} kJ/mol every "
        f"{float(cfg['pace_steps']) * float(cfg['timestep_fs']) / 1000:g} ps, σ = "
        f"{cfg['sigma_rad']:g} rad, {cfg['build_ps']:g} ps build), then {cfg['prod_ps']:g} ps "
        f"under the static final bias; {len(runs)} runs, production only: {sim_ns:.4g} ns "
        f"simulated, {sum(n_trans)} φ transitions in production ({sum(n_trans_all)} with the "
        f"builds). Log-weights β(V − c): β c = {shifts['transition']:.4g} (V vanishes on "
        f"average over the frames in the φ barrier regions; {rescaled_ns['transition']:.4g} ns "
        f"of rescaled time) or {shifts['rbias']:.4g} (mean weight 1, metad.rbias; "
        f"{rescaled_ns['rbias']:.4g} ns). Features [sin φ, cos φ, sin ψ, cos ψ] every "
        f"{frame:g} ps; lag {cfg['lag_ps']:g} ps (rescaled time when weighted, simulation time "
        f"when not); MLP 4-{'-'.join(map(str, cfg['hidden']))}-{cfg['r']}. ΔG(C7ax − C7eq) "
        f"reweighted: {dg:.3g} kcal/mol (reference 2.19 ± 0.19; raw biased frames: "
        f"{dg_raw:.3g}). Spread over the data: the same fits (seed 0) on each half of the runs "
        f"give {halves['transition'][0]:.3g} and {halves['transition'][1]:.3g} ns with the "
        f"weights (transition), {halves['unweighted'][0]:.3g} and "
        f"{halves['unweighted'][1]:.3g} ns without.\n\n"
    )
    table = header + markdown_table(
        ["method", "weights", "slowest timescale (ns)", "error", "seeds", "command"], rows
    )
    payload = {
        "experiment": "biased-alanine",
        "mode": "quick" if quick else "full",
        "command": command,
        "config": cfg,
        "reference_slowest_ns": [ref, ref_std],
        "log_weight_shift_beta_c": shifts,
        "production_ns_simulated": sim_ns,
        "production_ns_rescaled": rescaled_ns,
        "acceleration": {k: v / sim_ns for k, v in rescaled_ns.items()},
        "phi_transitions_production_per_run": n_trans,
        "phi_transitions_with_build_per_run": n_trans_all,
        "reweighting_ess": float(w.sum() ** 2 / (w**2).sum()),
        "delta_g_kcal_reweighted": dg,
        "delta_g_kcal_raw": dg_raw,
        "fits": fits,
        "halves_of_the_runs_seed0_ns": halves,
        "simulation_s": t_sim,
        "wall_s": time.perf_counter() - t0,
    }
    write_results(out, table, jsonable(payload))
    return table
