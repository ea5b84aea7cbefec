"""Learned slow modes as collective variables: a fitted model's eigenfunctions as one
self-contained TorchScript file for the simulation engines.

:func:`export` writes the right eigenfunctions ``phi_i(x) = psi(x)^T r_i`` of a fitted
model (paper Eq. 16; normalised exactly as :meth:`SpectralModel.eigenfunctions` reports
them; a complex mode is refused by name, or written as its real and imaginary parts on
request) as a TorchScript module computed from the model's raw inputs: the input
standardisation of a DPNet (folded into the encoder's first linear layer where it is one),
the encoder, and the operator's feature basis (the constant prepended and the features
centred and scaled, as :class:`dpnets.TransferOperator` does with ``constant="auto"``) with
the chosen columns of the right eigenvectors, folded into one affine map. The file is
checked against the model computed in float64 on example states, relative to the CV's range
over them, and computes in float64 where float32 does not agree. Loading it needs torch
only (``torch.jit.load`` in Python, ``torch::jit::load`` in C++: PLUMED's ``PYTORCH_MODEL``
and OpenMM-Torch), and it is differentiable with respect to its inputs, so an engine gets
the biasing forces by backpropagation. Every check that does not depend on the values
happens here, at export time: the file's ``forward`` is the computation after one check of
its input's shape (an engine passing more atoms than the topology it was exported for is
told so, not given the CV of shifted atoms).

Input maps put the engine's quantities in front of the model: :class:`TorsionInputs`
(torsions in radians, PLUMED's ``TORSION``), :class:`PositionTorsions`,
:class:`PositionDistances`, :class:`PositionCartesian` (superposed on a reference) and
:class:`AtomSelection` (the engine's positions, with periodic images when a box is passed;
the geometry's gradient attached in closed form, so an engine's backward pass stays short).
The first three are fused with the encoder's first ``Linear`` layer where it has one (the
default MLP): the features, their Jacobian and the layer's response to the atoms are
computed without autograd, and the file's autograd graph is one gather of the atoms and one
product before the rest of the network.
:mod:`dpnets.engines` exports ``dpnets fit`` folders for an engine's topology and writes the
engine recipes.
"""

from __future__ import annotations

import copy
import io as _stdio
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from dpnets.base import BaseEstimator
from dpnets.exceptions import check_is_fitted
from dpnets.io import atomic_write
from dpnets.operators import TransferOperator
from dpnets.spectral import SpectralModel

__all__ = [
    "ExportError",
    "export",
    "parse_modes",
    "read_metadata",
    "minimum_image",
    "TorsionInputs",
    "PositionTorsions",
    "PositionDistances",
    "AtomSelection",
    "PositionCartesian",
    "METADATA_FILE",
    "Remedies",
    "PYTHON_REMEDIES",
    "CLI_REMEDIES",
    "FLOAT32_TOLERANCE",
    "FLOAT64_TOLERANCE",
    "MIN_RANGE",
]

#: name of the JSON metadata stored in the TorchScript file (``_extra_files``)
METADATA_FILE = "dpnets.json"
_FORMAT = "dpnets-cv/1"
_DTYPES = {torch.float32: "float32", torch.float64: "float64"}


class ExportError(ValueError):
    """A model or fit folder that cannot be exported, with the reason (a ``ValueError``: the
    command line prints its one-line message and exits with status 2)."""


# ------------------------------------------------------------------------------ input maps
# Every input map takes ``(x, box)``: ``x`` a batch of engine inputs, ``box`` the periodic box
# vectors (3, 3) in nm as OpenMM-Torch passes them (rows a, b, c in OpenMM's reduced form: a
# along x, b in the xy plane), or None without periodic boundary conditions.


def minimum_image(d: torch.Tensor, box: torch.Tensor) -> torch.Tensor:
    """Displacements ``d (..., 3)`` reduced to their nearest periodic image in the triclinic
    ``box`` (rows a, b, c; OpenMM's reduced form: ``a = (ax, 0, 0)``, ``b = (bx, by, 0)``)."""
    d = d - box[2] * torch.round(d[..., 2:3] / box[2, 2])
    d = d - box[1] * torch.round(d[..., 1:2] / box[1, 1])
    d = d - box[0] * torch.round(d[..., 0:1] / box[0, 0])
    return d


def _block_counts(
    n_phi: int | None, n_psi: int | None, blocks: Any, n: int | None, what: str
) -> list[int]:
    """The torsion count of each ``[sin, cos]`` block: ``blocks`` (counts, or ``(kind,
    count)`` pairs as ``features.json`` stores them), else ``[n_phi, n_psi]``."""
    if blocks is not None:
        if n_phi is not None or n_psi is not None:
            raise ExportError(f"{what}: give blocks= or n_phi/n_psi, not both")
        counts = [int(b[1]) if isinstance(b, (list, tuple)) else int(b) for b in blocks]
    elif n_phi is None:
        raise ExportError(f"{what}: give n_phi (and n_psi) or blocks=")
    else:
        k = int(n_phi)
        counts = [k, k if n_psi is None else int(n_psi)] if n is None else [k, n - k]
    if not counts or min(counts) < 0 or sum(counts) == 0:
        raise ExportError(f"{what}: blocks must be torsion counts >= 0, got {counts}")
    if n is not None and sum(counts) != n:
        raise ExportError(f"{what}: blocks count {sum(counts)} torsions for {n} quadruplets")
    return counts


def _block_columns(counts: Sequence[int]) -> tuple[list[int], list[int]]:
    """``(torsion, part)`` of each feature column of the ``[sin, cos]`` blocks layout
    (``part`` 0 for sin, 1 for cos): ``[sin k1.., cos k1.., sin k2.., cos k2..]``."""
    torsion, part, start = [], [], 0
    for c in counts:
        block = list(range(start, start + c))
        torsion += block + block
        part += [0] * c + [1] * c
        start += c
    return torsion, part


