r"""Enhanced sampling with a learned slow mode (issue 27): a DPNet's slowest eigenfunction,
exported to TorchScript, as the collective variable of well-tempered metadynamics.

``dpnets reproduce enhanced-sampling [--quick] [--seeds K] [--out DIR]``

Setting
-------
* System: overdamped Langevin dynamics ``dx = -grad U(x) dt + sqrt(2 kT) dW`` (unit
  friction, ``kT = 1``) in the curved double well

  .. math::

      U(x, y) = h (x^2 - 1)^2 + \tfrac{k}{2} \big(y - c (x^2 - 1)\big)^2,
      \quad h = 8,\ k = 6,\ c = 1,

  with minima at ``(+-1, 0)`` and the saddle at ``(0, -1)`` (barrier ``h = 8 kT``): the
  transition path bends, so neither ``x`` nor ``y`` alone is the reaction coordinate. The
  integrator is in this module: Metropolis-adjusted Langevin steps (:func:`_mala`: the
  Euler-Maruyama proposal, ``dt = 2e-3``, and a Metropolis test that makes the Boltzmann
  law of the (biased) potential exactly invariant, so that no time-step bias enters the
  free energies; about 2% rejections). The exact free energy is ``F = U`` (``kT = 1``),
  averaged over each histogram bin by quadrature.
* Learning: 200 short unbiased runs of 1 time unit (500 steps, a frame every 5 steps)
  started uniformly where ``U < 10 kT``; a DPNet (MLP 2-32-32-3, CELU, 20 epochs) at a lag
  of 10 frames (0.1 time units) and its :class:`dpnets.TransferOperator`. The slowest
  non-constant eigenfunction ``s = phi_1`` is exported with :func:`dpnets.export`
  (float32, the PLUMED default) and the simulation calls **only the exported file**
  (``torch.jit.load``) for ``s`` and ``grad s``.
* Biasing: well-tempered metadynamics on ``s`` with ``n_walkers`` walkers sharing one bias
  (a hill of height ``w0 exp(-V(s)/((gamma - 1) kT))`` and width ``sigma`` per walker every
  ``pace`` steps, bias factor ``gamma = 10``, bias on a grid of ``s``), then a production
  run of the same walkers under the final, static bias. The equilibrium free energy is
  recovered by reweighting the production frames with ``exp(V(s(x)) / kT)`` (exact for a
  static bias).
* Reference: an unbiased run of the same walkers and length, from the same starts: every
  walker starts in the left well, so the unbiased run learns the right well's population
  only from its rare crossings (its free-energy error is reported too).

Metrics
-------
* ``transition_rate_ratio``: transitions between the wells (core sets ``x < -0.7`` and
  ``x > 0.7``, counted when a walker reaches the other core) per unit time, biased (build
  and production) over unbiased (goal >= 10).
* ``fes_max_error_kT``: largest ``|F_reweighted - F_exact|`` over the histogram bins (0.2
  x 0.2) whose exact free energy is within 5 kT of the minimum, after aligning the two by
  their Boltzmann-weighted mean difference (goal <= 0.5 kT).
"""

from __future__ import annotations

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

__all__ = ["run", "potential", "grad_potential", "CONFIG", "QUICK"]

H, K, C = 8.0, 6.0, 1.0  # barrier height (kT), transverse stiffness, channel curvature
KT = 1.0

#: the full experiment
CONFIG: dict[str, Any] = {
    "dt": 2e-3,
    "train_runs": 200,
    "train_steps": 500,
    "train_stride": 5,
    "lag": 10,
    "epochs": 20,
    "hidden": [32, 32],
    "r": 3,
    "n_walkers": 64,
    "build_steps": 20_000,
    "prod_steps": 40_000,
    "pace": 100,
    "height": 0.05,
    "sigma": 0.05,
    "bias_factor": 10.0,
    "save_every": 10,
    "bin_width": 0.2,
    "fes_window_kT": 5.0,
}
#: ``--quick``: a smoke test of a few seconds
QUICK: dict[str, Any] = {
    **CONFIG,
    "train_runs": 60,
    "epochs": 5,
    "n_walkers": 16,
    "build_steps": 2_000,
    "prod_steps": 2_000,
}


