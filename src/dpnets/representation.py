"""DPNet: learn a feature map psi by maximising a DPNets score (paper Sec. 3-4, Alg. 1)."""

from __future__ import annotations

import copy
import functools
import math
import os
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from dpnets import diagnostics
from dpnets.base import BaseEstimator, TransformerMixin, fit_data
from dpnets.biased import check_weight_args, importance_weights
from dpnets.diagnostics import Diagnostic
from dpnets.exceptions import check_is_fitted
from dpnets.generator_learning import (
    generator_objective,
    generator_objective_score,
    generator_samples,
)
from dpnets.heldout import heldout_pairs, heldout_score
from dpnets.io import (
    InvalidModelFile,
    meta_device,
    register,
    restore_module,
    sub_state,
    write_model,
)
from dpnets.ito import SDE
from dpnets.nn.mlp import default_mlp
from dpnets.nn.registry import describe
from dpnets.nn.utils import encode, module_device, module_dtype
from dpnets.pairs import check_lag
from dpnets.params import (
    Constraint,
    boolean,
    check_choice,
    check_real,
    instance_of,
    integer,
    one_of,
    real,
    satisfies,
)
from dpnets.scores import GENERATOR_SCORES, SCORES, make_loss, pair_objective
from dpnets.standardize import MODES, Scaling
from dpnets.states import check_frames, check_state_shape
from dpnets.training import TRAINING_CONSTRAINTS, FitRun, initial_module
from dpnets.training_source import Prepared, TrainingSource, training_source

__all__ = ["DPNet", "DEFAULTS", "dump_dpnet", "restore_dpnet"]

#: The defaults of :class:`DPNet`, chosen on ``benchmarks/bench_out_of_box.py`` (five systems
#: with reference timescales, raw and rescaled data; see ``benchmarks/results/out_of_box``).
DEFAULTS: dict[str, Any] = {
    "r": 4,
    "objective": "projection",
    "gamma": 0.1,
    "lr": 1e-3,
    "batch_size": 1024,
    "epochs": 30,
}


