"""Alanine dipeptide with a SchNet encoder: timescales and free energy (paper Table 2, Fig. 4).

Stands in for the paper's Chignolin experiment (Sec. 5, App. F), whose data is not public:
alanine dipeptide in vacuum is simulated with OpenMM (:mod:`dpnets.systems.alanine`: Amber14,
400 K, Langevin, 4 fs with hydrogen-mass repartitioning, frames every 1 ps), the 10 heavy
atoms' positions (Å) are the states, and

* **DPNets-relaxed** (``S^gamma``, Eq. 9, ``gamma = 0.01`` as App. F) trains
  :class:`dpnets.nn.schnet.SchNetEncoder` (3 interactions, 64 channels, 20 Gaussians, 5 Å
  cutoff, mean readout, ``r = 16``) on lagged pairs; :class:`dpnets.TransferOperator` (Eq. 15)
  on the learned features (plus the constant) gives eigenvalues (Eq. 16), implied timescales
  ``-lag / ln |lambda|`` against the lag, the free-energy surface ``-kT ln p`` over the two
  slowest right eigenfunctions, and the eigenfunctions drawn over the Ramachandran plane;
* baselines: Nyström kernel regression (PCR and RRR, Gaussian kernel on the 45 pairwise
  heavy-atom distances, a few thousand centres, rank 16; Meanti et al. 2023), VAMPNets
  (separate lagged lobe) and DPNets with the projection score ``P^gamma`` (Eq. 7), with the
  same SchNet encoder;
* the reference: a Markov state model on a 24 x 24 grid of the backbone dihedrals (phi, psi)
  (:func:`dpnets.systems.alanine.msm_reference`) with implied timescales against the lag
  and the free-energy difference ``Delta G`` between the C7ax/alpha_L (``0 < phi < 120``) and
  C7eq/beta basins from its stationary populations. The dihedrals are never a model input.

Protocol. The representations are trained on pairs drawn at random from the first 80% of the
trajectory (a random 10% of them held out for best-epoch selection); the score columns are the
VAMP-2 score (centred features, ``+1`` for the constant; comparable across methods, all with
``r = 16``) of the learned features at the training lag on the whole trajectory and on the
held-out last 20%. The operator regression on a fixed representation (cheap) uses the whole
trajectory, as the MSM does; the table's timescale is at the training lag. Nyström timescales
against the lag come from the same regression on their fixed features (plus the constant).
``Delta G`` of a method: frames are split at the density minimum of its slowest right
eigenfunction between its two main modes (the barrier of its 1-D free energy), the side richer
in ``0 < phi < 120`` is called C7ax/alpha_L (the dihedrals only name the sides), and
``Delta G = -kT ln(p_B / p_A)`` from the frame populations.

Outputs in ``out``: ``table.md``, ``results.json``, ``its.png`` (timescales vs lag),
``fes.png`` (free-energy surfaces), ``eigenfunctions.png`` (over (phi, psi)).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpnets.experiments._common import markdown_table, pyplot, write_results

__all__ = ["run", "CONFIG", "QUICK_CONFIG"]

#: Full run (about 17 min on one CPU thread, plus ~17 min to simulate 200 ns the first time).
CONFIG: dict[str, Any] = {
    # simulation (dpnets.systems.alanine.simulate_alanine_dipeptide)
    "n_frames": 200_000,
    "temperature": 400.0,
    "solvent": "vacuum",
    "sim_seed": 0,
    # learning
    "lag": 500,  # frames (ps); the MSM timescale is converged from 10 ps on
    "train_fraction": 0.8,
    "r": 16,
    "cutoff": 5.0,  # Å
    "gamma": 0.01,  # App. F metric-loss coefficient
    "lr": 3e-3,  # 1e-3 gave 4.1 ns for DPNets-relaxed after 30 epochs, 3e-3 gives 6.2 ns
    "batch_size": 512,
    "n_pairs": 32_000,  # random training pairs for DPNets-relaxed
    "epochs": 30,
    "n_pairs_baseline": 8_000,  # VAMPNets and DPNets (P^gamma)
    "epochs_baseline": 8,
    # Nyström kernel regression on pairwise heavy-atom distances
    "nys_centers": 2000,
    "nys_pairs": 20_000,
    "nys_ridge": 1e-6,
    # analysis
    "its_lags": (10, 20, 50, 100, 200, 500, 1000),
    "msm_bins": 24,
    "fes_bins": 60,
    "scatter_points": 12_000,
}

#: ``--quick``: 6 ns, a few thousand pairs, two epochs (a smoke test; 6 ns at 400 K hold
#: few or no phi flips, so Delta G and the slow timescale are not meaningful).
QUICK_CONFIG: dict[str, Any] = {
    **CONFIG,
    "n_frames": 6_000,
    "lag": 20,
    "n_pairs": 2_000,
    "epochs": 2,
    "n_pairs_baseline": 1_000,
    "epochs_baseline": 1,
    "nys_centers": 500,
    "nys_pairs": 3_000,
    "its_lags": (5, 10, 20, 50, 100),
    "scatter_points": 5_000,
}


def pairwise_distances(positions: np.ndarray) -> np.ndarray:
    """The ``n (n - 1) / 2`` interatomic distances of every frame, ``(T, n_pairs)`` float32."""
    x = np.asarray(positions, dtype=np.float32)
    i, j = np.triu_indices(x.shape[1], k=1)
    return np.linalg.norm(x[:, i] - x[:, j], axis=-1)


def _random_pairs(
    data: np.ndarray, lag: int, stop: int, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random pairs ``(x_t, x_{t+lag})`` with ``t + lag < stop``."""
    idx = np.sort(rng.choice(stop - lag, size=min(n, stop - lag), replace=False))
    return data[idx], data[idx + lag]


