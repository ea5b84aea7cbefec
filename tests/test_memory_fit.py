"""Fits in O(batch) memory (issue 17): chunked float64 moments, partial_fit, no n x r
features on the model, and out-of-core inputs (memory-mapped ``.npy``, HDF5).

Ground truth: the straightforward dense computation of every estimator (all features in
memory, covariances as ``Phi^T Phi / n``), written out here as the fits did it before they
were chunked; analytic generator moments of linear features; numpy's SVD and covariances.
The chunk sizes are shrunk so that every fit runs over many chunks.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import dpnets
from dpnets import Generator, TransferOperator
from dpnets.baselines import DMD, EDMD
from dpnets.ito import SDE
from dpnets.linalg import sym_matrix_function
from dpnets.moments import Moments
from dpnets.pairs import lagged_pairs, pair_segments
from dpnets.spectral import constant_in_span
from dpnets.states import OutOfCoreStates, check_states

CHUNK = 37  # rows per chunk in these tests: many chunks, and chunks that straddle nothing


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dpnets.operators.FIT_CHUNK", CHUNK)
    monkeypatch.setattr("dpnets.baselines.dmd.FIT_CHUNK", CHUNK)
    monkeypatch.setattr("dpnets.states._FINITE_CHUNK", 50)


def _ar(n: int, d: int, seed: int, offset: float = 0.0) -> np.ndarray:
    """An AR(1) trajectory with a drifting mean (so the first chunk is not the mean)."""
    rng = np.random.default_rng(seed)
    a = np.diag(np.linspace(0.5, 0.95, d))
    x = np.zeros((n, d))
    x[0] = 3.0
    for t in range(1, n):
        x[t] = x[t - 1] @ a + rng.standard_normal(d)
    return x + offset


def _poly(s: np.ndarray) -> np.ndarray:
    """A nonlinear feature map with an offset of its own."""
    s = np.asarray(s, dtype=np.float64)
    return np.hstack([s, 0.1 * s[:, :1] ** 2, np.sin(s[:, 1:2])]) + 5.0


def dense_operator(
    phi_x: np.ndarray,
    phi_y: np.ndarray,
    y: np.ndarray,
    constant: object = "auto",
    ridge: float = 0.0,
) -> dict:
    """``TransferOperator.fit`` as it was before chunking: all features in memory."""
    n = phi_x.shape[0]
    if constant == "auto":
        constant = not constant_in_span(phi_x)
    bx, by = phi_x, phi_y
    if constant:
        shift, sd = phi_x.mean(0), phi_x.std(0)
        scale = np.where(sd > 0, sd, 1.0)
        ones = np.ones((n, 1))
        bx = np.hstack([ones, (phi_x - shift) / scale])
        by = np.hstack([ones, (phi_y - shift) / scale])
    r = bx.shape[1]
    cx, cxy, cy = bx.T @ bx / n, bx.T @ by / n, by.T @ by / n
    pinv, _ = sym_matrix_function(cx + ridge * np.eye(r), -1.0)
    return {
        "constant_": bool(constant),
        "cx_": cx,
        "cxy_": cxy,
        "cy_": cy,
        "operator_": pinv @ cxy,
        "state_coef_": pinv @ (bx.T @ y.reshape(n, -1)) / n,
        "features_mean_": bx.mean(0),
        "features_mean_y_": by.mean(0),
        "features_x_": bx,
        "pinv": pinv,
    }


def _close(a: np.ndarray, b: np.ndarray, rtol: float = 1e-10) -> None:
    """Equal to ``rtol`` relative to the largest entry (entries that vanish exactly in one
    computation are round-off in the other)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * max(np.abs(b).max(), 1e-300))


