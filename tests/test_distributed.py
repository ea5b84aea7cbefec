"""Exact global-batch training on several processes (issue 17): gloo on CPU, spawned
processes. The score and the gradients of every loss on shards equal those of one process
on the whole batch; training does not depend on the number of processes."""

from __future__ import annotations

import os

import distributed_workers as w
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dpnets import DPNet, load
from dpnets.distributed import global_sums, is_active, statistics_reduced

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed missing")


def _spawn(fn, world: int, tmp_path) -> None:
    store = tmp_path / "store"
    mp.start_processes(
        fn, args=(world, str(store), str(tmp_path)), nprocs=world, join=True, start_method="spawn"
    )


def test_two_processes_give_the_global_batch_score_and_gradients(tmp_path):
    _spawn(w.gradients_worker, 2, tmp_path)
    ranks = [torch.load(tmp_path / f"grads{r}.pt", weights_only=True) for r in range(2)]
    x = w.batch()
    for name in w.LOSSES:
        loss, grads = w.loss_and_grads(name, x, w.encoder())
        for res in ranks:
            got_loss, got_grads = res[name]
            assert got_loss == pytest.approx(loss, rel=1e-10, abs=1e-10), name
            for g, ref in zip(got_grads, grads, strict=True):
                torch.testing.assert_close(g, ref, rtol=1e-10, atol=1e-10, msg=name)
        assert any(float(g.abs().max()) > 1e-6 for g in grads), name  # a real gradient


def test_a_shard_alone_gives_another_score():
    """The reference above is not trivially met: half a batch has another score and gradient."""
    x = w.batch()
    full, g_full = w.loss_and_grads("projection", x, w.encoder())
    half, g_half = w.loss_and_grads("projection", x[:48], w.encoder())
    assert abs(full - half) > 1e-3
    assert max(float((a - b).abs().max()) for a, b in zip(g_full, g_half, strict=True)) > 1e-3


