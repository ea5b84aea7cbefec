"""Training throughput (issue 17, item 4): pairs per second and the cost of the score.

For each device, model and feature dimension ``r`` this measures, in one process:

* **step**: one full DPNet training step on a batch of ``B`` pairs, the code path of
  ``DPNet._fit_pairs`` with its defaults: ``f = enc(torch.cat([x, y]))`` (one forward pass on
  the stacked batch), the loss ``make_loss("projection", gamma=0.1, constant=True)`` on the
  two halves, backward, and the optimiser of ``dpnets.training.make_optimizer`` (Adam, fused,
  lr 1e-3), after ``zero_grad(set_to_none=True)``;
* **bare**: the encoder alone on the same stacked batch of ``2 B`` states: forward, the loss
  ``f.sum()``, backward **and the same Adam step** (so that ``step / bare`` isolates the
  score: covariances, the float64 ``r x r`` spectral work and its backward);
* **score**: the loss alone, forward and backward, on detached features of the same shape
  (what the score costs by itself);
* **peer** (MLP rows, deeptime installed): deeptime's ``VAMPNet`` (VAMP-2, its default
  ``score_mode``) with a copy of the same MLP as its lobe, the same batch on the same device,
  its optimiser ``"Adam"`` (torch's Adam, lr 1e-3): one ``VAMPNet.partial_fit((x, y))`` per
  repetition (two forward passes of the lobe, ``vampnet_loss``, backward, Adam step), timed
  in the same loop as step and bare, so its row's ``step / bare`` is against the same bare
  step; its score column is ``vampnet_loss`` alone, forward + backward;
* **fit**: the end-to-end ``DPNet(...).fit((X, Y))`` epoch rate from in-memory arrays
  (``val_fraction=0``, the default input standardisation, ``--fit-batches`` batches per
  epoch), timed between ``callback`` calls so that the set-up before the first epoch and the
  first epoch itself are excluded. ``fit / bare`` compares the fit's pairs per second with the
  bare step's (``batch / bare``): what the whole ``DPNet.fit`` loop keeps of the encoder's
  own speed (issue 32: >= 0.8).

Step and bare are timed alternately (in alternating order) after ``--warmup`` untimed
repetitions of each; the table gives medians over ``--steps`` repetitions, and ``step /
bare`` is the median of the per-repetition ratios, which is robust to a machine whose load
drifts during the run. On CUDA every timing is bracketed by ``torch.cuda.synchronize()``.

Models:

* ``mlp``: ``dpnets.nn.MLP(100, (256, 256), r)`` (the default leaky-ReLU) on vector states of
  dimension 100 (``--mlp-in``, ``--mlp-hidden``): a mid-sized encoder of tabular or
  descriptor data (e.g. 100 pairwise distances), big enough that the encoder, not Python,
  sets the pace at batch 8192; ``y = 0.9 x + 0.44 noise``.
* ``schnet``: ``dpnets.nn.SchNetEncoder`` with the settings of ``bench_schnet.py`` (3
  interactions, 64 channels and filters, 20 Gaussians, 5 Å cutoff; ``out_dim = r``) on
  synthetic molecules of 93 heavy atoms (Chignolin's size): one compact globule (atoms
  placed at random in a sphere of radius 7.5 Å, at least 2.2 Å apart: about the heavy-atom
  density of a folded protein, about 14.5 neighbours within the cutoff), jittered by 0.3 Å
  per frame, atoms C/N/O in the proportions of a protein. SchNet's batch is
  ``--schnet-batch`` (default 64 pairs on CPU, 1024 on CUDA): at batch 8192 one CPU step
  would take minutes and each edge tensor about 5 GB.

Allocator: with glibc's default settings, tensors of a few MB and up are returned to the
system when freed and page-faulted in again on the next step; on a virtual machine that
system time can equal the compute (SchNet) and it shifts ``step / bare`` by several per
cent either way. Setting, before Python starts::

    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295

keeps freed memory in the process. The variables that change the allocator are recorded
with the results.

Usage::

    python benchmarks/bench_scale.py [--devices cpu,cuda] [--models mlp,schnet] [--r 8,64]
        [--batch 8192] [--schnet-batch N] [--steps 20] [--warmup 3] [--threads N]
        [--fit-epochs 3] [--fit-batches 8] [--clock wall|cpu] [--no-peer]
        [--out FILE.md|auto [--append]] [--cuda-graph] [--smoke]

``--cuda-graph`` (CUDA devices, MLP): instead of the table, the training step captured whole
in a CUDA graph (PyTorch's whole-network capture, with a capturable fused Adam: possible
because the step reads nothing on the host), against the eager bare step and the bare step
in a CUDA graph, in one loop; a capture that fails is reported and skipped.

``--out auto`` writes ``benchmarks/results/scale/cpu.md`` (CPU devices) or ``gpu.md``
(CUDA). ``--smoke``: tiny sizes (a few seconds, for ``tests/test_benchmarks.py``); an
``--out`` inside ``benchmarks/results`` then goes to a temporary folder instead, so a smoke
run never overwrites the committed results.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dpnets import DPNet
from dpnets.nn import MLP
from dpnets.scores import make_loss
from dpnets.training import make_optimizer

#: The DPNet defaults the benchmark trains with (``dpnets.representation.DEFAULTS``).
SCORE, GAMMA, CONSTANT, LR = "projection", 0.1, True, 1e-3

#: Heavy-atom count of Chignolin.
N_ATOMS = 93

#: Where ``--out auto`` writes (``cpu.md`` / ``gpu.md``).
RESULTS = Path(__file__).resolve().parent / "results" / "scale"

#: ``--smoke``: option defaults for a run of a few seconds (explicit options still win).
SMOKE = {
    "models": "mlp,schnet",
    "r": "4",
    "batch": 64,
    "schnet_batch": 4,
    "steps": 2,
    "warmup": 1,
    "fit_epochs": 2,
    "fit_batches": 2,
    "mlp_in": 16,
    "mlp_hidden": "32,32",
    "threads": 1,
}


# ------------------------------------------------------------------------------ data


def globule(n_atoms: int = N_ATOMS, seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """A compact synthetic molecule: coordinates (Å) and atomic numbers.

    Atoms are placed uniformly at random in a sphere of radius 7.5 Å, rejecting any closer
    than 2.2 Å to one already placed (about a folded protein's heavy-atom density); the
    elements are C, N and O in the proportions 0.63 / 0.17 / 0.20.
    """
    rng = np.random.default_rng(seed)
    radius, dmin = 7.5, 2.2
    pos: list[np.ndarray] = []
    while len(pos) < n_atoms:
        c = rng.uniform(-radius, radius, size=3)
        if c @ c > radius**2:
            continue
        if pos and np.min(np.linalg.norm(np.asarray(pos) - c, axis=1)) < dmin:
            continue
        pos.append(c)
    z = rng.choice([6, 7, 8], size=n_atoms, p=[0.63, 0.17, 0.20])
    return np.asarray(pos), [int(v) for v in z]


def neighbours(xyz: np.ndarray, cutoff: float = 5.0) -> float:
    """Mean number of other atoms within ``cutoff`` of an atom."""
    d = np.linalg.norm(xyz[:, None] - xyz[None], axis=-1)
    return float(((d < cutoff).sum(1) - 1).mean())


@dataclass
class Model:
    """One benchmarked encoder family: a builder and a pair sampler."""

    name: str
    build: Callable[[int], nn.Module]
    pairs: Callable[[int, int], tuple[np.ndarray, np.ndarray]]
    description: str


def mlp_model(in_dim: int, hidden: tuple[int, ...]) -> Model:
    """``MLP(in_dim, hidden, r)`` on Gaussian states with ``y = 0.9 x + 0.44 noise``."""

    def build(r: int) -> nn.Module:
        return MLP(in_dim, hidden, r)

    def pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(n, in_dim))
        y = 0.9 * x + np.sqrt(1 - 0.81) * rng.normal(size=(n, in_dim))
        return x.astype(np.float32), y.astype(np.float32)

    widths = ", ".join(map(str, hidden))
    return Model("mlp", build, pairs, f"MLP({in_dim}, ({widths}), r), leaky ReLU")


def schnet_model() -> Model:
    """``SchNetEncoder`` (defaults) on jittered copies of :func:`globule`."""
    from dpnets.nn.schnet import SchNetEncoder

    xyz, z = globule()

    def build(r: int) -> nn.Module:
        return SchNetEncoder(z, out_dim=r)

    def pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        x = xyz + 0.3 * rng.normal(size=(n, *xyz.shape))
        y = xyz + 0.3 * rng.normal(size=(n, *xyz.shape))
        return x.astype(np.float32), y.astype(np.float32)

    desc = (
        f"SchNetEncoder (3 interactions, 64 channels, 5 Å cutoff), {len(z)} atoms, "
        f"{neighbours(xyz):.1f} neighbours/atom"
    )
    return Model("schnet", build, pairs, desc)


# ------------------------------------------------------------------------------ timing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: ``--clock``: ``wall`` (``time.perf_counter``) or ``cpu`` (``time.process_time``: the CPU
#: seconds of this process, all threads and system time included, so that other processes
#: on a shared machine do not inflate the timings; CPU devices only; with several threads
#: it sums their CPU seconds, so use it with ``--threads 1``).
CLOCK = "wall"


def _now(device: torch.device) -> float:
    if CLOCK == "cpu" and device.type == "cpu":
        return time.process_time()
    return time.perf_counter()


def _timed(fn: Callable[[], object], device: torch.device) -> float:
    _sync(device)
    t0 = _now(device)
    fn()
    _sync(device)
    return _now(device) - t0


@dataclass
class Row:
    """One line of the results table (times in seconds)."""

    device: str
    model: str
    trainer: str
    r: int
    batch: int
    step: float
    bare: float
    ratio: float
    score: float
    fit_epoch: float | None
    fit_pairs: int

    @property
    def fit_over_bare(self) -> float | None:
        """``DPNet.fit`` pairs/s over the bare step's pairs/s (None without a fit)."""
        if self.fit_epoch is None:
            return None
        return (self.fit_pairs / self.fit_epoch) / (self.batch / self.bare)

    def cells(self) -> list[str]:
        fit, fit_bare = "n/a", "n/a"
        if self.fit_epoch is not None:
            fit = f"{self.fit_pairs / self.fit_epoch:,.0f} ({self.fit_epoch:.2f} s/epoch)"
            fit_bare = f"{self.fit_over_bare:.2f}"
        return [
            self.device,
            self.model,
            self.trainer,
            str(self.r),
            str(self.batch),
            f"{1e3 * self.step:.1f}",
            f"{1e3 * self.bare:.1f}",
            f"**{self.ratio:.3f}**",
            f"{1e3 * self.score:.2f}",
            f"{self.batch / self.step:,.0f}",
            fit,
            fit_bare,
        ]


HEADER = [
    "device",
    "model",
    "trainer",
    "r",
    "batch (pairs)",
    "step (ms)",
    "bare fwd+bwd+Adam (ms)",
    "step / bare",
    "score fwd+bwd (ms)",
    "step pairs/s",
    "fit pairs/s",
    "fit / bare pairs/s",
]

#: The trainers of the rows (``GRAPHED``: ``--cuda-graph``, the score column holding the
#: graphed bare step).
OURS, PEER = "dpnets DPNet", "deeptime VAMPNet"
GRAPHED = "dpnets step in a CUDA graph"


@dataclass
class Timings:
    """Medians (seconds) of one :func:`bench_steps` run; ``peer*`` None without the peer."""

    step: float
    bare: float
    score: float
    ratio: float
    peer: float | None = None
    peer_score: float | None = None
    peer_ratio: float | None = None


def deeptime_version() -> str | None:
    """deeptime's version, or None where it is not installed."""
    try:
        import deeptime
    except ImportError:
        return None
    return str(deeptime.__version__)


def bench_steps(
    model: Model,
    r: int,
    batch: int,
    device: torch.device,
    steps: int,
    warmup: int,
    peer: bool = False,
) -> Timings:
    """Median step, bare and score times and the median step/bare ratio; with ``peer``
    (and deeptime installed) also deeptime's VAMPNet step on a copy of the same encoder."""
    torch.manual_seed(0)
    enc = model.build(r).to(device)
    enc_bare = copy.deepcopy(enc)
    enc_peer = copy.deepcopy(enc)
    xs, ys = model.pairs(batch, seed=1)
    x = torch.as_tensor(xs, device=device)
    y = torch.as_tensor(ys, device=device)
    loss_fn = make_loss(SCORE, GAMMA, constant=CONSTANT)
    opt = make_optimizer("adam", enc.parameters(), LR)
    opt_bare = make_optimizer("adam", enc_bare.parameters(), LR)

    def step() -> None:  # DPNet._fit_pairs' batch_loss inside training.train's loop
        opt.zero_grad(set_to_none=True)
        f = enc(torch.cat([x, y]))
        loss = loss_fn(f[:batch], f[batch:])
        loss.backward()
        opt.step()

    def bare() -> None:
        opt_bare.zero_grad(set_to_none=True)
        f = enc_bare(torch.cat([x, y]))
        f.sum().backward()
        opt_bare.step()

    with torch.no_grad():
        feats = enc(torch.cat([x, y])).detach()

    def score() -> None:
        f = feats.clone().requires_grad_(True)
        loss_fn(f[:batch], f[batch:]).backward()

    peer_step: Callable[[], object] | None = None
    peer_score: Callable[[], object] | None = None
    if peer and deeptime_version() is not None:
        from deeptime.decomposition.deep import VAMPNet, vampnet_loss

        vnet = VAMPNet(
            lobe=enc_peer,
            learning_rate=LR,
            device=device,
            optimizer="Adam",
            score_method="VAMP2",
        )

        def peer_step() -> None:  # what VAMPNet.fit does per batch
            vnet.partial_fit((x, y))

        def peer_score() -> None:
            f = feats.clone().requires_grad_(True)
            vampnet_loss(f[:batch], f[batch:], method="VAMP2").backward()

    timed = {"step": step, "bare": bare}
    if peer_step is not None:
        timed["peer"] = peer_step
    for _ in range(warmup):
        for fn in timed.values():
            fn()
        score()
        if peer_score is not None:
            peer_score()
    t: dict[str, list[float]] = {name: [] for name in [*timed, "score", "peer_score"]}
    order = list(timed)
    for k in range(steps):
        for name in order if k % 2 == 0 else order[::-1]:  # alternate the order
            t[name].append(_timed(timed[name], device))
        t["score"].append(_timed(score, device))
        if peer_score is not None:
            t["peer_score"].append(_timed(peer_score, device))
    med = statistics.median
    out = Timings(
        med(t["step"]),
        med(t["bare"]),
        med(t["score"]),
        med([a / b for a, b in zip(t["step"], t["bare"], strict=True)]),
    )
    if peer_step is not None:
        out.peer = med(t["peer"])
        out.peer_score = med(t["peer_score"])
        out.peer_ratio = med([a / b for a, b in zip(t["peer"], t["bare"], strict=True)])
    return out


def bench_fit(
    model: Model, r: int, batch: int, device: torch.device, epochs: int, n_batches: int
) -> float | None:
    """Median seconds per ``DPNet.fit`` epoch (between callbacks); None without enough
    epochs (2) or pairs (more than ``r + 1``)."""
    n = batch * n_batches
    if epochs < 2 or n <= r + 1:
        return None
    torch.manual_seed(0)
    x, y = model.pairs(n, seed=2)
    net = DPNet(
        model.build(r),
        objective=SCORE,
        gamma=GAMMA,
        constant=CONSTANT,
        lr=LR,
        batch_size=batch,
        epochs=epochs,
        val_fraction=0.0,
        progress=False,
        device=device,
        seed=0,
    )
    stamps: list[float] = []

    def callback(epoch: int, est: DPNet) -> None:
        _sync(device)
        stamps.append(_now(device))

    net.fit((x, y), callback=callback)
    return statistics.median(np.diff(stamps).tolist())


def _graphed(body: Callable[[bool], None], opt: torch.optim.Optimizer) -> Callable[[], None]:
    """``body`` captured in a CUDA graph (PyTorch's whole-network capture: warm-up on a side
    stream, the gradients set to None before the capture so that backward allocates them
    from the graph's pool); ``body(zero)`` runs one step, ``zero``: zero the gradients
    first. Returns the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            body(True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        body(False)
    return graph.replay


def bench_graphed(
    model: Model, r: int, batch: int, device: torch.device, steps: int, warmup: int
) -> Timings:
    """The training step of :func:`bench_steps` captured whole in a CUDA graph (forward,
    score, backward and a capturable fused Adam; possible because the step never reads the
    device on the host), timed against the eager bare step in the same loop. The row's
    score column: the graphed bare step (so ``step / score`` is graphed against graphed)."""
    torch.manual_seed(0)
    enc = model.build(r).to(device)
    enc_bare = copy.deepcopy(enc)
    enc_bare_graphed = copy.deepcopy(enc)
    xs, ys = model.pairs(batch, seed=1)
    x = torch.as_tensor(xs, device=device)
    y = torch.as_tensor(ys, device=device)
    loss_fn = make_loss(SCORE, GAMMA, constant=CONSTANT)
    capturable = {"capturable": True}
    opt = make_optimizer("adam", enc.parameters(), LR, capturable)
    opt_bare = make_optimizer("adam", enc_bare.parameters(), LR)
    opt_bare_graphed = make_optimizer("adam", enc_bare_graphed.parameters(), LR, capturable)

    def step(zero: bool) -> None:
        if zero:
            opt.zero_grad(set_to_none=True)
        f = enc(torch.cat([x, y]))
        loss_fn(f[:batch], f[batch:]).backward()
        opt.step()

    def bare_graphed(zero: bool) -> None:
        if zero:
            opt_bare_graphed.zero_grad(set_to_none=True)
        enc_bare_graphed(torch.cat([x, y])).sum().backward()
        opt_bare_graphed.step()

    def bare() -> None:
        opt_bare.zero_grad(set_to_none=True)
        enc_bare(torch.cat([x, y])).sum().backward()
        opt_bare.step()

    timed = {
        "step": _graphed(step, opt),
        "bare": bare,
        "graphed bare": _graphed(bare_graphed, opt_bare_graphed),
    }
    for _ in range(warmup):
        for fn in timed.values():
            fn()
    t: dict[str, list[float]] = {name: [] for name in timed}
    order = list(timed)
    for k in range(steps):
        for name in order if k % 2 == 0 else order[::-1]:
            t[name].append(_timed(timed[name], device))
    med = statistics.median
    return Timings(
        med(t["step"]),
        med(t["bare"]),
        med(t["graphed bare"]),
        med([a / b for a, b in zip(t["step"], t["bare"], strict=True)]),
    )


# ------------------------------------------------------------------------------ report


def machine(device: torch.device, threads: int) -> str:
    """A one-line description of the device the rows ran on."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__})"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, nproc = {os.cpu_count()}, torch.get_num_threads() = {threads} "
        f"(torch {torch.__version__})"
    )


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    return "\n".join(lines)


