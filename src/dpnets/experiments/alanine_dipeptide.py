"""Alanine dipeptide with a SchNet encoder: timescales and free energy (paper Table 2, Fig. 4).

Stands in for the paper's Chignolin experiment (Sec. 5, App. F), whose data is not public:
alanine dipeptide in vacuum is simulated with OpenMM (:mod:`dpnets.systems.alanine`: Amber14,
400 K, Langevin, 4 fs with hydrogen-mass repartitioning), the 10 heavy atoms' positions (Å)
are the states, and

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
* the reference: a reversible maximum-likelihood Markov state model on a 24 x 24 grid of the
  backbone dihedrals (phi, psi) (:func:`dpnets.systems.alanine.msm_reference`) with implied
  timescales against the lag, their bootstrap error over trajectories, and the free-energy
  difference ``Delta G`` between the C7ax/alpha_L (``0 < phi < 120``) and C7eq/beta basins
  from its stationary populations. The dihedrals are never a model input.

Data. At 400 K in vacuum the C7ax/alpha_L basin is entered about once per 70 ns and left
after a few ns, so a single equilibrium trajectory of a few hundred ns holds a handful of
events (our 200 ns run held one). The data are therefore an **ensemble of short
trajectories** (:func:`ensemble_runs`: 96 x 20 ns, frames every 5 ps), started alternately in
C7eq/beta and C7ax/alpha_L by a restrained equilibration of ``phi`` that is switched off
before the first frame; this is how many MD data sets look (many short runs from chosen
starts). The frames are then not in equilibrium, so every equilibrium quantity is estimated
with that in mind: the MSM by reversible maximum likelihood, and each method's ``Delta G``
and free-energy surface from frames reweighted by
:meth:`dpnets.TransferOperator.stationary_weights` (Koopman reweighting, Wu et al. 2017) of the
method's own features at the training lag.

Protocol. The representations are trained on random lagged pairs (never across two
trajectories) from 4 of every 5 trajectories; the score columns are the VAMP-2 score
(centred features, ``+1`` for the constant; comparable across methods, all with ``r = 16``)
of the learned features at the training lag on all trajectories and on the held-out fifth.
The operator regression on a fixed representation (cheap) uses all trajectories, as the MSM
does; the table's timescale is at the training lag. Nyström timescales against the lag come
from the same regression on their fixed features (plus the constant). ``Delta G`` of a
method: frames are split at the density minimum of its slowest right eigenfunction between
its two main modes (the barrier of its 1-D free energy), the side richer in
``0 < phi < 120`` is called C7ax/alpha_L (the dihedrals only name the sides), and
``Delta G = -kT ln(p_B / p_A)`` from the reweighted populations of the two sides.

Outputs in ``out``: ``table.md``, ``results.json``, ``its.png`` (timescales vs lag),
``fes.png`` (free-energy surfaces), ``eigenfunctions.png`` (over (phi, psi)).

The budget-matched r x lag study of issue 18 is its own experiment on this one's data and
settings, ``dpnets reproduce alanine-r-lag`` (:mod:`dpnets.experiments.alanine_sweep`); it
trains and evaluates with :func:`train_network`, :func:`evaluate_features` and
:func:`fit_nystrom`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpnets.experiments._common import markdown_table, pyplot, write_results
from dpnets.pairs import lagged_pairs
from dpnets.spectral import prepend_ones

__all__ = [
    "run",
    "CONFIG",
    "QUICK_CONFIG",
    "ensemble_runs",
    "pairwise_distances",
    "split_trajectories",
    "train_network",
    "evaluate_features",
    "fit_nystrom",
]

#: Full run. The data are an ensemble of ``n_runs`` short trajectories of ``run_ns`` each,
#: seeded alternately in C7eq/beta (``phi = -80``) and C7ax/alpha_L (``phi = +70``)
#: (:func:`ensemble_runs`): at 400 K in vacuum the C7ax/alpha_L basin is rarely entered (one
#: visit in a 200 ns trajectory), so one long equilibrium run gives no converged reference.
#: Simulating the 1.92 us takes about 2 CPU-core-hours (20 ns in 70-90 s per core), once:
#: trajectories are cached, and simulated by ``workers`` processes in parallel.
CONFIG: dict[str, Any] = {
    # simulation (dpnets.systems.alanine.simulate_alanine_ensemble)
    "n_runs": 96,
    "run_ns": 20.0,
    "frame_ps": 5.0,
    "seed_phis": (-80.0, 70.0),  # alternating restrained starting phi (degrees)
    "temperature": 400.0,
    "solvent": "vacuum",
    # learning
    "lag_ps": 500.0,  # the MSM timescale is converged from ~100 ps on
    "heldout_every": 5,  # every 5th trajectory is held out of training (scores)
    "r": 16,
    "cutoff": 5.0,  # Å
    "gamma": 0.32,  # App. F's 0.01 per trace of R (r = 16), on the paper's scale (x 2r)
    "lr": 3e-3,
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
    "its_lags_ps": (10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0),
    "ck_steps": (1, 2, 4, 8),  # multiples of the training lag in the Chapman–Kolmogorov test
    "msm_bins": 24,
    "fes_bins": 60,
    "scatter_points": 12_000,
    "bootstrap": 20,  # resamples of whole trajectories for the reference's error bars
}

#: ``--quick``: 4 trajectories of 1.5 ns, a few thousand pairs, two epochs (a smoke test: the
#: slow timescale and Delta G are not meaningful from so little data).
QUICK_CONFIG: dict[str, Any] = {
    **CONFIG,
    "n_runs": 4,
    "run_ns": 1.5,
    "lag_ps": 50.0,
    "heldout_every": 4,
    "n_pairs": 2_000,
    "epochs": 2,
    "n_pairs_baseline": 1_000,
    "epochs_baseline": 1,
    "nys_centers": 300,
    "nys_pairs": 2_000,
    "its_lags_ps": (10.0, 20.0, 50.0, 100.0),
    "ck_steps": (1, 2),
    "scatter_points": 5_000,
    "bootstrap": 0,
}


def ensemble_runs(cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-run and shared keyword arguments of :func:`simulate_alanine_ensemble` for ``cfg``.

    Run ``i`` has seed ``i`` and starts at ``phi = seed_phis[i % len(seed_phis)]``.
    """
    n_frames = int(round(cfg["run_ns"] * 1000.0 / cfg["frame_ps"]))
    phis = tuple(cfg["seed_phis"])
    runs = [
        {"n_frames": n_frames, "seed": i, "initial_phi": float(phis[i % len(phis)])}
        for i in range(int(cfg["n_runs"]))
    ]
    common = {
        "temperature": float(cfg["temperature"]),
        "solvent": cfg["solvent"],
        "frame_interval_ps": float(cfg["frame_ps"]),
    }
    return runs, common


