"""scikit-learn parameters for every public estimator (issue 14, shared base): get_params,
set_params, clone, repr; fit never changes a parameter and leaves torch's global RNG alone.

``ESTIMATORS`` (``tests/helpers.py``) must list every public estimator class: a test walks
the public API and fails on a class that is missing, so a new estimator cannot skip these
checks."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from helpers import ESTIMATORS

import dpnets
from dpnets import DPNet, TransferOperator, baselines
from dpnets.base import BaseEstimator
from dpnets.baselines import VAMPNet
from dpnets.nn import MLP

sklearn_base = pytest.importorskip("sklearn.base")


def test_every_public_estimator_is_in_the_registry():
    public = set()
    for module in (dpnets, baselines):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseEstimator):
                public.add(obj)
    assert public == set(ESTIMATORS)


@pytest.mark.parametrize("cls", list(ESTIMATORS), ids=lambda c: c.__name__)
def test_clone_gives_an_equal_unfitted_estimator(cls):
    est = ESTIMATORS[cls]()
    twin = sklearn_base.clone(est)
    assert type(twin) is cls and twin is not est
    a, b = est.get_params(deep=False), twin.get_params(deep=False)
    assert set(a) == set(b) == set(inspect.signature(cls.__init__).parameters) - {"self"}
    for name, value in a.items():
        if isinstance(value, torch.nn.Module):  # deep-copied, same architecture and weights
            assert type(b[name]) is type(value) and b[name] is not value
            for p, q in zip(value.parameters(), b[name].parameters(), strict=True):
                assert torch.equal(p, q)
        elif callable(value) or isinstance(value, np.ndarray):
            continue
        else:
            assert b[name] == value, name
    assert repr(twin) == repr(est) and repr(est).startswith(cls.__name__ + "(")


@pytest.mark.parametrize("cls", list(ESTIMATORS), ids=lambda c: c.__name__)
def test_fit_changes_no_parameter_and_not_the_global_rng(cls):
    est = ESTIMATORS[cls]()
    before = dict(est.get_params(deep=False))
    x = np.cumsum(np.random.default_rng(0).standard_normal((400, 1)), axis=0) * 0.1
    x = x - x.mean()
    state = torch.get_rng_state()
    est.fit(x)
    after = est.get_params(deep=False)
    for name, value in before.items():
        assert after[name] is value, f"fit replaced parameter {name}"
    if getattr(est, "seed", None) is not None:
        assert torch.equal(state, torch.get_rng_state())


def test_set_params_nested_and_invalid():
    net = DPNet(MLP(1, (8,), 2))
    op = TransferOperator(net)
    assert op.set_params(features__gamma=2.0, ridge=1e-3) is op
    assert net.gamma == 2.0 and op.ridge == 1e-3
    assert op.get_params()["features__gamma"] == 2.0
    with pytest.raises(ValueError, match="invalid parameter 'gama' for DPNet"):
        net.set_params(gama=1.0)
    with pytest.raises(ValueError, match="has no parameters"):
        TransferOperator(None).set_params(features__x=1)


def test_vampnet_lagged_lobe_starts_from_the_encoder_and_is_trained_separately():
    x = np.cumsum(np.random.default_rng(0).standard_normal((2000, 1)), axis=0) * 0.05
    torch.manual_seed(0)
    enc = MLP(1, (8,), 2)
    net = VAMPNet(enc, epochs=3, seed=0, progress=False).fit(x)
    assert net.lagged_encoder is None  # the parameter is untouched
    a, b = net.transform(x[:50]), net.transform(x[:50], lagged=True)
    assert not np.allclose(a, b)  # two lobes, trained apart
    assert net.lagged_encoder_ is not net.encoder_ and net.encoder_ is not enc


def test_score_and_grid_search():
    from sklearn.model_selection import GridSearchCV

    from dpnets.base import vamp2_scorer
    from dpnets.systems import OrnsteinUhlenbeck

    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.2)
    x = ou.sample(20_000, seed=0)
    hermite = lambda s: np.hstack([s, s**2 - 1])  # noqa: E731 - exact eigenfunctions
    op = TransferOperator(hermite).fit(x)
    # VAMP-2 of [1, He1, He2] on fresh data: the sum of the squared eigenvalues
    fresh = ou.sample(20_000, seed=1)
    assert op.score(fresh) == pytest.approx(np.sum(ou.eigvals(3) ** 2), abs=0.02)
    gs = GridSearchCV(TransferOperator(hermite), {"constant": [True, False]}, cv=3).fit(x)
    assert gs.best_params_ == {"constant": True}  # without the constant the score drops
    torch.manual_seed(0)
    net = DPNet(MLP(1, (16,), 2), epochs=2, seed=0, progress=False)
    gs = GridSearchCV(net, {"gamma": [0.0, 1.0]}, cv=2, scoring=vamp2_scorer).fit(x)
    assert np.all(np.isfinite(gs.cv_results_["mean_test_score"]))
    assert 1.0 < vamp2_scorer(gs.best_estimator_, fresh) <= 3.0
