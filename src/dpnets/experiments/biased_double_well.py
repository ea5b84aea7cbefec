r"""Slow modes from biased simulations, where the truth is known (issue 44).

``dpnets reproduce biased-double-well [--quick] [--seeds K] [--out DIR]``

Setting
-------
* System: overdamped Langevin dynamics ``dx = -U'(x) dt + sqrt(2 kT) dW`` (unit friction,
  ``kT = 1``) in the double well ``U(x) = h (x^2 - 1)^2``, ``h = 5`` (barrier ``5 kT``).
  Its unbiased generator's slowest timescale, ``18.01`` time units, is computed exactly on
  a fine grid (:meth:`dpnets.systems.OverdampedLangevin1D.implied_timescales`).
* Two static biases ``V`` (the simulations run in ``U + V``; ``log_weights = V / kT``):

  - ``"wells"``: the boost potential of accelerated MD (Hamelberg, Mongan and McCammon,
    J. Chem. Phys. 120, 11919, 2004), ``V = (E - U)^2 / (alpha + E - U)`` where ``U < E``
    and 0 elsewhere, ``E = 2 kT``, ``alpha = 0.5 kT``: it raises the wells by ``1.6 kT``
    and vanishes where ``U > 2 kT`` (``|x| < 0.6``), at the barrier. Time rescaling is
    exact up to what the bias does on the barrier's flanks: the rescaled process (the
    biased one run on the clock ``dt exp(V / kT)``) has generator ``exp(-V/kT) L_V``,
    whose slowest timescale on the grid is ``18.27`` (1.5% above the unbiased one: the
    route's limit, reported in the table).
  - ``"barrier"``: ``V = -0.8 h exp(-x^2 / (2 0.35^2))``, which lowers the barrier from 5
    to 1 kT, as a converged metadynamics bias on ``x`` would: transitions happen where the
    bias acts most, and time rescaling is wrong (its limit ``1.08``); the generator from
    the biased samples with importance weights ``exp(V / kT)`` (Devergne et al., NeurIPS
    2024) holds for any bias.
* Data: ``n_chains`` (1000) Euler-Maruyama chains (``dt = 1e-3``) of ``length`` (40) time
  units in ``U + V``, started from exact draws of the biased Boltzmann law, a frame every
  20 steps (0.02 time units).
* Estimators, each with the weights and without them: :class:`dpnets.TransferOperator` on
  13 Gaussian functions of width 0.3 spread over ``[-1.6, 1.6]`` (:class:`GaussianBasis`),
  at a lag of 1 time unit (50 frames) in rescaled time (``log_weights``);
  :class:`dpnets.Generator` on the same functions, Dirichlet form (first derivatives,
  reversible SDE), on every 10th frame with ``sample_weight = exp(V / kT)``; and, unless
  ``quick``, the same two routes with learned features (:func:`_dpnet_routes`).

Metrics
-------
``timescale``: the slowest non-trivial implied timescale; ``error``: its relative error
against the exact one (goal: within 5% for the valid routes, off by more than 30% without
the weights).
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpnets.experiments._common import markdown_table, provenance

__all__ = [
    "BARRIER",
    "BIASES",
    "GaussianBasis",
    "potential",
    "system",
    "simulate",
    "exact_timescale",
    "rescaled_limit",
    "fit_routes",
    "run",
]

#: barrier height ``h`` of ``U = h (x^2 - 1)^2``, in kT
BARRIER = 5.0
#: accelerated MD's boost: ``E`` and ``alpha`` of the "wells" bias, in kT
BOOST_E, BOOST_ALPHA = 2.0, 0.5
#: the "barrier" bias: depth (fraction of the barrier) and width of its Gaussian
FLATTEN_DEPTH, FLATTEN_WIDTH = 0.8, 0.35
#: Euler-Maruyama step and steps per frame
DT, EVERY = 1e-3, 20


def _exp(x: Any) -> Any:
    return x.exp() if isinstance(x, torch.Tensor) else np.exp(x)


def potential(x: Any) -> Any:
    """``U(x) = h (x^2 - 1)^2`` (numpy or torch)."""
    return BARRIER * (x**2 - 1.0) ** 2


def potential_grad(x: Any) -> Any:
    """``U'(x)`` (numpy or torch)."""
    return 4.0 * BARRIER * x * (x**2 - 1.0)


def _boost(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The "wells" bias and its derivative (numpy)."""
    d = np.maximum(BOOST_E - potential(x), 0.0)
    v = d * d / (BOOST_ALPHA + d)
    dv = -potential_grad(x) * d * (2.0 * BOOST_ALPHA + d) / (BOOST_ALPHA + d) ** 2
    return v, dv


def _flatten(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The "barrier" bias and its derivative (numpy)."""
    g = -FLATTEN_DEPTH * BARRIER * np.exp(-(x**2) / (2.0 * FLATTEN_WIDTH**2))
    return g, -g * x / FLATTEN_WIDTH**2


#: name -> (description, function x -> (V(x), V'(x)) in kT)
BIASES: dict[str, tuple[str, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]]] = {
    "wells": ("raises the wells by 1.6 kT, 0 at the barrier (|x| < 0.6)", _boost),
    "barrier": ("lowers the barrier from 5 to 1 kT", _flatten),
}


