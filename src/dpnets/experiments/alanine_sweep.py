"""Alanine dipeptide: the slowest implied timescale against the lag and ``r``, budget-matched.

``dpnets reproduce alanine-r-lag`` (:func:`run`) asks, on the data and settings of
``dpnets reproduce alanine-dipeptide`` (:mod:`dpnets.experiments.alanine_dipeptide`, whose
trajectories it reads from the cache), whether a representation reproduces the reference
MSM's slowest implied timescale, flat in the lag, when every trained method gets the same
number of gradient steps:

* every trained method (DPNets-relaxed, DPNets ``P^gamma``, VAMPNets; the SchNet encoder) gets
  DPNets-relaxed's budget of the main experiment (the same pairs and epochs, counted by a hook
  on the optimiser) at each ``r`` and seed;
* each learned feature map (plus the constant) is held fixed and the operator refitted at every
  lag on all trajectories and on bootstrap resamples of whole trajectories;
* Nyström-PCR/RRR at the same ``r`` and the reversible MSM on (phi, psi) with the same
  resamples stand beside them; the held-out VAMP-2 score picks an ``r`` per method blindly.

Outputs in ``out``: ``table.md``, ``results.json``, ``its_r.png`` and ``fits.jsonl`` (each
fit as it finishes). The fits run in parallel processes (``workers``, :mod:`dpnets.parallel`)
that can share one GPU; nothing is simulated unless ``simulate=True``. Issue 18's study;
results in ``benchmarks/results/alanine_dipeptide/r_lag/``.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dpnets.experiments import alanine_dipeptide as ala
from dpnets.experiments._common import jsonable, markdown_table, pyplot, write_results
from dpnets.parallel import run_jobs
from dpnets.spectral import prepend_ones

__all__ = ["run", "CONFIG", "QUICK_CONFIG", "NN_METHODS", "NYSTROM_METHODS"]

#: Methods of :func:`run` that train the SchNet encoder, and the Nyström baselines.
NN_METHODS: tuple[str, ...] = ("DPNets-relaxed", "DPNets (P^γ)", "VAMPNets")
NYSTROM_METHODS: tuple[str, ...] = ("Nyström-PCR", "Nyström-RRR")

#: :func:`run` on the full ensemble: every setting of the main experiment's
#: :data:`dpnets.experiments.alanine_dipeptide.CONFIG` (lr, gamma, batch, training lag, Nyström
#: sizes) is kept; every trained method gets DPNets-relaxed's budget (``n_pairs`` pairs,
#: ``epochs`` epochs, 10% of the pairs for best-epoch selection).
CONFIG: dict[str, Any] = {
    **ala.CONFIG,
    "r_values": (4, 8, 16, 32),
    "seeds": 3,
    "bootstrap": 30,  # resamples of whole trajectories (features fixed, operator refitted)
    "confidence": 0.95,  # percentile interval of the bootstrap
    "goal_from_ps": 100.0,  # the goal: within goal_rel of the MSM at every lag >= this
    "goal_rel": 0.05,
}

#: ``run(quick=True)``: two of the ``--quick`` trajectories (1.5 ns each, cached by
#: ``dpnets reproduce alanine-dipeptide --quick``), a few gradient steps, 4 resamples: a test
#: of the pipeline.
QUICK_CONFIG: dict[str, Any] = {
    **CONFIG,
    **{k: ala.QUICK_CONFIG[k] for k in ("run_ns", "lag_ps", "its_lags_ps")},
    "n_runs": 2,
    "heldout_every": 2,
    "n_pairs": 600,
    "epochs": 2,
    "nys_centers": 100,
    "nys_pairs": 600,
    "r_values": (2, 4),
    "seeds": 2,
    "bootstrap": 4,
}

#: per-process memo of the loaded ensemble (each worker of :func:`run` loads it once)
_SWEEP_DATA: dict[str, dict[str, Any]] = {}


def _sweep_data(cfg: dict[str, Any], simulate: bool) -> dict[str, Any]:
    """The ensemble of ``cfg`` from the cache (memoised per process), its split, dihedrals and
    (on first use, see :func:`_sweep_task`) pairwise distances. ``simulate=False``: a
    trajectory missing from the cache raises ``FileNotFoundError`` instead of being
    simulated (the full ensemble takes 2 CPU-core-hours)."""
    import dpnets.systems.alanine as alanine
    from dpnets.systems._utils import cache_dir

    runs, common = ala.ensemble_runs(cfg)
    # memoised per cache folder: another $DPNETS_CACHE is another cache
    key = json.dumps([runs, common, int(cfg["heldout_every"]), str(cache_dir())], sort_keys=True)
    if key in _SWEEP_DATA:
        return _SWEEP_DATA[key]
    cache = True if simulate else "only"
    trajs = alanine.simulate_alanine_ensemble(runs, workers=1, **{**common, "cache": cache})
    train, held_out = ala.split_trajectories(len(trajs), int(cfg["heldout_every"]))
    data = {
        "positions": [t.positions for t in trajs],
        "z": trajs[0].atomic_numbers,
        "kT": trajs[0].kT,
        "phis": [t.phi for t in trajs],
        "psis": [t.psi for t in trajs],
        "train": train,
        "held_out": held_out,
        "cache_files": [
            Path(t.params["cache"]).name if t.params.get("cache") else None for t in trajs
        ],
        "dist": None,
    }
    _SWEEP_DATA[key] = data
    return data


def _sweep_task(task: dict[str, Any]) -> dict[str, Any]:
    """One fit of :func:`run`: ``task["method"]`` at rank ``task["r"]`` with seed
    ``task["seed"]``, then its timescales against the lag with bootstrap samples
    (:func:`dpnets.experiments.alanine_dipeptide.evaluate_features`), the held-out VAMP-2
    score and, for a trained method, the number of gradient (optimiser) steps actually
    taken."""
    t0 = time.perf_counter()
    cfg = {**task["cfg"], "r": int(task["r"])}
    data = _sweep_data(cfg, task["simulate"])
    method, seed = task["method"], int(task["seed"])
    phi_all = np.concatenate(data["phis"])
    out: dict[str, Any] = {"method": method, "r": cfg["r"], "seed": seed}
    if method in NN_METHODS:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        steps = [0]

        def count(*_: Any) -> None:
            steps[0] += 1

        handle = register_optimizer_step_post_hook(count)  # every optimiser step counts
        try:
            net, t_fit = ala.train_network(
                method,
                data["positions"],
                data["z"],
                data["train"],
                cfg,
                seed,
                task["device"],
                False,
            )
        finally:
            handle.remove()
        feats = [prepend_ones(net.transform(p, batch_size=4096)) for p in data["positions"]]
        all_feats = np.concatenate(feats)
        res = ala.evaluate_features(
            method,
            feats,
            lambda m: m.eigenfunctions(all_feats),
            phi_all,
            data["kT"],
            data["held_out"],
            cfg,
        )
        val = net.history_.get("val_score") or []
        out.update(
            steps=steps[0],
            train_s=t_fit,
            best_epoch=int(np.nanargmax(val)) if len(val) and np.any(np.isfinite(val)) else None,
            history=net.history_,
        )
    elif method in NYSTROM_METHODS:
        if data["dist"] is None:
            data["dist"] = [ala.pairwise_distances(p) for p in data["positions"]]
        est = method.split("-")[1].lower()
        res = ala.fit_nystrom(
            est, data["dist"], data["train"], data["held_out"], phi_all, data["kT"], cfg, seed
        )
        out.update(steps=None, train_s=res["train_s"])
    else:  # pragma: no cover - checked by run
        raise ValueError(method)
    keep = (
        "score",
        "score_all",
        "slowest_ps",
        "its_curve_ps",
        "its_lower_ps",
        "its_upper_ps",
        "its_samples_ps",
        "delta_g",
        "eigvals",
    )
    out.update({k: res[k] for k in keep})
    out["wall_s"] = time.perf_counter() - t0
    return out


def _msm_scan(data: dict[str, Any], cfg: dict[str, Any], n_boot: int) -> dict[str, Any] | None:
    """The reference MSM's slowest timescale at every lag of ``cfg`` and its bootstrap samples.

    :func:`dpnets.systems.alanine.msm_reference` on all trajectories and on ``n_boot``
    resamples of whole trajectories, drawn as :func:`dpnets.validation.implied_timescales`
    draws them with ``seed=0`` (the same resamples as the learned features'). Cached next to
    the trajectories (``alanine-msm-scan-*.npz``), so that a machine without deeptime reads
    it; None (with a warning) when it is neither cached nor computable.
    """
    import warnings

    from dpnets.systems._utils import cache_path, read_cache, write_cache
    from dpnets.systems.alanine import msm_reference
    from dpnets.validation import bootstrap_trajectories

    dt = float(cfg["frame_ps"])
    lags = tuple(int(v) for v in cfg["_its_lags"])
    params = {
        "version": 1,
        "trajectories": data["cache_files"],
        "lags": list(lags),
        "dt_ps": dt,
        "n_bins": int(cfg["msm_bins"]),
        "n_bootstrap": int(n_boot),
        "seed": 0,
    }
    path = cache_path("alanine-msm-scan", params) if all(data["cache_files"]) else None
    f = None if path is None else read_cache(path, ("timescales", "samples"))
    if f is not None:
        ts, samples, source = f["timescales"], f["samples"], str(path.name)
    else:
        try:
            import deeptime  # noqa: F401
        except ImportError:
            warnings.warn(
                f"no MSM reference: deeptime is not installed and {path} is not cached",
                RuntimeWarning,
                stacklevel=2,
            )
            return None

        def msm(trajs: list[np.ndarray]) -> np.ndarray:
            ref = msm_reference(
                [t[:, 0] for t in trajs],
                [t[:, 1] for t in trajs],
                dt_ps=dt,
                kT=data["kT"],
                lags=lags,
                n_bins=int(cfg["msm_bins"]),
            )
            return np.asarray(ref["timescales_ps"], dtype=float)

        units = [np.stack([a, b], axis=1) for a, b in zip(data["phis"], data["psis"], strict=True)]
        ts = msm(units)
        samples = np.empty((0, len(lags)))
        if n_boot:
            samples = bootstrap_trajectories(
                units, lambda t: msm(t)[:, 0], n_boot, n_blocks=10, seed=0
            )
        if path is not None:
            write_cache(path, timescales=ts, samples=samples)
        source = "computed"
    return {
        "lags_ps": [lag * dt for lag in lags],
        "timescales_ps": np.asarray(ts, dtype=float),
        "samples_ps": np.asarray(samples, dtype=float),
        "source": source,
    }


def _sweep_cell(curves: np.ndarray, samples: np.ndarray | None, confidence: float) -> dict:
    """Across-seed mean and std of the slowest timescale at each lag and the percentile
    interval of the seeds' pooled bootstrap samples."""
    import warnings

    from dpnets.validation import percentile_interval

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN lags
        mean = np.nanmean(curves, axis=0)
        std = np.nanstd(curves, axis=0, ddof=1) if len(curves) > 1 else np.zeros(curves.shape[1])
    lo = hi = np.full(curves.shape[1], np.nan)
    if samples is not None and len(samples):
        lo, hi = percentile_interval(samples, confidence)
    return {"mean": mean, "std": std, "lower": lo, "upper": hi}


def _plot_sweep(path: Path, summary: dict, msm: dict | None, lags_ps: list, sc: dict) -> None:
    """``its_r.png``: the slowest timescale against the lag, one panel per ``r``: every
    method's seed mean with its pooled bootstrap band, and the MSM with its band and ±5%."""
    plt = pyplot()
    if plt is None:  # pragma: no cover - optional dependency
        return
    r_values = sc["r_values"]
    fig, axes = plt.subplots(
        1, len(r_values), figsize=(3.6 * len(r_values), 3.4), squeeze=False, sharey=True
    )
    lags = np.asarray(lags_ps, dtype=float)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, r in zip(axes[0], r_values, strict=True):
        if msm is not None:
            m = msm["cell"]
            ax.plot(lags, m["mean"] / 1000, "k-o", ms=3, lw=1.6, label="MSM (φ, ψ)")
            ax.fill_between(lags, m["lower"] / 1000, m["upper"] / 1000, color="0.6", alpha=0.3)
            for f in (1 - sc["goal_rel"], 1 + sc["goal_rel"]):
                ax.plot(lags, f * m["mean"] / 1000, "k:", lw=0.7)
        for k, (name, by_r) in enumerate(summary.items()):
            c = by_r[r]
            ax.plot(lags, c["mean"] / 1000, "-s", color=colors[k % 10], ms=2.5, lw=1.1, label=name)
            ax.fill_between(
                lags, c["lower"] / 1000, c["upper"] / 1000, color=colors[k % 10], alpha=0.15, lw=0
            )
        ax.set_xscale("log")
        ax.set_xlabel("lag (ps)")
        ax.set_title(f"r = {r}", fontsize=9)
    # spurious eigenvalues near 1 give timescales of 1e5 ns and more: keep the scale of the
    # reference (or of the typical means) and let such curves leave the plot
    if msm is not None:
        top = 1.5 * float(np.max(msm["cell"]["upper"])) / 1000
    else:
        means = np.concatenate([c["mean"] for by_r in summary.values() for c in by_r.values()])
        top = 2.0 * float(np.nanpercentile(means[np.isfinite(means)], 75)) / 1000
    axes[0, 0].set_ylim(0, top)
    axes[0, 0].set_ylabel("slowest implied timescale (ns)")
    axes[0, -1].legend(fontsize=6, loc="lower right")
    fig.suptitle(
        f"Alanine dipeptide: slowest timescale vs lag (seed mean; bands: "
        f"{100 * sc['confidence']:g}% bootstrap over trajectories; dotted: MSM ±"
        f"{100 * sc['goal_rel']:g}%; off-scale values leave the plot)",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(
    *,
    quick: bool = False,
    seeds: int | None = None,
    out: str | Path = Path("dpnets-out") / "alanine-r-lag",
    device: str | None = None,
    progress: bool = True,
    workers: int = 1,
    r_values: tuple[int, ...] | list[int] | None = None,
    methods: tuple[str, ...] | list[str] = NN_METHODS + NYSTROM_METHODS,
    lags_ps: tuple[float, ...] | list[float] | None = None,
    n_pairs: int | None = None,
    epochs: int | None = None,
    bootstrap: int | None = None,
    confidence: float | None = None,
    simulate: bool = False,
    config: dict[str, Any] | None = None,
) -> str:
    """Slowest implied timescale against the lag for every method and rank ``r``, budget-matched.

    Every trained method (DPNets-relaxed, DPNets ``P^gamma``, VAMPNets; SchNet encoder) is
    trained with the same data and number of gradient steps (``n_pairs`` random lagged pairs of
    the training trajectories, 10% of them for best-epoch selection, ``epochs`` epochs of
    ``batch_size``; by default DPNets-relaxed's budget in
    :func:`dpnets.experiments.alanine_dipeptide.run`), with the experiment's lr, ``gamma``,
    batch and training lag, at each ``r`` and seed. Each learned feature map (plus the
    constant) is then held fixed and :class:`dpnets.TransferOperator` is refitted at every lag
    on all trajectories, and on ``bootstrap`` resamples of whole trajectories (with
    replacement; :func:`dpnets.validation.implied_timescales`). Nyström-PCR/RRR at the same
    ``r`` and the reversible MSM on (phi, psi) with the same resamples stand beside them. No
    setting is chosen here by looking at the reference.

    Parameters
    ----------
    quick : bool, default False
        :data:`QUICK_CONFIG`: two 1.5 ns trajectories and a few steps (a test).
    seeds : int, optional
        Seeds ``0 .. seeds - 1`` of each (method, r) (network initialisation, training pairs,
        Nyström centres); default 3 (quick: 2).
    out : path
        Output folder: ``table.md``, ``results.json``, ``its_r.png``, and ``fits.jsonl`` (each
        fit's numbers as soon as it finishes, so that a run cut short keeps them).
    device : str, optional
        Torch device of the training (default: CUDA if available).
    progress : bool, default True
        Print a line when the run starts and one per finished fit (the fits never show
        progress bars: several run at once).
    workers : int, default 1
        Processes running the fits at once (:func:`dpnets.parallel.run_jobs`: ``spawn``; each
        loads the cached ensemble and uses one torch and BLAS thread; with CUDA they share the
        GPU). With 1 the fits run in this process, one after the other. The results have the
        same structure either way.
    r_values : sequence of int, optional
        Feature dimensions (default ``(4, 8, 16, 32)``; quick: ``(2, 4)``).
    methods : sequence of str
        Among :data:`NN_METHODS` and :data:`NYSTROM_METHODS`.
    lags_ps : sequence of float, optional
        Lags of the timescale curves (default: the experiment's, 10 ps to 1 ns).
    n_pairs, epochs : int, optional
        The common training budget (default :data:`CONFIG`'s ``n_pairs`` and ``epochs``, those
        of DPNets-relaxed in the main experiment); the steps taken are recorded per fit.
    bootstrap : int, optional
        Resamples of whole trajectories (default 30; quick: 4).
    confidence : float, optional
        Coverage of the percentile intervals (default 0.95).
    simulate : bool, default False
        Simulate trajectories missing from the cache (2 CPU-core-hours for the full
        ensemble); by default a cache miss raises ``FileNotFoundError``, naming the
        ``dpnets reproduce alanine-dipeptide`` run that fills the cache.
    config : dict, optional
        Overrides of :data:`CONFIG` / :data:`QUICK_CONFIG`.

    Returns
    -------
    str
        The markdown table (``table.md``).
    """
    t_start = time.perf_counter()
    cfg = {**(QUICK_CONFIG if quick else CONFIG), **(config or {})}
    for key, value in (
        ("r_values", r_values),
        ("seeds", seeds),
        ("its_lags_ps", lags_ps),
        ("n_pairs", n_pairs),
        ("epochs", epochs),
        ("bootstrap", bootstrap),
        ("confidence", confidence),
    ):
        if value is not None:
            cfg[key] = value
    r_list = [int(r) for r in cfg["r_values"]]
    n_seeds = int(cfg["seeds"])
    methods = list(methods)
    bad = [m for m in methods if m not in NN_METHODS + NYSTROM_METHODS]
    if bad or not methods or not r_list or n_seeds < 1 or int(workers) < 1:
        raise ValueError(
            f"the r x lag sweep needs methods among {NN_METHODS + NYSTROM_METHODS} (got "
            f"{methods}), r_values (got {r_list}), seeds >= 1 (got {n_seeds}) and workers >= 1 "
            f"(got {workers})"
        )
    dt = float(cfg["frame_ps"])
    # the same budget for every trained method: the main run's DPNets-relaxed pairs and epochs
    cfg["n_pairs_baseline"], cfg["epochs_baseline"] = cfg["n_pairs"], cfg["epochs"]
    cfg["_lag"] = lag = max(int(round(cfg["lag_ps"] / dt)), 1)
    cfg["_its_lags"] = [max(int(round(v / dt)), 1) for v in cfg["its_lags_ps"]]
    cfg["_its_samples"] = True
    n_boot = int(cfg["bootstrap"])
    if not 0.0 < float(cfg["confidence"]) < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {cfg['confidence']}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    try:  # here first: a cache miss fails before any training
        data = _sweep_data(cfg, simulate)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            "the r x lag sweep reads its trajectories from the cache: run `dpnets reproduce "
            f"alanine-dipeptide{' --quick' if quick else ''}` first to fill it ({err})"
        ) from err
    # costliest first (larger r; VAMPNets has two encoders), the Nyström fits (CPU only)
    # beside the trained ones of the same r: a short tail of small fits in the workers
    order = {m: k for k, m in enumerate(("VAMPNets", "DPNets (P^γ)", "DPNets-relaxed"))}
    nn = sorted((m for m in methods if m in NN_METHODS), key=order.__getitem__)
    kern = [m for m in methods if m in NYSTROM_METHODS]
    tasks = [
        {"method": m, "r": r, "seed": s, "cfg": cfg, "device": device, "simulate": simulate}
        for r in sorted(r_list, reverse=True)
        for m in nn + kern
        for s in range(n_seeds)
    ]
    fits: dict[tuple[str, int, int], dict] = {}

    log = out / "fits.jsonl"  # each fit as it finishes: kept if the run is cut short
    log.write_text("", encoding="utf-8")

    def report(res: dict) -> None:
        fits[(res["method"], res["r"], res["seed"])] = res
        with log.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(jsonable(res)) + "\n")
        if not progress:
            return
        steps = "" if res["steps"] is None else f"{res['steps']} steps, "
        print(
            f"[{len(fits):3d}/{len(tasks)} {time.perf_counter() - t_start:6.0f} s] "
            f"{res['method']} r={res['r']} seed={res['seed']}: {steps}fit {res['train_s']:.0f} s, "
            f"task {res['wall_s']:.0f} s; slowest ITS at {lag * dt:g} ps "
            f"{res['slowest_ps'] / 1000:.3g} ns, VAMP-2 held out {res['score']:.4g}",
            flush=True,
        )

    if progress:
        print(
            f"alanine r x lag sweep: {len(tasks)} fits on {workers} worker(s), device "
            f"{device or 'default'}; {len(data['positions'])} trajectories loaded from the cache",
            flush=True,
        )
    # the MSM first (minutes when it is not cached yet), then the fits, reported as they
    # finish; one torch and BLAS thread per worker process
    jobs = [partial(_msm_task, cfg, n_boot, simulate)]
    jobs += [partial(_sweep_task, task) for task in tasks]
    msm = None
    for index, res in run_jobs(jobs, workers=int(workers), threads=1, ordered=False):
        if index == 0:
            msm = res
        else:
            report(res)
    wall = time.perf_counter() - t_start
    return _sweep_write(
        out, cfg, methods, r_list, n_seeds, fits, msm, data, wall, device, workers, quick
    )


