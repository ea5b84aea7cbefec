"""Small private helpers shared by the systems modules."""

from __future__ import annotations

import hashlib
import json
import numbers
import os
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