def _check_against_dense(
    op: TransferOperator, ref: dict, well_posed: bool = True, rtol: float = 1e-10
) -> None:
    """Every fitted moment to ``rtol``, and (when ``well_posed``) the operator, its
    eigenvalues and the state's coefficients, equal to the dense computation to ``rtol``
    or, for an ill-conditioned ``Cx`` (uncentred features), to ``10 cond(Cx) eps``, the
    accuracy to which the least squares determine them."""
    assert op.constant_ == ref["constant_"]
    for name in ("cx_", "cxy_", "cy_", "features_mean_", "features_mean_y_"):
        _close(getattr(op, name), ref[name], rtol)
    if well_posed:
        rtol = max(rtol, 10.0 * np.linalg.cond(ref["cx_"]) * np.finfo(np.float64).eps)
        _close(op.operator_, ref["operator_"], rtol)
        _close(op.state_coef_, ref["state_coef_"], rtol)
        ev = np.sort_complex(np.linalg.eigvals(ref["operator_"]))
        _close(np.sort_complex(op.eigvals_), ev, rtol)


def _pair_features(fmap, trajs: list[np.ndarray], lag: int):
    x = np.concatenate([t[:-lag] for t in trajs])
    y = np.concatenate([t[lag:] for t in trajs])
    return fmap(x), fmap(y), y


# --------------------------------------------------------------------------- Moments
def test_moments_match_numpy_on_offset_data_with_weights() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 3)) * [1.0, 1e-3, 5.0] + 1e6 + np.linspace(0, 4, 300)[:, None]
    b = rng.standard_normal((300, 2)) - 1e5
    w = rng.uniform(0.1, 2.0, 300)
    m = Moments([("a", "a"), ("a", "b")])
    for s in range(0, 300, 41):
        m.update({"a": a[s : s + 41], "b": b[s : s + 41]}, w[s : s + 41])
    assert m.count == 300 and m.weight == pytest.approx(w.sum(), rel=1e-14)
    mean_a = np.average(a, axis=0, weights=w)
    _close(m.mean("a"), mean_a, 1e-15)
    ca = np.cov(a.T, aweights=w, bias=True)
    _close(m.cov("a", "a"), ca, 1e-12)
    cab = ((a - mean_a) * w[:, None]).T @ (b - np.average(b, axis=0, weights=w)) / w.sum()
    _close(m.cov("a", "b"), cab, 1e-12)
    _close(m.cov("b", "a"), cab.T, 1e-12)
    # uncentred moments stay accurate: the large means enter as an outer product
    _close(m.second("a", "b"), (a * w[:, None]).T @ b / w.sum(), 1e-14)
    _close(m.second("a", "a", mean_a, mean_a), ca, 1e-12)
    with pytest.raises(ValueError, match="same number of rows"):
        m.update({"a": a[:3], "b": b[:4]})
    with pytest.raises(ValueError, match="block 'a' has 2 variables"):
        m.update({"a": a[:3, :2], "b": b[:3]})
    with pytest.raises(ValueError, match="missing block"):
        m.update({"a": a[:3]})
    with pytest.raises(ValueError, match="no samples"):
        Moments([("a", "a")]).mean("a")


# --------------------------------------------------------------------------- fit vs dense
@pytest.mark.parametrize("constant", [True, False, "auto"])
@pytest.mark.parametrize("ridge", [0.0, 1e-3])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_chunked_fit_matches_dense_identity_features(constant, ridge, offset) -> None:
    x = _ar(600, 3, seed=1, offset=offset)
    op = TransferOperator(None, ridge=ridge, constant=constant, lag=2).fit(x)
    ref = dense_operator(x[:-2], x[2:], x[2:], constant, ridge)
    # raw coordinates + 1e6 without the constant: Cx ~ 1e12 mean mean^T, an operator
    # determined only to cond(Cx) * eps; the moments themselves must still agree. With the
    # offset the dense reference is itself off by ulp(1e6) / std ~ 1e-10 (its rounded mean
    # leaves the standardised features a mean of that size; the chunked one is exactly 0)
    well_posed = bool(ref["constant_"]) or offset == 0.0
    _check_against_dense(op, ref, well_posed, rtol=1e-12 if offset == 0.0 else 2e-9)
    if ref["constant_"]:
        _close(op.feature_shift_, x[:-2].mean(0), 1e-15)
        _close(op.feature_scale_, x[:-2].std(0), 1e-10)
    assert op.n_samples_ == 598 and op.state_shape_ == (3,) and op.lag_ == 2


