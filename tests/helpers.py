"""Shared test set-ups (imported by test modules; pytest puts this folder on sys.path)."""

from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from dpnets import DPNet, Generator, TransferOperator
from dpnets.baselines import (
    DMD,
    EDMD,
    ConsistentAutoencoder,
    DynamicAutoencoder,
    KernelDMD,
    NystromKernelDMD,
    VAMPNet,
)
from dpnets.nn import MLP
from dpnets.systems import OrnsteinUhlenbeck

#: A small unfitted instance of every public estimator class (the registry that the
#: parameter, clone, round-trip and contract tests run over; ``test_base`` checks that it
#: lists every public class).


def fit_ou_dpnet(device: str | None = None) -> tuple[DPNet, np.ndarray, OrnsteinUhlenbeck]:
    """The demo's r = 4 DPNet (the library defaults) fitted on 50,000 OU samples."""
    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    x = ou.sample(50_000, seed=0)
    torch.manual_seed(0)
    enc = MLP(1, (64, 64), 4, activation="celu")
    net = DPNet(enc, seed=0, device=device, progress=False).fit(x)
    return net, x, ou


ESTIMATORS = {
    DPNet: lambda: DPNet(MLP(1, (8,), 2), gamma=0.3, epochs=2, seed=1, progress=False),
    VAMPNet: lambda: VAMPNet(MLP(1, (8,), 2), epochs=2, seed=1, progress=False),
    TransferOperator: lambda: TransferOperator(None, ridge=1e-6, dt=0.5),
    Generator: lambda: Generator(None, drift=lambda y: -y, diffusion=1.0),
    DMD: lambda: DMD(rank=1, dt=2.0),
    EDMD: lambda: EDMD("monomial", degree=2),
    KernelDMD: lambda: KernelDMD("rbf", rank=2),
    NystromKernelDMD: lambda: NystromKernelDMD("rbf", n_centers=50, rank=2, seed=0),
    DynamicAutoencoder: lambda: DynamicAutoencoder(
        MLP(1, (8,), 2), MLP(2, (8,), 1), epochs=2, seed=1, progress=False
    ),
    ConsistentAutoencoder: lambda: ConsistentAutoencoder(
        MLP(1, (8,), 2), MLP(2, (8,), 1), epochs=2, seed=1, progress=False
    ),
}


def top_level_aten_ops(fn) -> int:
    """The aten operations ``fn()`` calls from Python or the autograd engine: the profiler's
    aten events without an aten event above them (a deterministic count, after one warm-up
    call for lazy initialisation and cached constants)."""
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    count = 0
    for e in prof.events():
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        count += parent is None
    return count


#: the project's alanine dipeptide (22 atoms), the engine topology of the MD export tests
ALANINE_PDB = Path(__file__).resolve().parents[1] / "src/dpnets/systems/data/alanine-dipeptide.pdb"


def alanine_walk(n: int = 240, step: float = 0.02) -> np.ndarray:
    """A correlated random walk of the alanine dipeptide pdb's positions (nm, float32)."""
    import mdtraj as md

    top = md.load(str(ALANINE_PDB))
    rng = np.random.default_rng(0)
    noise = np.zeros((n, top.n_atoms, 3))
    for t in range(1, n):
        noise[t] = 0.95 * noise[t - 1] + step * rng.normal(size=(top.n_atoms, 3))
    return (top.xyz + noise).astype(np.float32)
