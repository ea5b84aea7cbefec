"""Saving and loading fitted models without executing code, losing or corrupting them.

A file is a ``torch.save`` of a plain dictionary ``{"format", "version", "kind", "config",
"tensors", "checksum"}``: ``config`` is a JSON string, ``tensors`` a flat ``name -> Tensor``
mapping, ``checksum`` a SHA-256 of both. It is read back with
``torch.load(weights_only=True)``, which refuses arbitrary pickled objects.

Safety:

* :func:`save` is atomic: it writes a temporary file in the target's folder, fsyncs it and
  renames it over the target, so a crash or ``kill -9`` at any moment leaves either the
  previous file or the new one, never a broken one.
* Temporary files left by a save that was killed (``.dpnets-<pid>@<host>-*.tmp``) are
  removed by the next save into the same folder once their process is gone (or, for
  files of another host or of an unknown writer, after :data:`STALE_TMP_SECONDS`).
* :func:`load` answers every malformed, truncated, foreign or corrupted file with one
  ``ValueError`` saying that it is not a valid dpnets model file and why: only regular
  files are opened (a FIFO or device is refused without reading), every tensor must be a
  dense, contiguous view of the bytes stored for it (a stride-0 or oversized view is
  refused before anything reads it), the checksum must match (version-2 files;
  version-1 files carry none and load with a warning saying so), every floating tensor
  must be finite, every module is first built on torch's ``meta`` device (no memory) and
  its parameter shapes checked against the stored tensors before it is built for real, so
  a small file cannot ask for huge layers (a module that cannot be built on ``meta`` is
  refused, never built for real unchecked), and the restored model's parameters pass the
  checks its constructor's ``fit`` applies (``dt="abc"`` or ``dt=-1`` are refused at load,
  not at first use).

Encoders from :mod:`dpnets.nn` are rebuilt from their stored ``config``; for any other
``torch.nn.Module`` pass an instance of the same architecture to :func:`load` (its weights are
replaced), exactly as with a PyTorch ``state_dict``.
"""

from __future__ import annotations