def pairwise_distances(positions: np.ndarray) -> np.ndarray:
    """The ``n (n - 1) / 2`` interatomic distances of every frame, ``(T, n_pairs)`` float32."""
    x = np.asarray(positions, dtype=np.float32)
    i, j = np.triu_indices(x.shape[1], k=1)
    return np.linalg.norm(x[:, i] - x[:, j], axis=-1)


def split_trajectories(n_traj: int, every: int) -> tuple[list[int], list[int]]:
    """Training and held-out trajectories: every ``every``-th one (the last of each group of
    ``every``) is held out."""
    held_out = [i for i in range(n_traj) if i % every == every - 1]
    train = [i for i in range(n_traj) if i % every != every - 1]
    return train, held_out


def _ensemble_pairs(
    arrays: list[np.ndarray], which: list[int], lag: int, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random pairs ``(x_t, x_{t+lag})`` from the trajectories ``which`` (never across)."""
    p = lagged_pairs([arrays[i] for i in which], lag)
    sub = p.subset(np.sort(rng.choice(len(p), size=min(n, len(p)), replace=False)))
    return sub.X, sub.Y


def _lagged(feats: list[np.ndarray], which: list[int], lag: int) -> tuple[np.ndarray, np.ndarray]:
    """All lagged pairs of the trajectories ``which`` (features without the constant)."""
    p = lagged_pairs([feats[i][:, 1:] for i in which], lag)
    return p.X, p.Y


def _vamp2(fx: np.ndarray, fy: np.ndarray) -> float:
    import torch

    from dpnets.scores import vamp_score

    with torch.no_grad():
        return float(vamp_score(torch.as_tensor(fx), torch.as_tensor(fy), 2))


def _split_delta_g(
    f1: np.ndarray, phi: np.ndarray, kT: float, bins: int = 200, weights: np.ndarray | None = None
) -> tuple[float, float]:
    """``Delta G`` from a split of the slowest eigenfunction at its density minimum.

    ``weights`` (default: uniform) are the frames' equilibrium weights (for off-equilibrium
    data, :meth:`dpnets.TransferOperator.stationary_weights`); the split itself is found on the
    unweighted histogram (the barrier between the modes is where frames are rare either way).

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
    w = np.ones_like(f1) if weights is None else np.asarray(weights, dtype=np.float64)
    pb, pa = float(w[in_b].sum()), float(w[~in_b].sum())
    if pb <= 0 or pa <= 0:
        return float("nan"), float(thr)
    return float(-kT * np.log(pb / pa)), float(thr)


