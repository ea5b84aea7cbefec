"""Learned slow modes as collective variables: a fitted model's eigenfunctions as one
self-contained TorchScript file for the simulation engines.

:func:`export` writes the right eigenfunctions ``phi_i(x) = psi(x)^T r_i`` of a fitted
model (paper Eq. 16; real parts, normalised exactly as :meth:`SpectralModel.eigenfunctions`
reports them) as a TorchScript module computed from the model's raw inputs: the input
standardisation of a DPNet (:class:`dpnets.representation.InputScaler`), the encoder, the
operator's feature basis (the constant prepended and the features centred and scaled, as
:class:`dpnets.TransferOperator` does with ``constant="auto"``) and the chosen columns of the
right eigenvectors. Loading it needs torch only (``torch.jit.load`` in Python,
``torch::jit::load`` in C++: PLUMED's ``PYTORCH_MODEL`` and OpenMM-Torch), and it is
differentiable with respect to its inputs, so an engine gets the biasing forces by
backpropagation.

:func:`export_fit` does the same for a folder written by ``dpnets fit`` on molecular
dynamics files and makes the module take what the engine computes: the raw backbone
torsions in radians (``sin``/``cos`` inside), the pairwise distances in nm, or all the
atoms' positions in nm (the atom selection inside); it writes next to the model a
``plumed.dat`` (``TORSION``/``DISTANCE`` from the topology's atoms, ``PYTORCH_MODEL``, an
``OPES_METAD`` sketch) or an OpenMM-Torch recipe.
"""

from __future__ import annotations

import copy
import glob
import io as _stdio
import json
import os
import sys
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
    "export_fit",
    "parse_modes",
    "read_metadata",
    "openmm_torsion_cv",
    "TorsionInputs",
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
class TorsionInputs(nn.Module):
    """Raw backbone torsions ``[phi_1..phi_m, psi_1..psi_k]`` (radians, as PLUMED's
    ``TORSION`` and mdtraj compute them) to the dihedral features of
    :func:`dpnets.datasets.read_trajectories`: ``[sin phi, cos phi, sin psi, cos psi]``
    blocks."""

    def __init__(self, n_phi: int) -> None:
        super().__init__()
        self.n_phi = int(n_phi)

    def forward(self, angles: torch.Tensor) -> torch.Tensor:
        phi, psi = angles[:, : self.n_phi], angles[:, self.n_phi :]
        return torch.cat([torch.sin(phi), torch.cos(phi), torch.sin(psi), torch.cos(psi)], 1)


class AtomSelection(nn.Module):
    """All the atoms' positions ``(B, n_all, 3)`` to those of the selected atoms (0-based
    ``indices``, in the order of the training data)."""

    def __init__(self, indices: Sequence[int]) -> None:
        super().__init__()
        self.register_buffer("indices", torch.as_tensor(np.asarray(indices), dtype=torch.long))

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return positions.index_select(1, self.indices)