@pytest.mark.parametrize("world", [2, 4])
def test_training_is_world_size_invariant(world, tmp_path):
    ref, ref_op = w.fit_model(False)
    _spawn(w.fit_worker, world, tmp_path)
    for r in range(world):
        got = torch.load(tmp_path / f"fit{r}.pt", weights_only=False)
        for k, v in ref.encoder_.state_dict().items():
            torch.testing.assert_close(got["state"][k], v, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(
            got["history"]["val_score"], ref.history_["val_score"], rtol=1e-8
        )
        np.testing.assert_allclose(
            np.sort_complex(got["eigvals"]), np.sort_complex(ref_op.eigvals_), rtol=1e-6, atol=1e-8
        )
    # rank 0 alone writes models and checkpoints; the file holds the shared model
    assert os.path.exists(tmp_path / "model0.dpnets") and os.path.exists(tmp_path / "ckpt0.pt")
    for r in range(1, world):
        assert not os.path.exists(tmp_path / f"model{r}.dpnets")
        assert not os.path.exists(tmp_path / f"ckpt{r}.pt")
    loaded = load(str(tmp_path / "model0.dpnets"))
    x = w.trajectory()[:50]
    np.testing.assert_allclose(loaded.transform(x), ref.transform(x), rtol=1e-6, atol=1e-8)


def test_ranks_that_see_different_checkpoints_are_refused(tmp_path):
    """A checkpoint only some processes see (not on a shared file system) would resume
    them from different epochs: every rank raises, naming the checkpoint and the fix."""
    _spawn(w.checkpoint_mismatch_worker, 2, tmp_path)
    assert os.path.exists(tmp_path / "ckpt0.pt") and not os.path.exists(tmp_path / "ckpt1.pt")
    for r in range(2):
        message = (tmp_path / f"err{r}.txt").read_text()
        assert "the processes found different checkpoints" in message, message
        assert f"ckpt{r}.pt" in message and "file system" in message


def test_without_a_process_group():
    assert not is_active()
    a = torch.ones(3, requires_grad=True)
    with statistics_reduced(True):  # a single process: nothing to reduce
        (b,) = global_sums(a)
    assert b is a
    with pytest.raises(ValueError, match="distributed=True needs an initialised"):
        DPNet(w.encoder(), distributed=True).fit(np.zeros((50, 3)))
    with pytest.raises(ValueError, match="distributed must be"):
        DPNet(w.encoder(), distributed="yes").fit(np.zeros((50, 3)))


def test_dpnets_fit_under_torchrun(tmp_path):
    """``torchrun -m dpnets fit`` on 2 processes: one folder written once by rank 0, and
    the timescales of a single-process fit with the same settings."""
    import shutil
    import subprocess
    import sys

    from dpnets.cli import main
    from dpnets.systems import OrnsteinUhlenbeck

    if shutil.which("torchrun") is None and not os.path.exists(
        os.path.join(os.path.dirname(sys.executable), "torchrun")
    ):
        pytest.skip("torchrun not installed")
    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    np.save(tmp_path / "traj.npy", ou.sample(3000, seed=0))
    args = ["--lag", "2", "--dt", "0.1", "--epochs", "2", "--dim", "2", "--device", "cpu"]
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [
        torchrun,
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "dpnets",
        "fit",
        str(tmp_path / "traj.npy"),
        "--out",
        str(tmp_path / "multi"),
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("| k | eigenvalue") == 1  # the report is printed once, by rank 0
    assert (
        main(["fit", str(tmp_path / "traj.npy"), "--out", str(tmp_path / "one"), *args, "--quiet"])
        == 0
    )
    files = sorted(p.name for p in (tmp_path / "multi").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "one").iterdir())
    a = load(str(tmp_path / "multi" / "model.pt"))
    b = load(str(tmp_path / "one" / "model.pt"))
    np.testing.assert_allclose(a.implied_timescales(), b.implied_timescales(), rtol=1e-3)


def _torchrun() -> str:
    import shutil
    import sys

    path = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if os.path.exists(path):
        return path
    found = shutil.which("torchrun")
    if found is None:
        pytest.skip("torchrun not installed")
    return found


def test_torchrun_restart_after_a_killed_worker_resumes_from_the_checkpoint(tmp_path):
    """Issue 35: ``torchrun --max-restarts=1`` (gloo, CPU) with rank 1 SIGKILLed in the
    middle of epoch 3: the restarted job resumes from rank 0's last checkpoint (it used to
    hang in the rendezvous, reading the dead attempt's peer addresses) and ends with the
    weights of an uninterrupted two-process run; only complete checkpoints are left."""
    import subprocess

    torchrun = _torchrun()
    worker = os.path.join(os.path.dirname(__file__), "distributed_workers.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    src = os.path.join(os.path.dirname(os.path.dirname(__file__)), "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    runs = {}
    # 4000 pairs in batches of 512: 8 forward passes per epoch on each rank; the 20th is
    # in the middle of epoch 2 (0-based), after rank 0 checkpointed epochs 0 and 1
    for name, restarts, kill_at in [("whole", 0, 0), ("killed", 1, 20)]:
        out = tmp_path / name
        out.mkdir()
        cmd = [torchrun, "--standalone", "--nproc_per_node=2", f"--max-restarts={restarts}"]
        done = subprocess.run(
            [*cmd, worker, str(out), str(kill_at)],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = out
    starts = [(runs["killed"] / f"start{r}.txt").read_text().split("\n")[:2] for r in range(2)]
    assert starts[0] == starts[1]  # both ranks saw the same checkpoint on each attempt
    assert starts[0][0] == "0 0"
    attempt, start = map(int, starts[0][1].split())
    assert attempt == 1 and start >= 2  # resumed, not restarted from scratch
    a = torch.load(runs["whole"] / "final.pt")
    b = torch.load(runs["killed"] / "final.pt")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-6, atol=1e-7)
    assert sorted(p.name for p in runs["killed"].iterdir()) == [
        "ckpt.pt",
        "final.pt",
        "start0.txt",
        "start1.txt",
    ]
    assert torch.load(runs["killed"] / "ckpt.pt", weights_only=True)["epoch"] == 6
