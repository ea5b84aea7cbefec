"""States: what ``fit`` accepts as states and where they are read from.

Validation of the states (NaN/inf, complex, sparse, object, empty, shapes; scikit-learn's
wording; :func:`check_not_rows`: a list of 1-D rows explained, not read as trajectories), and
the states that are not in memory, side by side: :class:`OutOfCoreStates` (an HDF5 dataset
or any array with slicing, read by slices of rows) and :class:`MappedStates` (memory-mapped
or out-of-core states read batch by batch during training), which read rows the same way
(:func:`read_rows`).
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

__all__ = [
    "to_numpy",
    "is_sparse",
    "is_streaming",
    "check_states",
    "check_not_rows",
    "check_frames",
    "check_state_size",
    "check_state_shape",
    "Trajectories",
    "trajectories",
    "OUT_OF_CORE_BYTES",
    "is_out_of_core",
    "is_read_batchwise",
    "in_memory_unless_large",
    "read_rows",
    "OutOfCoreStates",
    "MappedStates",
    "chunks",
    "time_columns",
    "TIME_NAMES",
    "CLOCK_ROWS",
]


def to_numpy(a: object) -> np.ndarray:
    """Convert an array-like or torch tensor to a numpy array (no copy when possible)."""
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    return np.asarray(a)


def is_sparse(a: object) -> bool:
    """A scipy sparse matrix or array (refused: states are dense)."""
    import scipy.sparse

    return scipy.sparse.issparse(a)


def is_streaming(data: object) -> bool:
    """True for a torch ``Dataset`` or ``DataLoader`` (data consumed in batches)."""
    return isinstance(data, (Dataset, DataLoader))


#: column names that mean a time axis, a calendar or a row index, not a coordinate of the
#: state (lowercase; ``"unnamed: 0"`` and ``""``: the index pandas writes to a file)
TIME_NAMES = frozenset(
    {
        "t",
        "time",
        "date",
        "datetime",
        "timestamp",
        "year",
        "quarter",
        "month",
        "week",
        "day",
        "hour",
        "minute",
        "second",
        "step",
        "frame",
        "index",
        "unnamed: 0",
        "",
    }
)
#: the fewest rows over which an unnamed column rising by the same step counts as a clock
CLOCK_ROWS = 10


def time_columns(values: np.ndarray, names: Sequence[str] | None = None) -> dict[int, str]:
    """The columns of a table of states ``values`` (n, d) that are a time axis, a calendar
    or a row index rather than coordinates of the state, each with why: rising by the same
    step every row (named as one in :data:`TIME_NAMES`, or over :data:`CLOCK_ROWS` rows or
    more: a clock), or named as one (and, where it rises unevenly, irregular sampling).
    ``names``: the column names, if any. Fewer than 3 rows: none."""
    values = np.asarray(values)
    if values.ndim != 2 or values.shape[0] < 3:
        return {}
    found = {}
    for k in range(values.shape[1]):
        col = values[:, k].astype(np.float64)
        step = np.diff(col)
        scale = max(float(np.abs(col).max()), 1.0)
        even = bool(step[0] > 0 and np.all(np.abs(step - step[0]) <= 1e-9 * scale))
        named = names is not None and str(names[k]).strip().lower() in TIME_NAMES
        if even and (named or len(col) >= CLOCK_ROWS):
            found[k] = f"rises by {step[0]:g} every row"
        elif named:
            found[k] = "is named as one"
            if np.all(step > 0):
                found[k] += (
                    f" and rises unevenly (steps {step.min():g} to {step.max():g}: irregular "
                    "sampling, while the frames must be evenly spaced; resample them onto a "
                    "regular grid first)"
                )
    return found


def _check_data_frame(a: Any, name: str) -> None:
    """A pandas ``DataFrame`` of states: a non-numeric column (dates, labels) is refused
    naming it and the columns to pass; a time axis, calendar or row index among its
    columns (:func:`time_columns`) warns (a ``DiagnosticWarning``), naming the columns
    to keep."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    from dpnets.diagnostics import Diagnostic, warn

    cols = list(a.columns)
    text = []
    for c in cols:
        if getattr(a[c].dtype, "kind", None) in ("m", "M"):  # dates, durations: not states
            text.append(c)
            continue
        if is_numeric_dtype(a[c]) or is_bool_dtype(a[c]):
            continue
        try:  # numbers stored as objects are numbers
            a[c].to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            text.append(c)
    if text:
        numeric = [c for c in cols if c not in text]
        raise ValueError(
            f"{name} has non-numeric column(s) {text!r} (a date, time or label is not a "
            "coordinate of the state): select the numeric ones, df[" + repr(numeric) + "]; "
            "the time between rows is the model's dt="
        )
    if len(cols) < 2 or len(a) < 3:
        return
    found = time_columns(a.to_numpy(dtype=np.float64, na_value=np.nan), [str(c) for c in cols])
    if found:
        keep = [c for k, c in enumerate(cols) if k not in found]
        what = "; ".join(f"column {cols[k]!r} {why}" for k, why in found.items())
        problem = (
            f"{name}: {what}: a time axis, calendar or row index, read as a coordinate of "
            "the state (a trend no stationary model follows)"
        )
        remedy = f"select the others, df[{keep!r}], and give the time between rows as dt="
        warn([Diagnostic("time_column", problem, remedy, remedy)])