class DPNet(TransformerMixin, BaseEstimator):
    """Deep Projection Network: a learned feature map ``psi: X -> R^r``.

    Trains ``encoder`` (and optionally a separate ``lagged_encoder`` psi') by mini-batch
    maximisation of a DPNets score (paper Alg. 1), the ``objective``: ``"projection"``
    (``P^gamma``, Eq. 7), ``"relaxed"`` (``S^gamma``, Eq. 9, no matrix inversion),
    ``"vamp1"``/``"vamp2"`` (VAMP scores; VAMPNets with ``gamma=0``), or in continuous time
    ``"generator"`` (``P_d^gamma`` of the SDE ``sde``, Thm. 2, Eq. 14, from Itô derivatives
    of the features) and ``"dirichlet"`` (reversible SDEs, first derivatives only), whose
    ``fit(X)`` takes samples of the invariant distribution, not pairs.

    After ``fit``, :meth:`transform` evaluates ``psi`` and :class:`dpnets.TransferOperator`
    regresses the operator on it; :meth:`score` is the held-out VAMP-2 score of ``[1, psi]``
    (``GridSearchCV``'s default scoring). To forecast the state, regress on ``[x, psi(x)]``:
    ``TransferOperator(DPNet(...), append_state=True)`` (``docs/concepts.md``).

    Parameters
    ----------
    encoder : torch.nn.Module, optional
        Maps states ``(batch, *state_shape)`` to ``(batch, r)``; ``fit`` trains a copy,
        ``encoder_``. ``None``: the library's MLP sized to the data (``dpnets.nn.MLP(d,
        (64, 64), r, activation="celu")``, ``d`` the flattened state).
    r : int, default 4
        Number of learned features of the default encoder (an encoder you pass sets its
        own ``r``).
    lag : int, optional
        Lag in frames of the pairs of trajectories (default: 1); for pre-paired data and
        Datasets, the lag they were paired at (default: unknown).
    lagged_encoder : torch.nn.Module, optional
        psi' for the evolved states; ``None`` shares psi's weights (exact for normal
        operators, e.g. reversible ones).
    objective : {"projection", "relaxed", "vamp1", "vamp2", "generator", "dirichlet"}
        The training score. Default "projection"; "relaxed" where the feature covariances
        are too ill-conditioned to invert (:func:`dpnets.scores.relaxed_score`).
    gamma : float, default 0.1
        Weight of the metric distortion penalty, on the paper's scale for any ``r`` (the
        scores subtract ``gamma (R(Cx) + R(Cy)) / (2d)``).
    lr : float, default 1e-3
        Learning rate.
    batch_size : int, default 1024
        Mini-batch size ``m``. Scores are biased for small batches; prefer ``m >> r``.
    epochs : int, default 30
    val_fraction : float, default 0.1
        Fraction of pairs held out (at random) to select the best epoch; 0 disables.
    standardize : {"auto", "coordinate", "global", "none"}, default "auto"
        Input standardisation fitted on the training states and stored with the model
        (:mod:`dpnets.standardize`): each coordinate to zero mean and unit variance, one
        shift and scale for all, or none. "auto" is "coordinate" for vector states and an
        encoder whose first operation is affine (the default MLP, a ``Linear`` layer, a
        module declaring ``standardize_inputs = True``), else "none".
    constant : bool, default True
        Score ``[1, psi]`` (:mod:`dpnets.scores`): ``r`` features for ``r`` non-trivial
        processes. ``False`` is the paper's convention (one output spent on the constant).
    consistency : float, default 0.0
        Weight of the multi-step consistency penalty :func:`dpnets.scores.multistep_penalty`
        on windows of ``consistency_steps`` lags (trajectories and a shared encoder only).
    consistency_steps : int, default 2
    optimizer : str or torch.optim.Optimizer subclass, default "adam"
    optimizer_kwargs : dict, optional
    seed : int, optional
        Makes a fit reproducible bit for bit: it seeds the split, the batch order, torch's
        RNG inside ``fit`` only and (``init="seed"``) the initial weights.
    init : {"seed", "module"}, default "seed"
        A seeded fit's initial weights: drawn from ``seed``, or those of the module(s)
        you passed (pretrained weights).
    device : str or torch.device, optional
        Default: CUDA if available, else CPU.
    progress : bool, default True
        Show a tqdm progress bar (if tqdm is installed).
    sde : dpnets.ito.SDE, optional
        The SDE of the generator objectives (:func:`dpnets.ito.overdamped_langevin`).
    distributed : {"auto", True, False}, default "auto"
        Exact global-batch training on the processes of an initialised process group
        (:mod:`dpnets.distributed`, ``torchrun``; "auto": when there is one). Every process
        passes the same data (not a DataLoader).
    autocast : {None, "bf16", "fp16"}, default None
        Mixed precision for the encoder during training (``torch.autocast``).
    compile : bool, default False
        Train through ``torch.compile(encoder)``.

    Attributes
    ----------
    encoder_, lagged_encoder_ : nn.Module
        Trained feature maps (``lagged_encoder_`` is None when shared).
    history_ : dict
        ``train_score`` and ``val_score`` per epoch.
    best_epoch_ : int or None
        Epoch restored at the end (best validation score).
    n_features_ : int
        Feature dimension ``r``.
    state_shape_ : tuple
        Shape of one state.
    lag_ : int or None
        Lag used in ``fit`` (for pre-paired data the ``lag`` given to ``fit``, else None).
    input_shift_, input_scale_ : ndarray or None
        The fitted input standardisation (None when inputs are used as given).

    Examples
    --------
    >>> import numpy as np
    >>> from dpnets import DPNet, TransferOperator
    >>> t = np.arange(600)
    >>> trajectory = np.stack([np.cos(0.3 * t), np.sin(0.3 * t)], axis=1)
    >>> net = DPNet(r=2, lag=5, epochs=2, seed=0, progress=False).fit(trajectory)
    >>> net.transform(trajectory).shape
    (600, 2)
    >>> op = TransferOperator(net, dt=0.1).fit(trajectory)
    >>> op.lag_, float(op.implied_timescales()[0])  # the stationary mode: infinite
    (5, inf)
    """

    def __init__(
        self,
        encoder: nn.Module | None = None,
        *,
        r: int = DEFAULTS["r"],
        lag: int | None = None,
        lagged_encoder: nn.Module | None = None,
        objective: str = DEFAULTS["objective"],
        gamma: float = DEFAULTS["gamma"],
        lr: float = DEFAULTS["lr"],
        batch_size: int = DEFAULTS["batch_size"],
        epochs: int = DEFAULTS["epochs"],
        val_fraction: float = 0.1,
        standardize: str | bool = "auto",
        constant: bool = True,
        consistency: float = 0.0,
        consistency_steps: int = 2,
        optimizer: str | type[torch.optim.Optimizer] = "adam",
        optimizer_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
        init: str = "seed",
        device: str | torch.device | None = None,
        progress: bool = True,
        sde: Any = None,
        distributed: str | bool = "auto",
        autocast: str | None = None,
        compile: bool = False,
    ) -> None:
        self.encoder = encoder
        self.r = r
        self.lag = lag
        self.lagged_encoder = lagged_encoder
        self.objective = objective
        self.gamma = gamma
        self.lr = lr
        self.batch_size = batch_size
        self.epochs = epochs
        self.val_fraction = val_fraction
        self.standardize = standardize
        self.constant = constant
        self.consistency = consistency
        self.consistency_steps = consistency_steps
        self.optimizer = optimizer
        self.optimizer_kwargs = optimizer_kwargs
        self.seed = seed
        self.init = init
        self.device = device
        self.progress = progress
        self.sde = sde
        self.distributed = distributed
        self.autocast = autocast
        self.compile = compile

    # ------------------------------------------------------------------ validation
    #: the accepted values of each parameter (:mod:`dpnets.params`), checked by ``fit`` and
    #: by :func:`dpnets.load` (``BaseEstimator._check_params``)
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "encoder": instance_of(nn.Module, "a torch.nn.Module or None (the default MLP)"),
        "r": integer(1),
        "lag": satisfies(check_lag, none=True),
        "lagged_encoder": instance_of(nn.Module, "a torch.nn.Module or None"),
        "objective": one_of(*SCORES, *GENERATOR_SCORES),
        "gamma": real(0.0),
        **TRAINING_CONSTRAINTS,
        "standardize": one_of(*MODES, True, False),
        "constant": boolean(),
        "consistency": real(0.0),
        "consistency_steps": integer(2),
        "sde": instance_of(SDE, "a dpnets.ito.SDE or None"),
        "autocast": one_of("bf16", "fp16", none=True),
        "compile": boolean(),
        "distributed": satisfies(lambda v: v in ("auto", True, False), "'auto', True or False"),
    }

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        lag: int | None = None,
        callback: Callable[[int, DPNet], None] | None = None,
        checkpoint: str | os.PathLike | None = None,
        checkpoint_every: int = 1,
        resume: bool = False,
        log_weights: Any = None,
        sample_weight: Any = None,
    ) -> DPNet:
        """Train the feature map on ``data``.

        Parameters
        ----------
        X : array, list of arrays, tuple (X, Y), Dataset or DataLoader
            One trajectory ``(T, *state_shape)``; a list of trajectories (pairs never cross
            a boundary); already-paired ``(X, Y)``; or a torch ``Dataset``/``DataLoader``
            of ``(x, y)`` pairs (:func:`dpnets.training_source.training_source`; large
            memory-mapped or HDF5 states are read batch by batch). Generator objectives:
            samples ``(n, *state_shape)`` of the invariant distribution.
        y : array, optional
            The time-lagged partner of each row of ``X``: ``fit(X, Y)`` is ``fit((X, Y))``
            (:func:`dpnets.base.fit_data`).
        lag : int, optional
            Deprecated (a ``FutureWarning``): the lag is the constructor parameter ``lag``.
        callback : callable, optional
            ``callback(epoch, model)`` after every epoch, with ``model`` usable (e.g.
            ``model.transform``) on the current weights.
        checkpoint : path, optional
            Write the training state there atomically every ``checkpoint_every`` epochs.
        checkpoint_every : int, default 1
        resume : bool, default False
            Continue from ``checkpoint`` (needs ``seed``): the result of an uninterrupted
            fit (bit for bit on CPU).
        log_weights : array (n_frames,) or list of arrays, optional
            Data from a biased simulation: ``beta V`` of every frame (``V`` the bias energy,
            :func:`dpnets.read_log_weights`), one array of all frames or one per
            trajectory. Pairs are then formed at ``lag`` frames of *rescaled* time and
            weighted by the time they span (:mod:`dpnets.biased`); generator objectives take
            ``exp(log_weights)`` as importance weights of the samples.
        sample_weight : array (n,), optional
            Generator objectives only: importance weights of the samples.

        Returns
        -------
        self
            An interrupted or failed fit (Ctrl-C, an exception in ``callback``, divergence)
            leaves the estimator exactly as it was before ``fit``.

        Raises
        ------
        FloatingPointError
            If training diverges before a good epoch (:func:`dpnets.training.train`); later,
            the best epoch is restored with a warning.
        """
        self._check_params()
        run = FitRun.start(self, callback, checkpoint, checkpoint_every, resume)
        with run.scope():  # (a shuffling DataLoader draws from torch's seeded RNG)
            source = self._source(X, y, lag, log_weights, sample_weight)
            d = int(np.prod(source.state_shape))
            enc = run.initial(self.encoder, functools.partial(default_mlp, d, int(self.r)))
            # the generator objectives standardise inside the feature map (derivatives with
            # respect to the raw states), not the batches
            samples = self.objective in GENERATOR_SCORES
            prepared = run.prepare(source, enc, self.standardize, standardize_batches=not samples)
            self.input_shift_, self.input_scale_ = prepared.scaling.shift, prepared.scaling.scale
            if samples:
                return self._fit_samples(run, prepared, enc)
            return self._fit_pairs(run, prepared, enc, source.lag, source.steps)

    def _source(
        self, X: Any, y: Any, lag: int | None, log_weights: Any, sample_weight: Any
    ) -> TrainingSource:
        """The input of ``fit`` (:func:`dpnets.base.fit_data`) as the training source of the
        objective, its ``lag`` the model's: samples of pi (generator objectives), or pairs,
        windows or weighted pairs (:func:`dpnets.training_source.training_source`)."""
        data, lag = fit_data(self, X, y, lag)
        steps = int(self.consistency_steps) if self.consistency else 0
        if steps and (self.lagged_encoder is not None or not self._shares_lobes):
            raise ValueError("consistency > 0 needs a shared encoder (lagged_encoder=None)")
        check_weight_args(log_weights, sample_weight, objective=self.objective, windows=steps > 0)
        if self.objective in GENERATOR_SCORES:
            weights = functools.partial(importance_weights, sample_weight, log_weights)
            return generator_samples(data, self.sde, self.objective, self.lagged_encoder, weights)
        return training_source(data, lag, steps, log_weights)

    def _fit_samples(self, run: FitRun, prepared: Prepared, enc: nn.Module) -> DPNet:
        """Continuous-time mode: maximise ``P_d^gamma`` (Thm. 2, Eq. 14) on samples of pi
        (:func:`dpnets.generator_learning.generator_objective`), the derivatives taken
        through the standardisation, with respect to the raw states."""
        dtype = prepared.dtype
        fmap = prepared.scaling.compose(enc, run.device, dtype)
        outputs, loss = generator_objective(
            fmap, self.sde, self.objective, self.gamma, self.constant, run.device, dtype
        )
        r = run.probe(fmap, prepared, constant=bool(self.constant))
        self.lag_ = None
        return self._train(run, (enc, None), outputs, loss, prepared, r)

    def _lagged_template(self, enc: nn.Module) -> nn.Module | None:
        """The module psi' starts from (None: shared with psi) given psi's ``enc`` (VAMPNet:
        a copy of ``enc``); a given ``lagged_encoder`` is copied, never built (no default)."""
        lagged = self.lagged_encoder
        return None if lagged is None else initial_module(lagged, self.seed, nn.Identity, self.init)

    def _fit_pairs(
        self, run: FitRun, prepared: Prepared, enc: nn.Module, model_lag: int | None, steps: int
    ) -> DPNet:
        """Discrete-time mode: maximise the score on lagged pairs (or windows of ``steps``
        lags; :func:`dpnets.scores.pair_objective`)."""
        template = self._lagged_template(enc)
        lag_enc = None if template is None else run.place(template)
        dtype, constant = prepared.dtype, bool(self.constant)
        self.lag_ = model_lag
        r = run.probe(enc, prepared, scaled=True, constant=constant)
        psi = run.forward(enc, dtype)
        psi_lag = None if lag_enc is None else run.forward(lag_enc, dtype)
        gamma, consistency = float(self.gamma), float(self.consistency)
        outputs, loss = pair_objective(
            psi, psi_lag, self.objective, gamma, constant, run.device, dtype, steps, consistency
        )
        return self._train(run, (enc, lag_enc), outputs, loss, prepared, r)

    def _train(
        self,
        run: FitRun,
        encoders: tuple[nn.Module, nn.Module | None],
        outputs: Callable[[Any], tuple[Tensor, ...]],
        loss: nn.Module,
        prepared: Prepared,
        r: int,
    ) -> DPNet:
        """The training shared by the pair and the generator modes."""
        # fitted state needed by transform() inside callbacks
        self.encoder_, self.lagged_encoder_ = encoders
        self.state_shape_, self.n_features_ = prepared.state_shape, r
        desc = f"{type(self).__name__}[{self.objective}]"
        run.train_objective(encoders, outputs, loss, prepared, desc)
        self.n_train_ = prepared.n_train
        diagnostics.warn(self._diagnostics())
        return self

    def diagnostics(self) -> list[Diagnostic]:
        """What makes this fit untrustworthy, each with its remedy (a list of
        :class:`dpnets.diagnostics.Diagnostic`, :func:`dpnets.diagnostics.fit_diagnostics`):
        training not converged, too few gradient steps, a validation score saturated at its
        ceiling and, on lagged pairs, few pairs per input coordinate. ``fit`` warns with
        them (:class:`dpnets.diagnostics.DiagnosticWarning`)."""
        check_is_fitted(self, "encoder_")
        return self._diagnostics()

    def _diagnostics(self) -> list[Diagnostic]:
        pairs = self.objective not in GENERATOR_SCORES
        # a fixed pre-projection (nn.ProjectedMLP) is what the network sees
        n_inputs = getattr(self.encoder_, "n_components", None) or np.prod(self.state_shape_)
        return diagnostics.fit_diagnostics(
            self.history_,
            f"{self.objective} score",
            n_train=getattr(self, "n_train_", None),
            batch_size=int(self.batch_size),
            epochs=int(self.epochs),
            n_features=int(self.n_features_) if pairs else None,
            trivial=int(bool(self.constant) or self.objective.startswith("vamp")),
            n_inputs=int(n_inputs) if pairs else None,
        )

    #: whether psi' shares psi's weights when ``lagged_encoder`` is None (VAMPNet: separate)
    _shares_lobes = True

    def feature_module(self, lagged: bool = False) -> nn.Module:
        """The learned feature map on *raw* states as one differentiable torch module: the
        input standardisation, then the trained encoder (psi' with ``lagged=True``; the
        encoder's weights shared, the constant function not included)."""
        check_is_fitted(self, "encoder_")
        enc = self._encoder(lagged)
        return Scaling.of(self).compose(enc, module_device(enc), module_dtype(enc))

    # ------------------------------------------------------------------ inference
    def _encode(self, X: Any, lagged: bool, batch_size: int) -> Tensor:
        check_is_fitted(self, "encoder_")
        x = check_frames(X, "X")  # a list of trajectories: their frames, in order
        check_state_shape(x.shape[1:], self.state_shape_, type(self).__name__)
        transform = Scaling.of(self).apply
        return encode(
            self._encoder(lagged), x, transform=transform, batch_size=batch_size, name="X"
        )

    def _encoder(self, lagged: bool) -> nn.Module:
        """psi, or psi' (``lagged``; psi when shared)."""
        return (
            self.lagged_encoder_ if lagged and self.lagged_encoder_ is not None else self.encoder_
        )

    def transform(self, X: Any, lagged: bool = False, batch_size: int = 8192) -> np.ndarray:
        """Learned features ``psi(X)`` (``psi'(X)`` with ``lagged=True``), numpy (n, r), of
        the states standardised as in training (without the constant function)."""
        return self._encode(X, lagged, batch_size).numpy()

    __call__ = transform

    def evaluate(
        self,
        data: Any,
        lag: int | None = None,
        objective: str | None = None,
        gamma: float | None = None,
    ) -> float:
        """A score of the learned features on ``data`` (higher is better).

        Parameters
        ----------
        data : array, list of arrays or tuple (X, Y)
            Trajectories, or pre-paired states; for the generator objectives, samples of
            the invariant distribution.
        lag : int, optional
            Lag of the pairs (default: the fitted ``lag_``, else 1).
        objective : str, optional
            Any training objective (default: the model's own ``objective``).
        gamma : float, optional
            Weight of the metric distortion penalty (default: the model's ``gamma``).
        """
        check_is_fitted(self, "encoder_")
        objective = objective or self.objective
        g = float(self.gamma) if gamma is None else check_real("gamma", gamma, 0.0)
        if objective in GENERATOR_SCORES:
            fmap, shape, name = self.feature_module(), self.state_shape_, type(self).__name__
            constant = bool(self.constant)
            return generator_objective_score(
                fmap, data, shape, name, self.sde, objective, g, constant
            )
        check_choice("objective", objective, SCORES)
        if lag is None:
            lag = self.lag_ if self.lag_ is not None else 1
        fx, fy = self._pair_features(data, lag)
        loss = make_loss(objective, g, constant=bool(self.constant))
        with torch.no_grad():
            return -float(loss(fx, fy))

    def score(self, X: Any, y: Any = None) -> float:
        """The held-out VAMP-2 score of the learned features on ``X`` (higher is better):
        ``P^0`` of ``[1, psi]`` (Eq. 7, ``gamma = 0``) on the pairs of ``X`` at the fitted
        lag, comparable across ``gamma``, objectives and learning rates (scikit-learn's
        default scoring); for the generator objectives, the generator score (Eq. 14,
        ``gamma = 0``) on samples ``X``. ``y`` is ignored."""
        check_is_fitted(self, "encoder_")
        if self.objective in GENERATOR_SCORES:
            return self.evaluate(X, objective=self.objective, gamma=0.0)
        fx, fy = self._pair_features(X, self.lag_ if self.lag_ is not None else 1)
        return heldout_score(fx, fy, "projection", constant=bool(self.constant))

    def _pair_features(self, data: Any, lag: int) -> tuple[Tensor, Tensor]:
        """The features ``psi`` and ``psi'`` of the pairs of ``data`` at ``lag``."""
        p = heldout_pairs(data, lag)
        return self._encode(p.X, False, 8192), self._encode(p.Y, True, 8192)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str) -> None:
        """Save to ``path`` atomically (JSON config + tensors; see :func:`dpnets.load`)."""
        write_model(self, path)


