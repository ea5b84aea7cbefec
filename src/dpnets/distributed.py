"""Exact global-batch training on several processes (``torch.distributed``).

The DPNets scores are functions of covariances, not means of per-sample losses. Under plain
data parallelism each process would maximise the score of its own shard of the batch, a
different and more biased objective than the score of the whole batch. dpnets instead
sums the *sufficient statistics* of the scores over processes with an autograd-aware
all-reduce (``torch.distributed.nn.functional.all_reduce``): every covariance of
:func:`dpnets.scores.covariances` (and of the multi-step and generator scores) is
``(sum over processes of the local sums) / (total count)``, so every process computes the
one score of the global batch, and gradients flow back into every process's shard.

Gradients: the backward of an all-reduce is an all-reduce of the incoming gradients, and
every process holds the same loss ``L``; the local parameter gradients are therefore
``world_size`` times the shard's share of ``dL/dtheta``, and their *mean* over processes
(:func:`average_gradients`) is exactly ``dL/dtheta`` of the global batch.

Launch with ``torchrun`` (gloo on CPU, NCCL on GPU); :class:`dpnets.DPNet` detects the
initialised process group (see its ``distributed`` parameter). :func:`init_from_env`
initialises it from torchrun's environment variables.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import gc
import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "is_active",
    "rank",
    "world_size",
    "is_main_process",
    "init_from_env",
    "statistics_reduced",
    "reducing",
    "global_sums",
    "average_gradients",
    "broadcast_module",
    "broadcast_int",
    "all_equal_int",
    "shard",
]

#: Whether the statistics of the scores are summed over processes (set by
#: :func:`statistics_reduced` for the duration of a distributed fit).
_REDUCE: contextvars.ContextVar[bool] = contextvars.ContextVar("dpnets_reduce", default=False)


def _dist():
    import torch.distributed as dist

    return dist


def is_active() -> bool:
    """True when a ``torch.distributed`` process group is initialised with more than one
    process."""
    dist = _dist()
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def rank() -> int:
    """This process's rank (0 without a process group)."""
    dist = _dist()
    return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Number of processes (1 without a process group)."""
    dist = _dist()
    return int(dist.get_world_size()) if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    """True on rank 0 and in a single process: the process that writes files."""
    return rank() == 0


def init_from_env() -> bool:
    """Initialise the default process group from ``torchrun``'s environment variables.

    Does nothing (returns False) outside a multi-process launch (``WORLD_SIZE`` unset or
    1) or when a group is already initialised. The backend is NCCL when CUDA is available,
    else gloo; on CUDA the process's device is set to ``cuda:LOCAL_RANK``. Under
    ``torchrun --max-restarts`` each restart attempt keys its rendezvous apart from the
    previous attempt's (whose dead workers' addresses the agent's store still holds), so
    restarted workers never wait on a dead peer.
    """
    dist = _dist()
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend = "nccl" if cuda else "gloo"
    store = _attempt_store()
    if store is None:
        dist.init_process_group(backend=backend)
    else:
        dist.init_process_group(
            backend=backend,
            store=store,
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
        )
    return True


def _attempt_store():
    """The torchrun agent's key-value store seen under a prefix of this restart attempt,
    or None outside an elastic launch.

    ``torchrun --max-restarts`` restarts every worker on the *same* agent store, which
    still holds the previous attempt's keys (the peers' addresses, the init barrier's
    counters): a restarted worker could read a dead peer's address and wait on it forever
    (issue 35). Each attempt therefore gets keys of its own."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    from torch.distributed.constants import default_pg_timeout

    dist = _dist()
    store = dist.TCPStore(
        host_name=os.environ["MASTER_ADDR"],
        port=int(os.environ["MASTER_PORT"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        is_master=False,
        timeout=default_pg_timeout,  # as init_process_group's own store: 30 minutes
    )
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    prefixed = dist.PrefixStore(f"dpnets/{run}/attempt_{attempt}/", store)
    if not _STORES:
        atexit.register(_release_at_exit)
    _STORES.extend([prefixed, store])
    return prefixed


#: the stores :func:`_attempt_store` made, released by :func:`_release_at_exit`
_STORES: list[Any] = []


def _release_at_exit() -> None:
    """At interpreter exit, while Python is still whole: destroy a gloo default group left
    initialised and free the attempt's stores. Left to the interpreter's final teardown,
    the TCPStore client of :func:`_attempt_store` aborted about 1 process in 15 at exit
    ("terminate called without an active exception", after the work was done; 5 of 102
    two-process jobs, 0 of 70 with this release). NCCL groups are left to their owner
    (their destruction can wait on peers)."""
    dist = _dist()
    if dist.is_initialized() and dist.get_backend() == "gloo":
        dist.destroy_process_group()
    _STORES.clear()
    gc.collect()


@contextlib.contextmanager
def statistics_reduced(enabled: bool = True) -> Iterator[None]:
    """Within the block, :func:`global_sums` sums over all processes (when ``enabled``)."""
    token = _REDUCE.set(bool(enabled) and is_active())
    try:
        yield
    finally:
        _REDUCE.reset(token)


class _AllReduceSum(torch.autograd.Function):
    """Sum over processes whose backward sums the incoming gradients over processes (the
    adjoint of a sum that every process receives)."""

    @staticmethod
    def forward(ctx, t: Tensor) -> Tensor:  # noqa: D102
        out = t.clone(memory_format=torch.contiguous_format)
        _dist().all_reduce(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # noqa: D102
        out = grad.clone(memory_format=torch.contiguous_format)
        _dist().all_reduce(out)
        return out


def reducing() -> bool:
    """True inside :func:`statistics_reduced` on several processes: the scores' statistics
    are then summed over processes."""
    return _REDUCE.get()


def global_sums(*tensors: Tensor) -> tuple[Tensor, ...]:
    """The tensors summed over all processes inside :func:`statistics_reduced`, else as
    they are; one autograd-aware all-reduce for all of them (they must share a dtype and
    device), so gradients reach every process's local sums."""
    if not _REDUCE.get():
        return tensors
    flat = _AllReduceSum.apply(torch.cat([t.reshape(-1) for t in tensors]))
    out, start = [], 0
    for t in tensors:
        out.append(flat[start : start + t.numel()].reshape(t.shape))
        start += t.numel()
    return tuple(out)


def average_gradients(params: Iterable[Tensor]) -> None:
    """Replace every parameter gradient by its mean over processes (one all-reduce).

    With the statistics summed by :func:`global_sums` this gives the exact gradient of the
    global-batch score (module docstring). A parameter without a gradient on this process
    counts as zero.
    """
    if not is_active():
        return
    params = [p for p in params if p.requires_grad]
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    _dist().all_reduce(flat)
    flat /= world_size()
    start = 0
    for p in params:
        n = p.numel()
        p.grad = flat[start : start + n].view_as(p).clone()
        start += n


def broadcast_module(module: nn.Module, src: int = 0) -> None:
    """Copy rank ``src``'s parameters and buffers to every process (same initial weights)."""
    if not is_active():
        return
    dist = _dist()
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, src=src)


def broadcast_int(value: int, src: int = 0) -> int:
    """Rank ``src``'s integer on every process (e.g. a random seed)."""
    if not is_active():
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64)
    if _dist().get_backend() == "nccl":
        t = t.cuda()
    _dist().broadcast(t, src=src)
    return int(t.item())


def all_equal_int(value: int) -> bool:
    """Whether every process holds the same integer (one all-reduce; True in a single
    process). Every process gets the same answer, so all can raise together instead of
    waiting on each other."""
    if not is_active():
        return True
    t = torch.tensor([int(value), -int(value)], dtype=torch.int64)
    if _dist().get_backend() == "nccl":
        t = t.cuda()
    _dist().all_reduce(t, op=_dist().ReduceOp.MAX)
    return int(t[0].item()) == -int(t[1].item())


def shard(index: Tensor) -> Tensor:
    """This process's contiguous part of a global batch of indices (all of it in a single
    process); the parts of all processes partition the batch."""
    world = world_size()
    if world == 1:
        return index
    return torch.tensor_split(index, world)[rank()]
