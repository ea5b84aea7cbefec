"""Training-speed benchmark: DPNet against deeptime's VAMPNet, and the score's own cost.

Prints two tables:

1. seconds per training epoch for the same MLP, batch size, data, epochs and thread count,
   for dpnets' DPNet (relaxed, projection and vamp2 scores) and deeptime's VAMPNet
   (VAMP-2, its documented data path: ``TrajectoryDataset`` + ``DataLoader``), with ratios;
2. forward + backward time of each score alone at batch 8192 for r in {8, 64}.

Validation is switched off on both sides, so only training is timed. deeptime is optional
(``pip install deeptime``); without it only dpnets' numbers are printed.

Usage::

    python benchmarks/bench_training.py [--threads 2] [--epochs 3] [--n 100000]
    python benchmarks/bench_training.py --smoke    # tiny sizes, seconds (the test suite's)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from dpnets import DPNet, scores
from dpnets.nn import MLP
from dpnets.systems import LinearGaussian


def _data(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    a = q @ np.diag(np.linspace(0.95, 0.3, d)) @ q.T
    return LinearGaussian(a, noise_std=0.5).sample(n, seed=seed).astype(np.float32)


HIDDEN: tuple[int, ...] = (128, 128)


def _mlp(d: int, r: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return MLP(d, HIDDEN, r, activation="elu")


def time_dpnet(x: np.ndarray, r: int, batch: int, epochs: int, score: str) -> float:
    net = DPNet(
        _mlp(x.shape[1], r),
        objective=score,
        gamma=0.0 if score.startswith("vamp") else 1.0,
        batch_size=batch,
        epochs=1,
        val_fraction=0.0,
        progress=False,
        device="cpu",
        seed=0,
    )
    net.fit(x[: min(5000, len(x) // 2)])  # warm-up
    net.epochs = epochs
    t0 = time.perf_counter()
    net.fit(x)
    return (time.perf_counter() - t0) / epochs


def time_deeptime(x: np.ndarray, r: int, batch: int, epochs: int) -> float | None:
    try:
        from deeptime.decomposition.deep import VAMPNet
        from deeptime.util.data import TrajectoryDataset
    except ImportError:
        return None
    from torch.utils.data import DataLoader

    lobe = _mlp(x.shape[1], r)
    vnet = VAMPNet(lobe=lobe, learning_rate=1e-3, device="cpu", score_method="VAMP2")
    ds = TrajectoryDataset(1, x)
    loader = DataLoader(ds, batch_size=batch, shuffle=True)
    warm = DataLoader(
        TrajectoryDataset(1, x[: min(5000, len(x) // 2)]), batch_size=batch, shuffle=True
    )
    vnet.fit(warm, n_epochs=1)
    t0 = time.perf_counter()
    vnet.fit(loader, n_epochs=epochs)
    return (time.perf_counter() - t0) / epochs


def time_score(fn, m: int, r: int, reps: int = 20) -> float:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(m, r, generator=g)
    x = base.clone().requires_grad_()
    y = (base.roll(1, 0) + 0.1 * torch.randn(m, r, generator=g)).requires_grad_()
    fn(x, y).backward()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(x, y).backward()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=10)
    p.add_argument("--r", type=int, default=8)
    p.add_argument("--batches", default="256,2048")
    p.add_argument("--hidden", default="128,128", help="MLP hidden widths")
    p.add_argument("--score-batch", type=int, default=8192, help="batch of the score table")
    p.add_argument("--score-reps", type=int, default=20, help="repetitions (median)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = p.parse_args()
    if args.smoke:
        p.set_defaults(
            threads=1, epochs=1, n=600, batches="256", hidden="16,16", score_batch=256, score_reps=2
        )
        args = p.parse_args()
    global HIDDEN
    HIDDEN = tuple(int(h) for h in args.hidden.split(","))
    torch.set_num_threads(args.threads)
    x = _data(args.n, args.dim)
    print(
        f"# per-epoch training time: n={args.n} pairs, d={args.dim}, "
        f"MLP {'-'.join(map(str, HIDDEN))}-{args.r} (ELU), "
        f"Adam, {args.epochs} epochs, {args.threads} threads, CPU"
    )
    print()
    print(
        "| batch | dpnets relaxed (s) | dpnets projection (s) | dpnets vamp2 (s) "
        "| deeptime VAMPNet (s) | speed-up (vamp2 vs deeptime) |"
    )
    print("|---|---|---|---|---|---|")
    for b in (int(s) for s in args.batches.split(",")):
        rel = time_dpnet(x, args.r, b, args.epochs, "relaxed")
        proj = time_dpnet(x, args.r, b, args.epochs, "projection")
        vamp = time_dpnet(x, args.r, b, args.epochs, "vamp2")
        dt = time_deeptime(x, args.r, b, args.epochs)
        dts = f"{dt:.3f}" if dt is not None else "n/a"
        ratio = f"{dt / vamp:.1f}x" if dt is not None else "n/a"
        print(f"| {b} | {rel:.3f} | {proj:.3f} | {vamp:.3f} | {dts} | {ratio} |")
    print()
    m, reps = args.score_batch, args.score_reps
    print(f"# score forward+backward, batch m={m} (median of {reps}, milliseconds)")
    print()
    fns = {
        "covariances only": lambda a, b: sum(c.sum() for c in scores.covariances(a, b)),
        "relaxed S^1": lambda a, b: scores.relaxed_score(a, b, 1.0),
        "projection P^1": lambda a, b: scores.projection_score(a, b, 1.0),
        "vamp2": lambda a, b: scores.vamp_score(a, b, 2),
    }
    try:
        from deeptime.decomposition.deep import vampnet_loss

        fns["deeptime vampnet_loss VAMP2"] = lambda a, b: vampnet_loss(a, b, method="VAMP2")
    except ImportError:
        pass
    print("| score | r=8 | r=64 |")
    print("|---|---|---|")
    for name, fn in fns.items():
        t8 = 1e3 * time_score(fn, m, 8, reps)
        t64 = 1e3 * time_score(fn, m, 64, reps)
        print(f"| {name} | {t8:.2f} | {t64:.2f} |")


if __name__ == "__main__":
    main()
