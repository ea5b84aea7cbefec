r"""Noisy logistic map: quality of learned representations (paper Sec. 5, App. F.1, Table 1).

``dpnets reproduce logistic-map [--quick] [--seeds K] [--out DIR]``

Setting (App. F.1 and the authors' code)
-----------------------------------------
* System: :class:`dpnets.systems.LogisticMap` with ``N = 20`` (trigonometric noise). Its
  transfer operator ``T`` is non-normal and known exactly, so representations are judged
  by *population* metrics computed by quadrature
  (:meth:`~dpnets.systems.LogisticMap.representation_metrics`), not by a fitted estimator.
* Data: one trajectory started at ``x0 = 0.5`` with data seed 0, the same for every network
  seed (as in the authors' code): ``2**14`` lagged pairs (``2**14 + 1`` states), so that an
  epoch is two batches of ``2**13``; no validation split, the last epoch is evaluated.
* Encoder: :class:`dpnets.nn.embeddings.PeriodicMLP`: ``[sin 2 pi x, cos 2 pi x]`` ->
  64 -> 128 -> 64 -> ``r = 7`` with LeakyReLU, bias only on the output layer, initialised as
  in the authors' code (first layer ``U(-1, 1)``, Kaiming-uniform with gain 1 after, zero
  biases). 500 epochs of Adam, 20 seeds (the network seed drives init and batch order).
* Methods (the :data:`METHODS` table; a new baseline is one :class:`Method` entry whose
  ``build(setup, seed)`` returns a feature map):

  - **DPNets**: projection score ``P^gamma`` (Eq. 7), lr ``1e-4``, separate ``psi'`` (the
    paper's learning rates, App. F Table 5; the authors tuned them per seed with a learning
    rate finder);
  - **DPNets-relaxed**: relaxed score ``S^gamma`` (Eq. 9), lr ``1e-4``, separate ``psi'``;
  - **VAMPNets** (Mardt et al. 2018): centred VAMP-2 (``objective="vamp2"``, ``gamma=0``) with a
    separate lagged network, lr ``3e-6`` (paper App. F, Table 5). The authors' code used
    kooplearn's VAMPNet with *uncentred* covariances, i.e. ``P^0`` with two networks; we keep
    the standard centred VAMP-2 of Mardt et al.;
  - **Cheby-T**: EDMD on Chebyshev polynomials ``T_0..T_6`` of ``2x - 1``;
  - **NoiseKernel**: the first ``r`` features of the noise kernel itself
    (:meth:`~dpnets.systems.LogisticMap.noise_features`);
  - **DPNets + 2-step consistency (ours)**: see below.

  As in the authors' code, only ``psi`` is evaluated (``psi' = psi`` in the metrics) even
  when a separate ``psi'`` is trained.

* ``gamma``: the paper uses a metric-distortion weight of 1 **in kooplearn's convention**,
  ``score - 0.5 * gamma_k * (mean(f(eig C_X)) + mean(f(eig C_Y)))`` with
  ``f(l) = l^2 - l - ln l``, i.e. a *mean* over the ``r`` eigenvalues and a factor ``1/2``.
  :func:`dpnets.scores.metric_distortion` is the trace (a sum), so the paper's setting is
  ``gamma = gamma_k / (2 r) = 1/14`` here (:data:`PAPER_GAMMA`). With ``gamma = 1`` in our
  convention the metric penalty dominates and DPNets' optimality gap stays near 1.1 instead
  of the paper's 0.64.

Metrics (``r = 7``, ``n_eigs = 3``)
-----------------------------------
* **Spectral error** (the table's): ``max_{i<=3} min_j |mu_i - lambda_j(T)|`` over the
  three leading *estimated* eigenvalues ``mu_i`` of ``P_H T|_H`` (matrix ``C_X^+ C_XX'``),
  distance to the nearest of *all* true eigenvalues: the paper's formula and the authors'
  code (``spectral_error_paper``). It reproduces Cheby-T's 0.20 and NoiseKernel's 0.19.
  Note that an estimate close to any of the many tiny true eigenvalues counts as correct.
* **Optimality gap** ``sum_{i<=r} sigma_i^2(T) - P^0(psi)``: against the singular values
  on Lebesgue ``L^2([0, 1])`` as in the authors' code and Table 1 (``optimality_gap_paper``,
  can be negative in principle since ``sigma_1 = 1.24 > 1``), and against the singular
  values on ``L^2(pi)`` (``optimality_gap``, the mathematically consistent quantity,
  ``>= 0``).
* Extra column: the same spectral error for EDMD fitted on the *training data*
  (:class:`dpnets.TransferOperator` on the features), i.e. what a user would get.

The tuned configuration
-----------------------
Goal: one configuration that beats every paper row on both metrics at once (spectral error
``<= 0.06`` and paper-compatible gap ``<= 0.64``) with the same data, encoder, batch size and
number of epochs. Findings from short runs (one or two seeds, 500 epochs):

* The metrics evaluate ``psi`` alone, whereas with a separate ``psi'`` the score is maximised
  by the top-7 *left* singular functions of ``T``, which score a gap of 1.69 (spectral error
  0.041) once ``psi' = psi``; the paper-setting DPNets lands anywhere between (seed 0:
  0.28 / 0.62, seed 1: 0.03 / 0.79). Sharing ``psi' = psi`` trains what is evaluated:
  ``P^gamma`` with lr ``1e-3`` reaches gap 0.52, but spectral error ~0.066 (lr ``1e-4``:
  0.053 / 0.643 after 500 epochs, still moving; ``S^gamma``, lr ``1e-3``: 0.053 / 0.90).
* That is the population optimum itself: maximising ``P^0(psi, psi)`` over all
  7-dimensional subspaces of ``range(T) + range(T*)`` (Grassmannian optimisation with exact
  covariances) gives gap 0.516 and spectral error 0.0644. The score is flat around its
  maximum in directions that move the eigenvalues (a subspace with gap 0.519 and spectral
  error 0.005 exists), so no choice of ``gamma``, learning rate, initialisation or score
  (``S^gamma``, centred VAMP-2, shared or not) meets both targets at convergence: they all
  converge to the same subspace, and stopping early is luck.
* What selects the right subspace is *invariance*: for an invariant ``H`` the compression of
  ``T^2`` is the square of that of ``T`` (Chapman-Kolmogorov). The tuned row adds
  ``beta * ||K_2 - K_1^2||_F^2`` (whitened compressions at lags 1 and 2, estimated on
  consecutive triplets of the same trajectory; no knowledge of ``T`` is used) to
  ``-P^gamma``. In population this moves the optimum to spectral error 0.046 / 0.036 / 0.016
  at gap 0.525 / 0.557 / 0.582 for ``beta = 10 / 30 / 100``; the networks (lr ``1e-3``,
  ``gamma = 1/14``, shared ``psi``, paper encoder and init) reach 0.054-0.061 / 0.043-0.045 /
  0.031-0.034 at gap 0.530 / 0.565 / 0.598 (seeds 0 and 1). ``beta = 30`` has the best
  margin on both. Cost: three forward passes per batch (``x_t, x_{t+1}, x_{t+2}``) through
  one network, versus two networks for the paper rows.
  Penalising the Frobenius residual or the non-normality of the compression, or adding a
  lag-2 projection score, does not help (residual: no change; the others trade the gap away).
"""