# ---------------------------------------------------------------------------- persistence
_NO_SDE = object()


def _optimizer_name(optimizer: Any) -> str:
    """A saveable optimizer: a name, or a class of ``torch.optim`` stored as its path."""
    if isinstance(optimizer, str):
        return optimizer
    if isinstance(optimizer, type) and getattr(torch.optim, optimizer.__name__, None) is optimizer:
        return f"torch.optim.{optimizer.__name__}"
    raise TypeError(
        f"cannot save optimizer={optimizer!r}: only names and torch.optim classes can be "
        "saved; pass the optimizer's name, or the class again after loading"
    )


def _optimizer_from_name(name: str) -> Any:
    if not isinstance(name, str):
        raise InvalidModelFile(f"invalid optimizer {name!r} in the config (expected a name)")
    if name.startswith("torch.optim."):
        cls = getattr(torch.optim, name.rpartition(".")[2], None)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
            raise InvalidModelFile(f"unknown optimizer {name!r}")
        return cls
    return name


def dump_dpnet(model: DPNet, tensors: dict[str, Tensor]) -> dict:
    """The saved form of a fitted DPNet (for :func:`dpnets.io.save`): parameters, fitted
    state, encoder descriptions; weights and the input standardisation go to ``tensors``."""
    check_is_fitted(model, "encoder_")
    cfg = {
        "objective": model.objective,
        "r": int(model.r),
        "lag": model.lag,
        "gamma": float(model.gamma),
        "lr": float(model.lr),
        "batch_size": int(model.batch_size),
        "epochs": int(model.epochs),
        "val_fraction": float(model.val_fraction),
        "standardize": model.standardize,
        "constant": bool(model.constant),
        "consistency": float(model.consistency),
        "consistency_steps": int(model.consistency_steps),
        "optimizer": _optimizer_name(model.optimizer),
        "optimizer_kwargs": model.optimizer_kwargs,
        "seed": model.seed,
        "init": model.init,
        "progress": bool(model.progress),
        "autocast": model.autocast,
        "compile": bool(model.compile),
    }
    fitted = {
        "history_": model.history_,
        "best_epoch_": model.best_epoch_,
        "state_shape_": list(model.state_shape_),
        "n_features_": int(model.n_features_),
        "lag_": model.lag_,
        "n_train_": int(model.n_train_),
    }
    spec = {
        "encoder": describe(model.encoder_),
        "lagged_encoder": (
            describe(model.lagged_encoder_) if model.lagged_encoder_ is not None else None
        ),
        "has_lagged_encoder": model.lagged_encoder_ is not None,
        "has_sde": model.sde is not None,
        "default_encoder": model.encoder is None,
    }
    if model.input_shift_ is not None:
        tensors["input_shift_"] = torch.from_numpy(np.asarray(model.input_shift_))
        tensors["input_scale_"] = torch.from_numpy(np.asarray(model.input_scale_))
    for k, v in model.encoder_.state_dict().items():
        tensors[f"encoder.{k}"] = v.detach().cpu()
    if model.lagged_encoder_ is not None:
        for k, v in model.lagged_encoder_.state_dict().items():
            tensors[f"lagged_encoder.{k}"] = v.detach().cpu()
    return {"params": cfg, "fitted": fitted, "modules": spec}


