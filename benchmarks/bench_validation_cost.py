"""Validation at the cost of a few fits (issue 25, item 4).

``ck_test`` and ``implied_timescales`` with 50 bootstrap resamples, and
``bootstrap_spectrum``, on 100,000 frames (10 trajectories of a 2-D double well), as
multiples of one ``TransferOperator.fit`` on the same data and features. The resamples are
refitted from per-trajectory sums (features encoded once); the goal is <= 30x one fit for
each (the issue measured 389-638x before). ``--old`` also times the refit-per-resample route
the library took before (module-private helpers, the same maths), on the same data.

    PYTHONPATH=src python benchmarks/bench_validation_cost.py [--features dpnet|monomial]
        [--old] [--threads 1] [--out benchmarks/results/validation_cost.json]
    PYTHONPATH=src python benchmarks/bench_validation_cost.py --smoke   # seconds; with
        # --old; the JSON goes to a temporary folder (never to benchmarks/results)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dpnets import DPNet, TransferOperator
from dpnets.baselines import MonomialFeatures
from dpnets.chapman_kolmogorov import _ck_curves
from dpnets.nn import MLP
from dpnets.resampling import refit_at_lag
from dpnets.validation import (
    bootstrap_spectrum,
    bootstrap_trajectories,
    ck_test,
    implied_timescales,
    pcca,
)

#: The committed results (a ``--smoke`` run never writes there).
RESULTS = Path(__file__).resolve().parent / "results"


def double_well(n_traj: int, length: int, seed: int = 0, dt: float = 0.01) -> list[np.ndarray]:
    """Overdamped Langevin in ``V = (x^2 - 1)^2 + y^2 / 2`` at ``kT = 0.4`` (Euler-Maruyama,
    10 inner steps per frame), ``n_traj`` trajectories of ``length`` frames (float32)."""
    rng = np.random.default_rng(seed)
    kt, inner = 0.4, 10
    h = dt / inner
    x = np.stack([rng.choice([-1.0, 1.0], n_traj), np.zeros(n_traj)], axis=1)
    out = np.empty((length, n_traj, 2), dtype=np.float32)
    for t in range(length):
        for _ in range(inner):
            grad = np.stack([4 * x[:, 0] * (x[:, 0] ** 2 - 1), x[:, 1]], axis=1)
            x = x - grad * h + np.sqrt(2 * kt * h) * rng.standard_normal(x.shape)
        out[t] = x
    return [out[:, i] for i in range(n_traj)]


def timed(fn, repeat: int = 1) -> tuple[float, object]:
    best, value = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def old_ck(model, trajs, steps, members, n_bootstrap):
    """The route before: curves on the data, then a refit and the curves per resample."""
    steps = np.asarray(steps)
    _ck_curves(model, trajs, steps, members, True)
    tau = int(model.lag_)

    def stat(sample):
        return np.stack(_ck_curves(refit_at_lag(model, sample, tau), sample, steps, members, True))

    return bootstrap_trajectories(trajs, stat, n_bootstrap, seed=0)


def old_its(model, trajs, lags, n_bootstrap):
    """The route before: a refit at every lag on the data and on every resample."""

    def scan(sample):
        out = []
        for lag in lags:
            usable = [t for t in sample if t.shape[0] > lag]
            est = refit_at_lag(model, usable, lag) if usable else None
            out.append(np.sort(est.implied_timescales())[-4:-1] if est else np.full(3, np.nan))
        return np.array(out)

    scan(trajs)
    return bootstrap_trajectories(trajs, scan, n_bootstrap, seed=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--features", choices=("dpnet", "monomial"), default="dpnet")
    ap.add_argument("--n-traj", type=int, default=10)
    ap.add_argument("--length", type=int, default=10_000)
    ap.add_argument("--lag", type=int, default=20)
    ap.add_argument("--n-bootstrap", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--old", action="store_true", help="also time the refit-per-resample route")
    ap.add_argument("--out", default=None, help="write the numbers to this JSON file")
    ap.add_argument("--epochs", type=int, default=5, help="DPNet training epochs (not timed)")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many timings")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = ap.parse_args()
    if args.smoke:
        ap.set_defaults(n_traj=3, length=300, lag=5, n_bootstrap=4, old=True, epochs=1, repeat=1)
        args = ap.parse_args()
        if args.out is None or Path(args.out).resolve().is_relative_to(RESULTS):
            args.out = str(Path(tempfile.mkdtemp(prefix="bench_validation_cost_")) / "smoke.json")
    torch.set_num_threads(args.threads)
    trajs = double_well(args.n_traj, args.length)
    n_frames = sum(len(t) for t in trajs)
    lag, nb = args.lag, args.n_bootstrap
    if args.features == "dpnet":
        features = DPNet(MLP(2, (64, 64), 4), lag=lag, epochs=args.epochs, seed=0, progress=False)
        features.fit(trajs)
        described = f"DPNet(MLP(2, (64, 64), 4)), trained {args.epochs} epochs (not timed)"
    else:
        features = MonomialFeatures(4)
        described = "MonomialFeatures(4) (15 features)"
    rep = args.repeat
    t_fit, op = timed(lambda: TransferOperator(features, lag=lag, dt=0.01).fit(trajs), rep)
    sets = pcca(op, trajs, 2)
    steps = [1, 2, 4]
    lags = [max(1, lag // 4), max(1, lag // 2), lag, 2 * lag, 4 * lag]  # dpnets analyze's scan
    rows = {}
    rows["ck_test"], _ = timed(
        lambda: ck_test(op, trajs, steps, sets.memberships_of, n_bootstrap=nb, seed=0), rep
    )
    rows["implied_timescales"], _ = timed(
        lambda: implied_timescales(op, trajs, lags, k=3, n_bootstrap=nb, seed=0), rep
    )
    rows["bootstrap_spectrum"], _ = timed(
        lambda: bootstrap_spectrum(op, trajs, k=3, n_bootstrap=nb, seed=0), rep
    )
    if args.old:
        rows["ck_test (old route)"], _ = timed(
            lambda: old_ck(op, trajs, steps, sets.memberships_of, nb)
        )
        rows["implied_timescales (old route)"], _ = timed(lambda: old_its(op, trajs, lags, nb))
    print(f"{n_frames} frames, {described}, lag {lag}, {nb} resamples, {args.threads} thread(s)")
    print(f"one TransferOperator.fit: {t_fit:.3f} s (best of {rep}; the new calls too)")
    print("| call | seconds | x one fit |\n|---|---|---|")
    for name, sec in rows.items():
        print(f"| {name} | {sec:.2f} | {sec / t_fit:.1f} |")
    if args.out:
        result = {
            "command": "PYTHONPATH=src python benchmarks/bench_validation_cost.py "
            f"--features {args.features} --threads {args.threads}"
            + (" --old" if args.old else "")
            + f" --out {args.out}",
            "machine": f"{platform.processor() or platform.machine()}, {args.threads} thread(s), "
            f"torch {torch.__version__}",
            "date": time.strftime("%Y-%m-%d"),
            "load_average_1min_at_end": os.getloadavg()[0],
            "timing": f"wall-clock seconds, best of {rep} for the fit and the new calls, "
            "one run of each old route",
            "frames": n_frames,
            "trajectories": args.n_traj,
            "features": described,
            "lag": lag,
            "n_bootstrap": nb,
            "ck_steps": steps,
            "its_lags": lags,
            "fit_seconds": t_fit,
            "seconds": rows,
            "ratio_to_one_fit": {k: v / t_fit for k, v in rows.items()},
            "goal": "<= 30x one fit (issue 25: 389-638x before)",
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
