import pickle

import numpy as np
import pytest
import torch

import dpnets
from dpnets import DPNet, TransferOperator


def test_dpnet_round_trip(tmp_path, fitted):
    x, net, _ = fitted
    net.save(tmp_path / "net.pt")
    back = dpnets.load(tmp_path / "net.pt")
    np.testing.assert_array_equal(back.transform(x), net.transform(x))
    assert back.history_ == net.history_ and back.objective == net.objective


def test_operator_round_trip(tmp_path, fitted):
    x, _, op = fitted
    op.save(tmp_path / "op.pt")
    back = dpnets.load(tmp_path / "op.pt")
    np.testing.assert_array_equal(back.eig(), op.eig())
    np.testing.assert_array_equal(back.predict(x[:10], [1, 4]), op.predict(x[:10], [1, 4]))
    np.testing.assert_array_equal(back.eigenfunctions(x[:10]), op.eigenfunctions(x[:10]))
    np.testing.assert_array_equal(back.implied_timescales(), op.implied_timescales())


def test_custom_encoder_needs_architecture(tmp_path, fitted):
    x, _, _ = fitted
    enc = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    net = DPNet(enc, epochs=1, batch_size=256, progress=False, seed=0).fit(x)
    net.save(tmp_path / "c.pt")
    with pytest.raises(ValueError, match="custom torch module"):
        dpnets.load(tmp_path / "c.pt")
    arch = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    back = dpnets.load(tmp_path / "c.pt", encoder=arch)
    np.testing.assert_array_equal(back.transform(x), net.transform(x))


def test_custom_feature_operator(tmp_path, fitted):
    x, _, _ = fitted
    feats = lambda s: np.hstack([np.ones_like(s), s, s**2])  # noqa: E731
    op = TransferOperator(feats).fit(x)
    op.save(tmp_path / "f.pt")
    with pytest.raises(ValueError, match="features="):
        dpnets.load(tmp_path / "f.pt")
    np.testing.assert_array_equal(
        dpnets.load(tmp_path / "f.pt", features=feats).predict(x[:5], 2), op.predict(x[:5], 2)
    )


class _Evil:
    def __reduce__(self):
        return (exec, ("raise SystemExit('pwned')",))


def test_loading_never_executes_pickled_code(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as fh:
        pickle.dump({"format": "dpnets", "payload": _Evil()}, fh)
    with pytest.raises(ValueError, match="not a valid dpnets model file: unreadable"):
        dpnets.load(path)  # refused by weights_only unpickling: nothing was executed
    torch.save({"format": "other"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a valid dpnets model file: not a dpnets model"):
        dpnets.load(tmp_path / "other.pt")