@pytest.mark.parametrize("constant", [True, False, "auto"])
def test_chunked_fit_matches_dense_on_trajectories_tuples_and_datasets(constant) -> None:
    trajs = [_ar(n, 2, seed=s, offset=100.0) for n, s in ((150, 2), (97, 3), (211, 4))]
    fmap = _poly
    ref = dense_operator(*_pair_features(fmap, trajs, 3), constant)
    op = TransferOperator(fmap, constant=constant, lag=3).fit(trajs)
    _check_against_dense(op, ref)
    assert op.n_samples_ == 150 + 97 + 211 - 9
    # the same pairs as an (X, Y) tuple, and as a Dataset streamed in batches
    x = np.concatenate([t[:-3] for t in trajs])
    y = np.concatenate([t[3:] for t in trajs])
    _check_against_dense(TransferOperator(fmap, constant=constant, lag=3).fit((x, y)), ref)
    ds = torch.utils.data.TensorDataset(torch.as_tensor(x), torch.as_tensor(y))
    loader = torch.utils.data.DataLoader(ds, batch_size=64)
    streamed = TransferOperator(fmap, constant=constant, lag=3).fit(loader)
    _check_against_dense(streamed, ref)
    # observables on the training samples: features recomputed from the streamed inputs
    f = np.sin(y[:, :1])
    expected = fmap(x[:4]) if not ref["constant_"] else None
    coef = ref["pinv"] @ ref["features_x_"].T @ f / len(x)
    basis = streamed.transform(x[:4])
    if expected is not None:
        _close(basis, expected, 1e-15)
    _close(streamed.predict(x[:4], 1, observable=f[:, 0]), (basis @ coef)[:, 0], 1e-9)


def test_torch_module_features_match_dense() -> None:
    x = _ar(400, 3, seed=5).astype(np.float32)
    torch.manual_seed(0)
    net = dpnets.nn.MLP(3, (16,), 4)
    op = TransferOperator(net).fit(x)
    with torch.no_grad():
        phi = net(torch.as_tensor(x)).double().numpy()
    _check_against_dense(op, dense_operator(phi[:-1], phi[1:], x[1:].astype(np.float64)), True)


# --------------------------------------------------------------------------- training features
def test_no_n_by_r_array_is_kept_and_training_observables_match_dense() -> None:
    trajs = [_ar(300, 2, seed=6), _ar(200, 2, seed=7)]
    op = TransferOperator(_poly).fit(trajs)
    n = op.n_samples_
    big = [k for k, v in vars(op).items() if isinstance(v, np.ndarray) and v.size >= n]
    assert big == []
    ref = dense_operator(*_pair_features(_poly, trajs, 1))
    _close(op.features_x_, ref["features_x_"], 1e-12)  # computed on demand
    f = np.concatenate([t[1:, :1] ** 2 for t in trajs])
    x0 = np.array([[0.5, -1.0], [2.0, 0.0]])
    coef = ref["pinv"] @ ref["features_x_"].T @ f / n
    _close(op.predict(x0, 1, observable=f), op.transform(x0) @ coef, 1e-10)
    _close(op.modes(observable=f[:, 0]), op.modes(observable=f)[:, 0], 1e-14)
    # equilibrium weights on the training inputs, chunk by chunk, against the dense formula
    k = int(np.argmin(np.abs(op.eigvals_ - 1.0)))
    assert abs(op.eigvals_[k] - 1.0) < 1e-8  # the constant is in the span
    weights = op.stationary_weights()
    u = np.real(ref["pinv"] @ np.conj(op.left_eigvecs_[:, k]))
    dense_w = ref["features_x_"] @ u / (ref["features_mean_"] @ u)
    _close(weights, dense_w, 1e-10)
    assert weights.mean() == pytest.approx(1.0, abs=1e-10)