def potential(x: np.ndarray) -> np.ndarray:
    """``U(x, y)`` (kT units) of points ``(..., 2)``."""
    a, b = x[..., 0], x[..., 1]
    q = a**2 - 1.0
    return H * q**2 + 0.5 * K * (b - C * q) ** 2


def grad_potential(x: np.ndarray) -> np.ndarray:
    """``grad U`` of points ``(..., 2)``."""
    a, b = x[..., 0], x[..., 1]
    q = a**2 - 1.0
    t = b - C * q
    return np.stack([4.0 * H * a * q - 2.0 * K * C * a * t, K * t], axis=-1)


def _starts(n: int, rng: np.random.Generator, cutoff: float = 10.0) -> np.ndarray:
    """``n`` points uniform on ``{U < cutoff}`` (rejection from a box)."""
    out = np.empty((0, 2))
    while out.shape[0] < n:
        p = rng.uniform([-1.8, -2.0], [1.8, 3.0], size=(4 * n, 2))
        out = np.concatenate([out, p[potential(p) < cutoff]])
    return out[:n]


def _mala(x: np.ndarray, state: tuple, energy: Any, dt: float, rng) -> tuple:
    """One Metropolis-adjusted Langevin step of every walker (rows of ``x``).

    The proposal is the Euler-Maruyama step of ``dx = -grad W dt + sqrt(2 kT) dW``; the
    Metropolis test makes ``exp(-W / kT)`` exactly invariant, so that the reweighted free
    energy carries no time-step bias (rejections are rare at this ``dt``). ``state`` holds
    ``energy(x)``: ``(W, grad W, extra)``; returns the new ``x``, state and acceptances.
    """
    w, gw, extra = state
    prop = x - gw * dt + np.sqrt(2.0 * KT * dt) * rng.normal(size=x.shape)
    wp, gwp, extrap = energy(prop)
    fwd = ((prop - x + dt * gw) ** 2).sum(1)
    bwd = ((x - prop + dt * gwp) ** 2).sum(1)
    log_a = -(wp - w) / KT - (bwd - fwd) / (4.0 * KT * dt)
    acc = np.log(rng.uniform(size=len(x))) < log_a
    x = np.where(acc[:, None], prop, x)
    w, gw = np.where(acc, wp, w), np.where(acc[:, None], gwp, gw)
    extra = np.where(acc, extrap, extra)
    return x, (w, gw, extra), acc


