"""Input validation and the one way data becomes lagged pairs.

Accepted data forms (everywhere a ``data`` argument appears):

* one trajectory: an array of shape ``(T, *state_shape)`` (a 1-D array is ``T`` scalar states);
* several trajectories: a ``list`` of such arrays; pairs never cross a trajectory boundary;
* already-paired samples: a ``tuple`` ``(X, Y)`` of two arrays of equal length;
* a ``torch.utils.data.Dataset`` or ``DataLoader`` yielding ``(x, y)`` pairs, for data that
  does not fit in memory.

In-memory data is never copied into pairs: :class:`Pairs` keeps the states once and two
index arrays ``i, j`` (``j = i + lag`` along a trajectory), and :class:`IndexBatcher` draws
mini-batches by tensor indexing, with no per-sample collation.
"""

from __future__ import annotations

import functools
import math
import mmap
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dpnets.distributed import shard

__all__ = [
    "check_frames",
    "check_not_rows",
    "TrainingSource",
    "Prepared",
    "standardise",
    "training_source",
    "split_batchers",
    "state_moments",
    "Pairs",
    "pairs",
    "check_states",
    "check_lag",
    "is_streaming",
    "IndexBatcher",
    "to_numpy",
    "resolve_lag",
    "states_to_tensor",
    "windows",
    "chunks",
    "PairSegment",
    "pair_segments",
    "OutOfCoreStates",
    "is_out_of_core",
    "is_read_batchwise",
    "MappedStates",
    "OUT_OF_CORE_BYTES",
    "DatasetPairs",
    "DatasetBatcher",
    "fetch_pairs",
    "batch_to_tensor",
    "ConvertedLoader",
    "split_loader",
]


def _is_sparse(a: object) -> bool:
    """A scipy sparse matrix or array (refused: states are dense)."""
    import scipy.sparse

    return scipy.sparse.issparse(a)


def to_numpy(a: object) -> np.ndarray:
    """Convert an array-like or torch tensor to a numpy array (no copy when possible)."""
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    return np.asarray(a)


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
    if _is_sparse(a):
        raise TypeError(
            f"{name} is a sparse matrix; dpnets needs dense arrays of states (sparse input is "
            "not supported): convert it with .toarray()"
        )
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
        bad = _count_nonfinite(arr)
        if bad:
            raise ValueError(f"{name} contains {bad} NaN or inf value(s)")
    return arr


#: elements per chunk of the finiteness check (4 MiB of booleans)
_FINITE_CHUNK = 1 << 22