def restore_dpnet(
    cfg: dict,
    tensors: dict[str, Tensor],
    *,
    encoder: nn.Module | None = None,
    lagged_encoder: nn.Module | None = None,
    device: str | torch.device = "cpu",
    sde: Any = _NO_SDE,
    cls: type[DPNet] | None = None,
    **_: Any,
) -> DPNet:
    """Inverse of :func:`dump_dpnet` (``cls``: the DPNet subclass to rebuild)."""
    mods = cfg["modules"]
    if mods.get("has_sde") and sde is _NO_SDE:
        raise ValueError(
            "this DPNet was trained with an SDE (generator score), which cannot be stored: "
            "pass it as load(path, sde=...), or sde=None to load it without (transform works; "
            "refitting and evaluate need it)"
        )
    enc = restore_module(mods["encoder"], encoder, sub_state(tensors, "encoder."), "encoder")
    enc = enc.to(device)
    lag_enc = None
    if mods["has_lagged_encoder"]:
        lag_enc = restore_module(
            mods["lagged_encoder"],
            lagged_encoder,
            sub_state(tensors, "lagged_encoder."),
            "lagged_encoder",
        ).to(device)
    params = dict(cfg["params"])
    if "score" in params:  # files written before the parameter was renamed objective
        params["objective"] = params.pop("score")
    params["optimizer"] = _optimizer_from_name(params.get("optimizer", "adam"))
    enc_param = None if mods.get("default_encoder") else enc
    if cls is None or cls is DPNet:
        model = DPNet(enc_param, lagged_encoder=lag_enc, device=device, **params)
        model.sde = None if sde is _NO_SDE else sde
    else:  # a subclass with its own constructor (VAMPNet): its parameters only
        names = set(cls._get_param_names()) - {"encoder", "lagged_encoder", "device"}
        model = cls(enc_param, device=device, **{k: v for k, v in params.items() if k in names})
    model.encoder_, model.lagged_encoder_ = enc, lag_enc
    shift = tensors.get("input_shift_")
    model.input_shift_ = None if shift is None else shift.numpy()
    model.input_scale_ = None if shift is None else tensors["input_scale_"].numpy()
    f = cfg["fitted"]
    model.history_ = f["history_"]
    model.best_epoch_ = f["best_epoch_"]
    model.state_shape_ = tuple(f["state_shape_"])
    model.n_features_ = f["n_features_"]
    model.lag_ = f["lag_"]
    model.n_train_ = f["n_train_"]
    _check_restored(model)
    return model


