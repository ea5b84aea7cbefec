"""Seconds of ``TransferOperator.fit`` against the feature dimension r, next to one dense
``np.linalg.eig`` of an r x r random matrix in the same process (issue 17: the r x r linear
algebra must stay BLAS-bound; done when the fit costs at most 3 eigs at r = 2048).
Random tanh features of 8-D Gaussian states.

    python benchmarks/bench_large_r.py --r 2048,4096 --n 5000
    python benchmarks/bench_large_r.py --r 2048 --n 5000 --threads 1 --steps
    python benchmarks/bench_large_r.py --smoke        # tiny sizes, seconds (the test suite's)

``--threads`` limits the BLAS pools of numpy and scipy (through threadpoolctl) and torch's;
without it every library keeps its default (one thread per core). ``--steps`` also prints
where the fit's time goes (cProfile, cumulative seconds of the main steps).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from dpnets import TransferOperator

#: (label, function name, where the function is defined) of the steps ``--steps`` reports
STEPS = (
    ("features + moments", "add_pairs", "dpnets/operators.py"),
    ("constant test", "constant_in_span_moments", "dpnets/spectral.py"),
    ("regress (eigh, pinv)", "regress", "dpnets/estimation.py"),
    ("  symmetric eigh", "eigh", "scipy/linalg/_decomp.py"),
    ("eig_biorthogonal", "eig_biorthogonal", "dpnets/linalg.py"),
    ("  LAPACK geev", "_geev", "dpnets/linalg.py"),
)


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[str]:
    """Limit numpy's, scipy's and torch's thread pools to ``n`` (None: leave them)."""
    if n is not None:
        torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        yield f"torch {torch.get_num_threads()}, BLAS default (no threadpoolctl)"
        return
    with threadpool_limits(n) if n is not None else contextlib.nullcontext():
        pools = dict.fromkeys(f"{p['internal_api']} {p['num_threads']}" for p in threadpool_info())
        yield f"torch {torch.get_num_threads()}, " + ", ".join(pools)


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """Smallest wall-clock seconds of ``repeat`` calls of ``fn``."""
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return float(best)


def step_times(profile: cProfile.Profile) -> list[tuple[str, float]]:
    """Cumulative seconds of the :data:`STEPS` found in ``profile``."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out = []
    for label, name, where in STEPS:
        cum = [
            v[3]
            for (path, _, fn), v in stats.items()
            if fn == name and path.replace(os.sep, "/").endswith(where)
        ]
        if cum:
            out.append((label, sum(cum)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--r", default="512,1024,2048", help="feature dimensions")
    parser.add_argument("--n", type=int, default=5000, help="samples")
    parser.add_argument("--threads", type=int, default=None, help="BLAS/torch threads")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many timings")
    parser.add_argument("--steps", action="store_true", help="time the steps of the fit")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(r="16,32", n=300, threads=1, steps=True)
        args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n, 8))
    with blas_threads(args.threads) as pools:
        print(f"n = {args.n}, {os.cpu_count()} CPUs, threads: {pools}")
        print(f"{'r':>6} {'fit (s)':>9} {'np.linalg.eig (s)':>18} {'fit / eig':>10}")
        for r in (int(v) for v in args.r.split(",")):
            w = rng.standard_normal((8, r)) / np.sqrt(8)
            a = rng.standard_normal((r, r))

            def fit(w: np.ndarray = w) -> TransferOperator:
                return TransferOperator(lambda s: np.tanh(s @ w)).fit(x)

            t_fit = best_of(args.repeat, fit)
            t_eig = best_of(args.repeat, lambda a=a: np.linalg.eig(a))
            print(f"{r:6d} {t_fit:9.2f} {t_eig:18.2f} {t_fit / t_eig:10.2f}", flush=True)
            if args.steps:
                profile = cProfile.Profile()
                profile.runcall(fit)
                for label, sec in step_times(profile):
                    print(f"         {label:24s} {sec:7.2f} s")


if __name__ == "__main__":
    main()