def system(bias: str | None = None) -> Any:
    """The overdamped Langevin process in ``U`` (``bias=None``) or ``U + V``."""
    from dpnets.systems import OverdampedLangevin1D

    if bias is None:
        return OverdampedLangevin1D(potential, potential_grad, 1.0, 1.0, DT, (-2.2, 2.2))
    fn = BIASES[bias][1]
    return OverdampedLangevin1D(
        lambda x: potential(x) + fn(np.asarray(x))[0],
        lambda x: potential_grad(x) + fn(np.asarray(x))[1],
        1.0,
        1.0,
        DT,
        (-2.2, 2.2),
    )


def exact_timescale() -> float:
    """The unbiased generator's slowest timescale, on a grid of 8001 points."""
    return float(system().implied_timescales(2)[1])


def rescaled_limit(bias: str, n_grid: int = 8001) -> float:
    """The slowest timescale time rescaling converges to: that of ``exp(-V/kT) L_V``, the
    biased process on the clock ``dt exp(V/kT)`` (Dirichlet form with the biased density,
    mass with the unbiased one), by the grid discretisation of
    :meth:`dpnets.systems.OverdampedLangevin1D.reference_spectrum`."""
    import scipy.linalg

    x = np.linspace(-2.2, 2.2, n_grid)
    h = x[1] - x[0]
    mid = 0.5 * (x[1:] + x[:-1])
    u, um = potential(x), potential(mid) + BIASES[bias][1](mid)[0]
    shift = min(u.min(), um.min())
    w, wm = np.exp(-(u - shift)), np.exp(-(um - shift))
    diag = np.zeros(n_grid)
    diag[:-1] += wm
    diag[1:] += wm
    mu = scipy.linalg.eigh_tridiagonal(
        diag / w / h**2,
        -wm / np.sqrt(w[1:] * w[:-1]) / h**2,
        select="i",
        select_range=(1, 1),
        eigvals_only=True,
    )
    return float(1.0 / mu[0])


