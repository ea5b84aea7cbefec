"""Multi-layer perceptron encoder."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from dpnets.nn.registry import register

__all__ = ["MLP", "ProjectedMLP", "ACTIVATIONS", "DEFAULT_WIDTHS", "default_mlp"]

#: Hidden widths of the library's default encoder (``DPNet(encoder=None)``, the autoencoders'
#: defaults, ``dpnets fit`` and ``dpnets demo``): those of the out-of-the-box benchmark
#: (``benchmarks/bench_out_of_box.py``).
DEFAULT_WIDTHS = (64, 64)

#: Activation names accepted by :class:`MLP`.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "leaky_relu": nn.LeakyReLU,
    "celu": nn.CELU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "softplus": nn.Softplus,
}


@register
class MLP(nn.Module):
    """Fully connected encoder ``R^in_dim -> R^out_dim``.

    Inputs of shape ``(batch, *state_shape)`` are flattened to ``(batch, in_dim)``.

    Parameters
    ----------
    in_dim : int
        Flattened state dimension.
    hidden : sequence of int
        Widths of the hidden layers, e.g. ``(64, 128, 64)``.
    out_dim : int
        Feature dimension ``r``.
    activation : str, default "leaky_relu"
        One of :data:`ACTIVATIONS`.
    bias : bool, default True
        Use biases (the constant function can then be represented, which the projection
        score rewards).
    layer_norm : bool, default False
        Insert a LayerNorm after each hidden linear layer.
    """

    standardize_inputs = True  # its first operation is a Linear layer

    def __init__(
        self,
        in_dim: int,
        hidden: Sequence[int] = (64, 64),
        out_dim: int = 8,
        activation: str = "leaky_relu",
        bias: bool = True,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}; expected one of {', '.join(ACTIVATIONS)}"
            )
        if in_dim < 1 or out_dim < 1 or any(h < 1 for h in hidden):
            raise ValueError("in_dim, hidden widths and out_dim must be positive")
        self.config = {
            "in_dim": int(in_dim),
            "hidden": [int(h) for h in hidden],
            "out_dim": int(out_dim),
            "activation": activation,
            "bias": bool(bias),
            "layer_norm": bool(layer_norm),
        }
        layers: list[nn.Module] = []
        width = int(in_dim)
        for h in hidden:
            layers.append(nn.Linear(width, int(h), bias=bias))
            if layer_norm:
                layers.append(nn.LayerNorm(int(h)))
            layers.append(ACTIVATIONS[activation]())
            width = int(h)
        layers.append(nn.Linear(width, int(out_dim), bias=bias))
        self.net = nn.Sequential(*layers)
        self.in_dim = int(in_dim)
        self.out_dim = int(out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3 and x.shape[2] == self.in_dim and x.shape[1] != 1:
            # states (T, d) whose last axis is the input: trajectories stacked in one 3-D
            # array (n_traj, T, d), read as n_traj frames of shape (T, d) (TorchScript-safe)
            t, d = x.shape[1], x.shape[2]
            raise ValueError(
                f"MLP expects {self.in_dim} input features, got {t * d} (states of shape "
                f"({t}, {d}): a stack of trajectories (n_traj, T, d)? pass list(X))"
            )
        x = x.reshape(x.shape[0], -1)
        if x.shape[1] != self.in_dim:
            raise ValueError(f"MLP expects {self.in_dim} input features, got {x.shape[1]}")
        return self.net(x)


def default_mlp(in_dim: int, out_dim: int) -> MLP:
    """The library's default MLP: ``in_dim -> 64 -> 64 -> out_dim`` with CELU activations
    (smooth, so generator objectives can differentiate it twice)."""
    return MLP(in_dim, DEFAULT_WIDTHS, out_dim, activation="celu")


@register
class ProjectedMLP(nn.Module):
    """An :class:`MLP` behind a fixed linear pre-projection ``z = W x + b`` of the flattened
    inputs onto ``n_components`` coordinates: the TICA (or VAMP) pre-projection that turns
    thousands of input features (a protein's torsions or contacts) into tens before the
    network, as deeptime and PyEMMA users do first (``dpnets fit --preproject tica:N``).

    ``W`` and ``b`` are buffers, set by :meth:`set_projection` and never trained; they are
    saved with the model, kept when a fit re-draws the network's initial weights from its
    seed (:data:`fixed_buffers`), and exported with it. The inputs are not standardised by
    :class:`dpnets.DPNet` (``standardize_inputs = False``): the projection centres them, and
    TICA's components have unit variance.

    Parameters
    ----------
    in_dim : int
        Flattened state dimension.
    n_components : int
        Dimension after the projection.
    hidden, out_dim, activation
        As :class:`MLP`'s, for the network on the projected coordinates.
    """

    standardize_inputs = False  # the projection centres its inputs itself
    fixed_buffers = ("weight", "bias")  # kept when a seed re-draws the initial weights

    def __init__(
        self,
        in_dim: int,
        n_components: int,
        hidden: Sequence[int] = DEFAULT_WIDTHS,
        out_dim: int = 8,
        activation: str = "celu",
    ) -> None:
        super().__init__()
        if not 1 <= int(n_components) <= int(in_dim):
            raise ValueError(
                f"n_components must be between 1 and in_dim={in_dim}, got {n_components}"
            )
        self.config = {
            "in_dim": int(in_dim),
            "n_components": int(n_components),
            "hidden": [int(h) for h in hidden],
            "out_dim": int(out_dim),
            "activation": activation,
        }
        self.in_dim, self.n_components = int(in_dim), int(n_components)
        self.register_buffer("weight", torch.zeros(int(n_components), int(in_dim)))
        self.register_buffer("bias", torch.zeros(int(n_components)))
        self.mlp = MLP(int(n_components), hidden, out_dim, activation=activation)

    def set_projection(self, weight: torch.Tensor, bias: torch.Tensor) -> ProjectedMLP:
        """Set ``W`` ``(n_components, in_dim)`` and ``b`` ``(n_components,)``; returns self."""
        weight = torch.as_tensor(weight, dtype=self.weight.dtype)
        bias = torch.as_tensor(bias, dtype=self.bias.dtype)
        if weight.shape != self.weight.shape or bias.shape != self.bias.shape:
            raise ValueError(
                f"projection of shape {tuple(weight.shape)} and {tuple(bias.shape)}; expected "
                f"{tuple(self.weight.shape)} and {tuple(self.bias.shape)}"
            )
        with torch.no_grad():
            self.weight.copy_(weight)
            self.bias.copy_(bias)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], -1)
        return self.mlp(x @ self.weight.t() + self.bias)
