"""Small private helpers shared by the systems modules."""

from __future__ import annotations

import contextlib
import hashlib
import json
import numbers
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def check_positive_int(value: object, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an ``int`` after checking it is an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)


def check_finite_scalar(value: object, name: str) -> float:
    """Return ``value`` as a finite ``float`` or raise ``ValueError``."""
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real number, got {value!r}.") from exc
    if not np.isfinite(out):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    return out


def sort_by_modulus(values: np.ndarray) -> np.ndarray:
    """Sort (complex) values by decreasing modulus.

    Ties in modulus (e.g. complex-conjugate pairs) are broken by decreasing real part and
    then by decreasing imaginary part, so that the order is deterministic.
    """
    values = np.asarray(values)
    mod = np.round(np.abs(values), 12)
    order = np.lexsort((-values.imag, -np.round(values.real, 12), -mod))
    return values[order]


def to_numpy(array: object) -> np.ndarray:
    """Convert the output of a feature map (numpy array or torch tensor) to float64 numpy."""
    if hasattr(array, "detach"):
        array = array.detach().cpu()  # type: ignore[union-attr]
    return np.asarray(array, dtype=np.float64)


def cache_dir() -> Path:
    """The user cache folder for generated data: ``$DPNETS_CACHE``, else
    ``$XDG_CACHE_HOME/dpnets``, else ``~/.cache/dpnets``. Created on first use."""
    root = os.environ.get("DPNETS_CACHE")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "dpnets"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_path(name: str, params: dict, suffix: str = ".npz") -> Path:
    """Path of the cache file of a generated dataset ``name`` keyed by its ``params``.

    The key is a SHA-256 of the JSON-sorted parameters, so that any change of a parameter
    (or of ``params["version"]``, bumped when the generator changes) gives a new file.
    """
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(blob).hexdigest()[:16]
    return cache_dir() / f"{name}-{digest}{suffix}"


def write_cache(path: Path, *, compress: bool = False, **arrays: np.ndarray) -> None:
    """Write a generated dataset to its cache file atomically.

    The arrays go to a uniquely named temporary file in the same folder, which is fsynced
    and renamed over ``path`` (:func:`dpnets.io.atomic_write`): processes that generate the
    same cache at once all succeed (the last rename wins, every version is complete), and a
    crash never leaves a partial file under the cache's name.
    """
    from dpnets.io import atomic_write

    save = np.savez_compressed if compress else np.savez
    atomic_write(path, lambda fh: save(fh, **arrays))


def read_cache(path: Path, keys: Sequence[str]) -> dict[str, np.ndarray] | None:
    """The arrays ``keys`` of a cache file, read in full and checked, or None without a file.

    Every array is read to its end, so zip's CRC-32 of each member, the ``.npy`` headers and
    the archive structure are all verified. A damaged file (truncated, empty, not an
    archive, a flipped bit, an array missing) is deleted with a ``RuntimeWarning`` that names
    it and the problem, and None is returned, so that the caller regenerates it.
    """
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise KeyError(f"arrays {missing} are missing")
            return {k: np.array(z[k]) for k in keys}
    except Exception as err:  # noqa: BLE001 - any failure to read means a damaged file
        warnings.warn(
            f"the cache file {path} is damaged ({type(err).__name__}: {err}); it is deleted "
            "and the data are generated again",
            RuntimeWarning,
            stacklevel=3,
        )
        with contextlib.suppress(OSError):
            path.unlink()
        return None