def _check_pandas_index(index: Any, name: str) -> None:
    """A pandas time axis (a ``DatetimeIndex``, ``TimedeltaIndex`` or numeric index) that
    is not evenly spaced warns (a ``DiagnosticWarning``): rows are frames, evenly spaced in
    time, and ``dropna()`` on a series with gaps leaves it unevenly spaced. A calendar
    frequency pandas recognises (months, quarters) counts as even."""
    import warnings

    import pandas as pd

    from dpnets.diagnostics import Diagnostic, warn

    kind = getattr(index.dtype, "kind", None)
    if len(index) < 3 or kind not in ("M", "m", "i", "u", "f") or isinstance(index, pd.RangeIndex):
        return
    if kind == "M" and index.is_monotonic_increasing:
        with warnings.catch_warnings():  # pandas 3 announces a change of its return type
            warnings.simplefilter("ignore")
            try:
                if pd.infer_freq(index) is not None:
                    return
            except (TypeError, ValueError):  # duplicated: judged below
                pass
    if kind in ("M", "m"):  # in nanoseconds, whatever the index's unit
        values = np.asarray(index.to_numpy(), dtype="datetime64[ns]" if kind == "M" else None)
        step = np.diff(values).astype("timedelta64[ns]").astype(np.float64)
    else:
        step = np.diff(np.asarray(index, dtype=np.float64))
    if step.size == 0 or np.all(step == step[0]) and step[0] > 0:
        return
    if kind in ("M", "m"):
        low, high = pd.Timedelta(int(step.min()), "ns"), pd.Timedelta(int(step.max()), "ns")
    else:
        low, high = f"{step.min():g}", f"{step.max():g}"
    order = "is not increasing" if np.any(step <= 0) else "is unevenly spaced"
    problem = (
        f"{name}: its index {order} (steps from {low} to {high}): the rows must be frames "
        "evenly spaced in time, as the lag and dt count them"
    )
    remedy = (
        "sort it, or resample onto a regular grid and fill the gaps (df.resample(...)"
        ".mean().interpolate()); dropna() leaves gaps, while interpolate() or a list of "
        "the gap-free pieces keeps the spacing"
    )
    warn([Diagnostic("irregular", problem, remedy, remedy)])