class TorsionInputs(nn.Module):
    """Raw torsions (radians, as PLUMED's ``TORSION`` and mdtraj compute them) to the
    dihedral features of :func:`dpnets.datasets.read_trajectories`: ``[sin, cos]`` blocks.

    Parameters
    ----------
    n_phi, n_psi : int, optional
        The backbone layout: torsions ``[phi_1..phi_m, psi_1..psi_k]`` (``k = n_psi``,
        default ``m``) to ``[sin phi, cos phi, sin psi, cos psi]``.
    blocks : sequence, optional
        Instead of ``n_phi``/``n_psi``: the torsion count of each kind in input order
        (ints, or the ``(kind, count)`` pairs of a fit folder's ``features.json``), each
        block giving its sines then its cosines (``dpnets fit --torsions``' layout).
    """

    def __init__(
        self, n_phi: int | None = None, n_psi: int | None = None, *, blocks: Any = None
    ) -> None:
        super().__init__()
        counts = _block_counts(n_phi, n_psi, blocks, None, "TorsionInputs")
        self.n_phi = int(counts[0])
        torsion, part = _block_columns(counts)
        # feature j = sin(angle[which[j]] + offset[j]), cos a = sin(a + pi/2): three ops
        self.register_buffer("which", torch.tensor(torsion, dtype=torch.long))
        half = [np.pi / 2 * p for p in part]
        self.register_buffer("offset", torch.tensor(half, dtype=torch.float64))

    def forward(self, angles: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        return torch.sin(angles.index_select(1, self.which) + self.offset.to(angles.dtype))


def _image_rows(d: torch.Tensor, box: torch.Tensor) -> torch.Tensor:
    """:func:`minimum_image` of displacements laid out ``(..., 3, m)`` (x, y, z rows)."""
    d = d - box[2].view(3, 1) * torch.round(d[..., 2:3, :] / box[2, 2])
    d = d - box[1].view(3, 1) * torch.round(d[..., 1:2, :] / box[1, 1])
    d = d - box[0].view(3, 1) * torch.round(d[..., 0:1, :] / box[0, 0])
    return d


def _take_index(flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Indices into ``x`` (a batch) for :func:`torch.take` of the per-state indices ``flat
    (1, ...)``: a single state's as they are, a batch's offset by each state's start (one
    gather, no view in the autograd graph)."""
    B = x.shape[0]
    if B == 1:
        return flat
    start = torch.arange(B, device=x.device) * (x.numel() // B)
    return flat + start.view([B] + [1] * (flat.dim() - 1))


def _torsion_normals() -> np.ndarray:
    """``K`` (8, 4) of :class:`PositionTorsions`: from ``w = [cu, a cu, cv, b cv]`` to the
    coefficients of the normals ``n1 = b1 x b2``, ``n2 = b2 x b3`` in the gradient of a
    torsion angle with respect to each of its atoms (rows ``(atom, normal)``), by Blondel
    and Karplus (1996): ``dθ/dx1 = -cu n1``, ``dθ/dx2 = (1 + a) cu n1 + b cv n2``,
    ``dθ/dx3 = -a cu n1 - (1 + b) cv n2``, ``dθ/dx4 = cv n2``, with bonds ``b_k = x_k+1 -
    x_k``, ``cu = |b2| / n1.n1``, ``cv = |b2| / n2.n2``, ``a = b1.b2 / b2.b2``, ``b = b3.b2
    / b2.b2``."""
    K = np.zeros((8, 4))
    cu, acu, cv, bcv = range(4)
    for w, atom, normal, sign in (
        (cu, 0, 0, -1.0),
        (cu, 1, 0, 1.0),
        (acu, 1, 0, 1.0),
        (bcv, 1, 1, 1.0),
        (acu, 2, 0, -1.0),
        (cv, 2, 1, -1.0),
        (bcv, 2, 1, -1.0),
        (cv, 3, 1, 1.0),
    ):
        K[2 * atom + normal, w] += sign
    return K


class PositionTorsions(nn.Module):
    """The engine's positions ``(B, n_atoms, 3)`` (nm) to the dihedral features of
    :func:`dpnets.datasets.read_trajectories` (``[sin, cos]`` blocks) of the torsions
    ``quads``, with mdtraj's (and PLUMED's ``TORSION``) sign convention; bond vectors are
    taken to their nearest periodic image when a box is given.

    The gradient is attached in closed form: each torsion's angle ``θ`` (``atan2``) and its
    gradient ``dθ/dx`` (Blondel and Karplus' formula from seven dot products: no powers,
    one square root) are computed without autograd and joined as ``sin(θ0 + φ) + cos(θ0 +
    φ) dθ/dx . (x - x0)`` (``φ`` 0 for a sine column, π/2 for a cosine; ``x0`` a copy of
    the positions made without autograd, not ``detach()``, which freezing folds away). The
    atoms are gathered once from the flattened positions, laid out ``(atom, xyz, torsion)``
    so that every operation runs along the torsions: the engine's backward pass is a few
    small operations and one scatter, and the cost grows linearly with the torsions.

    Parameters
    ----------
    quads : array of int, shape (m, 4)
        0-based atom indices of the torsions, in the order of the blocks.
    n_phi : int, optional
        The backbone layout: the first ``n_phi`` torsions are phi, the rest psi
        (``[sin phi, cos phi, sin psi, cos psi]``).
    blocks : sequence, optional
        Instead of ``n_phi``: the torsion count of each block (ints, or ``features.json``'s
        ``(kind, count)`` pairs); each block gives its sines, then its cosines.
    """

    def __init__(self, quads: Any, n_phi: int | None = None, *, blocks: Any = None) -> None:
        super().__init__()
        q = np.asarray(quads, dtype=np.int64).reshape(-1, 4)
        self.n = int(q.shape[0])
        counts = _block_counts(n_phi, None, blocks, self.n, "PositionTorsions")
        self.n_phi = int(counts[0])
        torsion, part = _block_columns(counts)  # the feature columns' torsions and phases
        # the torsions' atoms as (atom, xyz, torsion) rows of the flattened positions
        flat = 3 * q.T[:, None, :] + np.arange(3)[None, :, None]
        self.register_buffer("flat", torch.as_tensor(flat.reshape(1, 12, self.n)))
        self.register_buffer("which", torch.tensor(torsion, dtype=torch.long))
        self.register_buffer("phase", torch.tensor(part, dtype=torch.float64) * (np.pi / 2))
        self.register_buffer("normals", torch.tensor(_torsion_normals()))
        # the dot products d = v[left] . v[right] of v = [n1, n2, b1, b2, b3]:
        # [n1.n1, n2.n2, b1.n2, b2.b2, n1.n2, b1.b2, b3.b2]
        self.register_buffer("left", torch.tensor([0, 1, 2, 3, 0, 2, 4], dtype=torch.long))
        self.register_buffer("right", torch.tensor([0, 1, 1, 3, 1, 3, 3], dtype=torch.long))
        # w = d[num] / (|b2| d[den]) = [cu, a cu, cv, b cv]
        self.register_buffer("num", torch.tensor([3, 5, 3, 6], dtype=torch.long))
        self.register_buffer("den", torch.tensor([0, 0, 1, 1], dtype=torch.long))
        # the cross product's cyclic components (local)
        self.register_buffer("cyc1", torch.tensor([1, 2, 0], dtype=torch.long))
        self.register_buffer("cyc2", torch.tensor([2, 0, 1], dtype=torch.long))

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        xs = torch.take(x, _take_index(self.flat, x))  # (B, 12, m): (atom, xyz) rows
        with torch.no_grad():
            x0 = xs.clone()  # not detach(): freezing folds x - x.detach() to 0
            theta, grad = self._angles(x0, box)
            angle = theta.index_select(1, self.which) + self.phase.to(x.dtype)
            slope = torch.cos(angle)
            value = torch.sin(angle)
        dtheta = (grad * (xs - x0)).sum(1)  # zero-valued: the first order
        return value + slope * dtheta.index_select(1, self.which)

    def _angles(
        self, x0: torch.Tensor, box: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(θ (B, m), dθ/dx (B, 12, m))`` of the gathered coordinates ``x0 (B, 12, m)``."""
        B, m = x0.shape[0], self.n
        b = (x0[:, 3:] - x0[:, :9]).view(B, 3, 3, m)  # bonds b1, b2, b3
        if box is not None:
            b = _image_rows(b, box)
        n = torch.linalg.cross(b[:, :2], b[:, 1:], dim=2)  # n1, n2
        v = torch.cat([n, b], 1)
        d = (v.index_select(1, self.left) * v.index_select(1, self.right)).sum(2)
        length = d[:, 3].sqrt()  # |b2|
        theta = torch.atan2(length * d[:, 2], d[:, 4])
        c = d.index_select(1, self.num) / (d.index_select(1, self.den) * length.unsqueeze(1))
        coef = torch.matmul(self.normals.to(x0.dtype), c).view(B, 4, 2, 1, m)
        grad = (coef * n.view(B, 1, 2, 3, m)).sum(2).view(B, 12, m)  # d theta / dx
        return theta, grad

    @torch.jit.export
    def local(self, x: torch.Tensor, box: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f, J)`` of one state ``x (n_atoms, 3)`` without autograd: the features ``f
        (k,)`` and each feature's gradient with respect to its torsion's 12 coordinates,
        ``J (12, k)``, rows those of :meth:`local_index`."""
        m = self.n
        with torch.no_grad():  # as _angles, one state: no batch axis, the cross by hand
            x0 = torch.take(x, self.flat[0])  # (12, m)
            b = (x0[3:] - x0[:9]).view(3, 3, m)  # bonds b1, b2, b3
            if box is not None:
                b = _image_rows(b, box)
            s, t = b[:2], b[1:]
            n = s.index_select(1, self.cyc1) * t.index_select(1, self.cyc2) - s.index_select(
                1, self.cyc2
            ) * t.index_select(1, self.cyc1)  # n1 = b1 x b2, n2 = b2 x b3
            v = torch.cat([n, b], 0)
            d = (v.index_select(0, self.left) * v.index_select(0, self.right)).sum(1)
            length = d[3].sqrt()  # |b2|
            theta = torch.atan2(length * d[2], d[4])
            c = d.index_select(0, self.num) / (d.index_select(0, self.den) * length)
            coef = torch.mm(self.normals.to(x.dtype), c).view(4, 2, 1, m)
            grad = (coef * n.view(1, 2, 3, m)).sum(1).view(12, m)  # d theta / dx
            angle = theta.index_select(0, self.which) + self.phase.to(x.dtype)
            jac = grad.index_select(1, self.which) * torch.cos(angle)
        return torch.sin(angle), jac

    def local_index(self) -> torch.Tensor:
        """The flattened positions' indices ``(12, k)`` of :meth:`local`'s ``J``."""
        return self.flat[0].index_select(1, self.which)


class PositionDistances(nn.Module):
    """The engine's positions ``(B, n_atoms, 3)`` (nm) to the distances of atom ``pairs``
    (``(m, 2)`` 0-based; nearest periodic image when a box is given), as
    ``mdtraj.compute_distances`` and PLUMED's ``DISTANCE`` give them.

    The pairs' atoms are gathered once (:func:`torch.take` of the flattened positions) as
    ``(atom, xyz, pair)`` rows; the unit vectors ``u`` of the displacements are computed
    without autograd and the distance is ``u . x_j - u . x_i`` (plus, with a box, the
    constant ``u . s`` of the image shift ``s``): the value is ``|d|`` and the gradient
    ``±u``, with three nodes (gather, product, sum) in the engine's backward pass."""

    def __init__(self, pairs: Any) -> None:
        super().__init__()
        pr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        self.n = int(pr.shape[0])
        flat = 3 * pr.T[:, None, :] + np.arange(3)[None, :, None]  # (atom, xyz, pair)
        self.register_buffer("flat", torch.as_tensor(flat.reshape(1, 6, self.n)))

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        g = torch.take(x, _take_index(self.flat, x))  # (B, 6, m)
        with torch.no_grad():
            raw = g[:, 3:] - g[:, :3]
            d = raw if box is None else _image_rows(raw, box)
            u = d * torch.rsqrt((d * d).sum(1, keepdim=True))
            w = torch.cat([-u, u], 1)
        f = (w * g).sum(1)
        if box is not None:
            with torch.no_grad():
                shift = (u * (d - raw)).sum(1)
            f = f + shift
        return f

    @torch.jit.export
    def local(self, x: torch.Tensor, box: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(f, J)`` of one state ``x (n_atoms, 3)`` without autograd: the distances ``f
        (m,)`` and their gradients with respect to the pairs' 6 coordinates, ``J (6, m)``
        (``-u``, ``u``), rows those of :meth:`local_index`."""
        with torch.no_grad():
            g = torch.take(x, self.flat[0])  # (6, m)
            raw = g[3:] - g[:3]
            d = raw if box is None else _image_rows(raw, box)
            f = torch.sqrt((d * d).sum(0))  # not vector_norm: slow along the first axis
            u = d / f
        return f, torch.cat([-u, u], 0)

    def local_index(self) -> torch.Tensor:
        """The flattened positions' indices ``(6, m)`` of :meth:`local`'s ``J``."""
        return self.flat[0]


class AtomSelection(nn.Module):
    """All the atoms' positions ``(B, n_all, 3)`` to those of the selected atoms (0-based
    ``indices``, in the order of the training data). With a box, each selected atom is
    moved to its periodic image nearest the first selected one (a molecule smaller than half
    the box comes out whole)."""

    def __init__(self, indices: Sequence[int]) -> None:
        super().__init__()
        self.register_buffer("indices", torch.as_tensor(np.asarray(indices), dtype=torch.long))

    def forward(self, positions: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        p = positions.index_select(1, self.indices)
        if box is not None:
            p = p[:, :1] + minimum_image(p - p[:, :1], box)
        return p


def _horn_matrices() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Constant maps of :class:`PositionCartesian`: ``H`` (9, 16) from the correlation
    ``S[a, b] = sum_i q_ia r_ib`` to Horn's symmetric 4x4 matrix (whose top eigenvector is
    the unit quaternion of the optimal rotation; Horn 1987), ``Q`` (16, 9) from the
    quaternion's outer product to the rotation matrix, and ``E`` (3, 9) with
    ``(R @ E)[a, 3 c + l] = sum_d R[a, d] eps[l, c, d]`` (the rotation's first-order
    response)."""
    xx, xy, xz, yx, yy, yz, zx, zy, zz = range(9)
    N = [  # Horn's N as (row, col, [(sign, S entry)])
        [
            [(1, xx), (1, yy), (1, zz)],
            [(1, yz), (-1, zy)],
            [(1, zx), (-1, xz)],
            [(1, xy), (-1, yx)],
        ],
        [
            [(1, yz), (-1, zy)],
            [(1, xx), (-1, yy), (-1, zz)],
            [(1, xy), (1, yx)],
            [(1, zx), (1, xz)],
        ],
        [
            [(1, zx), (-1, xz)],
            [(1, xy), (1, yx)],
            [(-1, xx), (1, yy), (-1, zz)],
            [(1, yz), (1, zy)],
        ],
        [
            [(1, xy), (-1, yx)],
            [(1, zx), (1, xz)],
            [(1, yz), (1, zy)],
            [(-1, xx), (-1, yy), (1, zz)],
        ],
    ]
    H = np.zeros((9, 16))
    for r in range(4):
        for c in range(4):
            for sign, s in N[r][c]:
                H[s, 4 * r + c] += sign
    R = [  # the rotation of unit quaternion (q0, q1, q2, q3): (sign, i, j) of q_i q_j terms
        [
            [(1, 0, 0), (1, 1, 1), (-1, 2, 2), (-1, 3, 3)],
            [(2, 1, 2), (-2, 0, 3)],
            [(2, 1, 3), (2, 0, 2)],
        ],
        [
            [(2, 1, 2), (2, 0, 3)],
            [(1, 0, 0), (-1, 1, 1), (1, 2, 2), (-1, 3, 3)],
            [(2, 2, 3), (-2, 0, 1)],
        ],
        [
            [(2, 1, 3), (-2, 0, 2)],
            [(2, 2, 3), (2, 0, 1)],
            [(1, 0, 0), (-1, 1, 1), (-1, 2, 2), (1, 3, 3)],
        ],
    ]
    Q = np.zeros((16, 9))
    for a in range(3):
        for b in range(3):
            for sign, i, j in R[a][b]:
                Q[4 * i + j, 3 * a + b] += sign
    eps = np.zeros((3, 3, 3))
    for i, j, k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        eps[i, j, k], eps[i, k, j] = 1.0, -1.0
    E = np.einsum("lcd->dcl", eps).reshape(3, 9)
    return H, Q, E


class PositionCartesian(nn.Module):
    """The engine's positions ``(B, n_atoms, 3)`` (nm) to the Cartesian features of
    ``dpnets fit --features cartesian``: the ``atoms``' coordinates after optimal
    superposition on ``reference``, flattened ``[x1, y1, z1, x2, ...]``, as mdtraj's
    ``superpose`` gives them (centred on the selection's centroid, rotated by the
    least-squares rotation, moved to the reference's centroid).

    The rotation is Horn's quaternion (the top eigenvector of a symmetric 4x4 matrix,
    ``torch.linalg.eigh``), computed without autograd; its first-order response to the atoms
    (``dR = R [w]x``, ``(tr S - S) w = axial(R^T dM - dM^T R)`` with ``M`` the correlation and
    ``S = R^T M``) is attached in closed form, so the gradient is exact and finite without
    an eigendecomposition's backward. The atoms are gathered by one :func:`torch.take` of
    the flattened positions, and the correlation ``M`` is one product of the centred
    coordinates with a constant (3n, 9) matrix, kept in the autograd graph, so the
    rotation's response is ``dM`` times a (9, 3) matrix (not a (3n, 3) one built per call).
    With a box, each atom is first moved to its periodic image nearest the first selected
    one (:class:`AtomSelection`).

    Parameters
    ----------
    atoms : sequence of int
        0-based indices of the selected atoms in the engine's topology (at least 3).
    reference : array, shape (len(atoms), 3)
        The reference positions of those atoms (nm): ``features.json``'s ``reference``.
    """

    def __init__(self, atoms: Sequence[int], reference: Any) -> None:
        super().__init__()
        idx = torch.as_tensor(np.asarray(atoms, dtype=np.int64).reshape(-1))
        ref = np.asarray(reference, dtype=np.float64)
        if ref.shape != (len(idx), 3) or len(idx) < 3:
            raise ExportError(
                f"PositionCartesian: reference has shape {ref.shape}; expected ({len(idx)}, 3) "
                "positions of the selected atoms (at least 3)"
            )
        self.n = int(len(idx))
        flat = 3 * idx.numpy()[:, None] + np.arange(3)  # (atom, xyz)
        self.register_buffer("flat", torch.as_tensor(flat.reshape(1, self.n, 3)))
        centre = ref.mean(0)
        self.register_buffer("centre", torch.tensor(centre))
        # M = sum_i r_i q_i^T (r the centred reference) as q.view(B, 3n) @ corr
        corr = np.zeros((self.n, 3, 3, 3))
        for c in range(3):
            corr[:, c, :, c] = ref - centre  # corr[i, c, b, c] = r_ib
        self.register_buffer("corr", torch.tensor(corr.reshape(3 * self.n, 9)))
        H, Q, E = _horn_matrices()
        perm = [3 * a + b for b in range(3) for a in range(3)]  # H takes S = M^T
        self.register_buffer("horn", torch.tensor(H[perm]))
        self.register_buffer("quat", torch.tensor(Q))
        self.register_buffer("levi", torch.tensor(E))
        self.register_buffer("eye", torch.eye(3, dtype=torch.float64))

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        B = x.shape[0]
        n = self.n
        dt = x.dtype
        p = torch.take(x, _take_index(self.flat, x))  # (B, n, 3)
        if box is not None:
            p = p[:, :1] + minimum_image(p - p[:, :1], box)
        q = p - p.mean(1, keepdim=True)
        m = torch.matmul(q.view(B, 3 * n), self.corr.to(dt))  # M[b, c] = sum_i r_ib q_ic
        with torch.no_grad():
            qd = q.clone()  # not detach(): freezing folds x - x.detach() to 0
            md = m.clone()
            _, vec = torch.linalg.eigh(torch.matmul(md, self.horn.to(dt)).view(B, 4, 4))
            top = vec[:, :, 3]
            rot = torch.matmul(
                (top.unsqueeze(2) * top.unsqueeze(1)).view(B, 16), self.quat.to(dt)
            ).view(B, 3, 3)  # moving -> reference
            sym = torch.matmul(rot.transpose(1, 2), md.view(B, 3, 3))  # R^T M
            trace = sym.diagonal(dim1=1, dim2=2).sum(-1)
            a_inv = torch.linalg.inv(trace.view(B, 1, 1) * self.eye.to(dt) - sym)
            w = torch.matmul(
                torch.matmul(rot, self.levi.to(dt)).view(B, 9, 3), a_inv.transpose(1, 2)
            )  # d omega / d M
        omega = torch.matmul((m - md).view(B, 1, 9), w)  # zero-valued: the first order
        moved = q + torch.linalg.cross(omega.expand(B, n, 3), qd, dim=-1)
        return (torch.matmul(moved, rot.transpose(1, 2)) + self.centre.to(dt)).view(B, 3 * n)


