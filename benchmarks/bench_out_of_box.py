"""Out-of-the-box accuracy: the README path with the library defaults on five systems.

A newcomer's use of dpnets: raw trajectories, ``DPNet(MLP(d, (64, 64), k))`` with every other
setting left at its default, ``TransferOperator(net, dt=dt).fit(data)`` and
``implied_timescales()``. Each system has reference timescales that do not come from any
learned model (exact Markov-chain or linear-Gaussian spectra, or a finite-difference
discretisation of the Langevin generator), and none of them is used by the test suite or was
used to tune the library:

* ``hmm-3d``: a reversible 4-state chain with one slow and two faster processes, seen
  through noisy emissions placed on a helix and warped nonlinearly in 3-D;
* ``double-well-1d``: overdamped Langevin in a tilted double well (finite-difference
  reference of :class:`dpnets.systems.langevin.OverdampedLangevin1D`);
* ``triple-well-2d``: overdamped Langevin in the classic 2-D triple-well potential (Schütte;
  deeptime's ``triple_well_2d``) at inverse temperature 1.5, with a square-root-approximation
  finite-volume reference on a 0.02 grid (converged to 0.1% against a 0.04 grid);
* ``cycle-2d``: a *non-reversible* 3-state chain with a strong cyclic current (complex
  eigenvalues) seen through noisy 2-D emissions;
* ``scales-2d``: a non-normal 2-D linear-Gaussian system whose raw coordinates differ by
  five orders of magnitude and sit far from the origin.

Every system is also fitted on a shifted copy (``x + 1000``) and a rescaled copy (each
coordinate multiplied by ``1e-3`` or ``1e3`` in turn), to check that the user's units do not
matter. deeptime's VAMPNet is trained with the same MLP, epochs, batch size and learning rate
on the raw data; its features go through the same :class:`dpnets.TransferOperator`.

Usage::

    python benchmarks/bench_out_of_box.py                 # full table (about 20 min, 2 CPUs)
    python benchmarks/bench_out_of_box.py --quick         # a fifth of the data, one seed
    python benchmarks/bench_out_of_box.py --smoke         # seconds: tiny data, one epoch
                                                          # (the test suite's; an --out
                                                          # inside benchmarks/results goes
                                                          # to a temporary folder)
    python benchmarks/bench_out_of_box.py --sweep         # the defaults study (score, gamma,
                                                          # lr, batch size, epochs)
    python benchmarks/bench_out_of_box.py --out DIR       # also write DIR/table.md, results.json

Timing: wall-clock seconds of ``fit`` (training only) on the same machine in the same run.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from dpnets import DPNet, TransferOperator
from dpnets.nn import MLP
from dpnets.representation import DEFAULTS
from dpnets.systems import MarkovChain
from dpnets.systems.langevin import OverdampedLangevin1D
from dpnets.systems.linear import LinearGaussian


@dataclass
class System:
    """Trajectories in raw units, the frame time, the lag and the reference timescales."""

    name: str
    trajs: list[np.ndarray]
    dt: float
    lag: int
    ref: np.ndarray  # leading non-trivial timescales, physical units
    note: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.trajs[0].shape[1])

    @property
    def k(self) -> int:
        return int(self.ref.shape[0])

    @property
    def n_frames(self) -> int:
        return int(sum(t.shape[0] for t in self.trajs))


# ----------------------------------------------------------------------------- systems
def _chain_timescales(P: np.ndarray, k: int) -> np.ndarray:
    mod = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
    return -1.0 / np.log(mod[1 : k + 1])


def _one_hot(n_states: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda s: np.eye(n_states)[np.asarray(s, dtype=np.int64).reshape(-1)]


def hmm_3d(scale: float = 1.0) -> System:
    pi = np.array([0.4, 0.2, 0.3, 0.1])
    a = np.zeros((4, 4))
    a[0, 1] = a[1, 0] = 0.5
    a[2, 3] = a[3, 2] = 0.6
    a[1, 2] = a[2, 1] = 0.03
    a[0, 3] = a[3, 0] = 0.02
    rates = a * pi[None, :]  # detailed balance with pi
    np.fill_diagonal(rates, -rates.sum(1))
    P = scipy.linalg.expm(rates)
    n = int(200_000 * scale)
    s = MarkovChain(P).sample(n, seed=11)
    rng = np.random.default_rng(12)
    theta = 0.9 * (np.pi / 2) * np.arange(4)
    centres = np.stack([np.cos(theta), np.sin(theta), 0.5 * theta], axis=1)
    x = centres[s] + 0.12 * rng.standard_normal((n, 3))
    y = np.stack(
        [
            x[:, 0] + 0.3 * x[:, 1] ** 2,
            2.0 * np.tanh(1.5 * x[:, 1]),
            x[:, 2] + 0.2 * np.sin(3 * x[:, 0]),
        ],
        axis=1,
    )
    check = TransferOperator(_one_hot(4), constant=False, lag=1).fit(s)  # MSM, hidden states
    return System(
        "hmm-3d",
        [y],
        1.0,
        1,
        _chain_timescales(P, 3),
        "4-state reversible chain, 3-D warped helix",
        {"data_check": _leading(check.implied_timescales(), 3), "check": "MSM on hidden states"},
    )


def double_well_1d(scale: float = 1.0) -> System:
    def potential(x: Any) -> Any:
        return 2.0 * (x**2 - 1) ** 2 + 0.3 * x

    def grad(x: Any) -> Any:
        return 8.0 * x * (x**2 - 1) + 0.3

    sys = OverdampedLangevin1D(potential, grad, kT=1.0, dt=1e-4, domain=(-2.5, 2.5))
    chains, frames, every = 200, int(800 * scale), 500  # frames every 0.05
    x0 = sys.sample_stationary(chains, seed=21)[:, 0]
    traj = sys.simulate(x0, frames * every, record_every=every, seed=22)  # (frames + 1, chains)
    trajs = [traj[:, c : c + 1] for c in range(chains)]
    ref = sys.implied_timescales(3)[1:3]
    return System(
        "double-well-1d",
        trajs,
        0.05,
        2,
        ref,
        "tilted double well, kT = 1",
        _edmd_check(trajs, 2, 0.05, 2, 20),
    )


def _edmd_check(trajs: list[np.ndarray], lag: int, dt: float, k: int, degree: int) -> dict:
    from dpnets.baselines import EDMD

    op = EDMD("chebyshev", degree=degree, dt=dt, lag=lag).fit(trajs)
    return {"data_check": _leading(op.implied_timescales(), k), "check": f"EDMD Chebyshev {degree}"}


def _triple_well(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (
        3 * np.exp(-(x**2) - (y - 1 / 3) ** 2)
        - 3 * np.exp(-(x**2) - (y - 5 / 3) ** 2)
        - 5 * np.exp(-((x - 1) ** 2) - y**2)
        - 5 * np.exp(-((x + 1) ** 2) - y**2)
        + 0.2 * x**4
        + 0.2 * (y - 1 / 3) ** 4
    )


def _triple_well_grad(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    e1 = 3 * np.exp(-(x**2) - (y - 1 / 3) ** 2)
    e2 = -3 * np.exp(-(x**2) - (y - 5 / 3) ** 2)
    e3 = -5 * np.exp(-((x - 1) ** 2) - y**2)
    e4 = -5 * np.exp(-((x + 1) ** 2) - y**2)
    gx = -2 * x * (e1 + e2) - 2 * (x - 1) * e3 - 2 * (x + 1) * e4 + 0.8 * x**3
    gy = -2 * (y - 1 / 3) * e1 - 2 * (y - 5 / 3) * e2 - 2 * y * (e3 + e4) + 0.8 * (y - 1 / 3) ** 3
    return gx, gy


def _grid(h: float) -> tuple[np.ndarray, np.ndarray]:
    xs = np.arange(-2.5, 2.5 + h / 2, h)
    ys = np.arange(-2.0, 3.0 + h / 2, h)
    return np.meshgrid(xs, ys, indexing="ij")


def triple_well_reference(beta: float, h: float, k: int) -> np.ndarray:
    """Timescales of overdamped Langevin (friction 1) from the square-root approximation.

    Rates between neighbouring cells ``(D / h^2) exp(-beta (V_j - V_i) / 2)`` (``D = 1/beta``)
    give a reversible rate matrix; its symmetrisation by ``pi^{1/2}`` has the constant
    ``D / h^2`` off the diagonal, and its eigenvalues nearest 0 come from shift-invert Lanczos.
    """
    gx, gy = _grid(h)
    v = _triple_well(gx, gy)
    nx, ny = v.shape
    idx = np.arange(nx * ny).reshape(nx, ny)
    c = 1.0 / (beta * h * h)
    rows, cols = [], []
    diag = np.zeros(nx * ny)
    for a, b in (
        ((slice(0, -1), slice(None)), (slice(1, None), slice(None))),
        ((slice(None), slice(0, -1)), (slice(None), slice(1, None))),
    ):
        i, j = idx[a].ravel(), idx[b].ravel()
        vi, vj = v[a].ravel(), v[b].ravel()
        rows += [i, j]
        cols += [j, i]
        np.add.at(diag, i, c * np.exp(-beta * (vj - vi) / 2))
        np.add.at(diag, j, c * np.exp(-beta * (vi - vj) / 2))
    r, cc = np.concatenate(rows), np.concatenate(cols)
    sym = sp.coo_matrix((np.full(r.size, c), (r, cc)), shape=(nx * ny,) * 2).tocsc()
    sym = sym - sp.diags(diag)
    w = np.sort(spla.eigsh(sym, k=k + 1, sigma=1e-6, which="LM", return_eigenvectors=False))
    return -1.0 / w[::-1][1:]


def triple_well_2d(scale: float = 1.0) -> System:
    beta, dt_sim, every, chains = 1.0, 5e-4, 200, 200  # frames every 0.1
    frames = int(500 * scale)
    rng = np.random.default_rng(31)
    gx, gy = _grid(0.02)
    p = np.exp(-beta * _triple_well(gx, gy)).ravel()
    start = rng.choice(p.size, size=chains, p=p / p.sum())
    x, y = gx.ravel()[start].copy(), gy.ravel()[start].copy()
    noise = np.sqrt(2.0 * dt_sim / beta)
    out = np.empty((frames, chains, 2))
    for f in range(frames):
        for _ in range(every):
            ax, ay = _triple_well_grad(x, y)
            x += -ax * dt_sim + noise * rng.standard_normal(chains)
            y += -ay * dt_sim + noise * rng.standard_normal(chains)
        out[f, :, 0], out[f, :, 1] = x, y
    trajs = [out[:, c] for c in range(chains)]
    ref = triple_well_reference(beta, 0.02, 2)
    return System(
        "triple-well-2d",
        trajs,
        0.1,
        4,
        ref,
        "triple-well potential, beta = 1",
        _edmd_check(trajs, 4, 0.1, 2, 12),
    )


def cycle_2d(scale: float = 1.0) -> System:
    P = np.array([[0.95, 0.04, 0.01], [0.01, 0.95, 0.04], [0.04, 0.01, 0.95]])
    n = int(100_000 * scale)
    s = MarkovChain(P).sample(n, seed=41)
    rng = np.random.default_rng(42)
    theta = 2 * np.pi * np.arange(3) / 3
    centres = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    x = centres[s] + 0.15 * rng.standard_normal((n, 2))
    y = np.stack([np.sinh(1.2 * x[:, 0]), x[:, 1] + 0.4 * x[:, 0] ** 2], axis=1)
    ref = _chain_timescales(P, 2)  # a complex pair: one timescale, twice
    check = TransferOperator(_one_hot(3), constant=False, lag=1).fit(s)
    return System(
        "cycle-2d",
        [y],
        1.0,
        1,
        ref,
        "non-reversible 3-cycle (complex pair), 2-D",
        {"data_check": _leading(check.implied_timescales(), 2), "check": "MSM on hidden states"},
    )


def scales_2d(scale: float = 1.0) -> System:
    c, s_ = np.cos(np.pi / 6), np.sin(np.pi / 6)
    q = np.array([[c, -s_], [s_, c]])
    A = q @ np.diag([0.95, 0.6]) @ q.T  # reversible (symmetric) in the latent coordinates
    n = int(100_000 * scale)
    z = LinearGaussian(A, noise_std=0.3).sample(n, seed=51)
    raw = z * np.array([200.0, 0.002]) + np.array([5000.0, -3.0])
    ref = -1.0 / np.log(np.array([0.95, 0.95**2, 0.95**3]))
    from dpnets.baselines import EDMD

    zs = (raw - raw.mean(0)) / raw.std(0)
    check = EDMD("monomial", degree=3).fit(zs)
    return System(
        "scales-2d",
        [raw],
        1.0,
        1,
        ref,
        "linear-Gaussian, coordinates of scale 200 and 0.002 around (5000, -3)",
        {"data_check": _leading(check.implied_timescales(), 3), "check": "EDMD monomials 3"},
    )


SYSTEMS: dict[str, Callable[[float], System]] = {
    "hmm-3d": hmm_3d,
    "double-well-1d": double_well_1d,
    "triple-well-2d": triple_well_2d,
    "cycle-2d": cycle_2d,
    "scales-2d": scales_2d,
}


def copies(system: System) -> dict[str, list[np.ndarray]]:
    """The raw data, a shifted copy and a per-coordinate rescaled copy."""
    d = system.dim
    factors = np.array([1e-3 if i % 2 == 0 else 1e3 for i in range(d)])
    return {
        "raw": system.trajs,
        "shifted": [t + 1000.0 for t in system.trajs],
        "rescaled": [t * factors for t in system.trajs],
    }


# ----------------------------------------------------------------------------- fitting
def fit_dpnets(system: System, trajs: list[np.ndarray], seed: int, **kw: Any) -> dict[str, Any]:
    """The README path: defaults unless ``kw`` overrides them (the sweep)."""
    torch.manual_seed(seed)
    enc = MLP(system.dim, (64, 64), system.k)
    net = DPNet(enc, lag=system.lag, seed=seed, progress=False, device="cpu", **kw)
    t0 = time.perf_counter()
    net.fit(trajs)
    fit_s = time.perf_counter() - t0
    op = TransferOperator(net, dt=system.dt).fit(trajs)
    return {"ts": _leading(op.implied_timescales(), system.k), "fit_s": fit_s}


def fit_deeptime(
    system: System, trajs: list[np.ndarray], seed: int, epochs: int | None = None
) -> dict[str, Any] | None:
    """deeptime's VAMPNet (shared lobe, VAMP-2) with the same MLP, epochs, batch and lr."""
    try:
        from deeptime.decomposition.deep import VAMPNet
        from deeptime.util.data import TrajectoriesDataset
    except ImportError:
        return None
    from torch.utils.data import DataLoader

    torch.manual_seed(seed)
    lobe = MLP(system.dim, (64, 64), system.k)
    vnet = VAMPNet(lobe=lobe, learning_rate=DEFAULTS["lr"], device="cpu", score_method="VAMP2")
    data = [t.astype(np.float32) for t in trajs]
    ds = TrajectoriesDataset.from_numpy(system.lag, data)
    gen = torch.Generator().manual_seed(seed)
    loader = DataLoader(ds, batch_size=DEFAULTS["batch_size"], shuffle=True, generator=gen)
    t0 = time.perf_counter()
    try:
        model = vnet.fit(loader, n_epochs=epochs or DEFAULTS["epochs"]).fetch_model()
    except (RuntimeError, ValueError) as err:  # e.g. torch's eigh failing to converge
        print(f"  deeptime VAMPNet failed on {system.name}: {str(err).splitlines()[0]}")
        return {"ts": [float("nan")] * system.k, "fit_s": float("nan"), "error": str(err)[:200]}
    fit_s = time.perf_counter() - t0
    feats = [model.transform(t) for t in data]
    op = TransferOperator(None, dt=system.dt, lag=system.lag).fit(feats)
    return {"ts": _leading(op.implied_timescales(), system.k), "fit_s": fit_s}


