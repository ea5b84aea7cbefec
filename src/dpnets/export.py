"""Learned slow modes as collective variables: a fitted model's eigenfunctions as one
self-contained TorchScript file for the simulation engines.

:func:`export` writes the right eigenfunctions ``phi_i(x) = psi(x)^T r_i`` of a fitted
model (paper Eq. 16; real parts, normalised exactly as :meth:`SpectralModel.eigenfunctions`
reports them) as a TorchScript module computed from the model's raw inputs: the input
standardisation of a DPNet (folded into the encoder's first linear layer where it is one),
the encoder, and the operator's feature basis (the constant prepended and the features
centred and scaled, as :class:`dpnets.TransferOperator` does with ``constant="auto"``) with
the chosen columns of the right eigenvectors, folded into one affine map. Loading it needs
torch only (``torch.jit.load`` in Python, ``torch::jit::load`` in C++: PLUMED's
``PYTORCH_MODEL`` and OpenMM-Torch), and it is differentiable with respect to its inputs, so
an engine gets the biasing forces by backpropagation. Every check that does not depend on
the values happens here, at export time: the file's ``forward`` is the bare computation.

Input maps put the engine's quantities in front of the model: :class:`TorsionInputs`
(torsions in radians, PLUMED's ``TORSION``), :class:`PositionTorsions`,
:class:`PositionDistances` and :class:`AtomSelection` (the engine's positions, with periodic
images when a box is passed). :mod:`dpnets.engines` exports ``dpnets fit`` folders for an
engine's topology and writes the engine recipes.
"""

from __future__ import annotations

import copy
import io as _stdio
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    "METADATA_FILE",
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