# ------------------------------------------------------------------ the maps fused with a layer
# :func:`export` fuses a positions map with the encoder's first ``Linear`` layer ``h = W f +
# b`` where it can see one (:func:`_fused_first_layer`): the features ``f0``, their Jacobian
# ``J`` and ``W J`` are computed without autograd (products with constant matrices, a
# torsion or a pair a row), and the engine's autograd graph is ``h = h0 + (x_s - x_s0) W J``:
# one gather of the atoms' coordinates ``x_s``, a subtraction of ``x_s0`` (a copy made
# without autograd: not ``detach()``, which freezing folds away) and one matrix product. One
# state's cost is bound by the number of operations (a few microseconds each, about twice
# that for an operation in the graph), so the map's own graph and its backward were most of
# a call.

#: the largest ``coordinates x width`` of the per-call ``W J`` (float entries) for which a
#: torsion or distance map is fused with the layer (a torsion or a pair a row: fast while the
#: per-operation cost dominates); larger ones (a protein's torsions or contacts) keep their
#: own graph laid out along the features, where the arithmetic counts
_FUSED_ENTRIES = 32768


def _torsion_polynomials() -> dict[str, np.ndarray]:
    """Constant maps of :class:`_FusedTorsions` (rows: torsions): ``bonds`` (12, 9) from a
    torsion's 4 atoms to its bonds ``b1, b2, b3``; ``nn = [n1, n1, n2, n2]`` (the normals
    ``n1 = b1 x b2``, ``n2 = b2 x b3``, each twice) as ``(b[cross_l] * b[cross_r]) @
    cross``; the 21 products ``p = v[dot_l] * v[dot_r]`` of ``v = [nn, b]`` that make ``e
    = [n1.n1, n2.n2, b2.b2, b1.n2, n1.n2, b1.b2, b3.b2]`` (``p @ positive``: the first
    three); the monomials of Blondel and Karplus' formula ``exp(log(positive) @
    expo)`` (``r = 1 / (|n1| |n2|)``: ``[r, |b2| r, cu x3, a cu / b1.b2 x3, cv x3, b cv /
    b3.b2 x3]``, ``cu = |b2| / n1.n1``, ``cv = |b2| / n2.n2``) times ``p @ factor + one``
    give ``out = [cos, sin, cu x3, a cu x3, cv x3, b cv x3]``, and ``(out[2:] * nn) @
    normals`` is the angle's gradient with respect to the 12 coordinates (as in
    :func:`_torsion_normals`: ``-cu n1``, ``(1 + a) cu n1 + b cv n2``, ``-a cu n1 - (1 + b)
    cv n2``, ``cv n2``)."""
    bonds = np.zeros((12, 9))
    for k in range(3):
        for c in range(3):
            bonds[3 * (k + 1) + c, 3 * k + c] += 1.0
            bonds[3 * k + c, 3 * k + c] -= 1.0
    cross_l, cross_r, cross = [], [], np.zeros((12, 12))
    for normal, (u, v) in enumerate(((0, 1), (1, 2))):  # n1 = b1 x b2, n2 = b2 x b3
        for a in range(3):
            for sign, i, j in ((1.0, (a + 1) % 3, (a + 2) % 3), (-1.0, (a + 2) % 3, (a + 1) % 3)):
                for copy_ in range(2):
                    cross[len(cross_l), 6 * normal + 3 * copy_ + a] = sign
                cross_l.append(3 * u + i)
                cross_r.append(3 * v + j)
    # v = [n1, n1, n2, n2, b1, b2, b3]: n1 at 0, n2 at 6, b_k at 12 + 3 (k - 1)
    pairs = ((0, 0), (6, 6), (15, 15), (12, 6), (0, 6), (12, 15), (18, 15))
    dot_l, dot_r, dots = [], [], np.zeros((21, 7))
    for j, (u, v) in enumerate(pairs):
        for c in range(3):
            dots[len(dot_l), j] = 1.0
            dot_l.append(u + c)
            dot_r.append(v + c)
    # the monomials' exponents of (n1.n1, n2.n2, b2.b2) for the 14 columns of out
    mono = [
        [-0.5, -0.5, 0.0],  # r
        [-0.5, -0.5, 0.5],  # |b2| r
        *[[-1.0, 0.0, 0.5]] * 3,  # cu = |b2| / n1.n1
        *[[-1.0, 0.0, -0.5]] * 3,  # a cu / b1.b2 = 1 / (|b2| n1.n1)
        *[[0.0, -1.0, 0.5]] * 3,  # cv
        *[[0.0, -1.0, -0.5]] * 3,  # b cv / b3.b2
    ]
    expo = np.array(mono).T  # (3, 14)
    factor = np.zeros((7, 14))  # cos = n1.n2 r, sin = b1.n2 |b2| r, a cu, b cv
    factor[4, 0] = factor[3, 1] = 1.0
    factor[5, 5:8] = factor[6, 11:14] = 1.0
    one = np.zeros(14)
    one[2:5] = one[8:11] = 1.0
    K = _torsion_normals()  # (2 atom + normal, [cu, a cu, cv, b cv])
    normals = np.zeros((12, 12))
    for j, k in enumerate((0, 0, 1, 1)):  # out[2:] * nn: w_j n_k, j's normal k
        for c in range(3):
            for s in range(4):
                normals[3 * j + c, 3 * s + c] = K[2 * s + k, j]
    return {
        "bonds": bonds,
        "cross_l": np.array(cross_l),
        "cross_r": np.array(cross_r),
        "cross": cross,
        "dot_l": np.array(dot_l),
        "dot_r": np.array(dot_r),
        "positive": dots[:, :3].copy(),
        "factor": dots @ factor,
        "expo": expo,
        "one": one,
        "normals": normals,
    }