def _leading(ts: np.ndarray, k: int) -> list[float]:
    finite = ts[np.isfinite(ts)]
    out = np.full(k, np.nan)
    out[: min(k, finite.size)] = finite[:k]
    return out.tolist()


def rel_err(ts: list[float], ref: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(ts) - ref) / ref


# ----------------------------------------------------------------------------- runs
def run_table(
    systems: list[System], seeds: int, deeptime: bool, epochs: int | None = None
) -> dict[str, Any]:
    """The table's fits; ``epochs`` (``--smoke``) overrides the default on both sides."""
    kw = {} if epochs is None else {"epochs": epochs}
    rows: dict[str, Any] = {}
    for s in systems:
        res: dict[str, Any] = {"ref": s.ref.tolist(), "note": s.note, "n_frames": s.n_frames}
        res.update(s.extra)
        for copy_name, trajs in copies(s).items():
            runs = [fit_dpnets(s, trajs, seed, **kw) for seed in range(seeds)]
            res[copy_name] = runs
            _print_row(s, f"dpnets {copy_name}", runs)
        if deeptime:
            runs = [fit_deeptime(s, s.trajs, seed, epochs) for seed in range(seeds)]
            if runs[0] is not None:
                res["deeptime"] = runs
                _print_row(s, "deeptime VAMPNet raw", runs)
        rows[s.name] = res
    return rows