def _check_restored(model: DPNet) -> None:
    """A restored DPNet's recorded dimensions must match its encoder."""
    shape, r = model.state_shape_, model.n_features_
    if not all(isinstance(d, int) and d >= 1 for d in shape) or not isinstance(r, int):
        raise InvalidModelFile(f"invalid state_shape_={shape!r} or n_features_={r!r}")
    lag = model.lag_
    if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int) or lag < 1):
        raise InvalidModelFile(f"invalid lag_={lag!r} (a positive integer or null)")
    n = model.n_train_
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidModelFile(f"invalid n_train_={n!r} (a non-negative integer)")
    # a forward pass on two states checks the output size: for large states on the meta
    # device (a copy of the encoder there: no memory for the states), so that a forged
    # state_shape_ is refused here and not at first use
    large = math.prod(shape) > 10**6
    dtype, device = module_dtype(model.encoder_), module_device(model.encoder_)
    out = None
    with torch.no_grad():
        try:
            if large:
                with meta_device():
                    probe = copy.deepcopy(model.encoder_).to("meta")
                    out = probe(torch.zeros((2, *shape), dtype=dtype))
            else:
                out = model.encoder_(torch.zeros((2, *shape), dtype=dtype, device=device))
        except NotImplementedError:  # an operation without a meta kernel: not checkable
            out = None
        except Exception as err:  # noqa: BLE001 - any other failure: a mismatched file
            if large and "meta" in str(err).lower():  # an operation meta tensors lack
                return
            raise InvalidModelFile(
                f"the encoder does not accept states of shape {shape} (state_shape_ in the "
                f"file; {type(err).__name__}: {str(err)[:200]})"
            ) from None
    if out is not None:
        if out.ndim != 2 or out.shape[1] != r:
            raise InvalidModelFile(
                f"the encoder returns {tuple(out.shape[1:])} features, the file says {r}"
            )


register("DPNet", DPNet, dump_dpnet, restore_dpnet)
