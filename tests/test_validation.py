"""Bad input raises a clear error naming the problem (issue 2, section 6)."""

import numpy as np
import pytest
import torch

from dpnets import DPNet, NotFittedError, TransferOperator
from dpnets.nn import MLP


def _net(**kw):
    kw.setdefault("epochs", 1)
    return DPNet(MLP(2, (8,), 3), progress=False, **kw)


@pytest.fixture
def traj():
    return np.random.default_rng(0).normal(size=(200, 2))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_inf_in_data(traj, bad):
    traj[17, 1] = bad
    for est in (_net(), TransferOperator()):
        with pytest.raises(ValueError, match="NaN or inf"):
            est.fit(traj)
    with pytest.raises(ValueError, match="NaN or inf"):
        TransferOperator().fit((traj[:-1], traj[1:]))


def test_mismatched_shapes_and_lengths(traj):
    with pytest.raises(ValueError, match="different lengths"):
        TransferOperator().fit((traj[:-1], traj[:-2]))
    with pytest.raises(ValueError, match="different state shapes"):
        TransferOperator().fit((traj, np.ones((200, 3))))
    with pytest.raises(ValueError, match="state shape"):
        TransferOperator().fit([traj, np.ones((50, 3))])
    op = TransferOperator().fit(traj)
    with pytest.raises(
        ValueError, match="X has 3 features, but TransferOperator is expecting 2 features"
    ):
        op.predict(np.ones((4, 3)))
    net = _net().fit(traj)
    with pytest.raises(ValueError, match="X has 5 features, but DPNet is expecting"):
        net.transform(np.ones((4, 5)))
    with pytest.raises(ValueError, match="training"):
        op.predict(traj[:3], observable=np.ones(10))
    with pytest.raises(ValueError, match="encoder must map"):
        DPNet(torch.nn.Identity(), epochs=1, progress=False).fit(np.ones((20, 2, 2)))


@pytest.mark.parametrize("lag", [200, 500])
def test_lag_not_shorter_than_trajectory(traj, lag):
    for est in (_net(), TransferOperator()):
        with pytest.raises(ValueError, match="lag"):
            est.set_params(lag=lag).fit(traj)
    with pytest.raises(ValueError, match="trajectory 1"):
        TransferOperator(lag=5).fit([traj, traj[:5]])


@pytest.mark.parametrize("lag", [0, -1, 1.5])
def test_invalid_lag(traj, lag):
    with pytest.raises(ValueError, match="lag must be a positive integer"):
        TransferOperator(lag=lag).fit(traj)


def test_fewer_samples_than_features():
    x = np.random.default_rng(0).normal(size=(4, 2))
    with pytest.raises(ValueError, match="fewer .*samples"):
        TransferOperator(lambda s: np.hstack([s, s**2, s**3])).fit(x)
    with pytest.raises(ValueError, match="fewer training samples"):
        DPNet(MLP(2, (8,), 6), epochs=1, val_fraction=0.0, progress=False).fit(x)


def test_use_before_fit(traj):
    for call in (
        lambda: _net().transform(traj),
        lambda: TransferOperator().predict(traj),
        lambda: TransferOperator().eig(),
        lambda: TransferOperator().implied_timescales(),
        lambda: _net().save("never.pt"),
    ):
        with pytest.raises(NotFittedError, match="not fitted"):
            call()


def test_unknown_score_and_bad_hyperparameters(traj):
    with pytest.raises(ValueError, match="objective must be one of .* got 'vamp'"):
        _net(objective="vamp").fit(traj)
    with pytest.raises(ValueError, match="gamma"):
        _net(gamma=-1.0).fit(traj)
    with pytest.raises(ValueError, match="val_fraction"):
        _net(val_fraction=1.0).fit(traj)
    with pytest.raises(ValueError, match="unknown optimizer"):
        _net(optimizer="lbfgsx").fit(traj)
    with pytest.raises(TypeError, match="data must be"):
        TransferOperator().fit({"x": traj})
    with pytest.raises(ValueError, match="tuple must be"):
        TransferOperator().fit((traj, traj, traj))
    with pytest.raises(ValueError, match="not a whole number of lag steps"):
        TransferOperator().fit(traj).predict(traj[:2], t=2.5)
