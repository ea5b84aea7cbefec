"""DPNet: learn a feature map psi by maximising a DPNets score (paper Sec. 3-4, Alg. 1)."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, random_split

from dpnets.data import IndexBatcher, Pairs, check_states, chunks, is_streaming, pairs
from dpnets.exceptions import check_is_fitted
from dpnets.scores import GENERATOR_SCORES, SCORES, make_loss
from dpnets.training import resolve_device, train_estimator

__all__ = ["DPNet"]


def _module_dtype(module: nn.Module) -> torch.dtype:
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.get_default_dtype()


class DPNet:
    """Deep Projection Network: a learned feature map ``psi: X -> R^r``.

    Trains ``encoder`` (and optionally a separate ``lagged_encoder`` psi') by mini-batch
    maximisation of a DPNets score (paper Alg. 1):

    * ``"relaxed"`` — ``S^gamma`` (Eq. 9), no matrix inversion, the paper's default;
    * ``"projection"`` — ``P^gamma`` (Eq. 7);
    * ``"vamp1"``, ``"vamp2"`` — VAMP scores (centred, +1 convention; with ``gamma=0`` this
      is VAMPNets);
    * ``"generator"`` — continuous time: the generator score ``P_d^gamma`` (Thm. 2, Eq. 14)
      of an SDE given as ``sde=``, from Itô derivatives of the features (Eqs. 12-13);
      ``fit(X)`` then takes samples of the invariant distribution, not pairs;
    * ``"dirichlet"`` — the same for reversible SDEs through the Dirichlet form (first
      derivatives only).

    After ``fit``, :meth:`transform` evaluates ``psi`` and :class:`dpnets.TransferOperator`
    regresses the operator on it.

    Parameters
    ----------
    encoder : torch.nn.Module
        Maps a batch of states ``(batch, *state_shape)`` to ``(batch, r)``. It is copied at
        ``fit``; the trained copy is ``encoder_``.
    lagged_encoder : torch.nn.Module, optional
        psi' for the evolved states. ``None`` (default) shares psi's weights, which is exact
        for normal (e.g. reversible) operators and halves the cost.
    score : {"relaxed", "projection", "vamp1", "vamp2", "generator", "dirichlet"}
        Default "relaxed".
    gamma : float, default 1.0
        Weight of the metric distortion penalty ``R`` (paper uses 1).
    lr : float, default 1e-3
        Learning rate.
    batch_size : int, default 1024
        Mini-batch size ``m``. Scores are biased for small batches; prefer ``m >> r``.
    epochs : int, default 100
    val_fraction : float, default 0.1
        Fraction of pairs held out (at random) to select the best epoch; 0 disables.
    optimizer : str or torch.optim.Optimizer subclass, default "adam"
    optimizer_kwargs : dict, optional
    seed : int, optional
        Seeds the data split, batch order and torch's global RNG (dropout) for
        reproducible fits. Weight initialisation is the encoder's as passed in.
    device : str or torch.device, optional
        Default: CUDA if available, else CPU.
    progress : bool, default True
        Show a tqdm progress bar (if tqdm is installed).
    sde : dpnets.ito.SDE, optional
        The SDE, required by the generator scores (e.g.
        :func:`dpnets.ito.overdamped_langevin`); the encoder must be twice differentiable
        (smooth activations) for ``"generator"``.

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
    lag_ : int
        Lag used in ``fit``.

    Examples
    --------
    >>> from dpnets import DPNet
    >>> from dpnets.nn import MLP
    >>> net = DPNet(MLP(1, (32, 32), 4), epochs=10, progress=False)  # doctest: +SKIP
    >>> net.fit(trajectory, lag=1).transform(trajectory).shape         # doctest: +SKIP
    (T, 4)
    """

    def __init__(
        self,
        encoder: nn.Module,
        *,
        lagged_encoder: nn.Module | None = None,
        score: str = "relaxed",
        gamma: float = 1.0,
        lr: float = 1e-3,
        batch_size: int = 1024,
        epochs: int = 100,
        val_fraction: float = 0.1,
        optimizer: str | type[torch.optim.Optimizer] = "adam",
        optimizer_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
        device: str | torch.device | None = None,
        progress: bool = True,
        sde: Any = None,
    ) -> None:
        self.encoder = encoder
        self.lagged_encoder = lagged_encoder
        self.score = score
        self.gamma = gamma
        self.lr = lr
        self.batch_size = batch_size
        self.epochs = epochs
        self.val_fraction = val_fraction
        self.optimizer = optimizer
        self.optimizer_kwargs = optimizer_kwargs
        self.seed = seed
        self.device = device
        self.progress = progress
        self.sde = sde

    # ------------------------------------------------------------------ validation
    def _check_params(self) -> None:
        if not isinstance(self.encoder, nn.Module):
            raise TypeError(f"encoder must be a torch.nn.Module, got {type(self.encoder)}")
        if self.lagged_encoder is not None and not isinstance(self.lagged_encoder, nn.Module):
            raise TypeError("lagged_encoder must be a torch.nn.Module or None")
        if self.score not in SCORES + GENERATOR_SCORES:
            raise ValueError(
                f"unknown score {self.score!r}; expected one of "
                f"{', '.join(SCORES + GENERATOR_SCORES)}"
            )
        if not self.gamma >= 0:
            raise ValueError(f"gamma must be >= 0, got {self.gamma}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if int(self.batch_size) < 2:
            raise ValueError(f"batch_size must be >= 2, got {self.batch_size}")
        if int(self.epochs) < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction}")

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        data: Any,
        lag: int = 1,
        *,
        callback: Callable[[int, DPNet], None] | None = None,
    ) -> DPNet:
        """Train the feature map on ``data``.

        Parameters
        ----------
        data : array, list of arrays, tuple (X, Y), Dataset or DataLoader
            One trajectory ``(T, *state_shape)``; a list of trajectories (pairs never cross
            a boundary); already-paired ``(X, Y)``; or a torch ``Dataset``/``DataLoader``
            yielding ``(x, y)`` pairs (a DataLoader is used as is, without validation).
            Generator scores: samples ``(n, *state_shape)`` of the invariant distribution
            (or a list of such arrays); ``lag`` is ignored.
        lag : int, default 1
            Lag in steps between paired states (trajectory input only).
        callback : callable, optional
            ``callback(epoch, model)`` after every epoch, with ``model`` usable (e.g.
            ``model.transform``) on the current weights — for learning curves of any metric.

        Returns
        -------
        self
        """
        self._check_params()
        if self.score in GENERATOR_SCORES:
            return self._fit_generator(data, callback)
        device = resolve_device(self.device)
        gen = self._generator()
        enc = copy.deepcopy(self.encoder).to(device)
        lag_enc = (
            copy.deepcopy(self.lagged_encoder).to(device)
            if self.lagged_encoder is not None
            else None
        )
        dtype = _module_dtype(enc)
        loss_fn = make_loss(self.score, float(self.gamma))

        def to_dev(t: Tensor) -> Tensor:
            t = t.to(device, non_blocking=True)
            return t.to(dtype) if t.is_floating_point() else t

        if is_streaming(data):
            train_batches, val_batches, n_train, sample = self._streaming(data, gen)
            state_shape = tuple(sample.shape[1:])
            self.lag_ = None
        else:
            p = pairs(data, lag)
            state_shape = p.state_shape
            train_batches, val_batches, n_train = self._batchers(p, gen, device, dtype)
            self.lag_ = int(lag)
            sample = torch.as_tensor(p.x_states[p.i[:2]])
        r = self._feature_dim(enc, to_dev(sample), n_train)

        def features(xb: Tensor, yb: Tensor) -> tuple[Tensor, Tensor]:
            if lag_enc is None:  # shared weights: one forward pass on the stacked batch
                f = enc(torch.cat([xb, yb]))
                return f[: xb.shape[0]], f[xb.shape[0] :]
            return enc(xb), lag_enc(yb)

        def batch_loss(batch: tuple[Tensor, Tensor]) -> Tensor:
            return loss_fn(*features(to_dev(batch[0]), to_dev(batch[1])))

        val_score = None
        if val_batches is not None:

            def val_score() -> float:
                with torch.no_grad():
                    fx, fy = [], []
                    for xb, yb in val_batches:
                        a, b = features(to_dev(xb), to_dev(yb))
                        fx.append(a)
                        fy.append(b)
                    return -float(loss_fn(torch.cat(fx), torch.cat(fy)))

        modules = [enc] if lag_enc is None else [enc, lag_enc]
        # fitted state needed by transform() inside callbacks
        self.encoder_, self.lagged_encoder_ = enc, lag_enc
        self.state_shape_, self.n_features_ = tuple(state_shape), r
        train_estimator(
            self,
            modules,
            batch_loss,
            train_batches,
            val_score=val_score,
            desc=f"DPNet[{self.score}]",
            callback=callback,
        )
        self.state_shape_ = tuple(state_shape)
        self.n_features_ = r
        self.n_train_ = n_train
        return self

    def _fit_generator(self, data: Any, callback: Callable[[int, DPNet], None] | None) -> DPNet:
        """Continuous-time mode: maximise ``P_d^gamma`` (Thm. 2, Eq. 14) on samples of pi."""
        from dpnets.ito import SDE, check_samples, warn_if_piecewise_linear
        from dpnets.scores import GeneratorLoss

        if not isinstance(self.sde, SDE):
            raise ValueError(
                f"score={self.score!r} needs sde=dpnets.ito.SDE(...) (e.g. "
                "dpnets.ito.overdamped_langevin)"
            )
        if self.lagged_encoder is not None:
            raise ValueError("generator scores use one feature map; lagged_encoder must be None")
        if self.score == "dirichlet" and not self.sde.reversible:
            raise ValueError("score='dirichlet' needs a reversible SDE; use score='generator'")
        x = check_samples(data)
        device = resolve_device(self.device)
        gen = self._generator()
        enc = copy.deepcopy(self.encoder).to(device)
        if self.score == "generator":
            warn_if_piecewise_linear(enc)
        dtype = _module_dtype(enc)
        form = "ito" if self.score == "generator" else "dirichlet"
        loss_fn = GeneratorLoss(float(self.gamma), form)
        sde = self.sde

        def derivatives(xb: Tensor) -> tuple[Tensor, Tensor]:
            xb = xb.to(device, non_blocking=True).to(dtype)
            if form == "ito":
                return sde.ito_derivative(enc, xb)
            return sde.diffusion_jacobian(enc, xb)

        idx = np.arange(x.shape[0], dtype=np.int64)
        train_batches, val_batches, n_train = self._batchers(
            Pairs(x, x, idx, idx), gen, device, dtype
        )
        sample = torch.as_tensor(x[:2]).to(device)
        r = self._feature_dim(
            enc, sample.to(dtype) if sample.is_floating_point() else sample, n_train
        )

        def batch_loss(batch: tuple[Tensor, Tensor]) -> Tensor:
            return loss_fn(*derivatives(batch[0]))

        val_score = None
        if val_batches is not None:

            def val_score() -> float:
                with torch.no_grad():
                    parts = [derivatives(xb) for xb, _ in val_batches]
                    f = torch.cat([a for a, _ in parts])
                    d = torch.cat([b for _, b in parts])
                    return -float(loss_fn(f, d))

        self.encoder_, self.lagged_encoder_ = enc, None
        self.state_shape_, self.n_features_ = tuple(x.shape[1:]), r
        self.lag_ = None
        train_estimator(
            self,
            [enc],
            batch_loss,
            train_batches,
            val_score=val_score,
            desc=f"DPNet[{self.score}]",
            callback=callback,
        )
        self.n_train_ = n_train
        return self

    def _evaluate_generator(self, data: Any, score: str) -> float:
        from dpnets.ito import SDE, check_samples
        from dpnets.scores import GeneratorLoss

        if not isinstance(self.sde, SDE):
            raise ValueError(f"score={score!r} needs the model's sde (DPNet(..., sde=...))")
        x = check_samples(data)
        if tuple(x.shape[1:]) != self.state_shape_:
            raise ValueError(
                f"X has state shape {tuple(x.shape[1:])}; the model was fitted on "
                f"{self.state_shape_}"
            )
        enc = self.encoder_
        enc.eval()
        device = next(enc.parameters()).device
        dtype = _module_dtype(enc)
        fs, ds = [], []
        with torch.no_grad():
            for sl in chunks(x.shape[0], 8192):
                xb = torch.as_tensor(x[sl]).to(device=device, dtype=dtype)
                if score == "generator":
                    f, d = self.sde.ito_derivative(enc, xb)
                else:
                    f, d = self.sde.diffusion_jacobian(enc, xb)
                fs.append(f)
                ds.append(d)
            form = "ito" if score == "generator" else "dirichlet"
            loss = GeneratorLoss(float(self.gamma), form)
            return -float(loss(torch.cat(fs), torch.cat(ds)))

    def _generator(self) -> torch.Generator:
        """RNG for the split and batch order; with ``seed`` also seeds torch (dropout)."""
        gen = torch.Generator()
        if self.seed is not None:
            gen.manual_seed(int(self.seed))
            torch.manual_seed(int(self.seed))
        else:
            gen.seed()
        return gen

    def _batchers(
        self, p: Pairs, gen: torch.Generator, device: torch.device, dtype: torch.dtype
    ) -> tuple[IndexBatcher, IndexBatcher | None, int]:
        """Random train/validation split of ``p`` (``val_fraction``) into index batchers."""
        n = len(p)
        perm = torch.randperm(n, generator=gen).numpy()
        n_val = int(round(self.val_fraction * n))
        p_train, p_val = p.subset(np.sort(perm[n_val:])), p.subset(np.sort(perm[:n_val]))
        train = IndexBatcher(p_train, self.batch_size, device=device, dtype=dtype, generator=gen)
        val = (
            IndexBatcher(p_val, 8192, device=device, dtype=dtype, shuffle=False)
            if n_val > 0
            else None
        )
        return train, val, len(p_train)

    def _feature_dim(self, enc: nn.Module, sample: Tensor, n_train: int) -> int:
        """``r`` from a forward pass on a couple of states; checks ``n_train >= r``."""
        enc.eval()
        with torch.no_grad():
            out = enc(sample)
        enc.train()
        if out.ndim != 2 or out.shape[0] != sample.shape[0]:
            raise ValueError(
                f"encoder must map (batch, *state_shape) to (batch, r); got {tuple(out.shape)}"
            )
        r = int(out.shape[1])
        if n_train < r:
            raise ValueError(
                f"fewer training samples ({n_train}) than features (r={r}); provide more data"
            )
        if int(self.batch_size) < r:
            warnings.warn(
                f"batch_size={self.batch_size} is smaller than r={r}: batch covariances are "
                "rank-deficient",
                stacklevel=3,
            )
        return r

    def _streaming(self, data: Dataset | DataLoader, gen: torch.Generator):
        if isinstance(data, DataLoader):
            first = next(iter(data))
            return data, None, len(data.dataset), torch.as_tensor(first[0])[:2]  # type: ignore[arg-type]
        n = len(data)  # type: ignore[arg-type]
        n_val = int(round(self.val_fraction * n))
        if n_val > 0:
            train_ds, val_ds = random_split(data, [n - n_val, n_val], generator=gen)
            val_loader = DataLoader(val_ds, batch_size=8192, shuffle=False)
        else:
            train_ds, val_loader = data, None
        loader = DataLoader(
            train_ds,
            batch_size=int(self.batch_size),
            shuffle=True,
            generator=gen,
            drop_last=len(train_ds) > int(self.batch_size),
        )
        x0 = torch.as_tensor(data[0][0])[None]
        return loader, val_loader, n - n_val, x0

    # ------------------------------------------------------------------ inference
    def _encode(self, X: Any, lagged: bool, batch_size: int) -> Tensor:
        check_is_fitted(self, "encoder_")
        x = check_states(X, "X")
        if tuple(x.shape[1:]) != self.state_shape_:
            raise ValueError(
                f"X has state shape {tuple(x.shape[1:])}; the model was fitted on "
                f"{self.state_shape_}"
            )
        enc = (
            self.lagged_encoder_ if (lagged and self.lagged_encoder_ is not None) else self.encoder_
        )
        enc.eval()
        device = next(enc.parameters()).device
        dtype = _module_dtype(enc)
        out = []
        with torch.no_grad():
            for sl in chunks(x.shape[0], batch_size):
                xb = torch.as_tensor(x[sl]).to(device)
                out.append(enc(xb.to(dtype) if xb.is_floating_point() else xb))
        return torch.cat(out)

    def transform(self, X: Any, lagged: bool = False, batch_size: int = 8192) -> np.ndarray:
        """Features ``psi(X)`` (or ``psi'(X)`` with ``lagged=True``) as a numpy array (n, r)."""
        return self._encode(X, lagged, batch_size).cpu().numpy()

    __call__ = transform

    def evaluate(self, data: Any, lag: int = 1, score: str | None = None) -> float:
        """The score (default: the training score, with ``gamma``) on held-out ``data``.

        For the generator scores ``data`` are samples of the invariant distribution.
        """
        check_is_fitted(self, "encoder_")
        if (score or self.score) in GENERATOR_SCORES:
            return self._evaluate_generator(data, score or self.score)
        p = pairs(data, lag)
        fx = self._encode(p.X, False, 8192)
        fy = self._encode(p.Y, True, 8192)
        loss = make_loss(score or self.score, float(self.gamma))
        with torch.no_grad():
            return -float(loss(fx, fy))

    # ------------------------------------------------------------------ persistence
    def save(self, path: str) -> None:
        """Save to ``path`` (JSON config + tensors; see :func:`dpnets.load`)."""
        from dpnets.io import save

        save(self, path)
