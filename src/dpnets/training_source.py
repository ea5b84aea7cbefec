"""The one entry from any training input to batches: :func:`training_source`.

A :class:`TrainingSource` holds the input of a neural estimator's ``fit`` (trajectories,
pre-paired ``(X, Y)``, a Dataset or a DataLoader) as pairs or windows and hands training, in
one call (:meth:`TrainingSource.prepare`), the input standardisation (:func:`state_moments`,
applied by :func:`standardise`), the seeded train/validation split into batchers
(:mod:`dpnets.batching`) and the first two states (:class:`Prepared`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dpnets.batching import ConvertedLoader, split_batchers, split_loader
from dpnets.pairs import DatasetPairs, Pairs, fetch_pairs, pairs, windows
from dpnets.states import check_states, chunks

__all__ = [
    "training_source",
    "TrainingSource",
    "Prepared",
    "state_moments",
    "standardise",
]


def training_source(data: object, lag: int, steps: int = 0) -> TrainingSource:
    """The one entry from any training input to batches: a :class:`TrainingSource` of
    ``data`` paired at ``lag`` (multi-step windows of ``steps`` lags when ``steps > 0``)."""
    return TrainingSource(data, lag, steps)


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
        (:func:`~dpnets.batching.split_batchers`; a DataLoader is split into two loaders with
        its own settings, :func:`~dpnets.batching.split_loader`). Batches arrive standardised
        by ``transform`` (in float64) in ``dtype`` on ``device``; a plain DataLoader keeps its
        batch size."""
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


def standardise(x: Any, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The input standardisation ``(x - shift) / scale``, in float64."""
    return (np.asarray(x, dtype=np.float64) - shift) / scale


def _plain_loader(loader: DataLoader) -> bool:
    """A DataLoader with a batch size, default collation and no workers over a map-style
    Dataset: its batches can be fetched whole (:class:`~dpnets.batching.DatasetBatcher`)."""
    from torch.utils.data import IterableDataset, default_collate

    return (
        loader.batch_size is not None
        and loader.num_workers == 0
        and loader.collate_fn is default_collate
        and not isinstance(loader.dataset, IterableDataset)
    )