class _FusedLayer(nn.Module):
    """A positions map fused with a first ``Linear`` layer: ``forward(x, box)`` on a batch
    state by state; ``single`` on one state puts one gather and one product in the graph,
    the layer and its Jacobian ``expand(x0, box)`` (the subclass's) computed without
    autograd. The gathered coordinates are ``take(x, flat)``."""

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        return torch.stack([self.single(x[i], box) for i in range(x.shape[0])])

    @torch.jit.export
    def single(self, x: torch.Tensor, box: torch.Tensor | None) -> torch.Tensor:
        """The layer ``(width,)`` on one state's positions ``x (n_atoms, 3)``."""
        xs = torch.take(x, self.flat)
        with torch.no_grad():
            x0 = xs.clone()  # not detach(): freezing folds x - x.detach() to 0
            h0, wj = self.expand(x0, box)
        return torch.addmv(h0, wj, xs - x0)

    def expand(
        self, x0: torch.Tensor, box: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class _FusedTorsions(_FusedLayer):
    """:class:`PositionTorsions` fused with a first ``Linear`` layer ``(weight, bias)``:
    ``forward(x, box)`` gives ``weight @ features + bias`` with the exact gradient. The
    torsions' sines, cosines and gradients come without autograd from products with
    constant matrices (:func:`_torsion_polynomials`: the bonds, the 12 products of their
    components that make the normals, the 21 that make seven dot products) and one
    ``exp(log(...) @ E)`` for the monomials of Blondel and Karplus' formula: no ``atan2``,
    no per-torsion indexing, a torsion a row."""

    def __init__(
        self,
        quads: np.ndarray,
        columns: tuple[list[int], list[int]],
        weight: torch.Tensor,
        bias: torch.Tensor,
    ) -> None:
        super().__init__()
        q = np.asarray(quads, dtype=np.int64).reshape(-1, 4)
        m, width = int(q.shape[0]), int(weight.shape[0])
        self.m, self.width = m, width
        flat = 3 * q[:, :, None] + np.arange(3)  # (torsion, atom, xyz)
        self.register_buffer("flat", torch.as_tensor(flat.reshape(12 * m)))
        torsion, part = columns  # each feature column's torsion, 0 for a sine, 1 for a cosine
        w = weight.detach().double()
        wsin = torch.zeros(m, width, dtype=torch.float64)
        wcos = torch.zeros(m, width, dtype=torch.float64)
        for j, (t, p) in enumerate(zip(torsion, part, strict=True)):
            (wcos if p else wsin)[t] = w[:, j]
        # the layer's value from [cos_t, sin_t] (columns 2t, 2t + 1); its slope d h / d theta_t
        # = [cos_t, sin_t] @ slope[t] = cos_t wsin_t - sin_t wcos_t
        value = torch.stack([wcos.T, wsin.T], 2).reshape(width, 2 * m)
        self.register_buffer("value", value)
        self.register_buffer("slope", torch.stack([wsin, -wcos], 1))  # (m, 2, width)
        self.register_buffer("bias", bias.detach().double().clone())
        for name, arr in _torsion_polynomials().items():
            self.register_buffer(name, torch.as_tensor(arr))

    @torch.jit.export
    def expand(
        self, x0: torch.Tensor, box: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h, dh/dxs)``: the layer ``(width,)`` and its Jacobian ``(width, 12 m)`` with
        respect to the gathered coordinates ``xs = take(x, flat)``, without autograd."""
        m, H = self.m, self.width
        with torch.no_grad():
            b = torch.mm(x0.view(m, 12), self.bonds)  # (m, 9): b1, b2, b3
            if box is not None:
                b = minimum_image(b.view(m, 3, 3), box).view(m, 9)
            nn_ = torch.mm(
                b.index_select(1, self.cross_l) * b.index_select(1, self.cross_r), self.cross
            )
            v = torch.cat([nn_, b], 1)  # (m, 21): n1, n1, n2, n2, b1, b2, b3
            p = v.index_select(1, self.dot_l) * v.index_select(1, self.dot_r)  # (m, 21)
            mono = torch.exp(torch.mm(torch.log(torch.mm(p, self.positive)), self.expo))
            out = mono * torch.addmm(self.one, p, self.factor)  # cos, sin, cu, a cu, ..
            grad = torch.mm(out.narrow(1, 2, 12) * nn_, self.normals)  # (m, 12): d theta / dx
            cs = out.narrow(1, 0, 2)  # (m, 2): cos, sin
            h0 = torch.addmv(self.bias, self.value, cs.reshape(2 * m))
            g2 = grad.unsqueeze(2) * cs.unsqueeze(1)  # (m, 12, 2)
            wj = torch.bmm(g2, self.slope).view(12 * m, H).t()  # d h / d x
        return h0, wj


class _FusedDistances(_FusedLayer):
    """:class:`PositionDistances` fused with a first ``Linear`` layer ``(weight, bias)``: the
    unit vectors ``u`` of the pairs without autograd, and in the graph the gather, ``u .
    (x_j - x_i)`` (the distance, with gradient ``+-u``) and the layer."""

    def __init__(self, pairs: np.ndarray, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        pr = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        self.m = int(pr.shape[0])
        flat = 3 * pr[:, :, None] + np.arange(3)  # (pair, atom, xyz)
        self.register_buffer("flat", torch.as_tensor(flat.reshape(self.m, 6)))
        self.register_buffer("weight", weight.detach().double().clone())  # (width, m)
        self.register_buffer("bias", bias.detach().double().clone())
        ends = np.concatenate([-np.eye(3), np.eye(3)])  # (6, 3): x_j - x_i
        self.register_buffer("ends", torch.tensor(ends))
        self.register_buffer("spread", torch.tensor(ends.T.copy()))  # u -> [-u, u]

    @torch.jit.export
    def single(self, x: torch.Tensor, box: torch.Tensor | None) -> torch.Tensor:
        """The layer ``(width,)`` on one state's positions ``x (n_atoms, 3)``."""
        xs = torch.take(x, self.flat)  # (m, 6)
        with torch.no_grad():
            raw = torch.mm(xs, self.ends)  # (m, 3)
            d = raw if box is None else minimum_image(raw, box)
            dist = torch.linalg.vector_norm(d, dim=1, keepdim=True)
            w = torch.mm(d / dist, self.spread)  # (m, 6): d dist / d x: -u, u
            shift = dist  # (frozen: the branch not taken goes)
            if box is not None:  # the image shift's u . s
                shift = dist.view(self.m) - (xs * w).sum(1)
        f = (xs * w).sum(1)  # (m,): u . (x_j - x_i), the distance
        if box is not None:
            f = f + shift
        return nn.functional.linear(f, self.weight, self.bias)

    @torch.jit.export
    def expand(
        self, x0: torch.Tensor, box: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h, dh/dxs)``: the layer ``(width,)`` and its Jacobian ``(width, 6 m)`` with
        respect to the gathered coordinates ``xs = take(x, flat)`` ``(m, 6)``, without
        autograd."""
        with torch.no_grad():
            raw = torch.mm(x0, self.ends)  # (m, 3)
            d = raw if box is None else minimum_image(raw, box)
            dist = torch.linalg.vector_norm(d, dim=1)
            w = torch.mm(d / dist.unsqueeze(1), self.spread)  # (m, 6): -u, u
            h0 = torch.addmv(self.bias, self.weight, dist)
            wj = (self.weight.unsqueeze(2) * w.unsqueeze(0)).view(self.weight.shape[0], 6 * self.m)
        return h0, wj


class _FusedCartesian(_FusedLayer):
    """:class:`PositionCartesian` fused with a first ``Linear`` layer ``(weight, bias)``: one
    state at a time (a batch state by state), all without autograd but the final product.
    ``h = sum_i W_i . (R q_i) + b'`` (``q`` the centred atoms, ``R`` from the top
    eigenvector ``t`` of Horn's matrix ``N(M)``); its response to the atoms is ``W_i R`` (the
    rotation fixed) plus the rotation's: ``dt = P dN t`` (``P = sum_k v_k v_k^T / (l_top -
    l_k)`` over the other eigenvectors: the first-order perturbation of a simple
    eigenvector), ``dR`` quadratic in ``t``, ``dM = corr^T dq``, contracted with ``Z = sum_i
    W_i q_i^T``: one ``(9, width)`` matrix, no 3x3 inverse. The coordinates are gathered
    xyz-major (``x`` of every atom, then ``y``, ``z``), so every product is two-dimensional."""

    def __init__(self, cart: PositionCartesian, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        n, width = cart.n, int(weight.shape[0])
        self.n, self.width = n, width
        self.register_buffer("flat", cart.flat.reshape(n, 3).T.reshape(3 * n).clone())
        corr = cart.corr.double().view(n, 3, 9).permute(1, 0, 2).reshape(3 * n, 9)
        self.register_buffer("corr", corr.contiguous())  # rows (xyz, atom)
        horn = cart.horn.double()  # (9, 16): M -> N
        self.register_buffer("horn", horn.clone())
        self.register_buffer("horn_rows", horn.reshape(36, 4).clone())  # (M entry, row of N)
        quat = cart.quat.double()  # (16, 9): t t^T -> R
        self.register_buffer("quat", quat.clone())
        sym = quat.T.reshape(9, 4, 4)
        self.register_buffer("quat_sym", (sym + sym.transpose(1, 2)).reshape(9, 16))
        w = weight.detach().double().view(width, n, 3)
        self.register_buffer("wq", w.permute(0, 2, 1).reshape(3 * width, n))  # (h a, i)
        wc = w - w.mean(1, keepdim=True)  # centred over the atoms: dq = C dx
        self.register_buffer("wr", wc.permute(2, 1, 0).reshape(3, n * width))  # (a, i h)
        shift = w.sum(1) @ cart.centre.double()  # W . (the reference centroid, every atom)
        self.register_buffer("bias", bias.detach().double() + shift)

    @torch.jit.export
    def expand(
        self, x0: torch.Tensor, box: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h, dh/dxs)``: the layer ``(width,)`` and its Jacobian ``(width, 3 n)`` with
        respect to the gathered coordinates ``xs = take(x, flat)``, without autograd."""
        n, H = self.n, self.width
        with torch.no_grad():
            p = x0.view(3, n)
            if box is not None:
                a = p.t()
                p = (a[:1] + minimum_image(a - a[:1], box)).t()
            q = p - p.mean(1, keepdim=True)  # (3, n)
            md = torch.mm(q.reshape(1, 3 * n), self.corr)  # M[b, c] = sum_i r_ib q_ic
            val, vec = torch.linalg.eigh(torch.mm(md, self.horn).view(4, 4))
            top = vec.narrow(1, 3, 1)  # (4, 1)
            rot = torch.mm(torch.mm(top, top.t()).view(1, 16), self.quat)  # (1, 9): R
            z = torch.mm(self.wq, q.t()).view(H, 9)  # sum_i W_i q_i^T
            h0 = torch.addmv(self.bias, z, rot.view(9))
            # d t = P dN t; d <R, Z_h> = 2 dt . sym(Q_h) t
            other = vec.narrow(1, 0, 3)
            gap = val.narrow(0, 3, 1) - val.narrow(0, 0, 3)
            proj = torch.mm(other / gap, other.t())  # (4, 4)
            dn_t = torch.mm(self.horn_rows, top).view(9, 4)  # dN t per M entry
            y = torch.mm(torch.mm(z, self.quat_sym).view(4 * H, 4), top).view(H, 4)
            jm = torch.mm(torch.mm(dn_t, proj), y.t())  # (9, H): d h / d M
            turn = torch.mm(rot.view(3, 3).t(), self.wr).view(3 * n, H)  # W_i R (rows b, i)
            wj = torch.addmm(turn, self.corr, jm).t()
        return h0, wj

    @torch.jit.export
    def layer(
        self, x0: torch.Tensor, box: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(h, q, vec, val)``: the layer ``(width,)`` on the gathered coordinates ``x0``,
        the centred atoms ``q (3, n)`` and the eigenvectors and eigenvalues of Horn's matrix,
        without autograd and without the Jacobian (:meth:`pullback` takes them)."""
        n = self.n
        with torch.no_grad():
            p = x0.view(3, n)
            if box is not None:
                a = p.t()
                p = (a[:1] + minimum_image(a - a[:1], box)).t()
            q = p - p.mean(1, keepdim=True)  # (3, n)
            md = torch.mm(q.reshape(1, 3 * n), self.corr)  # M[b, c] = sum_i r_ib q_ic
            val, vec = torch.linalg.eigh(torch.mm(md, self.horn).view(4, 4))
            top = vec.narrow(1, 3, 1)  # (4, 1)
            rot = torch.mm(torch.mm(top, top.t()).view(1, 16), self.quat).view(3, 3)
            h0 = torch.addmv(self.bias, self.wq.view(self.width, 3 * n), torch.mm(rot, q).view(-1))
        return h0, q, vec, val

    @torch.jit.export
    def pullback(
        self, g: torch.Tensor, q: torch.Tensor, vec: torch.Tensor, val: torch.Tensor
    ) -> torch.Tensor:
        """``g^T dh/dxs`` ``(3 n,)`` for ``g = dCV/dh`` at the state :meth:`layer` gave ``(q,
        vec, val)``: :meth:`expand`'s Jacobian contracted with ``g`` first (``G = W^T g``,
        ``Z_g = G q^T``), so no ``(width, 3 n)`` matrix is formed."""
        n = self.n
        with torch.no_grad():
            top = vec.narrow(1, 3, 1)
            rot = torch.mm(torch.mm(top, top.t()).view(1, 16), self.quat).view(3, 3)
            gw = torch.mv(self.wq.view(self.width, 3 * n).t(), g).view(3, n)  # W^T g: (a, i)
            zg = torch.mm(gw, q.t())  # sum_h g_h Z_h
            yg = torch.mm(torch.mm(zg.view(1, 9), self.quat_sym).view(4, 4), top)  # (4, 1)
            other = vec.narrow(1, 0, 3)
            gap = val.narrow(0, 3, 1) - val.narrow(0, 0, 3)
            proj = torch.mm(other / gap, other.t())  # (4, 4)
            dn_t = torch.mm(self.horn_rows, top).view(9, 4)  # dN t per M entry
            jg = torch.mm(dn_t, torch.mm(proj, yg))  # (9, 1): d(g . h) / d M
            turn = torch.mm(rot.t(), gw - gw.mean(1, keepdim=True))  # R^T G, centred
            out = torch.addmv(turn.view(3 * n), self.corr, jg.view(9))
        return out


def _fused_map(given: nn.Module, weight: torch.Tensor, bias: torch.Tensor) -> nn.Module | None:
    """``given`` (a positions map) fused with the layer ``(weight, bias)`` on its features
    (float64 buffers), or None for another map, a layer of another width, or a torsion or
    distance map whose per-call ``W J`` would exceed :data:`_FUSED_ENTRIES` (it keeps its
    own graph, laid out along the features, and the encoder its first layer)."""
    width = int(weight.shape[0])
    if isinstance(given, PositionTorsions) and weight.shape[1] == 2 * given.n:
        if 12 * given.n * width > _FUSED_ENTRIES:
            return None
        quads = given.flat.reshape(12, given.n)[::3].T.numpy() // 3  # (m, 4) atoms
        part = (given.phase > 0).long().tolist()
        return _FusedTorsions(quads, (given.which.tolist(), part), weight, bias)
    if isinstance(given, PositionDistances) and weight.shape[1] == given.n:
        if 6 * given.n * width > _FUSED_ENTRIES:
            return None
        pairs = given.flat.reshape(6, given.n)[::3].T.numpy() // 3  # (m, 2) atoms
        return _FusedDistances(pairs, weight, bias)
    if isinstance(given, PositionCartesian) and weight.shape[1] == 3 * given.n:
        return _FusedCartesian(given, weight, bias)
    return None


class _NoInputs(nn.Module):
    """The model's own states as the engine inputs."""

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        return x