def test_models_loaded_from_files_keep_the_clear_error(tmp_path) -> None:
    x = _ar(300, 2, seed=8)
    op = TransferOperator(None).fit(x)
    path = tmp_path / "op.pt"
    op.save(path)
    back = dpnets.load(path)
    assert back.features_x_ is None
    np.testing.assert_allclose(back.predict(x[:3], 2), op.predict(x[:3], 2), atol=1e-12)
    with pytest.raises(ValueError, match="loaded from a file"):
        back.predict(x[:3], 1, observable=x[1:, 0])
    with pytest.raises(ValueError, match="no accumulated statistics"):
        back.partial_fit(x)
    # the file holds r x r and r x d arrays only, whatever the number of samples
    assert path.stat().st_size < 20_000


def test_shuffling_dataloader_cannot_replay_training_observables() -> None:
    x = _ar(200, 2, seed=9)
    ds = torch.utils.data.TensorDataset(torch.as_tensor(x[:-1]), torch.as_tensor(x[1:]))
    loader = torch.utils.data.DataLoader(ds, batch_size=50, shuffle=True)
    op = TransferOperator(None, lag=1).fit(loader)
    _check_against_dense(op, dense_operator(x[:-1], x[1:], x[1:]))
    with pytest.raises(ValueError, match="order cannot be replayed"):
        op.predict(x[:2], 1, observable=x[1:, 0])


# --------------------------------------------------------------------------- partial_fit
def test_partial_fit_over_pieces_equals_fit_on_the_list() -> None:
    pieces = [_ar(n, 2, seed=s, offset=100.0) for n, s in ((120, 10), (90, 11), (160, 12))]
    full = TransferOperator(_poly, lag=2).fit(pieces)
    part = TransferOperator(_poly, lag=2)
    for k, piece in enumerate(pieces):
        part.partial_fit(piece)
        assert part.n_samples_ == sum(len(p) - 2 for p in pieces[: k + 1])
    assert part.lag_ == 2
    for name in ("cx_", "cxy_", "cy_", "operator_", "state_coef_", "features_mean_"):
        _close(getattr(part, name), getattr(full, name), 1e-10)
    _close(np.sort_complex(part.eigvals_), np.sort_complex(full.eigvals_), 1e-10)
    f = np.concatenate([p[2:, :1] - 100.0 for p in pieces])
    x0 = pieces[0][:3]
    _close(part.predict(x0, 2, observable=f), full.predict(x0, 2, observable=f), 1e-9)
    # an (X, Y) piece recorded at the same lag adds its pairs too
    extra = _ar(80, 2, seed=13, offset=100.0)
    part.partial_fit((extra[:-2], extra[2:]))
    ref = TransferOperator(_poly, lag=2).fit(pieces + [extra])
    _close(part.operator_, ref.operator_, 1e-10)
    # fit restarts the statistics
    part.set_params(lag=2).fit(pieces[0])
    assert part.n_samples_ == len(pieces[0]) - 2


