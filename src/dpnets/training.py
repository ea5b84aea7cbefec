"""The one training scaffold, shared by DPNet, VAMPNets and the autoencoder baselines.

:class:`FitRun` is one fit, assembled once: device, torch RNG of the split and batch order,
sharding over processes, checkpoint, the scope that seeds torch and restores the estimator
on failure, the initial modules, the preparation of the data (standardisation, split), the
probe of the encoder and the training call. :func:`train` is the one training loop. It owns
the optimiser, the epoch loop, the progress bar, the ``history_`` of train and validation
scores, the non-finite-loss guard and the restore of the best validation epoch.
Models supply three things: the modules to optimise, a function mapping a batch to a loss,
and (optionally) a function returning a validation *score* (higher is better).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from dpnets.distributed import (
    all_equal_int,
    average_gradients,
    broadcast_int,
    broadcast_module,
    is_main_process,
    statistics_reduced,
    world_size,
)
from dpnets.distributed import is_active as dist_active
from dpnets.io import atomic_write, check_target
from dpnets.nn.registry import build, describe
from dpnets.nn.utils import module_dtype, reset_parameters
from dpnets.params import (
    BATCH_SIZE,
    Constraint,
    boolean,
    check_name_or_subclass,
    instance_of,
    integer,
    name_or_subclass,
    one_of,
    real,
    satisfies,
)
from dpnets.params import seed as seed_or_none

__all__ = [
    "FitRun",
    "batch_rng",
    "TRAINING_CONSTRAINTS",
    "full_batch_score",
    "initial_module",
    "local_seed",
    "resolve_device",
    "make_optimizer",
    "check_optimizer",
    "progress_bar",
    "train",
    "train_step",
    "train_estimator",
    "TrainResult",
    "Checkpoint",
    "fit_checkpoint",
    "run_checkpoint",
    "restore_on_failure",
]

_OPTIMIZERS = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": torch.optim.SGD,
    "rmsprop": torch.optim.RMSprop,
}
#: the base class of the optimizers, and its name in the messages
_OPTIMIZER_BASE = (torch.optim.Optimizer, "torch.optim.Optimizer")


@contextlib.contextmanager
def local_seed(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed torch's RNG for the block only (dropout, random init inside ``fit``).

    With ``seed`` the global CPU (and, on CUDA, the device's) RNG state is saved, seeded and
    restored afterwards, so a fit is reproducible without changing the caller's random
    stream; without it the block runs as it is.
    """
    if seed is None:
        yield
        return
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        yield


#: where the initial weights of a seeded fit come from (``init`` of the neural estimators)
INIT = ("seed", "module")


def initial_module(
    module: nn.Module | None,
    seed: int | None,
    default: Callable[[], nn.Module],
    init: str = "seed",
) -> nn.Module:
    """The module a fit trains, never ``module`` itself.

    ``seed=None`` or ``init="module"``: a copy of ``module`` (its own initial weights:
    pretrained, or initialised by the caller). With a ``seed`` and ``init="seed"``,
    fresh initial weights drawn from torch's RNG: a module of :mod:`dpnets.nn` (any module
    the registry describes) is rebuilt from its configuration, so its own initialisation
    runs again; any other module is copied and its layers' ``reset_parameters()`` are
    called (:func:`dpnets.nn.utils.reset_parameters`); the buffers a module names in
    ``fixed_buffers`` (a fixed pre-projection) are kept. Floating-point parameters keep the
    dtype of ``module``. ``module=None`` gives ``default()``. Call it inside
    :func:`local_seed`, so that every draw is the seed's and the fit is reproducible bit for
    bit whatever the global RNG did before.
    """
    if init not in INIT:
        raise ValueError(f"init must be one of {', '.join(map(repr, INIT))}, got {init!r}")
    if module is None:
        return default()
    if seed is None or init == "module":
        return copy.deepcopy(module)
    spec = describe(module)
    if spec is not None:
        rebuilt = build(spec).to(dtype=module_dtype(module))
        # state that is not drawn at initialisation (a fixed pre-projection) is kept
        for name in getattr(module, "fixed_buffers", ()):
            getattr(rebuilt, name).copy_(getattr(module, name))
        return rebuilt
    module = copy.deepcopy(module)
    reset_parameters(module)
    return module


