"""Seconds per training epoch of ``DPNet.fit`` from each data path (issue 17): in-memory
arrays, a ``TensorDataset``, a ``DataLoader`` over it, and a memory-mapped ``.npy`` read
batch by batch (forced with ``OUT_OF_CORE_BYTES = 0``). Same pairs, MLP, batch size and
seed; the ratios to the array path are what the table is for.

    python benchmarks/bench_data_paths.py --n 200000 --dim 100 --epochs 2 --threads 2
    python benchmarks/bench_data_paths.py --smoke     # tiny sizes, seconds (the test suite's)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import dpnets.states
from dpnets import DPNet
from dpnets.nn import MLP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--r", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(n=2000, dim=10, batch=256, epochs=1, threads=1)
        args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.standard_normal((args.n + 1, args.dim)), 0).astype(np.float32) * 0.05
    ds = TensorDataset(torch.from_numpy(x[:-1]), torch.from_numpy(x[1:]))
    folder = tempfile.TemporaryDirectory()
    np.save(os.path.join(folder.name, "x.npy"), x)
    mapped = np.load(os.path.join(folder.name, "x.npy"), mmap_mode="r")

    def epoch_seconds(data, out_of_core: bool = False) -> float:
        torch.manual_seed(0)
        net = DPNet(
            MLP(args.dim, (256, 256), args.r),
            batch_size=args.batch,
            epochs=args.epochs,
            seed=0,
            progress=False,
            device="cpu",
        )
        old = getattr(dpnets.states, "OUT_OF_CORE_BYTES", 0)
        dpnets.states.OUT_OF_CORE_BYTES = 0 if out_of_core else old
        try:
            t0 = time.perf_counter()
            net.fit(data)
            return (time.perf_counter() - t0) / args.epochs
        finally:
            dpnets.states.OUT_OF_CORE_BYTES = old

    print(
        f"n = {args.n} pairs of {args.dim}-D states, MLP (256, 256) -> r = {args.r}, "
        f"batch {args.batch}, {args.epochs} epochs, torch threads {torch.get_num_threads()}"
    )
    rows = [
        ("arrays (one trajectory)", lambda: epoch_seconds(x)),
        ("TensorDataset of pairs", lambda: epoch_seconds(ds)),
        (
            "DataLoader(TensorDataset, batch)",
            lambda: epoch_seconds(DataLoader(ds, batch_size=args.batch, shuffle=True)),
        ),
        ("memory-mapped .npy, read per batch", lambda: epoch_seconds(mapped, True)),
    ]
    epoch_seconds(x[:20000])  # warm-up: allocator, thread pools, kernels
    base = None
    print("| data path | s / epoch | vs arrays |\n|---|---|---|")
    for name, run in rows:
        sec = run()
        base = sec if base is None else base
        print(f"| {name} | {sec:.2f} | {sec / base:.2f} |")
    folder.cleanup()


if __name__ == "__main__":
    main()