def test_partial_fit_errors_and_atomic_pieces() -> None:
    x = _ar(100, 2, seed=14)
    op = TransferOperator(None, lag=2).partial_fit(x)
    before = op.operator_.copy()
    with pytest.raises(ValueError, match="lag=3 differs"):
        op.set_params(lag=3).partial_fit(x)
    op.set_params(lag=2)
    with pytest.raises(ValueError, match="X has 3 features, but TransferOperator is expecting"):
        op.partial_fit(_ar(50, 3, seed=1))
    bad = x.copy()
    bad[70, 1] = np.nan
    with pytest.raises(ValueError, match="1 NaN"):
        op.partial_fit(bad)
    assert op.n_samples_ == 98
    np.testing.assert_array_equal(op.operator_, before)
    net = dpnets.DPNet(dpnets.nn.MLP(2, (8,), 2), epochs=1, progress=False)
    with pytest.raises(ValueError, match="unfitted DPNet"):
        TransferOperator(net).partial_fit(x)
    with pytest.raises(ValueError, match="POD projection"):
        DMD(rank=1).partial_fit(x)
    with pytest.raises(ValueError, match="domain"):
        EDMD("chebyshev").partial_fit(x)
    # fixed dictionaries accumulate like any feature map
    a = EDMD("monomial", degree=2).partial_fit(x[:60]).partial_fit(x[60:])
    b = EDMD("monomial", degree=2).fit([x[:60], x[60:]])
    _close(a.operator_, b.operator_, 1e-10)
    c = DMD().partial_fit(x[:60]).partial_fit(x[60:])
    _close(c.operator_, DMD().fit([x[:60], x[60:]]).operator_, 1e-10)


# --------------------------------------------------------------------------- out of core
def test_memmap_and_hdf5_inputs_give_the_in_memory_operator(tmp_path) -> None:
    h5py = pytest.importorskip("h5py")
    x = _ar(500, 3, seed=15, offset=100.0).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    checked = check_states(mm, "X")
    assert np.shares_memory(checked, mm)  # validated without a copy
    with h5py.File(tmp_path / "x.h5", "w") as fh:
        fh["x"] = x
        fh["a"] = x[:200]
        fh["b"] = x[200:]
    ref = TransferOperator(_poly, lag=2).fit(x)
    with h5py.File(tmp_path / "x.h5", "r") as fh:
        lazy = check_states(fh["x"], "X", lazy=True)
        assert isinstance(lazy, OutOfCoreStates) and lazy.shape == (500, 3)
        np.testing.assert_array_equal(lazy[[4, 2, 4]], x[[4, 2, 4]])
        segs = pair_segments([fh["a"], fh["b"]], 2)
        assert [s.n for s in segs] == [198, 298]
        for data in (mm, fh["x"]):
            op = TransferOperator(_poly, lag=2).fit(data)
            for name in ("operator_", "cx_", "cxy_", "state_coef_"):
                _close(getattr(op, name), getattr(ref, name), 1e-12)
        listed = TransferOperator(_poly, lag=2).fit([fh["a"], mm[200:]])
        _close(listed.operator_, TransferOperator(_poly, lag=2).fit([x[:200], x[200:]]).operator_)
        # observables on the training samples read the HDF5 file again, chunk by chunk
        op = TransferOperator(_poly, lag=2).fit(fh["x"])
        f = x[2:, 0].astype(np.float64)
        _close(op.predict(x[:3], 1, observable=f), ref.predict(x[:3], 1, observable=f), 1e-10)
        # a copy of the model shares its training inputs (the file), it does not read them
        twin = copy.deepcopy(op)
        assert twin._train_inputs[0].x_states is op._train_inputs[0].x_states
        _close(twin.predict(x[:3], 1, observable=f), op.predict(x[:3], 1, observable=f), 0)
        # DMD's POD projection and EDMD's domain from chunks
        dmd = DMD(rank=2).fit(fh["x"])
        s = np.linalg.svd(x[:-1].astype(np.float64), compute_uv=False) / math.sqrt(499)
        _close(dmd.singular_values_, s, 1e-12)
        edmd = EDMD("chebyshev", degree=2, lag=2).fit([fh["a"], mm[200:]])
        np.testing.assert_array_equal(edmd.dictionary_.low, x.min(0).astype(np.float64))
        np.testing.assert_array_equal(edmd.dictionary_.high, x.max(0).astype(np.float64))
        # a 1-D dataset is one scalar state per frame; NaN values are counted in chunks
        fh2 = h5py.File(tmp_path / "y.h5", "w")
        bad = x[:, 0].astype(np.float64)
        bad[[7, 420]] = np.nan
        fh2["y"] = bad
        with pytest.raises(ValueError, match="trajectory contains 2 NaN"):
            TransferOperator(None).fit(fh2["y"])
        fh2["z"] = x[:, 0]
        one = TransferOperator(None).fit(fh2["z"])
        _close(one.operator_, TransferOperator(None).fit(x[:, 0]).operator_, 1e-12)
        fh2.close()