class _OneArgument(nn.Module):
    """A user's input map ``forward(x)`` in the ``(x, box)`` form (the box is not used)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        return self.module(x)


_INPUT_MAPS = (
    TorsionInputs,
    PositionTorsions,
    PositionDistances,
    AtomSelection,
    PositionCartesian,
    _NoInputs,
)


def _shape_error(shape: Sequence[int], meta: dict[str, Any]) -> str:
    """What a file refuses per call: the inputs it takes, and for an engine's positions, the
    topology they must follow."""
    what = f"this file takes inputs of shape {list(shape)} (one state) or [B, ...] (a batch)"
    top = meta.get("topology")
    if meta.get("engine_inputs", "").startswith("positions") and top:
        what += (
            f": the positions of the {shape[0]} atoms of {top}, in its order; an engine "
            "system with other particles (virtual sites, other solvent) needs the file "
            "exported for its own topology (dpnets export --topology)"
        )
    return what


class _SlowModes(nn.Module):
    """The exported function: engine inputs -> chosen eigenfunctions (real modes, or the
    real and imaginary parts of a complex one as two outputs).

    ``forward(x, box=None)``: ``x`` of shape ``(B, *input_shape)`` gives ``(B, n_outputs)``;
    a single state ``input_shape`` gives ``(n_outputs,)``; ``box`` (3, 3): the periodic box
    vectors (nm) as OpenMM-Torch passes them. The computation runs in the module's dtype and
    the result comes back in the input's (PLUMED feeds float32 to a float64 file). The
    operator's feature basis (the constant, the centring and scaling) and the eigenvectors
    are folded into one affine map at export time; per call, only the input's trailing
    shape is checked (an engine with more atoms than the topology exported for, e.g. water
    virtual sites, shifted every atom index silently).
    """

    def __init__(
        self,
        inputs: nn.Module,
        features: nn.Module,
        weight: torch.Tensor,
        bias: torch.Tensor,
        head: bool,
        input_shape: Sequence[int],
        loop: bool,
        meta: dict[str, Any],
    ) -> None:
        super().__init__()
        self.inputs = inputs
        self.features = features
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)
        self.head = bool(head)  # False: the head is folded into the encoder's last layer
        self.input_shape = [int(d) for d in input_shape]
        self.n_dims = len(self.input_shape)
        self.loop = bool(loop)
        # plain attributes, readable on the loaded module (cv.modes, cv.eigenvalues, ...)
        self.modes = [int(m) for m in meta["modes"]]
        self.outputs = [str(o) for o in meta["outputs"]]
        self.eigenvalues = [float(v[0]) for v in meta["eigenvalues"]]
        self.lag_time = float(meta["lag_time"]) if meta["lag_time"] is not None else -1.0
        self.shape_error = _shape_error(self.input_shape, meta)

    def check(self, x: torch.Tensor) -> None:
        """RuntimeError (naming the inputs the file takes) unless ``x`` is one input or a
        batch of them."""
        if x.shape[x.dim() - self.n_dims :] != self.input_shape or x.dim() > self.n_dims + 1:
            raise RuntimeError(self.shape_error + f"; got inputs of shape {x.shape}")

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        self.check(x)
        dtype = x.dtype if x.is_floating_point() else self.weight.dtype
        x = x.to(self.weight.dtype)
        single = x.dim() == self.n_dims
        if single:
            x = x.unsqueeze(0)
        if box is not None:
            box = box.to(self.weight.dtype)
        z = self.inputs(x, box)
        if self.loop and z.shape[0] > 1:  # a feature map traced on one state
            phi = torch.cat([self.features(z[i : i + 1]) for i in range(z.shape[0])], 0)
        else:
            phi = self.features(z)
        out = torch.addmm(self.bias, phi, self.weight) if self.head else phi
        if single:
            out = out.squeeze(0)
        return out.to(dtype)


class _FusedSlowModes(_SlowModes):
    """:class:`_SlowModes` whose ``inputs`` is a positions map fused with the encoder's
    first layer (:func:`_fused_first_layer`) and whose ``features`` is the rest of the
    encoder: one state ``(n_atoms, 3)`` runs without a batch axis (``inputs.single``), so the
    engine's autograd graph has no reshaping around the network."""

    def __init__(self, *args: Any, hand: _HandChain, reason: str) -> None:
        super().__init__(*args)
        self.hand = hand
        self.reason = reason

    @torch.jit.export
    def forces(
        self, x: torch.Tensor, box: torch.Tensor | None, output: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cv, forces)`` on one state ``x (n_atoms, 3)``: output ``output`` and minus its
        gradient with respect to ``x`` (``(n_atoms, 3)``), both in ``x``'s dtype, computed
        without autograd (the positions map's Jacobian, then back through the encoder's
        layers by hand): OpenMM-Torch's ``setOutputsForces(True)`` form."""
        if not self.hand.available:
            raise RuntimeError(self.reason)
        if x.dim() != self.n_dims:
            raise RuntimeError(self.shape_error + f"; forces take one state, got {x.shape}")
        self.check(x)
        dtype = x.dtype if x.is_floating_point() else self.weight.dtype
        with torch.no_grad():
            x = x.to(self.weight.dtype)
            if box is not None:
                box = box.to(self.weight.dtype)
            xs = torch.take(x, self.inputs.flat)
            h0, wj = self.inputs.expand(xs, box)
            cv, g = self.hand(h0, output)
            flat = self.inputs.flat.reshape(-1)
            grad = torch.zeros(x.numel(), dtype=x.dtype).index_add_(0, flat, torch.mv(wj.t(), g))
        return cv.to(dtype), (-grad).view(x.shape).to(dtype)

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        self.check(x)
        dtype = x.dtype if x.is_floating_point() else self.weight.dtype
        x = x.to(self.weight.dtype)
        if box is not None:
            box = box.to(self.weight.dtype)
        if x.dim() == self.n_dims:
            out = self.features(self.inputs.single(x, box))
            if self.head:
                out = torch.addmv(self.bias, self.weight.t(), out)
            return out.to(dtype)
        out = self.features(self.inputs(x, box))
        if self.head:
            out = torch.addmm(self.bias, out, self.weight)
        return out.to(dtype)


class _LocalSlowModes(_SlowModes):
    """:class:`_SlowModes` whose ``inputs`` is a torsion or distance map too large to fuse
    (:data:`_FUSED_ENTRIES`), with autograd-free forces: the features and their local
    Jacobians (each feature depends on 12 or 6 coordinates, the map's ``local``), the CV's
    gradient with respect to the features through the whole encoder by hand (its first
    ``Linear`` layer included), and one ``index_add_`` into the atoms; no dense ``W J``."""

    def __init__(self, *args: Any, hand: _HandChain, reason: str, index: torch.Tensor) -> None:
        super().__init__(*args)
        self.hand = hand
        self.reason = reason
        self.register_buffer("index", index.reshape(-1).contiguous())

    @torch.jit.export
    def forces(
        self, x: torch.Tensor, box: torch.Tensor | None, output: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cv, forces)`` on one state ``x (n_atoms, 3)``, as
        :meth:`_FusedSlowModes.forces`, without autograd."""
        if not self.hand.available:
            raise RuntimeError(self.reason)
        if x.dim() != self.n_dims:
            raise RuntimeError(self.shape_error + f"; forces take one state, got {x.shape}")
        self.check(x)
        dtype = x.dtype if x.is_floating_point() else self.weight.dtype
        with torch.no_grad():
            x = x.to(self.weight.dtype)
            if box is not None:
                box = box.to(self.weight.dtype)
            f, jac = self.inputs.local(x, box)
            cv, g = self.hand(f, output)
            grad = torch.zeros(x.numel(), dtype=x.dtype).index_add_(
                0, self.index, (jac * g).reshape(-1)
            )
        return cv.to(dtype), (-grad).view(x.shape).to(dtype)


class _CartesianSlowModes(_FusedSlowModes):
    """:class:`_FusedSlowModes` of a Cartesian map whose ``forces`` contract the CV's
    gradient with the map's response in closed form (:meth:`_FusedCartesian.pullback`)
    instead of forming ``W J`` (``(width, 3 n_atoms)``) per call: two products with ``W``
    and a few 3x3 and 4x4 ones, so a protein's atoms cost little more than its encoder."""

    @torch.jit.export
    def forces(
        self, x: torch.Tensor, box: torch.Tensor | None, output: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cv, forces)`` on one state ``x (n_atoms, 3)``, as
        :meth:`_FusedSlowModes.forces`, without autograd."""
        if not self.hand.available:
            raise RuntimeError(self.reason)
        if x.dim() != self.n_dims:
            raise RuntimeError(self.shape_error + f"; forces take one state, got {x.shape}")
        self.check(x)
        dtype = x.dtype if x.is_floating_point() else self.weight.dtype
        with torch.no_grad():
            x = x.to(self.weight.dtype)
            if box is not None:
                box = box.to(self.weight.dtype)
            h0, q, vec, val = self.inputs.layer(torch.take(x, self.inputs.flat), box)
            cv, g = self.hand(h0, output)
            back = self.inputs.pullback(g, q, vec, val)
            flat = self.inputs.flat.reshape(-1)
            grad = torch.zeros(x.numel(), dtype=x.dtype).index_add_(0, flat, back)
        return cv.to(dtype), (-grad).view(x.shape).to(dtype)


def _local_chain(
    given: nn.Module, folded: nn.Module, weight: torch.Tensor, bias: torch.Tensor, head: bool
) -> (
    tuple[torch.Tensor, list[tuple[int, float, float, torch.Tensor, torch.Tensor]], str | None]
    | None
):
    """``(index, steps, reason)`` of :class:`_LocalSlowModes` for a torsion or distance map
    not fused with the encoder (:func:`_fused_first_layer`): the map's local Jacobian's
    indices and the whole encoder (first layer included) as :class:`_HandChain`'s steps; None
    for another map or an encoder not starting with a ``Linear`` layer on the features."""
    if not isinstance(given, (PositionTorsions, PositionDistances)):
        return None
    split = _split_first_linear(folded)
    if split is None:
        return None
    first, rest = split
    k = 2 * given.n if isinstance(given, PositionTorsions) else given.n
    if first.in_features != k:
        return None
    w1 = first.weight.detach().double()
    b1 = torch.zeros(w1.shape[0], dtype=torch.float64) if first.bias is None else first.bias
    steps, reason = _hand_steps(rest, weight, bias, head)
    if reason is None:
        steps = [(_IDENTITY, 0.0, 0.0, w1, b1.detach().double()), *steps]
    return given.local_index(), steps, reason


# the activations whose derivative :class:`_HandChain` writes out, by code
_IDENTITY, _RELU, _LEAKY, _CELU, _ELU, _GELU, _SILU, _TANH, _SOFTPLUS = range(9)


def _activation(
    a: torch.Tensor, code: int, p: float, q: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, dy/da)`` of the activation ``code`` (parameters ``p``, ``q``) at ``a``."""
    if code == 1:  # relu
        return torch.relu(a), (a > 0).to(a.dtype)
    if code == 2:  # leaky_relu, slope p
        pos = a > 0
        return torch.where(pos, a, p * a), torch.where(
            pos, torch.ones_like(a), torch.full_like(a, p)
        )
    if code == 3:  # celu, alpha p
        e = torch.exp(a / p)
        return torch.celu(a, p), torch.where(a > 0, torch.ones_like(a), e)
    if code == 4:  # elu, alpha p
        e = torch.exp(a)
        return torch.where(a > 0, a, p * (e - 1)), torch.where(a > 0, torch.ones_like(a), p * e)
    if code == 5:  # gelu (exact): Phi(a) + a phi(a)
        cdf = 0.5 * (1.0 + torch.erf(a * 0.7071067811865476))
        pdf = torch.exp(-0.5 * a * a) * 0.3989422804014327
        return a * cdf, cdf + a * pdf
    if code == 6:  # silu
        s = torch.sigmoid(a)
        return a * s, s * (1.0 + a * (1.0 - s))
    if code == 7:  # tanh
        t = torch.tanh(a)
        return t, 1.0 - t * t
    if code == 8:  # softplus, beta p, threshold q
        big = a * p > q
        return nn.functional.softplus(a, p, q), torch.where(
            big, torch.ones_like(a), torch.sigmoid(a * p)
        )
    return a, torch.ones_like(a)


class _HandChain(nn.Module):
    """The encoder after its first ``Linear`` layer (and the affine head) as steps ``pre ->
    W act(pre) + b``, with one output's gradient with respect to the first layer's output
    written out (the activations' derivatives, then back through the weights): no autograd.
    ``available`` False (no steps) where the encoder is not such a chain."""

    # evaluated types for TorchScript (the lists are empty when not available)
    __annotations__ = {
        "codes": list[int],
        "p": list[float],
        "q": list[float],
        "weights": list[torch.Tensor],
        "biases": list[torch.Tensor],
    }

    def __init__(self, steps: list[tuple[int, float, float, torch.Tensor, torch.Tensor]]) -> None:
        super().__init__()
        self.available = bool(steps)
        self.codes = [int(st[0]) for st in steps]
        self.p = [float(st[1]) for st in steps]
        self.q = [float(st[2]) for st in steps]
        self.weights = [st[3].contiguous() for st in steps]
        self.biases = [st[4].contiguous() for st in steps]

    def forward(self, h: torch.Tensor, output: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cv, dcv/dh)``: output ``output`` and its gradient with respect to ``h``."""
        n = len(self.weights)
        ds: list[torch.Tensor] = []
        pre = h
        for i in range(n - 1):
            y, d = _activation(pre, self.codes[i], self.p[i], self.q[i])
            ds.append(d)
            pre = torch.addmv(self.biases[i], self.weights[i], y)
        y, d = _activation(pre, self.codes[n - 1], self.p[n - 1], self.q[n - 1])
        w = self.weights[n - 1][output]
        cv = torch.dot(w, y) + self.biases[n - 1][output]
        g = w * d
        for k in range(n - 2, -1, -1):
            g = torch.mv(self.weights[k].t(), g) * ds[k]
        return cv, g


def _hand_code(m: nn.Module) -> tuple[int, float, float] | str:
    """``(code, p, q)`` of an activation :class:`_HandChain` writes out, else the reason."""
    if isinstance(m, nn.ReLU):
        return _RELU, 0.0, 0.0
    if isinstance(m, nn.LeakyReLU):
        return _LEAKY, float(m.negative_slope), 0.0
    if isinstance(m, nn.CELU):
        return _CELU, float(m.alpha), 0.0
    if isinstance(m, nn.ELU):
        return _ELU, float(m.alpha), 0.0
    if isinstance(m, nn.GELU) and m.approximate == "none":
        return _GELU, 0.0, 0.0
    if isinstance(m, nn.SiLU):
        return _SILU, 0.0, 0.0
    if isinstance(m, nn.Tanh):
        return _TANH, 0.0, 0.0
    if isinstance(m, nn.Softplus):
        return _SOFTPLUS, float(m.beta), float(m.threshold)
    if isinstance(m, nn.LayerNorm):
        return "the encoder has a LayerNorm (layer_norm=True)"
    return f"the encoder has a {type(m).__name__}, whose derivative is not written out"


def _hand_steps(
    rest: nn.Module, weight: torch.Tensor, bias: torch.Tensor, head: bool
) -> tuple[list[tuple[int, float, float, torch.Tensor, torch.Tensor]], str | None]:
    """``(steps, reason)``: the encoder after its fused first layer (``rest``) and, with
    ``head``, the affine head ``out @ weight + bias``, as :class:`_HandChain`'s float64
    steps ``(code, p, q, W, b)`` (an activation, then a ``Linear`` layer); no steps and the
    reason where it is not a chain of ``Linear`` layers and supported activations."""
    from dpnets.nn.mlp import MLP

    def flat(m: nn.Module) -> list[nn.Module]:
        if isinstance(m, nn.Sequential):
            return [c for child in m for c in flat(child)]
        if isinstance(m, MLP):
            return flat(m.net)
        return [m]

    steps: list[tuple[int, float, float, torch.Tensor, torch.Tensor]] = []
    act: tuple[int, float, float] | None = None
    for m in flat(rest):
        if isinstance(m, (nn.Identity, nn.Dropout)):  # the file runs in eval mode
            continue
        if isinstance(m, nn.Linear):
            w = m.weight.detach().double()
            b = torch.zeros(w.shape[0], dtype=torch.float64) if m.bias is None else m.bias
            steps.append((*(act or (_IDENTITY, 0.0, 0.0)), w, b.detach().double()))
            act = None
            continue
        code = _hand_code(m)
        if isinstance(code, str):
            return [], code
        if act is not None:
            return [], "the encoder has two activations in a row"
        act = code
    if head:  # the affine head as the last step
        steps.append((*(act or (_IDENTITY, 0.0, 0.0)), weight.T.double(), bias.double()))
    elif act is not None:
        return [], "the encoder ends in an activation, not a Linear layer"
    elif not steps:  # the first layer is the whole encoder, head folded in
        n = int(weight.shape[1])
        eye = torch.eye(n, dtype=torch.float64)
        steps.append((_IDENTITY, 0.0, 0.0, eye, torch.zeros(n, dtype=torch.float64)))
    return steps, None


# ------------------------------------------------------------------------------ the model
def _feature_module(model: Any) -> nn.Module:
    """The model's feature map ``psi`` on raw states as a torch module, or ExportError."""
    from dpnets.generator import Generator

    name = type(model).__name__
    if not isinstance(model, SpectralModel):
        if isinstance(model, BaseEstimator) and hasattr(model, "encoder_"):
            raise ExportError(
                f"a {name} is a feature map without a transfer operator, so it has no "
                f"eigenfunctions: export TransferOperator({name.lower()}).fit(data) (the "
                "model.pt that dpnets fit writes)"
            )
        raise ExportError(
            f"cannot export a {name}: export takes a fitted dpnets model with eigenfunctions "
            "(a TransferOperator on DPNet, VAMPNet or torch features, or a Generator)"
        )
    check_is_fitted(model, "operator_")
    if isinstance(model, (TransferOperator, Generator)):
        f = model.features_
        if f is None:  # linear features (DMD): the flattened state
            return nn.Flatten(1)
        if hasattr(f, "feature_module") and callable(f.feature_module):  # DPNet, VAMPNet
            return _float64_standardisation(f, f.feature_module())
        if isinstance(f, nn.Module):
            return f
        raise ExportError(
            f"cannot export this {name}: its feature map ({type(f).__name__}) is evaluated "
            "in numpy or by an arbitrary Python function, not by a torch module, so its "
            "eigenfunctions cannot be written as TorchScript; fit the operator on a DPNet, "
            "VAMPNet or torch.nn.Module feature map"
        )
    from dpnets.baselines import ConsistentAutoencoder, DynamicAutoencoder

    if isinstance(model, (DynamicAutoencoder, ConsistentAutoencoder)):
        return model.encoder_
    raise ExportError(
        f"cannot export a {name}: its eigenfunctions are not a torch function of the inputs "
        "(kernel models evaluate kernel sums over the training centres in numpy); only "
        "models on torch feature maps export"
    )