#: Environment variables that change the allocator (recorded with the results).
ALLOCATOR_ENV = ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "LD_PRELOAD")

#: Targets: step / bare on CPU at batch 8192 and for SchNet (issue 17: <= 1.10), for the MLP on
#: CUDA (issue 32: <= 1.25); SchNet pairs/s on one GPU (issue 17); ``DPNet.fit`` pairs/s over
#: the bare step's (issue 32: >= 0.8).
MAX_RATIO, MAX_RATIO_GPU_MLP, MIN_SCHNET_GPU, MIN_FIT_OVER_BARE = 1.10, 1.25, 14_000, 0.8


def checks(rows: list[Row], batch: int) -> list[str]:
    """The issues' criteria, evaluated on the rows that they concern."""
    out = []
    ours = {(row.device, row.model, row.r): row for row in rows if row.trainer == OURS}
    for row in rows:
        cuda = row.device.startswith("cuda")
        where = f"{row.device}, {row.model}, r = {row.r}, batch {row.batch}"
        if row.trainer == PEER:
            mine = ours.get((row.device, row.model, row.r))
            vs = f"; DPNet's step takes {mine.step / row.step:.2f}x its time" if mine else ""
            out.append(f"- {where}: deeptime VAMPNet step / bare = {row.ratio:.3f}{vs}")
            continue
        if row.trainer == GRAPHED:
            out.append(
                f"- {where}: the step in a CUDA graph / the eager bare step = {row.ratio:.3f}; "
                f"/ the bare step in a CUDA graph = {row.step / row.score:.3f}"
            )
            continue
        limit = None
        if row.model == "schnet":
            limit = MAX_RATIO
        elif row.model == "mlp" and cuda:
            limit = MAX_RATIO_GPU_MLP
        elif row.model == "mlp" and row.batch == batch == 8192:
            limit = MAX_RATIO
        if limit is not None:
            ok = "met" if row.ratio <= limit else "NOT met"
            out.append(f"- {where}: step / bare = {row.ratio:.3f} (criterion <= {limit:.2f}: {ok})")
        if row.fit_over_bare is not None:
            ok = "met" if row.fit_over_bare >= MIN_FIT_OVER_BARE else "NOT met"
            out.append(
                f"- {where}: DPNet.fit pairs/s = {row.fit_over_bare:.2f} x the bare step's "
                f"(criterion >= {MIN_FIT_OVER_BARE}: {ok})"
            )
        if cuda and row.model == "schnet":
            rate = row.batch / row.step
            ok = "met" if rate >= MIN_SCHNET_GPU else "NOT met"
            out.append(
                f"- {where}: {rate:,.0f} pairs/s per training step "
                f"(target >= {MIN_SCHNET_GPU:,}: {ok})"
            )
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``--smoke`` changes the defaults to :data:`SMOKE`."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="cpu,cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--models", default="mlp,schnet")
    p.add_argument("--r", default="8,64", help="feature dimensions, comma-separated")
    p.add_argument("--batch", type=int, default=8192, help="pairs per batch (MLP)")
    p.add_argument(
        "--schnet-batch", type=int, default=None, help="pairs per batch (SchNet; 64 CPU, 1024 GPU)"
    )
    p.add_argument("--steps", type=int, default=20, help="timed repetitions (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed repetitions first")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--fit-epochs", type=int, default=3, help="DPNet.fit epochs (0: skip)")
    p.add_argument("--fit-batches", type=int, default=8, help="batches per DPNet.fit epoch")
    p.add_argument("--mlp-in", type=int, default=100)
    p.add_argument("--mlp-hidden", default="256,256")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: CPU seconds of this process (CPU devices, with --threads 1; robust on a "
        "shared machine)",
    )
    p.add_argument(
        "--no-peer", action="store_true", help="skip deeptime's VAMPNet row (MLP models)"
    )
    p.add_argument(
        "--out",
        default=None,
        help="write the markdown table here; 'auto': benchmarks/results/scale/cpu.md or gpu.md",
    )
    p.add_argument("--append", action="store_true", help="append to --out, not overwrite")
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="instead of the table: the MLP step captured in a CUDA graph (CUDA devices)",
    )
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    a = p.parse_args(argv)
    if a.smoke:
        p.set_defaults(**SMOKE)
        a = p.parse_args(argv)
    return a


