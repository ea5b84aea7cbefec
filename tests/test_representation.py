"""DPNet training: OU ground truth, reproducibility, data forms."""

import numpy as np
import pytest
import torch
from helpers import fit_ou_dpnet
from torch.utils.data import DataLoader, TensorDataset

from dpnets import DPNet, TransferOperator
from dpnets.nn import MLP
from dpnets.systems import OrnsteinUhlenbeck


def test_ou_eigenvalues_learned_within_5_percent():
    """r = 4 learned features and the constant give exp(-k dt), k = 0..4 (the demo)."""
    net, x, ou = fit_ou_dpnet()
    op = TransferOperator(net).fit(x)
    assert op.constant_ and op.lag_ == 1
    est = np.sort(np.abs(op.eig()))[::-1]
    ref = ou.eigvals(5)
    assert est[0] == pytest.approx(1.0, abs=1e-12)  # the added constant: exactly stationary
    np.testing.assert_allclose(est[:4], ref[:4], rtol=0.05)
    np.testing.assert_allclose(est[4], ref[4], rtol=0.10)  # the 4th process, at 30 epochs
    # the learned features are centred (the constant is not spent on a network output)
    assert np.all(np.abs(net.transform(x).mean(0)) < 0.05)
    # the learned projection score of [1, psi] approaches sum_k exp(-2 k dt) (Theorem 1)
    p0 = net.evaluate(x, objective="projection")
    assert np.sum(ref**2) - 0.15 < p0 < np.sum(ref**2) + 0.02


def _small_fit(data, callback=None, **kw):
    torch.manual_seed(1)
    kw.setdefault("epochs", 3)
    net = DPNet(MLP(1, (16,), 3), batch_size=256, progress=False, **kw)
    return net.fit(data, callback=callback)


@pytest.fixture(scope="module")
def ou_traj():
    return OrnsteinUhlenbeck(dt=0.2).sample(3000, seed=0)


def test_seed_reproducibility(ou_traj):
    a = _small_fit(ou_traj, seed=3)
    b = _small_fit(ou_traj, seed=3)
    np.testing.assert_array_equal(a.transform(ou_traj), b.transform(ou_traj))
    assert a.history_ == b.history_
    c = _small_fit(ou_traj, seed=4)
    assert not np.array_equal(a.transform(ou_traj), c.transform(ou_traj))


def test_history_and_best_epoch_restore(ou_traj):
    per_epoch = []
    net = _small_fit(
        ou_traj,
        epochs=6,
        seed=0,
        lr=0.3,
        callback=lambda e, m: per_epoch.append(m.transform(ou_traj)),
    )
    h = net.history_
    assert len(h["train_score"]) == 6 and len(h["val_score"]) == 6
    assert net.best_epoch_ == int(np.argmax(h["val_score"]))
    assert net.best_epoch_ < 5  # this run peaks early: the restore below is not the last epoch
    # the weights in place are those of the best validation epoch
    np.testing.assert_array_equal(net.transform(ou_traj), per_epoch[net.best_epoch_])
    assert not np.array_equal(per_epoch[-1], per_epoch[net.best_epoch_])
    # every epoch produced a finite training score
    assert np.all(np.isfinite(h["train_score"]))
    assert net.n_features_ == 3 and net.state_shape_ == (1,)


def test_callback_sees_current_model(ou_traj):
    seen = []
    _small_fit(ou_traj, epochs=2, callback=lambda e, m: seen.append((e, m.transform(ou_traj[:5]))))
    assert [e for e, _ in seen] == [0, 1]
    assert seen[0][1].shape == (5, 3)


@pytest.mark.parametrize("score", ["relaxed", "projection", "vamp1", "vamp2"])
def test_all_scores_train_in_float32_without_nan(ou_traj, score):
    net = _small_fit(ou_traj, objective=score, seed=0)
    assert np.all(np.isfinite(net.history_["train_score"]))
    assert np.all(np.isfinite(net.transform(ou_traj)))