from __future__ import annotations

import csv
import json
import platform
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpnets.experiments._common import jsonable, pyplot, torch_threads

__all__ = [
    "METHODS",
    "Method",
    "Setup",
    "Fitted",
    "PAPER_GAMMA",
    "TUNED",
    "chebyshev_features",
    "spectral_error_from_eigvals",
    "make_setup",
    "evaluate",
    "run",
]

# ----------------------------------------------------------------------------- settings
N_NOISE = 20  #: exponent of the trigonometric noise
RANK = 7  #: feature dimension r
N_PAIRS = 2**14  #: lagged training pairs
BATCH_SIZE = 2**13
EPOCHS = 500
SEEDS = 20
DATA_SEED = 0
X0 = 0.5
HIDDEN = (64, 128, 64)
N_EIGS = 3
#: kooplearn's metric-deformation weight 1, which is the scale of :mod:`dpnets.scores`.
PAPER_GAMMA = 1.0

#: Paper Table 1: (spectral error, std, optimality gap vs Lebesgue sigma, std).
PAPER_TABLE: dict[str, tuple[float, float | None, float, float | None]] = {
    "DPNets": (0.28, 0.03, 0.64, 0.01),
    "DPNets-relaxed": (0.06, 0.05, 1.19, 0.04),
    "VAMPNets": (0.21, 0.09, 0.97, 0.22),
    "Cheby-T": (0.20, None, 1.24, None),
    "NoiseKernel": (0.19, None, 2.17, None),
}