class _SlowModes(nn.Module):
    """The exported function: engine inputs -> chosen eigenfunctions (real parts).

    ``forward(x)``: ``x`` of shape ``(B, *input_shape)`` gives ``(B, n_modes)``; a single
    state ``input_shape`` gives ``(n_modes,)``. Inputs of another floating dtype are cast to
    the module's.
    """

    def __init__(
        self,
        inputs: nn.Module,
        features: nn.Module,
        coef: torch.Tensor,
        shift: torch.Tensor | None,
        scale: torch.Tensor | None,
        constant: bool,
        input_shape: Sequence[int],
        loop: bool,
        meta: dict[str, Any],
    ) -> None:
        super().__init__()
        self.inputs = inputs
        self.features = features
        self.register_buffer("coef", coef)
        k = coef.shape[0] - int(constant)
        self.scaled = shift is not None
        self.register_buffer(
            "shift", shift if shift is not None else torch.zeros(k, dtype=coef.dtype)
        )
        self.register_buffer(
            "scale", scale if scale is not None else torch.ones(k, dtype=coef.dtype)
        )
        self.constant = bool(constant)
        self.input_shape = [int(d) for d in input_shape]
        self.loop = bool(loop)
        # plain attributes, readable on the loaded module (cv.modes, cv.eigenvalues, ...)
        self.modes = [int(m) for m in meta["modes"]]
        self.eigenvalues = [float(v[0]) for v in meta["eigenvalues"]]
        self.lag_time = float(meta["lag_time"]) if meta["lag_time"] is not None else -1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.coef.dtype)
        single = x.dim() == len(self.input_shape)
        if single:
            x = x.unsqueeze(0)
        if x.dim() != len(self.input_shape) + 1 or list(x.shape[1:]) != self.input_shape:
            raise ValueError(
                "expected inputs of shape (batch, "
                + ", ".join([str(d) for d in self.input_shape])
                + ") or one state of shape ("
                + ", ".join([str(d) for d in self.input_shape])
                + ")"
            )
        z = self.inputs(x)
        if self.loop:  # a feature map traced on one state
            phi = torch.cat([self.features(z[i : i + 1]) for i in range(z.shape[0])], 0)
        else:
            phi = self.features(z)
        if self.scaled:
            phi = (phi - self.shift) / self.scale
        if self.constant:
            phi = torch.cat([torch.ones_like(phi[:, :1]), phi], 1)
        out = phi @ self.coef
        if single:
            out = out[0]
        return out


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
    constant) and the real parts of the chosen right eigenvectors. Load it with
    ``torch.jit.load(path)`` (no dpnets needed); ``cv(x)`` maps ``(B, *input_shape)`` to
    ``(B, len(modes))`` (one state ``input_shape`` to ``(len(modes),)``) and is
    differentiable with respect to ``x``. Its metadata (modes, eigenvalues, timescales, lag,
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
        Precision of the exported computation (PLUMED feeds float32; inputs of another
        floating dtype are cast).
    inputs : nn.Module, optional
        A map from what the engine gives to the model's states, applied first
        (:class:`TorsionInputs`, :class:`AtomSelection`; must be scriptable); default:
        the model's states themselves.
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
    feats = _prepared(source, dtype)
    modes = _check_modes(modes, int(np.asarray(model.eigvals_).size))
    state_shape = tuple(int(d) for d in model.state_shape_)
    if inputs is None:
        if input_shape is not None and tuple(input_shape) != state_shape:
            raise ExportError(
                f"input_shape={tuple(input_shape)} differs from the model's state shape "
                f"{state_shape}; give inputs= (a module mapping one to the other)"
            )
        pre: nn.Module = nn.Identity()
        in_shape = state_shape
    else:
        if not isinstance(inputs, nn.Module):
            raise ExportError(f"inputs must be a torch.nn.Module, got {type(inputs).__name__}")
        if input_shape is None:
            raise ExportError("input_shape is needed with inputs= (the shape of one input)")
        pre = _prepared(inputs, dtype)
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

    const = bool(getattr(model, "constant_", False))
    shift = getattr(model, "feature_shift_", None) if const else None
    scale = getattr(model, "feature_scale_", None) if const else None
    coef = torch.as_tensor(np.real(np.asarray(model.right_eigvecs_)[:, modes]), dtype=dtype)
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
        coef.contiguous(),
        None if shift is None else torch.as_tensor(shift, dtype=dtype),
        None if scale is None else torch.as_tensor(scale, dtype=dtype),
        const,
        in_shape,
        loop,
        meta,
    )
    try:
        scripted = torch.jit.script(wrapper)
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
    atomic_write(path, lambda fh: fh.write(data))
    return meta


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