def test_data_forms_agree(ou_traj):
    """Array, list of one trajectory and (X, Y) pairs are the same data."""
    kw = dict(seed=0, val_fraction=0.0)
    a = _small_fit(ou_traj, **kw)
    b = _small_fit([ou_traj], **kw)
    c = _small_fit((ou_traj[:-1], ou_traj[1:]), **kw)
    np.testing.assert_array_equal(a.transform(ou_traj), b.transform(ou_traj))
    # (X, Y) counts the interior states twice in the input standardisation: nearly equal
    np.testing.assert_allclose(a.transform(ou_traj), c.transform(ou_traj), atol=1e-3)
    d = _small_fit((ou_traj[:-1], ou_traj[1:]), standardize="none", **kw)
    e = _small_fit(ou_traj, standardize="none", **kw)
    np.testing.assert_array_equal(d.transform(ou_traj), e.transform(ou_traj))


def test_dataset_and_dataloader_inputs(ou_traj):
    x = torch.tensor(ou_traj[:-1], dtype=torch.float32)
    y = torch.tensor(ou_traj[1:], dtype=torch.float32)
    ds = TensorDataset(x, y)
    net = _small_fit(ds, seed=0)
    assert len(net.history_["val_score"]) == 3
    # a Dataset is split and batched like the arrays: the same fit, bit for bit
    arrays = _small_fit((x.numpy(), y.numpy()), seed=0)
    assert net.history_ == arrays.history_
    np.testing.assert_array_equal(net.transform(ou_traj), arrays.transform(ou_traj))
    # a DataLoader is split too (its batch size kept), and held-out pairs select the epoch
    net2 = _small_fit(DataLoader(ds, batch_size=256, shuffle=True), seed=0)
    assert len(net2.history_["val_score"]) == 3 and net2.n_train_ == round(0.9 * len(ds))
    net3 = _small_fit(DataLoader(ds, batch_size=256), seed=0, val_fraction=0.0)
    assert "val_score" not in net3.history_ and net3.n_train_ == len(ds)
    # a loader that cannot be split trains without validation, and says so
    sampler = torch.utils.data.BatchSampler(range(len(ds)), 256, drop_last=False)
    with pytest.warns(UserWarning, match="cannot be split"):
        net4 = _small_fit(DataLoader(ds, batch_sampler=sampler), seed=0)
    assert "val_score" not in net4.history_
    op = TransferOperator(net, lag=1).fit(ds)
    op_arr = TransferOperator(net).fit(ou_traj)
    # the Dataset holds float32 states: equal up to their rounding
    np.testing.assert_allclose(op.operator_, op_arr.operator_, atol=1e-6)
    assert op.lag_ == 1 and TransferOperator(net).fit(ds).lag_ is None


def test_separate_lagged_encoder(ou_traj):
    torch.manual_seed(0)
    enc, lagged = MLP(1, (16,), 3), MLP(1, (16,), 3)
    net = DPNet(
        enc,
        lagged_encoder=lagged,
        objective="vamp2",
        gamma=0.0,
        epochs=2,
        batch_size=256,
        progress=False,
        seed=0,
    )
    untrained = DPNet(
        enc,
        lagged_encoder=lagged,
        objective="vamp2",
        gamma=0.0,
        epochs=1,
        lr=1e-12,
        batch_size=256,
        progress=False,
        seed=0,
    ).fit(ou_traj)
    net.fit(ou_traj)
    assert not np.allclose(net.transform(ou_traj), net.transform(ou_traj, lagged=True))
    # both lobes were trained: each moved away from its initial weights, and the pair scores
    # higher than the untrained pair
    for lag_side in (False, True):
        assert not np.allclose(
            net.transform(ou_traj, lagged=lag_side), untrained.transform(ou_traj, lagged=lag_side)
        )
    assert (
        net.evaluate(ou_traj, objective="vamp2")
        > untrained.evaluate(ou_traj, objective="vamp2") + 0.1
    )


def test_more_features_than_samples_names_the_user_s_r():
    """The count includes the constant function the scores add: said, so that r=500 is
    not reported as r=501."""
    x = np.random.default_rng(0).normal(size=(300, 2))
    with pytest.raises(ValueError) as info:
        DPNet(r=500, epochs=1, progress=False).fit(x)
    assert str(info.value) == (
        "fewer training samples (269) than features (501: r = 500 and the constant "
        "function); provide more data or learn fewer features (r=, --dim on the command line)"
    )
