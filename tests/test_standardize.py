"""The input standardisation in one module (issue 43, item 2): decided, computed and applied
by ``dpnets.standardize``, one fitted ``Scaling``; and the one training run,
``training.FitRun`` (item 1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dpnets import DPNet
from dpnets.standardize import Scaling, fit_scaling, scaling_mode
from dpnets.training import FitRun
from dpnets.training_source import training_source


def _chunks(x: np.ndarray, size: int = 97):
    return lambda: (x[k : k + size] for k in range(0, len(x), size))


def test_fit_scaling_is_the_float64_mean_and_spread_of_the_states():
    x = np.random.default_rng(0).normal(loc=[3.0, -1e4], scale=[2.0, 1e-3], size=(1000, 2))
    s = fit_scaling("auto", nn.Linear(2, 3), _chunks(x), (2,))
    np.testing.assert_allclose(s.shift, x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(s.scale, x.std(0), rtol=1e-10)
    np.testing.assert_allclose(s.apply(x).mean(0), 0.0, atol=1e-9)
    np.testing.assert_allclose(s.apply(x).std(0), 1.0, rtol=1e-9)
    g = fit_scaling("global", nn.Linear(2, 3), _chunks(x), (2,))
    assert np.ndim(g.shift) == 1 and np.size(g.shift) == 1
    np.testing.assert_allclose(g.shift, x.mean(), rtol=1e-12)
    np.testing.assert_allclose(g.scale, x.std(), rtol=1e-10)


def test_auto_leaves_fields_and_non_affine_encoders_as_given():
    assert scaling_mode("auto", nn.Linear(2, 2), 1) == "coordinate"
    assert scaling_mode("auto", nn.Sequential(nn.Tanh(), nn.Linear(2, 2)), 1) == "none"
    assert scaling_mode("auto", nn.Linear(2, 2), 2) == "none"  # a field
    assert (scaling_mode(True, nn.Tanh(), 3), scaling_mode(False, nn.Linear(2, 2), 1)) == (
        "coordinate",
        "none",
    )
    x = np.arange(12.0).reshape(6, 2)
    s = fit_scaling("none", nn.Linear(2, 2), _chunks(x), (2,))
    assert s == Scaling() and s.apply(x) is x


def test_compose_puts_the_scaling_in_front_of_the_encoder():
    x = np.random.default_rng(1).normal(5.0, 3.0, size=(200, 2))
    s = fit_scaling("coordinate", nn.Linear(2, 2), _chunks(x), (2,))
    enc = nn.Linear(2, 2).double()
    composed = s.compose(enc, torch.device("cpu"), torch.float64)
    with torch.no_grad():
        got = composed(torch.as_tensor(x)).numpy()
        want = enc(torch.as_tensor(s.apply(x))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert s.compose(enc, torch.device("cpu"), torch.float64) is not enc
    assert Scaling().compose(enc, torch.device("cpu"), torch.float64) is enc


def test_a_fitted_dpnet_stores_the_scaling_it_trained_with():
    t = np.arange(400)
    x = np.stack([100 + 7 * np.cos(0.3 * t), -3 + 0.01 * np.sin(0.3 * t)], axis=1)
    net = DPNet(r=2, lag=1, epochs=1, seed=0, progress=False, val_fraction=0.0).fit(x)
    s = Scaling.of(net)
    np.testing.assert_allclose(s.shift, x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(s.scale, x.std(0), rtol=1e-10)
    fmap = net.feature_module()
    with torch.no_grad():
        out = fmap(torch.as_tensor(x, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(out, net.transform(x), rtol=1e-5, atol=1e-5)


def test_the_one_training_run_checks_its_options_and_the_encoder():
    net = DPNet(r=2, seed=0, progress=False)
    with pytest.raises(ValueError, match="resume=True needs checkpoint=PATH"):
        FitRun.start(net, resume=True)
    run = FitRun.start(net)
    assert (run.device, run.sharded, run.checkpoint) == (torch.device("cpu"), False, None)
    # the seeded RNG of the split and batch order: the same draws for the same seed
    assert torch.equal(
        torch.randperm(10, generator=run.rng), torch.randperm(10, generator=FitRun.start(net).rng)
    )
    source = training_source(np.random.default_rng(2).normal(size=(50, 3)), 2)
    assert source.lag == 2 and source.state_shape == (3,)
    prepared = run.prepare(source, nn.Linear(3, 2))
    assert prepared.n_train == 43 and prepared.state_shape == (3,)  # 48 pairs, 5 held out
    assert run.probe(nn.Linear(3, 2), prepared) == 2
    with pytest.raises(ValueError, match="encoder must map"):
        run.probe(nn.Flatten(0), prepared)
    with pytest.raises(ValueError, match=r"fewer training samples \(43\) than features"):
        run.probe(nn.Linear(3, 43), prepared, constant=True)
