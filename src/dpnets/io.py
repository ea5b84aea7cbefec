"""Saving and loading fitted models without executing code, losing or corrupting them.

A file is a ``torch.save`` of a plain dictionary ``{"format", "version", "kind", "config",
"tensors", "checksum"}``: ``config`` is a JSON string, ``tensors`` a flat ``name -> Tensor``
mapping, ``checksum`` a SHA-256 of both. It is read back with
``torch.load(weights_only=True)``, which refuses arbitrary pickled objects.

Safety:

* :func:`save` is atomic: it writes a temporary file in the target's folder, fsyncs it and
  renames it over the target, so a crash or ``kill -9`` at any moment leaves either the
  previous file or the new one, never a broken one.
* :func:`load` answers every malformed, truncated, foreign or corrupted file with one
  ``ValueError`` saying that it is not a valid dpnets model file and why: the checksum must
  match (version-2 files), every floating tensor must be finite, and every module is first
  built on torch's ``meta`` device (no memory) and its parameter shapes checked against the
  stored tensors before it is built for real, so a small file cannot ask for huge layers.

Encoders from :mod:`dpnets.nn` are rebuilt from their stored ``config``; for any other
``torch.nn.Module`` pass an instance of the same architecture to :func:`load` (its weights are
replaced), exactly as with a PyTorch ``state_dict``.
"""

from __future__ import annotations

import hashlib
import io as _io
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from dpnets.distributed import is_main_process
from dpnets.nn.registry import build

__all__ = [
    "jsonable",
    "save",
    "load",
    "register",
    "dump_features",
    "restore_features",
    "arrays_to_tensors",
    "atomic_write",
    "InvalidModelFile",
    "kind_of",
    "sub_state",
    "restore_module",
]


class InvalidModelFile(ValueError):
    """A file that is not a valid dpnets model file (malformed, truncated, foreign or
    corrupted); the message says which file and why."""


_FORMAT = "dpnets"
#: 2: gamma on the paper's scale, DPNet ``standardize``/``constant``, operator ``constant_``
#: and ``dt``. Version-1 files load with the behaviour they were saved with.
_VERSION = 2

#: kind name -> (class, dump, restore). ``dump(model, tensors) -> config dict`` fills
#: ``tensors``; ``restore(config, tensors, **load_kwargs) -> model``.
_KINDS: dict[str, tuple[type, Callable[..., dict], Callable[..., Any]]] = {}


def register(kind: str, cls: type, dump: Callable[..., dict], restore: Callable[..., Any]) -> None:
    """Make ``cls`` saveable under ``kind``.

    ``dump(model, tensors)`` returns a JSON-serialisable config and adds arrays/tensors to
    the ``tensors`` dict; ``restore(config, tensors, **kwargs)`` rebuilds the fitted model
    (``kwargs`` are :func:`load`'s keyword arguments).
    """
    _KINDS[kind] = (cls, dump, restore)


def arrays_to_tensors(model: Any, names: Sequence[str], tensors: dict[str, torch.Tensor]) -> None:
    """Store numpy attributes ``names`` of ``model`` as tensors."""
    for name in names:
        tensors[name] = torch.from_numpy(np.ascontiguousarray(getattr(model, name)))


def tensors_to_arrays(
    model: Any,
    tensors: dict[str, torch.Tensor],
    names: Sequence[str],
    optional: Sequence[str] = (),
) -> None:
    """Set numpy attributes ``names`` (required) and ``optional`` (None when absent) of
    ``model`` from ``tensors``; a name missing from the file is also looked up under its
    earlier spelling (:data:`RENAMED`)."""
    for name in (*names, *optional):
        t = tensors.get(name, tensors.get(RENAMED.get(name, ""), None))
        if t is None and name in names:
            raise InvalidModelFile(f"the file lacks the array {name!r}")
        setattr(model, name, None if t is None else t.numpy())


#: fitted attributes renamed since files were first written: new name -> earlier name
RENAMED = {"cx_pinv_": "_cx_pinv", "cx_rank_": "rank_"}


def kind_of(model: Any) -> str | None:
    """The registered kind name of ``model``'s exact class, or None."""
    for kind, (cls, _, _) in _KINDS.items():
        if type(model) is cls:
            return kind
    return None


def dump_features(features: Any, tensors: dict[str, torch.Tensor]) -> dict:
    """Config of a model's feature map: identity (None), a registered dpnets model (stored
    whole, its tensors under ``features.``), or a custom callable (given again at load)."""
    if features is None:
        return {"kind": "identity", "config": None}
    kind = kind_of(features)
    if kind is not None:
        sub: dict[str, torch.Tensor] = {}
        cfg = _KINDS[kind][1](features, sub)
        tensors.update({f"features.{k}": v for k, v in sub.items()})
        return {"kind": "model", "model_kind": kind, "config": cfg}
    return {"kind": "custom", "config": None}