def out_path(out: str | None, devices: list[torch.device], smoke: bool) -> Path | None:
    """Where to write the table: ``--out`` ('auto': by device type); a smoke run's path
    inside ``benchmarks/results`` moves to a temporary folder."""
    if out is None:
        return None
    if out == "auto":
        kinds = {d.type for d in devices}
        if len(kinds) != 1:
            raise SystemExit("--out auto needs devices of one type (cpu or cuda)")
        path = RESULTS / ("gpu.md" if kinds == {"cuda"} else "cpu.md")
    else:
        path = Path(out)
    if smoke and RESULTS.parent in path.resolve().parents:
        path = Path(tempfile.mkdtemp(prefix="bench_scale_smoke_")) / path.name
    return path


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    global CLOCK
    CLOCK = a.clock
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    threads = torch.get_num_threads()
    rs = [int(v) for v in a.r.split(",")]
    builders = {
        "mlp": lambda: mlp_model(a.mlp_in, tuple(int(h) for h in a.mlp_hidden.split(","))),
        "schnet": schnet_model,
    }
    models = []
    for name in a.models.split(","):
        try:
            models.append(builders[name]())
        except ImportError as err:
            print(f"skipping {name}: {err}", file=sys.stderr)
    devices = []
    for dev in a.devices.split(","):
        d = torch.device(dev)
        if d.type == "cuda" and not torch.cuda.is_available():
            print(f"skipping {dev}: CUDA is not available", file=sys.stderr)
            continue
        devices.append(d)
    out = out_path(a.out, devices, a.smoke)
    peer = not a.no_peer
    dt_version = deeptime_version()
    if peer and dt_version is None:
        print("deeptime is not installed: no VAMPNet rows (pip install deeptime)", flush=True)

    rows: list[Row] = []
    for device in devices:
        print(f"# {machine(device, threads)}", flush=True)
        for model in models:
            batch = a.batch
            if model.name == "schnet":
                batch = a.schnet_batch or (1024 if device.type == "cuda" else 64)
            for r in rs:
                if a.cuda_graph:
                    if device.type != "cuda" or model.name != "mlp":
                        continue
                    try:
                        t = bench_graphed(model, r, batch, device, a.steps, a.warmup)
                    except Exception as err:  # a measurement: report and go on
                        print(f"CUDA graph, r = {r}: {type(err).__name__}: {err}", flush=True)
                        continue
                    row = Row(
                        str(device), model.name, GRAPHED, r, batch, t.step, t.bare, t.ratio,
                        t.score, None, 0,
                    )  # fmt: skip
                    print("| " + " | ".join(row.cells()) + " |", flush=True)
                    rows.append(row)
                    continue
                with_peer = peer and model.name == "mlp"
                t = bench_steps(model, r, batch, device, a.steps, a.warmup, with_peer)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    epoch = bench_fit(model, r, batch, device, a.fit_epochs, a.fit_batches)
                new = [
                    Row(
                        str(device), model.name, OURS, r, batch, t.step, t.bare, t.ratio,
                        t.score, epoch, batch * a.fit_batches,
                    )
                ]  # fmt: skip
                if t.peer is not None:
                    assert t.peer_ratio is not None and t.peer_score is not None
                    new.append(
                        Row(
                            str(device), model.name, PEER, r, batch, t.peer, t.bare,
                            t.peer_ratio, t.peer_score, None, 0,
                        )
                    )  # fmt: skip
                for row in new:
                    print("| " + " | ".join(row.cells()) + " |", flush=True)
                rows += new

    text = table(rows) + "\n\n" + "\n".join(checks(rows, a.batch))
    print()
    print(text)
    if out is not None:
        cmd = "python benchmarks/bench_scale.py " + " ".join(
            shlex.quote(s) for s in (sys.argv[1:] if argv is None else argv)
        )
        described = {m.name: m.description for m in models}
        now = datetime.datetime.now(datetime.timezone.utc)
        head = [
            "# Training throughput (`benchmarks/bench_scale.py`, issues 17 and 32)",
            "",
            f"- command: `{cmd}`",
            f"- date: {now.date().isoformat()} ({now.strftime('%H:%M')} UTC)",
        ]
        head += [f"- machine: {machine(d, threads)}" for d in devices]
        head.append(f"- torch: {torch.__version__}; deeptime: {dt_version or 'not installed'}")
        env = [f"{k}={os.environ[k]}" for k in sorted(os.environ) if k in ALLOCATOR_ENV]
        head.append(f"- allocator environment: {' '.join(env) if env else 'glibc defaults'}")
        head += [f"- {name}: {desc}" for name, desc in described.items()]
        head += [
            f"- training: DPNet objective={SCORE!r}, gamma={GAMMA}, constant={CONSTANT}, Adam "
            f"(fused) lr={LR}; medians of {a.steps} repetitions after {a.warmup} warm-ups; "
            f"`DPNet.fit`: {a.fit_batches} batches per epoch, median epoch between callbacks "
            f"over {a.fit_epochs} epochs; clock: {a.clock} (CUDA rows: always wall-clock)",
            "- step: `enc(cat([x, y]))` + score + backward + Adam step; bare: the same "
            "encoder on the same 2 x batch states with loss `f.sum()` + backward + the same "
            "Adam step; step / bare: median of per-repetition ratios; score: the loss alone "
            "on detached features, forward + backward; fit / bare pairs/s: `DPNet.fit`'s "
            "pairs/s over the bare step's",
            "- deeptime VAMPNet rows: `VAMPNet(lobe=<a copy of the same MLP>, "
            "optimizer='Adam', learning_rate=1e-3, score_method='VAMP2')`, one "
            "`partial_fit((x, y))` per repetition on the same batch and device, timed in the "
            "same loop against the same bare step; score: `vampnet_loss(..., 'VAMP2')` "
            "forward + backward",
            "",
            text,
            "",
        ]
        out.parent.mkdir(parents=True, exist_ok=True)
        if a.append:
            with open(out, "a") as fh:
                fh.write("\n" + "\n".join(head))
        else:  # atomically
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text("\n".join(head))
            os.replace(tmp, out)
        print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
