"""Checkpoint and resume, and interrupted fits (issue 14)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from dpnets import DPNet
from dpnets.baselines import VAMPNet
from dpnets.nn import MLP
from dpnets.systems import OrnsteinUhlenbeck


@pytest.fixture(scope="module")
def ou():
    return OrnsteinUhlenbeck(dt=0.2).sample(3000, seed=0)


def _net(cls=DPNet, **kw):
    torch.manual_seed(0)
    kw = {"epochs": 6, "batch_size": 256, "seed": 0, "progress": False, **kw}
    return cls(MLP(1, (16,), 3), **kw)


class Stop(Exception):
    pass


def _stop_at(k):
    def callback(epoch, model):
        if epoch == k:
            raise Stop

    return callback


def test_a_fit_killed_with_sigkill_resumes_to_the_uninterrupted_result(tmp_path, ou):
    """A separate process is killed (SIGKILL) in epoch 3; resuming gives identical weights."""
    ref = _net().fit(ou)
    data, ck = tmp_path / "x.npy", tmp_path / "ck.pt"
    np.save(data, ou)
    script = textwrap.dedent(
        f"""
        import os, signal, numpy as np, torch
        from dpnets import DPNet
        from dpnets.nn import MLP
        x = np.load({str(data)!r})
        torch.set_num_threads({torch.get_num_threads()})  # the parent's: same kernels
        torch.manual_seed(0)
        net = DPNet(MLP(1, (16,), 3), epochs=6, batch_size=256, seed=0, progress=False)
        def die(epoch, model):
            if epoch == 3:
                os.kill(os.getpid(), signal.SIGKILL)
        net.fit(x, checkpoint={str(ck)!r}, callback=die)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9 and ck.exists()
    res = _net().fit(ou, checkpoint=ck, resume=True)
    np.testing.assert_array_equal(res.transform(ou), ref.transform(ou))
    assert res.history_ == ref.history_ and res.best_epoch_ == ref.best_epoch_
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_resume_without_a_checkpoint_file_starts_fresh_and_writes_one(tmp_path, ou):
    ck = tmp_path / "ck.pt"
    res = _net(epochs=2).fit(ou, checkpoint=ck, resume=True)
    ref = _net(epochs=2).fit(ou)
    np.testing.assert_array_equal(res.transform(ou), ref.transform(ou))
    assert ck.exists()


def test_vampnet_resumes_too(tmp_path, ou):
    ref = _net(VAMPNet).fit(ou)
    ck = tmp_path / "ck.pt"
    with pytest.raises(Stop):
        _net(VAMPNet).fit(ou, checkpoint=ck, callback=_stop_at(2))
    res = _net(VAMPNet).fit(ou, checkpoint=ck, resume=True)
    np.testing.assert_array_equal(res.transform(ou, lagged=True), ref.transform(ou, lagged=True))


def test_a_checkpoint_of_another_run_is_refused(tmp_path, ou):
    ck = tmp_path / "ck.pt"
    _net(epochs=2).fit(ou, checkpoint=ck)
    with pytest.raises(ValueError, match="belongs to a different run"):
        _net(epochs=2, lr=3e-3).fit(ou, checkpoint=ck, resume=True)
    with pytest.raises(ValueError, match="belongs to a different run"):
        _net(epochs=2).fit(ou[:2000], checkpoint=ck, resume=True)
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="not a readable dpnets checkpoint"):
        _net(epochs=2).fit(ou, checkpoint=tmp_path / "junk.pt", resume=True)
    with pytest.raises(ValueError, match="needs seed="):
        _net(epochs=2, seed=None).fit(ou, checkpoint=ck, resume=True)
    with pytest.raises(ValueError, match="needs checkpoint="):
        _net(epochs=2).fit(ou, resume=True)
    with pytest.raises(ValueError, match="checkpoint_every must be"):
        _net(epochs=2).fit(ou, checkpoint=ck, checkpoint_every=0)


def test_an_interrupted_fit_leaves_the_estimator_as_it_was(ou):
    net = _net()
    with pytest.raises(Stop):
        net.fit(ou, callback=_stop_at(1))
    assert not [k for k in vars(net) if k.endswith("_")]  # still unfitted
    net = _net(epochs=2).fit(ou)
    before = net.transform(ou)
    history, encoder = net.history_, net.encoder_
    net.epochs = 5
    with pytest.raises(Stop):
        net.fit(ou[:1500], callback=_stop_at(3))
    assert net.encoder_ is encoder and net.history_ is history
    np.testing.assert_array_equal(net.transform(ou), before)


def test_autoencoders_checkpoint_and_resume(tmp_path, ou):
    from dpnets.baselines import DynamicAutoencoder

    def make():
        torch.manual_seed(0)
        return DynamicAutoencoder(
            MLP(1, (8,), 2), MLP(2, (8,), 1), n_steps=2, epochs=4, seed=0, progress=False
        )

    ref = make().fit(ou)
    ck = tmp_path / "ae.pt"
    with pytest.raises(Stop):
        make().fit(ou, checkpoint=ck, callback=_stop_at(1))
    res = make().fit(ou, checkpoint=ck, resume=True)
    np.testing.assert_array_equal(res.transform(ou), ref.transform(ou))
    np.testing.assert_array_equal(res.K_, ref.K_)


def test_a_checkpoint_into_a_missing_folder_fails_before_training(tmp_path, ou, monkeypatch):
    """The checkpoint's folder is checked when fit starts (it failed after the first
    checkpoint's epochs, naming the temporary file); no training step runs."""
    import dpnets.training

    def never(*args, **kwargs):
        raise AssertionError("trained before the checkpoint path was checked")

    monkeypatch.setattr(dpnets.training.FitRun, "train_objective", never)
    path = tmp_path / "missing" / "ck.pt"
    with pytest.raises(FileNotFoundError) as info:
        DPNet(r=2, epochs=2, seed=0, progress=False).fit(ou, checkpoint=path)
    assert str(info.value) == f"cannot write {path}: the folder {path.parent} does not exist"
