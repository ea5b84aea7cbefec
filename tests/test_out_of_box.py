"""Right answers out of the box (issue 13): units, the constant function, timescales in
physical time, divergence and bad values. Ground truth: the exact spectrum of a small
metastable Markov chain seen through noisy 2-D emissions."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import dpnets
from dpnets import DPNet, Generator, TransferOperator
from dpnets.baselines import DMD, VAMPNet
from dpnets.nn import MLP
from dpnets.systems import MarkovChain

P = np.array([[0.90, 0.09, 0.01], [0.06, 0.90, 0.04], [0.01, 0.07, 0.92]])
CENTRES = np.array([[0.0, 0.0], [2.0, 0.5], [1.0, 2.0]])


def exact_timescales() -> np.ndarray:
    mod = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
    return -1.0 / np.log(mod[1:])  # 9.864, 4.930 steps


@pytest.fixture(scope="module")
def chain_data() -> tuple[np.ndarray, np.ndarray]:
    """20,000 steps of the chain (hidden states) and their noisy 2-D emissions."""
    s = MarkovChain(P).sample(20_000, seed=0)
    x = CENTRES[s] + 0.2 * np.random.default_rng(1).standard_normal((s.size, 2))
    return s, x


def _net(seed: int = 0, **kw) -> DPNet:
    torch.manual_seed(seed)  # the encoder's initial weights
    kw.setdefault("epochs", 10)
    return DPNet(MLP(2, (32, 32), 2), seed=seed, progress=False, device="cpu", **kw)


def _its(net, data, **kw) -> np.ndarray:
    return TransferOperator(net, **kw).fit(data).implied_timescales()


# ------------------------------------------------------------------ units of the user's data
def test_timescales_do_not_depend_on_the_units_of_the_data(chain_data):
    """Raw, shifted (+1e4) and per-coordinate rescaled (x1e-3, x1e3) data: the same model."""
    _, x = chain_data
    ref = _its(_net().fit(x), x)
    for data in (x + 1e4, x * np.array([1e-3, 1e3]), x * 1e6 - 3e7):
        np.testing.assert_allclose(_its(_net().fit(data), data), ref, rtol=1e-5)
    assert ref[0] == np.inf


def test_defaults_get_the_chain_timescales_right(chain_data):
    """The README path with every default (30 epochs) on raw emissions: within 7%."""
    _, x = chain_data
    torch.manual_seed(0)
    net = DPNet(MLP(2, (32, 32), 2), seed=0, progress=False, device="cpu").fit(x)
    its = TransferOperator(net).fit(x).implied_timescales()
    np.testing.assert_allclose(its[1:], exact_timescales(), rtol=0.07)


def test_standardisation_is_stored_and_survives_save_load(chain_data, tmp_path):
    _, x = chain_data
    data = x * np.array([1e-3, 1e3]) + 50.0
    net = _net(epochs=2).fit(data)
    np.testing.assert_allclose(net.input_shift_, data.mean(0))
    np.testing.assert_allclose(net.input_scale_, data.std(0))
    op = TransferOperator(net).fit(data)
    op.save(tmp_path / "op.pt")
    back = dpnets.load(tmp_path / "op.pt")
    np.testing.assert_allclose(back.features.input_shift_, net.input_shift_)
    np.testing.assert_allclose(back.transform(data[:50]), op.transform(data[:50]), atol=1e-6)
    np.testing.assert_array_equal(back.implied_timescales(), op.implied_timescales())
    assert back.constant_ and back.lag_ == 1


def test_encoders_that_must_not_be_standardised_are_left_alone():
    from dpnets.nn import PeriodicMLP

    x = np.random.default_rng(0).random((600, 1))
    torch.manual_seed(0)
    net = DPNet(PeriodicMLP(1, (8,), 2), epochs=1, progress=False).fit(x)
    assert net.input_shift_ is None  # periodic inputs: the period is in raw units
    torch.manual_seed(0)
    net = DPNet(MLP(1, (8,), 2), epochs=1, standardize="none", progress=False).fit(x)
    assert net.input_shift_ is None
    images = np.random.default_rng(0).random((300, 4, 4))
    torch.manual_seed(0)
    net = DPNet(MLP(16, (8,), 2), epochs=1, progress=False).fit(images)
    assert net.input_shift_ is None  # "auto" standardises vector states only
    net = DPNet(MLP(16, (8,), 2), epochs=1, standardize="global", progress=False).fit(images)
    assert np.ndim(net.input_shift_) == 2 and np.unique(net.input_scale_).size == 1


# ------------------------------------------------------------------ the constant function
def test_vampnet_route_to_transfer_operator_gives_exact_timescales(chain_data):
    """VAMP features are centred: TransferOperator adds the constant and gets it right."""
    _, x = chain_data
    torch.manual_seed(0)
    net = VAMPNet(MLP(2, (32, 32), 2), epochs=10, seed=0, progress=False).fit(x)
    op = TransferOperator(net).fit(x)
    assert op.constant_
    its = op.implied_timescales()
    assert its[0] == np.inf
    np.testing.assert_allclose(its[1:], exact_timescales(), rtol=0.05)
    # the old route (no constant) was badly wrong: it is still available, and still wrong
    wrong = TransferOperator(net, constant=False).fit(x).implied_timescales()
    assert abs(wrong[0] - exact_timescales()[0]) > 0.5 * exact_timescales()[0]


def test_kernel_and_autoencoder_features_route_to_transfer_operator(chain_data):
    """Any feature map of the library: the operator adds the constant where it is missing."""
    from dpnets.baselines import DynamicAutoencoder, NystromKernelDMD

    _, x = chain_data
    nys = NystromKernelDMD("rbf", n_centers=200, rank=3, seed=0).fit(x)
    op = TransferOperator(nys.features_).fit(x)
    assert op.constant_ and op.implied_timescales()[0] == np.inf
    np.testing.assert_allclose(op.implied_timescales()[1:3], exact_timescales(), rtol=0.05)
    torch.manual_seed(0)
    ae = DynamicAutoencoder(MLP(2, (32,), 2), MLP(2, (32,), 2), epochs=2, progress=False)
    op = TransferOperator(ae.fit(x).encoder_).fit(x)
    assert op.constant_ and op.implied_timescales()[0] == np.inf


def test_r_learned_features_resolve_r_processes(chain_data):
    """r = 2 network outputs and the constant: both non-trivial processes of a 3-state chain."""
    _, x = chain_data
    net = _net(epochs=10).fit(x)
    assert net.n_features_ == 2 and net.transform(x).shape == (x.shape[0], 2)
    op = TransferOperator(net).fit(x)
    assert op.n_features_ == 3 and op.constant_
    np.testing.assert_allclose(op.eig()[0], 1.0, atol=1e-12)
    assert np.all(np.abs(net.transform(x).mean(0)) < 0.1)  # centred, not spent on 1


def test_constant_auto_detects_features_that_already_span_it(chain_data):
    s, _ = chain_data
    one_hot = lambda z: np.eye(3)[np.asarray(z).reshape(-1).astype(int)]  # noqa: E731
    msm = TransferOperator(one_hot).fit(s)
    assert not msm.constant_  # the indicators sum to 1
    its = msm.implied_timescales()
    assert its[0] == np.inf  # the stationary eigenvalue, exact to round-off
    np.testing.assert_allclose(its[1:], exact_timescales(), rtol=0.03)
    # linear features of raw coordinates far from the origin do not span it: added, and the
    # regression is well conditioned in the standardised basis
    z = np.random.default_rng(0).standard_normal((20_000, 1))
    for t in range(1, z.shape[0]):
        z[t] = 0.9 * z[t - 1] + np.sqrt(1 - 0.81) * z[t]
    raw = z * 200.0 + 5000.0
    op = TransferOperator().fit(raw)
    assert op.constant_
    np.testing.assert_allclose(op.eig().real, [1.0, 0.9], atol=0.01)
    # forecasts of the state in the standardised basis equal the affine least-squares map
    # x_{t+1} = a + b x_t (np.linalg.lstsq) iterated three times
    x0 = np.array([[4000.0], [5000.0], [5600.0]])
    design = np.hstack([np.ones((raw.shape[0] - 1, 1)), raw[:-1]])
    (a, b), *_ = np.linalg.lstsq(design, raw[1:, 0], rcond=None)
    np.testing.assert_allclose(op.predict(x0, t=3), a * (1 + b + b**2) + b**3 * x0, rtol=1e-9)
    # the same estimator from a Dataset of pairs (sums accumulated batch by batch)
    from torch.utils.data import TensorDataset

    ds = TensorDataset(torch.as_tensor(raw[:-1]), torch.as_tensor(raw[1:]))
    op_ds = TransferOperator(lag=1).fit(ds)
    np.testing.assert_allclose(op_ds.operator_, op.operator_, atol=1e-9)
    np.testing.assert_allclose(op_ds.predict(x0, t=3), op.predict(x0, t=3), rtol=1e-9)
    assert DMD().fit(raw).constant_ is False  # classical DMD: no constant unless asked


def test_generator_adds_the_constant_to_linear_features():
    x = np.random.default_rng(0).standard_normal((5000, 1))
    gen = Generator(None, drift=lambda y: -y, diffusion=np.sqrt(2.0)).fit(x)
    assert gen.constant_
    np.testing.assert_allclose(gen.eig().real, [0.0, -1.0], atol=1e-2)
    assert gen.implied_timescales()[0] == np.inf


# ------------------------------------------------------------------ time
def test_lag_and_dt_give_physical_timescales(chain_data):
    _, x = chain_data
    net = _net(epochs=3).set_params(lag=2).fit(x)
    op = TransferOperator(net, dt=0.5).fit(x)  # the DPNet's lag is the default
    assert op.lag_ == 2
    lam = np.abs(op.eig()[1:])
    np.testing.assert_allclose(op.implied_timescales()[1:], -2 * 0.5 / np.log(lam))
    np.testing.assert_allclose(op.implied_timescales(dt=1.0), 2 * op.implied_timescales())
    with pytest.warns(UserWarning, match="lag=3 on features trained at lag=2"):
        assert TransferOperator(net, lag=3).fit(x).lag_ == 3
    for bad in (-1.0, 0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="dt must be"):
            op.implied_timescales(dt=bad)
        with pytest.raises(ValueError, match="dt must be"):
            TransferOperator(net, dt=bad).fit(x)
    with pytest.raises(TypeError, match="dt must be a real number"):
        op.implied_timescales(dt="1")


def test_pre_paired_data_records_its_lag_or_refuses_timescales(chain_data):
    _, x = chain_data
    pairs = (x[:-3], x[3:])
    net = _net(epochs=2).set_params(lag=3).fit(pairs)
    assert net.lag_ == 3
    op = TransferOperator(net).fit(pairs)  # takes the DPNet's recorded lag
    assert op.lag_ == 3 and np.isfinite(op.implied_timescales()[1])
    op = TransferOperator(_net(epochs=1).fit(pairs)).fit(pairs)
    assert op.lag_ is None
    with pytest.raises(ValueError, match="lag of the training pairs is unknown"):
        op.implied_timescales()


# ------------------------------------------------------------------ divergence
def test_divergence_raises_with_the_cause_and_the_fix(chain_data):
    _, x = chain_data
    with pytest.raises(FloatingPointError, match=r"diverged.*lower the learning rate \(lr=10000"):
        _net(lr=1e4, epochs=3).fit(x)
    with pytest.raises(FloatingPointError, match="diverged"):
        _net(lr=1e4, epochs=3, val_fraction=0.0).fit(x)


def test_divergence_after_good_epochs_restores_the_last_good_one(chain_data, monkeypatch):
    _, x = chain_data
    from dpnets import training

    calls = {"n": 0}
    real = training.make_optimizer

    def sabotaged(*args, **kwargs):
        opt = real(*args, **kwargs)
        step = opt.step

        def bad_step(*a, **k):
            calls["n"] += 1
            out = step(*a, **k)
            if calls["n"] > 60:  # after about three good epochs: poison the weights
                for group in opt.param_groups:
                    for p in group["params"]:
                        p.data.fill_(float("nan"))
            return out

        opt.step = bad_step
        return opt

    monkeypatch.setattr(training, "make_optimizer", sabotaged)
    with pytest.warns(RuntimeWarning, match="diverged at epoch .* restored epoch"):
        net = _net(epochs=8, batch_size=1024, val_fraction=0.0).fit(x)
    assert np.all(np.isfinite(net.transform(x)))
    assert len(net.history_["train_score"]) < 8


def test_nan_encoder_and_nan_inputs_give_clear_errors(chain_data):
    _, x = chain_data

    class NaNEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, z):
            return self.lin(z) * float("nan")

    with pytest.raises(FloatingPointError, match="encoder returns NaN"):
        DPNet(NaNEncoder(), progress=False).fit(x)
    bad = x.copy()
    bad[5, 1] = np.nan
    with pytest.raises(ValueError, match="trajectory contains 1 NaN"):
        _net().fit(bad)


def test_huge_inputs_train_normally(chain_data):
    _, x = chain_data
    big = x * 1e30
    its = _its(_net(epochs=3).fit(big), big)
    assert its[0] == np.inf and np.all(np.isfinite(its[1:]))


# ------------------------------------------------------------------ bad values
def test_integer_and_bool_states_are_states():
    s = MarkovChain(P).sample(3000, seed=2)  # int64, as MarkovChain.sample returns them
    torch.manual_seed(0)
    net = DPNet(MLP(1, (16,), 2), epochs=2, progress=False).fit(s)
    assert np.all(np.isfinite(TransferOperator(net).fit(s).implied_timescales()[1:]))
    torch.manual_seed(0)
    net = DPNet(MLP(1, (8,), 1), epochs=1, progress=False).fit(s == 1)
    assert net.transform(np.array([True, False])).shape == (2, 1)


def test_complex_data_is_refused():
    z = np.exp(1j * np.linspace(0, 10, 500))[:, None]
    with pytest.raises(ValueError, match="complex"):
        TransferOperator().fit(z)
    with pytest.raises(ValueError, match="complex"):
        DPNet(MLP(1, (4,), 1), progress=False).fit(z)


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"lr": "0.01"}, TypeError, "lr must be a real number"),
        ({"lr": float("inf")}, ValueError, "lr must be finite"),
        ({"lr": 0.0}, ValueError, "lr must be in"),
        ({"seed": "abc"}, TypeError, "seed must be an integer"),
        ({"seed": -1}, ValueError, "seed must be an integer >= 0"),
        ({"epochs": None}, TypeError, "epochs must be an integer"),
        ({"epochs": 2.5}, TypeError, "epochs must be an integer"),
        ({"epochs": 0}, ValueError, "epochs must be an integer >= 1"),
        ({"batch_size": 64.0}, TypeError, "batch_size must be an integer"),
        ({"gamma": float("nan")}, ValueError, "gamma must be finite"),
        ({"gamma": -1.0}, ValueError, "gamma must be in"),
        ({"val_fraction": 1.0}, ValueError, "val_fraction must be in"),
        ({"standardize": "yes"}, ValueError, "standardize must be one of"),
        ({"constant": 1}, TypeError, "constant must be True or False"),
        ({"objective": "vamp"}, ValueError, "objective must be one of"),
    ],
)
def test_bad_dpnet_parameters_name_themselves(chain_data, kw, error, match):
    _, x = chain_data
    with pytest.raises(error, match=match):
        DPNet(MLP(2, (4,), 1), progress=False, **kw).fit(x[:200])


def test_zero_features_and_bad_operator_parameters(chain_data):
    _, x = chain_data

    class Zero(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 0)

        def forward(self, z):
            return self.lin(z)

    with pytest.raises(ValueError, match="r = 0"):
        DPNet(Zero(), progress=False).fit(x[:200])
    with pytest.raises(ValueError, match="feature covariance is zero"):
        TransferOperator(lambda z: np.zeros((z.shape[0], 2)), constant=False).fit(x)
    for rtol in (float("nan"), 2.0, -1.0, 0.0):
        with pytest.raises(ValueError, match="rtol must be"):
            TransferOperator(rtol=rtol).fit(x)
    with pytest.raises(ValueError, match="ridge must be"):
        TransferOperator(ridge=-1.0).fit(x)
    with pytest.raises(ValueError, match="constant must be one of"):
        TransferOperator(constant="yes").fit(x)
    op = TransferOperator().fit(x)
    with pytest.raises(ValueError, match="t is empty"):
        op.predict(x[:2], t=[])


def test_old_model_files_load_with_the_behaviour_they_were_saved_with():
    """A Langevin model saved in file version 1 (the experiment's model committed before
    issue 18): no standardisation, no constant, and its gamma of 50 per trace of R converted
    to the library's scale (r = 4: 200)."""
    from pathlib import Path

    path = Path(__file__).resolve().parent / "data" / "langevin_dpnet_file_v1.pt"
    net = dpnets.load(path)
    assert net.constant is False and net.standardize == "none" and net.input_shift_ is None
    assert net.gamma == pytest.approx(200.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert net.transform(np.zeros((2, 1))).shape == (2, 4)