#: Settings of the "DPNets + 2-step consistency (ours)" row (reasons: module docstring).
TUNED: dict[str, Any] = {
    "score": "projection",
    "gamma": PAPER_GAMMA,
    "lr": 1e-3,
    "shared_psi": True,
    "two_step_beta": 30.0,
}


# ----------------------------------------------------------------------------- plumbing
@dataclass
class Setup:
    """Everything a method needs to build its representation."""

    system: Any  # dpnets.systems.LogisticMap
    train: np.ndarray  # (n_pairs + 1, 1) trajectory
    rank: int = RANK
    epochs: int = EPOCHS
    batch_size: int = BATCH_SIZE
    eval_every: int = 5
    device: str | None = None
    progress: bool = False


@dataclass
class Fitted:
    """A learned or fixed representation ``psi`` (states ``(m, 1)`` -> features ``(m, r)``)."""

    feature_map: Callable[[np.ndarray], Any]
    #: ``(epoch, spectral error, paper-compatible gap)`` during training (neural methods).
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    #: wall time of the fit, excluding the metric evaluations of the curve.
    seconds: float = 0.0


@dataclass(frozen=True)
class Method:
    """One row of the table.

    ``build(setup, seed)`` returns a :class:`Fitted`; ``seeded=False`` methods are
    deterministic and built once. The paper's numbers, if any, are in :data:`PAPER_TABLE`.
    """

    name: str
    build: Callable[[Setup, int], Fitted]
    seeded: bool = True
    description: str = ""


def chebyshev_features(x: np.ndarray, degree: int = RANK - 1) -> np.ndarray:
    """Chebyshev polynomials ``T_0..T_degree`` of ``2x - 1`` on ``[0, 1]`` (the "Cheby-T" row)."""
    z = np.asarray(x, dtype=np.float64).reshape(len(x), -1)[:, 0]
    return np.polynomial.chebyshev.chebvander(2.0 * z - 1.0, degree)


def spectral_error_from_eigvals(
    estimated: np.ndarray, true: np.ndarray, n_eigs: int = N_EIGS
) -> float:
    """Paper's spectral error: ``max`` over the ``n_eigs`` leading (by modulus) estimated
    eigenvalues of the distance to the nearest true eigenvalue."""
    est = np.asarray(estimated, dtype=np.complex128)
    est = est[np.argsort(-np.abs(est), kind="stable")][:n_eigs]
    true = np.asarray(true, dtype=np.complex128)
    return float(np.abs(est[:, None] - true[None, :]).min(axis=1).max())


def _encoder(rank: int) -> Any:
    from dpnets.nn.embeddings import PeriodicMLP

    return PeriodicMLP(1, HIDDEN, rank, "leaky_relu", hidden_bias=False, init="paper")