def check_states(
    a: object, name: str = "data", min_samples: int = 1, lazy: bool = False
) -> np.ndarray | OutOfCoreStates:
    """Validate an array of states of shape ``(n, *state_shape)``.

    Raises ``ValueError`` naming the problem for NaN/inf values, empty or 0-d input, or
    non-numeric data (``TypeError`` for None). A 1-D array is returned as ``(n, 1)``.
    Arrays (memory-mapped ones included) are not copied, and the finiteness check reads
    them in chunks, so a memory-mapped ``.npy`` file is never held in memory as a whole.

    Parameters
    ----------
    a : array-like, torch.Tensor, or an out-of-core array
        The states.
    name : str, default "data"
        Name of the argument, used in the error messages.
    min_samples : int, default 1
        Fewest samples accepted.
    lazy : bool, default False
        Return an out-of-core array (an ``h5py.Dataset`` or any object with ``shape``,
        ``dtype`` and slicing that is not a numpy array or tensor) as an
        :class:`OutOfCoreStates`, read chunk by chunk by the fits that accept it, instead of
        reading it into memory.
    """
    arr: np.ndarray | OutOfCoreStates
    if a is None:
        raise TypeError(f"{name} is None: pass the states (an array of shape (n_samples, ...))")
    if is_streaming(a):
        raise TypeError(
            f"{name} is a torch {type(a).__name__}: this needs the states themselves (an "
            "array, a memory map, an HDF5 dataset or a list of them, one per trajectory); a "
            "Dataset or DataLoader of (X, Y) pairs holds one lag only and cannot be re-paired"
        )
    if is_sparse(a):
        raise TypeError(
            f"{name} is a sparse matrix; dpnets needs dense arrays of states (sparse input is "
            "not supported): convert it with .toarray()"
        )
    if hasattr(a, "columns") and hasattr(a, "iloc"):  # a pandas DataFrame
        _check_data_frame(a, name)
    arr = OutOfCoreStates(a) if lazy and is_out_of_core(a) else to_numpy(a)
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(
            f"Complex data not supported: {name} is complex ({arr.dtype}); dpnets models real "
            "states: pass the real and imaginary parts as separate coordinates (e.g. "
            "np.concatenate([z.real, z.imag], axis=-1))"
        )
    if arr.dtype == object and isinstance(arr, np.ndarray):
        try:  # numbers stored as Python objects
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise type(err)(
                f"{name} must be a numeric array; it has dtype object with non-numeric values "
                f"({err})"
            ) from None
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise ValueError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (samples), got a scalar")
    if arr.ndim == 1:
        arr = arr[:, None] if isinstance(arr, np.ndarray) else OutOfCoreStates(arr.source, True)
    if arr.shape[0] < min_samples:
        raise ValueError(f"{name} has {arr.shape[0]} samples; at least {min_samples} needed")
    check_state_size(arr.shape[1:], name, arr.shape[0])
    if np.issubdtype(arr.dtype, np.floating):
        problem = nonfinite_problem(arr)
        if problem:
            raise ValueError(f"{name} contains {problem}")
    return arr


def nonfinite_problem(
    arr: np.ndarray | OutOfCoreStates,
    sample: str = "sample",
    pieces: str = "a list of trajectories",
    stride: int = 1,
) -> str | None:
    """What is wrong with the NaN/inf values of a float trajectory ``arr`` ``(T, ...)``, None
    if it has none: ``"3 NaN or inf value(s) (first at sample 57, coordinate 1): missing
    values: ..., or pass the pieces between them as <pieces>"`` (an inf: an overflow
    upstream). ``sample`` names a row (``"frame"`` for files), ``stride`` the rows of the
    source per row of ``arr`` (the first is reported as the source's row)."""
    bad, first, value = _count_nonfinite(arr)
    if not bad:
        return None
    where = f"first at {sample} {first[0] * stride}" + (
        f", coordinate {first[1:] if len(first) > 2 else first[1]}"
        if len(first) > 1 and arr.shape[1:] != (1,)
        else ""
    )
    remedy = (
        "missing values: a trajectory must be complete and evenly sampled; fill or "
        "interpolate the gaps (pandas' .interpolate()), or pass the pieces between "
        f"them as {pieces}"
        if np.isnan(value)
        else "an infinite value (an overflow upstream?)"
    )
    return f"{bad} NaN or inf value(s) ({where}): {remedy}"


