"""dpnets: Deep Projection Networks for dynamical systems (Kostic et al., ICLR 2024).

Pipeline: data -> learned features (:class:`DPNet`) -> operator regression
(:class:`TransferOperator`) -> eigenvalues, eigenfunctions, timescales, forecasts.
"""

from dpnets import nn, scores
from dpnets.exceptions import NotFittedError
from dpnets.export import export
from dpnets.generator import Generator
from dpnets.io import load
from dpnets.operators import TransferOperator
from dpnets.representation import DPNet

__version__ = "0.1.0"

__all__ = [
    "DPNet",
    "TransferOperator",
    "Generator",
    "NotFittedError",
    "load",
    "export",
    "nn",
    "scores",
    "__version__",
]

from dpnets import baselines  # noqa: E402,F401  (registers the baseline kinds for load)