def _neural(
    score: str, gamma: float, lr: float, separate: bool, consistency: float = 0.0
) -> Callable[[Setup, int], Fitted]:
    """Builder of a DPNet-trained representation (one network, or two when ``separate``;
    ``consistency``: weight of the two-step consistency penalty)."""

    def build(setup: Setup, seed: int) -> Fitted:
        import torch

        from dpnets import DPNet
        from dpnets.spectral import as_feature_map

        torch.manual_seed(seed)
        enc = _encoder(setup.rank)
        lagged = _encoder(setup.rank) if separate else None
        system = setup.system
        curve: list[tuple[int, float, float]] = []
        eval_time = [0.0]

        def record(epoch: int, fmap: Callable[[np.ndarray], Any]) -> None:
            t0 = time.perf_counter()
            m = system.representation_metrics(fmap, n_eigs=N_EIGS)
            curve.append((epoch, m["spectral_error_paper"], m["optimality_gap_paper"]))
            eval_time[0] += time.perf_counter() - t0

        record(0, as_feature_map(enc))

        def callback(epoch: int, model: DPNet) -> None:
            done = epoch + 1
            if done % setup.eval_every == 0 or done == setup.epochs:
                record(done, model.transform)

        net = DPNet(
            enc,
            lagged_encoder=lagged,
            objective=score,
            gamma=gamma,
            lr=lr,
            batch_size=setup.batch_size,
            epochs=setup.epochs,
            val_fraction=0.0,
            constant=False,  # the paper's convention (Table 1's metrics)
            consistency=consistency,
            standardize="none",
            seed=seed,
            device=setup.device,
            progress=setup.progress,
        )
        t0 = time.perf_counter()
        net.fit(setup.train, callback=callback)
        seconds = time.perf_counter() - t0 - eval_time[0]
        return Fitted(net.transform, curve, seconds)

    return build


def _two_step_consistent(gamma: float, lr: float, beta: float) -> Callable[[Setup, int], Fitted]:
    r"""Builder of a shared-``psi`` DPNet trained on ``P^gamma`` plus the two-step consistency
    penalty (the library option ``DPNet(consistency=beta, consistency_steps=2)``).

    Loss on a batch of consecutive triplets ``(x_t, x_{t+1}, x_{t+2})``:
    ``-P^gamma(psi(x_t), psi(x_{t+1})) + beta * ||K_2 - K_1^2||_F^2`` with the whitened
    compressions ``K_k = C_X^{-1/2} C_{0k} C_X^{-1/2}``, ``C_{0k} = E[psi(x_t) psi(x_{t+k})^T]``
    (:func:`dpnets.scores.multistep_penalty`). For an invariant subspace the compression of
    ``T^2`` is the square of that of ``T`` (Chapman-Kolmogorov), so the term penalises
    non-invariance in the directions that move eigenvalues, at almost no cost in ``P`` (see
    the module docstring).
    """
    return _neural("projection", gamma, lr, separate=False, consistency=beta)


def _chebyshev(setup: Setup, seed: int) -> Fitted:
    return Fitted(lambda x: chebyshev_features(x, setup.rank - 1))


def _noise_kernel(setup: Setup, seed: int) -> Fitted:
    system = setup.system
    return Fitted(lambda x: system.noise_features(x, setup.rank))