#: elements per chunk of the finiteness check (4 MiB of booleans)
_FINITE_CHUNK = 1 << 22


def _count_nonfinite(arr: np.ndarray | OutOfCoreStates) -> tuple[int, tuple, float]:
    """Number of NaN/inf values, the index of the first and its value, read in chunks of
    rows (no full-size temporary)."""
    row = int(np.prod(arr.shape[1:], dtype=np.int64))
    bad, first, value = 0, (), 0.0
    for sl in chunks(arr.shape[0], max(1, _FINITE_CHUNK // max(row, 1))):
        part = np.asarray(arr[sl])
        finite = np.isfinite(part)
        if not finite.all():
            if not bad:
                at = np.unravel_index(int(np.argmin(finite)), finite.shape)
                value = float(part[at])
                first = (int(at[0]) + int(sl.start or 0), *map(int, at[1:]))
            bad += int(finite.size - np.count_nonzero(finite))
    return bad, first, value


def _is_scalar(v: object) -> bool:
    return isinstance(v, (int, float, np.number)) and not isinstance(v, bool)


def check_not_rows(data: object, name: str = "X") -> None:
    """Refuse a list that reads as the rows of one table rather than as trajectories.

    A list is a list of trajectories. A list of plain numbers, or a list of more rows
    (Python lists or tuples of numbers, all of one length) than each row has numbers, as
    ``X.tolist()`` gives, would be read as many trajectories of one-dimensional frames: a
    ``ValueError`` says so and how to pass one trajectory. Trajectories given as arrays
    are never refused."""
    if not isinstance(data, list) or len(data) < 2:
        return
    if all(_is_scalar(v) for v in data[:64]) and all(map(_is_scalar, data)):
        raise ValueError(
            f"{name} is a list of {len(data)} numbers: a list is read as a list of "
            f"trajectories, and a number is not one. For one trajectory of scalar states pass "
            f"np.asarray({name}) (shape ({len(data)},))"
        )
    first = data[0]
    if not (isinstance(first, (list, tuple)) and first and all(map(_is_scalar, first))):
        return
    width = len(first)
    if len(data) <= width:
        return
    if all(isinstance(r, (list, tuple)) and len(r) == width for r in data):
        raise ValueError(
            f"{name} is a list of {len(data)} rows of {width} numbers (as X.tolist() gives): "
            f"a list is read as a list of trajectories, which would make {len(data)} "
            f"trajectories of {width} one-dimensional frames each. For one trajectory of "
            f"{width}-dimensional states pass np.asarray({name}) (shape ({len(data)}, {width})); "
            "for several trajectories, a list of such arrays (one per trajectory); for "
            "scalar trajectories, pass each as a numpy array"
        )


def check_frames(X: object, name: str = "X") -> np.ndarray:
    """The frames of ``X``, as ``fit`` takes it: one trajectory ``(n, *state_shape)``, or a
    list of trajectories whose frames are concatenated in order (checked like
    :func:`check_states`; every trajectory must have the same state shape; the rows of
    one table as a list are refused, :func:`check_not_rows`)."""
    if not isinstance(X, list):
        return check_states(X, name)  # type: ignore[return-value]
    if not X:
        raise ValueError(f"{name} is an empty list of trajectories")
    check_not_rows(X, name)
    parts = [check_states(t, f"{name}[{k}]") for k, t in enumerate(X)]
    for k, p in enumerate(parts):
        if p.shape[1:] != parts[0].shape[1:]:
            raise ValueError(
                f"{name}[{k}] has state shape {p.shape[1:]}, {name}[0] has {parts[0].shape[1:]}"
            )
    return parts[0] if len(parts) == 1 else np.concatenate(parts)  # type: ignore[return-value]


def check_state_size(state_shape: tuple, name: str = "X", n: int | None = None) -> None:
    """Refuse states with no coordinates (a state shape with a zero)."""
    if math.prod(state_shape) == 0:
        shape = ("?" if n is None else n, *state_shape)
        raise ValueError(
            f"{name} has 0 feature(s) (shape={shape}) while a minimum of 1 is required: each "
            "state needs at least one coordinate"
        )


def check_state_shape(shape: tuple, expected: tuple, owner: str, name: str = "X") -> None:
    """Refuse states whose shape is not the one ``owner`` (an estimator's name) was fitted on
    (scikit-learn's wording for vector states)."""
    shape, expected = tuple(shape), tuple(expected)
    if shape == expected:
        return
    if len(shape) == 1 and len(expected) == 1:
        raise ValueError(
            f"{name} has {shape[0]} features, but {owner} is expecting {expected[0]} features "
            "as input"
        )
    raise ValueError(
        f"{name} has state shape {shape}, but {owner} is expecting states of shape {expected} "
        "(those it was fitted on)"
    )


#: Size above which states that are not in memory (memory-mapped ``.npy`` files, HDF5
#: datasets) are read batch by batch during training instead of converted to one tensor.
OUT_OF_CORE_BYTES = 2**30


def is_out_of_core(a: object) -> bool:
    """Whether ``a`` is an out-of-core array (an ``h5py.Dataset``, a zarr array, ...):
    it has ``shape``, ``dtype``, ``len`` and slicing, and is not a numpy array or tensor
    (nor a pandas object)."""
    if isinstance(a, OutOfCoreStates):
        return True
    if isinstance(a, (np.ndarray, torch.Tensor)) or hasattr(a, "iloc"):
        return False
    return all(hasattr(a, k) for k in ("shape", "dtype", "__getitem__", "__len__"))


def _memory_mapped(a: np.ndarray) -> bool:
    """Whether the array's memory is a file mapping (``np.load(mmap_mode=...)``)."""
    base: object = a
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        base = getattr(base, "base", None)
    return False


def is_read_batchwise(a: object, limit: int | None = None) -> bool:
    """Whether training reads states ``a`` batch by batch (:class:`MappedStates`): they are
    memory-mapped or out of core (:func:`is_out_of_core`) and larger than ``limit`` bytes
    (default :data:`OUT_OF_CORE_BYTES`)."""
    limit = OUT_OF_CORE_BYTES if limit is None else limit
    if not (_memory_mapped(a) if isinstance(a, np.ndarray) else is_out_of_core(a)):
        return False
    return int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize > limit  # type: ignore[attr-defined]


def read_rows(source: object, idx: object) -> np.ndarray:
    """Rows ``idx`` (any order, repeats allowed; flattened) of ``source``, an array on disk
    (memory-mapped, HDF5, or any array with slicing), as a numpy array in the order of
    ``idx``: each row read once, in increasing order (as HDF5 needs, and best for the page
    cache)."""
    flat = np.asarray(idx, dtype=np.int64).reshape(-1)
    uniq, inverse = np.unique(flat, return_inverse=True)
    rows = source[uniq] if uniq.size else source[0:0]  # type: ignore[index]
    return np.asarray(rows)[inverse]


class OutOfCoreStates:
    """Read-only states of an out-of-core array, read by slices of rows.

    Wraps an ``h5py.Dataset`` (or any object with ``shape``, ``dtype`` and slicing):
    indexing with a slice or an integer array returns a numpy array of those rows only, so
    the fits read the file one chunk at a time. ``numpy.asarray`` reads it all.

    Parameters
    ----------
    source : array-like
        The out-of-core array, shape ``(n, *state_shape)``.
    expand : bool, default False
        Present a 1-D ``source`` as ``(n, 1)`` (scalar states).
    """

    def __init__(self, source: object, expand: bool = False) -> None:
        if isinstance(source, OutOfCoreStates):
            source = source.source
        self.source = source
        self.expand = bool(expand)
        self.dtype = np.dtype(source.dtype)  # type: ignore[attr-defined]
        shape = tuple(int(s) for s in source.shape)  # type: ignore[attr-defined]
        self.shape = shape + (1,) if self.expand else shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: object) -> np.ndarray:
        if isinstance(key, slice):
            out = np.asarray(self.source[key])  # type: ignore[index]
        else:  # rows by index: h5py reads increasing, unique indices only
            out = read_rows(self.source, key)
        return out[..., None] if self.expand else out

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        out = self[0 : self.shape[0]]
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"OutOfCoreStates({type(self.source).__name__}, shape={self.shape})"

    def __deepcopy__(self, memo: dict) -> OutOfCoreStates:
        return self  # a read-only reference to the file, shared (h5py objects do not copy)


class MappedStates:
    """States on disk (memory-mapped or HDF5), indexed by batches of row indices.

    ``states[idx]`` (``idx`` a CPU integer tensor) reads the rows in increasing order (as
    HDF5 needs, and best for the page cache), applies ``transform`` in float64 and returns
    a ``dtype`` tensor on ``device`` (through pinned memory on CUDA). Only one batch is in
    memory at a time.
    """

    def __init__(
        self,
        states: object,
        device: torch.device,
        dtype: torch.dtype,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.states = states
        self.device = device
        self.dtype = dtype
        self.transform = transform
        self.shape = tuple(states.shape)  # type: ignore[attr-defined]

    def __getitem__(self, idx: torch.Tensor) -> torch.Tensor:
        part = read_rows(self.states, idx.numpy())
        if self.transform is not None:
            part = self.transform(np.asarray(part, dtype=np.float64))
        t = torch.as_tensor(part).reshape(*idx.shape, *self.shape[1:]).to(self.dtype)
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)


def chunks(n: int, size: int) -> Sequence[slice]:
    """Slices covering ``range(n)`` in chunks of ``size``."""
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


def in_memory_unless_large(states: np.ndarray | OutOfCoreStates) -> np.ndarray | OutOfCoreStates:
    """Out-of-core states larger than :data:`OUT_OF_CORE_BYTES` stay on disk (read batch by
    batch by :class:`~dpnets.batching.IndexBatcher`); smaller ones are read into memory."""
    if isinstance(states, OutOfCoreStates) and not is_read_batchwise(states.source):
        return np.asarray(states[0 : states.shape[0]])
    return states


@dataclass(frozen=True)
class Trajectories:
    """The input of ``fit``, validated and normalised once (:func:`trajectories`).

    Attributes
    ----------
    parts : tuple
        The validated trajectories (arrays, or :class:`OutOfCoreStates` kept on disk), one
        per trajectory; for pre-paired data the two arrays ``(X, Y)``; empty when streamed.
    paired : bool
        Pre-paired ``(X, Y)`` samples (a ``tuple``), not trajectories.
    streamed : Dataset, DataLoader or None
        The torch ``Dataset``/``DataLoader`` of ``(x, y)`` pairs, used as it is (not
        validated here: its batches are, as they are read).
    state_shape : tuple or None
        Shape of one state (None when streamed).
    read_batchwise : bool
        Whether training reads the states batch by batch (one trajectory, or ``(X, Y)``,
        memory-mapped or out of core and larger than :data:`OUT_OF_CORE_BYTES`:
        :func:`is_read_batchwise`).
    lazy : bool or "large"
        How out-of-core arrays were kept (see :func:`trajectories`).
    listed : bool
        Given as a ``list`` of trajectories (the error messages number them).
    """

    parts: tuple
    paired: bool = False
    streamed: object = None
    state_shape: tuple | None = None
    read_batchwise: bool = False
    lazy: bool | str = True
    listed: bool = False


def trajectories(data: object, lazy: bool | str = True) -> Trajectories:
    """Validate and normalise ``data`` as ``fit`` takes it, once: one trajectory (an array,
    a memory map, an out-of-core array), a ``list`` of trajectories, pre-paired ``(X, Y)``
    (a ``tuple``) or a torch ``Dataset``/``DataLoader`` (kept as it is).

    Every state check happens here (:func:`check_states` of each array, a list of rows
    refused by :func:`check_not_rows`, one state shape, ``X`` and ``Y`` of one length), and
    whether training reads the states batch by batch (:func:`is_read_batchwise`).

    Parameters
    ----------
    data : array, list of arrays, tuple ``(X, Y)``, Dataset or DataLoader
        The input.
    lazy : bool or "large", default True
        True: out-of-core arrays (an ``h5py.Dataset``, ...) stay on disk as
        :class:`OutOfCoreStates`; ``"large"``: only those larger than
        :data:`OUT_OF_CORE_BYTES` do (:func:`in_memory_unless_large`), as training reads
        them; False: everything is read into memory.

    Returns
    -------
    Trajectories

    Raises
    ------
    ValueError
        For NaN/inf values, mismatched shapes or lengths, a tuple that is not ``(X, Y)``,
        an empty list or a list of rows (``TypeError`` for sparse or unknown input).
    """
    if is_streaming(data):
        return Trajectories((), streamed=data, lazy=lazy)
    if is_sparse(data) or (isinstance(data, (list, tuple)) and any(map(is_sparse, data))):
        check_states(data if is_sparse(data) else next(filter(is_sparse, data)), "X")
    if isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(
                f"a tuple must be (X, Y) of paired samples, got a tuple of length {len(data)}; "
                "pass several trajectories as a list"
            )
        x, y = _checked(data[0], "X", lazy), _checked(data[1], "Y", lazy)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"X and Y have different lengths: {x.shape[0]} and {y.shape[0]}")
        if x.shape[1:] != y.shape[1:]:
            raise ValueError(
                f"X and Y have different state shapes: {x.shape[1:]} and {y.shape[1:]}"
            )
        return Trajectories((x, y), True, None, x.shape[1:], is_read_batchwise(x), lazy)
    if isinstance(data, list):
        if len(data) == 0:
            raise ValueError("empty list of trajectories")
        check_not_rows(data, "X")
        parts = tuple(_checked(t, f"trajectory {k}", lazy, True) for k, t in enumerate(data))
        shape = parts[0].shape[1:]
        for k, t in enumerate(parts):
            if t.shape[1:] != shape:
                raise ValueError(
                    f"trajectory {k} has state shape {t.shape[1:]}, trajectory 0 has {shape}"
                )
        batchwise = len(parts) == 1 and is_read_batchwise(parts[0])
        return Trajectories(parts, False, None, shape, batchwise, lazy, listed=True)
    if (
        isinstance(data, (np.ndarray, torch.Tensor))
        or hasattr(data, "__array__")
        or (is_out_of_core(data))
    ):
        traj = _checked(data, "trajectory", lazy, True)
        return Trajectories((traj,), False, None, traj.shape[1:], is_read_batchwise(traj), lazy)
    raise TypeError(
        "data must be an array (one trajectory), a list of arrays (trajectories), a tuple "
        f"(X, Y), or a torch Dataset/DataLoader; got {type(data).__name__}"
    )


def _checked(
    a: object, name: str, lazy: bool | str, trajectory: bool = False
) -> np.ndarray | OutOfCoreStates:
    """:func:`check_states` of one array, kept on disk as ``lazy`` says; a trajectory
    given as a pandas object has its index checked as a time axis
    (:func:`_check_pandas_index`)."""
    arr = check_states(a, name, lazy=bool(lazy))
    if trajectory and hasattr(a, "index") and hasattr(a, "iloc"):
        _check_pandas_index(a.index, name)
    return in_memory_unless_large(arr) if lazy == "large" else arr
