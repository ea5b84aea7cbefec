"""standardize="auto" with a user's own encoder (issue 25, item 7): the noisy logistic map
and ``nn.Sequential(periodic embedding sin/cos(2 pi x), MLP)`` under the library defaults.
Standardising the inputs of an encoder whose first operation is not affine changes the
function the user wrote (the embedding's period is no longer 1); "auto" now leaves them as
given there. Metrics on [1, psi] by quadrature (the paper's Table 1 metrics, paper Sec. 5).

    PYTHONPATH=src python benchmarks/bench_standardize_auto.py [--seeds 3]
    PYTHONPATH=src python benchmarks/bench_standardize_auto.py --smoke   # seconds
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

from dpnets import DPNet
from dpnets.nn import MLP
from dpnets.systems import LogisticMap


class Periodic(nn.Module):
    """The user's embedding: ``x -> [sin 2 pi x, cos 2 pi x]`` (no declaration of ours)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.sin(2 * np.pi * x), torch.cos(2 * np.pi * x)], dim=1)


def run(
    standardize: str, seed: int, system: LogisticMap, x: np.ndarray, epochs: int | None = None
) -> dict:
    enc = nn.Sequential(Periodic(), MLP(2, (64, 64), 4))  # r = 4, DPNet's default
    kw = {} if epochs is None else {"epochs": epochs}
    net = DPNet(enc, lag=1, seed=seed, standardize=standardize, progress=False, device="cpu", **kw)
    net.fit(x)

    def fmap(s: np.ndarray) -> np.ndarray:  # [1, psi]
        return np.column_stack([np.ones(len(s)), net.transform(s)])

    m = system.representation_metrics(fmap, n_eigs=3)
    return {"spectral_error": m["spectral_error"], "optimality_gap": m["optimality_gap"]}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n", type=int, default=65_536, help="samples of the logistic map")
    ap.add_argument("--epochs", type=int, default=None, help="default: DPNet's")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = ap.parse_args()
    if args.smoke:
        ap.set_defaults(seeds=1, n=2048, epochs=1)
        args = ap.parse_args()
    if args.smoke:
        torch.set_num_threads(1)
    system = LogisticMap()
    x = system.sample(args.n, seed=0)
    print("| standardize | seed | spectral error | optimality gap |\n|---|---|---|---|")
    for mode in ("auto", "coordinate"):
        for seed in range(args.seeds):
            r = run(mode, seed, system, x, args.epochs)
            print(f"| {mode} | {seed} | {r['spectral_error']:.3f} | {r['optimality_gap']:.3f} |")
