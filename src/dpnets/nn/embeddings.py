"""Input embeddings for periodic state spaces, and an MLP on top of them.

States living on a circle (an angle, or ``x`` in ``[0, period)`` with ``0 ~ period``, like the
noisy logistic map of the paper, Sec. 5 and App. F.1) are best fed to a network through
``[sin(2 pi k x / period), cos(2 pi k x / period)]``: the features are then continuous
across the identification ``0 ~ period``. The authors' code for Table 1 does exactly this
with ``k = 1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from dpnets.nn.mlp import ACTIVATIONS
from dpnets.nn.registry import register

__all__ = ["FourierEmbedding", "PeriodicMLP"]


@register
class FourierEmbedding(nn.Module):
    r"""Parameter-free embedding ``x -> [sin(2 pi k x / p), cos(2 pi k x / p)]_{k=1..K}``.

    Parameters
    ----------
    in_dim : int, default 1
        Flattened state dimension; each coordinate is embedded separately.
    n_harmonics : int, default 1
        Number ``K`` of harmonics.
    period : float, default 1.0
        Period ``p`` of each coordinate.

    Notes
    -----
    Inputs ``(batch, *state_shape)`` are flattened to ``(batch, in_dim)``; the output has
    ``2 * K * in_dim`` columns, ordered ``[sin(k=1), ..., sin(k=K), cos(k=1), ..., cos(k=K)]``
    (each block of width ``in_dim``), so that ``K = 1`` gives ``[sin 2 pi x, cos 2 pi x]``.
    """

    #: not standardised by DPNet(standardize="auto"):
    #: periodic states: the period is in raw units
    standardize_inputs = False

    def __init__(self, in_dim: int = 1, n_harmonics: int = 1, period: float = 1.0) -> None:
        super().__init__()
        if int(in_dim) < 1 or int(n_harmonics) < 1:
            raise ValueError("in_dim and n_harmonics must be positive")
        if not (math.isfinite(period) and period > 0):
            raise ValueError(f"period must be a positive finite number, got {period}")
        self.config = {
            "in_dim": int(in_dim),
            "n_harmonics": int(n_harmonics),
            "period": float(period),
        }
        self.in_dim = int(in_dim)
        self.out_dim = 2 * int(n_harmonics) * int(in_dim)
        self.scale = 2.0 * math.pi / float(period)
        # integer harmonics, cast to the input dtype in forward (float64 inputs stay exact)
        self.register_buffer("harmonics", torch.arange(1, int(n_harmonics) + 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        if x.shape[1] != self.in_dim:
            raise ValueError(f"FourierEmbedding expects {self.in_dim} inputs, got {x.shape[1]}")
        k = self.harmonics.to(x.dtype)[None, :, None]
        angles = (self.scale * x[:, None, :] * k).reshape(x.shape[0], -1)
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


@register
class PeriodicMLP(nn.Module):
    """MLP on a :class:`FourierEmbedding` of periodic states.

    With the defaults below plus ``hidden=(64, 128, 64)``, ``hidden_bias=False``,
    ``init="paper"`` it is the encoder of the authors' logistic-map code (paper App. F.1):
    ``[sin 2 pi x, cos 2 pi x] -> Linear(64) -> LeakyReLU -> Linear(128) -> LeakyReLU ->
    Linear(64) -> LeakyReLU -> Linear(r)``, bias only in the last layer.

    Parameters
    ----------
    in_dim : int, default 1
        Flattened state dimension.
    hidden : sequence of int, default (64, 128, 64)
        Hidden widths.
    out_dim : int, default 7
        Feature dimension ``r``.
    activation : str, default "leaky_relu"
        One of :data:`dpnets.nn.ACTIVATIONS`.
    n_harmonics, period
        Passed to :class:`FourierEmbedding`.
    hidden_bias : bool, default True
        Biases in the hidden layers (the output layer always has one).
    init : {"torch", "paper"}, default "torch"
        ``"torch"`` keeps PyTorch's default initialisation; ``"paper"`` reproduces the
        authors' one: first layer ``U(-1, 1)``, the others Kaiming-uniform with gain 1
        (``U(-sqrt(3 / fan_in), sqrt(3 / fan_in))``), zero biases. Draws from torch's global
        RNG, so seed it with ``torch.manual_seed`` before construction.
    """

    #: not standardised by DPNet(standardize="auto"):
    #: periodic states: the period is in raw units
    standardize_inputs = False

    def __init__(
        self,
        in_dim: int = 1,
        hidden: Sequence[int] = (64, 128, 64),
        out_dim: int = 7,
        activation: str = "leaky_relu",
        n_harmonics: int = 1,
        period: float = 1.0,
        hidden_bias: bool = True,
        init: str = "torch",
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}; expected one of {', '.join(ACTIVATIONS)}"
            )
        if init not in ("torch", "paper"):
            raise ValueError(f"init must be 'torch' or 'paper', got {init!r}")
        if int(out_dim) < 1 or any(int(h) < 1 for h in hidden):
            raise ValueError("hidden widths and out_dim must be positive")
        self.config = {
            "in_dim": int(in_dim),
            "hidden": [int(h) for h in hidden],
            "out_dim": int(out_dim),
            "activation": activation,
            "n_harmonics": int(n_harmonics),
            "period": float(period),
            "hidden_bias": bool(hidden_bias),
            "init": init,
        }
        self.embedding = FourierEmbedding(in_dim, n_harmonics, period)
        layers: list[nn.Module] = []
        width = self.embedding.out_dim
        linears: list[nn.Linear] = []
        for h in hidden:
            linears.append(nn.Linear(width, int(h), bias=hidden_bias))
            layers += [linears[-1], ACTIVATIONS[activation]()]
            width = int(h)
        linears.append(nn.Linear(width, int(out_dim), bias=True))
        layers.append(linears[-1])
        self.net = nn.Sequential(*layers)
        self.out_dim = int(out_dim)
        if init == "paper":
            with torch.no_grad():
                for k, lin in enumerate(linears):
                    if k == 0:
                        nn.init.uniform_(lin.weight, -1.0, 1.0)
                    else:
                        nn.init.kaiming_uniform_(lin.weight, a=1.0, nonlinearity="leaky_relu")
                    if lin.bias is not None:
                        nn.init.zeros_(lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.embedding(x))