def train_network(
    kind: str,
    positions: list[np.ndarray],
    z: np.ndarray,
    train: list[int],
    cfg: dict,
    seed: int,
    device: str | None,
    progress: bool,
) -> tuple[Any, float]:
    """Train ``kind`` ("DPNets-relaxed", "DPNets (P^γ)" or "VAMPNets") with a SchNet encoder of
    ``cfg["r"]`` outputs on random lagged pairs of the trajectories ``train``; returns the
    fitted network and its training time (s). DPNets-relaxed gets ``cfg``'s ``n_pairs`` and
    ``epochs``, the others ``n_pairs_baseline`` and ``epochs_baseline``."""
    import torch

    from dpnets import DPNet
    from dpnets.baselines import VAMPNet
    from dpnets.nn.schnet import SchNetEncoder

    torch.manual_seed(seed)
    enc = SchNetEncoder(atomic_numbers=z.tolist(), out_dim=cfg["r"], cutoff=cfg["cutoff"])
    main = kind == "DPNets-relaxed"
    n_pairs = cfg["n_pairs"] if main else cfg["n_pairs_baseline"]
    epochs = cfg["epochs"] if main else cfg["epochs_baseline"]
    common = dict(
        lr=cfg["lr"],
        batch_size=cfg["batch_size"],
        epochs=epochs,
        val_fraction=0.1,
        constant=False,  # the paper's convention (the committed results use it)
        standardize="none",
        seed=seed,
        device=device,
        progress=progress,
        lag=cfg["_lag"],  # the lag the pairs are made at
    )
    if kind == "DPNets-relaxed":
        net = DPNet(enc, objective="relaxed", gamma=cfg["gamma"], **common)
    elif kind == "DPNets (P^γ)":
        net = DPNet(enc, objective="projection", gamma=cfg["gamma"], **common)
    elif kind == "VAMPNets":
        net = VAMPNet(enc, **common)
    else:  # pragma: no cover - internal
        raise ValueError(kind)
    rng = np.random.default_rng(1000 + seed)
    X, Y = _ensemble_pairs(positions, train, cfg["_lag"], n_pairs, rng)
    t0 = time.perf_counter()
    net.fit((X, Y))
    return net, time.perf_counter() - t0


