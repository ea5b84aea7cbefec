"""Seconds of ``TransferOperator.fit`` against the feature dimension r (issue 17: the r x r
linear algebra must stay BLAS-bound). Random tanh features of 8-D Gaussian states.

    python benchmarks/bench_large_r.py --r 512,1024,2048 --n 6000 --threads 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from dpnets import TransferOperator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--r", default="512,1024,2048", help="feature dimensions")
    parser.add_argument("--n", type=int, default=6000, help="samples")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n, 8))
    print(f"n = {args.n}, torch threads {torch.get_num_threads()}")
    for r in (int(v) for v in args.r.split(",")):
        w = rng.standard_normal((8, r)) / np.sqrt(8)
        t0 = time.perf_counter()
        TransferOperator(lambda s, w=w: np.tanh(s @ w)).fit(x)
        print(f"  r = {r:5d}: fit {time.perf_counter() - t0:6.2f} s")


if __name__ == "__main__":
    main()