def _msm_task(cfg: dict[str, Any], n_boot: int, simulate: bool) -> dict[str, Any] | None:
    """:func:`_msm_scan` as a job of :func:`run` (in a worker process or in this one)."""
    return _msm_scan(_sweep_data(cfg, simulate), cfg, n_boot)


def _device_name(device: str | None) -> str:
    """The name of the training device (the GPU's, or the CPU's)."""
    import platform

    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:  # the CPU's model name on Linux
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return platform.processor() or platform.machine()


def _sweep_write(
    out: Path,
    cfg: dict[str, Any],
    methods: list[str],
    r_list: list[int],
    n_seeds: int,
    fits: dict[tuple[str, int, int], dict],
    msm: dict[str, Any] | None,
    data: dict[str, Any],
    wall: float,
    device: str | None,
    workers: int,
    quick: bool,
) -> str:
    """``table.md``, ``results.json`` and ``its_r.png`` of :func:`run`; returns the table.

    Besides the table, ``results.json`` holds per (method, r) the paired interval of the
    relative error, from the ratios of each resample's timescale to the MSM's on the same
    resample (the seeds pooled).
    """
    from dpnets.validation import percentile_interval

    dt = float(cfg["frame_ps"])
    lag = cfg["_lag"]
    conf = float(cfg["confidence"])
    goal_rel, goal_from = float(cfg["goal_rel"]), float(cfg["goal_from_ps"])
    lags_ps = [v * dt for v in cfg["_its_lags"]]
    n_lags = len(lags_ps)
    ref = np.full(n_lags, np.nan)
    if msm is not None:
        ref = np.asarray(msm["timescales_ps"], dtype=float)[:, 0]
        samples = msm["samples_ps"] if len(msm["samples_ps"]) else None
        msm["cell"] = _sweep_cell(ref[None], samples, conf)
    late = np.asarray(lags_ps) >= goal_from

    summary: dict[str, dict[int, dict[str, Any]]] = {}
    for method in methods:
        summary[method] = {}
        for r in r_list:
            runs = [fits[(method, r, s)] for s in range(n_seeds)]
            curves = np.array([[row[0] for row in f["its_curve_ps"]] for f in runs], dtype=float)
            pooled = [np.asarray(f["its_samples_ps"], dtype=float) for f in runs]
            pooled = [p for p in pooled if p.size]
            cell = _sweep_cell(curves, np.concatenate(pooled) if pooled else None, conf)
            rel = (cell["mean"] - ref) / ref
            # paired: the features' and the MSM's resamples draw the same trajectories
            paired = (np.nan, np.nan)
            if msm is not None and len(msm["samples_ps"]) and pooled:
                ratio = [
                    p / msm["samples_ps"] - 1 for p in pooled if p.shape == msm["samples_ps"].shape
                ]
                if ratio:
                    paired = percentile_interval(np.concatenate(ratio), conf)
            checked = late & np.isfinite(rel)
            scores = np.array([f["score"] for f in runs], dtype=float)
            cell.update(
                rel_err=rel,
                max_abs_rel_err_late=float(np.max(np.abs(rel[checked])))
                if checked.any()
                else float("nan"),
                goal_met=bool(checked.any() and np.all(np.abs(rel[checked]) <= goal_rel)),
                rel_err_paired_lower=paired[0],
                rel_err_paired_upper=paired[1],
                score_mean=float(scores.mean()),
                score_std=float(scores.std(ddof=1)) if len(scores) > 1 else 0.0,
                steps=sorted({f["steps"] for f in runs if f["steps"] is not None}),
                train_s_mean=float(np.mean([f["train_s"] for f in runs])),
            )
            summary[method][r] = cell

    def its_txt(mean: float, std: float, lo: float, hi: float, rel: float) -> str:
        if not np.isfinite(mean):
            return "n/a"
        txt = f"{mean / 1000:.3g}" + (
            f" ± {std / 1000:.2g}" if n_seeds > 1 and np.isfinite(std) else ""
        )
        if np.isfinite(lo):
            txt += f" [{lo / 1000:.3g}, {hi / 1000:.3g}]"
        return txt + (f" ({100 * rel:+.0f}%)" if np.isfinite(rel) else "")

    lag_cols = [f"{v:g} ps" for v in lags_ps]
    blocks = []
    if msm is not None:
        m = msm["cell"]
        row = [f"MSM {cfg['msm_bins']}x{cfg['msm_bins']} (φ, ψ)"] + [
            its_txt(m["mean"][i], float("nan"), m["lower"][i], m["upper"][i], float("nan"))
            for i in range(n_lags)
        ]
        blocks.append("### Reference\n\n" + markdown_table(["model", *lag_cols], [row]))
    else:
        blocks.append("### Reference\n\nno MSM reference (deeptime missing and not cached)")
    for method in methods:
        rows = []
        for r in r_list:
            c = summary[method][r]
            cells = [
                its_txt(c["mean"][i], c["std"][i], c["lower"][i], c["upper"][i], c["rel_err"][i])
                for i in range(n_lags)
            ]
            err = c["max_abs_rel_err_late"]
            rows.append(
                [
                    str(r),
                    *cells,
                    f"{c['score_mean']:.4g}" + (f" ± {c['score_std']:.2g}" if n_seeds > 1 else ""),
                    ", ".join(str(v) for v in c["steps"]) or "-",
                    f"{c['train_s_mean']:.0f}",
                    (f"{100 * err:.1f}%" if np.isfinite(err) else "n/a")
                    + (" ✓" if c["goal_met"] else ""),
                ]
            )
        head = [
            "r",
            *lag_cols,
            f"VAMP-2 held out ({lag * dt:g} ps)",
            "steps",
            "fit (s)",
            f"max \\|err\\| ≥ {goal_from:g} ps",
        ]
        blocks.append(f"### {method}\n\n" + markdown_table(head, rows))

    # the r each method would pick on the held-out score (never on the reference)
    picks = []
    for method in methods:
        best = max(r_list, key=lambda r, m=method: summary[m][r]["score_mean"])
        c = summary[method][best]
        err = c["max_abs_rel_err_late"]
        picks.append(
            f"- {method}: r = {best} (held-out VAMP-2 {c['score_mean']:.4g}); max |err| from "
            f"{goal_from:g} ps {100 * err:.1f}%: goal {'met' if c['goal_met'] else 'not met'}; "
            f"met at r = {[r for r in r_list if summary[method][r]['goal_met']] or 'none'}"
        )
    total_ns = sum(len(p) for p in data["positions"]) * dt / 1000
    steps_all = sorted(
        {v for m in methods if m in NN_METHODS for r in r_list for v in summary[m][r]["steps"]}
    )
    head = (
        f"Alanine dipeptide, slowest implied timescale (ns) against the lag, "
        f"{'quick' if quick else 'full'} run: {len(data['positions'])} trajectories "
        f"({total_ns:g} ns), {len(data['train'])} for training, {len(data['held_out'])} held out "
        f"(score only). Trained methods (SchNet encoder, training lag {lag * dt:g} ps, lr "
        f"{cfg['lr']:g}, γ = {cfg['gamma']:g}, batch {cfg['batch_size']}): the same budget each, "
        f"{cfg['n_pairs']} pairs (10% for best-epoch selection) × {cfg['epochs']} epochs = "
        f"{', '.join(str(v) for v in steps_all) or '-'} gradient steps. Nyström: "
        f"{cfg['nys_centers']} centres, {cfg['nys_pairs']} pairs. Cell: mean ± std over "
        f"{n_seeds} seed(s) [{100 * conf:g}% percentile interval of {cfg['bootstrap']} "
        f"bootstrap resamples of whole trajectories, the features fixed and the operator "
        f"refitted, pooled over the seeds] (relative error of the mean against the MSM at the "
        f"same lag). Goal: within {100 * goal_rel:g}% of the MSM at every lag ≥ {goal_from:g} ps "
        f"(✓). Wall time {wall:.0f} s on {workers} worker(s)."
    )
    table = (
        head
        + "\n\n"
        + "\n\n".join(blocks)
        + "\n\nChosen on the held-out VAMP-2 score at the training lag (not on the reference):\n\n"
        + "\n".join(picks)
    )

    _plot_sweep(
        out / "its_r.png",
        summary,
        msm,
        lags_ps,
        {"r_values": r_list, "goal_rel": goal_rel, "confidence": conf},
    )
    method_rank = {m: k for k, m in enumerate(methods)}
    payload = {
        "settings": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items() if k[0] != "_"},
            "methods": methods,
            "r_values": r_list,
            "seeds": n_seeds,
            "device": device,
            "workers": int(workers),
            "val_fraction": 0.1,
            "interval": f"{100 * conf:g}% percentile, bootstrap pooled over seeds",
        },
        "lags_ps": lags_ps,
        "steps": steps_all,
        "msm": None
        if msm is None
        else {
            "lags_ps": msm["lags_ps"],
            "timescales_ps": msm["timescales_ps"],
            "slowest_ps": ref,
            "lower_ps": msm["cell"]["lower"],
            "upper_ps": msm["cell"]["upper"],
            "samples_ps": msm["samples_ps"],
            "source": msm["source"],
        },
        "summary": {
            m: {
                str(r): {
                    "mean_ps": c["mean"],
                    "std_ps": c["std"],
                    "lower_ps": c["lower"],
                    "upper_ps": c["upper"],
                    "rel_err": c["rel_err"],
                    "rel_err_paired_lower": c["rel_err_paired_lower"],
                    "rel_err_paired_upper": c["rel_err_paired_upper"],
                    "max_abs_rel_err_late": c["max_abs_rel_err_late"],
                    "goal_met": c["goal_met"],
                    "score_heldout_mean": c["score_mean"],
                    "score_heldout_std": c["score_std"],
                    "steps": c["steps"],
                    "train_s_mean": c["train_s_mean"],
                }
                for r, c in by_r.items()
            }
            for m, by_r in summary.items()
        },
        "fits": [fits[k] for k in sorted(fits, key=lambda k: (method_rank[k[0]], k[1], k[2]))],
        "wall_s": wall,
        "device_name": _device_name(device),
        "quick": quick,
    }
    write_results(out, table, payload)
    return table