def evaluate_features(
    name: str,
    feats: list[np.ndarray],
    eigfun: Callable[[Any], np.ndarray],
    phi: np.ndarray,
    kT: float,
    held_out: list[int],
    cfg: dict,
    model: Any = None,
    ck: bool = False,
) -> dict[str, Any]:
    """Timescales vs lag, table entries, weights and eigenfunctions of one method.

    ``feats`` are the method's features (first column the constant) on every trajectory; a
    :class:`dpnets.TransferOperator` on them at each lag gives the timescale curve
    (:func:`dpnets.validation.implied_timescales`, bootstrap bands over whole trajectories),
    and at the training lag the stationary weights of the frames (``Delta G``). ``model``
    (default: that operator at the training lag) gives the table's timescale and the
    eigenfunctions. ``ck``: also the Chapman–Kolmogorov test on the two PCCA+ sets.
    """
    from dpnets import TransferOperator
    from dpnets.validation import implied_timescales

    dt = cfg["frame_ps"]
    lag = cfg["_lag"]
    longest = max(len(f) for f in feats)
    fit_lags = [lg for lg in cfg["_its_lags"] if lg < longest // 2]
    scan = implied_timescales(
        TransferOperator(None, constant=False, dt=dt),
        feats,
        fit_lags,
        dt=dt,  # the 3 slowest, or all a basis of fewer functions has (NaN columns after)
        n_bootstrap=int(cfg.get("bootstrap", 0)),
        seed=0,
    )
    pad = [[float("nan")] * 3] * (len(cfg["_its_lags"]) - len(fit_lags))

    def curve(values: np.ndarray | None) -> list | None:  # 3 columns, a row per lag
        if values is None:
            return None
        columns = np.full((len(fit_lags), 3), np.nan)
        columns[:, : values.shape[1]] = values
        return columns.tolist() + pad

    op = TransferOperator(None, constant=False, dt=dt, lag=lag).fit(feats)
    model = op if model is None else model
    its = model.implied_timescales(dt)
    ef = eigfun(model)
    f1 = np.real(ef[:, 1])
    f2 = np.real(ef[:, 2]) if ef.shape[1] > 2 else np.zeros_like(f1)
    weights = op.stationary_weights(np.concatenate(feats))
    dg, thr = _split_delta_g(f1, phi, kT, weights=weights)
    every = list(range(len(feats)))
    return {
        "name": name,
        "score": _vamp2(*_lagged(feats, held_out, lag)),
        "score_all": _vamp2(*_lagged(feats, every, lag)),
        "slowest_ps": float(its[1]),
        "its_ps": [float(v) for v in its[1:6]],
        "eigvals": [float(v) for v in np.abs(model.eig()[:6])],
        "its_curve_ps": curve(scan.timescales),
        "its_lower_ps": curve(scan.lower),
        "its_upper_ps": curve(scan.upper),
        "delta_g": dg,
        "split_threshold": thr,
        "negative_weight_fraction": float(np.mean(weights < 0)),
        "f1": f1,
        "f2": f2,
        "weights": weights,
        **(_ck(op, feats, cfg) if ck else {}),
        **(_its_samples(scan.samples, pad) if cfg.get("_its_samples") else {}),
    }


def _its_samples(samples: np.ndarray | None, pad: list) -> dict[str, Any]:
    """The bootstrap samples of the slowest timescale, ``(n_bootstrap, n_lags)`` (NaN-padded
    like the curve), for the r x lag sweep (``cfg["_its_samples"]``,
    :mod:`dpnets.experiments.alanine_sweep`)."""
    if samples is None:
        return {"its_samples_ps": None}
    s = np.asarray(samples, dtype=float)[:, :, 0]
    return {"its_samples_ps": np.hstack([s, np.full((s.shape[0], len(pad)), np.nan)]).tolist()}


def _ck(op: Any, feats: list[np.ndarray], cfg: dict) -> dict[str, Any]:
    """Chapman–Kolmogorov test of the operator at the training lag on its two PCCA+
    metastable sets (:func:`dpnets.validation.pcca`, :func:`dpnets.validation.ck_test`)."""
    from dpnets.validation import ck_test, pcca

    sets = pcca(op, np.concatenate(feats), 2)
    steps = [int(k) for k in cfg["ck_steps"]]
    test = ck_test(
        op,
        feats,
        steps,
        sets.memberships_of,
        dt=cfg["frame_ps"] / 1000.0,
        n_bootstrap=int(cfg.get("bootstrap", 0)),
        seed=0,
    )
    gap = np.abs(test.predictions - test.estimates)
    out = {
        "ck_steps": steps,
        "ck_predictions": test.predictions.tolist(),
        "ck_estimates": test.estimates.tolist(),
        "ck_max_abs_diff": float(gap.max()),
        "pcca_stationary": sets.stationary.tolist(),
        "ck_assignments": sets.assignments,
        "ck_test": test,
    }
    if test.estimates_lower is not None:
        lo = np.minimum(test.estimates_lower, test.predictions_lower)
        hi = np.maximum(test.estimates_upper, test.predictions_upper)
        out["ck_bands_overlap"] = bool(
            np.all(
                (test.predictions_upper >= test.estimates_lower - 1e-12)
                & (test.estimates_upper >= test.predictions_lower - 1e-12)
            )
        )
        out["ck_band_width_max"] = float((hi - lo).max())
    return out


def fit_nystrom(
    est: str,
    dist: list[np.ndarray],
    train: list[int],
    held_out: list[int],
    phi: np.ndarray,
    kT: float,
    cfg: dict,
    seed: int,
) -> dict[str, Any]:
    """Nyström PCR/RRR (rank ``r``, Gaussian kernel, median length scale) on distances."""
    from dpnets.baselines import NystromKernelDMD

    t0 = time.perf_counter()
    rng = np.random.default_rng(2000 + seed)
    X, Y = _ensemble_pairs(dist, train, cfg["_lag"], cfg["nys_pairs"], rng)
    model = NystromKernelDMD(
        "rbf",
        n_centers=cfg["nys_centers"],
        rank=cfg["r"],
        estimator=est,
        ridge=cfg["nys_ridge"],
        seed=seed,
        lag=cfg["_lag"],
    ).fit((X, Y))
    # timescales vs lag and weights from the same regression on the fixed kernel features
    # (refitting the sketch at every lag costs O(n m^2) each)
    feats = [prepend_ones(model.features_(d)) for d in dist]
    all_dist = np.concatenate(dist)
    res = evaluate_features(
        f"Nyström-{est.upper()}",
        feats,
        lambda m: m.eigenfunctions(all_dist),
        phi,
        kT,
        held_out,
        cfg,
        model=model,
    )
    res["train_s"] = time.perf_counter() - t0
    return res


def _bootstrap_reference(
    phis: list[np.ndarray], psis: list[np.ndarray], cfg: dict, kT: float, n_boot: int
) -> dict[str, float]:
    """Standard deviations of the MSM's slowest timescale and Delta G at the training lag
    over ``n_boot`` resamples of whole trajectories (with replacement)."""
    from dpnets.systems.alanine import msm_reference

    rng = np.random.default_rng(7)
    ts, dg = [], []
    for _ in range(n_boot):
        pick = rng.integers(0, len(phis), size=len(phis))
        r = msm_reference(
            [phis[i] for i in pick],
            [psis[i] for i in pick],
            dt_ps=cfg["frame_ps"],
            kT=kT,
            lags=(cfg["_lag"],),
            n_bins=cfg["msm_bins"],
        )
        ts.append(r["slowest_ps"])
        dg.append(r["delta_g"])

    def std(v: list[float]) -> float:
        v = [x for x in v if np.isfinite(x)]
        return float(np.std(v, ddof=1)) if len(v) > 1 else float("nan")

    return {"n_boot": n_boot, "slowest_ps_std": std(ts), "delta_g_std": std(dg)}


def _plot_its(path: Path, results: list[dict], ref: dict, cfg: dict) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - optional dependency
        return
    lags = np.asarray(cfg["_its_lags"]) * cfg["frame_ps"]
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    ref_its = np.asarray(ref["timescales_ps"], dtype=float)
    mlags = np.asarray(ref["lags_ps"])
    ax.plot(mlags, ref_its[:, 0] / 1000, "k-o", ms=3, lw=1.6, label="MSM (phi, psi) reference")
    ax.plot(mlags, ref_its[:, 1] / 1000, "k:o", ms=2, lw=0.8)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, res in enumerate(results):
        c = np.asarray(res["its_curve_ps"], dtype=float)
        ax.plot(lags, c[:, 0] / 1000, "-s", color=colors[k], ms=3, lw=1.2, label=res["name"])
        if res.get("its_lower_ps") is not None:  # bootstrap band of the slowest process
            lo = np.asarray(res["its_lower_ps"], dtype=float)[:, 0] / 1000
            hi = np.asarray(res["its_upper_ps"], dtype=float)[:, 0] / 1000
            ax.fill_between(lags, lo, hi, color=colors[k], alpha=0.18, linewidth=0)
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


def _set_names(assignments: np.ndarray, phi: np.ndarray) -> list[str]:
    """Names of two metastable sets by where their frames lie in phi."""
    from dpnets.systems.alanine import basin_b_mask

    b = basin_b_mask(phi)
    frac = [
        float(np.mean(b[assignments == i])) if np.any(assignments == i) else 0.0 for i in (0, 1)
    ]
    return ["C7ax/αL" if f > 0.5 else "C7eq/β" for f in frac]


def _plot_fes(
    path: Path,
    results: list[dict],
    phi: np.ndarray,
    psi: np.ndarray,
    kT: float,
    bins: int,
) -> None:
    """Free energy on (phi, psi) from every method's reweighted frames
    (:func:`dpnets.plot.free_energy`), next to the unweighted (biased) histogram."""
    plt = pyplot()
    if plt is None:  # pragma: no cover - optional dependency
        return
    from dpnets.plot import free_energy

    n = len(results) + 1
    fig, axes = plt.subplots(1, n, figsize=(4.3 * n, 3.6), squeeze=False, layout="constrained")
    coords = np.stack([phi, psi], axis=1)
    labels = ["φ (deg)", "ψ (deg)"]
    free_energy(
        coords, kT=kT, energy_units="kcal/mol", labels=labels, bins=bins, ax=axes[0, 0], vmax=8.0
    )
    axes[0, 0].set_title("frames as simulated (not in equilibrium)", fontsize=9)
    for ax, res in zip(axes[0, 1:], results, strict=True):
        free_energy(
            coords,
            res["weights"],
            kT=kT,
            energy_units="kcal/mol",
            labels=labels,
            bins=bins,
            ax=ax,
            vmax=8.0,
        )
        ax.set_title(f"{res['name']}: reweighted to equilibrium", fontsize=9)
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
    workers: int | None = None,
) -> str:
    """Simulate alanine dipeptide, learn SchNet representations, compare with the MSM.

    Parameters
    ----------
    quick : bool, default False
        Smoke test (4 x 1.5 ns, tiny training; under 3 minutes on 2 CPU cores).
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
    workers : int, optional
        Processes simulating trajectories that are not cached yet (default: all CPUs).

    Returns
    -------
    str
        The markdown table (score, slowest implied timescale and Delta G per method).
    """
    import os

    from dpnets.systems.alanine import basin_b_mask, msm_reference, simulate_alanine_ensemble

    cfg = {**(QUICK_CONFIG if quick else CONFIG), **(config or {})}
    n_seeds = 1 if seeds is None else int(seeds)
    if n_seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    dt = float(cfg["frame_ps"])
    cfg["_lag"] = lag = max(int(round(cfg["lag_ps"] / dt)), 1)
    cfg["_its_lags"] = [max(int(round(v / dt)), 1) for v in cfg["its_lags_ps"]]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    runs, common = ensemble_runs(cfg)
    n_workers = int(workers) if workers is not None else max(os.cpu_count() or 1, 1)
    trajs = simulate_alanine_ensemble(runs, workers=min(n_workers, len(runs)), **common)
    kT = trajs[0].kT
    z = trajs[0].atomic_numbers
    n_traj = len(trajs)
    train, held_out = split_trajectories(n_traj, int(cfg["heldout_every"]))
    phis = [t.phi for t in trajs]
    psis = [t.psi for t in trajs]
    phi_all = np.concatenate(phis)
    psi_all = np.concatenate(psis)
    positions = [t.positions for t in trajs]

    # ---- reference MSM on (phi, psi), reversible maximum likelihood (seeded ensemble)
    msm_lags = tuple(sorted(set(cfg["_its_lags"]) | {lag}))
    ref = msm_reference(phis, psis, dt_ps=dt, kT=kT, lags=msm_lags, n_bins=cfg["msm_bins"])
    ref_at_lag = ref["timescales_ps"][msm_lags.index(lag)][0]
    boot = _bootstrap_reference(phis, psis, cfg, kT, int(cfg.get("bootstrap", 0)))

    sim_wall = float(sum(t.params.get("wall_s", 0.0) for t in trajs))
    timings: dict[str, float] = {"simulation_cpu_s": sim_wall}
    dist = [pairwise_distances(p) for p in positions]
    per_seed: list[list[dict]] = []
    for seed in range(n_seeds):
        results: list[dict] = []
        # ---- neural methods with the SchNet encoder
        for kind in ("DPNets-relaxed", "DPNets (P^γ)", "VAMPNets"):
            net, t_fit = train_network(kind, positions, z, train, cfg, seed, device, progress)
            timings[f"{kind} seed{seed} train_s"] = t_fit
            feats = [prepend_ones(net.transform(p, batch_size=4096)) for p in positions]
            all_feats = np.concatenate(feats)
            res = evaluate_features(
                kind,
                feats,
                lambda m, f=all_feats: m.eigenfunctions(f),
                phi_all,
                kT,
                held_out,
                cfg,
                ck=kind == "DPNets-relaxed" and seed == 0,
            )
            res["train_s"] = t_fit
            res["history"] = net.history_
            results.append(res)

        # ---- Nyström kernel regression on pairwise heavy-atom distances
        for est in ("pcr", "rrr"):
            res = fit_nystrom(est, dist, train, held_out, phi_all, kT, cfg, seed)
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
    pm_ts = f" ± {boot['slowest_ps_std'] / 1000:.2g}" if boot["n_boot"] > 1 else ""
    pm_dg = f" ± {boot['delta_g_std']:.2g}" if boot["n_boot"] > 1 else ""
    rows.append(
        [
            f"Reference: MSM {cfg['msm_bins']}x{cfg['msm_bins']} (φ, ψ)",
            "-",
            "-",
            f"{ref_ns:.3g}{pm_ts}",
            "-",
            f"{ref['delta_g']:.3g}{pm_dg}",
            "-",
        ]
    )
    wall = time.perf_counter() - t_start
    mode = "quick" if quick else "full"
    total_ns = sum(len(t) for t in trajs) * dt / 1000
    head = (
        f"Alanine dipeptide ({cfg['solvent']}, {cfg['temperature']:g} K, 10 heavy atoms): "
        f"{n_traj} trajectories of {cfg['run_ns']:g} ns ({total_ns:g} ns, frames every "
        f"{dt:g} ps) started alternately at φ = {', '.join(f'{v:g}' for v in cfg['seed_phis'])}°"
        f", {mode} run; training lag {lag * dt:g} ps, r = {cfg['r']}, {n_seeds} seed(s), "
        f"trained on {len(train)} trajectories; VAMP-2 scores of the r features at the "
        f"training lag on all trajectories and on the {len(held_out)} held-out ones; slowest "
        f"timescale at the training lag (reference: reversible MSM at lag {msm_lags[-1] * dt:g} "
        f"ps; at {lag * dt:g} ps it is {ref_at_lag / 1000:.3g} ns"
        + (
            f"; ± = its bootstrap std at the training lag, {boot['n_boot']} resamples of whole "
            "trajectories"
            if pm_ts
            else ""
        )
        + "); ΔG = G(C7ax/αL) − G(C7eq/β), reweighted to equilibrium. "
        f"Wall time {wall:.0f} s."
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
    _plot_its(out / "its.png", results, ref, cfg)
    fes_methods = [r for r in results if r["name"] in ("DPNets-relaxed", "Nyström-PCR")]
    _plot_fes(out / "fes.png", fes_methods, phi_all, psi_all, kT, cfg["fes_bins"])
    main = results[0]
    if "ck_test" in main and pyplot() is not None:
        names = _set_names(main["ck_assignments"], phi_all)
        fig = main["ck_test"].plot(units="ns", names=names)
        fig.suptitle(
            f"DPNets-relaxed: Chapman–Kolmogorov test (PCCA+ sets, lag {lag * dt:g} ps)", fontsize=9
        )
        fig.savefig(out / "ck.png", dpi=100)
        pyplot().close(fig)
    _plot_eigenfunctions(
        out / "eigenfunctions.png", results, phi_all, psi_all, cfg["scatter_points"]
    )

    drop = ("f1", "f2", "weights", "ck_test", "ck_assignments")
    payload = {
        "config": {
            k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items() if k[0] != "_"
        },
        "simulation": {
            "n_trajectories": n_traj,
            "total_ns": total_ns,
            "common": common,
            "runs": runs,
            "cpu_s": sim_wall,
            "frames_in_c7ax": float(np.mean(basin_b_mask(phi_all))),
        },
        "split": {"train": train, "held_out": held_out},
        "reference": ref,
        "reference_bootstrap": boot,
        "reference_slowest_at_training_lag_ps": ref_at_lag,
        "methods": [[{k: v for k, v in r.items() if k not in drop} for r in rs] for rs in per_seed],
        "timings": timings,
        "wall_s": wall,
        "quick": quick,
    }
    write_results(out, table, payload)
    return table
