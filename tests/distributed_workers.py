"""Worker functions of ``test_distributed`` (run in spawned processes, so they live in an
importable module; pytest puts this folder on sys.path, and spawn passes sys.path on)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from dpnets import DPNet, TransferOperator
from dpnets.distributed import average_gradients, shard, statistics_reduced
from dpnets.nn import MLP
from dpnets.scores import GeneratorLoss, MultistepLoss, make_loss

#: the losses whose global-batch value and gradient are checked
LOSSES = {
    "projection": lambda: make_loss("projection", 0.1, constant=True),
    "relaxed": lambda: make_loss("relaxed", 0.1, constant=True),
    "vamp1": lambda: make_loss("vamp1", 0.1, constant=True),
    "vamp2": lambda: make_loss("vamp2", 0.0),
    "multistep": lambda: MultistepLoss(make_loss("projection", 0.1, True), 3.0, True),
    "generator": lambda: GeneratorLoss(0.1, "ito", constant=True),
    "dirichlet": lambda: GeneratorLoss(0.1, "dirichlet", constant=True),
}


def batch(n: int = 96) -> torch.Tensor:
    """A fixed float64 batch of 3-D states."""
    gen = torch.Generator().manual_seed(3)
    return torch.randn(n, 3, 3, generator=gen, dtype=torch.float64)


def encoder() -> torch.nn.Module:
    torch.manual_seed(1)
    return MLP(3, (16,), 4, activation="tanh").double()


def loss_and_grads(name: str, x: torch.Tensor, enc: torch.nn.Module) -> tuple[float, list]:
    """The loss of ``name`` on states ``x`` (n, 3, 3) and its parameter gradients."""
    loss_fn = LOSSES[name]()
    enc.zero_grad()
    f = enc(x.reshape(-1, 3)).reshape(x.shape[0], 3, -1)
    if name == "multistep":
        loss = loss_fn(f[:, 0], f[:, 1:])
    elif name == "dirichlet":
        loss = loss_fn(f[:, 0], torch.stack([f[:, 1], f[:, 2]], dim=2))
    else:
        loss = loss_fn(f[:, 0], f[:, 1])
    loss.backward()
    return float(loss.detach()), [p.grad.clone() for p in enc.parameters()]


def _init(rank: int, world: int, store: str) -> None:
    torch.set_num_threads(1)  # several processes share the test machine's cores
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)


def gradients_worker(rank: int, world: int, store: str, out: str) -> None:
    """Every loss on this rank's shard of :func:`batch`, statistics summed over ranks."""
    _init(rank, world, store)
    try:
        x = batch()
        part = x[shard(torch.arange(x.shape[0]))]
        enc = encoder()
        results = {}
        with statistics_reduced(True):
            for name in LOSSES:
                loss, _ = loss_and_grads(name, part, enc)
                average_gradients(list(enc.parameters()))
                results[name] = (loss, [p.grad.clone() for p in enc.parameters()])
        torch.save(results, os.path.join(out, f"grads{rank}.pt"))
    finally:
        dist.destroy_process_group()


def trajectory() -> np.ndarray:
    """A 2-D Ornstein–Uhlenbeck trajectory (float64)."""
    rng = np.random.default_rng(0)
    x = np.zeros((1500, 2))
    for t in range(1, x.shape[0]):
        x[t] = 0.9 * x[t - 1] + 0.3 * rng.standard_normal(2)
    return x * 5.0 + 3.0


def make_net(distributed: Any, epochs: int = 5) -> DPNet:
    """A float64 DPNet (batches of 200); the initial weights differ between ranks, so
    that the test sees rank 0's being broadcast."""
    torch.manual_seed(0 if not dist.is_initialized() or dist.get_rank() == 0 else 5)
    return DPNet(
        MLP(2, (16,), 3, activation="tanh").double(),
        epochs=epochs,
        batch_size=200,
        seed=0,
        progress=False,
        distributed=distributed,
        device="cpu",
    )


