"""Peak memory of ``TransferOperator.fit`` on memory-mapped states (issue 17: fits in
O(batch) memory). Each case runs in a fresh subprocess, which loads an ``n x d`` float32
``.npy`` file with ``np.load(path, mmap_mode="r")``, fits ``TransferOperator`` on it and
prints its peak resident memory (``ru_maxrss``, which counts the touched pages of the
memory-mapped file: ``4 n d`` bytes) and the size of the saved model.

    python benchmarks/bench_memory.py                    # 10^6 x 100, the issue's target
    python benchmarks/bench_memory.py --n 100000 --cases identity,mlp
    python benchmarks/bench_memory.py --smoke         # tiny sizes, seconds (the test suite's)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

CASES = ("identity", "linear", "mlp")


def write_states(path: str, n: int, d: int, seed: int = 0, chunk: int = 65536) -> None:
    """An AR(1) trajectory ``x_{t+1} = 0.9 x_t + noise`` of ``n`` frames in ``d`` dimensions,
    written chunk by chunk to a float32 ``.npy`` file (never held in memory as a whole)."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    state = np.zeros((1, d))
    for s in range(0, n, chunk):
        noise = rng.standard_normal((min(chunk, n - s), d))
        block, state = lfilter([1.0], [1.0, -0.9], noise, axis=0, zi=0.9 * state)
        out[s : s + block.shape[0]] = block
        state = block[-1:]
    out.flush()
    del out


def peak_mb() -> float:
    """Peak resident memory of this process in MB (``ru_maxrss`` is KiB on Linux).

    Linux carries ``ru_maxrss`` over ``fork`` and ``exec`` from the parent, so the parent
    of the workers stays small: it neither imports torch nor writes the file itself.
    """
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(case: str, path: str, hidden: int) -> dict:
    """Fit one case in this (fresh) process; the measurements as a dict."""
    import torch

    import dpnets
    from dpnets import TransferOperator
    from dpnets.io import save
    from dpnets.nn import MLP

    torch.manual_seed(0)
    x = np.load(path, mmap_mode="r")
    d = x.shape[1]
    features = {
        "identity": None,
        "linear": torch.nn.Linear(d, d),
        "mlp": MLP(d, (hidden,), d),
    }[case]
    before = peak_mb()
    t0 = time.perf_counter()
    op = TransferOperator(features).fit(x)
    seconds = time.perf_counter() - t0
    peak = peak_mb()
    model = os.path.join(os.path.dirname(path), f"model_{case}.pt")
    save(op, model)
    size = os.path.getsize(model) / 1e6
    op.save(model)  # the method writes the same file
    assert abs(os.path.getsize(model) / 1e6 - size) < 1e-3
    back = dpnets.load(model, features=features)
    assert np.allclose(back.eig(), op.eig())
    return {
        "case": case,
        "n": int(x.shape[0]),
        "d": int(d),
        "r": int(op.n_features_),
        "peak_mb": round(peak, 1),
        "before_fit_mb": round(before, 1),
        "memmap_mb": round(x.nbytes / 2**20, 1),
        "fit_s": round(seconds, 2),
        "model_mb": round(size, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="frames")
    parser.add_argument("--d", type=int, default=100, help="state dimension")
    parser.add_argument("--hidden", type=int, default=128, help="hidden width of the MLP")
    parser.add_argument("--cases", default=",".join(CASES), help="identity,linear,mlp")
    parser.add_argument("--dir", default=None, help="folder for the .npy file (default: temp)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(n=2000, d=8, hidden=16, cases="identity,mlp")
        args = parser.parse_args()
    if args.write:
        write_states(args.path, args.n, args.d)
        return
    if args.worker:
        print(json.dumps(worker(args.worker, args.path, args.hidden)))
        return
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {unknown}; expected some of {', '.join(CASES)}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "states.npy")
        cmd = [sys.executable, __file__, "--write", "--path", path]
        subprocess.run(cmd + ["--n", str(args.n), "--d", str(args.d)], check=True)
        size = 4 * args.n * args.d / 2**20
        print(f"{args.n} x {args.d} float32 states, memory-mapped ({size:.0f} MB)")
        head = ("features", "r", "peak MB", "before fit", "fit s", "model MB")
        print("{:>9} {:>4} {:>8} {:>10} {:>6} {:>9}".format(*head))
        failed = False
        for case in cases:
            cmd = [sys.executable, __file__, "--worker", case, "--path", path]
            cmd += ["--hidden", str(args.hidden)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"{case}: failed\n{out.stderr}")
                failed = True
                continue
            res = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"{case:>9} {res['r']:>4} {res['peak_mb']:>8.0f} {res['before_fit_mb']:>10.0f} "
                f"{res['fit_s']:>6.1f} {res['model_mb']:>9.3f}"
            )
    if failed:
        sys.exit(f"bench_memory: a case failed ({', '.join(cases)})")


if __name__ == "__main__":
    main()
