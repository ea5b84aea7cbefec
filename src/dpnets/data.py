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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

__all__ = [
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
]


def to_numpy(a: object) -> np.ndarray:
    """Convert an array-like or torch tensor to a numpy array (no copy when possible)."""
    if isinstance(a, torch.Tensor):
        return a.detach().cpu().numpy()
    return np.asarray(a)


def check_states(a: object, name: str = "data", min_samples: int = 1) -> np.ndarray:
    """Validate an array of states of shape ``(n, *state_shape)``.

    Raises ``ValueError`` naming the problem for NaN/inf values, empty or 0-d input, or
    non-numeric data. A 1-D array is returned as ``(n, 1)``.
    """
    arr = to_numpy(a)
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(
            f"{name} is complex ({arr.dtype}); dpnets models real states: pass the real and "
            "imaginary parts as separate coordinates (e.g. np.concatenate([z.real, z.imag], "
            "axis=-1))"
        )
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise ValueError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension (samples), got a scalar")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.shape[0] < min_samples:
        raise ValueError(f"{name} has {arr.shape[0]} samples; at least {min_samples} needed")
    if np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.complexfloating):
        if not np.all(np.isfinite(arr)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise ValueError(f"{name} contains {bad} NaN or inf value(s)")
    return arr


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
    """

    x_states: np.ndarray
    y_states: np.ndarray
    i: np.ndarray
    j: np.ndarray

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
        return Pairs(self.x_states, self.y_states, self.i[idx], self.j[idx])


def _take(states: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``states[idx]``, as a view when ``idx`` is a contiguous range."""
    if idx.shape[0] > 0 and idx[-1] - idx[0] + 1 == idx.shape[0] and np.all(np.diff(idx) == 1):
        return states[int(idx[0]) : int(idx[-1]) + 1]
    return states[idx]


def pairs(data: object, lag: int = 1) -> Pairs:
    """Turn in-memory ``data`` into validated lagged :class:`Pairs`.

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
    """
    lag = check_lag(lag)
    if is_streaming(data):
        raise TypeError("a torch Dataset/DataLoader is streamed; it has no in-memory pairs")
    if isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(
                f"a tuple must be (X, Y) of paired samples, got a tuple of length {len(data)}; "
                "pass several trajectories as a list"
            )
        if lag != 1:
            raise ValueError(
                "(X, Y) pairs are already lagged: pair them at the lag you want, and give that "
                "lag to fit(..., lag=k) of a model only to record it"
            )
        x = check_states(data[0], "X")
        y = check_states(data[1], "Y")
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"X and Y have different lengths: {x.shape[0]} and {y.shape[0]}")
        if x.shape[1:] != y.shape[1:]:
            raise ValueError(
                f"X and Y have different state shapes: {x.shape[1:]} and {y.shape[1:]}"
            )
        idx = np.arange(x.shape[0], dtype=np.int64)
        return Pairs(x, y, idx, idx.copy())
    if isinstance(data, list):
        if len(data) == 0:
            raise ValueError("empty list of trajectories")
        trajs = [check_states(t, f"trajectory {k}") for k, t in enumerate(data)]
        shape = trajs[0].shape[1:]
        for k, t in enumerate(trajs):
            if t.shape[1:] != shape:
                raise ValueError(
                    f"trajectory {k} has state shape {t.shape[1:]}, trajectory 0 has {shape}"
                )
            if t.shape[0] <= lag:
                raise ValueError(
                    f"lag={lag} is not shorter than trajectory {k} (length {t.shape[0]})"
                )
        states = np.concatenate(trajs, axis=0) if len(trajs) > 1 else trajs[0]
        starts = np.cumsum([0] + [t.shape[0] for t in trajs[:-1]])
        i = np.concatenate(
            [
                s + np.arange(t.shape[0] - lag, dtype=np.int64)
                for s, t in zip(starts, trajs, strict=False)
            ]
        )
        return Pairs(states, states, i, i + lag)
    if isinstance(data, (np.ndarray, torch.Tensor)) or hasattr(data, "__array__"):
        traj = check_states(data, "trajectory")
        if traj.shape[0] <= lag:
            raise ValueError(
                f"lag={lag} is not shorter than the trajectory (length {traj.shape[0]})"
            )
        i = np.arange(traj.shape[0] - lag, dtype=np.int64)
        return Pairs(traj, traj, i, i + lag)
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
    same :class:`Pairs` states (a validation subset).
    """

    def __init__(
        self,
        p: Pairs,
        batch_size: int,
        *,
        device: torch.device,
        dtype: torch.dtype,
        shuffle: bool = True,
        generator: torch.Generator | None = None,
        transform: Callable[[np.ndarray], np.ndarray] | None = None,
        like: IndexBatcher | None = None,
    ) -> None:
        if like is not None:  # pairs of the same states: share the converted tensors
            self.x, self.y = like.x, like.y
        else:
            self.x = states_to_tensor(p.x_states, device, dtype, transform)
            self.y = (
                self.x
                if p.y_states is p.x_states
                else states_to_tensor(p.y_states, device, dtype, transform)
            )
        self.i = torch.as_tensor(p.i, device=device)
        self.j = torch.as_tensor(p.j, device=device)
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.generator = generator

    def __len__(self) -> int:
        return max(1, int(self.i.shape[0]) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = int(self.i.shape[0])
        if self.shuffle:
            perm = torch.randperm(n, generator=self.generator).to(self.i.device)
        else:
            perm = torch.arange(n, device=self.i.device)
        for b in torch.tensor_split(perm, len(self)):
            yield self.x[self.i[b]], self.y[self.j[b]]


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


def chunks(n: int, size: int) -> Sequence[slice]:
    """Slices covering ``range(n)`` in chunks of ``size``."""
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]