def _kernel(kernel: str, **kw: Any) -> Callable[[Setup, int], Fitted]:
    """Nystrom kernel DMD (principal-component estimator of rank r, 2000 centres).

    Settings from a sweep over length scales and estimators on 5 seeds (PCR beat RRR on the
    gap; length scale 0.1 was best for RBF and AbsExp). A cubic polynomial kernel in 1-D has
    only 4 independent functions, so its row is effectively ``r = 4``.
    """

    def build(setup: Setup, seed: int) -> Fitted:
        from dpnets.baselines import NystromKernelDMD

        t0 = time.perf_counter()
        model = NystromKernelDMD(
            kernel, n_centers=2000, rank=setup.rank, estimator="pcr", seed=seed, **kw
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(setup.train)
        return Fitted(model.features_, [], time.perf_counter() - t0)

    return build


#: The rows of the table, in order. Add a baseline by appending one entry.
METHODS: list[Method] = [
    Method(
        "DPNets",
        _neural("projection", PAPER_GAMMA, 1e-4, separate=True),
        description="P^gamma (Eq. 7), gamma=1/14 (kooplearn's 1), lr 1e-4, separate psi'",
    ),
    Method(
        "DPNets-relaxed",
        _neural("relaxed", PAPER_GAMMA, 1e-4, separate=True),
        description="S^gamma (Eq. 9), gamma=1/14 (kooplearn's 1), lr 1e-4, separate psi'",
    ),
    Method(
        "VAMPNets",
        _neural("vamp2", 0.0, 3e-6, separate=True),
        description="centred VAMP-2, separate lagged network, lr 3e-6",
    ),
    Method(
        "Cheby-T",
        _chebyshev,
        seeded=False,
        description="EDMD on Chebyshev T_0..T_6 of 2x-1",
    ),
    Method(
        "NoiseKernel",
        _noise_kernel,
        seeded=False,
        description="first r noise-kernel features phi_k",
    ),
    Method(
        "DPNets + 2-step consistency (ours)",
        _two_step_consistent(TUNED["gamma"], TUNED["lr"], TUNED["two_step_beta"]),
        description="P^gamma, gamma=1/14, lr 1e-3, shared psi, two-step consistency beta=30",
    ),
    Method(
        "KernelDMD RBF",
        _kernel("rbf", length_scale=0.1),
        description="Nystrom kernel DMD, Gaussian kernel, length scale 0.1, PCR rank 7",
    ),
    Method(
        "KernelDMD AbsExp",
        _kernel("laplacian", length_scale=0.1),
        description="Nystrom kernel DMD, exp(-|x-y|/0.1), PCR rank 7",
    ),
    Method(
        "KernelDMD poly3",
        _kernel("poly", degree=3),
        description="Nystrom kernel DMD, (x.y + 1)^3 (only 4 functions in 1-D), PCR rank 7",
    ),
]


def make_setup(
    *,
    n_pairs: int = N_PAIRS,
    epochs: int = EPOCHS,
    batch_size: int = BATCH_SIZE,
    eval_every: int = 5,
    device: str | None = None,
    progress: bool = False,
) -> Setup:
    """The logistic map with ``N = 20`` and its training trajectory (data seed 0)."""
    from dpnets.systems import LogisticMap

    system = LogisticMap(N=N_NOISE)
    train = system.sample(n_pairs + 1, x0=X0, seed=DATA_SEED)
    return Setup(
        system=system,
        train=train,
        epochs=epochs,
        batch_size=batch_size,
        eval_every=eval_every,
        device=device,
        progress=progress,
    )


def evaluate(setup: Setup, fitted: Fitted) -> dict[str, Any]:
    """Population metrics of ``fitted.feature_map`` plus the data-driven spectral error."""
    from dpnets import TransferOperator

    system = setup.system
    m = system.representation_metrics(fitted.feature_map, n_eigs=N_EIGS)
    op = TransferOperator(features=fitted.feature_map, constant=False, lag=1).fit(setup.train)
    return {
        "spectral_error": m["spectral_error_paper"],
        "optimality_gap_paper": m["optimality_gap_paper"],
        "optimality_gap": m["optimality_gap"],
        "spectral_error_true_to_est": m["spectral_error"],
        "spectral_error_data": spectral_error_from_eigvals(op.eig(), system.eigvals()),
        "projection_score": m["projection_score"],
        "eigvals": m["eigvals"],
        "seconds": fitted.seconds,
    }


# ----------------------------------------------------------------------------- reporting
_METRICS = (
    "spectral_error",
    "optimality_gap_paper",
    "optimality_gap",
    "spectral_error_data",
    "seconds",
)


def _summary(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    out = {}
    for key in _METRICS:
        vals = np.array([r[key] for r in rows], dtype=np.float64)
        out[key] = (float(vals.mean()), float(vals.std()))  # population std, as the authors
    return out


def _fmt(mean: float, std: float, seeded: bool, digits: int = 3) -> str:
    return f"{mean:.{digits}f} ({std:.{digits}f})" if seeded else f"{mean:.{digits}f}"


def _fmt_paper(name: str, which: int) -> str:
    row = PAPER_TABLE.get(name)
    if row is None:
        return "-"
    mean, std = row[2 * which], row[2 * which + 1]
    return f"{mean:.2f}" + (f" ({std:.2f})" if std is not None else "")


def _markdown(
    methods: Sequence[Method], summaries: dict[str, dict[str, tuple[float, float]]], info: str
) -> str:
    lines = [
        info,
        "",
        "| Method | Spectral error | paper | Optimality gap (Lebesgue σ) | paper "
        "| Optimality gap (L²(π) σ) | Spectral error, EDMD on data | fit time / seed (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in methods:
        s = summaries[m.name]
        lines.append(
            f"| {m.name} | {_fmt(*s['spectral_error'], m.seeded)} | {_fmt_paper(m.name, 0)} "
            f"| {_fmt(*s['optimality_gap_paper'], m.seeded)} | {_fmt_paper(m.name, 1)} "
            f"| {_fmt(*s['optimality_gap'], m.seeded)} "
            f"| {_fmt(*s['spectral_error_data'], m.seeded)} "
            f"| {s['seconds'][0]:.1f} |"
        )
    lines += [
        "",
        "Mean (population std) over seeds. Spectral error: max over the 3 leading estimated "
        "eigenvalues of P_H T|_H of the distance to the nearest true eigenvalue (paper's "
        "formula). Optimality gap: sum_{i<=7} σ_i² − P⁰(ψ), with σ on Lebesgue L²([0,1]) "
        "(paper / authors' code) or on L²(π). Population covariances by quadrature; ψ' = ψ "
        "in the metrics.",
    ]
    return "\n".join(lines)


def _plot(curves: dict[str, list[list[tuple[int, float, float]]]], path: Path) -> str | None:
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed (extra dpnets[plot]): skipped the training-curve plot"
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, runs in curves.items():
        if not runs:
            continue
        length = min(len(r) for r in runs)
        arr = np.array([r[:length] for r in runs], dtype=np.float64)  # (seeds, points, 3)
        epochs = arr[0, :, 0]
        for ax, k in zip(axes, (1, 2), strict=True):
            mean, std = arr[:, :, k].mean(0), arr[:, :, k].std(0)
            (line,) = ax.plot(epochs, mean, label=name)
            ax.fill_between(epochs, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    for name, (spec, _, gap, _) in PAPER_TABLE.items():
        if name in ("Cheby-T", "NoiseKernel"):
            style = {"ls": "--" if name == "Cheby-T" else ":", "color": "gray", "lw": 1}
            axes[0].axhline(spec, label=f"{name} (fixed)", **style)
            axes[1].axhline(gap, **style)
    axes[0].set(xlabel="epoch", ylabel="spectral error", yscale="log")
    axes[1].set(xlabel="epoch", ylabel="optimality gap (Lebesgue σ)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Noisy logistic map (N=20, r=7): mean ± std over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def run(
    *,
    quick: bool = False,
    seeds: int | None = None,
    out: str | Path = Path("dpnets-out") / "logistic-map",
    device: str | None = None,
    progress: bool = True,
    epochs: int | None = None,
    n_pairs: int | None = None,
    methods: Sequence[str] | None = None,
    threads: int | None = 1,
) -> str:
    """Run the logistic-map experiment (paper Table 1) and write its outputs to ``out``.

    Parameters
    ----------
    quick : bool, default False
        Smoke-test version: 1 seed and 60 epochs (numbers not comparable with the paper).
    seeds : int, optional
        Number of network seeds ``0..seeds-1`` (default 20, quick 1).
    out : path
        Output folder: ``table.md``, ``results.json`` (settings, per-seed metrics and
        eigenvalues, curves, summaries), ``results.csv`` (one line per method and seed) and
        ``spectral_error_vs_epoch.png`` (needs matplotlib).
    device : str, optional
        Torch device for the networks (default: CUDA if available).
    progress : bool, default True
        Progress bars during training (one line per finished fit is printed regardless).
    epochs, n_pairs : int, optional
        Override the number of epochs (default 500, quick 60) and of training pairs
        (default ``2**14``); for tests and exploration.
    methods : sequence of str, optional
        Names of the :data:`METHODS` rows to run (default all).
    threads : int or None, default 1
        Torch CPU threads during the run, restored afterwards. The networks are small: on a
        2-core machine shared with other work, 2 threads made training 7x *slower* than 1
        (measured). ``None`` keeps torch's setting.

    Returns
    -------
    str
        The results table (markdown) with the paper's numbers beside ours.
    """
    with torch_threads(threads):
        return _run(quick, seeds, Path(out), device, progress, epochs, n_pairs, methods)


def _run(
    quick: bool,
    seeds: int | None,
    out: Path,
    device: str | None,
    progress: bool,
    epochs: int | None,
    n_pairs: int | None,
    methods: Sequence[str] | None,
) -> str:
    t_start = time.perf_counter()
    n_seeds = int(seeds) if seeds is not None else (1 if quick else SEEDS)
    n_epochs = int(epochs) if epochs is not None else (60 if quick else EPOCHS)
    if n_seeds < 1 or n_epochs < 1:
        raise ValueError("seeds and epochs must be >= 1")
    selected = list(METHODS)
    if methods is not None:
        known = {m.name for m in METHODS}
        unknown = [name for name in methods if name not in known]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; expected some of {sorted(known)}")
        selected = [m for m in METHODS if m.name in set(methods)]
    out.mkdir(parents=True, exist_ok=True)
    setup = make_setup(
        n_pairs=int(n_pairs) if n_pairs is not None else N_PAIRS,
        epochs=n_epochs,
        eval_every=max(1, n_epochs // 100),
        device=device,
        progress=progress,
    )

    per_seed: dict[str, list[dict[str, Any]]] = {}
    curves: dict[str, list[list[tuple[int, float, float]]]] = {}
    for method in selected:
        rows, runs = [], []
        for seed in range(n_seeds if method.seeded else 1):
            fitted = method.build(setup, seed)
            res = evaluate(setup, fitted)
            res["seed"] = seed
            rows.append(res)
            if fitted.curve:
                runs.append(fitted.curve)
            # one line per fit, also with progress=False (logs of long runs)
            print(
                f"[logistic-map] {method.name} seed {seed}: spectral error "
                f"{res['spectral_error']:.3f}, gap {res['optimality_gap_paper']:.3f} "
                f"({res['seconds']:.1f} s)",
                flush=True,
            )
        per_seed[method.name] = rows
        if runs:
            curves[method.name] = runs
    summaries = {name: _summary(rows) for name, rows in per_seed.items()}
    wall = time.perf_counter() - t_start

    info = (
        f"Noisy logistic map (N={N_NOISE}), r={RANK}: {len(setup.train) - 1} training pairs, "
        f"batch {setup.batch_size}, {n_epochs} epochs, {n_seeds} seed(s)"
        f"{' [quick: not comparable with the paper]' if quick else ''}; "
        f"wall time {wall:.0f} s."
    )
    table = _markdown(selected, summaries, info)
    note = _plot(curves, out / "spectral_error_vs_epoch.png") if curves else None
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    settings = {
        "N": N_NOISE,
        "rank": RANK,
        "n_pairs": len(setup.train) - 1,
        "batch_size": setup.batch_size,
        "epochs": n_epochs,
        "seeds": n_seeds,
        "data_seed": DATA_SEED,
        "x0": X0,
        "hidden": list(HIDDEN),
        "paper_gamma": PAPER_GAMMA,
        "tuned": TUNED,
        "quick": quick,
        "device": device,
        "wall_seconds": wall,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    payload = {
        "settings": settings,
        "methods": {m.name: m.description for m in selected},
        "paper": PAPER_TABLE,
        "summary": summaries,
        "per_seed": per_seed,
        "curves": curves,
    }
    (out / "results.json").write_text(json.dumps(jsonable(payload), indent=1), encoding="utf-8")
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["method", "seed", *_METRICS])
        for name, rows in per_seed.items():
            for r in rows:
                writer.writerow([name, r["seed"], *(f"{r[k]:.6g}" for k in _METRICS)])
    if note is not None:
        print(f"[logistic-map] {note}")
        return table + f"\n\n({note})"
    return table