def test_check_states_counts_nonfinite_values_over_chunks() -> None:
    a = np.zeros((1000, 3))
    a[[1, 500, 999], [0, 1, 2]] = [np.nan, np.inf, -np.inf]
    with pytest.raises(ValueError, match="contains 3 NaN or inf"):
        check_states(a, "X")
    with pytest.raises(ValueError, match="X contains 3 NaN"):
        lagged_pairs((a, a), 1)


# --------------------------------------------------------------------------- Generator
def _ou() -> SDE:
    return SDE(lambda x: -x, math.sqrt(2.0), reversible=True)


@pytest.mark.parametrize("form", ["ito", "dirichlet"])
def test_generator_chunked_matches_dense_linear_moments(form) -> None:
    rng = np.random.default_rng(16)
    x = rng.standard_normal((700, 2)) + 1e3
    w = rng.uniform(0.2, 3.0, 700)
    gen = Generator(None, _ou(), form=form, batch_size=CHUNK, constant=True).fit(x, sample_weight=w)
    # dense: Ito derivative of psi(x) = x under dX = -X dt + sqrt(2) dW is -x; the
    # Dirichlet form of linear features is -I
    n = len(x)
    wn = w * n / w.sum()
    phi = np.hstack([np.ones((n, 1)), x])
    cx = (phi * wn[:, None]).T @ phi / n
    if form == "ito":
        cxd = (phi * wn[:, None]).T @ np.hstack([np.zeros((n, 1)), -x]) / n
    else:
        cxd = -np.diag([0.0, 1.0, 1.0])
    _close(gen.cx_, cx, 1e-12)
    _close(gen.cxd_, cxd, 1e-12)
    pinv, _ = sym_matrix_function(cx, -1.0)
    _close(gen.operator_, pinv @ cxd, 1e-8)
    _close(gen.state_coef_, pinv @ (phi * wn[:, None]).T @ x / n, 1e-8)
    _close(gen.sample_weight_, wn, 1e-14)
    assert not [k for k, v in vars(gen).items() if np.ndim(v) == 2 and np.shape(v)[0] == n]
    _close(gen.features_x_, phi, 1e-15)
    f = np.sin(x[:, :1] - 1e3)
    coef = pinv @ (phi * wn[:, None]).T @ f / n
    _close(gen.predict(x[:3], 0.0, observable=f), phi[:3] @ coef, 1e-8)


def test_generator_partial_fit_equals_fit_on_the_list() -> None:
    rng = np.random.default_rng(17)
    pieces = [rng.standard_normal((m, 1)) for m in (150, 90, 200)]
    weights = [rng.uniform(0.5, 1.5, len(p)) for p in pieces]
    psi = lambda s: torch.cat([s, s**2 - 1.0], dim=1)  # noqa: E731
    full = Generator(psi, _ou(), batch_size=CHUNK).fit(pieces, np.concatenate(weights))
    part = Generator(psi, _ou(), batch_size=CHUNK)
    for p, w in zip(pieces, weights, strict=True):
        part.partial_fit(p, sample_weight=w)
    for name in ("cx_", "cxd_", "operator_", "state_coef_", "sample_weight_"):
        _close(getattr(part, name), getattr(full, name), 1e-10)
    _close(np.sort_complex(part.eigvals_), np.sort_complex(full.eigvals_), 1e-10)
    np.testing.assert_allclose(np.sort(part.eigvals_.real)[::-1], [0.0, -1.0, -2.0], atol=0.15)
    with pytest.raises(ValueError, match="X has 2 features, but Generator is expecting 1"):
        part.partial_fit(rng.standard_normal((20, 2)))