def _print_row(s: System, label: str, runs: list[dict[str, Any]]) -> None:
    ts = np.mean([r["ts"] for r in runs], axis=0)
    err = rel_err(ts.tolist(), s.ref)
    fit = np.mean([r["fit_s"] for r in runs])
    worst = f"{100 * np.max(err):5.1f}%" if np.all(np.isfinite(err)) else "  n/a"
    print(
        f"{s.name:15s} {label:22s} ts={np.round(ts, 3)} ref={np.round(s.ref, 3)} "
        f"max err={worst} fit={fit:5.1f}s",
        flush=True,
    )


def summarise(rows: dict[str, Any]) -> str:
    head = (
        "| system | reference | data check | dpnets raw (mean ± std) | err | shifted err "
        "| rescaled err | raw/shifted/rescaled spread | deeptime VAMPNet raw | err "
        "| fit s dpnets / deeptime | speed-up |"
    )
    lines = [head, "|" + "---|" * 12]
    for name, res in rows.items():
        ref = np.asarray(res["ref"])

        def stats(
            runs: list[dict[str, Any]], ref: np.ndarray = ref
        ) -> tuple[np.ndarray, np.ndarray, float, float]:
            ts = np.array([r["ts"] for r in runs])
            mean = ts.mean(0)
            errs = rel_err(mean.tolist(), ref)
            err = float(np.max(errs)) if np.all(np.isfinite(errs)) else float("nan")
            return mean, ts.std(0), err, float(np.mean([r["fit_s"] for r in runs]))

        raw, raw_sd, raw_err, raw_fit = stats(res["raw"])
        _, _, sh_err, _ = stats(res["shifted"])
        means = [stats(res[c])[0] for c in ("raw", "shifted", "rescaled")]
        _, _, rs_err, _ = stats(res["rescaled"])
        spread = float(np.nanmax(np.ptp(np.array(means), axis=0) / np.mean(means, axis=0)))
        fmt = lambda v: ", ".join(f"{x:.3g}" for x in v)  # noqa: E731
        if "deeptime" in res:
            ok = [r for r in res["deeptime"] if "error" not in r]
            failed = len(res["deeptime"]) - len(ok)
            dt_mean, dt_sd, dt_err, dt_fit = (
                stats(ok) if ok else (np.full(ref.shape, np.nan), ref * 0, np.nan, np.nan)
            )
            if not ok:
                why = res["deeptime"][0]["error"].split(":")[0]
                dt_cols = f"failed in {failed} of {failed} runs ({why}) | - | {raw_fit:.1f} / - | -"
            else:
                note = f" ({failed} of {len(res['deeptime'])} runs failed)" if failed else ""
                dt_cols = (
                    f"{fmt(dt_mean)} ± {fmt(dt_sd)}{note} | {100 * dt_err:.1f}% | "
                    f"{raw_fit:.1f} / {dt_fit:.1f} | {dt_fit / raw_fit:.1f}x"
                )
        else:
            dt_cols = "- | - | - | -"
        check = res.get("data_check")
        check_col = f"{fmt(check)} ({res['check']})" if check is not None else "-"
        lines.append(
            f"| {name} | {fmt(ref)} | {check_col} | {fmt(raw)} ± {fmt(raw_sd)} | "
            f"{100 * raw_err:.1f}% | "
            f"{100 * sh_err:.1f}% | {100 * rs_err:.1f}% | {100 * spread:.2f}% | {dt_cols} |"
        )
    return "\n".join(lines)