def batch_rng(seed: int | None) -> torch.Generator:
    """The torch RNG of a fit's data split and batch order (seeded with ``seed``, else from
    fresh entropy); the global RNG is never touched."""
    rng = torch.Generator()
    if seed is not None:
        rng.manual_seed(int(seed))
    else:
        rng.seed()
    return rng


@dataclass(frozen=True)
class FitRun:
    """One fit of a neural estimator (DPNet, VAMPNet, the autoencoders), built once by
    :meth:`start` and handed down: what every estimator assembled by hand before.

    Attributes
    ----------
    estimator : estimator
        The estimator being fitted (its ``seed``, ``init``, ``val_fraction``,
        ``batch_size`` and optimisation settings are read from it).
    device : torch.device
        The training device (:func:`resolve_device`).
    rng : torch.Generator
        The torch RNG of the data split and the batch order (:func:`batch_rng`; in
        distributed training without a seed, seeded by rank 0 for all processes).
    sharded : bool
        Whether this fit trains on several processes (the estimator's ``distributed``).
    checkpoint : Checkpoint or None
        The checked ``fit(checkpoint=, checkpoint_every=, resume=)`` options.
    callback : callable or None
        ``callback(epoch, estimator)`` after every epoch.
    """

    estimator: Any
    device: torch.device
    rng: torch.Generator
    sharded: bool = False
    checkpoint: Checkpoint | None = None
    callback: Callable[[int, Any], None] | None = None

    @classmethod
    def start(
        cls,
        est: Any,
        callback: Callable[[int, Any], None] | None = None,
        checkpoint: str | os.PathLike | None = None,
        checkpoint_every: int = 1,
        resume: bool = False,
    ) -> FitRun:
        """The run of ``est`` with the options of its ``fit`` (``callback``, ``checkpoint``,
        ``checkpoint_every``, ``resume``), checked: sharding (the estimator's
        ``distributed``), the checkpoint options and the device."""
        sharded = _sharded(est)
        ckpt = fit_checkpoint(est, checkpoint, checkpoint_every, resume)
        seed = est.seed
        if seed is None and sharded:  # rank 0 draws it: all processes draw the same batches
            seed = broadcast_int(int(torch.randint(0, 2**62, (1,)).item()))
        return cls(est, resolve_device(est.device), batch_rng(seed), sharded, ckpt, callback)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """The block of the fit: torch seeded with the estimator's ``seed``
        (:func:`local_seed`) and its fitted state restored on failure
        (:func:`restore_on_failure`)."""
        with restore_on_failure(self.estimator), local_seed(self.estimator.seed, self.device):
            yield

    def initial(
        self,
        module: nn.Module | None,
        default: Callable[[], nn.Module],
        dtype: torch.dtype | None = None,
    ) -> nn.Module:
        """The module training starts from (:func:`initial_module` with the estimator's
        ``seed`` and ``init``), placed by :meth:`place`."""
        est = self.estimator
        return self.place(initial_module(module, est.seed, default, est.init), dtype)

    def place(self, module: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
        """``module`` on the device (in ``dtype`` when given), with rank 0's weights when
        sharded."""
        module = module.to(self.device) if dtype is None else module.to(self.device, dtype)
        if self.sharded:
            broadcast_module(module)
        return module

    def prepare(
        self,
        source: Any,
        encoder: nn.Module,
        standardize: str | bool = "none",
        standardize_batches: bool = True,
    ) -> Any:
        """:meth:`dpnets.training_source.TrainingSource.prepare` for this run: the input
        standardisation for ``encoder``, the split by the run's RNG into batches of the
        encoder's dtype on the device (each process's part when sharded: the source
        checked for it), and the first two states (a ``Prepared``)."""
        est = self.estimator
        if self.sharded:
            _check_sharded_source(source, int(est.batch_size))
        return source.prepare(
            standardize=standardize,
            encoder=encoder,
            val_fraction=est.val_fraction,
            batch_size=est.batch_size,
            rng=self.rng,
            device=self.device,
            dtype=module_dtype(encoder),
            sharded=self.sharded,
            standardize_batches=standardize_batches,
        )

    def probe(
        self,
        encoder: nn.Module,
        prepared: Any,
        *,
        scaled: bool = False,
        constant: bool | None = None,
    ) -> int:
        """The number of features ``r`` of ``encoder``, from a forward pass (eval mode, no
        gradient) on the first two states of ``prepared`` (standardised when ``scaled``:
        the batches are) on the device in the batches' dtype. An encoder that does not map
        ``(batch, *state_shape)`` to ``(batch, r)``, returns no feature, or returns NaN or
        inf is refused. With ``constant`` (the scores of covariances of ``r`` features, and
        the constant when True), ``r`` is checked against the number of training samples
        (refused when fewer) and the batch size (a warning when smaller)."""
        states = prepared.scaling.apply(prepared.first) if scaled else prepared.first
        sample = torch.as_tensor(states).to(device=self.device, dtype=prepared.dtype)
        encoder.eval()
        with torch.no_grad():
            out = encoder(sample)
        encoder.train()
        if out.ndim != 2 or out.shape[0] != sample.shape[0]:
            raise ValueError(
                f"encoder must map (batch, *state_shape) to (batch, r); got {tuple(out.shape)}"
            )
        if out.shape[1] < 1:
            raise ValueError("encoder returns r = 0 features; it must return at least one")
        if not torch.all(torch.isfinite(out)):
            raise FloatingPointError(
                "the encoder returns NaN or inf on the training states before any training; "
                "check its initialisation and the input scale (standardize='coordinate')"
            )
        r = int(out.shape[1])
        if constant is not None:
            d, batch_size = r + int(constant), int(self.estimator.batch_size)
            _check_feature_count(d, prepared.n_train, batch_size, r)
        return r

    def forward(self, module: nn.Module, dtype: torch.dtype) -> Callable[[Tensor], Tensor]:
        """The training forward pass of ``module``: compiled (the estimator's ``compile``)
        and under its ``autocast``, the features returned in ``dtype`` for the scores."""
        est = self.estimator
        compiled = getattr(est, "compile", False)
        fwd: Callable[[Tensor], Tensor] = torch.compile(module) if compiled else module
        autocast = getattr(est, "autocast", None)
        if autocast is None:
            return fwd
        low = torch.bfloat16 if autocast == "bf16" else torch.float16

        def run(x: Tensor) -> Tensor:
            with torch.autocast(self.device.type, dtype=low):
                out = fwd(x)
            return out.to(dtype)

        return run

    def train(
        self,
        modules: Sequence[nn.Module | None],
        batch_loss: Callable[[Any], Tensor],
        batches: Iterable[Any],
        *,
        val_score: Callable[[], float] | None,
        n_train: int,
        state_shape: tuple[int, ...],
        desc: str,
    ) -> TrainResult:
        """:func:`train_estimator` of ``modules`` (None entries skipped) with the run's
        callback, checkpoint (bound to the run, :func:`run_checkpoint`) and sharding; fp16
        autocast scales the gradients."""
        est = self.estimator
        return train_estimator(
            est,
            [m for m in modules if m is not None],
            batch_loss,
            batches,
            val_score=val_score,
            desc=desc,
            callback=self.callback,
            checkpoint=run_checkpoint(est, self.checkpoint, self.rng, n_train, state_shape),
            distributed=self.sharded,
            grad_scaler=getattr(est, "autocast", None) == "fp16",
        )

    def train_objective(
        self,
        modules: Sequence[nn.Module | None],
        outputs: Callable[[Any], Sequence[Tensor]],
        loss: Callable[..., Tensor],
        prepared: Any,
        desc: str,
    ) -> TrainResult:
        """:meth:`train` on the batches of ``prepared`` minimising ``loss(*outputs(batch))``,
        validated by the score of the whole held-out split (:func:`full_batch_score`)."""

        def batch_loss(batch: Any) -> Tensor:
            return loss(*outputs(batch))

        return self.train(
            modules,
            batch_loss,
            prepared.train,
            val_score=full_batch_score(prepared.val, outputs, loss),
            n_train=prepared.n_train,
            state_shape=prepared.state_shape,
            desc=desc,
        )


def _sharded(est: Any) -> bool:
    """Whether ``est`` trains on several processes (its ``distributed``)."""
    distributed = getattr(est, "distributed", False)
    if distributed is True and not dist_active():
        raise ValueError(
            "distributed=True needs an initialised torch.distributed process group of "
            "more than one process: launch with torchrun and call "
            "dpnets.distributed.init_from_env() (or torch.distributed.init_process_group)"
        )
    return distributed is not False and dist_active()


def _check_feature_count(d: int, n_train: int, batch_size: int, r: int | None = None) -> None:
    """``d`` features (their covariances: the ``r`` learned ones and any constant)
    against the training samples and the batch."""
    if n_train < d:
        what = f"r = {r} and the constant function" if r is not None and r < d else f"r = {d}"
        raise ValueError(
            f"fewer training samples ({n_train}) than features ({d}: {what}); provide more "
            "data or learn fewer features (r=, --dim on the command line)"
        )
    if batch_size < d:
        warnings.warn(
            f"batch_size={batch_size} is smaller than the number of features ({d}): "
            "batch covariances are rank-deficient",
            stacklevel=5,
        )


def _check_sharded_source(source: Any, batch_size: int) -> None:
    """Refuse a training source that cannot be sharded over the processes: one of a
    DataLoader (``loader``, or a plain one's ``batch_size``)."""
    if source.loader is not None or source.batch_size is not None:
        raise ValueError(
            "distributed training takes arrays (in memory or memory-mapped .npy), lists "
            "of arrays, (X, Y) tuples or a map-style Dataset, the same on every process; "
            "a DataLoader is not sharded: pass its Dataset (or distributed=False to train "
            "on each process alone)"
        )
    if batch_size < world_size():
        raise ValueError(
            f"batch_size={batch_size} is smaller than the number of processes "
            f"({world_size()}): every process needs part of each batch"
        )


def full_batch_score(
    batches: Iterable[Any] | None,
    outputs: Callable[[Any], Sequence[Tensor]],
    loss: Callable[..., Tensor],
) -> Callable[[], float] | None:
    """The validation score ``-loss`` of a whole held-out split, or None without one.

    ``outputs(batch)`` gives the tensors the loss takes (features, derivatives) for each
    batch; they are concatenated over the split before the loss, because the DPNets scores
    are functions of covariances: a mean of batch scores would be a different, biased
    quantity. The batches' features stay on the device; the score is read on the host
    once per evaluation (no synchronisation per batch).
    """
    if batches is None:
        return None

    def score() -> float:
        with torch.no_grad():
            parts = [outputs(b) for b in batches]
            return -float(loss(*(torch.cat(p) for p in zip(*parts, strict=True))))

    return score


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` picks CUDA when available (the current CUDA device, which
    :func:`dpnets.distributed.init_from_env` sets to the process's local rank), else CPU.

    A device that is not a torch device (``"bogus"``), or one this machine or torch build
    lacks (``"cuda"`` on a CPU build, ``"cuda:3"`` with one GPU, ``"mps"``), raises a
    ``ValueError`` naming ``device`` (a ``TypeError`` for a value of the wrong type).
    """
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"device must be a str or torch.device (e.g. 'cpu', 'cuda', 'cuda:1') or None, "
            f"got {device!r} ({type(device).__name__})"
        )
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ValueError(
            f"device={device!r} is not a torch device (expected e.g. 'cpu', 'cuda', "
            "'cuda:1', 'mps')"
        ) from err
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no GPU"
            raise ValueError(f"device={device!r}: CUDA is not available ({why}); use 'cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r}: there are only {torch.cuda.device_count()} CUDA devices"
            )
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={device!r}: MPS is not available; use 'cpu'")
    return dev


def check_optimizer(optimizer: Any) -> None:
    """``optimizer`` must be a known name or a ``torch.optim.Optimizer`` subclass
    (:func:`dpnets.params.check_name_or_subclass`)."""
    check_name_or_subclass("optimizer", optimizer, _OPTIMIZERS, *_OPTIMIZER_BASE)


#: the constraints of the training settings (:mod:`dpnets.params`), shared by the
#: ``_parameter_constraints`` tables of every neural estimator (DPNet, VAMPNet, the
#: autoencoders)
TRAINING_CONSTRAINTS: dict[str, Constraint] = {
    "lr": real(0.0, low_open=True),
    "batch_size": BATCH_SIZE,
    "epochs": integer(1),
    "val_fraction": real(0.0, 1.0, high_open=True),
    "optimizer": name_or_subclass(_OPTIMIZERS, *_OPTIMIZER_BASE),
    "optimizer_kwargs": instance_of(dict, "a dict of the optimizer's keyword arguments or None"),
    "seed": seed_or_none(),
    "init": one_of(*INIT),
    "device": satisfies(resolve_device, none=True),
    "progress": boolean(),
}


def make_optimizer(
    optimizer: str | type[torch.optim.Optimizer],
    params: Iterable[Tensor],
    lr: float,
    kwargs: dict[str, Any] | None = None,
) -> torch.optim.Optimizer:
    """Build an optimiser from a name (``adam``, ``adamw``, ``sgd``, ``rmsprop``) or a class."""
    check_optimizer(optimizer)
    if isinstance(optimizer, str):
        try:
            cls = _OPTIMIZERS[optimizer.lower()]
        except KeyError:
            raise ValueError(
                f"unknown optimizer {optimizer!r}; expected one of {', '.join(_OPTIMIZERS)} "
                "or a torch.optim.Optimizer subclass"
            ) from None
    else:
        cls = optimizer
    kwargs = dict(kwargs or {})
    params = list(params)
    if cls in (torch.optim.Adam, torch.optim.AdamW) and not ({"fused", "foreach"} & set(kwargs)):
        # the fused kernel cuts the per-step optimiser overhead (CPU and CUDA)
        try:
            return cls(params, lr=lr, fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError):
            pass
    return cls(params, lr=lr, **kwargs)


def progress_bar(iterable: Iterable, enabled: bool, desc: str, total: int | None = None):
    """A tqdm bar when ``enabled`` and tqdm is installed (extra ``dpnets[progress]``)."""
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - optional dependency
        return iterable
    return tqdm(iterable, desc=desc, total=total, leave=False, dynamic_ncols=True)


@dataclass
class Checkpoint:
    """Where and how often :func:`train` saves its state, and whether to resume from it.

    A checkpoint holds the modules' and the optimiser's state, the epoch, the history, the
    best epoch (and its weights) and the states of the run's torch RNGs (``rngs``) and of
    torch's global ones, written atomically after every ``every`` epochs and after the last.
    With ``resume`` an existing checkpoint is continued exactly: on CPU the final weights
    are bit-identical to an uninterrupted run. ``fingerprint`` identifies the run; a
    checkpoint of another run is refused.
    """

    path: str | os.PathLike
    every: int = 1
    resume: bool = False
    rngs: Sequence[torch.Generator] = ()
    fingerprint: str = ""


_CHECKPOINT_FORMAT = "dpnets-checkpoint"


def fit_checkpoint(
    est: Any,
    path: str | os.PathLike | None,
    every: int,
    resume: bool,
) -> Checkpoint | None:
    """Validate an estimator's ``fit(checkpoint=, checkpoint_every=, resume=)`` options."""
    from dpnets.params import check_int

    if path is None:
        if resume:
            raise ValueError("resume=True needs checkpoint=PATH")
        return None
    every = check_int("checkpoint_every", every, 1)
    if resume and getattr(est, "seed", None) is None:
        raise ValueError("resume=True needs seed= (the same data split as the first run)")
    if is_main_process():  # the writer: a missing folder fails now, not after epochs
        check_target(path)
    return Checkpoint(path, every, bool(resume))


def run_checkpoint(
    est: Any, ckpt: Checkpoint | None, rng: torch.Generator, n_train: int, shape: tuple
) -> Checkpoint | None:
    """``ckpt`` bound to this run: its torch RNG (:func:`batch_rng`) and a fingerprint of
    the estimator's plain parameters, the number of training samples and the state shape."""
    if ckpt is None:
        return None
    params = {
        k: v
        for k, v in est.get_params(deep=False).items()
        if isinstance(v, (str, int, float, bool, type(None)))
    }
    run = [type(est).__name__, n_train, list(shape), params]
    return Checkpoint(ckpt.path, ckpt.every, ckpt.resume, (rng,), json.dumps(run, sort_keys=True))


@contextlib.contextmanager
def restore_on_failure(est: Any) -> Iterator[None]:
    """If the block fails or is interrupted, put back the estimator's fitted state (the
    attributes ending in ``_``) exactly as it was before."""
    before = {k: v for k, v in vars(est).items() if k.endswith("_")}
    try:
        yield
    except BaseException:
        for k in [k for k in vars(est) if k.endswith("_")]:
            delattr(est, k)
        vars(est).update(before)
        raise


@dataclass
class TrainResult:
    """Outcome of :func:`train`."""

    history: dict[str, list[float]] = field(default_factory=dict)
    best_epoch: int | None = None


def train(
    modules: Sequence[nn.Module],
    batch_loss: Callable[[Any], Tensor],
    batches: Iterable[Any],
    *,
    epochs: int,
    lr: float,
    optimizer: str | type[torch.optim.Optimizer] = "adam",
    optimizer_kwargs: dict[str, Any] | None = None,
    val_score: Callable[[], float] | None = None,
    progress: bool = True,
    desc: str = "training",
    callback: Callable[[int], None] | None = None,
    checkpoint: Checkpoint | None = None,
    distributed: bool = False,
    grad_scaler: bool = False,
) -> TrainResult:
    """Optimise ``modules`` by minimising ``batch_loss`` over ``batches`` for ``epochs``.

    Parameters
    ----------
    modules : sequence of nn.Module
        Everything whose parameters are trained (duplicates are ignored).
    batch_loss : callable
        Maps one item of ``batches`` to a scalar loss tensor.
    batches : iterable
        Re-iterated once per epoch.
    epochs, lr, optimizer, optimizer_kwargs
        Optimisation settings.
    val_score : callable, optional
        Returns a validation score (higher is better), evaluated after each epoch; the
        modules are restored to the best-scoring epoch at the end.
    progress : bool
        Show a progress bar (needs tqdm).
    callback : callable, optional
        Called with the epoch index after each epoch (e.g. to record metrics).
    checkpoint : Checkpoint, optional
        Save the training state periodically and/or resume from it.
    distributed : bool, default False
        Exact global-batch training on the processes of the initialised process group
        (:mod:`dpnets.distributed`): ``batches`` yield each process's shard, the scores'
        statistics are summed over processes (so every process computes the same loss and
        validation score), the parameter gradients are averaged after every backward pass,
        and only rank 0 shows progress and writes the checkpoint.
    grad_scaler : bool, default False
        Scale the loss against fp16 underflow (``torch.amp.GradScaler``; for
        ``autocast="fp16"``).

    Returns
    -------
    TrainResult
        ``history["train_score"]`` is the mean of ``-loss`` over each epoch's batches,
        ``history["val_score"]`` the validation score per epoch (when given).

    Raises
    ------
    FloatingPointError
        If training diverges before any good epoch: a NaN/inf loss, a failed
        eigendecomposition (``torch.linalg.LinAlgError``), validation scores that are never
        finite, or a best validation score far below the one at initialisation
        (``best < initial - max(1, |initial|)``). The message names the cause and the fix.
        A divergence after good epochs stops training, restores the best (or last finite)
        epoch and warns instead.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    params: list[Tensor] = []
    seen: set[int] = set()
    for m in modules:
        for p in m.parameters():
            if id(p) not in seen and p.requires_grad:
                seen.add(id(p))
                params.append(p)
    if not params:
        raise ValueError("no trainable parameters")
    distributed = bool(distributed) and dist_active()
    with statistics_reduced(distributed):
        return _train_loop(
            modules,
            params,
            batch_loss,
            batches,
            epochs=epochs,
            lr=lr,
            optimizer=optimizer,
            optimizer_kwargs=optimizer_kwargs,
            val_score=val_score,
            progress=progress and is_main_process(),
            desc=desc,
            callback=callback,
            checkpoint=checkpoint,
            distributed=distributed,
            grad_scaler=grad_scaler,
        )


def train_step(
    opt: torch.optim.Optimizer,
    batch_loss: Callable[[Any], Tensor],
    batch: Any,
    params: list[Tensor],
    scaler: torch.amp.GradScaler | None = None,
    distributed: bool = False,
) -> Tensor:
    """One optimisation step of :func:`train` on ``batch``; returns the detached loss.

    Nothing here reads a tensor's value on the host (no ``.item()``, no Python branch on a
    tensor): on a GPU the step only queues work, and the loop reads the epoch's summed
    loss once, at its end (the divergence check). The exception is ``scaler`` (fp16
    autocast), whose ``step`` checks for inf/NaN gradients on the host.
    """
    opt.zero_grad(set_to_none=True)
    loss = batch_loss(batch)
    if scaler is None:
        loss.backward()
        if distributed:
            average_gradients(params)
        opt.step()
    else:
        scaler.scale(loss).backward()
        if distributed:
            average_gradients(params)
        scaler.step(opt)
        scaler.update()
    return loss.detach()


def _train_loop(
    modules: Sequence[nn.Module],
    params: list[Tensor],
    batch_loss: Callable[[Any], Tensor],
    batches: Iterable[Any],
    *,
    epochs: int,
    lr: float,
    optimizer: str | type[torch.optim.Optimizer],
    optimizer_kwargs: dict[str, Any] | None,
    val_score: Callable[[], float] | None,
    progress: bool,
    desc: str,
    callback: Callable[[int], None] | None,
    checkpoint: Checkpoint | None,
    distributed: bool,
    grad_scaler: bool,
) -> TrainResult:
    """The body of :func:`train` (its parameters checked)."""
    opt = make_optimizer(optimizer, params, lr, optimizer_kwargs)
    scaler = torch.amp.GradScaler(params[0].device.type) if grad_scaler else None
    history: dict[str, list[float]] = {"train_score": []}
    fix = f"lower the learning rate (lr={lr:g}; try {lr / 10:g}) or use fewer features"
    initial = math.nan
    if val_score is not None:
        history["val_score"] = []
        initial = _safe_score(val_score, modules)
    best = -math.inf
    best_state: list[dict[str, Tensor]] | None = None
    best_epoch: int | None = None
    last_state: list[dict[str, Tensor]] | None = None  # last finite epoch, without validation
    last_epoch: int | None = None
    start = 0
    if checkpoint is not None and checkpoint.resume and os.path.exists(checkpoint.path):
        saved = _read_checkpoint(checkpoint, modules, opt)
        start, history, initial = saved["epoch"], saved["history"], saved["initial"]
        best, best_epoch, best_state = saved["best"], saved["best_epoch"], saved["best_state"]
        last_state, last_epoch = saved["last_state"], saved["last_epoch"]
    if distributed and checkpoint is not None and not all_equal_int(start):
        raise RuntimeError(
            f"the processes found different checkpoints at {os.fspath(checkpoint.path)} "
            "(they would resume from different epochs): put the checkpoint on a file system "
            "that every process sees"
        )
    bar = progress_bar(range(start, epochs), progress, desc, total=epochs - start)
    for epoch in bar:
        for m in modules:
            m.train()
        total: Tensor | None = None  # accumulated on the device: no per-step sync
        count = 0
        failure = None
        try:
            for batch in batches:
                loss = train_step(opt, batch_loss, batch, params, scaler, distributed)
                total = loss if total is None else total + loss
                count += 1
        except torch.linalg.LinAlgError as err:
            failure = f"an eigendecomposition failed ({str(err).splitlines()[0]})"
        train_score = -float(total) / count if total is not None else math.nan
        if failure is None and not math.isfinite(train_score):
            failure = f"the training score became {train_score}"
        if failure is not None:
            keep = best_state if best_state is not None else last_state
            kept = best_epoch if best_state is not None else last_epoch
            if keep is None:
                raise FloatingPointError(f"training diverged at epoch {epoch}: {failure}; {fix}")
            for m, st in zip(modules, keep, strict=False):
                m.load_state_dict(st)
            warnings.warn(
                f"training diverged at epoch {epoch} ({failure}); stopped and restored epoch "
                f"{kept}. To train further, {fix}",
                RuntimeWarning,
                stacklevel=3,
            )
            break
        history["train_score"].append(train_score)
        postfix = {"train": f"{train_score:.4g}"}
        if val_score is not None:
            v = _safe_score(val_score, modules)
            history["val_score"].append(v)
            postfix["val"] = f"{v:.4g}"
            if math.isfinite(v) and v > best:
                best, best_epoch = v, epoch
                best_state = [copy.deepcopy(m.state_dict()) for m in modules]
        else:
            last_state = [copy.deepcopy(m.state_dict()) for m in modules]
            last_epoch = epoch
        if callback is not None:
            with statistics_reduced(False):  # user code: local statistics
                callback(epoch)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(postfix)
        if (
            checkpoint is not None
            and is_main_process()
            and ((epoch + 1) % checkpoint.every == 0 or epoch + 1 == epochs)
        ):
            state = {
                "format": _CHECKPOINT_FORMAT,
                "fingerprint": checkpoint.fingerprint,
                "epoch": epoch + 1,
                "modules": [m.state_dict() for m in modules],
                "optimizer": opt.state_dict(),
                "history": history,
                "initial": initial,
                "best": best,
                "best_epoch": best_epoch,
                "best_state": best_state,
                "last_state": last_state,
                "last_epoch": last_epoch,
                "rngs": [rng.get_state() for rng in checkpoint.rngs],
                "torch_rng": torch.get_rng_state(),
                "cuda_rng": (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []),
            }
            atomic_write(checkpoint.path, lambda fh, state=state: torch.save(state, fh))
    if best_state is not None:
        for m, s in zip(modules, best_state, strict=False):
            m.load_state_dict(s)
        if math.isfinite(initial) and best < initial - max(1.0, abs(initial)):
            raise FloatingPointError(
                f"training diverged: the best validation score ({best:.4g}) is far below the "
                f"score at initialisation ({initial:.4g}); {fix}"
            )
    elif val_score is not None:
        raise FloatingPointError(f"training diverged: the validation score was never finite; {fix}")
    for m in modules:
        m.eval()
    return TrainResult(history=history, best_epoch=best_epoch)


def _read_checkpoint(
    checkpoint: Checkpoint, modules: Sequence[nn.Module], opt: torch.optim.Optimizer
) -> dict[str, Any]:
    """Load a checkpoint into ``modules``, ``opt`` and the run's RNGs; return the rest."""
    path = os.fspath(checkpoint.path)
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file gets the same answer
        raise ValueError(f"{path} is not a readable dpnets checkpoint ({err})") from None
    if not isinstance(saved, dict) or saved.get("format") != _CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a dpnets checkpoint")
    if saved.get("fingerprint") != checkpoint.fingerprint:
        raise ValueError(
            f"the checkpoint {path} belongs to a different run (other data or settings): "
            "delete it or fit with resume=False"
        )
    for m, st in zip(modules, saved["modules"], strict=True):
        m.load_state_dict(st)
    opt.load_state_dict(saved["optimizer"])
    # ("generators": the key in checkpoints written by earlier versions)
    rng_states = saved["rngs"] if "rngs" in saved else saved["generators"]
    for rng, st in zip(checkpoint.rngs, rng_states, strict=True):
        rng.set_state(st)
    torch.set_rng_state(saved["torch_rng"])
    cuda_states = saved.get("cuda_rng") or []
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
    return saved


def _safe_score(val_score: Callable[[], float], modules: Sequence[nn.Module]) -> float:
    """``val_score()`` in eval mode; NaN where it fails numerically."""
    for m in modules:
        m.eval()
    try:
        return float(val_score())
    except torch.linalg.LinAlgError:
        return math.nan


def train_estimator(
    est: Any,
    modules: Sequence[nn.Module],
    batch_loss: Callable[[Any], Tensor],
    batches: Iterable[Any],
    *,
    val_score: Callable[[], float] | None,
    desc: str,
    callback: Callable[[int, Any], None] | None = None,
    checkpoint: Checkpoint | None = None,
    distributed: bool = False,
    grad_scaler: bool = False,
) -> TrainResult:
    """:func:`train` with the optimisation settings an estimator stores (``epochs``, ``lr``,
    ``optimizer``, ``optimizer_kwargs``, ``progress``); sets ``est.history_`` and
    ``est.best_epoch_``. ``callback(epoch, est)`` runs after every epoch."""
    result = train(
        modules,
        batch_loss,
        batches,
        epochs=int(est.epochs),
        lr=float(est.lr),
        optimizer=est.optimizer,
        optimizer_kwargs=est.optimizer_kwargs,
        val_score=val_score,
        progress=est.progress,
        desc=desc,
        callback=None if callback is None else (lambda epoch: callback(epoch, est)),
        checkpoint=checkpoint,
        distributed=distributed,
        grad_scaler=grad_scaler,
    )
    est.history_ = result.history
    est.best_epoch_ = result.best_epoch
    return result