def _plain(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return potential(x), grad_potential(x), np.zeros(len(x))


def _unbiased(x0: np.ndarray, steps: int, dt: float, stride: int, rng) -> np.ndarray:
    """:func:`_mala` from ``x0`` (w, 2) on ``U``: frames ``(steps // stride + 1, w, 2)``."""
    x = x0.copy()
    state = _plain(x)
    frames = [x.copy()]
    for t in range(1, steps + 1):
        x, state, _ = _mala(x, state, _plain, dt, rng)
        if t % stride == 0:
            frames.append(x.copy())
    return np.stack(frames)


class _Bias:
    """Well-tempered metadynamics bias ``V(s)`` on a grid (shared by all walkers)."""

    def __init__(self, lo: float, hi: float, cfg: dict[str, Any]) -> None:
        self.grid = np.linspace(lo, hi, 801)
        self.v = np.zeros_like(self.grid)
        self.sigma, self.height = float(cfg["sigma"]), float(cfg["height"])
        self.delta_t = (float(cfg["bias_factor"]) - 1.0) * KT
        self.ds = self.grid[1] - self.grid[0]

    def value_and_slope(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``V(s)`` and ``dV/ds`` by linear interpolation; a harmonic wall outside."""
        v = np.interp(s, self.grid, self.v)
        slope = np.gradient(self.v, self.ds)
        dv = np.interp(s, self.grid, slope)
        lo, hi = self.grid[0], self.grid[-1]
        wall = 50.0
        below, above = np.minimum(s - lo, 0.0), np.maximum(s - hi, 0.0)
        v = v + 0.5 * wall * (below**2 + above**2)
        return v, dv + wall * (below + above)

    def deposit(self, s: np.ndarray) -> None:
        v_at = np.interp(s, self.grid, self.v)
        w = self.height * np.exp(-v_at / self.delta_t)
        d = (self.grid[None, :] - s[:, None]) / self.sigma
        self.v += (w[:, None] * np.exp(-0.5 * d**2)).sum(0)


def _cv_and_grad(cv: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``s(x)`` and ``grad s`` from the exported TorchScript file alone."""
    xt = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    s = cv(xt)[:, 0]
    (g,) = torch.autograd.grad(s.sum(), xt)
    return s.detach().double().numpy(), g.double().numpy()


def _biased(
    cv: Any, x0: np.ndarray, bias: _Bias, cfg: dict[str, Any], rng
) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Metadynamics (build, depositing) then a static-bias production run, both with
    :func:`_mala` on ``U + V(s)``; returns every saved frame ``(n, w, 2)``, their ``s``, the
    index of the first production frame and the acceptance rate."""
    dt, every = float(cfg["dt"]), int(cfg["save_every"])

    def energy(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, gs = _cv_and_grad(cv, x)
        v, dv = bias.value_and_slope(s)
        return potential(x) + v, grad_potential(x) + dv[:, None] * gs, s

    x = x0.copy()
    state = energy(x)
    frames, svals = [], []
    build, total = int(cfg["build_steps"]), int(cfg["build_steps"]) + int(cfg["prod_steps"])
    first_prod, accepted = 0, 0
    for t in range(1, total + 1):
        if t <= build and t % int(cfg["pace"]) == 0:
            bias.deposit(state[2])
            state = energy(x)  # the bias changed under the walkers
        x, state, acc = _mala(x, state, energy, dt, rng)
        accepted += int(acc.sum())
        if t % every == 0:
            if t <= build:
                first_prod = len(frames) + 1
            frames.append(x.copy())
            svals.append(state[2].copy())
    return np.stack(frames), np.stack(svals), first_prod, accepted / (total * len(x))


def _transitions(xs: np.ndarray, core: float = 0.7) -> int:
    """Core-to-core transitions of every walker in frames ``(n, w, 2)``."""
    total = 0
    for traj in xs[..., 0].T:
        state = 0
        for v in traj:
            new = -1 if v < -core else (1 if v > core else state)
            if state != 0 and new != state:
                total += 1
            state = new
    return total


def _exact_fes(edges_x: np.ndarray, edges_y: np.ndarray, sub: int = 8) -> np.ndarray:
    """``-kT ln int_bin exp(-U / kT)`` by midpoint quadrature, normalised over the grid."""
    fx = np.linspace(edges_x[0], edges_x[-1], (len(edges_x) - 1) * sub + 1)
    fy = np.linspace(edges_y[0], edges_y[-1], (len(edges_y) - 1) * sub + 1)
    cx, cy = 0.5 * (fx[1:] + fx[:-1]), 0.5 * (fy[1:] + fy[:-1])
    p = np.exp(-potential(np.stack(np.meshgrid(cx, cy, indexing="ij"), -1)) / KT)
    p = p.reshape(len(edges_x) - 1, sub, len(edges_y) - 1, sub).sum((1, 3))
    with np.errstate(divide="ignore"):
        return -KT * np.log(p / p.sum())


def _fes_error(
    xs: np.ndarray, weights: np.ndarray, cfg: dict[str, Any]
) -> tuple[float, dict[str, np.ndarray]]:
    width = float(cfg["bin_width"])
    ex = np.arange(-2.0, 2.0 + 1e-9, width)
    ey = np.arange(-2.0, 3.0 + 1e-9, width)
    hist, _, _ = np.histogram2d(xs[:, 0], xs[:, 1], bins=(ex, ey), weights=weights)
    with np.errstate(divide="ignore"):
        est = -KT * np.log(hist / hist.sum())
    exact = _exact_fes(ex, ey)
    region = exact - exact.min() <= float(cfg["fes_window_kT"])
    ok = region & np.isfinite(est)
    if not ok.all() == region.all() or (region & ~np.isfinite(est)).any():
        # the window is not sampled everywhere (short runs): no finite error, nowhere
        return float("inf"), {"est": est, "exact": exact, "ex": ex, "ey": ey, "where": None}
    p = np.exp(-exact[region])
    diff = est[region] - exact[region]
    shift = float((p * diff).sum() / p.sum())
    err = float(np.abs(diff - shift).max())
    i, j = np.argwhere(region)[int(np.argmax(np.abs(diff - shift)))]
    where = [0.5 * (ex[i] + ex[i + 1]), 0.5 * (ey[j] + ey[j + 1]), float(exact[i, j] - exact.min())]
    return err, {"est": est - shift, "exact": exact, "ex": ex, "ey": ey, "where": where}


def _fes_x(xs: np.ndarray, weights: np.ndarray, cfg: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """The free energy along ``x``: reweighted estimate and exact, on bins of 0.1."""
    ex = np.arange(-1.8, 1.8 + 1e-9, 0.1)
    hist, _ = np.histogram(xs[:, 0], bins=ex, weights=weights)
    fine_y = np.linspace(-4.0, 6.0, 2001)
    fx = np.linspace(ex[0], ex[-1], (len(ex) - 1) * 16 + 1)
    cx = 0.5 * (fx[1:] + fx[:-1])
    u = potential(np.stack(np.meshgrid(cx, fine_y, indexing="ij"), -1))
    p = np.exp(-u / KT).sum(1).reshape(len(ex) - 1, 16).sum(1)
    with np.errstate(divide="ignore"):
        est = -KT * np.log(hist / hist.sum())
        exact = -KT * np.log(p / p.sum())
    return 0.5 * (ex[1:] + ex[:-1]), est - est.min(), exact - exact.min()


def _one_seed(seed: int, cfg: dict[str, Any], out: Path, progress: bool) -> dict[str, Any]:
    from dpnets import DPNet, TransferOperator, export
    from dpnets.nn import MLP

    rng = np.random.default_rng(seed)
    dt = float(cfg["dt"])
    t0 = time.perf_counter()
    # 1. short unbiased runs from uniform starts, the DPNet and its operator
    starts = _starts(int(cfg["train_runs"]), rng)
    runs = _unbiased(starts, int(cfg["train_steps"]), dt, int(cfg["train_stride"]), rng)
    trajs = [np.ascontiguousarray(runs[:, i]) for i in range(runs.shape[1])]
    enc = MLP(2, tuple(cfg["hidden"]), int(cfg["r"]), activation="celu")
    net = DPNet(
        enc, lag=int(cfg["lag"]), epochs=int(cfg["epochs"]), seed=seed, progress=progress
    ).fit(trajs)
    op = TransferOperator(net, dt=dt * int(cfg["train_stride"])).fit(trajs)
    t_fit = time.perf_counter() - t0
    # 2. export the slowest eigenfunction; from here on only the TorchScript file is used
    path = out / f"cv_seed{seed}.pt"
    export(op, path, modes=[1])
    cv = torch.jit.load(str(path))
    s_train = cv(torch.tensor(np.concatenate(trajs), dtype=torch.float32))[:, 0].detach()
    lo, hi = float(s_train.min()), float(s_train.max())
    pad = 0.25 * (hi - lo)
    # 3. unbiased and biased runs of the same walkers and length, from the left minimum
    w = int(cfg["n_walkers"])
    x0 = np.tile([-1.0, 0.0], (w, 1))  # every walker starts in the left well
    total = int(cfg["build_steps"]) + int(cfg["prod_steps"])
    t1 = time.perf_counter()
    free = _unbiased(x0, total, dt, int(cfg["save_every"]), rng)[1:]
    t_free = time.perf_counter() - t1
    bias = _Bias(lo - pad, hi + pad, cfg)
    t1 = time.perf_counter()
    frames, svals, first, acceptance = _biased(cv, x0, bias, cfg, rng)
    t_bias = time.perf_counter() - t1
    duration = total * dt * w  # walker-time of each run
    n_free, n_bias = _transitions(free), _transitions(frames)
    rate_free, rate_bias = n_free / duration, n_bias / duration
    ratio = rate_bias / rate_free if n_free > 0 else float("inf")
    # 4. reweighting of the static-bias production frames
    prod = frames[int(first) :].reshape(-1, 2)
    v_prod, _ = bias.value_and_slope(svals[int(first) :].reshape(-1))
    weights = np.exp((v_prod - v_prod.max()) / KT)
    err, fes = _fes_error(prod, weights, cfg)
    free_flat = free.reshape(-1, 2)
    err_free, _ = _fes_error(free_flat, np.ones(len(free_flat)), cfg)
    xc, fx_est, fx_exact = _fes_x(prod, weights, cfg)
    in_window = fx_exact <= float(cfg["fes_window_kT"])
    err_x = float(np.abs(fx_est - fx_exact)[in_window].max())
    lam = op.eig()[1]
    result = {
        "seed": seed,
        "eigenvalue_1": float(lam.real),
        "timescale_1": float(op.implied_timescales()[1]),
        "transitions_unbiased": n_free,
        "transitions_biased": n_bias,
        "walker_time": duration,
        "rate_unbiased": rate_free,
        "rate_biased": rate_bias,
        "transition_rate_ratio": ratio,
        "mala_acceptance_biased": acceptance,
        "fes_max_error_kT": err,
        "fes_max_error_kT_unbiased_same_length": err_free,
        "fes_max_error_at": fes["where"],
        "fes_x_max_error_kT": err_x,
        "seconds": {"fit": t_fit, "unbiased": t_free, "biased": t_bias},
    }
    if seed == 0:
        _figure(out, free, frames, int(first), fes, (xc, fx_est, fx_exact), bias, cv)
    return result


def _figure(out, free, frames, first, fes, fx, bias, cv) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - matplotlib missing
        return
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), layout="constrained")
    ex, ey = fes["ex"], fes["ey"]
    gx, gy = np.meshgrid(np.linspace(-2, 2, 200), np.linspace(-2, 3, 250), indexing="ij")
    grid = np.stack([gx, gy], -1)
    u = potential(grid)
    with torch.no_grad():
        s = cv(torch.tensor(grid.reshape(-1, 2), dtype=torch.float32))[:, 0].numpy()
    ax = axes[0, 0]
    ax.contour(gx, gy, u, levels=np.arange(0, 12, 1.0), colors="0.7", linewidths=0.6)
    cs = ax.contourf(gx, gy, s.reshape(gx.shape), levels=20, cmap="coolwarm", alpha=0.8)
    fig.colorbar(cs, ax=ax, label="exported s = φ₁")
    ax.set_title("learned slow mode (TorchScript file) on U")
    for ax, xs, title in (
        (axes[0, 1], free, "unbiased walker"),
        (axes[0, 2], frames, "metadynamics walker (build + static bias)"),
    ):
        t = np.arange(xs.shape[0])
        ax.plot(t, xs[:, 0, 0], lw=0.5, label="walker 0")
        ax.plot(t, xs[:, 1, 0], lw=0.5, label="walker 1")
        ax.set_xlabel("saved frame")
        ax.set_ylabel("x")
        ax.set_title(title)
        ax.legend(fontsize="small")
    axes[0, 2].axvline(first, color="k", ls=":", lw=1)
    vmax = 6.0
    for ax, f, title in (
        (axes[1, 0], fes["exact"] - fes["exact"].min(), "exact F = U (kT)"),
        (axes[1, 1], fes["est"] - fes["exact"].min(), "reweighted F (kT)"),
    ):
        m = ax.pcolormesh(ex, ey, np.clip(f, 0, vmax).T, cmap="viridis", vmin=0, vmax=vmax)
        fig.colorbar(m, ax=ax)
        ax.set_title(title)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    ax = axes[1, 2]
    xc, fx_est, fx_exact = fx
    ax.plot(xc, fx_exact, "k-", label="exact")
    ax.plot(xc, fx_est, "o", ms=3, label="reweighted metadynamics")
    ax.set_ylim(-0.5, 9)
    ax.set_xlabel("x")
    ax.set_ylabel("F(x) (kT)")
    ax.set_title("free energy along x")
    ax.legend(fontsize="small")
    fig.savefig(out / "enhanced_sampling.png", dpi=110)
    plt.close(fig)


def run(
    *,
    quick: bool = False,
    seeds: int | None = None,
    out: str | Path = Path("dpnets-out") / "enhanced-sampling",
    device: str | None = None,
    progress: bool = True,
) -> str:
    """Train on short unbiased runs, export the slowest mode, bias it, and compare.

    Parameters
    ----------
    quick : bool, default False
        A smoke test (:data:`QUICK`: fewer runs, walkers and steps; its numbers do not meet
        the goals).
    seeds : int, optional
        Independent repetitions (default 1): data, network and noise seeds ``0..seeds-1``.
    out : path
        Output folder: ``results.json``, ``table.md``, ``enhanced_sampling.png`` and the
        exported ``cv_seed*.pt`` files.
    device : str, optional
        Ignored (CPU: the simulation is the cost; accepted for the common interface).
    progress : bool, default True
        Progress bars of the fits.

    Returns
    -------
    str
        The results table (markdown).
    """
    del device
    cfg = QUICK if quick else CONFIG
    n_seeds = 1 if seeds is None else int(seeds)
    if n_seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    out = output_dir(out)
    with torch_threads(1):
        results = [_one_seed(s, cfg, out, progress) for s in range(n_seeds)]
    ratio = [r["transition_rate_ratio"] for r in results]
    err = [r["fes_max_error_kT"] for r in results]
    table = markdown_table(
        ["metric", "value", "goal"],
        [
            ["transition_rate_ratio (biased / unbiased)", mean_std(ratio), ">= 10"],
            ["fes_max_error_kT (2-D, F <= 5 kT)", mean_std(err), "<= 0.5"],
            [
                "same error, unbiased run of the same length",
                mean_std([r["fes_max_error_kT_unbiased_same_length"] for r in results]),
                "",
            ],
            [
                "F(x) max error (kT, F <= 5 kT)",
                mean_std([r["fes_x_max_error_kT"] for r in results]),
                "",
            ],
            [
                "transitions unbiased / biased",
                f"{results[0]['transitions_unbiased']} / {results[0]['transitions_biased']}",
                "",
            ],
        ],
    )
    payload = {
        "experiment": "enhanced-sampling/model_potential",
        "mode": "quick" if quick else "full",
        "command": "dpnets reproduce enhanced-sampling"
        + (" --quick" if quick else "")
        + (f" --seeds {n_seeds}" if seeds is not None else ""),
        "potential": {"U": "h (x^2-1)^2 + k/2 (y - c (x^2-1))^2", "h": H, "k": K, "c": C},
        "kT": KT,
        "config": cfg,
        "transition_rate_ratio": float(np.mean(ratio)),
        "fes_max_error_kT": float(np.mean(err)),
        "per_seed": results,
    }
    write_results(out, table, payload)
    return table