#: The defaults study: one change at a time from the library defaults, plus the old defaults.
SWEEP: dict[str, dict[str, Any]] = {
    "defaults": {},
    "gamma=0": {"gamma": 0.0},
    "gamma=0.01": {"gamma": 0.01},
    "gamma=1 (the paper's)": {"gamma": 1.0},
    "gamma=10": {"gamma": 10.0},
    "relaxed (gamma=1)": {"objective": "relaxed", "gamma": 1.0},
    "vamp2": {"objective": "vamp2", "gamma": 0.0},
    "lr=3e-4": {"lr": 3e-4},
    "lr=3e-3": {"lr": 3e-3},
    "batch=256": {"batch_size": 256},
    "batch=4096": {"batch_size": 4096},
    "epochs=10": {"epochs": 10},
    "no constant (k+1 outputs)": {"constant": False},
    "no standardisation": {"standardize": "none"},
    "old defaults (relaxed, old gamma 1, k+1 outputs, raw inputs)": {
        "objective": "relaxed",
        "gamma": None,  # filled per system: the old trace-scale 1 is 2(k+1) on today's scale
        "constant": False,
        "standardize": "none",
    },
}


def run_sweep(systems: list[System], seeds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # the floor: a non-learned estimator on the same data (statistical error of the data)
    floor = [float(np.max(rel_err(s.extra["data_check"], s.ref))) for s in systems]
    out["data check (MSM / EDMD on the same data)"] = {
        "max_err": dict(zip([s.name for s in systems], floor, strict=True)),
        "fit_s": [float("nan")] * len(systems),
    }
    for label, kw in SWEEP.items():
        errs, fits = [], []
        for s in systems:
            kw_s = dict(kw)
            if "gamma" in kw_s and kw_s["gamma"] is None:
                kw_s["gamma"] = 2.0 * (s.k + 1)
            if kw_s.get("constant") is False:
                # the network must also carry the constant: one more output, as users did
                s_run = System(s.name, s.trajs, s.dt, s.lag, s.ref, s.note)
                runs = [_fit_wider(s_run, seed, **kw_s) for seed in range(seeds)]
            else:
                runs = [fit_dpnets(s, s.trajs, seed, **kw_s) for seed in range(seeds)]
            mean = np.mean([r["ts"] for r in runs], axis=0)
            errs.append(float(np.nanmax(rel_err(mean.tolist(), s.ref))))
            fits.append(float(np.mean([r["fit_s"] for r in runs])))
        out[label] = {
            "max_err": dict(zip([s.name for s in systems], errs, strict=True)),
            "fit_s": fits,
        }
        print(
            f"{label:60s} "
            + " ".join(f"{100 * e:6.1f}%" for e in errs)
            + f"  worst {100 * max(errs):.1f}%",
            flush=True,
        )
    return out


def _fit_wider(system: System, seed: int, **kw: Any) -> dict[str, Any]:
    """As :func:`fit_dpnets` with ``k + 1`` network outputs (the paper's convention)."""
    torch.manual_seed(seed)
    net = DPNet(
        MLP(system.dim, (64, 64), system.k + 1),
        lag=system.lag,
        seed=seed,
        progress=False,
        device="cpu",
        **kw,
    )
    t0 = time.perf_counter()
    net.fit(system.trajs)
    fit_s = time.perf_counter() - t0
    op = TransferOperator(net, dt=system.dt).fit(system.trajs)
    return {"ts": _leading(op.implied_timescales(), system.k), "fit_s": fit_s}


def sweep_table(res: dict[str, Any]) -> str:
    names = list(next(iter(res.values()))["max_err"])
    lines = [
        "| setting | " + " | ".join(names) + " | worst | mean fit s |",
        "|" + "---|" * (len(names) + 3),
    ]
    for label, r in res.items():
        errs = [r["max_err"][n] for n in names]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{100 * e:.1f}%" for e in errs)
            + f" | {100 * max(errs):.1f}% | {np.mean(r['fit_s']):.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a fifth of the data, one seed")
    p.add_argument("--scale", type=float, default=1.0, help="fraction of the data (budget)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--sweep", action="store_true", help="the defaults study instead")
    p.add_argument("--no-deeptime", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="folder for table.md and results.json")
    p.add_argument("--smoke", action="store_true", help="tiny data, one epoch, seconds")
    args = p.parse_args()
    epochs = None
    if args.smoke:
        p.set_defaults(scale=0.02, seeds=1, threads=1)
        args = p.parse_args()
        epochs = 1
        results = Path(__file__).resolve().parent / "results"
        if args.out is not None and Path(args.out).resolve().is_relative_to(results):
            args.out = tempfile.mkdtemp(prefix="bench_out_of_box_smoke_")
    torch.set_num_threads(args.threads)
    scale = 0.2 if args.quick else args.scale
    seeds = 1 if args.quick else args.seeds
    t0 = time.perf_counter()
    systems = [SYSTEMS[n](scale) for n in args.systems.split(",")]
    print(f"data generated in {time.perf_counter() - t0:.0f} s", flush=True)
    if args.sweep:
        res = run_sweep(systems, seeds)
        table = sweep_table(res)
    else:
        res = run_table(systems, seeds, deeptime=not args.no_deeptime, epochs=epochs)
        table = summarise(res)
    wall = time.perf_counter() - t0
    print(table)
    print(f"wall time {wall:.0f} s")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        name = "sweep" if args.sweep else "table"
        (out / f"{name}.md").write_text(table + "\n")
        meta = {
            "command": "python benchmarks/bench_out_of_box.py "
            + " ".join(a for a in __import__("sys").argv[1:]),
            "wall_s": wall,
            "machine": f"{platform.processor() or platform.machine()}, {args.threads} threads",
            "torch": torch.__version__,
            "defaults": DEFAULTS,
            "seeds": seeds,
            "results": res,
        }
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1, default=float))


if __name__ == "__main__":
    main()