class TorsionInputs(nn.Module):
    """Raw backbone torsions ``[phi_1..phi_m, psi_1..psi_k]`` (radians, as PLUMED's
    ``TORSION`` and mdtraj compute them; ``m = n_phi``, ``k = n_psi``, default ``m``) to the
    dihedral features of :func:`dpnets.datasets.read_trajectories`: ``[sin phi, cos phi,
    sin psi, cos psi]`` blocks."""

    def __init__(self, n_phi: int, n_psi: int | None = None) -> None:
        super().__init__()
        self.n_phi = int(n_phi)
        n_psi = self.n_phi if n_psi is None else int(n_psi)
        phi, psi = list(range(self.n_phi)), list(range(self.n_phi, self.n_phi + n_psi))
        # feature j = sin(angle[which[j]] + offset[j]), cos a = sin(a + pi/2): three ops
        self.register_buffer("which", torch.tensor(phi + phi + psi + psi, dtype=torch.long))
        half = [0.0] * self.n_phi + [np.pi / 2] * self.n_phi + [0.0] * n_psi + [np.pi / 2] * n_psi
        self.register_buffer("offset", torch.tensor(half, dtype=torch.float64))

    def forward(self, angles: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        return torch.sin(angles.index_select(1, self.which) + self.offset.to(angles.dtype))


class PositionTorsions(nn.Module):
    """The engine's positions ``(B, n_atoms, 3)`` (nm) to the dihedral features of
    :func:`dpnets.datasets.read_trajectories` (``[sin phi, cos phi, sin psi, cos psi]``
    blocks) of the torsions ``quads`` (``(m, 4)`` 0-based atom indices, the ``n_phi`` phi
    torsions first), with mdtraj's (and PLUMED's ``TORSION``) sign convention; bond vectors
    are taken to their nearest periodic image when a box is given."""

    def __init__(self, quads: Any, n_phi: int) -> None:
        super().__init__()
        q = torch.as_tensor(np.asarray(quads, dtype=np.int64).reshape(-1, 4))
        self.register_buffer("flat", q.reshape(-1).clone())
        self.n = int(q.shape[0])
        self.n_phi = int(n_phi)
        k, m = self.n_phi, self.n  # [sin phi, cos phi, sin psi, cos psi] from [sin.., cos..]
        order = [*range(k), *range(m, m + k), *range(k, m), *range(m + k, 2 * m)]
        self.register_buffer("order", torch.tensor(order, dtype=torch.long))

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        p = x.index_select(1, self.flat).reshape(x.shape[0], self.n, 4, 3)
        b = p[:, :, 1:] - p[:, :, :-1]  # the three bond vectors
        if box is not None:
            b = minimum_image(b, box)
        b1, b2, b3 = b[:, :, 0], b[:, :, 1], b[:, :, 2]
        c1 = torch.linalg.cross(b2, b3, dim=-1)
        c2 = torch.linalg.cross(b1, b2, dim=-1)
        y = (b1 * c1).sum(-1) * torch.linalg.vector_norm(b2, dim=-1)
        c = (c1 * c2).sum(-1)  # the angle is atan2(y, c) (mdtraj)
        r = torch.sqrt(y * y + c * c)
        return torch.cat([y / r, c / r], 1).index_select(1, self.order)


class PositionDistances(nn.Module):
    """The engine's positions ``(B, n_atoms, 3)`` (nm) to the distances of atom ``pairs``
    (``(m, 2)`` 0-based; nearest periodic image when a box is given), as
    ``mdtraj.compute_distances`` and PLUMED's ``DISTANCE`` give them."""

    def __init__(self, pairs: Any) -> None:
        super().__init__()
        pr = torch.as_tensor(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
        self.register_buffer("i", pr[:, 0].clone())
        self.register_buffer("j", pr[:, 1].clone())

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
        d = x.index_select(1, self.j) - x.index_select(1, self.i)
        if box is not None:
            d = minimum_image(d, box)
        return torch.linalg.vector_norm(d, dim=-1)


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


_INPUT_MAPS = (TorsionInputs, PositionTorsions, PositionDistances, AtomSelection, _NoInputs)


class _SlowModes(nn.Module):
    """The exported function: engine inputs -> chosen eigenfunctions (real parts).

    ``forward(x, box=None)``: ``x`` of shape ``(B, *input_shape)`` gives ``(B, n_modes)``; a
    single state ``input_shape`` gives ``(n_modes,)``; ``box`` (3, 3): the periodic box
    vectors (nm) as OpenMM-Torch passes them. The computation runs in the module's dtype and
    the result comes back in the input's (PLUMED feeds float32 to a float64 file). The
    operator's feature basis (the constant, the centring and scaling) and the eigenvectors
    are folded into one affine map at export time; nothing is checked per call (the shapes
    are checked at export).
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
        self.eigenvalues = [float(v[0]) for v in meta["eigenvalues"]]
        self.lag_time = float(meta["lag_time"]) if meta["lag_time"] is not None else -1.0

    def forward(self, x: torch.Tensor, box: torch.Tensor | None = None) -> torch.Tensor:
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
            return f.feature_module()
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
    float64): one affine map less per call. A copy; the module itself when nothing folds."""
    from dpnets.representation import InputScaler

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
    enc = copy.deepcopy(enc)
    first = _first_linear(enc)
    assert first is not None
    with torch.no_grad():
        w = first.weight.detach().double() / scale
        b = -(w @ shift)
        if first.bias is not None:
            b = b + first.bias.detach().double()
        else:
            first.bias = nn.Parameter(torch.zeros_like(first.weight[:, 0]))
        first.weight.copy_(w.to(first.weight.dtype))
        first.bias.copy_(b.to(first.bias.dtype))
    return enc


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


def _metadata(model: Any, modes: list[int], dtype: torch.dtype) -> dict[str, Any]:
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
        "outputs": [f"mode {m}" for m in modes],
        "eigenvalues": [[float(v.real), float(v.imag)] for v in lam],
        "timescales": timescales,
        "lag": lag,
        "dt": None if dt is None else float(dt),
        "lag_time": lag_time,
        "dtype": _DTYPES[dtype],
        "normalisation": "unit empirical norm on the training inputs (model.eigenfunctions)",
    }


def export(
    model: Any,
    path: str | os.PathLike,
    modes: Sequence[int] | int = (1,),
    dtype: torch.dtype = torch.float32,
    *,
    inputs: nn.Module | None = None,
    input_shape: Sequence[int] | None = None,
    input_names: Sequence[str] | None = None,
    example: Any = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a fitted model's slow eigenfunctions as a self-contained TorchScript file.

    The file computes ``Re phi_i(x) = Re psi(x)^T r_i`` for the chosen ``modes`` (Eq. 16;
    ``i = 0`` is the constant function) exactly as :meth:`SpectralModel.eigenfunctions`
    reports them, from the raw inputs: input standardisation, encoder, feature basis
    (``[1, (psi - feature_shift_) / feature_scale_]`` when the operator added the
    constant) and the real parts of the chosen right eigenvectors, the last two folded into
    one affine map (into the encoder's last ``Linear`` layer where it has one). Load it with
    ``torch.jit.load(path)`` (no dpnets needed); ``cv(x)`` maps ``(B, *input_shape)`` to
    ``(B, len(modes))`` (one state ``input_shape`` to ``(len(modes),)``), in ``x``'s dtype
    (computed in ``dtype``), and is differentiable with respect to ``x``; ``cv(x, box)``
    passes the periodic box vectors ``(3, 3)`` to the input map (OpenMM-Torch's
    ``boxvectors``). Nothing is checked per call: a wrong shape fails inside torch. Its
    metadata (modes, eigenvalues, timescales, lag,
    ``dt``, inputs) are the JSON file :data:`METADATA_FILE` inside it
    (:func:`read_metadata`) and the attributes ``cv.modes``, ``cv.eigenvalues`` (real
    parts) and ``cv.lag_time``.

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
        modulus; 1 is the slowest non-constant one).
    dtype : torch.float32 or torch.float64, default float32
        Precision of the exported computation; inputs are cast to it and the result back to
        the input's dtype (PLUMED feeds float32, so a float64 file runs there too).
    inputs : nn.Module, optional
        A map from what the engine gives to the model's states, applied first
        (:class:`TorsionInputs`, :class:`PositionTorsions`, :class:`PositionDistances`,
        :class:`AtomSelection`, which also take the box; or any scriptable module with
        ``forward(x)``); default: the model's states themselves.
    input_shape : sequence of int, optional
        Shape of one engine input when ``inputs`` is given (default: the model's state
        shape).
    input_names : sequence of str, optional
        Names of the inputs, for the metadata.
    example : array, optional
        One or more engine inputs. Needed only when the feature map cannot be scripted
        (e.g. SchNet, which is then traced on one state and applied state by state); the
        exported file is checked against the model on it.
    metadata : dict, optional
        Extra JSON-serialisable entries for the metadata.

    Returns
    -------
    dict
        The metadata written to the file.

    Raises
    ------
    ExportError
        (a ``ValueError``) for a model that cannot be exported, bad ``modes`` or ``dtype``.
    """
    with warnings.catch_warnings():  # TorchScript is what PLUMED and OpenMM-Torch load
        warnings.filterwarnings("ignore", r".*torch\.jit\.", DeprecationWarning)
        return _export(
            model, path, modes, dtype, inputs, input_shape, input_names, example, metadata
        )


def _export(
    model: Any,
    path: str | os.PathLike,
    modes: Sequence[int] | int,
    dtype: torch.dtype,
    inputs: nn.Module | None,
    input_shape: Sequence[int] | None,
    input_names: Sequence[str] | None,
    example: Any,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    if dtype not in _DTYPES:
        raise ExportError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    source = _feature_module(model)
    # the precision the model itself computes its features in (the check's tolerance)
    exact = dtype == torch.float64 and all(
        t.dtype == torch.float64
        for t in [*source.parameters(), *source.buffers()]
        if t.is_floating_point()
    )
    modes = _check_modes(modes, int(np.asarray(model.eigvals_).size))
    weight, bias = _affine_head(model, modes)  # the basis and eigenvectors, one affine map
    folded, head_folded = _with_head(_folded(source), weight, bias)
    feats = _prepared(folded, dtype)
    state_shape = tuple(int(d) for d in model.state_shape_)
    if inputs is None:
        if input_shape is not None and tuple(input_shape) != state_shape:
            raise ExportError(
                f"input_shape={tuple(input_shape)} differs from the model's state shape "
                f"{state_shape}; give inputs= (a module mapping one to the other)"
            )
        pre: nn.Module = _NoInputs()
        in_shape = state_shape
    else:
        if not isinstance(inputs, nn.Module):
            raise ExportError(f"inputs must be a torch.nn.Module, got {type(inputs).__name__}")
        if input_shape is None:
            raise ExportError("input_shape is needed with inputs= (the shape of one input)")
        pre = _prepared(inputs, dtype)
        if not isinstance(pre, _INPUT_MAPS):
            pre = _OneArgument(pre)
        in_shape = tuple(int(d) for d in input_shape)
    if input_names is not None and len(list(input_names)) != int(np.prod(in_shape)):
        raise ExportError(
            f"input_names has {len(list(input_names))} names for inputs of shape {in_shape}"
        )
    ex = None
    if example is not None:
        ex = torch.as_tensor(np.asarray(example), dtype=dtype)
        if tuple(ex.shape) == in_shape:
            ex = ex.unsqueeze(0)
        if tuple(ex.shape[1:]) != in_shape:
            raise ExportError(
                f"example has shape {tuple(ex.shape)}; expected (n, *{in_shape}) or {in_shape}"
            )
    try:
        pre_s = torch.jit.script(pre)
    except Exception as err:  # noqa: BLE001
        raise ExportError(
            f"inputs ({type(pre).__name__}) cannot be compiled by torch.jit.script: "
            f"{' '.join(str(err).split())[:200]}"
        ) from err
    with torch.no_grad():
        z = None if ex is None else pre(ex)
    compiled, loop = _compiled(feats, z, "example=")
    meta = _metadata(model, modes, dtype)
    meta["inputs"] = {
        "shape": list(in_shape),
        "names": None if input_names is None else [str(n) for n in input_names],
        "map": type(pre).__name__,
    }
    if metadata:
        meta.update(metadata)
    wrapper = _SlowModes(
        pre_s,
        compiled,
        weight.to(dtype).contiguous(),
        bias.to(dtype).contiguous(),
        not head_folded,
        in_shape,
        loop,
        meta,
    )
    try:  # frozen: the flags and weights become constants, dead branches go
        scripted = torch.jit.freeze(
            torch.jit.script(wrapper.eval()), preserved_attrs=["modes", "eigenvalues", "lag_time"]
        )
    except Exception as err:  # noqa: BLE001 - should not happen: report it plainly
        raise ExportError(
            f"the exported module cannot be compiled: {' '.join(str(err).split())[:300]}"
        ) from err
    if ex is not None:  # the file must reproduce the model where we can compare
        _check_against_model(model, scripted, ex, pre, modes, 1e-8 if exact else 1e-4)
    extra = {METADATA_FILE: json.dumps(meta, indent=1, allow_nan=False)}
    buf = _stdio.BytesIO()
    torch.jit.save(scripted, buf, _extra_files=extra)
    data = buf.getvalue()
    _write(path, data)
    return meta


def _write(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` atomically, creating missing folders; one-line ExportError on failure."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda fh: fh.write(data))
    except OSError as err:
        raise ExportError(f"{path}: cannot write ({err.strerror or err})") from err


def _affine_head(model: Any, modes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W, b)`` (float64) with ``features @ W + b`` equal to the chosen eigenfunctions: the
    operator's basis ``[1, (psi - shift) / scale]`` and the real parts of the right
    eigenvectors folded into one affine map."""
    coef = torch.as_tensor(np.real(np.asarray(model.right_eigvecs_)[:, modes]), dtype=torch.float64)
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


def _check_against_model(
    model: Any,
    scripted: nn.Module,
    ex: torch.Tensor,
    pre: nn.Module,
    modes: list[int],
    tol: float,
) -> None:
    with torch.no_grad():
        states = pre(ex).double().numpy()
        got = scripted(ex).double().numpy()
    ref = np.real(model.eigenfunctions(states))[:, modes]
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-12)
    if not err <= tol:
        raise ExportError(
            f"the exported module differs from model.eigenfunctions on the example by "
            f"{err:.2g} (relative); it was not written"
        )


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
