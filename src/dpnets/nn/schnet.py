"""SchNet encoder for molecular trajectories (paper Sec. 5 and App. F, "Chignolin").

:class:`SchNetEncoder` maps a batch of conformations of one molecule, positions of shape
``(B, n_atoms, 3)``, to ``(B, r)`` features: torch-geometric's
:class:`~torch_geometric.nn.models.SchNet` message passing (continuous-filter convolutions on
the radius graph, Gaussian radial basis) followed by a per-atom head and a mean over the atoms.
The molecule's atomic numbers are held as a buffer, so a trajectory array
``(T, n_atoms, 3)`` is directly a :meth:`dpnets.DPNet.fit` input::

    enc = SchNetEncoder(atomic_numbers=[6, 6, 8, 7, 6, 6, 6, 8, 7, 6], out_dim=16)
    model = DPNet(enc, objective="relaxed", lag=10).fit(positions)   # positions: (T, 10, 3)

Units: the ``cutoff`` (and the Gaussian grid ``[0, cutoff]``) is in the unit of the positions;
the defaults assume **Ångström** (5 Å, paper App. F). Features are invariant to rotations,
translations, and to any permutation of the atoms applied to the positions and the atomic
numbers alike (distances only; note that they are also invariant to reflections, so
enantiomers are not distinguished).

The radius graph is built in plain torch (``torch.cdist`` within each molecule of the batch),
passed to SchNet as ``interaction_graph=`` so that neither ``torch-cluster`` nor ``pyg-lib``
is needed; the batch vector is ``arange(B).repeat_interleave(n_atoms)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from dpnets.nn.registry import register

__all__ = ["SchNetEncoder", "DenseRadiusGraph"]

_PYG_HINT = (
    "SchNetEncoder needs torch-geometric: pip install 'dpnets[molecules]' "
    "(or pip install torch-geometric)."
)


class DenseRadiusGraph(nn.Module):
    """Radius graph of equally sized molecules, in plain torch.

    Called by SchNet as ``graph(pos, batch)`` with ``pos`` of shape ``(B * n_atoms, 3)``
    ordered molecule by molecule; returns ``(edge_index, edge_weight)``: all ordered pairs
    ``i != j`` of the same molecule with ``|x_i - x_j| < cutoff``, and their distances.
    """

    def __init__(self, cutoff: float, n_atoms: int):
        super().__init__()
        self.cutoff = float(cutoff)
        self.n_atoms = int(n_atoms)

    def forward(self, pos: torch.Tensor, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.n_atoms
        x = pos.reshape(-1, n, 3)
        with torch.no_grad():
            d = torch.cdist(x, x)
            eye = torch.eye(n, dtype=torch.bool, device=pos.device)
            mask = (d < self.cutoff) & ~eye
            b, i, j = mask.nonzero(as_tuple=True)
        row, col = b * n + i, b * n + j
        weight = (pos[row] - pos[col]).norm(dim=-1)
        return torch.stack([row, col]), weight


@register
class SchNetEncoder(nn.Module):
    """SchNet features of the conformations of one molecule.

    Parameters
    ----------
    atomic_numbers : sequence of int
        Atomic numbers of the ``n_atoms`` atoms, in the order of the positions' second axis.
    out_dim : int, default 16
        Number of output features ``r``.
    hidden_channels : int, default 64
        Width of the atomic representations (paper: 64).
    num_filters : int, default 64
        Width of the continuous filters.
    num_interactions : int, default 3
        Interaction blocks (paper: 3).
    num_gaussians : int, default 20
        Radial basis functions on ``[0, cutoff]`` (paper: 20).
    cutoff : float, default 5.0
        Radius of the interaction graph, in the unit of the positions (Å by default; the
        paper uses 5 Å).

    Notes
    -----
    Per atom, the last hidden state goes through SchNet's output head (linear, shifted
    softplus, linear to ``out_dim``) and the result is averaged over the atoms (the paper's
    "linear layer, then averaging"). Input: float tensors ``(B, n_atoms, 3)``; output
    ``(B, out_dim)``.
    """

    #: not standardised by DPNet(standardize="auto"):
    #: positions in Å: distances and the cutoff are physical
    standardize_inputs = False

    def __init__(
        self,
        atomic_numbers: Sequence[int],
        out_dim: int = 16,
        hidden_channels: int = 64,
        num_filters: int = 64,
        num_interactions: int = 3,
        num_gaussians: int = 20,
        cutoff: float = 5.0,
    ):
        super().__init__()
        try:
            from torch_geometric.nn.models import SchNet
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(_PYG_HINT) from exc
        z = [int(v) for v in atomic_numbers]
        if not z or min(z) < 1 or max(z) > 99:
            raise ValueError("atomic_numbers must be a non-empty list of integers in [1, 99].")
        for name, v in (
            ("out_dim", out_dim),
            ("hidden_channels", hidden_channels),
            ("num_filters", num_filters),
            ("num_interactions", num_interactions),
            ("num_gaussians", num_gaussians),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}.")
        if hidden_channels < 2:
            raise ValueError("hidden_channels must be >= 2.")
        if not (float(cutoff) > 0 and math.isfinite(float(cutoff))):
            raise ValueError(f"cutoff must be a positive number, got {cutoff!r}.")
        self.config = {
            "atomic_numbers": z,
            "out_dim": int(out_dim),
            "hidden_channels": int(hidden_channels),
            "num_filters": int(num_filters),
            "num_interactions": int(num_interactions),
            "num_gaussians": int(num_gaussians),
            "cutoff": float(cutoff),
        }
        self.n_atoms = len(z)
        self.out_dim = int(out_dim)
        self.register_buffer("atomic_numbers", torch.tensor(z, dtype=torch.long))
        self.schnet = SchNet(
            hidden_channels=hidden_channels,
            num_filters=num_filters,
            num_interactions=num_interactions,
            num_gaussians=num_gaussians,
            cutoff=float(cutoff),
            interaction_graph=DenseRadiusGraph(cutoff, len(z)),
            readout="mean",
        )
        # Per-atom head to ``out_dim`` features instead of SchNet's scalar energy.
        self.schnet.lin2 = nn.Linear(hidden_channels // 2, out_dim)
        nn.init.xavier_uniform_(self.schnet.lin2.weight)
        nn.init.zeros_(self.schnet.lin2.bias)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """Features ``(B, out_dim)`` of positions ``(B, n_atoms, 3)`` (or ``(n_atoms, 3)``)."""
        single = positions.dim() == 2
        if single:
            positions = positions.unsqueeze(0)
        if positions.dim() != 3 or positions.shape[1:] != (self.n_atoms, 3):
            raise ValueError(
                f"expected positions of shape (B, {self.n_atoms}, 3), got {tuple(positions.shape)}."
            )
        bsz = positions.shape[0]
        pos = positions.reshape(bsz * self.n_atoms, 3)
        z = self.atomic_numbers.repeat(bsz)
        batch = torch.arange(bsz, device=pos.device).repeat_interleave(self.n_atoms)
        out = self.schnet(z, pos, batch)
        return out[0] if single else out
