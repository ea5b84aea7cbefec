"""The one entry from any training input to batches: :func:`training_source`.

A :class:`TrainingSource` holds the input of a neural estimator's ``fit`` (trajectories,
pre-paired ``(X, Y)``, a Dataset or a DataLoader) as pairs or windows and hands training, in
one call (:meth:`TrainingSource.prepare`), the input standardisation (a
:class:`~dpnets.standardize.Scaling`, fitted by :func:`dpnets.standardize.fit_scaling`), the
seeded train/validation split into batchers (:mod:`dpnets.batching`) and the first two
states (:class:`Prepared`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from dpnets.batching import ConvertedLoader, split_batchers, split_loader
from dpnets.biased import rescaled_pairs
from dpnets.pairs import DatasetPairs, Pairs, fetch_pairs, lagged_pairs, resolve_lag, windows
from dpnets.standardize import Scaling, fit_scaling
from dpnets.states import check_states, chunks, is_read_batchwise, is_streaming, trajectories

__all__ = [
    "training_source",
    "TrainingSource",
    "Prepared",
]


def training_source(
    data: object, lag: int | None = None, steps: int = 0, log_weights: Any = None
) -> TrainingSource:
    """The one entry from any training input to batches: ``data`` as a neural estimator's
    ``fit`` takes it (after :func:`dpnets.base.fit_data`), checked once, as a
    :class:`TrainingSource`. Trajectories are paired at ``lag`` (default 1), or cut into
    multi-step windows of ``steps`` lags when ``steps > 0`` (:func:`~dpnets.pairs.windows`),
    or paired in rescaled time with the weights of a biased run (``log_weights``,
    :func:`dpnets.biased.rescaled_pairs`); pre-paired ``(X, Y)`` data, Datasets and
    DataLoaders are used as they are, ``lag`` only recorded
    (:func:`~dpnets.pairs.resolve_lag`). The lag the model records is ``source.lag``."""
    if steps and is_streaming(data):  # (pre-paired (X, Y): pairs.windows answers)
        raise ValueError(
            "multi-step windows (DPNet's consistency > 0, the autoencoders' n_steps) need "
            "trajectories (an array or a list of arrays); a Dataset or DataLoader holds "
            "one step"
        )
    if log_weights is None:
        return TrainingSource(data, lag, steps)
    pair_lag, model_lag = resolve_lag(data, lag)
    source = TrainingSource.of_pairs(rescaled_pairs(data, pair_lag, log_weights))
    source.lag = model_lag
    return source


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
    lag : int or None
        The lag the model records (None: unknown; samples, pre-paired data without a lag).
    out_of_core : bool
        Whether the states of the pairs are read batch by batch in training (decided once,
        when the input is normalised: :func:`~dpnets.states.trajectories`).
    """

    def __init__(self, data: object, lag: int | None = None, steps: int = 0) -> None:
        self.steps = int(steps)
        self.loader: DataLoader | None = None
        self.batch_size: int | None = None  # a plain DataLoader's own batch size
        if isinstance(data, DataLoader) and _plain_loader(data):
            # default collation in this process: fetch whole batches instead (the loader's
            # batch size, no per-sample collation)
            data, self.batch_size = data.dataset, int(data.batch_size)  # type: ignore[arg-type]
        # the one normalisation of the input (all the state checks); pairing and batching
        # work on it and never ask the states again
        traj = trajectories(data, lazy="large")
        pair_lag, self.lag = resolve_lag(traj, lag)
        self._first: np.ndarray | None = None
        if isinstance(traj.streamed, DataLoader):  # its first batch gives the state shape
            self.loader, self.pairs = traj.streamed, None
            first = next(iter(self.loader))
            self._first = check_states(torch.as_tensor(first[0])[:2], "X batch")
        elif traj.streamed is not None:
            self.pairs = DatasetPairs(traj.streamed)  # type: ignore[arg-type]
            self._first = np.asarray(fetch_pairs(self.pairs.dataset, self.pairs.indices[:2])[0])
        else:
            self.pairs = windows(traj, pair_lag, steps) if steps else lagged_pairs(traj, pair_lag)
        self.out_of_core = traj.read_batchwise
        self.state_shape = traj.state_shape or tuple(self._first.shape[1:])  # type: ignore[union-attr]

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
        source.lag, source.out_of_core = None, is_read_batchwise(p.x_states)
        source.pairs = p
        source.state_shape = tuple(p.x_states.shape[1:])
        return source

    def first(self) -> np.ndarray:
        """The initial states of the first two pairs, as given (not standardised)."""
        if self._first is None:  # (a Dataset's and a DataLoader's: read when normalised)
            p = self.pairs
            self._first = np.asarray(p.x_states[p.i[:2]])  # type: ignore[union-attr]
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
        for b in batches:  # both sides of a batch checked, then handed on
            x, y = check_states(b[0], "batch"), check_states(b[1], "batch")
            yield x
            yield y

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
            out_of_core=self.out_of_core,
        )

    def prepare(
        self,
        *,
        standardize: str | bool,
        encoder: nn.Module,
        val_fraction: float,
        batch_size: int,
        rng: torch.Generator,
        device: torch.device,
        dtype: torch.dtype,
        sharded: bool = False,
        standardize_batches: bool = True,
    ) -> Prepared:
        """Everything training takes from the source, in one call and in this order: the
        input standardisation (``standardize`` as the estimators take it, for ``encoder``:
        :func:`dpnets.standardize.fit_scaling` over :meth:`states`), the random split into
        batchers (:meth:`split`; batches standardised unless ``standardize_batches`` is
        False) and the first two states (:meth:`first`, as given)."""
        scaling = fit_scaling(standardize, encoder, self.states, self.state_shape)
        first = self.first()
        train, val, n_train = self.split(
            val_fraction=val_fraction,
            batch_size=batch_size,
            rng=rng,
            device=device,
            dtype=dtype,
            transform=scaling.apply if standardize_batches and scaling.shift is not None else None,
            sharded=sharded,
        )
        return Prepared(scaling, train, val, n_train, first, dtype, self.state_shape)


class Prepared(NamedTuple):
    """What :meth:`TrainingSource.prepare` hands to training: the input standardisation
    (a :class:`~dpnets.standardize.Scaling`), the batchers, the first two states (as
    given), the dtype of the batches and the shape of one state."""

    scaling: Scaling
    train: Any
    val: Any
    n_train: int
    first: np.ndarray
    dtype: torch.dtype  # of the batches (the encoder's)
    state_shape: tuple[int, ...]  # of one state


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
