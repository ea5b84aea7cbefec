"""Training from disk (issue 17): memory-mapped ``.npy`` and HDF5 states read batch by
batch give the fit of the same states in memory, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dpnets.data
from dpnets import DPNet
from dpnets.data import MappedStates, read_batchwise
from dpnets.nn import MLP


@pytest.fixture(scope="module")
def states():
    rng = np.random.default_rng(0)
    return (np.cumsum(rng.standard_normal((2500, 3)), 0) * 0.1 + 5).astype(np.float32)


def _fit(data, **kw):
    torch.manual_seed(0)
    d = 1 if np.ndim(data) == 1 else int(np.prod(data.shape[1:]))
    net = DPNet(MLP(d, (16,), 2), epochs=2, batch_size=256, seed=0, progress=False, **kw)
    return net.fit(data, lag=2)


def _same(a, b, x):
    assert a.history_ == b.history_
    np.testing.assert_array_equal(a.transform(x), b.transform(x))


def test_memory_mapped_states_are_read_per_batch(states, tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", states)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert not read_batchwise(mapped)  # small: converted once, as arrays
    monkeypatch.setattr(dpnets.data, "OUT_OF_CORE_BYTES", 0)
    assert read_batchwise(mapped) and not read_batchwise(np.asarray(states))
    _same(_fit(mapped), _fit(states), states)
    # scalar states take the same path
    x1 = np.load(tmp_path / "x.npy", mmap_mode="r")[:, 0]
    _same(_fit(x1), _fit(np.ascontiguousarray(states[:, 0])), states[:, :1])


def test_hdf5_states_are_read_per_batch(states, tmp_path, monkeypatch):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "x.h5", "w") as fh:
        fh["x"] = states
    monkeypatch.setattr(dpnets.data, "OUT_OF_CORE_BYTES", 0)
    with h5py.File(tmp_path / "x.h5", "r") as fh:
        _same(_fit(fh["x"]), _fit(states), states)


def test_mapped_states_gather_rows_in_any_order(states):
    rows = MappedStates(states, torch.device("cpu"), torch.float64, transform=lambda a: 2 * a)
    idx = torch.tensor([[7, 3], [3, 0]])
    expected = 2 * states[idx.numpy()].astype(np.float64)
    np.testing.assert_array_equal(rows[idx].numpy(), expected)
