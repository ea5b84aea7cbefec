"""The one way data becomes lagged pairs.

Accepted data forms (everywhere a ``data`` argument appears):

* one trajectory: an array of shape ``(T, *state_shape)`` (a 1-D array is ``T`` scalar states);
* several trajectories: a ``list`` of such arrays; pairs never cross a trajectory boundary;
* already-paired samples: a ``tuple`` ``(X, Y)`` of two arrays of equal length;
* a ``torch.utils.data.Dataset`` or ``DataLoader`` yielding ``(x, y)`` pairs, for data that
  does not fit in memory (:class:`DatasetPairs`).

In-memory data is never copied into pairs: :class:`Pairs` (made by :func:`lagged_pairs`)
keeps the states once and two index arrays ``i, j`` (``j = i + lag`` along a trajectory),
:func:`windows` the multi-step
windows, and :func:`pair_segments` the pairs of each trajectory as contiguous segments (the
chunked fits, out-of-core data).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch.utils.data import Dataset

from dpnets.states import (
    OutOfCoreStates,
    Trajectories,
    chunks,
    in_memory_unless_large,
    is_streaming,
    trajectories,
)

__all__ = [
    "check_lag",
    "resolve_lag",
    "Pairs",
    "lagged_pairs",
    "PairSegment",
    "pair_segments",
    "windows",
    "DatasetPairs",
    "fetch_pairs",
]


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
    ``data`` may be the normalised input (:class:`~dpnets.states.Trajectories`).
    """
    if isinstance(data, Trajectories):
        prepaired = data.paired or data.streamed is not None
    else:
        prepaired = isinstance(data, tuple) or is_streaming(data)
    if prepaired:
        return 1, (None if lag is None else check_lag(lag))
    lag = 1 if lag is None else check_lag(lag)
    return lag, lag


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


def lagged_pairs(data: object, lag: int = 1) -> Pairs:
    """Turn ``data`` into validated lagged :class:`Pairs` (states referenced, not copied).

    One out-of-core trajectory (an ``h5py.Dataset``) larger than
    :data:`~dpnets.states.OUT_OF_CORE_BYTES` stays on disk as
    :class:`~dpnets.states.OutOfCoreStates`; smaller ones, and several trajectories (which
    are concatenated), are read into memory.

    Parameters
    ----------
    data : array, list of arrays, tuple ``(X, Y)``, or Trajectories
        See the module docstring. A ``tuple`` of two arrays means already-paired samples; use
        a ``list`` for several trajectories. Input already normalised by
        :func:`dpnets.states.trajectories` (``lazy="large"``) is used as it is.
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
    if not isinstance(data, Trajectories):
        data = trajectories(data, lazy="large")
    elif data.lazy is True:  # out-of-core states kept on disk only where training would
        data = replace(data, parts=tuple(map(in_memory_unless_large, data.parts)), lazy="large")
    segments = pair_segments(data, lag)
    if len(segments) == 1:
        s = segments[0]
        idx = np.arange(s.n, dtype=np.int64)
        return Pairs(s.x_states, s.y_states, s.x0 + idx, s.y0 + idx)
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
    or out of core (:class:`~dpnets.states.OutOfCoreStates`): :meth:`chunks` reads them a
    slice at a time.
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
    data : array, list of arrays, tuple ``(X, Y)``, or Trajectories
        As :func:`lagged_pairs`; the arrays may be memory-mapped (``np.load(path, mmap_mode="r")``)
        or, with ``lazy``, out-of-core arrays such as ``h5py.Dataset`` objects. Input already
        normalised (:func:`dpnets.states.trajectories`) is used as it is (``lazy`` unused).
    lag : int, default 1
        Time lag in steps between ``X`` and ``Y``. Must be 1 for pre-paired data.
    lazy : bool, default True
        Keep out-of-core arrays as :class:`~dpnets.states.OutOfCoreStates` (read chunk by
        chunk) instead of reading them into memory.

    Returns
    -------
    list of PairSegment
        In the order of the pairs of :func:`lagged_pairs` on the same data.

    Raises
    ------
    ValueError
        As :func:`lagged_pairs`.
    """
    lag = check_lag(lag)
    if isinstance(data, tuple) and len(data) == 2 and lag != 1:
        raise ValueError(_LAGGED_XY)
    traj = data if isinstance(data, Trajectories) else trajectories(data, lazy)
    if traj.streamed is not None:
        raise TypeError("a torch Dataset/DataLoader is streamed; it has no in-memory pairs")
    if traj.paired:
        if lag != 1:
            raise ValueError(_LAGGED_XY)
        x, y = traj.parts
        return [PairSegment(x, y, 0, 0, int(x.shape[0]))]
    for k, t in enumerate(traj.parts):
        if t.shape[0] <= lag:
            which = f"trajectory {k}" if traj.listed else "the trajectory"
            raise ValueError(
                f"lag={lag} is not shorter than {which} (length {t.shape[0]}: "
                f"{t.shape[0]} sample(s)); a pair needs lag + 1 frames: use a shorter lag"
                + (", or leave that trajectory out" if traj.listed else "")
            )
    return [PairSegment(t, t, 0, lag, int(t.shape[0]) - lag) for t in traj.parts]


_LAGGED_XY = (
    "(X, Y) pairs are already lagged: pair them at the lag you want, and give that "
    "lag to the model (its lag parameter) only to record it"
)


def windows(data: object, lag: int, n_steps: int) -> Pairs:
    """Multi-step windows ``(x_t, x_{t+lag}, ..., x_{t+n_steps lag})`` as :class:`Pairs`
    with a 2-D ``j`` of shape (n, n_steps), ``j[:, k] = i + (k + 1) lag``.

    Windows never cross a trajectory boundary (``lagged_pairs`` with lag ``n_steps * lag``), so the
    last ``n_steps * lag`` frames of each trajectory start no window. An
    :class:`~dpnets.batching.IndexBatcher` over them yields ``(x, ys)`` with ``ys`` of shape
    ``(batch, n_steps, *state_shape)``. Pre-paired ``(X, Y)`` data hold one step only.
    """
    if isinstance(data, tuple) or (isinstance(data, Trajectories) and data.paired):
        if n_steps != 1:
            raise ValueError(
                f"(X, Y) pairs hold one step; n_steps={n_steps} needs trajectories "
                "(an array or a list of arrays)"
            )
        p = lagged_pairs(data, 1)
        return Pairs(p.x_states, p.y_states, p.i, p.j[:, None])
    p = lagged_pairs(data, lag * n_steps)
    offsets = lag * np.arange(1, n_steps + 1, dtype=np.int64)
    return Pairs(p.x_states, p.y_states, p.i, p.i[:, None] + offsets[None, :])


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
