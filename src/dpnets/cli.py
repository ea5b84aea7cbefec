"""Command line: ``dpnets demo`` and ``dpnets reproduce NAME``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["main", "demo"]


def demo(
    out: str | Path = "dpnets-demo.pt",
    n: int = 50_000,
    epochs: int | None = None,
    seed: int = 0,
    progress: bool = True,
    device: str | None = None,
) -> str:
    """Train a DPNet on an Ornstein-Uhlenbeck process and compare with its exact spectrum.

    OU with ``theta = 1``, ``sigma = sqrt(2)`` (stationary N(0, 1)), sampled every
    ``dt = 0.1``: the transfer operator's eigenvalues are ``exp(-k dt)`` with Hermite
    eigenfunctions, and the implied timescales are ``1 / k``. This is the README path with
    the library defaults: a small MLP (64-64, CELU) with ``r = 4`` learned features, then a
    :class:`~dpnets.TransferOperator` on them, which adds the constant function (``k = 0``,
    timescale inf). Returns the printed table.
    """
    from dpnets import DPNet, TransferOperator
    from dpnets.nn import MLP
    from dpnets.representation import DEFAULTS
    from dpnets.systems import OrnsteinUhlenbeck

    epochs = DEFAULTS["epochs"] if epochs is None else epochs
    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    x = ou.sample(n, seed=seed)
    t0 = time.perf_counter()
    net = DPNet(
        MLP(1, (64, 64), 4, activation="celu"),
        epochs=epochs,
        seed=seed,
        progress=progress,
        device=device,
    ).fit(x)
    op = TransferOperator(net, dt=ou.dt).fit(x)
    elapsed = time.perf_counter() - t0
    est = op.eig()
    k_max = len(est)
    ref = ou.eigvals(k_max)
    ts_est = op.implied_timescales()
    with np.errstate(divide="ignore"):
        ts_ref = 1.0 / (ou.theta * np.arange(k_max))
    lines = [
        f"Ornstein-Uhlenbeck (theta=1, dt={ou.dt}), n={n}, DPNet r=4 (+ the constant), "
        f"{epochs} epochs: {elapsed:.1f} s",
        "",
        "| k | eigenvalue (DPNet) | exact exp(-k dt) | rel. error | timescale (DPNet) "
        "| exact 1/k |",
        "|---|---|---|---|---|---|",
    ]
    for k in range(k_max):
        lam = est[k]
        lam_s = f"{lam.real:.4f}" + (f"{lam.imag:+.4f}i" if abs(lam.imag) > 1e-12 else "")
        rel = abs(abs(lam) - ref[k]) / ref[k]
        lines.append(
            f"| {k} | {lam_s} | {ref[k]:.4f} | {100 * rel:.2f}% | {ts_est[k]:.3f} | "
            f"{ts_ref[k]:.3f} |"
        )
    net.save(str(out))
    lines += ["", f"model saved to {out} (load with dpnets.load)"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from dpnets.experiments import EXPERIMENTS

    parser = argparse.ArgumentParser(
        prog="dpnets", description="Deep Projection Networks for dynamical systems"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="train a DPNet on Ornstein-Uhlenbeck (about a minute)")
    p_demo.add_argument("--out", default="dpnets-demo.pt", help="where to save the model")
    p_demo.add_argument("--samples", type=int, default=50_000)
    p_demo.add_argument("--epochs", type=int, default=None, help="default: DPNet's default")
    p_demo.add_argument("--seed", type=int, default=0)
    p_demo.add_argument("--device", default=None)
    p_demo.add_argument("--no-progress", action="store_true")

    p_rep = sub.add_parser("reproduce", help="run a paper experiment and print its table")
    p_rep.add_argument("name", choices=sorted(EXPERIMENTS))
    p_rep.add_argument("--quick", action="store_true", help="small smoke-test version")
    p_rep.add_argument("--seeds", type=int, default=None, help="number of seeds")
    p_rep.add_argument("--out", default=None, help="output folder")
    p_rep.add_argument("--device", default=None)
    p_rep.add_argument("--no-progress", action="store_true")

    args = parser.parse_args(argv)
    if args.command == "demo":
        print(
            demo(
                args.out,
                n=args.samples,
                epochs=args.epochs,
                seed=args.seed,
                progress=not args.no_progress,
                device=args.device,
            )
        )
        return 0
    from dpnets.experiments import run_experiment

    kwargs = {"quick": args.quick, "device": args.device, "progress": not args.no_progress}
    if args.seeds is not None:
        kwargs["seeds"] = args.seeds
    if args.out is not None:
        kwargs["out"] = Path(args.out)
    try:
        print(run_experiment(args.name, **kwargs))
    except NotImplementedError as err:
        print(f"dpnets: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