def restore_features(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> Any:
    """Inverse of :func:`dump_features`; ``kw`` are :func:`load`'s keyword arguments
    (``features=`` supplies a custom feature map)."""
    if cfg["kind"] == "identity":
        return None
    if cfg["kind"] in ("model", "dpnet"):  # "dpnet": the layout of earlier files
        kind = cfg.get("model_kind", "DPNet")
        if kind not in _KINDS:
            raise InvalidModelFile(f"unknown feature-map kind {kind!r}")
        sub = sub_state(tensors, "features.")
        return _KINDS[kind][2](cfg["config"], sub, **{**kw, "features": None})
    if kw.get("features") is None:
        raise ValueError(
            "this model was fitted on a custom feature map; pass it as load(path, features=...)"
        )
    return kw["features"]


def jsonable(v: Any) -> Any:
    """``v`` as JSON values for a model config (arrays and numpy scalars converted)."""
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [jsonable(u) for u in v]
    if isinstance(v, dict):
        return {str(k): jsonable(u) for k, u in v.items()}
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"cannot store {type(v).__name__} in a model config")


def sub_state(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors whose names start with ``prefix``, with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def save(model: Any, path: str | os.PathLike) -> None:
    """Save a fitted dpnets model (DPNet, TransferOperator, ...) to ``path`` atomically.

    In a ``torch.distributed`` process group only rank 0 writes (every process holds the
    same model after distributed training); the others check the model and return. There
    is no barrier, so calling it on rank 0 alone is fine too.
    """
    matches = [(k, v[1]) for k, v in _KINDS.items() if type(model) is v[0]]
    if not matches:
        raise TypeError(f"cannot save objects of type {type(model).__name__}")
    kind, dump = matches[0]
    tensors: dict[str, torch.Tensor] = {}
    cfg = dump(model, tensors)
    config = json.dumps(cfg)
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    payload = {
        "format": _FORMAT,
        "version": _VERSION,
        "kind": kind,
        "config": config,
        "tensors": tensors,
        "checksum": _checksum(kind, config, tensors),
    }
    if not is_main_process():
        return
    atomic_write(path, lambda fh: torch.save(payload, fh))


def _umask() -> int:
    """The process's umask: from ``/proc/self/status`` where it is shown (Linux; no change
    to the process), else read by setting and restoring it."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None]) -> None:
    """Write ``path`` atomically: ``write(file)`` fills a temporary file in the same folder,
    which is flushed, fsynced and renamed over ``path`` (``os.replace``). On any error, or
    a crash at any moment, the previous ``path`` is left as it was."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".dpnets-", suffix=".tmp", dir=folder)
    try:
        # mkstemp creates the file 0600: give it the mode any other file gets (0666 less the
        # umask), so that every output of a run has one mode
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(dir_fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dir_fd)


def _checksum(kind: str, config: str, tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 of the kind, the config and every tensor's name, dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(kind.encode())
    h.update(config.encode())
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def restore_module(spec: dict | None, given: nn.Module | None, state: dict, what: str) -> nn.Module:
    if given is not None:
        _check_state(given, state, what)
        module = given
    elif spec is not None:
        try:
            with torch.device("meta"):  # shapes only: nothing is allocated
                probe = build(spec)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - meta-unsafe init
            probe = None
        except (TypeError, ValueError, KeyError) as err:
            raise InvalidModelFile(f"the stored {what} configuration is invalid: {err}") from err
        if probe is not None:
            _check_state(probe, state, what)
        module = build(spec)
        # a module built from its description has the default dtype: give it the stored one
        dtypes = {v.dtype for v in state.values() if v.is_floating_point()}
        if len(dtypes) == 1:
            module = module.to(dtypes.pop())
    else:
        raise ValueError(
            f"the saved {what} is a custom torch module; pass an instance of the same "
            f"architecture as load(path, {what}=...)"
        )
    module.load_state_dict(state, strict=True)
    return module.eval()


def _check_state(module: nn.Module, state: dict, what: str) -> None:
    """The stored tensors must be exactly the module's parameters and buffers, by shape."""
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    stored = {k: tuple(v.shape) for k, v in state.items()}
    if expected != stored:
        missing = sorted(set(expected) - set(stored))
        extra = sorted(set(stored) - set(expected))
        wrong = sorted(k for k in set(expected) & set(stored) if expected[k] != stored[k])
        detail = "; ".join(
            part
            for part in (
                f"missing {missing[:3]}" if missing else "",
                f"unexpected {extra[:3]}" if extra else "",
                ", ".join(f"{k} is {stored[k]}, expected {expected[k]}" for k in wrong[:3]),
            )
            if part
        )
        raise InvalidModelFile(f"the stored {what} does not match its configuration ({detail})")


def load(
    path: str | os.PathLike,
    *,
    encoder: nn.Module | None = None,
    lagged_encoder: nn.Module | None = None,
    features: Any = None,
    device: str | torch.device = "cpu",
    **modules: Any,
) -> Any:
    """Load a model saved with ``save``. Never unpickles arbitrary objects.

    Parameters
    ----------
    path : str or PathLike
    encoder, lagged_encoder : nn.Module, optional
        Architectures for encoders that are not from :mod:`dpnets.nn`.
    features : callable, optional
        The feature map of a model fitted on a custom callable.
    device : str or torch.device, default "cpu"
    **modules
        Further architectures a model kind needs (e.g. ``decoder=`` for autoencoders).

    Returns
    -------
    The fitted model (DPNet, TransferOperator, ...).

    Raises
    ------
    InvalidModelFile
        (a ``ValueError``) for any file that is not a valid dpnets model file, naming why.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise InvalidModelFile(f"{path} is not a valid dpnets model file: it is a folder")
    kind, cfg, tensors = _read(path)
    restore = _KINDS[kind][2]
    try:
        return restore(
            cfg,
            tensors,
            encoder=encoder,
            lagged_encoder=lagged_encoder,
            features=features,
            device=device,
            **modules,
        )
    except InvalidModelFile as err:
        raise InvalidModelFile(f"{path} is not a valid dpnets model file: {err}") from None
    except (KeyError, TypeError, IndexError, AttributeError, RuntimeError) as err:
        raise InvalidModelFile(
            f"{path} is not a valid dpnets model file: missing or malformed entry "
            f"({type(err).__name__}: {err})"
        ) from None


def _read(path: str) -> tuple[str, dict, dict[str, torch.Tensor]]:
    """Load and check the payload: structure, version, kind, checksum, finite tensors."""

    def bad(why: str) -> InvalidModelFile:
        return InvalidModelFile(f"{path} is not a valid dpnets model file: {why}")

    with open(path, "rb") as fh:  # FileNotFoundError / PermissionError stay as they are
        raw = fh.read()
    if not raw:
        raise bad("the file is empty")
    try:
        payload = torch.load(_io.BytesIO(raw), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - every unreadable file gets the same answer
        # torch's own message would advise weights_only=False, which must never be followed
        raise bad(
            f"unreadable ({type(err).__name__}): corrupted, truncated or not a model file; "
            "dpnets never loads files that would need to execute code"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise bad("not a dpnets model (no dpnets format tag)")
    version = payload.get("version")
    if version not in (1, _VERSION):
        raise bad(f"unsupported file version {version!r}")
    kind, config, tensors = payload.get("kind"), payload.get("config"), payload.get("tensors")
    if kind not in _KINDS:
        raise bad(f"unknown model kind {kind!r}")
    if not isinstance(config, str) or not isinstance(tensors, dict):
        raise bad("malformed config or tensors")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items()):
        raise bad("malformed tensors")
    if version >= 2 and payload.get("checksum") != _checksum(kind, config, tensors):
        raise bad("checksum mismatch (the file is corrupted or was modified)")
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise bad(f"tensor {name!r} holds NaN or inf values")
    try:
        cfg = json.loads(config)
    except json.JSONDecodeError as err:
        raise bad(f"the config is not valid JSON ({err})") from None
    if not isinstance(cfg, dict):
        raise bad("the config is not a mapping")
    if version == 1:
        _upgrade_v1(cfg)
    return kind, cfg, tensors


def _upgrade_v1(cfg: Any) -> None:
    """Version-1 configs: DPNets without standardisation or constant, gamma on the old
    trace scale (converted), operators without an added constant. In place, recursively."""
    if not isinstance(cfg, dict):
        return
    params, fitted = cfg.get("params"), cfg.get("fitted")
    if isinstance(params, dict) and isinstance(fitted, dict) and "modules" in cfg:  # a DPNet
        params.setdefault("standardize", "none")
        params.setdefault("constant", False)
        d = int(fitted["n_features_"])
        generator = params.get("score") in ("generator", "dirichlet")
        params["gamma"] = float(params["gamma"]) * (d if generator else 2 * d)
    elif isinstance(params, dict) and "ridge" in params:  # an operator
        params.setdefault("constant", False)
    for value in cfg.values():
        _upgrade_v1(value)