import hashlib
import io as _io
import json
import os
import re
import socket
import stat
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

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
    "check_target",
    "InvalidModelFile",
    "kind_of",
    "sub_state",
    "restore_module",
    "open_regular",
    "file_kind",
    "meta_device",
    "STALE_TMP_SECONDS",
    "MAX_MODULE_ELEMENTS",
    "MAX_CONFIG_CHARS",
    "MAX_CONFIG_DEPTH",
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
    (``kwargs`` are :func:`load`'s keyword arguments). ``cls`` is a
    :class:`dpnets.base.BaseEstimator` subclass: :func:`load` checks every restored model
    with its ``_check_params`` (the class's ``_parameter_constraints`` table).
    """
    if not (isinstance(cls, type) and callable(getattr(cls, "_check_params", None))):
        raise TypeError(f"register: {cls!r} is not a dpnets.base.BaseEstimator subclass")
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
    not_stored("feature map", "features=...")
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


#: what the model being saved holds but its file leaves out (custom callables), as
#: ``(what, load keyword)``; collected by :func:`not_stored` during :func:`save`
_NOT_STORED: ContextVar[list[tuple[str, str]] | None] = ContextVar("not_stored", default=None)


def not_stored(what: str, keyword: str) -> None:
    """Record, while a model is being saved, that it holds a custom ``what`` (a Python
    callable) which the file does not store (loading never executes code): :func:`save` then
    warns that loading needs ``load(path, <keyword>)``."""
    found = _NOT_STORED.get()
    if found is not None and all(k != keyword for _, k in found):  # one warning per keyword
        found.append((what, keyword))


def save(model: Any, path: str | os.PathLike) -> None:
    """Save a fitted dpnets model (DPNet, TransferOperator, ...) to ``path`` atomically.

    In a ``torch.distributed`` process group only rank 0 writes (every process holds the
    same model after distributed training); the others check the model and return. There
    is no barrier, so calling it on rank 0 alone is fine too.

    Warns
    -----
    UserWarning
        When the model's feature map, dictionary or kernel is a custom Python callable: the
        file does not store it (loading never executes code), so loading needs it back,
        ``load(path, features=...)``; the warning says so at save time.
    """
    write_model(model, path)


def write_model(model: Any, path: str | os.PathLike) -> None:
    """:func:`save`, for the models' ``save`` methods (its warning names their caller)."""
    matches = [(k, v[1]) for k, v in _KINDS.items() if type(model) is v[0]]
    if not matches:
        raise TypeError(f"cannot save objects of type {type(model).__name__}")
    kind, dump = matches[0]
    tensors: dict[str, torch.Tensor] = {}
    token = _NOT_STORED.set([])
    try:
        cfg = dump(model, tensors)
        missing = _NOT_STORED.get() or []
    finally:
        _NOT_STORED.reset(token)
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
    for what, keyword in missing:
        warnings.warn(
            f"{os.fspath(path)}: saved without the model's custom {what} (a Python callable, "
            f"which a file does not store: loading never executes code); load it with "
            f"dpnets.load(path, {keyword})",
            UserWarning,
            stacklevel=3,
        )


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


#: a temporary file of :func:`atomic_write` whose writer cannot be identified as a live
#: process of this host is removed once it is this old (seconds)
STALE_TMP_SECONDS = 3600.0

_TMP_NAME = re.compile(r"^\.dpnets-(?:(\d+)@([A-Za-z0-9_.-]*)-)?[A-Za-z0-9_]+\.tmp$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # exists (another user's), or cannot tell
        return True
    return True


def _clean_stale_tmp(folder: str) -> None:
    """Remove the temporary files of killed saves in ``folder``: those of this host whose
    process is gone, and any older than :data:`STALE_TMP_SECONDS` (a live writer's file,
    of this host or another, is never touched before then)."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(".dpnets-") and n.endswith(".tmp")]
    except OSError:
        return
    host, now = _host(), time.time()
    for name in names:
        match = _TMP_NAME.match(name)
        if match is None:
            continue
        full = os.path.join(folder, name)
        try:
            info = os.lstat(full)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        pid, owner = match.group(1), match.group(2)
        dead = pid is not None and owner == host and not _pid_alive(int(pid))
        if dead or now - info.st_mtime > STALE_TMP_SECONDS:
            try:
                os.unlink(full)
            except OSError:
                pass


def check_target(path: str | os.PathLike) -> str:
    """The folder of ``path``, a file about to be written; a missing folder, a file in
    its place, or a folder given as ``path`` raise the ``OSError`` subclass of the
    problem, its message naming ``path`` (checked before long work that ends in a write,
    e.g. a fit's checkpoints, and by :func:`atomic_write`)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(f"cannot write {path}: {folder} is a file, not a folder")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {path}: it is a folder; give a file name")
    return folder


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None]) -> None:
    """Write ``path`` atomically: ``write(file)`` fills a temporary file in the same folder,
    which is flushed, fsynced and renamed over ``path`` (``os.replace``). On any error, or
    a crash at any moment, the previous ``path`` is left as it was; the temporary file of a
    killed write (named after its process and host) is removed by the next write into the
    folder. A missing folder, a folder given as ``path`` or an unwritable folder raises
    the ``OSError`` subclass of the problem, its message naming ``path``."""
    path = os.fspath(path)
    folder = check_target(path)
    _clean_stale_tmp(folder)
    prefix = f".dpnets-{os.getpid()}@{_host()}-"
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
    except OSError as exc:  # e.g. a read-only folder
        error = type(exc)(f"cannot write {path}: {exc.strerror or exc}")
        error.errno = exc.errno
        raise error from None
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


#: the most elements (parameters and buffers) a module rebuilt from a file may hold beyond
#: the stored tensors (non-persistent buffers), checked on the ``meta`` device
MAX_MODULE_ELEMENTS = 10**8

#: bounds on a model file's JSON config (the header): its length in characters and the
#: nesting depth of its arrays and objects (the deepest model dpnets writes, a composite
#: operator on a DPNet with a registered encoder, nests about 8 levels deep)
MAX_CONFIG_CHARS = 2**24
MAX_CONFIG_DEPTH = 64

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings
    skipped), without parsing it: no recursion, linear time."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    depth = deepest = 0
    for ch in brackets:
        depth += 1 if ch in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


_META_SCALARS = {
    torch.Tensor.item: 1.0,
    torch.Tensor.__float__: 1.0,
    torch.Tensor.__int__: 1,
    torch.Tensor.__index__: 1,
    torch.Tensor.__bool__: True,
}


class _MetaScalars(TorchFunctionMode):
    """Lets constructors that read a scalar back (``.item()``, ``float(t)``) run on the
    ``meta`` device: the value is a placeholder (1), the shapes are what the probe needs."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func in _META_SCALARS and args and isinstance(args[0], torch.Tensor):
            if args[0].is_meta:
                value = _META_SCALARS[func]
                if func is torch.Tensor.item and not args[0].is_floating_point():
                    return 1
                return value
        return func(*args, **(kwargs or {}))


@contextmanager
def meta_device() -> Iterator[None]:
    """Build and run modules on torch's ``meta`` device (shapes only, nothing allocated),
    scalar reads answered with placeholders (see :class:`_MetaScalars`)."""
    with torch.device("meta"), _MetaScalars():
        yield


def restore_module(spec: dict | None, given: nn.Module | None, state: dict, what: str) -> nn.Module:
    """The module ``what`` of a file: ``given`` (an architecture passed to :func:`load`) or
    rebuilt from its ``spec``, first on the ``meta`` device and checked against the stored
    tensors ``state``, then for real, loaded with ``state`` and in eval mode."""
    if given is not None:
        _check_state(given, state, what)
        module = given
    elif spec is not None:
        try:
            with meta_device():  # shapes only: nothing is allocated
                probe = build(spec)
        except (TypeError, ValueError, KeyError) as err:
            raise InvalidModelFile(f"the stored {what} configuration is invalid: {err}") from err
        except Exception as err:  # noqa: BLE001 - never build for real what was not checked
            raise InvalidModelFile(
                f"the stored {what} cannot be checked before allocation (building it on the "
                f"meta device failed: {type(err).__name__}: {str(err)[:200]}); refused"
            ) from None
        _check_state(probe, state, what)
        total = sum(t.numel() for t in (*probe.parameters(), *probe.buffers()))
        stored = sum(t.numel() for t in state.values())
        if total > stored + MAX_MODULE_ELEMENTS:
            raise InvalidModelFile(
                f"the stored {what} configuration asks for {total} elements, far more than "
                f"the {stored} stored (limit: stored + {MAX_MODULE_ELEMENTS}); refused"
            )
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
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"device={device!r} is not a torch device (e.g. 'cpu', 'cuda')") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: CUDA is not available; load with device='cpu'")
    kind, cfg, tensors = _read(path)
    restore = _KINDS[kind][2]
    try:
        model = restore(
            cfg,
            tensors,
            encoder=encoder,
            lagged_encoder=lagged_encoder,
            features=features,
            device=device,
            **modules,
        )
        _check_params(model)
        return model
    except InvalidModelFile as err:
        raise InvalidModelFile(f"{path} is not a valid dpnets model file: {err}") from None
    except (KeyError, TypeError, IndexError, AttributeError, RuntimeError) as err:
        raise InvalidModelFile(
            f"{path} is not a valid dpnets model file: missing or malformed entry "
            f"({type(err).__name__}: {err})"
        ) from None


def _check_params(model: Any, depth: int = 0) -> None:
    """A restored model's parameters must pass its class's ``_parameter_constraints`` table
    (``BaseEstimator._check_params``, what its ``fit`` runs; and so must those of a stored
    feature-map model): a forged config is refused at load, not at first use."""
    try:
        model._check_params()
    except (TypeError, ValueError) as err:
        raise InvalidModelFile(f"invalid config value: {err}") from None
    inner = getattr(model, "features_", None)
    if depth < 4 and inner is not None and inner is not model and kind_of(inner) is not None:
        _check_params(inner, depth + 1)


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words, for the errors that refuse anything
    but a regular file (a FIFO would block its reader, a device never ends)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_regular(path: str | os.PathLike, what: str = "file") -> _io.BufferedReader:
    """``path`` opened for binary reading if it is a regular file; a FIFO, device, socket or
    folder raises ``ValueError`` without being read (a FIFO would block forever).

    ``FileNotFoundError`` and ``PermissionError`` are raised as they are.
    """
    path = os.fspath(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO does not block
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = file_kind(mode)
            raise ValueError(f"{path}: the {what} is {kind}; only regular files are read")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_layout(name: str, t: torch.Tensor) -> str | None:
    """Why tensor ``t`` is not a dense, contiguous view of the bytes stored for it (None if
    it is): checked on its metadata only, before any operation reads it."""
    if t.layout != torch.strided or t.is_quantized:
        return f"tensor {name!r} has an unsupported layout {t.layout}"
    if t.device.type != "cpu":
        return f"tensor {name!r} is on {t.device}"
    if any(s < 0 for s in t.stride()) or not t.is_contiguous():
        return (
            f"tensor {name!r} of shape {tuple(t.shape)} has strides {t.stride()} (files hold "
            "contiguous tensors; a stride-0 view would expand a few stored bytes)"
        )
    need = (t.storage_offset() + t.numel()) * t.element_size()
    have = t.untyped_storage().nbytes()
    if need > have:
        return (
            f"tensor {name!r} of shape {tuple(t.shape)} needs {need} bytes but {have} are "
            "stored for it"
        )
    return None


def _read(path: str) -> tuple[str, dict, dict[str, torch.Tensor]]:
    """Load and check the payload: structure, version, kind, tensor layouts, checksum,
    finite tensors."""

    def bad(why: str) -> InvalidModelFile:
        return InvalidModelFile(f"{path} is not a valid dpnets model file: {why}")

    try:  # FileNotFoundError / PermissionError stay as they are
        fh = open_regular(path, "model file")
    except ValueError as err:  # the message starts with the path
        raise bad(str(err)[len(path) + 2 :]) from None
    with fh:
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
    for name, t in tensors.items():
        why = _check_layout(name, t)
        if why is not None:
            raise bad(why)
    if version >= 2 and payload.get("checksum") != _checksum(kind, config, tensors):
        raise bad("checksum mismatch (the file is corrupted or was modified)")
    if version == 1:
        if "checksum" in payload and payload["checksum"] != _checksum(kind, config, tensors):
            raise bad("checksum mismatch (the file is corrupted or was modified)")
        if "checksum" not in payload:
            warnings.warn(
                f"{path} is a version-1 dpnets file: it has no checksum, so corruption or "
                "edits of it cannot be detected (no integrity protection); save it again "
                "with dpnets.save to add one",
                UserWarning,
                stacklevel=3,
            )
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise bad(f"tensor {name!r} holds NaN or inf values")
    if len(config) > MAX_CONFIG_CHARS:
        raise bad(
            f"the config is {len(config)} characters long, more than a model's config "
            f"can be (limit {MAX_CONFIG_CHARS}); refused unparsed"
        )
    depth = _json_depth(config)
    if depth > MAX_CONFIG_DEPTH:
        raise bad(
            f"the config nests {depth} levels deep, more than a model's config can "
            f"(limit {MAX_CONFIG_DEPTH}); refused unparsed"
        )
    try:
        cfg = json.loads(config)
    except (json.JSONDecodeError, RecursionError) as err:
        raise bad(f"the config is not valid JSON ({type(err).__name__}: {err})") from None
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
