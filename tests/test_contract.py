"""One model contract (issue 14): every estimator in the registry round-trips through a file
bit for bit, every spectral model exposes the same public fitted state and forecasts
observables, the composite ``TransferOperator(DPNet(...))`` trains features and operator in
one ``fit``, and the multi-step consistency penalty is a library option."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ESTIMATORS

from dpnets import DPNet, TransferOperator, load
from dpnets.base import clone, is_fitted
from dpnets.baselines import DynamicAutoencoder, VAMPNet
from dpnets.nn import MLP
from dpnets.scores import MultistepLoss, ProjectionLoss, multistep_penalty
from dpnets.spectral import SpectralModel

#: the registry plus the composite model (features trained by the operator's fit)
CASES = {cls.__name__: make for cls, make in ESTIMATORS.items()}
CASES["TransferOperator(DPNet)"] = lambda: TransferOperator(
    DPNet(MLP(1, (8,), 2), epochs=2, seed=1, progress=False), dt=0.5
)


@pytest.fixture(scope="module")
def walk() -> np.ndarray:
    x = np.cumsum(np.random.default_rng(0).standard_normal((600, 1)), axis=0) * 0.1
    return x - x.mean()


def _outputs(model, x: np.ndarray) -> dict[str, np.ndarray]:
    if not isinstance(model, SpectralModel):  # a feature learner
        return {"transform": model.transform(x[:20])}
    out = {"eig": model.eig(), "transform": model.transform(x[:20])}
    out["eigenfunctions"] = model.eigenfunctions(x[:20])
    out["predict"] = model.predict(x[:20], t=[1, 3])
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_save_load_round_trip_is_bit_identical(name, walk, tmp_path):
    torch.manual_seed(0)
    model = CASES[name]().fit(walk)
    model.save(tmp_path / "m.pt")
    back = load(tmp_path / "m.pt")
    assert type(back) is type(model)
    a, b = _outputs(model, walk), _outputs(back, walk)
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    assert sorted(back.get_params(deep=False)) == sorted(model.get_params(deep=False))


@pytest.mark.parametrize(
    "name", [n for n, make in CASES.items() if isinstance(make(), SpectralModel)]
)
def test_every_spectral_model_has_the_public_fitted_state(name, walk):
    torch.manual_seed(0)
    model = CASES[name]().fit(walk)
    for attr in ("features_", "operator_", "cx_", "eigvals_", "n_samples_", "n_features_"):
        assert hasattr(model, attr), attr
    assert hasattr(model, "lag_") and model.state_shape_ == (1,)
    assert not hasattr(model, "_cx_pinv") and not hasattr(model, "rank_")
    r = model.n_features_
    assert model.operator_.shape == model.cx_.shape == (r, r)
    # observables given on the training samples forecast through the same API for all
    values = np.sin(np.arange(model.n_samples_) / 50.0)
    pred = model.predict(walk[:7], t=2, observable=values)
    assert pred.shape == (7,) and np.all(np.isfinite(pred))


def test_composite_trains_a_copy_of_the_features_and_equals_the_two_steps(walk, tmp_path):
    def net() -> DPNet:
        torch.manual_seed(0)
        return DPNet(MLP(1, (8,), 2), epochs=3, seed=0, progress=False)

    template = net()
    comp = TransferOperator(template, lag=2).fit(walk)
    assert not is_fitted(template) and comp.features is template  # parameter untouched
    assert comp.features_ is not template and comp.features_.lag_ == comp.lag_ == 2
    two_steps = TransferOperator(net().set_params(lag=2).fit(walk)).fit(walk)
    assert np.array_equal(comp.eig(), two_steps.eig())
    assert np.array_equal(comp.predict(walk[:5], t=4), two_steps.predict(walk[:5], t=4))
    # one file holds both; the loaded parameter is again an unfitted copy
    comp.save(tmp_path / "c.pt")
    back = load(tmp_path / "c.pt")
    assert not is_fitted(back.features) and back.features.epochs == 3
    assert np.array_equal(back.eig(), comp.eig())
    # clone and refit: a new feature map is trained, not the fitted one reused
    again = clone(comp)
    assert not is_fitted(again.features)
    # a fitted feature map is used as it is
    assert TransferOperator(comp.features_).fit(walk).features_ is comp.features_


def test_composite_with_vampnet_features(walk):
    torch.manual_seed(0)
    comp = TransferOperator(VAMPNet(MLP(1, (8,), 2), epochs=2, seed=0, progress=False))
    comp.set_params(lag=3).fit(walk)
    assert isinstance(comp.features_, VAMPNet) and comp.lag_ == 3
    assert comp.constant_ and abs(comp.eig()[0] - 1.0) < 1e-10


def test_autoencoder_forecasts_observables_by_latent_least_squares(walk):
    torch.manual_seed(0)
    ae = DynamicAutoencoder(MLP(1, (8,), 2), MLP(2, (8,), 1), epochs=3, seed=0, progress=False)
    ae.set_params(lag=2).fit(walk)
    assert ae.n_samples_ == walk.shape[0] - 2  # the one-step pairs at the lag
    values = walk[2:, 0] ** 2  # f at the lagged state of each pair
    z = ae.transform(walk[:-2])
    coef = np.linalg.pinv(z.T @ z / len(z), hermitian=True) @ (z.T @ values) / len(z)
    for t in (1, 3):
        expect = ae.transform(walk[:4]) @ np.linalg.matrix_power(ae.K_.T, t - 1) @ coef
        got = ae.predict(walk[:4], t=t, observable=values)
        np.testing.assert_allclose(got, expect, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="decoder"):
        ae.modes()


# ---------------------------------------------------------------------- multi-step consistency
def _reference_penalty(x: np.ndarray, ys: np.ndarray) -> float:
    n = x.shape[0]
    cx = x.T @ x / n
    s, u = np.linalg.eigh(cx)
    w = u @ np.diag(s**-0.5) @ u.T
    k1 = w @ (x.T @ ys[:, 0] / n) @ w
    return sum(
        float(np.sum((w @ (x.T @ ys[:, k] / n) @ w - np.linalg.matrix_power(k1, k + 1)) ** 2))
        for k in range(1, ys.shape[1])
    )


def test_multistep_penalty_matches_its_formula_and_vanishes_on_an_invariant_span():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 3, generator=g, dtype=torch.float64)
    ys = torch.randn(500, 3, 3, generator=g, dtype=torch.float64) + x[:, None, :]
    ref = _reference_penalty(x.numpy(), ys.numpy())
    assert float(multistep_penalty(x, ys)) == pytest.approx(ref, rel=1e-10)
    # linear features of noiseless linear dynamics span an invariant subspace exactly
    a = torch.tensor([[0.9, 0.2, 0.0], [-0.1, 0.8, 0.1], [0.0, 0.05, 0.7]], dtype=torch.float64)
    steps = [x @ torch.linalg.matrix_power(a, k).T for k in (1, 2, 3)]
    assert float(multistep_penalty(x, torch.stack(steps, 1))) < 1e-20
    assert float(multistep_penalty(x, ys)) > 1e-2
    # differentiable, and the module adds it to the one-step loss
    xr = x.clone().requires_grad_(True)
    loss = MultistepLoss(ProjectionLoss(0.1), 30.0)(xr, ys)
    loss.backward()
    assert torch.all(torch.isfinite(xr.grad))
    expect = ProjectionLoss(0.1)(x, ys[:, 0]) + 30.0 * multistep_penalty(x, ys)
    assert float(loss) == pytest.approx(float(expect), rel=1e-12)
    with pytest.raises(ValueError, match="K >= 2"):
        multistep_penalty(x, ys[:, :1])


def test_dpnet_consistency_option_trains_on_windows_and_lowers_the_penalty():
    """On the noisy logistic map (whose leading features are far from invariant for a small
    network) the option lowers the penalty of the learned features on the data 2-4x (seeds
    0-2 measured; full-batch training, 300 steps)."""
    from dpnets.nn import PeriodicMLP
    from dpnets.systems import LogisticMap

    x = LogisticMap().sample(4000, seed=0)

    def fit(beta: float, **kw) -> DPNet:
        torch.manual_seed(0)
        net = DPNet(
            PeriodicMLP(1, (32,), 4),
            **{"epochs": 300, "batch_size": 8192, "val_fraction": 0.0, "seed": 0, **kw},
            consistency=beta,
            progress=False,
        )
        return net.fit(x)

    def penalty(net: DPNet) -> float:
        f = torch.as_tensor(net.transform(x)).double()
        n = len(f) - 2
        return float(multistep_penalty(f[:n], torch.stack([f[1:-1], f[2:]], 1), constant=True))

    assert penalty(fit(100.0)) < 0.5 * penalty(fit(0.0))
    windows = fit(1.0, epochs=1, consistency_steps=3).set_params(lag=2).fit(x)
    assert windows.n_train_ == x.shape[0] - 6  # windows of 3 lags of 2 frames
    with pytest.raises(ValueError, match="trajectories"):
        DPNet(MLP(1, (8,), 2), consistency=1.0).fit((x[:-1], x[1:]))
    with pytest.raises(ValueError, match="shared encoder"):
        DPNet(MLP(1, (8,), 2), lagged_encoder=MLP(1, (8,), 2), consistency=1.0).fit(x)
    with pytest.raises(ValueError, match="consistency_steps"):
        DPNet(MLP(1, (8,), 2), consistency=1.0, consistency_steps=1).fit(x)


@pytest.mark.parametrize("name", [n for n in CASES if n != "Generator"])
def test_every_score_is_the_one_heldout_score(name, walk):
    """score(), scikit-learn's scorer and the features' VAMP-2 by heldout.heldout_score agree
    for every estimator of lagged pairs (issue 34: one held-out score)."""
    from dpnets.base import vamp2_scorer
    from dpnets.heldout import heldout_score

    torch.manual_seed(0)
    model = CASES[name]().fit(walk)
    test = np.cumsum(np.random.default_rng(1).standard_normal((400, 1)), axis=0) * 0.1
    score = model.score(test)
    assert vamp2_scorer(model, test) == score
    fx, fy = model.transform(test[:-1]), model.transform(test[1:])
    if isinstance(model, SpectralModel):
        constant = bool(getattr(model, "constant_", False))  # kernels: no constant
        if constant:
            assert np.all(fx[:, 0] == 1.0)
            fx, fy = fx[:, 1:], fy[:, 1:]
        assert score == heldout_score(fx, fy, "vamp2", constant=constant)
        # VAMP-2 of psi is the projection score of [1, psi] (Mardt et al.; Eq. 7)
        proj = heldout_score(fx, fy, "projection", constant=True)
        assert abs(score - proj) < 1e-8 * score
    else:  # a feature learner: P^0 of [1, psi] and [1, psi'] in the network's dtype
        fy = model.transform(test[1:], lagged=True)
        assert score == heldout_score(fx, fy, "projection", constant=True)
        x64, y64 = fx.astype(np.float64), fy.astype(np.float64)
        vamp2 = heldout_score(x64, y64, "vamp2")
        assert abs(heldout_score(x64, y64, "projection", constant=True) - vamp2) < 1e-8 * vamp2


def test_the_heldout_score_is_exact_whatever_the_decomposition():
    """The held-out score returns a number, read on the host: it keeps the
    eigendecomposition's exact cut-offs inside ``spectral_method("cholesky")`` (the GPU's
    path) too. Nearly collinear float64 features (a third feature 1e-9 from the first):
    there the score functions on the Cholesky path take their surrogate and differ, the
    held-out scores do not."""
    from dpnets import scores
    from dpnets.heldout import heldout_score
    from dpnets.linalg import spectral_method

    z = np.cumsum(np.random.default_rng(0).standard_normal((2001, 2)), axis=0) * 0.1
    f = np.concatenate([z, z[:, :1] + 1e-9 * z[:, 1:]], axis=1)
    fx, fy = f[:-1], f[1:]
    x, y = torch.as_tensor(fx), torch.as_tensor(fy)
    held, raw = {}, {}
    for method in ("eigh", "cholesky"):
        with spectral_method(method):
            held[method] = [heldout_score(fx, fy, k) for k in ("vamp1", "vamp2")]
            held[method].append(heldout_score(fx, fy, "projection", constant=True))
            raw[method] = [float(scores.vamp_score(x, y, 2))]
            raw[method].append(float(scores.projection_score(x, y, constant=True)))
    assert held["cholesky"] == held["eigh"]
    assert abs(held["eigh"][2] - held["eigh"][1]) < 1e-8 * held["eigh"][1]  # VAMP-2 = P^0
    for a, b in zip(raw["cholesky"], raw["eigh"], strict=True):
        assert abs(a - b) > 1e-8 * b  # the surrogate (measured 5e-8 and 2.5e-6 relative)


@pytest.mark.parametrize("name", list(CASES))
def test_every_method_before_fit_raises_not_fitted(name, walk, tmp_path):
    """Every inference method of an unfitted estimator raises the one NotFittedError line
    (the autoencoders' ``transform`` raised a bare AttributeError on ``encoder_``)."""
    from dpnets import NotFittedError

    model = CASES[name]()
    kind = type(model).__name__
    text = f"this {kind} instance is not fitted yet; call {kind}.fit(...) first"
    calls = {
        "transform": lambda: model.transform(walk[:5]),
        "score": lambda: model.score(walk[:50]),
        "save": lambda: model.save(tmp_path / "m.pt"),
    }
    if isinstance(model, SpectralModel):
        calls |= {
            "eig": model.eig,
            "eigenfunctions": lambda: model.eigenfunctions(walk[:5]),
            "predict": lambda: model.predict(walk[:5], t=1),
            "implied_timescales": model.implied_timescales,
            "diagnostics": model.diagnostics,
        }
    for method, call in calls.items():
        with pytest.raises(NotFittedError) as info:
            call()
        assert str(info.value) == text, method
    assert not (tmp_path / "m.pt").exists()
