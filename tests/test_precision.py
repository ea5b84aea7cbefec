"""Mixed precision and compilation options of DPNet training (issue 17)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpnets import DPNet, TransferOperator, load
from dpnets.nn import MLP
from dpnets.systems import OrnsteinUhlenbeck


@pytest.fixture(scope="module")
def ou():
    return OrnsteinUhlenbeck(theta=1.0, dt=0.2).sample(5000, seed=0)


def _fit(x, **kw):
    torch.manual_seed(0)
    return DPNet(MLP(1, (32,), 3), epochs=3, batch_size=512, seed=0, progress=False, **kw).fit(x)


@pytest.mark.parametrize("autocast", ["bf16", "fp16"])
def test_autocast_trains_the_encoder_in_low_precision(ou, autocast, tmp_path):
    full = TransferOperator(_fit(ou)).fit(ou).implied_timescales()[1]
    net = _fit(ou, autocast=autocast)
    assert net.encoder_.net[0].weight.dtype == torch.float32  # weights stay fp32
    t = TransferOperator(net).fit(ou).implied_timescales()[1]
    # OU with theta = 1 at lag 0.2: the slowest timescale is 1 / 0.2 = 5 frames
    assert t == pytest.approx(5.0, rel=0.05) and t == pytest.approx(full, rel=0.01)
    net.save(tmp_path / "m.pt")
    assert load(tmp_path / "m.pt").autocast == autocast


def test_compile_trains_through_the_compiled_encoder(ou, monkeypatch):
    compiled = []

    def fake_compile(module):  # the real one takes ~30 s on CPU; the wiring is what we test
        compiled.append(module)
        return lambda x: module(x) * 1.0

    monkeypatch.setattr(torch, "compile", fake_compile)
    net = _fit(ou, compile=True)
    assert len(compiled) == 1 and compiled[0] is net.encoder_
    np.testing.assert_array_equal(net.transform(ou[:20]), _fit(ou).transform(ou[:20]))


def test_bad_precision_options():
    with pytest.raises(ValueError, match="autocast"):
        _fit(np.zeros((50, 1)), autocast="fp8")
    with pytest.raises((TypeError, ValueError), match="compile"):
        _fit(np.zeros((50, 1)), compile="yes")
