"""Model files cannot be lost or corrupted silently (issue 14, persistence): atomic saves that
survive kill -9, and one clear error for every malformed, crafted, truncated, foreign or
bit-flipped file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

import dpnets
from dpnets import DPNet, TransferOperator
from dpnets import io as dio
from dpnets.nn import MLP
from dpnets.systems import OrnsteinUhlenbeck

INVALID = "not a valid dpnets model file"


def _payload(path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _rewrite(path, payload: dict, fix_checksum: bool = True) -> None:
    """Write a crafted payload, with a valid checksum as an attacker would."""
    if fix_checksum:
        payload["checksum"] = dio._checksum(payload["kind"], payload["config"], payload["tensors"])
    torch.save(payload, path)


# ------------------------------------------------------------------ atomic save
def test_a_failing_save_keeps_the_previous_file(tmp_path, fitted, monkeypatch):
    x, net, op = fitted
    path = tmp_path / "op.pt"
    op.save(path)
    before = path.read_bytes()

    def crash(obj, fh):
        fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        op.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["op.pt"]  # no temporary file left
    monkeypatch.undo()
    np.testing.assert_array_equal(dpnets.load(path).eig(), op.eig())


def test_a_save_into_a_missing_or_wrong_place_names_the_file(tmp_path, fitted):
    """The error names the file asked for and its problem, never the temporary file."""
    x, net, op = fitted
    (tmp_path / "file.pt").write_bytes(b"x")
    cases = {
        tmp_path / "nodir" / "m.pt": (
            FileNotFoundError,
            f"the folder {tmp_path / 'nodir'} does not exist",
        ),
        tmp_path / "file.pt" / "m.pt": (
            NotADirectoryError,
            f"{tmp_path / 'file.pt'} is a file, not a folder",
        ),
        tmp_path: (IsADirectoryError, "it is a folder; give a file name"),
    }
    for path, (kind, problem) in cases.items():
        with pytest.raises(kind) as info:
            op.save(path)
        assert str(info.value) == f"cannot write {path}: {problem}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.pt"]
    assert not list(tmp_path.parent.glob(".dpnets-*.tmp"))


def test_kill_9_during_resaves_never_destroys_the_previous_file(tmp_path, fitted):
    """8 processes re-saving a model in a loop, each killed at a random moment (each
    process imports torch: 20 of them took 40-85 s of the suite)."""
    _, _, op = fitted
    path = tmp_path / "model.pt"
    op.save(path)
    script = textwrap.dedent(
        f"""
        import sys, dpnets
        op = dpnets.load({str(path)!r})
        print("ready", flush=True)
        while True:
            op.save({str(path)!r})
        """
    )
    rng = np.random.default_rng(0)
    for _ in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(float(rng.uniform(0.0, 0.05)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        np.testing.assert_array_equal(dpnets.load(path).eig(), op.eig())
    leftovers = [p for p in tmp_path.iterdir() if p.name != "model.pt"]
    for p in leftovers:  # a killed writer can leave its temporary file, never a broken model
        assert p.name.startswith(".dpnets-") and p.suffix == ".tmp"


# ------------------------------------------------------------------ crafted files
def test_a_small_file_cannot_ask_for_huge_layers(tmp_path, fitted):
    _, net, _ = fitted
    path = tmp_path / "net.pt"
    net.save(path)
    payload = _payload(path)
    cfg = json.loads(payload["config"])
    cfg["modules"]["encoder"]["config"]["hidden"] = [200_000_000]
    payload["config"] = json.dumps(cfg)
    _rewrite(path, payload)
    assert path.stat().st_size < 8192
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=f"{INVALID}.*does not match its configuration"):
        dpnets.load(path)
    assert time.perf_counter() - t0 < 1.0  # built on the meta device: nothing allocated


def _nan(name):
    return lambda p, c: p["tensors"].__setitem__(name, p["tensors"][name] * np.nan)


def _fitted_value(key, value):
    return lambda p, c: c["fitted"].__setitem__(key, value)


@pytest.mark.parametrize(
    ("which", "edit", "match"),
    [
        (1, _nan("encoder.net.0.weight"), "NaN or inf"),
        (1, _fitted_value("n_features_", 999), "features"),
        (1, _fitted_value("state_shape_", [0]), "state_shape_"),
        (1, lambda p, c: c.pop("fitted"), "missing or malformed entry"),
        (2, _nan("cx_"), "NaN"),
        (2, _fitted_value("cx_rank_", 10**18), "cx_rank_"),
        (2, _fitted_value("n_features_", 999), "n_features_"),
        (2, lambda p, c: p["tensors"].__setitem__("operator_", torch.zeros(2, 2)), "operator_"),
        (2, _fitted_value("lag_", -3), "lag_"),
    ],
)
def test_crafted_files_are_refused(tmp_path, fitted, which, edit, match):
    """A DPNet (1) or operator (2) file edited with a valid checksum, as an attacker would."""
    path = tmp_path / "model.pt"
    fitted[which].save(path)
    payload = _payload(path)
    cfg = json.loads(payload["config"])
    edit(payload, cfg)
    payload["config"] = json.dumps(cfg)
    _rewrite(path, payload)
    with pytest.raises(ValueError, match=f"{INVALID}.*{match}"):
        dpnets.load(path)


def test_a_modified_file_fails_its_checksum(tmp_path, fitted):
    _, _, op = fitted
    path = tmp_path / "op.pt"
    op.save(path)
    payload = _payload(path)
    payload["tensors"]["operator_"] = payload["tensors"]["operator_"] * 1.001
    _rewrite(path, payload, fix_checksum=False)
    with pytest.raises(ValueError, match=f"{INVALID}: checksum mismatch"):
        dpnets.load(path)


# ------------------------------------------------------------------ broken and foreign files
def test_truncated_empty_and_foreign_files(tmp_path, fitted):
    _, _, op = fitted
    good = tmp_path / "op.pt"
    op.save(good)
    data = good.read_bytes()
    cases = {
        "empty.pt": b"",
        "truncated.pt": data[: len(data) // 2],
        "text.pt": b"hello, I am not a model\n",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    np.save(tmp_path / "array.npy", np.arange(5.0))
    torch.save(torch.arange(3.0), tmp_path / "tensor.pt")
    torch.save({"format": "dpnets", "version": 99}, tmp_path / "future.pt")
    for name in [*cases, "array.npy", "tensor.pt", "future.pt"]:
        with pytest.raises(ValueError, match=INVALID) as info:
            dpnets.load(tmp_path / name)
        assert "weights_only=False" not in str(info.value)  # never torch's unsafe advice
    with pytest.raises(ValueError, match=f"{INVALID}: it is a folder"):
        dpnets.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        dpnets.load(tmp_path / "missing.pt")


def test_single_byte_corruptions_never_load_silently_different(tmp_path, fitted):
    """Every flipped byte either raises the clear error or leaves the model bit-identical."""
    x, _, op = fitted
    good = tmp_path / "op.pt"
    op.save(good)
    data = bytearray(good.read_bytes())
    rng = np.random.default_rng(1)
    ref = op.predict(x[:20], t=[1, 3])
    raised = 0
    for pos in rng.choice(len(data), size=40, replace=False):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        path = tmp_path / "flipped.pt"
        path.write_bytes(bytes(bad))
        try:
            back = dpnets.load(path)
        except ValueError as err:
            assert INVALID in str(err)
            raised += 1
            continue
        np.testing.assert_array_equal(back.predict(x[:20], t=[1, 3]), ref)
    # most flips are caught; the rest hit bytes that carry nothing (zip alignment padding)
    assert raised >= 20


def test_saved_size_does_not_grow_with_the_number_of_samples(tmp_path, fitted):
    x, net, _ = fitted
    long = OrnsteinUhlenbeck(dt=0.2).sample(40_000, seed=1)
    sizes = []
    for data in (x, long):
        op = TransferOperator(net).fit(data)
        op.save(tmp_path / "op.pt")
        sizes.append((tmp_path / "op.pt").stat().st_size)
        back = dpnets.load(tmp_path / "op.pt")
        np.testing.assert_array_equal(back.predict(x[:5], [1, 3]), op.predict(x[:5], [1, 3]))
        np.testing.assert_array_equal(back.stationary_weights(x[:5]), op.stationary_weights(x[:5]))
    assert abs(sizes[1] - sizes[0]) < 64  # 2,000 or 40,000 samples: the same file
    with pytest.raises(ValueError, match="does not store the training features"):
        back.predict(x[:2], 1, observable=long[:-1, 0] ** 2)


def test_optimizer_classes_are_saved_or_refused(tmp_path, fitted):
    x, _, _ = fitted
    torch.manual_seed(0)
    net = DPNet(
        MLP(1, (8,), 2), optimizer=torch.optim.SGD, epochs=1, batch_size=256, progress=False
    ).fit(x)
    net.save(tmp_path / "sgd.pt")
    assert dpnets.load(tmp_path / "sgd.pt").optimizer is torch.optim.SGD

    class MyAdam(torch.optim.Adam):
        pass

    net.optimizer = MyAdam
    with pytest.raises(TypeError, match="cannot save optimizer="):
        net.save(tmp_path / "mine.pt")
    assert not (tmp_path / "mine.pt").exists()


def test_files_of_the_previous_layout_still_load(tmp_path, fitted):
    """An operator whose DPNet feature map was stored under the earlier "dpnet" layout."""
    x, _, op = fitted
    path = tmp_path / "op.pt"
    op.save(path)
    payload = _payload(path)
    cfg = json.loads(payload["config"])
    cfg["features"] = {"kind": "dpnet", "config": cfg["features"]["config"]}
    payload["config"] = json.dumps(cfg)
    _rewrite(path, payload)
    np.testing.assert_array_equal(dpnets.load(path).predict(x[:5], 2), op.predict(x[:5], 2))


def test_saved_files_get_the_mode_of_any_other_file(tmp_path):
    """Atomic writes go through a temporary file that mkstemp creates 0600; the saved model
    gets the mode every other output of the run gets (0666 less the umask: 0644 here)."""
    op = TransferOperator(lag=1).fit(np.random.default_rng(0).normal(size=(200, 2)))
    op.save(tmp_path / "model.pt")
    (tmp_path / "report.md").write_text("plain file")
    mode = os.stat(tmp_path / "model.pt").st_mode & 0o777
    assert mode == os.stat(tmp_path / "report.md").st_mode & 0o777
