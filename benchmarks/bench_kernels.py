"""What the score costs per training step, objective by objective (issue 32, item 1).

For each objective's loss (``dpnets.scores``: projection, relaxed, VAMP-1, VAMP-2 with
``gamma`` and the constant; the consistency penalty; the generator score), forward +
backward on a batch of float32 features, on each of the two decompositions
(``linalg.spectral_method``: ``eigh``, the CPU default; ``cholesky``, the GPU default):

* ``aten ops``: the aten operations called from Python or the autograd engine (the
  profiler's events without an aten parent; the count ``tests/test_step_kernels.py`` bounds);
* ``kernels`` (CUDA only): the kernel launches the profiler records (``*LaunchKernel*``);
* ``syncs`` (CUDA only): whether ``torch.cuda.set_sync_debug_mode("error")`` raised
  (``yes``: the score synchronises the device with the host);
* ``ms``: the median wall time of one forward + backward (CUDA: synchronised before and
  after each).

The counts are deterministic; the times are for orientation (no assertion anywhere).

    PYTHONPATH=src python benchmarks/bench_kernels.py [--smoke] [--devices cpu,cuda]
        [--r 8,64] [--batch 8192] [--reps 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

GAMMA = 0.1


def losses() -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """Each objective's loss of ``(x, y)`` features."""
    from dpnets import scores

    out = {name: scores.make_loss(name, GAMMA, constant=True) for name in scores.SCORES}
    multistep = scores.MultistepLoss(out["projection"], 1.0, constant=True)
    out["consistency"] = lambda x, y: multistep(x, torch.stack([y, 0.5 * (x + y)], 1))
    out["generator"] = scores.GeneratorLoss(GAMMA, constant=True)
    return out


def top_level_aten_ops(prof) -> int:
    """The aten operations without an aten operation above them."""
    count = 0
    for e in prof.events():
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        count += parent is None
    return count


def measure(loss, x: torch.Tensor, y: torch.Tensor, reps: int) -> dict:
    """Counts and the median time of ``loss(x, y).backward()``."""
    cuda = x.device.type == "cuda"

    def step() -> None:
        a, b = x.detach().requires_grad_(), y.detach().requires_grad_()
        loss(a, b).backward()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    step()  # warm up (lazy initialisation, cached constants)
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step()
        sync()
    row = {"ops": top_level_aten_ops(prof)}
    if cuda:
        row["kernels"] = sum("LaunchKernel" in e.name for e in prof.events())
        old = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            step()
            row["syncs"] = "no"
        except RuntimeError:
            row["syncs"] = "yes"
        finally:
            torch.cuda.set_sync_debug_mode(old)
        sync()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    row["ms"] = 1e3 * statistics.median(times)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes, CPU, seconds")
    p.add_argument("--devices", default="cpu,cuda", help="comma-separated; absent ones skipped")
    p.add_argument("--r", default="8,64")
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = p.parse_args(argv)
    if args.smoke:
        args.devices, args.r, args.batch, args.reps = "cpu", "4", 256, 2
    from dpnets.linalg import spectral_method

    torch.manual_seed(0)
    devices = [d for d in args.devices.split(",") if d != "cuda" or torch.cuda.is_available()]
    head = "| device | objective | r | method | aten ops | kernels | syncs | ms |"
    where = (
        torch.cuda.get_device_name()
        if any(d.startswith("cuda") for d in devices)
        else f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    )
    lines = [
        f"- command: `python benchmarks/bench_kernels.py {' '.join(argv or sys.argv[1:])}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"machine: {where}; torch threads: {torch.get_num_threads()}",
        f"- torch {torch.__version__}; batch {args.batch}, float32 features, gamma {GAMMA}, "
        "the constant; forward + backward",
        "",
        head,
        "|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for device in devices:
        for r in (int(v) for v in args.r.split(",")):
            g = torch.Generator().manual_seed(r)
            x = torch.randn(args.batch, r, generator=g)
            y = 0.6 * x + torch.randn(args.batch, r, generator=g)
            x, y = x.to(device), y.to(device)
            for name, loss in losses().items():
                for method in ("eigh", "cholesky"):
                    with spectral_method(method):
                        row = measure(loss, x, y, args.reps)
                    line = (
                        f"| {device} | {name} | {r} | {method} | {row['ops']} | "
                        f"{row.get('kernels', '-')} | {row.get('syncs', '-')} | "
                        f"{row['ms']:.3f} |"
                    )
                    lines.append(line)
                    print(line, flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
