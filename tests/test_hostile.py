"""Hostile input (issue 26): no silent garbage, no hang, bounded memory on load, safe
concurrent outputs. Every case either gives the right answer or an error whose message
names the parameter, key or file and the problem."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import dpnets
from dpnets import DPNet, TransferOperator, io
from dpnets.io import InvalidModelFile
from dpnets.nn import MLP
from dpnets.standardize import InputScaler, state_moments
from dpnets.systems import MarkovChain, OrnsteinUhlenbeck
from dpnets.validation import pcca

ROOT = Path(__file__).resolve().parents[1]


def _ou(n: int = 600, seed: int = 0) -> np.ndarray:
    return OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1).sample(n, seed=seed)


def _net(**kw) -> DPNet:
    kw = {"lag": 1, "epochs": 2, "batch_size": 128, "seed": 0, "progress": False, **kw}
    return DPNet(MLP(1, (8,), 2), **kw)


# ---------------------------------------------------------------------------------- scales
def test_state_moments_neither_underflow_nor_overflow():
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(1000, 2))
    mean, std = state_moments([x[:400], x[400:]], (0,))
    for scale in (1e-300, 1e300):
        m, s = state_moments([x[:400] * scale, x[400:] * scale], (0,))
        np.testing.assert_allclose(m, mean * scale, rtol=1e-12)
        np.testing.assert_allclose(s, std * scale, rtol=1e-12)


@pytest.mark.parametrize("scale", [1e-300, 1e300])
def test_tiny_and_huge_input_scales_give_the_features_of_unit_scale(scale):
    """Standardised inputs are the same numbers at any scale: the same fit, the same
    (non-constant) features; before, 1e-300 gave constant features and 1e300 NaN."""
    x = _ou()
    ref = _net().fit(x).transform(x)
    net = _net().fit(x * scale)
    feats = net.transform(x * scale)
    assert np.all(np.isfinite(feats)) and feats.std(0).min() > 1e-3
    np.testing.assert_allclose(feats, ref, atol=1e-4)


def test_transform_far_outside_the_training_range_refuses_instead_of_nan():
    x = _ou()
    net = _net().fit(x)
    with pytest.raises(ValueError, match=r"X: the features are NaN or inf on 600 of 600"):
        net.transform(x * 1e300)


def test_input_scaler_refuses_a_scale_its_dtype_cannot_hold():
    with pytest.raises(ValueError, match=r"input_scale_.*not representable in torch.float32"):
        InputScaler(torch.zeros(1), torch.tensor([1e-300], dtype=torch.float64).float())
    with pytest.raises(ValueError, match="underflows to 0"):
        InputScaler(torch.zeros(1), torch.zeros(1))


# ---------------------------------------------------------------------------------- pcca
N = 6
BLOCKS = np.repeat(np.arange(2), 3)


def _chain() -> np.ndarray:
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 1.0, (N, N))
    w = w + w.T
    w[BLOCKS[:, None] != BLOCKS[None, :]] *= 0.01
    return w / w.sum(1, keepdims=True)


def _one_hot(s):
    return np.eye(N)[np.asarray(s).reshape(-1).astype(int)]


@pytest.fixture(scope="module")
def chain_model():
    traj = MarkovChain(_chain()).sample(20_000, seed=1)
    return TransferOperator(_one_hot).fit(traj), traj[::10]


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ("negative", r"weights must be non-negative.*1 are negative"),
        ("zero", r"weights are all zero"),
        ("nan", r"weights must be .* finite values"),
        ("short", r"weights must be 2000 finite values \(one per frame\)"),
    ],
)
def test_pcca_refuses_bad_weights(chain_model, weights, match):
    op, frames = chain_model
    w = np.ones(len(frames))
    if weights == "negative":
        w[0] = -1.0
    elif weights == "zero":
        w[:] = 0.0
    elif weights == "nan":
        w[3] = np.nan
    else:
        w = w[:-1]
    with pytest.raises(ValueError, match=match):
        pcca(op, frames, 2, weights=w)


def test_pcca_memberships_are_finite_where_a_frame_clips_to_zero(chain_model):
    """A frame outside the simplex (all memberships clip to 0) goes to its nearest set
    instead of giving 0/0 = NaN; uniform weights give the right blocks."""
    from dpnets.metastable import _clip_rows

    chi = _clip_rows(np.array([[-0.2, -0.1], [0.3, 0.7], [1.4, -0.4]]))
    np.testing.assert_allclose(chi, [[0.0, 1.0], [0.3, 0.7], [1.0, 0.0]])
    op, frames = chain_model
    sets = pcca(op, frames, 2, weights=np.ones(len(frames)))
    assert np.all(np.isfinite(sets.memberships))
    at = np.argmax(sets.memberships_of(np.arange(N), crisp=False), 1)
    assert len(set(at[:3])) == 1 and len(set(at[3:])) == 1 and at[0] != at[3]


# ---------------------------------------------------------------------------------- files
def _payload(path) -> dict:
    return torch.load(path, weights_only=True)


def _forge(path, src, edit) -> None:
    """Rewrite a saved model with ``edit(config_dict, tensors)`` and a recomputed checksum
    (a forger who knows the format)."""
    p = _payload(src)
    cfg = json.loads(p["config"])
    edit(cfg, p["tensors"])
    p["config"] = json.dumps(cfg)
    p["checksum"] = io._checksum(p["kind"], p["config"], p["tensors"])
    torch.save(p, path)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved")
    x = _ou(400)
    op = TransferOperator(_net(), dt=0.1).fit(x)
    op.save(folder / "op.pt")
    op.features_.save(folder / "net.pt")
    return folder


@pytest.mark.parametrize(
    ("file", "edit", "match"),
    [
        ("op.pt", lambda c, t: c["params"].update(dt="abc"), r"dt must be a real number"),
        ("op.pt", lambda c, t: c["params"].update(dt=-1), r"dt must be in \(0"),
        ("op.pt", lambda c, t: c["params"].update(ridge=-1.0), r"ridge must be in \[0"),
        ("net.pt", lambda c, t: c["params"].update(lr="fast"), r"lr must be a real number"),
        ("net.pt", lambda c, t: c["params"].update(optimizer=42), r"invalid optimizer 42"),
        (
            "net.pt",
            lambda c, t: c["fitted"].update(state_shape_=[10**9]),
            r"encoder does not accept states of shape \(1000000000,\)",
        ),
        ("net.pt", lambda c, t: c["fitted"].update(lag_="ten"), r"invalid lag_='ten'"),
        (
            "op.pt",
            lambda c, t: c["features"]["config"]["params"].update(epochs=0),
            r"epochs must be an integer >= 1",
        ),
    ],
)
def test_forged_config_values_are_refused_at_load(saved, tmp_path, file, edit, match):
    path = tmp_path / file
    _forge(path, saved / file, edit)
    with pytest.raises(InvalidModelFile, match=match) as info:
        dpnets.load(path)
    assert str(path) in str(info.value)


def test_version_1_file_without_checksum_loads_only_with_a_warning(tmp_path):
    v1 = ROOT / "tests" / "data" / "langevin_dpnet_file_v1.pt"
    with pytest.warns(UserWarning, match=r"version-1 .* no checksum.*cannot be detected"):
        dpnets.load(v1)
    p = _payload(v1)
    p["checksum"] = "0" * 64  # a version-1 file given a checksum must match it
    torch.save(p, tmp_path / "v1.pt")
    with pytest.raises(InvalidModelFile, match="checksum mismatch"):
        dpnets.load(tmp_path / "v1.pt")


def test_stride_zero_tensor_is_refused_before_anything_reads_it(saved, tmp_path):
    """A 4-byte storage viewed as 10^9 elements: refused from its metadata (no 4 GB)."""
    p = _payload(saved / "op.pt")
    p["tensors"]["operator_"] = torch.zeros(1, dtype=torch.float64).expand(10**9)
    torch.save(p, tmp_path / "expand.pt")
    assert os.path.getsize(tmp_path / "expand.pt") < 10**6
    with pytest.raises(InvalidModelFile, match=r"'operator_' of shape \(1000000000,\) has strides"):
        dpnets.load(tmp_path / "expand.pt")
    assert io._check_layout("t", torch.zeros(4)[1:]) is None  # a contiguous view is fine
    assert "strides (2,)" in io._check_layout("t", torch.zeros(4)[::2])


def test_shape_larger_than_its_stored_bytes_is_refused_without_allocating(tmp_path):
    """A file whose pickle declares 10^8 elements over 7 stored ones: torch refuses to
    grow the stored bytes, so nothing is allocated; the answer is one InvalidModelFile."""
    import io as pyio
    import resource
    import zipfile

    buf = pyio.BytesIO()
    torch.save({"format": "dpnets", "t": torch.zeros(7, dtype=torch.float64)}, buf)
    src = zipfile.ZipFile(pyio.BytesIO(buf.getvalue()))
    with zipfile.ZipFile(tmp_path / "big.pt", "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name.endswith("data.pkl"):
                assert data.count(b"K\x07\x85") == 1  # the shape (7,)
                data = data.replace(b"K\x07\x85", b"J" + (10**8).to_bytes(4, "little") + b"\x85")
            dst.writestr(name, data)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(InvalidModelFile, match=r"big.pt is not a valid dpnets model file"):
        dpnets.load(tmp_path / "big.pt")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB


def test_huge_module_config_is_refused_without_allocating(saved, monkeypatch):
    """A SchNet whose stored config asks for 5e9 parameters (20 GB), with small stored
    tensors: refused after the meta-device build (which now works for SchNet), and no
    module is ever built for real."""
    pytest.importorskip("torch_geometric")
    from dpnets.nn import SchNetEncoder

    small = SchNetEncoder([1, 6, 8], out_dim=2, hidden_channels=8, num_filters=8)
    spec = {
        "name": "SchNetEncoder",
        "config": {**small.config, "hidden_channels": 20000, "num_filters": 20000},
    }
    devices = []
    real_build = io.build

    def build(s):
        devices.append(torch.get_default_device().type)
        return real_build(s)

    monkeypatch.setattr(io, "build", build)
    with pytest.raises(InvalidModelFile, match=r"does not match its configuration"):
        io.restore_module(spec, None, small.state_dict(), "encoder")
    assert devices == ["meta"]


def test_a_module_that_cannot_be_built_on_meta_is_refused_not_built_for_real(monkeypatch):
    from dpnets.nn import registry

    built = []

    class MetaUnsafe(torch.nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            if torch.get_default_device().type == "meta":
                raise NotImplementedError("no meta kernel")
            built.append(width)
            self.lin = torch.nn.Linear(width, width)

    monkeypatch.setitem(registry._REGISTRY, "MetaUnsafe", MetaUnsafe)
    spec = {"name": "MetaUnsafe", "config": {"width": 10**5}}
    with pytest.raises(InvalidModelFile, match="cannot be checked before allocation"):
        io.restore_module(spec, None, {}, "encoder")
    assert built == []


def _finishes(fn, seconds: float = 20.0):
    """Run ``fn`` in a thread: its exception (or None) if it ends in time, else fail (a
    FIFO read would block forever)."""
    out: list = []

    def run():
        try:
            fn()
            out.append(None)
        except BaseException as err:  # noqa: BLE001
            out.append(err)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "hung on a special file"
    return out[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_fifo_paths_are_refused_without_reading(tmp_path):
    from dpnets.datasets import DataFileError, read_trajectories
    from dpnets.workflow import WorkflowError, load_config

    for name in ("model.pt", "traj.npy", "traj.csv", "top.pdb", "config.toml"):
        os.mkfifo(tmp_path / name)
    err = _finishes(lambda: dpnets.load(tmp_path / "model.pt"))
    assert isinstance(err, InvalidModelFile) and "FIFO" in str(err) and "model.pt" in str(err)
    err = _finishes(lambda: load_config(tmp_path / "config.toml"))
    assert isinstance(err, WorkflowError) and "FIFO" in str(err) and "config.toml" in str(err)
    for name in ("traj.npy", "traj.csv"):
        err = _finishes(lambda n=name: read_trajectories(tmp_path / n))
        assert isinstance(err, DataFileError) and "FIFO" in str(err) and name in str(err)
    np.save(tmp_path / "ok.npy", np.zeros((3, 1)))
    # a FIFO topology (MD files need mdtraj; the trajectory itself is checked first)
    pytest.importorskip("mdtraj")
    (tmp_path / "run.dcd").write_bytes(b"")
    err = _finishes(lambda: read_trajectories(tmp_path / "run.dcd", topology=tmp_path / "top.pdb"))
    assert isinstance(err, DataFileError) and "FIFO" in str(err) and "top.pdb" in str(err)


def test_temp_files_of_killed_saves_are_cleaned_by_the_next_save(saved, tmp_path):
    """A save killed with SIGKILL leaves its temporary file; the next save into the folder
    removes it (its process is gone), and never a live writer's or a fresh unknown one."""
    model = dpnets.load(saved / "op.pt")
    script = textwrap.dedent(
        f"""
        import time
        from dpnets.io import atomic_write
        def write(fh):
            fh.write(b"x" * 1000); fh.flush(); print("writing", flush=True); time.sleep(60)
        atomic_write({str(tmp_path / "model.pt")!r}, write)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.kill()
    proc.wait()
    left = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1 and left[0].startswith(f".dpnets-{proc.pid}@")
    host = io._host()
    live = tmp_path / f".dpnets-{os.getpid()}@{host}-live123.tmp"  # a concurrent writer
    fresh = tmp_path / ".dpnets-abc123.tmp"  # unknown writer, recent: kept
    old = tmp_path / ".dpnets-old123.tmp"  # unknown writer, older than the limit: removed
    for p in (live, fresh, old):
        p.write_bytes(b"partial")
    past = time.time() - io.STALE_TMP_SECONDS - 60
    os.utime(old, (past, past))
    model.save(tmp_path / "model.pt")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(["model.pt", live.name, fresh.name])
    assert isinstance(dpnets.load(tmp_path / "model.pt"), TransferOperator)


# ---------------------------------------------------------------------------------- obscure
def test_bad_optimizer_and_device_name_the_parameter():
    x = _ou(200)
    with pytest.raises(TypeError, match=r"optimizer must be a name .* got 42"):
        _net(optimizer=42).fit(x)
    with pytest.raises(ValueError, match=r"unknown optimizer 'adamm'"):
        _net(optimizer="adamm").fit(x)
    with pytest.raises(ValueError, match=r"device='bogus' is not a torch device"):
        _net(device="bogus").fit(x)
    with pytest.raises(TypeError, match=r"device must be a str or torch.device"):
        _net(device=3.5).fit(x)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device='cuda': CUDA is not available"):
            _net(device="cuda").fit(x)
    v1 = ROOT / "tests" / "data" / "langevin_dpnet_file_v1.pt"
    with pytest.raises(ValueError, match=r"device='bogus'"):
        dpnets.load(v1, device="bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device='cuda': CUDA is not available"):
            dpnets.load(v1, device="cuda")


def test_validation_lags_and_steps_name_the_problem(chain_model):
    from dpnets.validation import check_lags, ck_test, implied_timescales

    op, frames = chain_model
    with pytest.raises(ValueError, match=r"lags must be a sequence of positive integers"):
        implied_timescales(op, frames, lags=None)
    with pytest.raises(ValueError, match=r"steps is empty"):
        ck_test(op, frames, steps=[], memberships=_one_hot)
    with pytest.raises(ValueError, match=r"--lags must be positive integers, got 0"):
        check_lags([0], "--lags", 100)
    with pytest.raises(ValueError, match=r"^--lags 100 is not shorter than the longest"):
        check_lags([1, 100], "--lags", 100)  # the option's own name, not --lag (fit's)


def _cli(argv, capsys) -> tuple[int, str]:
    from dpnets.cli import main

    rc = main(argv)
    err = capsys.readouterr().err
    return rc, err


def test_cli_device_and_config_errors_are_one_line(tmp_path, capsys):
    np.save(tmp_path / "x.npy", _ou(300))
    base = ["fit", str(tmp_path / "x.npy"), "--epochs", "1", "--quiet"]
    rc, err = _cli([*base, "--device", "bogus", "--out", str(tmp_path / "o1")], capsys)
    assert rc == 2 and err.count("\n") == 1 and "device='bogus'" in err
    if not torch.cuda.is_available():
        rc, err = _cli([*base, "--device", "cuda", "--out", str(tmp_path / "o2")], capsys)
        assert rc == 2 and err.count("\n") == 1 and "CUDA is not available" in err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()  # no leftovers
    config = tmp_path / "bad.toml"
    for line, what in (
        ('lag = "ten"', r"\[model\] lag = 'ten': lag must be an integer"),
        ("lag = 0", r"\[model\] lag = 0: lag must be an integer >= 1"),
        ("lr = -1.0", r"\[model\] lr = -1.0: lr must be in \(0"),
        ("epochs = 2.5", r"\[model\] epochs = 2.5: epochs must be an integer"),
        ("device = 3", r"\[model\] device = 3: expected a string"),
    ):
        config.write_text(f"[model]\n{line}\n")
        rc, err = _cli(["fit", "--config", str(config), "--out", str(tmp_path / "o3")], capsys)
        assert rc == 2 and err.count("\n") == 1
        assert str(config) in err
        assert re.search(what, err), err


def test_a_failed_fit_leaves_no_half_written_folder(tmp_path):
    from dpnets.workflow import DEFAULT_CONFIG, WorkflowError, fit_files

    np.save(tmp_path / "x.npy", _ou(50))
    config = {t: dict(v) for t, v in DEFAULT_CONFIG.items()}
    config["data"]["paths"] = [str(tmp_path / "x.npy")]
    config["model"].update(lag=80, epochs=1)  # longer than the trajectory: fails after reading
    with pytest.raises(WorkflowError, match="--lag 80"):
        fit_files(config, tmp_path / "new", progress=False)
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(WorkflowError):
        fit_files(config, tmp_path / "empty", progress=False)
    assert list((tmp_path / "empty").iterdir()) == []  # no lock, no staging folder left
    # a lock left by a killed fit (its process is gone) is taken over
    import socket

    (tmp_path / "empty" / ".dpnets-fit.lock").write_text(f"999999999@{socket.gethostname()}")
    config["model"].update(lag=1, batch_size=16)
    fit_files(config, tmp_path / "empty", progress=False)
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == [
        "config.toml",
        "model.pt",
        "report.md",
        "training.png",
    ]


def test_concurrent_fits_into_one_folder_exactly_one_wins(tmp_path):
    """Four fits into one new folder at once: one writes it, the three others are refused
    with a message naming the folder (before: all succeeded and results were silently
    overwritten). The lock is an O_EXCL file, atomic between threads as between
    processes."""
    from dpnets.workflow import DEFAULT_CONFIG, WorkflowError, fit_files

    np.save(tmp_path / "x.npy", _ou(300))
    config = {t: dict(v) for t, v in DEFAULT_CONFIG.items()}
    config["data"]["paths"] = [str(tmp_path / "x.npy")]
    config["model"].update(epochs=2, batch_size=64)
    out = tmp_path / "same"
    start = threading.Barrier(4)
    results: list = [None] * 4

    def run(i: int) -> None:
        start.wait()
        try:
            fit_files(config, out, progress=False)
            results[i] = "ok"
        except WorkflowError as err:
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(r == "ok" for r in results) == 1, results
    for err in results:
        if err != "ok":
            assert isinstance(err, WorkflowError), results
            assert str(out) in str(err)
            assert "another dpnets fit" in str(err) or "not empty" in str(err)
    assert sorted(p.name for p in out.iterdir()) == [
        "config.toml",
        "model.pt",
        "report.md",
        "training.png",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(dpnets.load(out / "model.pt"), TransferOperator)


def test_a_second_process_fit_into_a_folder_being_written_is_refused(tmp_path, capsys):
    """The same between processes: a fit holding the lock (a live process of this host)
    makes ``dpnets fit`` exit 2 with one line naming the folder and the process."""
    import socket

    np.save(tmp_path / "x.npy", _ou(300))
    out = tmp_path / "busy"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".dpnets-fit.lock").write_text(f"{holder.pid}@{socket.gethostname()}")
        rc, err = _cli(["fit", str(tmp_path / "x.npy"), "--quiet", "--out", str(out)], capsys)
    finally:
        holder.kill()
        holder.wait()
    assert rc == 2 and err.count("\n") == 1
    assert f"{out}: another dpnets fit or analyze (process {holder.pid}@" in err


# ------------------------------------------------------------ validation inputs (issue 35)
def _two_sets(z: np.ndarray) -> np.ndarray:
    return np.hstack([z[:, :1] > 0, z[:, :1] <= 0]).astype(float)


@pytest.fixture(scope="module")
def fitted_op():
    x = _ou(800)
    return TransferOperator(lambda z: np.hstack([z, z**2]), lag=1).fit(x), x


@pytest.mark.parametrize(
    ("memberships", "error", "match"),
    [
        (None, TypeError, "memberships must be a callable.*got NoneType"),
        (np.zeros((800, 2)), TypeError, "memberships must be a callable.*got ndarray"),
        (
            lambda z: np.where(np.arange(len(z))[:, None] == 5, np.nan, _two_sets(z)),
            ValueError,
            r"memberships returned 2 NaN or inf value\(s\) \(first at state 5\)",
        ),
        (
            lambda z: np.hstack([_two_sets(z)[:, :1], np.full((len(z), 1), np.inf)]),
            ValueError,
            "memberships returned 800 NaN or inf",
        ),
        (lambda z: _two_sets(z) - 0.5, ValueError, "memberships must be non-negative"),
        (lambda z: _two_sets(z)[:-1], ValueError, r"for n = 800 states .*got \(799, 2\)"),
        (lambda z: _two_sets(z)[:, 0], ValueError, r"memberships must return \(n, n_sets\)"),
        (lambda z: np.full((len(z), 1), "a"), ValueError, "memberships must return numbers"),
        (
            lambda z: np.hstack([np.ones((len(z), 1)), np.zeros((len(z), 1))]),
            ValueError,
            r"memberships of set\(s\) \[1\] are zero on every frame",
        ),
    ],
)
@pytest.mark.parametrize("n_bootstrap", [0, 40])
def test_ck_test_checks_the_memberships_first(fitted_op, memberships, error, match, n_bootstrap):
    """Issue 35: NaN or all-zero memberships used to give a ChapmanKolmogorov of NaN, None
    a numpy TypeError; each is now refused before anything is computed."""
    op, x = fitted_op
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning on the way to the error
        with pytest.raises(error, match=match):
            dpnets.validation.ck_test(op, x, [1, 2], memberships, n_bootstrap=n_bootstrap)


def test_ck_test_memberships_that_differ_in_sets_between_trajectories(fitted_op):
    op, x = fitted_op
    calls = []

    def grows(z):
        calls.append(1)
        return np.ones((len(z), len(calls)))

    with pytest.raises(ValueError, match="1 sets on one trajectory and 2 on another"):
        dpnets.validation.ck_test(op, [x[:400], x[400:]], [1], grows)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda op, x: dpnets.validation.implied_timescales(op, None, [1, 2]),
            TypeError,
            "data is None",
        ),
        (
            lambda op, x: dpnets.validation.ck_test(op, None, [1], _two_sets),
            TypeError,
            "data is None",
        ),
        (
            lambda op, x: dpnets.validation.bootstrap_spectrum(op, None, k=2),
            TypeError,
            "data is None",
        ),
        (lambda op, x: dpnets.validation.cross_validate(op, None), TypeError, "data is None"),
        (lambda op, x: pcca(op, None, 2), TypeError, "X is None"),
        (lambda op, x: pcca(None, x, 2), TypeError, "model must be a fitted dpnets model"),
        (lambda op, x: pcca(op, x, 2, weights=np.full(800, np.nan)), ValueError, "weights must be"),
    ],
)
def test_validation_functions_name_a_missing_argument(fitted_op, call, error, match):
    op, x = fitted_op
    with pytest.raises(error, match=match):
        call(op, x)


def test_good_memberships_still_give_the_test(fitted_op):
    op, x = fitted_op
    ck = dpnets.validation.ck_test(op, x, [1, 2], _two_sets)
    assert np.all(np.isfinite(ck.predictions)) and np.all(np.isfinite(ck.estimates))
    np.testing.assert_allclose(ck.predictions[0], np.eye(2), atol=1e-12)  # lag 0: crisp sets


def _forge_text(path, src, config: str) -> None:
    """A saved model with its JSON config replaced by ``config`` and the checksum fixed."""
    p = _payload(src)
    p["config"] = config
    p["checksum"] = io._checksum(p["kind"], p["config"], p["tensors"])
    torch.save(p, path)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ("[" * 100_000 + "]" * 100_000, r"the config nests 100000 levels deep.*refused unparsed"),
        ('{"a": ' * 65 + "1" + "}" * 65, r"the config nests 65 levels deep"),
        (
            json.dumps({"pad": "x" * (io.MAX_CONFIG_CHARS + 1)}),
            r"the config is \d+ characters long.*refused unparsed",
        ),
        ("{" * 3, r"the config is not valid JSON"),
    ],
)
def test_model_file_header_parsing_is_bounded(saved, tmp_path, config, match):
    """Issue 35: a JSON config nested 100,000 levels deep (checksum fixed up) raised a
    RecursionError from the json module; depth and size are now bounded before parsing,
    with one InvalidModelFile line naming the file."""
    path = tmp_path / "deep.pt"
    _forge_text(path, saved / "op.pt", config)
    with pytest.raises(InvalidModelFile, match=match) as info:
        dpnets.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_brackets_inside_config_strings_do_not_count_as_depth(saved, tmp_path):
    path = tmp_path / "strings.pt"
    _forge(path, saved / "op.pt", lambda c, t: c.update(note='[[[{{{"\\' * 30))
    assert isinstance(dpnets.load(path), TransferOperator)


# ------------------------------------------------------------- files on the command line
_PDB = "".join(
    f"ATOM  {i + 1:5d}  CA  ALA A{i + 1:4d}    {3.8 * i:8.3f}{0.0:8.3f}{0.0:8.3f}  1.00  0.00"
    "           C\n"
    for i in range(5)
)


@pytest.mark.parametrize("ext", [".xtc", ".dcd", ".trr", ".nc"])
@pytest.mark.parametrize("content", ["random", "empty"])
def test_md_file_of_random_bytes_is_one_line_naming_it(tmp_path, ext, content):
    """Issue 35: ``dpnets fit`` on an .xtc of random bytes with a PDB topology printed
    MDAnalysis' ``AttributeError: 'XTCReader' object has no attribute '_xdr'`` traceback
    (raised again by the half-built reader's ``__del__``) after its error, and mdtraj's DCD
    plugin printed its diagnosis on stdout; now both streams hold one line, exit 2."""
    pytest.importorskip("mdtraj")
    pytest.importorskip("MDAnalysis")
    (tmp_path / "top.pdb").write_text(_PDB + "END\n")
    bad = tmp_path / f"bad{ext}"
    bad.write_bytes(np.random.default_rng(0).bytes(5000) if content == "random" else b"")
    cmd = [sys.executable, "-m", "dpnets", "fit", str(bad), "--topology", str(tmp_path / "top.pdb")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *sys.path]))
    done = subprocess.run(
        [*cmd, "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"dpnets: error: {bad}: cannot read")
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def fit_folder(tmp_path_factory):
    from dpnets.workflow import DEFAULT_CONFIG, fit_files

    folder = tmp_path_factory.mktemp("fit")
    np.save(folder / "x.npy", np.hstack([_ou(600), _ou(600, seed=1)]))
    np.save(folder / "w3.npy", np.random.default_rng(0).normal(size=(100, 3)))
    config = {t: dict(v) for t, v in DEFAULT_CONFIG.items()}
    config["data"]["paths"] = [str(folder / "x.npy")]
    config["model"].update(epochs=2, batch_size=128)
    fit_files(config, folder / "FIT", progress=False)
    return folder


@pytest.mark.parametrize(
    "command",
    [
        ["transform", "{FIT}", "{w3}", "--out", "{tmp}/t.npy"],
        ["forecast", "{FIT}", "{w3}", "--steps", "2", "--out", "{tmp}/f.npy"],
        ["analyze", "{FIT}", "{w3}", "--out", "{tmp}/an", "--quiet"],
    ],
)
def test_a_file_of_another_width_is_named(fit_folder, tmp_path, capsys, command):
    """Issue 35: ``dpnets transform FIT w3.npy`` (a width-3 file for a width-2 model) said
    "X has 3 features, but TransferOperator is expecting 2 features as input" without the
    file; now one line names it and the shapes, and nothing is written."""
    names = {"FIT": fit_folder / "FIT", "w3": fit_folder / "w3.npy", "tmp": tmp_path}
    rc, err = _cli([c.format(**names) for c in command], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{fit_folder / 'w3.npy'}: states of shape (3,)" in err
    assert "that model takes states of shape (2,)" in err
    assert list(tmp_path.iterdir()) == []


def test_analyze_into_a_folder_being_written_is_refused(fit_folder, tmp_path, capsys):
    """Issue 35 item 8: ``dpnets analyze --out`` takes the lock of ``fit``: a folder that
    another process is writing is refused with one line naming it and the process."""
    import socket

    out = tmp_path / "busy"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".dpnets-fit.lock").write_text(f"{holder.pid}@{socket.gethostname()}")
        rc, err = _cli(["analyze", str(fit_folder / "FIT"), "--out", str(out), "--quiet"], capsys)
    finally:
        holder.kill()
        holder.wait()
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{out}: another dpnets fit or analyze (process {holder.pid}@" in err
    assert sorted(p.name for p in out.iterdir()) == [".dpnets-fit.lock"]  # nothing written


def test_concurrent_analyses_into_one_folder_exactly_one_writes_it(fit_folder, tmp_path):
    """Two analyses into one new folder at once (overwrite=False): one writes it, the other
    is refused; the folder holds one complete analysis and no staging folder."""
    from dpnets.workflow import WorkflowError, analyze

    out = tmp_path / "same"
    start = threading.Barrier(2)
    results: list = [None] * 2

    def run(i: int) -> None:
        start.wait()
        try:
            analyze(
                fit_folder / "FIT",
                out=out,
                overwrite=False,
                progress=False,
                n_bootstrap=2,
                n_sets=2,
            )
            results[i] = "ok"
        except Exception as err:  # noqa: BLE001 - reported by the assertions below
            results[i] = err

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert sum(r == "ok" for r in results) == 1, results
    err = next(r for r in results if r != "ok")
    assert isinstance(err, WorkflowError) and str(out) in str(err)
    assert "another dpnets fit or analyze" in str(err) or "not empty" in str(err)
    assert {"ck_test.png", "eigenvalues.png", "report.md", "results.json", "timescales.png"} <= {
        p.name for p in out.iterdir()
    }
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging folder left


# ------------------------------------------------------------------ ambiguous list shapes
@pytest.mark.parametrize(
    "fit",
    [
        lambda x: DPNet(MLP(2, (8,), 2), epochs=1, progress=False).fit(x.tolist()),
        lambda x: TransferOperator(lambda z: z, lag=1).fit(x.tolist()),
        lambda x: dpnets.baselines.DMD(lag=1).fit([tuple(r) for r in x]),
        lambda x: _net(epochs=1).set_params(encoder=MLP(2, (8,), 2)).fit(x).transform(x.tolist()),
        lambda x: dpnets.validation.implied_timescales(dpnets.baselines.DMD(), x.tolist(), [1]),
    ],
)
def test_a_list_of_rows_is_explained(fit):
    """Issue 35: ``DPNet.fit(X.tolist())`` read a list of 2-number rows as 300 trajectories
    of one coordinate ("MLP expects 2 input features, got 1"; the default encoder fitted
    them silently); now the message says how a list is read and how to pass one
    trajectory."""
    x = np.hstack([_ou(300), _ou(300, seed=1)])
    with pytest.raises(ValueError, match=r"is a list of 300 rows of 2 numbers") as info:
        fit(x)
    assert "a list is read as a list of trajectories" in str(info.value)
    assert "(shape (300, 2))" in str(info.value)


def test_a_stack_of_trajectories_is_hinted_to_an_mlp():
    """Four trajectories of 2 coordinates stacked as one (4, 300, 2) array are read as 4
    frames of shape (300, 2): the MLP's error says what the shape suggests; list(X) fits.
    States whose last axis is not the MLP's input (a field) get no such hint."""
    x = np.stack([np.hstack([_ou(300, seed=2 * i), _ou(300, seed=2 * i + 1)]) for i in range(4)])
    net = _net(epochs=1).set_params(encoder=MLP(2, (8,), 2))
    with pytest.raises(ValueError) as info:
        net.fit(x)
    assert str(info.value) == (
        "MLP expects 2 input features, got 600 (states of shape (300, 2): a stack of "
        "trajectories (n_traj, T, d)? pass list(X))"
    )
    assert net.fit(list(x)).transform(x[0]).shape == (300, 2)
    with pytest.raises(ValueError) as info:  # snapshots of a 5 x 4 field
        _net(epochs=1).set_params(encoder=MLP(2, (8,), 2)).fit(np.zeros((50, 5, 4)))
    assert str(info.value) == "MLP expects 2 input features, got 20"


def test_a_list_of_numbers_is_explained():
    x = _ou(300)[:, 0]
    with pytest.raises(ValueError, match=r"X is a list of 300 numbers.*np.asarray\(X\)"):
        dpnets.baselines.DMD(lag=1).fit(x.tolist())


def test_lists_of_trajectories_are_still_read():
    """Arrays in a list, and plain lists of scalar frames fewer than their length, are
    trajectories as before."""
    x = _ou(300)[:, 0]
    a = dpnets.baselines.DMD(lag=1).fit([x[:150], x[150:]]).eig()
    b = dpnets.baselines.DMD(lag=1).fit([x[:150].tolist(), x[150:].tolist()]).eig()
    np.testing.assert_array_equal(a, b)


# ------------------------------------------------------- linear estimators at extreme scales
def _ar2(n: int = 300) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.zeros((n, 2))
    for t in range(1, n):
        x[t] = 0.9 * x[t - 1] + 0.3 * rng.normal(size=2)
    return x


def _leading(model, k: int = 4) -> np.ndarray:
    ev = model.eig()
    return ev[np.argsort(-np.abs(ev), kind="stable")][:k]


@pytest.mark.parametrize(
    "make",
    [
        lambda: dpnets.baselines.EDMD(lag=1),
        lambda: dpnets.baselines.KernelDMD(lag=1),
        lambda: dpnets.baselines.KernelDMD("laplacian", lag=1),
        lambda: dpnets.baselines.KernelDMD("absexp", lag=1),
        lambda: dpnets.baselines.NystromKernelDMD(lag=1, n_centers=200, seed=0),
    ],
)
@pytest.mark.parametrize("scale", [1e-300, 1e300, 2.0**-996, 2.0**996])
def test_estimators_in_units_of_the_data_give_the_spectrum_of_unit_scale(make, scale):
    """Issue 35: kernel models at 1e300 raised "length_scale must be finite" (the median
    distance overflowed) and at 1e-300 silently used length-scale 1 on distances of 1e-300
    (a constant kernel). Distances are now computed in units of a power of two near the
    length-scale: the eigenvalues are those at unit scale (exactly for a power-of-two
    scale; to the round-off of ``x * scale`` otherwise: measured <= 1.3e-9)."""
    x = _ar2()
    ref = _leading(make().fit(x))
    got = _leading(make().fit(x * scale))
    exact = np.log2(scale) == np.round(np.log2(scale))
    np.testing.assert_allclose(got, ref, rtol=0, atol=0 if exact else 1e-7)


@pytest.mark.parametrize(
    "make",
    [
        lambda: dpnets.baselines.DMD(lag=1),
        lambda: dpnets.baselines.DMD(rank=1, lag=1),
        lambda: dpnets.baselines.DMD(constant=True, lag=1),
        lambda: dpnets.baselines.EDMD(dictionary="monomial", lag=1),
        lambda: TransferOperator(None, lag=1),
        lambda: TransferOperator(lambda z: np.hstack([z, np.tanh(z)]), lag=1),
    ],
)
@pytest.mark.parametrize("scale", [1e-300, 1e300])
def test_estimators_on_features_as_given_refuse_extreme_scales_naming_them(make, scale):
    """Issue 35: ``DMD(lag=1).fit(X * 1e300)`` raised numpy's "array must not contain infs
    or NaNs", and at 1e-300 DMD(constant=True) and EDMD's monomials silently returned
    eigenvalues 0.9 away from the right ones (squares below float64's range). Estimators
    that use their features as given cannot rescale them without changing the model, so
    they refuse, naming the magnitude and the fix."""
    with pytest.raises(ValueError, match=r"magnitude \d\.\d+e[-+]300") as info:
        make().fit(_ar2() * scale)
    assert ("overflow" if scale > 1 else "underflow") in str(info.value)
    assert "rescale the data" in str(info.value)


@pytest.mark.parametrize("kernel", ["poly", "linear"])
@pytest.mark.parametrize("scale", [1e-300, 1e300])
def test_inner_product_kernels_refuse_extreme_scales_naming_them(kernel, scale):
    with pytest.raises(ValueError, match=rf"states of magnitude .*e[-+]300 with the '{kernel}'"):
        dpnets.baselines.KernelDMD(kernel, lag=1).fit(_ar2() * scale)


def test_moments_at_moderate_scales_are_unchanged():
    """The range check refuses nothing an ordinary fit computes: features of 1e150 with
    states of 1e150, and EDMD's bounded features with states of 1e300 (products 1e300)."""
    x = _ar2()
    ref = _leading(dpnets.baselines.DMD(lag=1).fit(x), 2)
    np.testing.assert_allclose(_leading(dpnets.baselines.DMD(lag=1).fit(x * 2.0**500), 2), ref)
    np.testing.assert_allclose(_leading(dpnets.baselines.DMD(lag=1).fit(x * 2.0**-500), 2), ref)


def test_transform_of_none_names_the_argument():
    """Issue 35: ``net.transform(None)`` said "X must have at least one dimension
    (samples), got a scalar"."""
    net = _net(epochs=1).fit(_ou(300))
    with pytest.raises(TypeError, match=r"X is None: pass the states"):
        net.transform(None)
    with pytest.raises(TypeError, match=r"trajectory 1 is None"):
        dpnets.baselines.DMD(lag=1).fit([_ou(300), None])