def _count_nonfinite(arr: np.ndarray | OutOfCoreStates) -> int:
    """Number of NaN/inf values, read in chunks of rows (no full-size temporary)."""
    row = int(np.prod(arr.shape[1:], dtype=np.int64))
    bad = 0
    for sl in chunks(arr.shape[0], max(1, _FINITE_CHUNK // max(row, 1))):
        part = np.asarray(arr[sl])
        finite = np.isfinite(part)
        if not finite.all():
            bad += int(finite.size - np.count_nonzero(finite))
    return bad


def is_out_of_core(a: object) -> bool:
    """Whether ``a`` is an out-of-core array (an ``h5py.Dataset``, a zarr array, ...):
    it has ``shape``, ``dtype``, ``len`` and slicing, and is not a numpy array or tensor
    (nor a pandas object)."""
    if isinstance(a, OutOfCoreStates):
        return True
    if isinstance(a, (np.ndarray, torch.Tensor)) or hasattr(a, "iloc"):
        return False
    return all(hasattr(a, k) for k in ("shape", "dtype", "__getitem__", "__len__"))


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
            idx = np.asarray(key, dtype=np.int64).reshape(-1)
            uniq, inv = np.unique(idx, return_inverse=True)
            rows = self.source[uniq] if uniq.size else self.source[0:0]  # type: ignore[index]
            out = np.asarray(rows)[inv]
        return out[..., None] if self.expand else out

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        out = self[0 : self.shape[0]]
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"OutOfCoreStates({type(self.source).__name__}, shape={self.shape})"

    def __deepcopy__(self, memo: dict) -> OutOfCoreStates:
        return self  # a read-only reference to the file, shared (h5py objects do not copy)


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


def check_lag(lag: object) -> int:
    """Validate a lag: a positive integer."""
    if isinstance(lag, bool) or not isinstance(lag, (int, np.integer)) or lag < 1:
        raise ValueError(f"lag must be a positive integer, got {lag!r}")
    return int(lag)


def resolve_lag(data: object, lag: object) -> tuple[int, int | None]:
    """``(pairing lag, model lag)`` for ``fit(data, lag)``.

    Trajectories are paired at ``lag`` (default 1), which is also the model's lag. Pre-paired
    ``(X, Y)`` tuples and Datasets are used as they are: ``lag`` then only *records* the lag
    at which the pairs were made (``None``: unknown, and timescales will ask for it).
    """
    if isinstance(data, tuple) or is_streaming(data):
        return 1, (None if lag is None else check_lag(lag))
    lag = 1 if lag is None else check_lag(lag)
    return lag, lag


def is_streaming(data: object) -> bool:
    """True for a torch ``Dataset`` or ``DataLoader`` (data consumed in batches)."""
    return isinstance(data, (Dataset, DataLoader))


@dataclass
class Pairs:
    """Lagged pairs ``(x_states[i[k]], y_states[j[k]])`` without copying the states.

    For trajectories ``x_states is y_states``; for an ``(X, Y)`` tuple they are ``X`` and ``Y``.
    ``w``: weights of the pairs (None: uniform), which the batches then carry as a third
    tensor (pairs of a biased trajectory in rescaled time, :func:`dpnets.biased.rescaled_pairs`;
    importance weights of samples).
    """

    x_states: np.ndarray
    y_states: np.ndarray
    i: np.ndarray
    j: np.ndarray
    w: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.i.shape[0])

    @property
    def state_shape(self) -> tuple[int, ...]:
        return tuple(self.x_states.shape[1:])

    @property
    def X(self) -> np.ndarray:  # noqa: N802 - paper notation
        """Materialised initial states (a view for a single trajectory)."""
        return _take(self.x_states, self.i)

    @property
    def Y(self) -> np.ndarray:  # noqa: N802 - paper notation
        """Materialised evolved states."""
        return _take(self.y_states, self.j)

    def subset(self, idx: np.ndarray) -> Pairs:
        w = None if self.w is None else self.w[idx]
        return Pairs(self.x_states, self.y_states, self.i[idx], self.j[idx], w)


def _take(states: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``states[idx]``, as a view when ``idx`` is a contiguous range."""
    if idx.shape[0] > 0 and idx[-1] - idx[0] + 1 == idx.shape[0] and np.all(np.diff(idx) == 1):
        return states[int(idx[0]) : int(idx[-1]) + 1]
    return states[idx]


def _in_memory_unless_large(states: np.ndarray | OutOfCoreStates) -> np.ndarray | OutOfCoreStates:
    """Out-of-core states larger than :data:`OUT_OF_CORE_BYTES` stay on disk (read batch by
    batch by :class:`IndexBatcher`); smaller ones are read into memory."""
    if isinstance(states, OutOfCoreStates) and not is_read_batchwise(states.source):
        return np.asarray(states[0 : states.shape[0]])
    return states


def pairs(data: object, lag: int = 1) -> Pairs:
    """Turn ``data`` into validated lagged :class:`Pairs` (states referenced, not copied).

    One out-of-core trajectory (an ``h5py.Dataset``) larger than :data:`OUT_OF_CORE_BYTES`
    stays on disk as :class:`OutOfCoreStates`; smaller ones, and several trajectories
    (which are concatenated), are read into memory.

    Parameters
    ----------
    data : array, list of arrays, or tuple ``(X, Y)``
        See the module docstring. A ``tuple`` of two arrays means already-paired samples; use
        a ``list`` for several trajectories.
    lag : int, default 1
        Time lag in steps between ``X`` and ``Y``. Must be 1 for pre-paired data.

    Raises
    ------
    ValueError
        For NaN/inf values, mismatched shapes or lengths, a non-positive lag, or a lag
        that is not shorter than a trajectory.

    See Also
    --------
    pair_segments : the same pairs per trajectory, without concatenating the trajectories
        (for the chunked fits and out-of-core data).
    """
    segments = pair_segments(data, lag, lazy=True)
    if len(segments) == 1:
        s = segments[0]
        idx = np.arange(s.n, dtype=np.int64)
        x, y = _in_memory_unless_large(s.x_states), _in_memory_unless_large(s.y_states)
        return Pairs(x, x if s.y_states is s.x_states else y, s.x0 + idx, s.y0 + idx)
    trajs = [np.asarray(s.x_states) for s in segments]
    states = np.concatenate(trajs, axis=0)
    starts = np.cumsum([0] + [t.shape[0] for t in trajs[:-1]])
    i = np.concatenate(
        [st + np.arange(s.n, dtype=np.int64) for st, s in zip(starts, segments, strict=True)]
    )
    return Pairs(states, states, i, i + (segments[0].y0 - segments[0].x0))


@dataclass(frozen=True)
class PairSegment:
    """Contiguous lagged pairs ``(x_states[x0 + k], y_states[y0 + k])`` for ``k < n``.

    One trajectory's pairs (``x_states is y_states``, ``y0 = x0 + lag``) or pre-paired
    ``(X, Y)`` samples; the states are referenced, never copied, and may be memory-mapped
    or out of core (:class:`OutOfCoreStates`): :meth:`chunks` reads them a slice at a time.
    """

    x_states: np.ndarray | OutOfCoreStates
    y_states: np.ndarray | OutOfCoreStates
    x0: int
    y0: int
    n: int

    @property
    def state_shape(self) -> tuple[int, ...]:
        return tuple(self.x_states.shape[1:])

    def chunks(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(X, Y)`` chunks of at most ``size`` pairs, in order, as numpy arrays."""
        for sl in chunks(self.n, size):
            yield (
                np.asarray(self.x_states[self.x0 + sl.start : self.x0 + sl.stop]),
                np.asarray(self.y_states[self.y0 + sl.start : self.y0 + sl.stop]),
            )

    def x_chunks(self, size: int) -> Iterator[np.ndarray]:
        """The initial states ``X`` in chunks of at most ``size``, in order."""
        for sl in chunks(self.n, size):
            yield np.asarray(self.x_states[self.x0 + sl.start : self.x0 + sl.stop])

    def __deepcopy__(self, memo: dict) -> PairSegment:
        return self  # a reference to the states, never a copy (they may be a large file)


def pair_segments(data: object, lag: int = 1, lazy: bool = True) -> list[PairSegment]:
    """Validated lagged pairs of in-memory or out-of-core ``data``, one segment per
    trajectory (nothing is concatenated or copied).

    Parameters
    ----------
    data : array, list of arrays, or tuple ``(X, Y)``
        As :func:`pairs`; the arrays may be memory-mapped (``np.load(path, mmap_mode="r")``)
        or, with ``lazy``, out-of-core arrays such as ``h5py.Dataset`` objects.
    lag : int, default 1
        Time lag in steps between ``X`` and ``Y``. Must be 1 for pre-paired data.
    lazy : bool, default True
        Keep out-of-core arrays as :class:`OutOfCoreStates` (read chunk by chunk) instead
        of reading them into memory.

    Returns
    -------
    list of PairSegment
        In the order of the pairs of :func:`pairs` on the same data.

    Raises
    ------
    ValueError
        As :func:`pairs`.
    """
    lag = check_lag(lag)
    if is_streaming(data):
        raise TypeError("a torch Dataset/DataLoader is streamed; it has no in-memory pairs")
    if _is_sparse(data) or (isinstance(data, (list, tuple)) and any(map(_is_sparse, data))):
        check_states(data if _is_sparse(data) else next(filter(_is_sparse, data)), "X")
    if isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(
                f"a tuple must be (X, Y) of paired samples, got a tuple of length {len(data)}; "
                "pass several trajectories as a list"
            )
        if lag != 1:
            raise ValueError(
                "(X, Y) pairs are already lagged: pair them at the lag you want, and give that "
                "lag to the model (its lag parameter) only to record it"
            )
        x = check_states(data[0], "X", lazy=lazy)
        y = check_states(data[1], "Y", lazy=lazy)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"X and Y have different lengths: {x.shape[0]} and {y.shape[0]}")
        if x.shape[1:] != y.shape[1:]:
            raise ValueError(
                f"X and Y have different state shapes: {x.shape[1:]} and {y.shape[1:]}"
            )
        return [PairSegment(x, y, 0, 0, int(x.shape[0]))]
    if isinstance(data, list):
        if len(data) == 0:
            raise ValueError("empty list of trajectories")
        check_not_rows(data, "X")
        trajs = [check_states(t, f"trajectory {k}", lazy=lazy) for k, t in enumerate(data)]
        shape = trajs[0].shape[1:]
        for k, t in enumerate(trajs):
            if t.shape[1:] != shape:
                raise ValueError(
                    f"trajectory {k} has state shape {t.shape[1:]}, trajectory 0 has {shape}"
                )
            if t.shape[0] <= lag:
                raise ValueError(
                    f"lag={lag} is not shorter than trajectory {k} (length {t.shape[0]}: "
                    f"{t.shape[0]} sample(s)); a pair needs lag + 1 frames"
                )
        return [PairSegment(t, t, 0, lag, int(t.shape[0]) - lag) for t in trajs]
    if (
        isinstance(data, (np.ndarray, torch.Tensor))
        or hasattr(data, "__array__")
        or is_out_of_core(data)
    ):
        traj = check_states(data, "trajectory", lazy=lazy)
        if traj.shape[0] <= lag:
            raise ValueError(
                f"lag={lag} is not shorter than the trajectory (length {traj.shape[0]}: "
                f"{traj.shape[0]} sample(s)); a pair needs lag + 1 frames"
            )
        return [PairSegment(traj, traj, 0, lag, int(traj.shape[0]) - lag)]
    raise TypeError(
        "data must be an array (one trajectory), a list of arrays (trajectories), a tuple "
        f"(X, Y), or a torch Dataset/DataLoader; got {type(data).__name__}"
    )


def windows(data: object, lag: int, n_steps: int) -> Pairs:
    """Multi-step windows ``(x_t, x_{t+lag}, ..., x_{t+n_steps lag})`` as :class:`Pairs`
    with a 2-D ``j`` of shape (n, n_steps), ``j[:, k] = i + (k + 1) lag``.

    Windows never cross a trajectory boundary (``pairs`` with lag ``n_steps * lag``), so the
    last ``n_steps * lag`` frames of each trajectory start no window. An
    :class:`IndexBatcher` over them yields ``(x, ys)`` with ``ys`` of shape
    ``(batch, n_steps, *state_shape)``. Pre-paired ``(X, Y)`` data hold one step only.
    """
    if isinstance(data, tuple):
        if n_steps != 1:
            raise ValueError(
                f"(X, Y) pairs hold one step; n_steps={n_steps} needs trajectories "
                "(an array or a list of arrays)"
            )
        p = pairs(data, 1)
        return Pairs(p.x_states, p.y_states, p.i, p.j[:, None])
    p = pairs(data, lag * n_steps)
    offsets = lag * np.arange(1, n_steps + 1, dtype=np.int64)
    return Pairs(p.x_states, p.y_states, p.i, p.i[:, None] + offsets[None, :])


class IndexBatcher:
    """Mini-batches of lagged pairs drawn by tensor indexing (no per-sample collation).

    The states are converted to a tensor once (on ``device``, in ``dtype``); each batch is
    ``(x_states[i[b]], y_states[j[b]])``. The index permutation is split into
    ``max(1, n // batch_size)`` nearly equal chunks, so every batch has at least
    ``batch_size`` samples (score estimates from tiny trailing batches are avoided).
    ``transform`` (e.g. the input standardisation) is applied once, in float64, while the
    states are converted; ``like`` reuses the converted states of another batcher over the
    same :class:`Pairs` states (a validation subset). States that are not in memory and
    larger than :data:`OUT_OF_CORE_BYTES` (a memory-mapped ``.npy``, an HDF5 dataset; see
    :func:`is_read_batchwise`) are instead read batch by batch (:class:`MappedStates`), never
    copied whole; ``out_of_core`` forces either way. With ``sharded`` (distributed
    training, :mod:`dpnets.distributed`) every process draws the same global batches (the
    same ``rng`` state) and yields only its own part of each.
    """

    def __init__(
        self,
        p: Pairs,
        batch_size: int,
        *,
        device: torch.device,
        dtype: torch.dtype,
        shuffle: bool = True,
        rng: torch.Generator | None = None,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
        like: IndexBatcher | None = None,
        sharded: bool = False,
        out_of_core: bool | None = None,
    ) -> None:
        if out_of_core is None:
            out_of_core = like.out_of_core if like is not None else is_read_batchwise(p.x_states)
        self.out_of_core = bool(out_of_core)
        convert = MappedStates if self.out_of_core else states_to_tensor
        if like is not None:  # pairs of the same states: share the converted tensors
            self.x, self.y = like.x, like.y
        else:
            self.x = convert(p.x_states, device, dtype, transform)
            self.y = (
                self.x
                if p.y_states is p.x_states
                else convert(p.y_states, device, dtype, transform)
            )
        index_device = torch.device("cpu") if self.out_of_core else device
        self.i = torch.as_tensor(p.i, device=index_device)
        self.j = torch.as_tensor(p.j, device=index_device)
        # pair weights (float64, normalised per batch by the scores), batches' third tensor
        self.w = None if p.w is None else torch.as_tensor(p.w, dtype=torch.float64).to(device)
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.rng = rng
        self.sharded = bool(sharded)

    def __len__(self) -> int:
        return max(1, int(self.i.shape[0]) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = int(self.i.shape[0])
        batches = batch_indices(n, len(self), self.shuffle, self.rng, self.sharded, self.i.device)
        for b in batches:
            if self.w is None:
                yield self.x[self.i[b]], self.y[self.j[b]]
            else:
                yield self.x[self.i[b]], self.y[self.j[b]], self.w[b.to(self.w.device)]


def batch_indices(
    n: int,
    n_batches: int,
    shuffle: bool,
    rng: torch.Generator | None,
    sharded: bool = False,
    device: torch.device | None = None,
) -> Iterator[torch.Tensor]:
    """The batches of one epoch over ``n`` items, as CPU index tensors: a permutation
    (``shuffle``, drawn from ``rng``) or ``0..n-1`` split into ``n_batches`` nearly
    equal parts; with ``sharded`` this process's part of each (:func:`dpnets.distributed.shard`).
    The permutation is moved to ``device`` once per epoch; to a CUDA device from pinned
    memory without blocking, so an epoch's batches never wait for the host."""
    perm = torch.randperm(n, generator=rng) if shuffle else torch.arange(n)
    if device is not None and device.type == "cuda":
        perm = perm.pin_memory().to(device, non_blocking=True)
    elif device is not None:
        perm = perm.to(device)
    for b in torch.tensor_split(perm, n_batches):
        yield shard(b) if sharded else b


class DatasetPairs:
    """The ``(x, y)`` pairs of a map-style torch ``Dataset``, restricted to ``indices``
    (all by default): the Dataset counterpart of :class:`Pairs` for the train/validation
    split."""

    def __init__(self, dataset: Dataset, indices: np.ndarray | None = None) -> None:
        self.dataset = dataset
        n = len(dataset)  # type: ignore[arg-type]
        self.indices = np.arange(n, dtype=np.int64) if indices is None else indices

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def subset(self, idx: np.ndarray) -> DatasetPairs:
        return DatasetPairs(self.dataset, self.indices[idx])


def fetch_pairs(dataset: Dataset, idx: np.ndarray) -> tuple[object, object]:
    """The batch ``(x, y)`` of items ``idx`` of a map-style Dataset of pairs: one tensor
    index per field for a ``TensorDataset``, one ``__getitems__`` call where the Dataset has
    it, else the items collated by torch's ``default_collate``."""
    from torch.utils.data import TensorDataset, default_collate

    if isinstance(dataset, TensorDataset):
        sel = torch.as_tensor(idx)
        batch: object = tuple(t[sel] for t in dataset.tensors)
    elif callable(getattr(dataset, "__getitems__", None)):
        batch = default_collate(dataset.__getitems__(idx.tolist()))  # type: ignore[attr-defined]
    else:
        batch = default_collate([dataset[int(k)] for k in idx])
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError("a Dataset for fit must yield (x, y) pairs of states")
    return batch[0], batch[1]


def batch_to_tensor(
    a: object,
    device: torch.device,
    dtype: torch.dtype,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
) -> torch.Tensor:
    """One batch of states as a ``dtype`` tensor on ``device``, through ``transform`` in
    float64 (as :func:`states_to_tensor` converts whole arrays: the same numbers)."""
    if transform is not None:
        a = transform(np.asarray(to_numpy(a), dtype=np.float64))
    t = torch.as_tensor(a)
    if t.dtype != dtype:
        t = t.to(dtype)
    return t.to(device, non_blocking=True)


class DatasetBatcher:
    """Mini-batches of a map-style Dataset of pairs, drawn like :class:`IndexBatcher`.

    The same permutation and split into ``max(1, n // batch_size)`` batches as
    :class:`IndexBatcher` (so a ``TensorDataset`` of the pairs gives the batches of the
    arrays); each batch is fetched at once by :func:`fetch_pairs` (no per-sample collation
    for a ``TensorDataset``) and converted by :func:`batch_to_tensor`.
    """

    out_of_core = False

    def __init__(
        self,
        p: DatasetPairs,
        batch_size: int,
        *,
        device: torch.device,
        dtype: torch.dtype,
        shuffle: bool = True,
        rng: torch.Generator | None = None,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
        like: object = None,
        sharded: bool = False,
    ) -> None:
        self.p = p
        self.batch_size = int(batch_size)
        self.device, self.dtype = device, dtype
        self.shuffle = shuffle
        self.rng = rng
        self.transform = transform if like is None else getattr(like, "transform", transform)
        self.sharded = bool(sharded)

    def __len__(self) -> int:
        return max(1, len(self.p) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.p)
        for b in batch_indices(n, len(self), self.shuffle, self.rng, self.sharded):
            x, y = fetch_pairs(self.p.dataset, self.p.indices[b.numpy()])
            yield (
                batch_to_tensor(x, self.device, self.dtype, self.transform),
                batch_to_tensor(y, self.device, self.dtype, self.transform),
            )


class ConvertedLoader:
    """A ``DataLoader`` of pairs whose batches are converted by :func:`batch_to_tensor`."""

    def __init__(
        self,
        loader: DataLoader,
        device: torch.device,
        dtype: torch.dtype,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.loader = loader
        self.device, self.dtype, self.transform = device, dtype, transform

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for batch in self.loader:
            yield (
                batch_to_tensor(batch[0], self.device, self.dtype, self.transform),
                batch_to_tensor(batch[1], self.device, self.dtype, self.transform),
            )


def split_loader(
    loader: DataLoader, val_fraction: float, rng: torch.Generator
) -> tuple[DataLoader, DataLoader | None, int]:
    """A user's DataLoader of pairs split at random into training and validation loaders
    ``(train, val or None, n_train)`` with its settings (batch size, workers, collate
    function, pinned memory); the training loader shuffles with ``rng``. A loader
    over an ``IterableDataset`` or with its own batch sampler cannot be split: it is
    returned as it is, without validation (with a warning when ``val_fraction > 0``)."""
    import warnings

    from torch.utils.data import IterableDataset, Subset

    ds = loader.dataset
    if isinstance(ds, IterableDataset) or loader.batch_size is None:
        if val_fraction > 0:
            warnings.warn(
                "this DataLoader (an IterableDataset, or its own batch_sampler) cannot be "
                "split: training without validation; pass the Dataset, or a DataLoader with "
                "batch_size, to hold out val_fraction of the pairs",
                stacklevel=4,
            )
        return loader, None, len(ds)  # type: ignore[arg-type]
    n = len(ds)  # type: ignore[arg-type]
    perm = torch.randperm(n, generator=rng).numpy()
    n_val = int(round(float(val_fraction) * n))
    if n - n_val < 1:
        raise ValueError(f"not enough samples ({n}) for training with val_fraction={val_fraction}")
    settings = {
        "batch_size": loader.batch_size,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        settings["prefetch_factor"] = loader.prefetch_factor
    train = DataLoader(
        Subset(ds, np.sort(perm[n_val:]).tolist()),
        shuffle=True,
        generator=rng,
        drop_last=loader.drop_last,
        **settings,
    )
    val = None
    if n_val > 0:
        val = DataLoader(Subset(ds, np.sort(perm[:n_val]).tolist()), shuffle=False, **settings)
    return train, val, n - n_val


#: Size above which states that are not in memory (memory-mapped ``.npy`` files, HDF5
#: datasets) are read batch by batch during training instead of converted to one tensor.
OUT_OF_CORE_BYTES = 2**30


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
        flat = idx.reshape(-1).numpy()
        rows, inverse = np.unique(flat, return_inverse=True)
        part = np.asarray(self.states[rows])[inverse]  # type: ignore[index]
        if self.transform is not None:
            part = self.transform(np.asarray(part, dtype=np.float64))
        t = torch.as_tensor(part).reshape(*idx.shape, *self.shape[1:]).to(self.dtype)
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)


def states_to_tensor(
    a: np.ndarray,
    device: torch.device,
    dtype: torch.dtype,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
    chunk: int = 65536,
) -> torch.Tensor:
    """States as a ``dtype`` tensor on ``device``; integer and bool states are cast too.

    With ``transform`` the states are converted chunk by chunk through it in float64, so a
    large offset or scale (``x + 1e6``) is removed before rounding to ``dtype`` and no
    float64 copy of the whole array is made.
    """
    if transform is None:
        t = torch.as_tensor(a)
        if t.dtype != dtype and not t.is_complex():
            t = t.to(dtype)
        return t.to(device)
    out = torch.empty(a.shape, dtype=dtype, device=device)
    for sl in chunks(a.shape[0], chunk):
        part = transform(np.asarray(a[sl], dtype=np.float64))
        out[sl] = torch.as_tensor(part).to(device=device, dtype=dtype)
    return out


def split_batchers(
    p: Pairs | DatasetPairs,
    *,
    val_fraction: float,
    batch_size: int,
    rng: torch.Generator,
    device: torch.device,
    dtype: torch.dtype,
    transform: Callable[[Any], Any] | None = None,
    sharded: bool = False,
) -> tuple[IndexBatcher, IndexBatcher | None, int]:
    """A random train/validation split of ``p`` (``val_fraction`` of the pairs or windows
    held out) as index batchers: ``(train, val or None, n_train)``. ``p`` is in-memory
    :class:`~dpnets.data.Pairs` or the pairs of a Dataset (:class:`~dpnets.data.DatasetPairs`,
    batches fetched by :class:`~dpnets.data.DatasetBatcher`, split the same way).

    The validation batcher (batches of 8192, in order) shares the converted states of the
    training one; ``transform`` (the input standardisation) is applied once, in float64.
    ``sharded``: distributed training, each process yields its part of every batch.
    """
    n = len(p)
    perm = torch.randperm(n, generator=rng).numpy()
    n_val = int(round(float(val_fraction) * n))
    if n - n_val < 1:
        raise ValueError(f"not enough samples ({n}) for training with val_fraction={val_fraction}")
    p_train, p_val = p.subset(np.sort(perm[n_val:])), p.subset(np.sort(perm[:n_val]))
    batcher = IndexBatcher if isinstance(p, Pairs) else DatasetBatcher
    train = batcher(
        p_train,
        batch_size,
        device=device,
        dtype=dtype,
        rng=rng,
        transform=transform,
        sharded=sharded,
    )
    val = None
    if n_val > 0:
        val = batcher(
            p_val, 8192, device=device, dtype=dtype, shuffle=False, like=train, sharded=sharded
        )
    return train, val, len(p_train)


def state_moments(
    parts: Iterable[np.ndarray], axes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 mean and standard deviation over ``axes`` in one pass over chunks of states.

    Sums are taken around the first chunk's mean, so a large offset (``x + 1e6``) does not
    cancel the variance away, and in units of the first chunk's spread, so that states of
    tiny or huge scale (``1e-300 x``, ``1e300 x``) neither underflow nor overflow; nothing
    but the current chunk is held in memory.
    """
    total, pilot, unit, s1, s2 = 0, None, None, 0.0, 0.0
    for part in parts:
        part = np.asarray(part, dtype=np.float64)
        if pilot is None:
            pilot = part.mean(axis=axes, keepdims=True)
            if not np.all(np.isfinite(pilot)):  # |x| near the float64 limit: mean of x / 2
                pilot = (part / 2).mean(axis=axes, keepdims=True) * 2
            unit = np.abs(part - pilot).max(axis=axes, keepdims=True)
            unit = np.where(np.isfinite(unit) & (unit > 0), unit, 1.0)
        d = (part - pilot) / unit
        s1 = s1 + d.sum(axis=axes, keepdims=True)
        s2 = s2 + (d * d).sum(axis=axes, keepdims=True)
        total += part.size // pilot.size
    mean = s1 / total
    std = np.sqrt(np.maximum(s2 / total - mean * mean, 0.0)) * unit
    return (pilot + mean * unit)[0], std[0]


def _plain_loader(loader: DataLoader) -> bool:
    """A DataLoader with a batch size, default collation and no workers over a map-style
    Dataset: its batches can be fetched whole (:class:`DatasetBatcher`)."""
    from torch.utils.data import IterableDataset, default_collate

    return (
        loader.batch_size is not None
        and loader.num_workers == 0
        and loader.collate_fn is default_collate
        and not isinstance(loader.dataset, IterableDataset)
    )


class TrainingSource:
    """Any input a neural estimator trains on, as one source of batches.

    Built once by :func:`training_source` from what ``fit`` takes: trajectories (arrays,
    lists, memory-mapped or HDF5 states) paired at a lag or cut into multi-step windows,
    pre-paired ``(X, Y)``, a map-style ``Dataset`` of pairs, or a ``DataLoader``. It offers
    the three things training needs, in this order: :meth:`states` (a pass over the
    training states, for the input standardisation), :meth:`split` (the random
    train/validation split into batchers) and :meth:`first` (two states, to size and check
    the encoder); :meth:`prepare` hands over all three in one call.

    Attributes
    ----------
    state_shape : tuple
        Shape of one state.
    pairs : Pairs, DatasetPairs or None
        The index pairs (or windows) of in-memory data and Datasets; None for a
        DataLoader that is used as it is.
    steps : int
        Multi-step windows of ``steps`` lags (0: pairs).
    """

    def __init__(self, data: object, lag: int, steps: int = 0) -> None:
        self.steps = int(steps)
        self.loader: DataLoader | None = None
        self.batch_size: int | None = None  # a plain DataLoader's own batch size
        if isinstance(data, DataLoader) and _plain_loader(data):
            # default collation in this process: fetch whole batches instead (the loader's
            # batch size, no per-sample collation)
            data, self.batch_size = data.dataset, int(data.batch_size)  # type: ignore[arg-type]
        if isinstance(data, DataLoader):
            self.loader, self.pairs = data, None
        elif isinstance(data, Dataset):
            self.pairs = DatasetPairs(data)
        else:
            self.pairs = windows(data, lag, steps) if steps else pairs(data, lag)
        self._first: np.ndarray | None = None
        self.state_shape = tuple(self.first().shape[1:])

    @classmethod
    def of_samples(cls, x: np.ndarray, weights: np.ndarray | None = None) -> TrainingSource:
        """Samples ``x`` of a distribution (no pairs: the generator objectives), as a
        source whose "pairs" are ``(x_k, x_k)``, weighted by ``weights`` when given."""
        idx = np.arange(x.shape[0], dtype=np.int64)
        return cls.of_pairs(Pairs(x, x, idx, idx, weights))

    @classmethod
    def of_pairs(cls, p: Pairs) -> TrainingSource:
        """A source of pairs already indexed (weighted pairs in rescaled time,
        :func:`dpnets.biased.rescaled_pairs`; samples, :meth:`of_samples`)."""
        source = cls.__new__(cls)
        source.loader, source.batch_size, source._first, source.steps = None, None, None, 0
        source.pairs = p
        source.state_shape = tuple(p.x_states.shape[1:])
        return source

    def first(self) -> np.ndarray:
        """The initial states of the first two pairs, as given (not standardised)."""
        if self._first is None:
            p = self.pairs
            if isinstance(p, Pairs):
                self._first = np.asarray(p.x_states[p.i[:2]])
            elif isinstance(p, DatasetPairs):
                self._first = np.asarray(fetch_pairs(p.dataset, p.indices[:2])[0])
            else:
                first = next(iter(self.loader))  # type: ignore[arg-type]
                self._first = check_states(torch.as_tensor(first[0])[:2], "X batch")
        return self._first

    def states(self) -> Iterator[np.ndarray]:
        """The training states (both sides of the pairs where they differ), in chunks."""
        p = self.pairs
        if isinstance(p, Pairs):
            arrays = [p.x_states] if p.y_states is p.x_states else [p.x_states, p.y_states]
            for a in arrays:
                for sl in chunks(a.shape[0], 65536):
                    yield a[sl]
            return
        if isinstance(p, DatasetPairs):  # batched fetches (no per-sample collation)
            n = len(p.dataset)  # type: ignore[arg-type]
            idx = np.arange(n, dtype=np.int64)
            batches: Iterable[Any] = (fetch_pairs(p.dataset, idx[sl]) for sl in chunks(n, 8192))
        else:
            batches = self.loader  # type: ignore[assignment]
        for b in batches:
            for k in (0, 1):
                yield check_states(b[k], "batch")

    def split(
        self,
        *,
        val_fraction: float,
        batch_size: int,
        rng: torch.Generator,
        device: torch.device,
        dtype: torch.dtype,
        transform: Callable[[Any], Any] | None = None,
        sharded: bool = False,
    ) -> tuple[Any, Any, int]:
        """The random train/validation split as batchers ``(train, val or None, n_train)``
        (:func:`split_batchers`; a DataLoader is split into two loaders with its own
        settings, :func:`split_loader`). Batches arrive standardised by ``transform``
        (in float64) in ``dtype`` on ``device``; a plain DataLoader keeps its batch size."""
        if self.pairs is None:
            train, val, n_train = split_loader(self.loader, float(val_fraction), rng)
            train = ConvertedLoader(train, device, dtype, transform)
            val = None if val is None else ConvertedLoader(val, device, dtype, transform)
            return train, val, n_train
        return split_batchers(
            self.pairs,
            val_fraction=val_fraction,
            batch_size=self.batch_size or batch_size,
            rng=rng,
            device=device,
            dtype=dtype,
            transform=transform,
            sharded=sharded,
        )

    def prepare(
        self,
        *,
        standardize: str,
        val_fraction: float,
        batch_size: int,
        rng: torch.Generator,
        device: torch.device,
        dtype: torch.dtype,
        sharded: bool = False,
        standardize_batches: bool = True,
    ) -> Prepared:
        """Everything training takes from the source, in one call and in this order: the
        input standardisation (``standardize``: ``"coordinate"``, ``"global"`` or
        ``"none"``; float64 mean and spread of the training states, :func:`state_moments`),
        the random split into batchers (:meth:`split`; batches standardised unless
        ``standardize_batches`` is False) and the first two states (:meth:`first`, as
        given)."""
        shift = scale = transform = None
        if standardize != "none":
            ndim = len(self.state_shape)
            axes = tuple(range(ndim + 1)) if standardize == "global" else (0,)
            shift, std = state_moments(self.states(), axes)
            scale = np.where(np.isfinite(std) & (std > 0), std, 1.0)
            if standardize_batches:
                transform = functools.partial(standardise, shift=shift, scale=scale)
        train, val, n_train = self.split(
            val_fraction=val_fraction,
            batch_size=batch_size,
            rng=rng,
            device=device,
            dtype=dtype,
            transform=transform,
            sharded=sharded,
        )
        return Prepared(shift, scale, train, val, n_train, self.first())


class Prepared(NamedTuple):
    """What :meth:`TrainingSource.prepare` hands to training: the standardisation
    (``shift``, ``scale``; None without), the batchers and the first two states."""

    shift: np.ndarray | None
    scale: np.ndarray | None
    train: Any
    val: Any
    n_train: int
    first: np.ndarray


def standardise(x: Any, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The input standardisation ``(x - shift) / scale``, in float64."""
    return (np.asarray(x, dtype=np.float64) - shift) / scale


def training_source(data: object, lag: int, steps: int = 0) -> TrainingSource:
    """The one entry from any training input to batches: a :class:`TrainingSource` of
    ``data`` paired at ``lag`` (multi-step windows of ``steps`` lags when ``steps > 0``)."""
    return TrainingSource(data, lag, steps)


def chunks(n: int, size: int) -> Sequence[slice]:
    """Slices covering ``range(n)`` in chunks of ``size``."""
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]