def _float64_standardisation(net: Any, module: nn.Module) -> nn.Module:
    """``module`` (a DPNet's ``feature_module()``) with its input standardisation in the
    float64 of the fitted ``input_shift_``/``input_scale_`` (the model standardises in
    float64 before casting to the encoder's dtype; the module's buffers are in the
    encoder's): the values folded into the file and its reference are the model's own."""
    from dpnets.standardize import InputScaler

    shift = getattr(net, "input_shift_", None)
    if not (
        shift is not None
        and isinstance(module, nn.Sequential)
        and len(module) == 2
        and isinstance(module[0], InputScaler)
    ):
        return module
    scaler = InputScaler(
        torch.as_tensor(np.asarray(shift), dtype=torch.float64),
        torch.as_tensor(np.asarray(net.input_scale_), dtype=torch.float64),
    )
    return nn.Sequential(scaler, module[1])


def _check_modes(modes: Any, n: int) -> list[int]:
    def is_int(m: Any) -> bool:
        return isinstance(m, (int, np.integer)) and not isinstance(m, (bool, np.bool_))

    if is_int(modes):
        modes = [modes]
    if isinstance(modes, (str, bytes)) or not hasattr(modes, "__iter__"):
        raise ExportError(f"modes must be an integer or a list of integers, got {modes!r}")
    modes = list(modes)
    if not modes or not all(is_int(m) for m in modes):
        raise ExportError(f"modes must be a non-empty list of integers, got {modes!r}")
    out = [int(m) for m in modes]
    bad = [m for m in out if not 0 <= m < n]
    if bad:
        raise ExportError(
            f"modes {bad} out of range: the model has {n} eigenfunctions, 0 (the constant) "
            f"to {n - 1}"
        )
    if len(set(out)) != len(out):
        raise ExportError(f"modes {out} repeat a mode")
    return out


def parse_modes(text: str) -> list[int]:
    """``"1,2"`` -> ``[1, 2]`` (the ``--modes`` option); ExportError on anything else."""
    try:
        modes = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        modes = []
    if not modes:
        raise ExportError(f"--modes {text!r}: give mode numbers separated by commas, e.g. 1,2")
    return modes


def _first_linear(enc: nn.Module) -> nn.Linear | None:
    """The encoder's first operation when it is a ``Linear`` layer we can see (a Linear, our
    MLP, a Sequential starting with one), else None."""
    from dpnets.nn.mlp import MLP

    if isinstance(enc, nn.Linear):
        return enc
    if isinstance(enc, MLP) and isinstance(enc.net[0], nn.Linear):
        return enc.net[0]
    if isinstance(enc, nn.Sequential) and len(enc) and isinstance(enc[0], nn.Linear):
        return enc[0]
    return None


def _folded(module: nn.Module) -> nn.Module:
    """``module`` with a DPNet's input standardisation folded into the encoder's first
    ``Linear`` layer (``W (x - m) / s + b = (W / s) x + (b - (W / s) m)``, computed in
    float64 and kept in float64, the encoder's copy cast to it: the file's float64 build
    computes the model's own map, its float32 build rounds it once). A copy; the module
    itself when nothing folds."""
    from dpnets.standardize import InputScaler

    if not (
        isinstance(module, nn.Sequential)
        and len(module) == 2
        and isinstance(module[0], InputScaler)
    ):
        return module
    scaler, enc = module[0], module[1]
    first = _first_linear(enc)
    shift, scale = scaler.shift.detach().double(), scaler.scale.detach().double()
    if first is None or shift.dim() != 1 or shift.numel() != first.in_features:
        return module
    enc = copy.deepcopy(enc).double()
    first = _first_linear(enc)
    assert first is not None
    with torch.no_grad():
        w = first.weight.detach().double() / scale
        b = -(w @ shift)
        if first.bias is not None:
            b = b + first.bias.detach().double()
        else:
            first.bias = nn.Parameter(torch.zeros_like(first.weight[:, 0]))
        first.weight.copy_(w)
        first.bias.copy_(b)
    return enc


def _split_first_linear(module: nn.Module) -> tuple[nn.Linear, nn.Module] | None:
    """``(first, rest)`` with ``module(z) == rest(first(z))`` on ``(B, features)`` inputs
    when the module starts with a ``Linear`` layer we can see (a Linear, our MLP, a
    Sequential starting with one; ``rest`` shares their layers), else None."""
    from dpnets.nn.mlp import MLP

    if isinstance(module, nn.Linear):
        return module, nn.Sequential()
    if isinstance(module, MLP):
        layers = list(module.net)
        if isinstance(layers[0], nn.Linear):
            return layers[0], nn.Sequential(*layers[1:])
        return None
    if isinstance(module, nn.Sequential) and len(module):
        head = _split_first_linear(module[0])
        if head is None:
            return None
        return head[0], nn.Sequential(head[1], *list(module)[1:])
    return None


def _last_axis_only(module: nn.Module) -> bool:
    """Whether ``module`` is made only of layers acting on the last axis (Linear, LayerNorm,
    the MLP's activations), so that it runs on one state without a batch axis."""
    from dpnets.nn.mlp import ACTIVATIONS

    layers = (nn.Linear, nn.LayerNorm, nn.Identity, *ACTIVATIONS.values())
    return all(
        isinstance(m, layers) or (isinstance(m, nn.Sequential) and _last_axis_only(m))
        for m in module.children()
    )


