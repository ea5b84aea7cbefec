"""Training from disk (issue 17): memory-mapped ``.npy`` and HDF5 states read batch by
batch give the fit of the same states in memory, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dpnets.states
from dpnets import DPNet
from dpnets.nn import MLP
from dpnets.states import MappedStates, is_read_batchwise


@pytest.fixture(scope="module")
def states():
    rng = np.random.default_rng(0)
    return (np.cumsum(rng.standard_normal((2500, 3)), 0) * 0.1 + 5).astype(np.float32)


def _fit(data, batch_size=256, **kw):
    torch.manual_seed(0)
    d = 1 if np.ndim(data) == 1 else int(np.prod(data.shape[1:]))
    net = DPNet(MLP(d, (16,), 2), epochs=2, batch_size=batch_size, seed=0, progress=False, **kw)
    return net.set_params(lag=2).fit(data)


def _same(a, b, x):
    assert a.history_ == b.history_
    np.testing.assert_array_equal(a.transform(x), b.transform(x))


def test_memory_mapped_states_are_read_per_batch(states, tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", states)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert not is_read_batchwise(mapped)  # small: converted once, as arrays
    monkeypatch.setattr(dpnets.states, "OUT_OF_CORE_BYTES", 0)
    assert is_read_batchwise(mapped) and not is_read_batchwise(np.asarray(states))
    _same(_fit(mapped), _fit(states), states)
    # scalar states take the same path
    x1 = np.load(tmp_path / "x.npy", mmap_mode="r")[:, 0]
    _same(_fit(x1), _fit(np.ascontiguousarray(states[:, 0])), states[:, :1])


def _spy_on_reads(h5py, monkeypatch) -> list[int]:
    """Record the number of rows of every read of an ``h5py.Dataset``: slicing, fancy
    indexing and ``read_direct`` (through which ``np.asarray`` reads the whole dataset)."""
    rows: list[int] = []
    getitem, read_direct = h5py.Dataset.__getitem__, h5py.Dataset.read_direct

    def spy_getitem(self, key, *args, **kwargs):
        out = getitem(self, key, *args, **kwargs)
        rows.append(int(np.shape(out)[0]) if np.ndim(out) else 1)
        return out

    def spy_read_direct(self, dest, source_sel=None, *args, **kwargs):
        sel = np.broadcast_to(np.int8(0), self.shape)
        rows.append(self.shape[0] if source_sel is None else int(np.shape(sel[source_sel])[0]))
        return read_direct(self, dest, source_sel, *args, **kwargs)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy_getitem)
    monkeypatch.setattr(h5py.Dataset, "read_direct", spy_read_direct)
    return rows


def test_hdf5_states_fit_like_in_memory(states, tmp_path, monkeypatch):
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "x.h5", "w") as fh:
        fh["x"] = states
    monkeypatch.setattr(dpnets.states, "OUT_OF_CORE_BYTES", 0)
    with h5py.File(tmp_path / "x.h5", "r") as fh:
        _same(_fit(fh["x"]), _fit(states), states)


def test_hdf5_states_are_read_per_batch(tmp_path, monkeypatch):
    h5py = pytest.importorskip("h5py")
    # more rows than one chunk of the fit's whole-data passes (standardisation: 65536 rows;
    # finiteness check: 2**22 values, 65536 rows of 64), so that a read of every row can
    # only be a copy of the whole file
    n, batch = 2**16 + 2000, 4096
    rng = np.random.default_rng(1)
    states = (np.cumsum(rng.standard_normal((n, 64)), 0) * 0.1 + 5).astype(np.float32)
    with h5py.File(tmp_path / "x.h5", "w") as fh:
        fh["x"] = states
    with h5py.File(tmp_path / "x.h5", "r") as fh:
        assert not is_read_batchwise(fh["x"])  # small: converted once, as arrays
        monkeypatch.setattr(dpnets.states, "OUT_OF_CORE_BYTES", 0)
        assert is_read_batchwise(fh["x"])
        rows = _spy_on_reads(h5py, monkeypatch)
        fitted = _fit(fh["x"], batch_size=batch)
    assert rows and max(rows) < n, f"a read of {max(rows, default=0)} of the {n} rows"
    # the training batches come from the file: at least half the data per epoch (2 epochs)
    # in reads of one batch (between batch and 2 * batch pairs)
    assert sum(r < 2 * batch for r in rows) >= 2 * (n // 2 // batch)
    _same(fitted, _fit(states, batch_size=batch), states[:1000])


def test_mapped_states_gather_rows_in_any_order(states):
    rows = MappedStates(states, torch.device("cpu"), torch.float64, transform=lambda a: 2 * a)
    idx = torch.tensor([[7, 3], [3, 0]])
    expected = 2 * states[idx.numpy()].astype(np.float64)
    np.testing.assert_array_equal(rows[idx].numpy(), expected)


def test_the_input_is_normalised_once(states, tmp_path, monkeypatch):
    """``states.trajectories`` validates the input once; pairing takes the record as it is
    (no second check) and gives the pairs of the raw input."""
    from dpnets.pairs import lagged_pairs, pair_segments, resolve_lag
    from dpnets.states import trajectories

    two = [states[:1000], states[1000:]]
    traj = trajectories(two)
    assert traj.listed and not traj.paired and traj.streamed is None
    assert traj.state_shape == (3,) and len(traj.parts) == 2 and not traj.read_batchwise
    calls = []
    check = dpnets.states.check_states
    monkeypatch.setattr(
        dpnets.states, "check_states", lambda *a, **k: calls.append(1) or check(*a, **k)
    )
    p, q = lagged_pairs(traj, 3), lagged_pairs(two, 3)
    assert len(calls) == 2  # the raw list's two trajectories; the record is not checked again
    np.testing.assert_array_equal(p.X, q.X)
    np.testing.assert_array_equal(p.Y, q.Y)
    assert len(p) == (1000 - 3) + (1500 - 3)
    assert resolve_lag(traj, None) == (1, 1)
    xy = trajectories((states[:-1], states[1:]))
    assert xy.paired and resolve_lag(xy, 4) == (1, 4)
    with pytest.raises(ValueError, match="already lagged"):
        pair_segments(xy, 2)
    with pytest.raises(ValueError) as info:
        pair_segments(trajectories([states[:2000], states[2000:]]), 1000)
    assert str(info.value) == (
        "lag=1000 is not shorter than trajectory 1 (length 500: 500 sample(s)); a pair "
        "needs lag + 1 frames: use a shorter lag, or leave that trajectory out"
    )
    np.save(tmp_path / "x.npy", states)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    monkeypatch.setattr(dpnets.states, "OUT_OF_CORE_BYTES", 0)
    assert trajectories(mapped, lazy="large").read_batchwise
    assert not trajectories([mapped, mapped]).read_batchwise  # several: concatenated


def test_nan_in_a_trajectory_names_the_trajectory_and_its_first_sample(monkeypatch):
    """The one line says which trajectory, how many values, the first sample holding one
    (also when the check reads the array in chunks of rows) and what to do."""
    x = np.random.default_rng(0).normal(size=(100, 2))
    bad = x.copy()
    bad[37, 1], bad[50] = np.nan, np.inf
    monkeypatch.setattr(dpnets.states, "_FINITE_CHUNK", 4)  # chunks of 2 rows
    with pytest.raises(ValueError) as info:
        dpnets.TransferOperator().fit([x, x, bad])
    assert str(info.value) == (
        "trajectory 2 contains 3 NaN or inf value(s) (first at sample 37, coordinate 1): "
        "missing values: a trajectory must be complete and evenly sampled; fill or "
        "interpolate the gaps (pandas' .interpolate()), or pass the pieces between them as a "
        "list of trajectories"
    )
