"""SchNet encoder: invariances, cutoff, batching, registry round trip, DPNet on positions."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from dpnets.nn.registry import build, describe  # noqa: E402
from dpnets.nn.schnet import DenseRadiusGraph, SchNetEncoder  # noqa: E402

Z = [6, 6, 8, 7, 6, 6, 6, 8, 7, 6]


def _rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    enc = SchNetEncoder(Z, out_dim=16).double().eval()
    return enc


def _positions(rng, b=4, n=10):
    return rng.normal(scale=1.6, size=(b, n, 3))


def test_output_shape_and_config(encoder):
    x = torch.as_tensor(_positions(np.random.default_rng(0)))
    out = encoder(x)
    assert out.shape == (4, 16)
    assert torch.isfinite(out).all()
    assert encoder(x[0]).shape == (16,)
    assert encoder.config["atomic_numbers"] == Z
    assert encoder.config["cutoff"] == 5.0


def test_rotation_translation_invariance(encoder):
    rng = np.random.default_rng(1)
    x = _positions(rng)
    q = _rotation(rng)
    y = x @ q.T + rng.normal(scale=10.0, size=(4, 1, 3))
    a = encoder(torch.as_tensor(x))
    b = encoder(torch.as_tensor(y))
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_permutation_invariance(encoder):
    rng = np.random.default_rng(2)
    x = _positions(rng)
    perm = rng.permutation(len(Z))
    permuted = SchNetEncoder([Z[i] for i in perm], out_dim=16).double().eval()
    state = {k: v for k, v in encoder.state_dict().items() if k != "atomic_numbers"}
    permuted.load_state_dict(state, strict=False)
    a = encoder(torch.as_tensor(x))
    b = permuted(torch.as_tensor(x[:, perm]))
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    # a permutation of the positions alone (not of the species) changes the features
    c = encoder(torch.as_tensor(x[:, perm]))
    assert not torch.allclose(a, c, atol=1e-6)


def test_cutoff_decouples_distant_fragments(encoder):
    """Rotating a fragment farther than the cutoff from the rest leaves the features alone."""
    rng = np.random.default_rng(3)
    x = rng.normal(scale=0.8, size=(1, len(Z), 3))
    x[:, 5:] += np.array([20.0, 0.0, 0.0])
    y = x.copy()
    frag = y[0, 5:]
    y[0, 5:] = (frag - frag.mean(0)) @ _rotation(rng).T + frag.mean(0)
    a = encoder(torch.as_tensor(x))
    b = encoder(torch.as_tensor(y))
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    # within the cutoff the same rotation changes the features
    x2, y2 = x.copy(), y.copy()
    x2[:, 5:] -= np.array([18.5, 0.0, 0.0])
    y2[:, 5:] -= np.array([18.5, 0.0, 0.0])
    assert not torch.allclose(encoder(torch.as_tensor(x2)), encoder(torch.as_tensor(y2)))


def test_batch_equals_single(encoder):
    x = torch.as_tensor(_positions(np.random.default_rng(4), b=5))
    batched = encoder(x)
    single = torch.stack([encoder(x[i]) for i in range(5)])
    torch.testing.assert_close(batched, single, rtol=1e-10, atol=1e-10)


def test_radius_graph_matches_brute_force():
    rng = np.random.default_rng(5)
    n, b, cutoff = 7, 3, 2.5
    pos = torch.as_tensor(rng.normal(scale=1.5, size=(b * n, 3)))
    edge_index, weight = DenseRadiusGraph(cutoff, n)(pos, torch.arange(b).repeat_interleave(n))
    got = {(int(i), int(j)) for i, j in edge_index.T}
    want = set()
    for m in range(b):
        for i in range(n):
            for j in range(n):
                d = float(np.linalg.norm(pos[m * n + i] - pos[m * n + j]))
                if i != j and d < cutoff:
                    want.add((m * n + i, m * n + j))
    assert got == want
    d = (pos[edge_index[0]] - pos[edge_index[1]]).norm(dim=-1)
    torch.testing.assert_close(weight, d)


def test_registry_round_trip(encoder):
    spec = describe(encoder)
    assert spec is not None and spec["name"] == "SchNetEncoder"
    rebuilt = build(spec).double().eval()
    rebuilt.load_state_dict(encoder.state_dict())
    x = torch.as_tensor(_positions(np.random.default_rng(6)))
    torch.testing.assert_close(rebuilt(x), encoder(x))


def test_bad_inputs(encoder):
    with pytest.raises(ValueError):
        SchNetEncoder([])
    with pytest.raises(ValueError):
        SchNetEncoder(Z, out_dim=0)
    with pytest.raises(ValueError):
        SchNetEncoder(Z, cutoff=-1.0)
    with pytest.raises(ValueError):
        encoder(torch.zeros(2, len(Z) + 1, 3, dtype=torch.float64))


def test_dpnet_fits_position_trajectories():
    """``DPNet.fit`` takes (T, n_atoms, 3) trajectories with the SchNet encoder as is."""
    from dpnets import DPNet, TransferOperator

    torch.manual_seed(0)
    rng = np.random.default_rng(7)
    base = rng.normal(scale=1.5, size=(len(Z), 3))
    steps = rng.normal(scale=0.05, size=(300, len(Z), 3))
    traj = (base + np.cumsum(steps, axis=0) * 0.2).astype(np.float32)
    net = DPNet(
        SchNetEncoder(Z, out_dim=4), lag=2, epochs=2, batch_size=64, seed=0, progress=False
    ).fit(traj)
    feats = net.transform(traj)
    assert feats.shape == (300, 4) and np.isfinite(feats).all()
    op = TransferOperator(net, lag=2).fit(traj)
    assert np.all(np.isfinite(op.eig()))
