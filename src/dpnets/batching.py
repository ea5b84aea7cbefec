"""Mini-batches of pairs on the training device.

:func:`split_batchers` splits pairs at random into training and validation batchers:
:class:`IndexBatcher` draws mini-batches of in-memory :class:`~dpnets.pairs.Pairs` by tensor
indexing, with no per-sample collation (the states converted to a tensor once,
:func:`states_to_tensor`, or read batch by batch from disk, :class:`~dpnets.states.MappedStates`);
:class:`DatasetBatcher` fetches whole batches of a Dataset of pairs; a user's DataLoader is
split by :func:`split_loader` and its batches converted by :class:`ConvertedLoader`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from dpnets.distributed import shard
from dpnets.pairs import DatasetPairs, Pairs, fetch_pairs
from dpnets.states import MappedStates, chunks, is_read_batchwise, to_numpy

__all__ = [
    "split_batchers",
    "IndexBatcher",
    "DatasetBatcher",
    "batch_indices",
    "states_to_tensor",
    "batch_to_tensor",
    "ConvertedLoader",
    "split_loader",
]


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
    out_of_core: bool | None = None,
) -> tuple[IndexBatcher, IndexBatcher | None, int]:
    """A random train/validation split of ``p`` (``val_fraction`` of the pairs or windows
    held out) as index batchers: ``(train, val or None, n_train)``. ``p`` is in-memory
    :class:`~dpnets.pairs.Pairs` or the pairs of a Dataset (:class:`~dpnets.pairs.DatasetPairs`,
    batches fetched by :class:`DatasetBatcher`, split the same way).

    The validation batcher (batches of 8192, in order) shares the converted states of the
    training one; ``transform`` (the input standardisation) is applied once, in float64.
    ``sharded``: distributed training, each process yields its part of every batch.
    ``out_of_core``: whether the states of :class:`~dpnets.pairs.Pairs` are read batch by
    batch (None: asked of the states, :func:`~dpnets.states.is_read_batchwise`).
    """
    n = int((p.i if isinstance(p, Pairs) else p.indices).shape[0])
    perm = torch.randperm(n, generator=rng).numpy()
    n_val = int(round(float(val_fraction) * n))
    if n - n_val < 1:
        raise ValueError(f"not enough samples ({n}) for training with val_fraction={val_fraction}")
    rows_train, rows_val = np.sort(perm[n_val:]), np.sort(perm[:n_val])
    if isinstance(p, Pairs):
        batcher: Any = functools.partial(IndexBatcher, out_of_core=out_of_core)
    else:
        batcher = DatasetBatcher
    train = batcher(
        p,
        batch_size,
        rows=rows_train,
        device=device,
        dtype=dtype,
        rng=rng,
        transform=transform,
        sharded=sharded,
    )
    val = None
    if n_val > 0:
        val = batcher(
            p,
            8192,
            rows=rows_val,
            device=device,
            dtype=dtype,
            shuffle=False,
            like=train,
            sharded=sharded,
        )
    return train, val, n - n_val


class IndexBatcher:
    """Mini-batches of lagged pairs drawn by tensor indexing (no per-sample collation).

    The states are converted to a tensor once (on ``device``, in ``dtype``); each batch is
    ``(x_states[i[b]], y_states[j[b]])``. The index permutation is split into
    ``max(1, n // batch_size)`` nearly equal chunks, so every batch has at least
    ``batch_size`` samples (score estimates from tiny trailing batches are avoided).
    ``transform`` (e.g. the input standardisation) is applied once, in float64, while the
    states are converted; ``like`` reuses the converted states of another batcher over the
    same :class:`~dpnets.pairs.Pairs` states (a validation subset); ``rows`` (indices into
    the pairs) keeps only those pairs (a split). States that are not in
    memory and larger than :data:`~dpnets.states.OUT_OF_CORE_BYTES` (a memory-mapped
    ``.npy``, an HDF5 dataset; see :func:`~dpnets.states.is_read_batchwise`) are instead read
    batch by batch (:class:`~dpnets.states.MappedStates`), never copied whole;
    ``out_of_core`` forces either way. With ``sharded`` (distributed
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
        rows: np.ndarray | None = None,
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
        i, j, w = p.i, p.j, p.w
        if rows is not None:  # the pairs of a split
            i, j, w = i[rows], j[rows], None if w is None else w[rows]
        self.i = torch.as_tensor(i, device=index_device)
        self.j = torch.as_tensor(j, device=index_device)
        # pair weights (float64, normalised per batch by the scores), batches' third tensor
        self.w = None if w is None else torch.as_tensor(w, dtype=torch.float64).to(device)
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


class DatasetBatcher:
    """Mini-batches of a map-style Dataset of pairs, drawn like :class:`IndexBatcher`.

    The same permutation and split into ``max(1, n // batch_size)`` batches as
    :class:`IndexBatcher` (so a ``TensorDataset`` of the pairs gives the batches of the
    arrays; ``rows`` keeps those pairs only); each batch is fetched at once by
    :func:`~dpnets.pairs.fetch_pairs` (no
    per-sample collation for a ``TensorDataset``) and converted by :func:`batch_to_tensor`.
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
        rows: np.ndarray | None = None,
    ) -> None:
        self.dataset = p.dataset
        self.indices = p.indices if rows is None else p.indices[rows]
        self.batch_size = int(batch_size)
        self.device, self.dtype = device, dtype
        self.shuffle = shuffle
        self.rng = rng
        self.transform = transform if like is None else getattr(like, "transform", transform)
        self.sharded = bool(sharded)

    def __len__(self) -> int:
        return max(1, int(self.indices.shape[0]) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = int(self.indices.shape[0])
        for b in batch_indices(n, len(self), self.shuffle, self.rng, self.sharded):
            x, y = fetch_pairs(self.dataset, self.indices[b.numpy()])
            yield (
                batch_to_tensor(x, self.device, self.dtype, self.transform),
                batch_to_tensor(y, self.device, self.dtype, self.transform),
            )


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