# ------------------------------------------------------------------------------ fit folders
def _read_config(folder: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError as err:
            raise ExportError("reading config.toml on Python 3.10 needs tomli") from err
    path = folder / "config.toml"
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as err:
        raise ExportError(f"{path}: no such file (not a dpnets fit folder)") from err
    except tomllib.TOMLDecodeError as err:
        raise ExportError(f"{path}: not valid TOML ({err})") from err


def _topology(data: dict[str, Any], folder: Path) -> tuple[Any, Any, str]:
    """``(mdtraj, topology, path)`` of a fit's MD data (relative paths: from the current
    folder, else from the fit folder)."""
    top_path = str(data.get("topology") or "")
    if not top_path:
        raise ExportError(f"{folder}/config.toml: the fit has no topology file")
    candidates = [Path(top_path), folder / top_path]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise ExportError(f"{top_path}: the fit's topology file is not found")
    try:
        import mdtraj as md
    except ImportError as err:
        raise ExportError(
            "exporting a molecular-dynamics fit needs mdtraj: pip install 'dpnets[md]'"
        ) from err
    try:
        top = md.load_topology(str(found))
    except Exception as err:  # noqa: BLE001
        raise ExportError(f"{found}: cannot read topology ({err})") from err
    return md, top, str(found)


def _first_positions(md: Any, data: dict[str, Any], top_path: str, folder: Path) -> np.ndarray:
    """All the atoms' positions (nm) of the first frame of the fit's first file."""
    for pattern in data.get("paths") or []:
        for cand in (pattern, str(folder / pattern)):
            files = sorted(glob.glob(cand, recursive=True))
            if files:
                try:
                    return md.load_frame(files[0], 0, top=top_path).xyz[0]
                except Exception:  # noqa: BLE001 - try the topology's own coordinates
                    break
    try:
        return md.load(top_path).xyz[0]
    except Exception as err:  # noqa: BLE001
        raise ExportError(
            f"{top_path}: no positions to trace the SchNet feature map on (the fit's "
            f"trajectory files are not found and the topology holds no coordinates: {err})"
        ) from err


def _atom_label(top: Any, i: int) -> str:
    a = top.atom(int(i))
    return f"{a.residue.name}{a.residue.resSeq}-{a.name}"


def export_fit(
    fit: str | os.PathLike,
    out: str | os.PathLike,
    modes: Sequence[int] | int = (1,),
    dtype: torch.dtype = torch.float32,
) -> list[str]:
    """``dpnets export``: export a fit folder's (or model file's) slow modes for an engine.

    For a folder written by ``dpnets fit`` on molecular-dynamics files, the exported module
    takes what the engine computes and a recipe is written next to ``out``:

    * ``features = "dihedrals"``: the raw backbone torsions ``[phi.., psi..]`` in radians
      (``sin``/``cos`` inside); ``plumed.dat`` defines them with ``TORSION ATOMS=...``
      (1-based atom indices of the topology, mdtraj's phi/psi atoms), loads the model with
      ``PYTORCH_MODEL FILE=... ARG=...`` and sketches ``OPES_METAD`` on the slowest mode;
    * ``features = "distances"``: the pairwise distances of the selected atoms in nm
      (``DISTANCE ATOMS=i,j``) and the same ``plumed.dat``;
    * ``features = "positions"`` (SchNet): the positions of *all* the topology's atoms in
      nm, ``(n_atoms, 3)`` or ``(B, n_atoms, 3)``, with the atom selection inside;
      invariant to translations and rotations (SchNet sees distances only); an
      OpenMM-Torch recipe (``openmm_torch_recipe.py``) is written.

    Other fits (and model files) export on the model's own states (:func:`export`).

    Returns
    -------
    list of str
        The files written (the model first).
    """
    from dpnets.io import load

    fit = Path(fit)
    out = Path(out)
    if fit.is_dir():
        model_path = fit / "model.pt"
        if not model_path.is_file():
            raise ExportError(f"{fit}: not a dpnets fit folder (no model.pt)")
        config = _read_config(fit)
    elif fit.is_file():
        model_path, config = fit, {}
    else:
        raise ExportError(f"{fit}: no such fit folder or model file")
    model = load(model_path)
    data = dict(config.get("data") or {})
    kind = str(data.get("features") or "raw")
    shape = tuple(getattr(model, "state_shape_", ()))
    if kind == "raw" and data.get("topology") and len(shape) == 2 and shape[1] == 3:
        kind = "positions"  # MD files read with features="raw" are atom positions
    md_fit = bool(data.get("topology")) and kind in ("dihedrals", "distances", "positions")
    if not md_fit:
        export(model, out, modes, dtype, metadata={"source": str(fit)})
        return [str(out)]
    md, top, top_path = _topology(data, fit)
    written = [str(out)]
    if kind == "dihedrals":
        probe = md.Trajectory(np.zeros((1, top.n_atoms, 3), dtype=np.float32), top)
        phi = np.asarray(md.compute_phi(probe)[0], dtype=np.int64).reshape(-1, 4)
        psi = np.asarray(md.compute_psi(probe)[0], dtype=np.int64).reshape(-1, 4)
        atoms = [*phi.reshape(-1, 4), *psi.reshape(-1, 4)]
        names = [f"phi{k + 1}" for k in range(len(phi))] + [f"psi{k + 1}" for k in range(len(psi))]
        expected = 2 * len(atoms)
        if tuple(model.state_shape_) != (expected,):
            raise ExportError(
                f"{top_path}: the topology has {len(phi)} phi and {len(psi)} psi torsions "
                f"({expected} sin/cos features), but the model takes states of shape "
                f"{tuple(model.state_shape_)}"
            )
        meta = export(
            model,
            out,
            modes,
            dtype,
            inputs=TorsionInputs(len(phi)),
            input_shape=(len(atoms),),
            input_names=names,
            metadata={"source": str(fit), "engine_inputs": "torsions (radians)"},
        )
        lines = [
            f"{n}: TORSION ATOMS={','.join(str(int(i) + 1) for i in a)}"
            for n, a in zip(names, atoms, strict=True)
        ]
        labels = [" ".join(_atom_label(top, i) for i in a) for a in atoms]
        written.append(_write_plumed(out, meta, names, lines, labels, top_path))
    elif kind == "distances":
        from dpnets.datasets import select_atoms

        sel = select_atoms(top, str(data.get("selection") or "heavy"), source=top_path)
        i, j = np.triu_indices(len(sel), k=1)
        pairs = np.stack([sel[i], sel[j]], axis=1)
        if tuple(model.state_shape_) != (len(pairs),):
            raise ExportError(
                f"{top_path}: the selection gives {len(pairs)} distances, but the model "
                f"takes states of shape {tuple(model.state_shape_)}"
            )
        names = [f"d{k + 1}" for k in range(len(pairs))]
        meta = export(
            model,
            out,
            modes,
            dtype,
            input_names=names,
            metadata={"source": str(fit), "engine_inputs": "distances (nm)"},
        )
        lines = [
            f"{n}: DISTANCE ATOMS={a + 1},{b + 1}" for n, (a, b) in zip(names, pairs, strict=True)
        ]
        labels = [f"{_atom_label(top, a)} {_atom_label(top, b)}" for a, b in pairs]
        written.append(_write_plumed(out, meta, names, lines, labels, top_path))
    else:
        from dpnets.datasets import select_atoms

        sel = select_atoms(top, str(data.get("selection") or "heavy"), source=top_path)
        if tuple(model.state_shape_) != (len(sel), 3):
            raise ExportError(
                f"{top_path}: the selection has {len(sel)} atoms, but the model takes states "
                f"of shape {tuple(model.state_shape_)}"
            )
        example = _first_positions(md, data, top_path, fit)
        meta = export(
            model,
            out,
            modes,
            dtype,
            inputs=AtomSelection(sel),
            input_shape=(top.n_atoms, 3),
            example=example[None],
            metadata={
                "source": str(fit),
                "engine_inputs": "positions of all the topology's atoms (nm)",
                "selection": [int(a) for a in sel],
            },
        )
        written.append(_write_openmm_recipe(out, meta, top.n_atoms, top_path))
    return written


def _write_plumed(
    out: Path, meta: dict, names: list[str], lines: list[str], labels: list[str], top: str
) -> str:
    """``plumed.dat`` next to ``out``: the inputs, the model, an OPES_METAD sketch."""
    path = out.parent / "plumed.dat"
    modes = meta["modes"]
    comps = [f"cv.node-{k}" for k in range(len(modes))]
    text = [
        f"# written by dpnets export: the slow modes {modes} of {meta.get('source', '')}",
        f"# atoms: 1-based indices of {top}; lengths in nm, angles in radians (PLUMED units)",
        "# PLUMED must be built with the PyTorch module (--enable-libtorch) for PYTORCH_MODEL",
    ]
    for line, label in zip(lines, labels, strict=True):
        text.append(f"{line}   # {label}")
    text.append(f"cv: PYTORCH_MODEL FILE={out.name} ARG={','.join(names)}")
    for k, m in enumerate(modes):
        lam = meta["eigenvalues"][k]
        ts = meta["timescales"][k]
        ts_s = "" if ts is None else f", implied timescale {ts:.4g}"
        text.append(f"# {comps[k]}: eigenfunction {m} (eigenvalue {lam[0]:.5g}{ts_s})")
    text += [
        "",
        "# Enhanced sampling on the slowest mode (a sketch: choose BARRIER, in kJ/mol, to",
        "# the free-energy barrier you expect, and PACE/SIGMA to your system):",
        f"# opes: OPES_METAD ARG={comps[0]} PACE=500 BARRIER=40",
        f"# or: metad: METAD ARG={comps[0]} PACE=500 HEIGHT=1.2 SIGMA=0.05 BIASFACTOR=10 TEMP=300",
        f"PRINT ARG={','.join(names[:4] + comps)} STRIDE=100 FILE=COLVAR",
        "",
    ]
    body = "\n".join(text).encode()
    atomic_write(path, lambda fh: fh.write(body))
    return str(path)


_OPENMM_RECIPE = '''"""OpenMM-Torch recipe for the slow modes exported by dpnets export.

{file} maps the positions of all {n_atoms} atoms of {top} (nm; one state (n_atoms, 3) or
a batch (B, n_atoms, 3)) to the eigenfunctions {modes}; it is invariant to translations and
rotations (SchNet sees interatomic distances only), and keeps molecules whole as they are
given (no periodic wrapping inside). OpenMM-Torch needs a scalar: the wrapper below picks one
mode. Run it with your System and Simulation (openmm, openmmtorch installed).
"""

import openmm
import torch
from openmm import app, unit
from openmmtorch import TorchForce


class SlowMode(torch.nn.Module):
    def __init__(self, path: str, k: int = 0):
        super().__init__()
        self.cv = torch.jit.load(path)
        self.k = k

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return self.cv(positions.unsqueeze(0))[0, self.k]


torch.jit.script(SlowMode("{file}", 0)).save("{stem}_openmm.pt")
cv_force = TorchForce("{stem}_openmm.pt")  # the CV: its "energy" is the eigenfunction

# As a biased collective variable of OpenMM's own well-tempered metadynamics:
# bias = app.BiasVariable(cv_force, minValue=-3.0, maxValue=3.0, biasWidth=0.1, periodic=False)
# meta = app.Metadynamics(system, [bias], 300 * unit.kelvin, biasFactor=10.0,
#                         height=1.0 * unit.kilojoules_per_mole, frequency=500)
# simulation = app.Simulation(topology, system, integrator)   # after creating meta
# meta.step(simulation, 1_000_000)
#
# Or inside a CustomCVForce of your own:
# cvf = openmm.CustomCVForce("0.5 * k * (s - s0)^2")
# cvf.addGlobalParameter("k", 100.0); cvf.addGlobalParameter("s0", 0.0)
# cvf.addCollectiveVariable("s", cv_force)
# system.addForce(cvf)
'''


def _write_openmm_recipe(out: Path, meta: dict, n_atoms: int, top: str) -> str:
    path = out.parent / "openmm_torch_recipe.py"
    text = _OPENMM_RECIPE.format(
        file=out.name, stem=out.stem, n_atoms=n_atoms, top=top, modes=meta["modes"]
    ).encode()
    atomic_write(path, lambda fh: fh.write(text))
    return str(path)


# ------------------------------------------------------------------------------ OpenMM (CPU)
def openmm_torsion_cv(
    path: str | os.PathLike,
    torsions: Sequence[Sequence[int]],
    output: int = 0,
    n_grid: int = 121,
) -> tuple[Any, float]:
    """An OpenMM ``CustomCVForce`` whose energy is a two-torsion CV file, tabulated.

    OpenMM-Torch's wheels need CUDA; on a CPU machine the exported function of two torsions
    (a ``dpnets export`` of a fit on one phi/psi pair) goes into OpenMM as a periodic
    bicubic spline (``Continuous2DFunction``) of two ``CustomTorsionForce`` angles, on an
    ``n_grid x n_grid`` grid over ``[-pi, pi]^2``. Its "energy" (kJ/mol) is the CV value, so
    it can be a ``BiasVariable`` of ``openmm.app.Metadynamics`` or a term of a bias.

    Parameters
    ----------
    path : path
        A file written by :func:`export` that takes two torsions in radians.
    torsions : two sequences of 4 ints
        0-based atom indices of the two torsions, in the order of the file's inputs (for a
        ``dpnets export`` of a dihedral fit: phi then psi, as in its ``plumed.dat``).
    output : int, default 0
        Which of the file's outputs (``cv.node-k``) to tabulate.
    n_grid : int, default 121
        Grid points per angle (the last equals the first: periodic).

    Returns
    -------
    (openmm.CustomCVForce, float)
        The force, and the interpolation error estimate: the largest difference between the
        spline and the file at the centres of the grid cells, relative to the CV's range.
    """
    import openmm

    meta = read_metadata(path)
    if meta.get("inputs", {}).get("shape") != [2]:
        raise ExportError(
            f"{path}: takes inputs of shape {meta.get('inputs', {}).get('shape')}; the "
            "tabulated OpenMM force needs a CV of two torsions (radians)"
        )
    if not 0 <= int(output) < len(meta["modes"]):
        raise ExportError(f"output={output}: {path} has {len(meta['modes'])} outputs")
    tors = [list(map(int, t)) for t in torsions]
    if len(tors) != 2 or any(len(t) != 4 for t in tors):
        raise ExportError(f"torsions must be two lists of 4 atom indices, got {torsions!r}")
    if int(n_grid) < 8:
        raise ExportError(f"n_grid must be at least 8, got {n_grid}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*torch\.jit\.", DeprecationWarning)
        cv = torch.jit.load(os.fspath(path), map_location="cpu")
    n = int(n_grid)
    g = np.linspace(-np.pi, np.pi, n)

    def table(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        x = np.stack([a.ravel(), b.ravel()], 1)
        with torch.no_grad():
            return cv(torch.tensor(x, dtype=torch.float64))[:, int(output)].double().numpy()

    ga, gb = np.meshgrid(g, g, indexing="ij")  # [i, j] = (phi_i, psi_j)
    values = table(ga, gb).reshape(n, n)
    values[-1, :], values[:, -1] = values[0, :], values[:, 0]  # exactly periodic
    func = openmm.Continuous2DFunction(
        n, n, values.T.ravel().tolist(), -np.pi, np.pi, -np.pi, np.pi, True
    )  # OpenMM's order: x fastest
    force = openmm.CustomCVForce("cv(t1, t2)")
    force.addTabulatedFunction("cv", func)
    for name, atoms in zip(("t1", "t2"), tors, strict=True):
        t = openmm.CustomTorsionForce("theta")
        t.addTorsion(*atoms, [])
        force.addCollectiveVariable(name, t)
    # interpolation error at the cell centres, by OpenMM's own spline through a bicubic
    # estimate: compare the file with the spline evaluated by scipy's periodic cubic spline
    from scipy.interpolate import RectBivariateSpline

    mid = 0.5 * (g[1:] + g[:-1])
    spline = RectBivariateSpline(g, g, values, kx=3, ky=3, s=0)
    ma, mb = np.meshgrid(mid, mid, indexing="ij")
    exact = table(ma, mb).reshape(ma.shape)
    err = float(np.abs(spline(mid, mid) - exact).max() / max(np.ptp(values), 1e-300))
    return force, err
