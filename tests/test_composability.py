"""The estimators compose like scikit-learn's: the lag as a parameter (Pipeline, grid
search, clone), DPNet.score as a held-out VAMP-2 score, default encoders, and seeds that
reproduce a fit bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("sklearn")

from helpers import ESTIMATORS  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError as SklearnNotFittedError  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

import dpnets  # noqa: E402
from dpnets import DPNet, Generator, TransferOperator  # noqa: E402
from dpnets.baselines import DMD, VAMPNet  # noqa: E402
from dpnets.nn import MLP  # noqa: E402
from dpnets.systems import LinearGaussian, OrnsteinUhlenbeck  # noqa: E402

_NET = dict(epochs=3, progress=False)


@pytest.fixture(scope="module")
def ou():
    x = OrnsteinUhlenbeck(dt=0.1).sample(6000, seed=0)
    return x[:4000], x[4000:]


def test_pipeline_sets_the_lag_like_any_parameter():
    """Pipeline(StandardScaler(), TransferOperator(lag=1)) with op__lag=5 is the lag-5 model:
    on a linear-Gaussian system its eigenvalues are those of A^5."""
    system = LinearGaussian([[0.9, 0.2], [0.0, 0.7]], noise_std=0.3)
    x = 10.0 * system.sample(40_000, seed=1) + 3.0
    pipe = Pipeline([("scale", StandardScaler()), ("op", TransferOperator(lag=1))])
    pipe.set_params(op__lag=5).fit(x)
    op = pipe[-1]
    assert op.lag == 5 and op.lag_ == 5
    exact = np.sort(np.abs(np.linalg.eigvals(np.linalg.matrix_power(system.A, 5))))
    est = np.sort(np.abs(op.eig()))[:-1]  # drop the constant's eigenvalue 1
    np.testing.assert_allclose(est, exact, atol=0.02)
    ref = TransferOperator(lag=5).fit(StandardScaler().fit_transform(x))
    np.testing.assert_allclose(op.eig(), ref.eig(), rtol=1e-12)


def test_grid_search_over_a_dpnet_with_its_default_scoring(ou):
    train, _ = ou
    search = GridSearchCV(
        DPNet(lag=2, seed=0, **_NET), {"gamma": [0.01, 0.1]}, cv=3, error_score="raise"
    ).fit(train)
    scores = search.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(scores)) and np.all(scores > 1.0)  # VAMP-2 counts the constant
    assert search.best_params_["gamma"] in (0.01, 0.1)
    assert search.best_estimator_.lag_ == 2


def test_grid_search_over_the_lag_of_a_composite_model(ou):
    train, _ = ou
    search = GridSearchCV(
        TransferOperator(DPNet(seed=0, **_NET), dt=0.1),
        {"lag": [1, 3]},
        cv=2,
        error_score="raise",
    ).fit(train)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    best = search.best_estimator_
    assert best.lag_ == best.features_.lag_ == search.best_params_["lag"]


def test_dpnet_score_is_the_held_out_vamp2_score(ou):
    train, test = ou
    net = DPNet(lag=1, seed=0, **_NET).fit(train)
    score = net.score(test)
    assert isinstance(score, float) and np.isfinite(score)
    # VAMP-2 is invariant to affine maps of the features: the operator's own score of the
    # same features (float64, standardised basis) is the same number
    op = TransferOperator(net).fit(train)
    assert score == pytest.approx(op.score(test), rel=1e-4)
    assert dpnets.base.vamp2_scorer(net, test) == score


def test_default_encoder_is_sized_to_the_data_and_recovers_the_spectrum(ou):
    train, _ = ou
    net = DPNet(lag=1, r=3, seed=0, epochs=10, progress=False).fit(train)
    assert net.encoder is None and net.transform(train[:5]).shape == (5, 3)
    assert net.encoder_.config == MLP(1, (64, 64), 3, activation="celu").config
    op = TransferOperator(net, dt=0.1).fit(train)
    exact = np.exp(-0.1 * np.arange(4))
    np.testing.assert_allclose(np.abs(op.eig())[:3], exact[:3], atol=0.02)
    # several axes per state: flattened by the default MLP
    frames = train[:2000].reshape(-1, 1, 1)
    assert DPNet(seed=0, **_NET).fit(frames).transform(frames[:4]).shape == (4, 4)


@pytest.mark.parametrize("make", ["registry", "unregistered"])
def test_seed_reproduces_a_fit_bit_for_bit(ou, make):
    """Same seed, torch's global RNG moved (and different initial weights of the module the
    user passed): bit-identical features; the module passed is never changed."""
    train, _ = ou

    def encoder():
        if make == "registry":
            return MLP(1, (16, 16), 3)
        return torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

    torch.manual_seed(1)
    enc1 = encoder()
    before = [p.detach().clone() for p in enc1.parameters()]
    a = DPNet(enc1, seed=5, **_NET).fit(train).transform(train)
    torch.manual_seed(2)
    torch.rand(17)
    b = DPNet(encoder(), seed=5, **_NET).fit(train).transform(train)
    assert np.array_equal(a, b)
    assert all(torch.equal(p, q) for p, q in zip(before, enc1.parameters(), strict=True))
    c = DPNet(encoder(), seed=6, **_NET).fit(train).transform(train)
    assert not np.array_equal(a, c)


def test_seed_none_keeps_the_users_initial_weights(ou):
    train, _ = ou
    torch.manual_seed(0)
    enc = MLP(1, (16,), 2)
    seen = []
    net = DPNet(enc, lr=1e-12, epochs=1, val_fraction=0.0, progress=False)
    net.fit(train, callback=lambda epoch, m: seen.append(m.transform(train[:10])))
    with torch.no_grad():
        mine = enc(torch.as_tensor((train[:10] - net.input_shift_) / net.input_scale_).float())
    np.testing.assert_allclose(seen[0], mine.numpy(), atol=1e-6)  # lr ~ 0: still the user's


def test_vampnet_lobes_start_from_the_same_weights_under_a_seed(ou):
    train, _ = ou
    a = VAMPNet(r=2, lag=2, seed=0, **_NET).fit(train)
    b = VAMPNet(r=2, lag=2, seed=0, **_NET).fit(train)
    assert np.array_equal(a.transform(train, lagged=True), b.transform(train, lagged=True))


def test_fit_lag_argument_is_deprecated_but_works(ou):
    train, _ = ou
    with pytest.warns(FutureWarning, match=r"TransferOperator\(lag=3\)"):
        old = TransferOperator().fit(train, lag=3)
    with pytest.warns(FutureWarning, match="deprecated"):
        positional = DMD().fit(train, 3)
    new = TransferOperator(lag=3).fit(train)
    assert old.lag_ == positional.lag_ == new.lag_ == 3
    np.testing.assert_allclose(old.eig(), new.eig(), rtol=1e-12)
    assert old.lag is None  # fit never changes a parameter


_PAIRED = [c for c in ESTIMATORS if c is not Generator]  # Generator: samples, no pairs


@pytest.mark.parametrize("cls", _PAIRED, ids=lambda c: c.__name__)
def test_fit_x_y_means_pairs_for_every_estimator(cls):
    """``fit(X, Y)`` is ``fit((X, Y))`` (issue 40: Y was ignored, even of another length);
    autoencoders take one-step pairs (``n_steps=1``), as with the tuple."""

    def make():
        est = ESTIMATORS[cls]()
        return est.set_params(n_steps=1) if "n_steps" in est.get_params() else est

    x = OrnsteinUhlenbeck(dt=0.1).sample(400, seed=0).reshape(-1, 1)
    a = make().fit(x[:-1], x[1:])
    b = make().fit((x[:-1], x[1:]))
    c = make().fit(x[:-3], x[3:])
    assert a.n_samples_ == b.n_samples_ == 399 if hasattr(a, "n_samples_") else True
    np.testing.assert_allclose(a.transform(x[:50]), b.transform(x[:50]), rtol=1e-12)
    if hasattr(a, "eig"):
        np.testing.assert_allclose(a.eig(), b.eig(), rtol=1e-10, atol=1e-12)
        assert not np.allclose(np.abs(a.eig()[-1]), np.abs(c.eig()[-1]), rtol=1e-6)
    with pytest.raises(ValueError, match="X and Y have different lengths: 399 and 7"):
        make().fit(x[:-1], np.zeros((7, 1)))
    with pytest.raises(ValueError, match="different state shapes"):
        make().fit(x[:-1], np.zeros((399, 9)))
    with pytest.raises(ValueError, match="pass a list of trajectories or a tuple"):
        make().fit([x[:-1]], x[1:])


def test_sklearn_y_is_never_read_as_a_lag(ou):
    """A 1-D target of one value per row of multi-dimensional states (what scikit-learn's
    checks pass) is no lagged state: ignored with a warning; the lag stays the parameter."""
    x = np.hstack([ou[0], ou[0] ** 2])
    y = np.arange(x.shape[0])
    with pytest.warns(UserWarning, match=r"ignored \(scikit-learn's target\).*Y of shape"):
        op = TransferOperator(lag=2).fit(x, y)
    assert op.lag_ == 2
    np.testing.assert_allclose(op.eig(), TransferOperator(lag=2).fit(x).eig(), rtol=1e-12)
    with warnings.catch_warnings():  # a scalar series: y of its size is its partner
        warnings.simplefilter("error")
        scalar = TransferOperator(lag=2).fit(ou[0][:-2].ravel(), ou[0][2:].ravel())
    np.testing.assert_allclose(scalar.eig(), TransferOperator(lag=2).fit(ou[0]).eig(), rtol=1e-8)


def test_unfitted_errors_are_scikit_learns(ou):
    with pytest.raises(SklearnNotFittedError):
        TransferOperator().predict(ou[0][:3])
    with pytest.raises(dpnets.NotFittedError):
        DPNet().transform(ou[0][:3])


def test_clone_and_fit_transform(ou):
    train, _ = ou
    net = DPNet(lag=2, seed=0, **_NET)
    twin = clone(net)
    assert twin.get_params()["lag"] == 2 and twin.encoder is None
    np.testing.assert_array_equal(net.fit_transform(train), twin.fit(train).transform(train))
    op = TransferOperator(lag=1)
    frames = op.fit_transform([train[:2000], train[2000:]])  # the frames of both, in order
    np.testing.assert_array_equal(frames, op.transform(train))
    paired = TransferOperator().fit_transform((train[:-1], train[1:]))
    assert paired.shape == (train.shape[0] - 1, 2)  # [1, x] of the initial states


def test_saved_default_encoder_and_lag_round_trip(ou, tmp_path):
    train, _ = ou
    net = DPNet(lag=3, r=2, seed=0, device="cpu", **_NET).fit(train)  # load() maps to CPU
    net.save(tmp_path / "net.pt")
    back = dpnets.load(tmp_path / "net.pt")
    assert (
        back.encoder is None and back.lag == 3 and back.r == 2 and back.objective == net.objective
    )
    np.testing.assert_array_equal(back.transform(train[:50]), net.transform(train[:50]))


def test_init_module_keeps_pretrained_weights_with_a_reproducible_seed(ou):
    """init="module": a seeded fit starts from the module's own weights (fine-tuning), and two
    fits are still bit-identical."""
    train, _ = ou
    torch.manual_seed(0)
    pretrained = MLP(1, (16,), 2)
    kw = dict(lr=1e-12, epochs=1, val_fraction=0.0, seed=3, progress=False)
    kept = DPNet(pretrained, init="module", **kw).fit(train)
    redrawn = DPNet(pretrained, **kw).fit(train)
    x = torch.as_tensor((train[:10] - kept.input_shift_) / kept.input_scale_).float()
    with torch.no_grad():
        mine = pretrained(x).numpy()
    np.testing.assert_allclose(kept.transform(train[:10]), mine, atol=1e-6)
    assert not np.allclose(redrawn.transform(train[:10]), mine, atol=1e-3)
    again = DPNet(pretrained, init="module", **kw).fit(train)
    assert np.array_equal(again.transform(train), kept.transform(train))
    with pytest.raises(ValueError, match="init must be one of"):
        DPNet(init="pretrained", **_NET).fit(train)