def simulate(
    bias: str, n_chains: int, length: float, seed: int = 0
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``n_chains`` trajectories of ``length`` time units in ``U + V`` (a frame every
    ``EVERY`` steps of ``DT``), from exact biased Boltzmann draws, and their log-weights
    ``V / kT`` per frame."""
    sim = system(bias)
    rng = np.random.default_rng(seed)
    x0 = sim.sample_stationary(n_chains, seed=int(rng.integers(2**31)))[:, 0]
    frames = sim.simulate(
        x0, int(round(length / DT)), record_every=EVERY, seed=int(rng.integers(2**31))
    )
    trajs = [frames[:, k : k + 1] for k in range(n_chains)]
    fn = BIASES[bias][1]
    return trajs, [fn(t[:, 0])[0] for t in trajs]


class GaussianBasis(torch.nn.Module):
    """``m`` Gaussian functions ``exp(-(x - c)^2 / (2 width^2))`` of a scalar state, centres
    spread over ``[lo, hi]``: a fixed dictionary, differentiable (for
    :class:`dpnets.Generator`)."""

    def __init__(self, m: int = 13, lo: float = -1.6, hi: float = 1.6, width: float = 0.3):
        super().__init__()
        self.register_buffer("centres", torch.linspace(lo, hi, m, dtype=torch.float64))
        self.width = float(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.centres.to(x.dtype)
        return torch.exp(-(((x.reshape(-1, 1) - c) / self.width) ** 2) / 2.0)


def _slowest(model: Any) -> float:
    """The slowest non-trivial timescale of a fitted model."""
    ts = np.asarray(model.implied_timescales(), dtype=np.float64)
    finite = ts[np.isfinite(ts)]
    return float(np.max(finite))


def fit_routes(
    bias: str,
    trajs: list[np.ndarray],
    log_weights: list[np.ndarray],
    *,
    weighted: bool,
    lag: int = 50,
    stride: int = 10,
) -> dict[str, float]:
    """The slowest timescale of the two fixed-dictionary routes on one biased data set, with
    the weights (``weighted``) or without: ``{"transfer": ..., "generator": ...}``."""
    from dpnets import Generator, TransferOperator

    frame = DT * EVERY
    op = TransferOperator(GaussianBasis(), lag=lag, dt=frame)
    op.fit(trajs, log_weights=log_weights if weighted else None)
    samples = np.concatenate([t[::stride] for t in trajs])
    w = np.exp(np.concatenate([v[::stride] for v in log_weights])) if weighted else None
    gen = Generator(GaussianBasis(), sde=system().sde(), form="dirichlet")
    gen.fit(samples, sample_weight=w)
    return {"transfer": _slowest(op), "generator": _slowest(gen)}


def _dpnet_routes(
    trajs: list[np.ndarray], log_weights: list[np.ndarray], seed: int, weighted: bool
) -> dict[str, float]:
    """The same two routes with learned features: ``TransferOperator(DPNet(r=1))`` on
    every 10th frame at a lag of 5 of them (1 time unit), and ``DPNet(objective="dirichlet",
    r=1)`` with :class:`dpnets.Generator` on every 40th frame."""
    from dpnets import DPNet, Generator, TransferOperator

    sub = [t[::10] for t in trajs]
    sub_lw = [v[::10] for v in log_weights]
    net = DPNet(r=1, lag=5, epochs=10, seed=seed, progress=False)
    op = TransferOperator(net, lag=5, dt=10 * DT * EVERY)
    op.fit(sub, log_weights=sub_lw if weighted else None)
    samples = np.concatenate([t[::40] for t in trajs])
    w = np.exp(np.concatenate([v[::40] for v in log_weights])) if weighted else None
    sde = system().sde()
    gnet = DPNet(r=1, objective="dirichlet", sde=sde, lr=1e-2, epochs=10, seed=seed)
    gnet.set_params(progress=False)
    gnet.fit(samples, sample_weight=w)
    gen = Generator(gnet, form="dirichlet").fit(samples, sample_weight=w)
    return {"transfer": _slowest(op), "generator": _slowest(gen)}


#: the full run and the ``--quick`` smoke test
CONFIG: dict[str, Any] = {"n_chains": 1000, "length": 40.0, "dpnet": True}
QUICK: dict[str, Any] = {"n_chains": 300, "length": 20.0, "dpnet": False}

_ROUTES = {
    "transfer": "transfer operator, pairs in rescaled time (log_weights)",
    "generator": "generator, Dirichlet form, importance weights (sample_weight)",
}


def run(
    *,
    quick: bool = False,
    seeds: int | None = None,
    out: str | Path = Path("dpnets-out") / "biased-double-well",
    device: str | None = None,
    progress: bool = True,
) -> str:
    """Simulate under both biases, fit every route with and without the weights, compare
    with the exact timescale; writes ``results.json`` and ``table.md`` into ``out``.

    Parameters
    ----------
    quick : bool, default False
        Fewer and shorter chains, fixed dictionaries only (:data:`QUICK`).
    seeds : int, optional
        Repetitions with seeds ``0..seeds-1`` (default 1); the table shows their mean.
    out : path
    device : str, optional
        Ignored (CPU).
    progress : bool, default True
        Ignored (the fits are short).
    """
    del device, progress
    cfg = QUICK if quick else CONFIG
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    exact = exact_timescale()
    t0 = time.perf_counter()
    results: dict[str, Any] = {"exact": exact, "config": cfg, "rows": []}
    for bias in BIASES:
        found: dict[tuple[str, str, bool], list[float]] = {}
        for seed in range(seeds or 1):
            trajs, lw = simulate(bias, cfg["n_chains"], cfg["length"], seed)
            for weighted in (True, False):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fits = {
                        ("dictionary", k): v
                        for k, v in fit_routes(bias, trajs, lw, weighted=weighted).items()
                    }
                    if cfg["dpnet"]:
                        for k, v in _dpnet_routes(trajs, lw, seed, weighted).items():
                            fits["DPNet", k] = v
                for (features, route), ts in fits.items():
                    found.setdefault((features, route, weighted), []).append(ts)
        for (features, route, weighted), values in found.items():
            ts = float(np.mean(values))
            results["rows"].append(
                {
                    "bias": bias,
                    "route": route,
                    "features": features,
                    "weighted": weighted,
                    "timescale": ts,
                    "error": ts / exact - 1.0,
                }
            )
        results["rows"].append(
            {
                "bias": bias,
                "route": "transfer",
                "features": "time-rescaling limit (grid)",
                "weighted": True,
                "timescale": rescaled_limit(bias),
                "error": rescaled_limit(bias) / exact - 1.0,
            }
        )
    results["seconds"] = time.perf_counter() - t0
    results["provenance"] = provenance()
    rows = [
        [
            r["bias"],
            _ROUTES[r["route"]],
            r["features"],
            "yes" if r["weighted"] else "no",
            f"{r['timescale']:.2f}",
            f"{100 * r['error']:+.1f}%",
        ]
        for r in results["rows"]
    ]
    table = (
        f"Exact slowest timescale (unbiased generator, grid): {exact:.2f} time units.\n\n"
        + markdown_table(["bias", "route", "features", "weights", "timescale", "error"], rows)
    )
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (out / "table.md").write_text(table + "\n")
    return table
