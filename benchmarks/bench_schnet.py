"""SchNet training speed: seconds per DPNet epoch on alanine-dipeptide-sized molecules.

The states are the 10 heavy atoms of the packaged alanine-dipeptide PDB, jittered by 0.3 Å
(the timing does not depend on the dynamics); the encoder and training settings are those of
``dpnets reproduce alanine-dipeptide`` (3 interactions, 64 channels, r = 16, batch 512).
Prints one line per device: seconds per epoch over ``--pairs`` pairs, and pairs per second.

Usage::

    python benchmarks/bench_schnet.py [--devices cpu,cuda] [--pairs 32000] [--epochs 3]
    python benchmarks/bench_schnet.py --smoke     # tiny sizes, seconds (the test suite's)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from dpnets import DPNet
from dpnets.nn.schnet import SchNetEncoder
from dpnets.systems.alanine import HEAVY_ATOM_NAMES, pdb_path


def heavy_atoms() -> tuple[np.ndarray, list[int]]:
    """Heavy-atom coordinates (Å) and atomic numbers read from the packaged PDB."""
    z_of = {"C": 6, "N": 7, "O": 8}
    xyz, z = [], []
    for line in pdb_path().read_text().splitlines():
        name = line[12:16].strip()
        if line.startswith(("ATOM", "HETATM")) and name[0] in z_of:  # no element column
            xyz.append([float(line[30:38]), float(line[38:46]), float(line[46:54])])
            z.append(z_of[name[0]])
    assert len(z) == len(HEAVY_ATOM_NAMES)
    return np.asarray(xyz), z


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="cpu,cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--pairs", type=int, default=32_000)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2048, help="pairs of the warm-up fit")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    a = p.parse_args()
    if a.smoke:
        p.set_defaults(pairs=48, batch=24, epochs=1, warmup=24)
        a = p.parse_args()
    torch.set_num_threads(a.threads)
    xyz, z = heavy_atoms()
    rng = np.random.default_rng(0)
    x = (xyz + 0.3 * rng.normal(size=(a.pairs, *xyz.shape))).astype(np.float32)
    y = (xyz + 0.3 * rng.normal(size=(a.pairs, *xyz.shape))).astype(np.float32)
    print(f"torch {torch.__version__}, {a.threads} CPU thread(s), {a.pairs} pairs, batch {a.batch}")
    for dev in a.devices.split(","):
        torch.manual_seed(0)
        net = DPNet(
            SchNetEncoder(z, out_dim=16),
            objective="relaxed",
            gamma=0.01,
            lr=3e-3,
            batch_size=a.batch,
            epochs=1,
            val_fraction=0.0,
            device=dev,
            progress=False,
        )
        net.fit((x[: a.warmup], y[: a.warmup]))  # warm-up (CUDA context, kernels)
        net.epochs = a.epochs
        t0 = time.perf_counter()
        net.fit((x, y))
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
        s = (time.perf_counter() - t0) / a.epochs
        print(f"{dev:>6}: {s:8.3f} s/epoch  {a.pairs / s:10.0f} pairs/s")


if __name__ == "__main__":
    main()