def fit_model(distributed: Any, checkpoint: str | None = None) -> tuple[DPNet, TransferOperator]:
    """5 epochs of :func:`make_net` at lag 2, and the composite operator (2 epochs)."""
    net = make_net(distributed).set_params(lag=2).fit(trajectory(), checkpoint=checkpoint)
    composite = TransferOperator(make_net(distributed, epochs=2), lag=2).fit(trajectory())
    return net, composite


def fit_worker(rank: int, world: int, store: str, out: str) -> None:
    """:func:`fit_model` on ``world`` processes; rank r saves to ``model{r}.dpnets``."""
    _init(rank, world, store)
    try:
        ckpt = os.path.join(out, f"ckpt{rank}.pt")
        net, composite = fit_model("auto", checkpoint=ckpt)
        net.save(os.path.join(out, f"model{rank}.dpnets"))
        state = {k: v.clone() for k, v in net.encoder_.state_dict().items()}
        result = {"state": state, "history": net.history_, "eigvals": composite.eigvals_}
        torch.save(result, os.path.join(out, f"fit{rank}.pt"))
    finally:
        dist.destroy_process_group()


def checkpoint_mismatch_worker(rank: int, world: int, store: str, out: str) -> None:
    """A checkpointed fit, then the same fit again with a checkpoint that only rank 0 sees
    (each rank names its own file; rank 0 alone writes): the ranks would resume from
    different epochs. Each rank writes what the second fit raised to ``err{rank}.txt``."""
    _init(rank, world, store)
    try:
        ckpt = os.path.join(out, f"ckpt{rank}.pt")
        make_net("auto", epochs=2).set_params(lag=2).fit(trajectory(), checkpoint=ckpt)
        try:
            net = make_net("auto", epochs=2).set_params(lag=2)
            net.fit(trajectory(), checkpoint=ckpt, resume=True)
            message = "no error"
        except RuntimeError as err:
            message = str(err)
        with open(os.path.join(out, f"err{rank}.txt"), "w") as f:
            f.write(message)
    finally:
        dist.destroy_process_group()


class _KillAt(torch.nn.Module):
    """Identity that SIGKILLs its process at its ``n``-th forward pass (``n <= 0``: never):
    a worker dying in the middle of an epoch."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.calls = n, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.n:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return x


def torchrun_resume(out: str, kill_at: int) -> None:
    """The issue-35 job under ``torchrun``: ``DPNet(3 -> 32 -> 4, lag=1, epochs=6,
    val_fraction=0, seed=0).fit(x, checkpoint=..., resume=True)``; rank 1 of the first
    attempt SIGKILLs itself at its ``kill_at``-th training forward pass. Writes the epoch
    each rank resumed from (``start{rank}.txt``) and rank 0's final weights
    (``final.pt``)."""
    from dpnets.distributed import init_from_env
    from dpnets.distributed import rank as get_rank

    torch.set_num_threads(1)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if attempt > 0 and os.environ["RANK"] == "0":
        # workers of a restart start at different times (imports on a busy machine): the
        # restarted rank 1 asks the store for rank 0's address before rank 0 is back
        import time

        time.sleep(3.0)
    init_from_env()
    rank = get_rank()
    ckpt = os.path.join(out, "ckpt.pt")
    start = torch.load(ckpt, weights_only=True)["epoch"] if os.path.exists(ckpt) else 0
    with open(os.path.join(out, f"start{rank}.txt"), "a") as fh:
        fh.write(f"{attempt} {start}\n")
    rng = np.random.default_rng(0)
    x = np.cumsum(rng.normal(size=(4000, 3)), axis=0) * 0.05
    kill = kill_at if (rank == 1 and attempt == 0) else 0
    module = torch.nn.Sequential(
        torch.nn.Linear(3, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4), _KillAt(kill)
    )
    net = DPNet(module, lag=1, epochs=6, batch_size=512, val_fraction=0, seed=0, progress=False)
    net.fit(x, checkpoint=ckpt, resume=True)
    if rank == 0:
        state = {k: v.clone() for k, v in net.encoder_.state_dict().items()}
        torch.save(state, os.path.join(out, "final.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":  # torchrun tests/distributed_workers.py OUT KILL_AT
    import sys

    torchrun_resume(sys.argv[1], int(sys.argv[2]))