def _fused_first_layer(given: nn.Module, folded: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """``(inputs, rest)``: a positions map fused with the encoder's first ``Linear`` layer
    (:func:`_fused_map`: the map's own autograd graph replaced by one product) and the
    encoder after that layer, or None where the map or the encoder does not allow it."""
    split = _split_first_linear(folded)
    if split is None or not isinstance(
        given, (PositionTorsions, PositionDistances, PositionCartesian)
    ):
        return None
    first, rest = split
    if not _last_axis_only(rest):  # one state runs without a batch axis
        return None
    weight = first.weight.detach().double()
    if first.bias is None:
        bias = torch.zeros(weight.shape[0], dtype=torch.float64)
    else:
        bias = first.bias.detach().double()
    fused = _fused_map(given, weight, bias)
    return None if fused is None else (fused, rest)


def _with_head(
    module: nn.Module, weight: torch.Tensor, bias: torch.Tensor
) -> tuple[nn.Module, bool]:
    """``(module, folded)``: the affine head ``psi @ weight + bias`` folded into the last
    ``Linear`` layer of the feature map where it is one we can see (a Linear, our MLP, a
    Sequential ending in one; computed in float64), so the exported forward is the encoder
    alone; else ``(module, False)``."""
    from dpnets.nn.mlp import MLP

    def merged(lin: nn.Linear) -> nn.Linear:
        w_l = lin.weight.detach().double()
        b_l = lin.bias.detach().double() if lin.bias is not None else torch.zeros(w_l.shape[0])
        new = nn.Linear(lin.in_features, weight.shape[1], dtype=torch.float64)
        with torch.no_grad():
            new.weight.copy_(weight.T @ w_l)
            new.bias.copy_(b_l.double() @ weight + bias)
        return new

    def swap(mod: nn.Module) -> nn.Module | None:
        if isinstance(mod, nn.Linear):
            return merged(mod)
        if isinstance(mod, MLP) and isinstance(mod.net[-1], nn.Linear):
            mod.net[len(mod.net) - 1] = merged(mod.net[-1])
            mod.out_dim = int(weight.shape[1])
            return mod
        if isinstance(mod, nn.Sequential) and len(mod):
            last = swap(mod[-1])
            if last is None:
                return None
            mod[len(mod) - 1] = last
            return mod
        return None

    out = swap(copy.deepcopy(module))
    return (module, False) if out is None else (out, True)


def _prepared(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A frozen CPU copy of ``module`` in ``dtype``, in eval mode."""
    module = copy.deepcopy(module).to(device="cpu", dtype=dtype)
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def _compiled(
    features: nn.Module, example: torch.Tensor | None, what: str
) -> tuple[nn.Module, bool]:
    """``(module, loop)``: ``features`` scripted, else traced on one example state."""
    try:
        return torch.jit.script(features), False
    except Exception as err:  # noqa: BLE001 - any scripting failure: trace instead
        reason = " ".join(str(err).split())[:200]
    if example is None:
        raise ExportError(
            f"the feature map ({type(features).__name__}) cannot be compiled by "
            f"torch.jit.script ({reason}); give {what} (one state) so that it is traced"
        )
    one = example[:1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # shape checks become constants: one state a call
        try:
            traced = torch.jit.trace(features, one, check_trace=False)
        except Exception as err:  # noqa: BLE001
            raise ExportError(
                f"the feature map ({type(features).__name__}) can be neither scripted nor "
                f"traced: {' '.join(str(err).split())[:200]}"
            ) from err
    with torch.no_grad():
        ref, got = features(one), traced(one)
    if not torch.allclose(ref, got, rtol=1e-5, atol=1e-6):
        raise ExportError(
            f"the traced feature map ({type(features).__name__}) does not reproduce it on "
            "the example state; it cannot be exported"
        )
    return traced, True


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dpnets")
    except PackageNotFoundError:  # pragma: no cover - a source tree not installed
        return None


# ------------------------------------------------------------------------------ precision
#: the largest difference from the model, as a fraction of the CV's range over the example
#: states, a float32 file may have (else float64 is used, or the export refused)
FLOAT32_TOLERANCE = 1e-4
#: the same for a float64 file (anything larger is a defect of the module, not rounding)
FLOAT64_TOLERANCE = 1e-6
#: the smallest range the differences are judged against: the eigenfunctions have unit norm
#: on the training data, so examples spanning less are too alike to judge by
MIN_RANGE = 1e-2
_EPS32 = float(torch.finfo(torch.float32).eps)


class Remedies(NamedTuple):
    """How :func:`export`'s refusals name their remedies: the Python keywords
    (:data:`PYTHON_REMEDIES`, the default) or the command line's options
    (:data:`CLI_REMEDIES`, passed by ``dpnets export``)."""

    modes: str
    complex_parts: str
    reversible: str
    float64: str
    auto: str


#: the remedies as Python keywords (:func:`export`'s default)
PYTHON_REMEDIES = Remedies(
    "modes=",
    "complex_parts=True",
    "TransferOperator(reversible=True)",
    "dtype=torch.float64",
    "dtype=None",
)
#: the remedies as the command line's options (``dpnets export``)
CLI_REMEDIES = Remedies(
    "--modes",
    "--complex-parts",
    "dpnets fit --reversible",
    "--precision float64",
    "--precision auto",
)


def _eigenvalue(v: complex) -> str:
    v = complex(v)
    return f"{v.real:.5g}" if v.imag == 0 else f"{v.real:.5g}{v.imag:+.5g}i"


def _outputs(
    model: Any, modes: list[int], complex_parts: bool, remedies: Remedies
) -> list[tuple[int, str | None]]:
    """``(mode, part)`` of each output: ``part`` None for a real mode, ``"real"`` and
    ``"imaginary"`` for the two outputs of a complex one (``complex_parts``); a complex mode
    is refused otherwise, naming the remedies."""
    if not isinstance(complex_parts, (bool, np.bool_)):
        raise ExportError(f"complex_parts must be True or False, got {complex_parts!r}")
    lam = np.asarray(model.eigvals_)
    out: list[tuple[int, str | None]] = []
    for m in modes:
        if lam[m].imag == 0:
            out.append((m, None))
            continue
        near = np.abs(lam - np.conj(lam[m])) <= 1e-12 * abs(lam[m])
        partner = [int(k) for k in np.flatnonzero(near) if k != m]
        if not complex_parts:
            pair = f", conjugate of mode {partner[0]}" if partner else ""
            raise ExportError(
                f"mode {m} is complex (eigenvalue {_eigenvalue(lam[m])}{pair}): its real part "
                "alone is not an eigenfunction, and a collective variable must be real; "
                f"refit with {remedies.reversible} for real modes, choose real modes "
                f"({remedies.modes}), or export its real and imaginary parts as two outputs "
                f"({remedies.complex_parts})"
            )
        if partner and partner[0] in modes:
            raise ExportError(
                f"modes {m} and {partner[0]} are a complex-conjugate pair: their real and "
                "imaginary parts are the same two functions; export one of them "
                f"({remedies.complex_parts} gives both parts)"
            )
        out += [(m, "real"), (m, "imaginary")]
    return out


def _output_label(mode: int, part: str | None) -> str:
    return f"mode {mode}" if part is None else f"mode {mode} ({part} part)"


def _description(
    mode: int, part: str | None, lam: complex, timescale: float | None, unit: str | None = None
) -> str:
    """What an output is, in words (the metadata's ``descriptions``, ``plumed.dat``), the
    timescale in ``unit`` when known."""
    ts = "" if timescale is None else f", implied timescale {timescale:.4g}"
    if ts and unit:
        ts += f" {unit}"
    if part is None:
        return f"eigenfunction {mode} (eigenvalue {_eigenvalue(lam)}{ts})"
    return (
        f"{part} part of the complex eigenfunction {mode} (eigenvalue {_eigenvalue(lam)}, "
        f"modulus {abs(lam):.5g}{ts})"
    )


def _metadata(
    model: Any,
    modes: list[int],
    outputs: list[tuple[int, str | None]],
    time_unit: str | None = None,
) -> dict[str, Any]:
    lam = np.asarray(model.eigvals_)[modes]
    dt = getattr(model, "dt", None)
    lag = getattr(model, "lag_", None)
    try:
        ts = model.implied_timescales()
        timescales = [float(ts[m]) if np.isfinite(ts[m]) else None for m in modes]
    except (ValueError, TypeError):
        timescales = [None] * len(modes)
    lag_time = None if lag is None else float(lag) * float(dt if dt is not None else 1.0)
    return {
        "format": _FORMAT,
        "dpnets_version": _version(),
        "model": type(model).__name__,
        "modes": modes,
        "outputs": [_output_label(m, p) for m, p in outputs],
        "descriptions": [
            _description(m, p, complex(lam[modes.index(m)]), timescales[modes.index(m)], time_unit)
            for m, p in outputs
        ],
        "output_modes": [m for m, _ in outputs],
        "output_parts": [p for _, p in outputs],
        "eigenvalues": [[float(v.real), float(v.imag)] for v in lam],
        "timescales": timescales,
        "lag": lag,
        "dt": None if dt is None else float(dt),
        "lag_time": lag_time,
        "normalisation": "unit empirical norm on the training inputs (model.eigenfunctions)",
    }


def export(
    model: Any,
    path: str | os.PathLike,
    modes: Sequence[int] | int = (1,),
    dtype: torch.dtype | None = None,
    *,
    inputs: nn.Module | None = None,
    input_shape: Sequence[int] | None = None,
    input_names: Sequence[str] | None = None,
    example: Any = None,
    metadata: dict[str, Any] | None = None,
    complex_parts: bool = False,
    remedies: Remedies = PYTHON_REMEDIES,
) -> dict[str, Any]:
    """Write a fitted model's slow eigenfunctions as a self-contained TorchScript file.

    The file computes ``phi_i(x) = psi(x)^T r_i`` for the chosen ``modes`` (Eq. 16;
    ``i = 0`` is the constant function) exactly as :meth:`SpectralModel.eigenfunctions`
    reports them, from the raw inputs: input standardisation, encoder, feature basis
    (``[1, (psi - feature_shift_) / feature_scale_]`` when the operator added the
    constant) and the chosen right eigenvectors, the last two folded into one affine map
    (into the encoder's last ``Linear`` layer where it has one). Load it with
    ``torch.jit.load(path)`` (no dpnets needed); ``cv(x)`` maps ``(B, *input_shape)`` to
    ``(B, n_outputs)`` (one state ``input_shape`` to ``(n_outputs,)``), in ``x``'s dtype
    (computed in the file's), and is differentiable with respect to ``x``; ``cv(x, box)``
    passes the periodic box vectors ``(3, 3)`` to the input map (OpenMM-Torch's
    ``boxvectors``). Per call only the input's shape is checked: any other (an engine system
    with more particles than the topology exported for, which torch's gather took silently)
    raises a ``RuntimeError`` naming the shape (and topology) the file takes. Its
    metadata (modes, outputs, eigenvalues, timescales, lag, ``dt``, inputs, precision) are
    the JSON file :data:`METADATA_FILE` inside it (:func:`read_metadata`) and the attributes
    ``cv.modes``, ``cv.outputs``, ``cv.eigenvalues`` (real parts) and ``cv.lag_time``.

    A complex mode (an eigenvalue with a non-zero imaginary part: a non-reversible fit's
    oscillating pair) is refused by name: its real part alone is not an eigenfunction.
    Refit with ``TransferOperator(reversible=True)`` for a real spectrum, choose real
    modes, or pass ``complex_parts=True`` to export its real and imaginary parts as two
    outputs (``cv.node-k`` and ``cv.node-(k+1)`` in PLUMED), which together are the pair's
    two-dimensional invariant subspace.

    Precision: with ``example`` the file is compared with the model's eigenfunctions
    computed in float64 (the model's weights, without the model's own float32 rounding) on
    the example states, and the largest difference is judged as a fraction of the CV's
    range over them (at least :data:`MIN_RANGE`): float32 must agree within
    :data:`FLOAT32_TOLERANCE`, float64 within :data:`FLOAT64_TOLERANCE`. Without
    ``example``, float32's rounding is estimated from the final affine map where it is not
    folded into the encoder's last ``Linear`` layer (features that vary little about large
    means: the cancellation of SchNet's mean read-out), and taken as agreeing elsewhere. The
    default ``dtype=None`` writes float32 where it agrees and float64 otherwise (the
    metadata's ``precision`` says which and why); both run in PLUMED (which feeds float32)
    and OpenMM-Torch (float64 positions), as the file answers in its input's dtype.

    Parameters
    ----------
    model : SpectralModel
        A fitted :class:`dpnets.TransferOperator` (on a DPNet, a VAMPNet, a
        ``torch.nn.Module`` or linear features), a :class:`dpnets.Generator` on such
        features, or a Koopman autoencoder. Models whose feature maps are not torch
        functions (kernel models, numpy dictionaries, Python callables) raise
        :class:`ExportError` with the reason.
    path : path
        The ``.pt`` file to write (atomically: :func:`dpnets.io.atomic_write`).
    modes : int or sequence of int, default (1,)
        Eigenfunctions to export, in the order of :meth:`SpectralModel.eig` (decreasing
        modulus; 1 is the slowest non-constant one when the spectrum is real).
    dtype : None, torch.float32 or torch.float64, default None
        Precision of the exported computation; inputs are cast to it and the result back to
        the input's dtype. None: float32 where it agrees with the model (above), else
        float64. An explicit float32 that does not agree is refused, naming
        ``dtype=torch.float64``.
    inputs : nn.Module, optional
        A map from what the engine gives to the model's states, applied first
        (:class:`TorsionInputs`, :class:`PositionTorsions`, :class:`PositionDistances`,
        :class:`PositionCartesian`, :class:`AtomSelection`, which also take the box; or any
        scriptable module with ``forward(x)``); default: the model's states themselves. The
        three ``Position*`` feature maps are fused with the encoder's first ``Linear`` layer
        where it has one (same values and gradients, fewer operations per call; a protein's
        torsion or contact map, whose per-call ``W J`` would be large, keeps its own graph).
        A file with one of these maps whose encoder is a chain of ``Linear`` layers and the
        activations of :class:`dpnets.nn.MLP` (no ``layer_norm``) also has the method
        ``cv.forces(x, box, output)``: ``(cv, -dcv/dx)`` on one state, computed without
        autograd (a fused map's ``W J``, or an unfused torsion or distance map's features
        and their local Jacobians, 12 or 6 coordinates each, with the gradient through the
        whole encoder by hand and one scatter into the atoms; what
        :func:`dpnets.engines.openmm_torch_cv` with ``forces=True`` wraps for OpenMM-Torch's
        ``setOutputsForces(True)``); the metadata's ``forces`` entry says whether it is
        available and, if not, why.
    input_shape : sequence of int, optional
        Shape of one engine input when ``inputs`` is given (default: the model's state
        shape).
    input_names : sequence of str, optional
        Names of the inputs, for the metadata.
    example : array, optional
        Engine inputs ``(n, *input_shape)`` (a few dozen spread over the data are best) on
        which the file is checked against the model. Needed when the feature map cannot be
        scripted (e.g. SchNet, which is then traced on one state and applied state by
        state).
    metadata : dict, optional
        Extra JSON-serialisable entries for the metadata; its ``time_unit`` (the unit of
        the model's ``dt``, e.g. ``"ps"``) is also written after the timescales of the
        ``descriptions``.
    complex_parts : bool, default False
        Export each complex mode of ``modes`` as two outputs, its real and its imaginary
        part (the two modes of a conjugate pair cannot both be given); False refuses
        complex modes.
    remedies : Remedies, default PYTHON_REMEDIES
        How refusals name their remedies (:data:`CLI_REMEDIES`: the command line's
        options, as ``dpnets export`` passes).

    Returns
    -------
    dict
        The metadata written to the file.

    Raises
    ------
    ExportError
        (a ``ValueError``) for a model that cannot be exported, bad ``modes`` or ``dtype``,
        a complex mode without ``complex_parts``, or a file that does not reproduce the
        model in the precision asked for.
    """
    with warnings.catch_warnings():  # TorchScript is what PLUMED and OpenMM-Torch load
        warnings.filterwarnings("ignore", r".*torch\.jit\.", DeprecationWarning)
        return _export(
            model,
            path,
            modes,
            dtype,
            inputs=inputs,
            input_shape=input_shape,
            input_names=input_names,
            example=example,
            metadata=metadata,
            complex_parts=complex_parts,
            remedies=remedies,
        )


def _export(
    model: Any,
    path: str | os.PathLike,
    modes: Sequence[int] | int,
    dtype: torch.dtype | None,
    *,
    inputs: nn.Module | None,
    input_shape: Sequence[int] | None,
    input_names: Sequence[str] | None,
    example: Any,
    metadata: dict[str, Any] | None,
    complex_parts: bool,
    remedies: Remedies,
) -> dict[str, Any]:
    if dtype is not None and dtype not in _DTYPES:
        raise ExportError(
            f"dtype must be None (automatic), torch.float32 or torch.float64, got {dtype!r}"
        )
    source = _feature_module(model)
    modes = _check_modes(modes, int(np.asarray(model.eigvals_).size))
    outputs = _outputs(model, modes, complex_parts, remedies)
    weight, bias = _affine_head(model, outputs)  # the basis and eigenvectors, one affine map
    folded, head_folded = _with_head(_folded(source), weight, bias)
    state_shape = tuple(int(d) for d in model.state_shape_)
    if inputs is None:
        if input_shape is not None and tuple(input_shape) != state_shape:
            raise ExportError(
                f"input_shape={tuple(input_shape)} differs from the model's state shape "
                f"{state_shape}; give inputs= (a module mapping one to the other)"
            )
        given: nn.Module = _NoInputs()
        in_shape = state_shape
    else:
        if not isinstance(inputs, nn.Module):
            raise ExportError(f"inputs must be a torch.nn.Module, got {type(inputs).__name__}")
        if input_shape is None:
            raise ExportError("input_shape is needed with inputs= (the shape of one input)")
        given = inputs
        in_shape = tuple(int(d) for d in input_shape)
    if input_names is not None and len(list(input_names)) != int(np.prod(in_shape)):
        raise ExportError(
            f"input_names has {len(list(input_names))} names for inputs of shape {in_shape}"
        )
    ex = None
    if example is not None:
        ex = torch.as_tensor(np.asarray(example), dtype=torch.float64)
        if tuple(ex.shape) == in_shape:
            ex = ex.unsqueeze(0)
        if tuple(ex.shape[1:]) != in_shape or ex.shape[0] == 0:
            raise ExportError(
                f"example has shape {tuple(ex.shape)}; expected (n, *{in_shape}) or {in_shape}"
            )
    meta = _metadata(model, modes, outputs, (metadata or {}).get("time_unit"))
    meta["inputs"] = {
        "shape": list(in_shape),
        "names": None if input_names is None else [str(n) for n in input_names],
        "map": type(_input_map(given, torch.float64)).__name__,
    }
    if metadata:
        meta.update(metadata)
    ref = None if ex is None else _reference(model, source, given, ex, outputs)

    fused = _fused_first_layer(given, folded)
    steps: list[tuple[int, float, float, torch.Tensor, torch.Tensor]] = []
    local = (
        None if fused is not None else _local_chain(given, folded, weight, bias, not head_folded)
    )
    if local is not None:  # a protein-size torsion or distance map: local Jacobians
        steps, hand_reason = local[1], local[2]
    elif fused is None:
        hand_reason = (
            "the positions map is not fused with the encoder's first Linear layer (it "
            "needs a Position* map and an encoder starting with a Linear layer)"
        )
    else:
        steps, hand_reason = _hand_steps(fused[1], weight, bias, not head_folded)
    meta["forces"] = {"available": hand_reason is None, "reason": hand_reason}

    def build(dt: torch.dtype) -> torch.jit.ScriptModule:
        if fused is not None:  # the map and the first layer as one module (scriptable)
            pre_s = torch.jit.script(_prepared(fused[0], dt))
            compiled, loop = torch.jit.script(_prepared(fused[1], dt)), False
        else:
            pre = _input_map(given, dt)
            try:
                pre_s = torch.jit.script(pre)
            except Exception as err:  # noqa: BLE001
                raise ExportError(
                    f"inputs ({type(pre).__name__}) cannot be compiled by torch.jit.script: "
                    f"{' '.join(str(err).split())[:200]}"
                ) from err
            with torch.no_grad():
                z = None if ex is None else pre(ex.to(dt))
            compiled, loop = _compiled(_prepared(folded, dt), z, "example=")
        args = (
            pre_s,
            compiled,
            weight.to(dt).contiguous(),
            bias.to(dt).contiguous(),
            not head_folded,
            in_shape,
            loop,
            meta,
        )
        keep = ["modes", "outputs", "eigenvalues", "lag_time"]
        chain = _HandChain([(c, p, q, w.to(dt), b.to(dt)) for c, p, q, w, b in steps])
        if local is not None:
            wrapper: nn.Module = _LocalSlowModes(
                *args, hand=chain, reason=str(hand_reason), index=local[0]
            )
            keep.append("forces")
        elif fused is None:
            wrapper = _SlowModes(*args)
        else:
            # a Cartesian map: the CV's gradient contracted with the map's response in
            # closed form (adk's 214 atoms: 148 us a call against 184 us forming W J; alanine's
            # 10: the same)
            kind = _CartesianSlowModes if isinstance(fused[0], _FusedCartesian) else _FusedSlowModes
            wrapper = kind(*args, hand=chain, reason=str(hand_reason))
            keep.append("forces")
        try:  # frozen: the flags and weights become constants, dead branches go
            return torch.jit.freeze(torch.jit.script(wrapper.eval()), preserved_attrs=keep)
        except Exception as err:  # noqa: BLE001 - should not happen: report it plainly
            raise ExportError(
                f"the exported module cannot be compiled: {' '.join(str(err).split())[:300]}"
            ) from err

    estimate = None if head_folded else _float32_estimate(model, weight)
    scripted, meta["precision"] = _precise(build, dtype, ex, ref, estimate, remedies)
    meta["dtype"] = meta["precision"]["dtype"]
    extra = {METADATA_FILE: json.dumps(meta, indent=1, allow_nan=False)}
    buf = _stdio.BytesIO()
    torch.jit.save(scripted, buf, _extra_files=extra)
    _write(path, buf.getvalue())
    return meta


def _input_map(given: nn.Module, dtype: torch.dtype) -> nn.Module:
    """The engine-input map in ``dtype`` in the ``(x, box)`` form."""
    pre = _prepared(given, dtype)
    return pre if isinstance(pre, _INPUT_MAPS) else _OneArgument(pre)


def _precise(
    build: Any,
    dtype: torch.dtype | None,
    ex: torch.Tensor | None,
    ref: np.ndarray | None,
    estimate: float | None,
    remedies: Remedies,
) -> tuple[torch.jit.ScriptModule, dict[str, Any]]:
    """The compiled file in the precision asked for (``dtype``; None: float32 where it
    agrees with the model, else float64) and the metadata's ``precision`` entry; refuses a
    file that does not agree, naming the remedy. Without example states, float32's error is
    ``estimate`` (None: not estimable, taken as agreeing)."""
    n = 0 if ex is None else int(ex.shape[0])
    where = (
        f"of the CV's range over the {n} example state{'s' * (n != 1)}"
        if n
        else "of the CV's unit norm (estimated from the final affine map: pass example= to "
        "measure it)"
    )
    first = torch.float32 if dtype is None else dtype
    scripted = build(first)
    tol = FLOAT32_TOLERANCE if first == torch.float32 else FLOAT64_TOLERANCE
    if ex is not None:
        err: float | None = _disagreement(scripted, ex.to(first), ref)
    else:
        err = estimate if first == torch.float32 else None
    info: dict[str, Any] = {
        "dtype": _DTYPES[first],
        "requested": "auto" if dtype is None else _DTYPES[dtype],
        "checked_on": n,
        "error": err,
        "tolerance": tol,
        "float32_error": err if first == torch.float32 else None,
        "note": None,
    }
    if err is None or err <= tol:
        return scripted, info
    if first == torch.float32 and dtype is None:
        scripted = build(torch.float64)
        err64 = None if ex is None else _disagreement(scripted, ex, ref)
        if err64 is not None and err64 > FLOAT64_TOLERANCE:
            _refuse_float64(err64, where)
        note = (
            f"float32 differs from the model by {err:.2g} {where} (tolerance "
            f"{FLOAT32_TOLERANCE:g}): the file computes in float64 (it answers in its "
            "input's dtype: PLUMED's float32 and OpenMM-Torch's float64 both run it)"
        )
        info.update(dtype="float64", error=err64, tolerance=FLOAT64_TOLERANCE, note=note)
        return scripted, info
    if first == torch.float64:
        _refuse_float64(err, where)
    raise ExportError(
        f"in float32 the exported module differs from the model by {err:.2g} {where} "
        f"(tolerance {FLOAT32_TOLERANCE:g}); it was not written: use {remedies.float64} (or "
        f"{remedies.auto}: float64 only where float32 does not agree)"
    )


def _refuse_float64(err: float, where: str) -> None:
    raise ExportError(
        f"the exported module (float64) differs from the model by {err:.2g} {where} "
        f"(tolerance {FLOAT64_TOLERANCE:g}): its feature map does not give the same values "
        "when compiled (non-deterministic, or state-dependent Python control flow that "
        "tracing froze); it was not written"
    )


def _reference(
    model: Any,
    source: nn.Module,
    given: nn.Module,
    ex: torch.Tensor,
    outputs: list[tuple[int, str | None]],
) -> np.ndarray:
    """The model's eigenfunctions (the chosen outputs) on the example, computed in float64:
    its input map and feature map cast to float64 (their float32 weights are exact in it),
    the model's own basis and eigenvectors (:meth:`SpectralModel.eigenfunctions`)."""
    f64 = _prepared(source, torch.float64)
    exact = copy.copy(model)  # shallow: only the feature map is replaced
    exact.features_ = f64
    if hasattr(exact, "encoder_"):  # autoencoders evaluate their encoder
        exact.encoder_ = f64
    if isinstance(getattr(exact, "dtype", None), torch.dtype):  # Generator evaluates in it
        exact.dtype = torch.float64
    with torch.no_grad():
        states = _input_map(given, torch.float64)(ex, None).numpy()
    ef = np.asarray(exact.eigenfunctions(states))
    cols = [ef[:, m].imag if p == "imaginary" else ef[:, m].real for m, p in outputs]
    return np.stack(cols, axis=1)


def _disagreement(scripted: nn.Module, ex: torch.Tensor, ref: np.ndarray | None) -> float:
    """The largest ``|file - ref|`` on the example as a fraction of each output's range
    over it (at least :data:`MIN_RANGE`)."""
    assert ref is not None
    with torch.no_grad():
        got = scripted(ex).double().numpy()
    scale = np.maximum(np.ptp(ref, axis=0), MIN_RANGE)
    err = np.abs(got - ref) / scale
    return float(err.max()) if np.all(np.isfinite(err)) else float("inf")


def _float32_estimate(model: Any, weight: torch.Tensor) -> float | None:
    """float32's rounding of the final affine map (applied to the encoder's outputs: not
    folded into a last ``Linear`` layer, where the cancellation is done in float64 at
    export) relative to the CV's unit norm, without states: the features' rounding
    (``eps * |psi|``, ``|psi| ~ |feature_shift_| + feature_scale_``) times the weights
    ``|r / feature_scale_|``; large when features vary little about large means (SchNet's
    mean read-out). None where the basis is not standardised."""
    shift = getattr(model, "feature_shift_", None)
    if shift is None or not bool(getattr(model, "constant_", False)):
        return None
    mag = np.abs(np.asarray(shift, dtype=np.float64)) + np.asarray(model.feature_scale_)
    w = np.abs(weight.numpy())
    if w.shape[0] != mag.shape[0]:
        return None
    return float(_EPS32 * (mag[:, None] * w).sum(0).max())


def _write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` atomically, creating missing folders; one-line ExportError on failure."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda fh: fh.write(data))
    except OSError as err:
        raise ExportError(f"{path}: cannot write ({err.strerror or err})") from err


def _affine_head(
    model: Any, outputs: list[tuple[int, str | None]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W, b)`` (float64) with ``features @ W + b`` equal to the chosen outputs: the
    operator's basis ``[1, (psi - shift) / scale]`` and the right eigenvectors (their real
    parts; a complex mode's imaginary part for its ``"imaginary"`` output) folded into one
    affine map."""
    vecs = np.asarray(model.right_eigvecs_)
    cols = [vecs[:, m].imag if p == "imaginary" else vecs[:, m].real for m, p in outputs]
    coef = torch.as_tensor(np.stack(cols, axis=1), dtype=torch.float64)
    if not bool(getattr(model, "constant_", False)):
        return coef, torch.zeros(coef.shape[1], dtype=torch.float64)
    c0, w = coef[0], coef[1:]
    shift = getattr(model, "feature_shift_", None)
    if shift is None:
        return w, c0
    shift = torch.as_tensor(np.asarray(shift), dtype=torch.float64)
    scale = torch.as_tensor(np.asarray(model.feature_scale_), dtype=torch.float64)
    w = w / scale[:, None]
    return w, c0 - shift @ w


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata stored in a file written by :func:`export` (torch only)."""
    extra = {METADATA_FILE: ""}
    try:
        torch.jit.load(os.fspath(path), map_location="cpu", _extra_files=extra)
    except (RuntimeError, OSError, ValueError) as err:
        raise ExportError(f"{path}: not a TorchScript file ({err})") from err
    raw = extra[METADATA_FILE]
    raw = raw.decode() if isinstance(raw, bytes) else raw
    if not raw:
        raise ExportError(f"{path}: no dpnets metadata (not written by dpnets export)")
    return json.loads(raw)