def _with_constant(f: np.ndarray) -> np.ndarray:
    return np.hstack([np.ones((f.shape[0], 1)), np.asarray(f, dtype=np.float64)])


def _slowest(model: Any, lag_ps: float) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (decreasing modulus) and implied timescales (ps) skipping the top one."""
    ev = model.eig()
    its = model.implied_timescales(lag_time=lag_ps)
    return ev, its


def _vamp2(fx: np.ndarray, fy: np.ndarray) -> float:
    import torch

    from dpnets.scores import vamp_score

    with torch.no_grad():
        return float(vamp_score(torch.as_tensor(fx), torch.as_tensor(fy), 2))


def _split_delta_g(
    f1: np.ndarray, phi: np.ndarray, kT: float, bins: int = 200
) -> tuple[float, float]:
    """``Delta G`` from a split of the slowest eigenfunction at its density minimum.

    The second mode is the peak separated from the highest one by the deepest valley of the
    smoothed histogram (modes of fewer than ``max(5, 0.01%)`` frames per bin are ignored); a
    valley less than a factor ``e`` below that peak counts as noise.
    Returns ``(delta_g, threshold)``; ``nan`` when the eigenfunction has a single mode or no
    frame is in the C7ax/alpha_L basin.
    """
    from dpnets.systems.alanine import basin_b_mask

    f1 = np.asarray(f1, dtype=np.float64)
    lo, hi = float(f1.min()), float(f1.max())
    if not hi > lo:
        return float("nan"), float("nan")
    h, edges = np.histogram(f1, bins=bins, range=(lo, hi))
    kernel = np.exp(-0.5 * (np.arange(-4, 5) / 1.5) ** 2)
    hs = np.convolve(h.astype(float), kernel / kernel.sum(), mode="same")
    peaks = [
        k
        for k in range(bins)
        if hs[k] > 0
        and hs[k] >= hs[max(k - 1, 0)]
        and hs[k] >= hs[min(k + 1, bins - 1)]
        and (k == 0 or hs[k] > hs[k - 1] or k == bins - 1 or hs[k] > hs[k + 1])
    ]
    if len(peaks) < 2:
        return float("nan"), float("nan")
    top = peaks[int(np.argmax(hs[peaks]))]
    min_height = max(5.0, 1e-4 * f1.size)  # a mode holds a few frames at least
    # second mode: the peak with the deepest valley between it and the main one
    best, depth = None, -np.inf
    for p in peaks:
        if p == top:
            continue
        a, b = sorted((p, top))
        valley = a + int(np.argmin(hs[a : b + 1]))
        if hs[p] < min_height:
            continue
        d = np.log(hs[p] + 1.0) - np.log(hs[valley] + 1.0)
        if d > depth:
            best, depth = (p, valley), d
    if best is None or depth < 1.0:  # no valley deeper than a factor e: a single mode
        return float("nan"), float("nan")
    thr = 0.5 * (edges[best[1]] + edges[best[1] + 1])
    side = f1 > thr
    b_mask = basin_b_mask(phi)
    frac_hi = b_mask[side].mean() if side.any() else 0.0
    frac_lo = b_mask[~side].mean() if (~side).any() else 0.0
    if frac_hi == frac_lo == 0.0:  # no C7ax/alpha_L frame: the sides cannot be named
        return float("nan"), float(thr)
    in_b = side if frac_hi >= frac_lo else ~side
    pb, pa = in_b.mean(), 1.0 - in_b.mean()
    if pb <= 0 or pa <= 0:
        return float("nan"), float(thr)
    return float(-kT * np.log(pb / pa)), float(thr)


def _train_nn(
    kind: str, traj: Any, cfg: dict, seed: int, device: str | None, progress: bool
) -> tuple[Any, float]:
    import torch

    from dpnets import DPNet
    from dpnets.baselines import VAMPNet
    from dpnets.nn.schnet import SchNetEncoder

    torch.manual_seed(seed)
    enc = SchNetEncoder(
        atomic_numbers=traj.atomic_numbers.tolist(), out_dim=cfg["r"], cutoff=cfg["cutoff"]
    )
    main = kind == "DPNets-relaxed"
    n_pairs = cfg["n_pairs"] if main else cfg["n_pairs_baseline"]
    epochs = cfg["epochs"] if main else cfg["epochs_baseline"]
    common = dict(
        lr=cfg["lr"],
        batch_size=cfg["batch_size"],
        epochs=epochs,
        val_fraction=0.1,
        seed=seed,
        device=device,
        progress=progress,
    )
    if kind == "DPNets-relaxed":
        net = DPNet(enc, score="relaxed", gamma=cfg["gamma"], **common)
    elif kind == "DPNets (P^γ)":
        net = DPNet(enc, score="projection", gamma=cfg["gamma"], **common)
    elif kind == "VAMPNets":
        net = VAMPNet(enc, **common)
    else:  # pragma: no cover - internal
        raise ValueError(kind)
    stop = int(cfg["train_fraction"] * len(traj))
    rng = np.random.default_rng(1000 + seed)
    X, Y = _random_pairs(traj.positions, cfg["lag"], stop, n_pairs, rng)
    t0 = time.perf_counter()
    net.fit((X, Y))
    return net, time.perf_counter() - t0


def _nn_features(net: Any, positions: np.ndarray) -> np.ndarray:
    return _with_constant(net.transform(positions, batch_size=4096))


def _evaluate(
    name: str,
    feats: np.ndarray | None,
    fit_at: Callable[[int], Any],
    eigfun: Callable[[Any], np.ndarray],
    test_feats: tuple[np.ndarray, np.ndarray] | None,
    traj: Any,
    cfg: dict,
    model: Any = None,
    all_feats: np.ndarray | None = None,
) -> dict[str, Any]:
    """Timescales vs lag, table entries and eigenfunctions of one method.

    ``fit_at(lag)`` gives the operator at each lag of the curve; ``model`` (default
    ``fit_at(cfg["lag"])``) is the estimator of the table at the training lag.
    """
    dt = traj.dt_ps
    its_curve = []
    for lag in cfg["its_lags"]:
        if lag >= len(traj) // 2:
            its_curve.append([float("nan")] * 3)
            continue
        m = fit_at(lag)
        its = m.implied_timescales(lag_time=lag * dt)
        its_curve.append([float(v) for v in its[1:4]])
    if model is None:
        model = fit_at(cfg["lag"])
    its = model.implied_timescales(lag_time=cfg["lag"] * dt)
    ef = eigfun(model)
    f1 = np.real(ef[:, 1])
    f2 = np.real(ef[:, 2]) if ef.shape[1] > 2 else np.zeros_like(f1)
    dg, thr = _split_delta_g(f1, traj.phi, traj.kT)
    score = _vamp2(*test_feats) if test_feats is not None else float("nan")
    lag = int(cfg["lag"])
    score_all = _vamp2(all_feats[:-lag], all_feats[lag:]) if all_feats is not None else np.nan
    return {
        "name": name,
        "score": score,
        "score_all": float(score_all),
        "slowest_ps": float(its[1]),
        "its_ps": [float(v) for v in its[1:6]],
        "eigvals": [float(v) for v in np.abs(model.eig()[:6])],
        "its_curve_ps": its_curve,
        "delta_g": dg,
        "split_threshold": thr,
        "f1": f1,
        "f2": f2,
    }


def _nystrom(est: str, dist: np.ndarray, traj: Any, cfg: dict, seed: int) -> dict[str, Any]:
    """Nyström PCR/RRR (rank ``r``, Gaussian kernel, median length scale) on distances."""
    from dpnets import TransferOperator
    from dpnets.baselines import NystromKernelDMD

    stop = int(cfg["train_fraction"] * len(traj))
    lag = int(cfg["lag"])
    t0 = time.perf_counter()
    rng = np.random.default_rng(2000 + seed)
    X, Y = _random_pairs(dist, lag, stop, cfg["nys_pairs"], rng)
    model = NystromKernelDMD(
        "rbf",
        n_centers=cfg["nys_centers"],
        rank=cfg["r"],
        estimator=est,
        ridge=cfg["nys_ridge"],
        seed=seed,
    ).fit((X, Y))
    feats = _with_constant(model.features(dist))

    def fit_at(lg: int) -> Any:
        # timescales vs lag on the fixed kernel features (refitting the sketch at every lag
        # costs O(n m^2) each)
        return TransferOperator(None).fit(feats, lag=lg)

    def eigfun(m: Any) -> np.ndarray:
        return m.eigenfunctions(dist)

    phi_test = feats[stop:, 1:]
    res = _evaluate(
        f"Nyström-{est.upper()}",
        None,
        fit_at,
        eigfun,
        (phi_test[:-lag], phi_test[lag:]),
        traj,
        cfg,
        model=model,
        all_feats=feats[:, 1:],
    )
    res["train_s"] = time.perf_counter() - t0
    return res


def _plot_its(path: Path, results: list[dict], ref: dict, cfg: dict, dt: float) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - optional dependency
        return
    lags = np.asarray(cfg["its_lags"]) * dt
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    ref_its = np.asarray(ref["timescales_ps"], dtype=float)
    mlags = np.asarray(ref["lags_ps"])
    ax.plot(mlags, ref_its[:, 0] / 1000, "k-o", ms=3, lw=1.6, label="MSM (phi, psi) reference")
    ax.plot(mlags, ref_its[:, 1] / 1000, "k:o", ms=2, lw=0.8)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, res in enumerate(results):
        c = np.asarray(res["its_curve_ps"], dtype=float)
        ax.plot(lags, c[:, 0] / 1000, "-s", color=colors[k], ms=3, lw=1.2, label=res["name"])
        ax.plot(lags, c[:, 1] / 1000, ":", color=colors[k], lw=0.8)
    ax.fill_between(mlags, 0, mlags / 1000, color="0.85", label="t < lag")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("lag time (ps)")
    ax.set_ylabel("implied timescale (ns)")
    ax.set_title("Alanine dipeptide: two slowest implied timescales vs lag", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_fes(path: Path, results: list[dict], kT: float, bins: int) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - optional dependency
        return
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        h, xe, ye = np.histogram2d(res["f1"], res["f2"], bins=bins)
        with np.errstate(divide="ignore"):
            g = -kT * np.log(h / h.sum())
        g -= np.nanmin(g[np.isfinite(g)])
        g[~np.isfinite(g)] = np.nan
        im = ax.pcolormesh(xe, ye, g.T, cmap="viridis", vmax=min(8.0, np.nanmax(g)))
        fig.colorbar(im, ax=ax, label="FES (kcal/mol)")
        ax.set_xlabel(r"$\psi_1$ (slowest)")
        ax.set_ylabel(r"$\psi_2$")
        ax.set_title(res["name"], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_eigenfunctions(
    path: Path, results: list[dict], phi: np.ndarray, psi: np.ndarray, n: int
) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - optional dependency
        return
    idx = np.random.default_rng(0).choice(len(phi), size=min(n, len(phi)), replace=False)
    panels = [(res["name"], k, res[f"f{k}"]) for res in results for k in (1, 2)]
    ncol = 4
    nrow = int(np.ceil(len(panels) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 2.9 * nrow), squeeze=False)
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    for ax, (name, k, f) in zip(axes.ravel(), panels, strict=False):
        v = f[idx]
        lim = np.quantile(np.abs(v), 0.99)
        ax.scatter(
            phi[idx], psi[idx], c=v, s=1, cmap="coolwarm", vmin=-lim, vmax=lim, rasterized=True
        )
        ax.set_xlim(-180, 180)
        ax.set_ylim(-180, 180)
        ax.set_title(f"{name}: $\\psi_{k}$", fontsize=8)
        ax.set_xlabel(r"$\phi$ (deg)", fontsize=7)
        ax.set_ylabel(r"$\psi$ (deg)", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)


def run(
    *,
    quick: bool = False,
    seeds: int | None = None,
    out: str | Path = Path("dpnets-out") / "alanine-dipeptide",
    device: str | None = None,
    progress: bool = True,
    config: dict[str, Any] | None = None,
) -> str:
    """Simulate alanine dipeptide, learn SchNet representations, compare with the MSM.

    Parameters
    ----------
    quick : bool, default False
        Smoke test (6 ns, tiny training; under 3 minutes on 2 CPU cores).
    seeds : int, optional
        Training seeds of the neural methods (default 1; with more, mean and standard
        deviation are reported).
    out : path
        Output folder (created).
    device : str, optional
        Torch device (default: CUDA if available).
    progress : bool, default True
        Progress bars during training.
    config : dict, optional
        Overrides of :data:`CONFIG` / :data:`QUICK_CONFIG` (used by the tests).

    Returns
    -------
    str
        The markdown table (score, slowest implied timescale and Delta G per method).
    """
    from dpnets import TransferOperator
    from dpnets.systems.alanine import basin_b_mask, msm_reference, simulate_alanine_dipeptide

    cfg = {**(QUICK_CONFIG if quick else CONFIG), **(config or {})}
    n_seeds = 1 if seeds is None else int(seeds)
    if n_seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    traj = simulate_alanine_dipeptide(
        cfg["n_frames"],
        temperature=cfg["temperature"],
        solvent=cfg["solvent"],
        seed=cfg["sim_seed"],
        progress=progress,
    )
    dt = traj.dt_ps
    kT = traj.kT
    lag = int(cfg["lag"])
    T = len(traj)
    stop = int(cfg["train_fraction"] * T)

    # ---- reference MSM on (phi, psi)
    msm_lags = tuple(sorted(set(cfg["its_lags"]) | {lag}))
    ref = msm_reference(traj.phi, traj.psi, dt_ps=dt, kT=kT, lags=msm_lags, n_bins=cfg["msm_bins"])
    ref_at_lag = ref["timescales_ps"][msm_lags.index(lag)][0]

    timings: dict[str, float] = {"simulation_s": float(traj.params.get("wall_s", 0.0))}
    dist = pairwise_distances(traj.positions)
    per_seed: list[list[dict]] = []
    for seed in range(n_seeds):
        results: list[dict] = []
        # ---- neural methods with the SchNet encoder
        for kind in ("DPNets-relaxed", "DPNets (P^γ)", "VAMPNets"):
            net, t_fit = _train_nn(kind, traj, cfg, seed, device, progress)
            timings[f"{kind} seed{seed} train_s"] = t_fit
            feats = _nn_features(net, traj.positions)

            def fit_at(lg: int, feats: np.ndarray = feats) -> Any:
                return TransferOperator(None).fit(feats, lag=lg)

            def eigfun(model: Any, feats: np.ndarray = feats) -> np.ndarray:
                return model.eigenfunctions(feats)

            test = (feats[stop:-lag, 1:], feats[stop + lag :, 1:])
            res = _evaluate(kind, feats, fit_at, eigfun, test, traj, cfg, all_feats=feats[:, 1:])
            res["train_s"] = t_fit
            res["history"] = net.history_
            results.append(res)

        # ---- Nyström kernel regression on pairwise heavy-atom distances
        for est in ("pcr", "rrr"):
            res = _nystrom(est, dist, traj, cfg, seed)
            timings[f"{res['name']} seed{seed} s"] = res["train_s"]
            results.append(res)
        per_seed.append(results)

    # ---- table
    names = [r["name"] for r in per_seed[0]]

    def agg(name: str, key: str) -> tuple[float, float]:
        v = np.array([[r[key] for r in rs if r["name"] == name][0] for rs in per_seed])
        return float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0

    def fmt(m: float, s: float, digits: int = 3, scale: float = 1.0) -> str:
        if not np.isfinite(m):
            return "n/a"
        txt = f"{m * scale:.{digits}g}"
        return txt + (f" ± {s * scale:.2g}" if n_seeds > 1 else "")

    ref_ns = ref["slowest_ps"] / 1000
    rows = []
    for name in names:
        sc = agg(name, "score")
        sa = agg(name, "score_all")
        ts = agg(name, "slowest_ps")
        dg = agg(name, "delta_g")
        rel = abs(ts[0] / 1000 - ref_ns) / ref_ns if np.isfinite(ref_ns) else float("nan")
        ddg = abs(dg[0] - ref["delta_g"])
        rows.append(
            [
                name,
                fmt(*sa, 4),
                fmt(*sc, 4),
                fmt(*ts, 3, 1e-3),
                f"{100 * rel:.0f}%" if np.isfinite(rel) else "n/a",
                fmt(*dg, 3),
                f"{ddg:.2f}" if np.isfinite(ddg) else "n/a",
            ]
        )
    rows.append(
        [
            f"Reference: MSM {cfg['msm_bins']}x{cfg['msm_bins']} (φ, ψ)",
            "-",
            "-",
            f"{ref_ns:.3g}",
            "-",
            f"{ref['delta_g']:.3g}",
            "-",
        ]
    )
    wall = time.perf_counter() - t_start
    mode = "quick" if quick else "full"
    held_out_ax = float(np.mean(basin_b_mask(traj.phi[stop:])))
    head = (
        f"Alanine dipeptide ({cfg['solvent']}, {cfg['temperature']:g} K, "
        f"{T * dt / 1000:g} ns, frames every {dt:g} ps, 10 heavy atoms), {mode} run; "
        f"training lag {lag * dt:g} ps, r = {cfg['r']}, {n_seeds} seed(s); "
        f"VAMP-2 scores of the r features at the training lag on the whole trajectory and on "
        f"its last {100 * (1 - cfg['train_fraction']):.0f}% (held out; "
        f"{100 * held_out_ax:.1f}% of its frames in C7ax/αL); "
        f"slowest timescale at the training lag (reference: MSM at lag {msm_lags[-1] * dt:g} ps; "
        f"at {lag * dt:g} ps it is {ref_at_lag / 1000:.3g} ns); "
        f"ΔG = G(C7ax/αL) − G(C7eq/β). Wall time {wall:.0f} s."
    )
    table = (
        head
        + "\n\n"
        + markdown_table(
            [
                "Method",
                "VAMP-2 (all)",
                "VAMP-2 (held out)",
                "slowest ITS (ns)",
                "ITS rel. err",
                "ΔG (kcal/mol)",
                "|ΔG err|",
            ],
            rows,
        )
    )

    # ---- figures (first seed)
    results = per_seed[0]
    _plot_its(out / "its.png", results, ref, cfg, dt)
    fes_methods = [r for r in results if r["name"] in ("DPNets-relaxed", "Nyström-PCR")]
    _plot_fes(out / "fes.png", fes_methods, kT, cfg["fes_bins"])
    _plot_eigenfunctions(
        out / "eigenfunctions.png", results, traj.phi, traj.psi, cfg["scatter_points"]
    )

    payload = {
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
        "simulation": {k: v for k, v in traj.params.items() if k != "cache"},
        "reference": ref,
        "reference_slowest_at_training_lag_ps": ref_at_lag,
        "methods": [
            [{k: v for k, v in r.items() if k not in ("f1", "f2")} for r in rs] for rs in per_seed
        ],
        "timings": timings,
        "wall_s": wall,
        "quick": quick,
    }
    write_results(out, table, payload)
    return table
