"""Koopman autoencoders: the dynamic AE (Lusch et al. 2018) and the consistent AE
(Azencot et al. 2020).

An encoder ``z = enc(x)`` (``r`` latent coordinates), a decoder ``x = dec(z)`` and a linear
latent operator ``K`` (``z_{t+1} = K z_t``) are trained jointly through
:func:`dpnets.training.train` on windows ``(x_t, x_{t+lag}, ..., x_{t+S lag})`` of the
trajectories (``S = n_steps``), drawn by tensor indexing with :class:`dpnets.batching.IndexBatcher`.
Forecasts are ``dec(K^t enc(x))``; the eigenvalues are those of ``K``, and
``enc(x)^T r_i`` with ``K^T r_i = lambda_i r_i`` are the (approximate) Koopman
eigenfunctions. The mean-squared-error losses are:

* :class:`DynamicAutoencoder` (Lusch et al. 2018):
  ``w_rec |dec(enc(x_0)) - x_0|^2 + w_pred sum_k |dec(K^k z_0) - x_k|^2
  + w_lin sum_k |K^k z_0 - enc(x_k)|^2``;
* :class:`ConsistentAutoencoder` (Azencot et al. 2020): a forward operator ``K`` and a
  backward one ``D`` with ``w_rec`` reconstruction, ``w_pred`` forward prediction,
  ``w_back`` backward prediction ``sum_k |dec(D^k z_S) - x_{S-k}|^2`` and the consistency
  penalty ``w_con sum_{k=1}^{r} (|(D K)_{:k,:k} - I_k|_F^2 + |(K D)_{:k,:k} - I_k|_F^2) / (2k)``
  on the leading ``k x k`` blocks.

Lusch et al.'s auxiliary network for continuous spectra and ``L_inf`` penalty are not
included; both models use a constant ``K`` as in Azencot et al.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from dpnets import diagnostics
from dpnets.base import fit_data
from dpnets.diagnostics import Diagnostic
from dpnets.exceptions import check_is_fitted
from dpnets.io import jsonable, restore_module, sub_state
from dpnets.linalg import sym_pinv
from dpnets.nn.mlp import default_mlp
from dpnets.nn.registry import describe
from dpnets.nn.utils import encode, module_dtype
from dpnets.pairs import check_lag, lagged_pairs, resolve_lag
from dpnets.params import Constraint, instance_of, integer, real, satisfies
from dpnets.spectral import DiscreteTimeModel
from dpnets.states import is_streaming
from dpnets.training import TRAINING_CONSTRAINTS, FitRun
from dpnets.training_source import training_source

__all__ = [
    "DynamicAutoencoder",
    "ConsistentAutoencoder",
    "LatentLinear",
    "dump_autoencoder",
    "restore_autoencoder",
]


class LatentLinear(nn.Module):
    """Linear latent operator ``z -> K z`` (batched: ``z @ K^T``), without bias."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.eye(dim))

    def forward(self, z: Tensor) -> Tensor:
        return z @ self.weight.T


class _KoopmanAutoencoder(DiscreteTimeModel):
    """Shared training, forecasting and spectral API of the Koopman autoencoders."""

    encoder: nn.Module
    decoder: nn.Module
    _desc = "autoencoder"
    _backward = False

    def _init_common(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)

    # ------------------------------------------------------------------ validation
    def _weights(self) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    #: every constructor parameter's accepted values (:mod:`dpnets.params`), checked by
    #: ``fit`` and by :func:`dpnets.load`; each model adds its loss weights (reals >= 0)
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "encoder": instance_of(nn.Module, "a torch.nn.Module or None (the default MLP)"),
        "decoder": instance_of(nn.Module, "a torch.nn.Module or None (the default MLP)"),
        "r": integer(1),
        "n_steps": integer(1),
        "lag": satisfies(check_lag, none=True),
        **TRAINING_CONSTRAINTS,
    }

    # ------------------------------------------------------------------ losses
    def _loss(self, x0: Tensor, ys: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _rollout(self, op: nn.Module, z: Tensor, steps: int) -> Tensor:
        out = []
        for _ in range(steps):
            z = op(z)
            out.append(z)
        return torch.stack(out, dim=1)  # (B, steps, r)

    def _decode(self, z: Tensor, like: Tensor) -> Tensor:
        """Decode a batch of latents (..., r) to states shaped like ``like`` (..., *state)."""
        lead = z.shape[:-1]
        out = self.decoder_(z.reshape(-1, z.shape[-1]))
        n_state = int(np.prod(self.state_shape_))
        if out.numel() != int(np.prod(lead)) * n_state:
            raise ValueError(
                f"decoder must map (batch, r) to (batch, {n_state}) values (state shape "
                f"{self.state_shape_}); got {tuple(out.shape)}"
            )
        return out.reshape(like.shape)

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        X: Any,
        y: Any = None,
        *,
        lag: int | None = None,
        callback: Callable[[int, Any], None] | None = None,
        checkpoint: Any = None,
        checkpoint_every: int = 1,
        resume: bool = False,
    ) -> _KoopmanAutoencoder:
        """Train encoder, decoder and latent operator(s) on ``data``.

        Parameters
        ----------
        X : array, list of arrays or tuple (X, Y)
            Trajectories (windows never cross a boundary) or one-step pairs (``n_steps=1``).
        y : array, optional
            The time-lagged partner of each row of ``X``: ``fit(X, Y)`` is ``fit((X, Y))``
            (same checks; :func:`dpnets.base.fit_data`). A 1-D vector of one value per row
            of multi-dimensional states (scikit-learn's target) is ignored with a warning.
        lag : int, optional
            Deprecated: the lag is the constructor parameter ``lag``.
        callback : callable, optional
            ``callback(epoch, model)`` after each epoch, with ``model`` usable.
        checkpoint, checkpoint_every, resume
            Checkpoint and resume, as :meth:`dpnets.DPNet.fit`.

        Returns
        -------
        self

        An interrupted or failed fit leaves the estimator as it was before ``fit``.
        """
        self._check_params()
        data, lag = fit_data(self, X, y, lag)
        if is_streaming(data):
            raise TypeError("autoencoders need in-memory trajectories (array, list or (X, Y))")
        run = FitRun.start(self, callback, checkpoint, checkpoint_every, resume)
        with run.scope():
            return self._fit(run, data, lag)

    def _fit(self, run: FitRun, data: Any, lag: int | None) -> _KoopmanAutoencoder:
        pair_lag, model_lag = resolve_lag(data, lag)
        source = training_source(data, pair_lag, int(self.n_steps))  # windows
        d = int(np.prod(source.state_shape))
        enc = run.initial(self.encoder, functools.partial(default_mlp, d, int(self.r)))
        prepared = run.prepare(source, enc)  # no standardisation: the split, the first states
        dtype = prepared.dtype
        r = run.probe(enc, prepared)  # integer and bool states: cast
        dec = run.initial(self.decoder, functools.partial(default_mlp, r, d), dtype)
        q, rr = torch.linalg.qr(torch.randn(r, r, generator=run.rng, dtype=torch.float64))
        q = q * torch.sign(torch.diagonal(rr))[None, :]  # a random rotation
        latent = LatentLinear(r).to(device=run.device, dtype=dtype)
        back = LatentLinear(r).to(device=run.device, dtype=dtype) if self._backward else None
        with torch.no_grad():
            latent.weight.copy_(q.to(dtype))
            if back is not None:
                back.weight.copy_(q.T.to(dtype))  # the inverse of the rotation
        self.encoder_, self.decoder_, self.latent_, self.backward_latent_ = enc, dec, latent, back
        self.state_shape_, self.n_features_ = prepared.state_shape, r
        self.features_, self.lag_ = enc, model_lag
        modules = [m for m in (enc, dec, latent, back) if m is not None]

        def batch_loss(batch: tuple[Tensor, Tensor]) -> Tensor:
            return self._loss(batch[0], batch[1])

        val_score = None
        if prepared.val is not None:

            def val_score() -> float:
                with torch.no_grad():
                    total, count = 0.0, 0
                    for xb, yb in prepared.val:
                        total += float(self._loss(xb, yb)) * xb.shape[0]
                        count += xb.shape[0]
                    return -total / count

        # the one-step pairs at the lag: latent covariance (eigenfunction norms) and the
        # samples on which predict(..., observable=) takes its values
        x_train = lagged_pairs(data, pair_lag).X

        user_callback = run.callback

        def on_epoch(epoch: int, model: Any) -> None:
            self._finish(x_train)
            user_callback(epoch, model)

        if user_callback is not None:  # the spectral state is current in the callback
            run = dataclasses.replace(run, callback=on_epoch)
        run.train(
            modules,
            batch_loss,
            prepared.train,
            val_score=val_score,
            n_train=prepared.n_train,
            state_shape=prepared.state_shape,
            desc=self._desc,
        )
        self._finish(x_train)
        self.n_train_ = int(prepared.n_train)
        diagnostics.warn(self._diagnostics())
        return self

    def _diagnostics(
        self, n_samples: int | None = None, units: str | None = None
    ) -> list[Diagnostic]:
        """The training's findings (not converged, too few gradient steps:
        :func:`dpnets.diagnostics.fit_diagnostics`), then the spectrum's."""
        training = diagnostics.fit_diagnostics(
            self.history_,
            "score (minus the autoencoder's loss)",
            n_train=getattr(self, "n_train_", None),
            batch_size=int(self.batch_size),
            epochs=int(self.epochs),
        )
        return training + super()._diagnostics(n_samples, units)

    def _finish(self, x_train: np.ndarray) -> None:
        """Latent operator and covariance -> the SpectralModel state (eig, eigenfunctions)."""
        self.K_ = self.latent_.weight.detach().cpu().double().numpy()
        if self.backward_latent_ is not None:
            self.D_ = self.backward_latent_.weight.detach().cpu().double().numpy()
        z = self.transform(x_train)
        self.features_x_ = z
        self._set_latent_state(z.T @ z / z.shape[0], z.shape[0])

    def _set_latent_state(self, cx: np.ndarray, n_samples: int) -> None:
        """The :class:`SpectralModel` state from ``K_`` and the latent covariance."""
        self.n_samples_ = n_samples
        self.cx_ = cx
        self.cx_pinv_ = sym_pinv(cx)
        # SpectralModel acts on coefficient vectors: E[z(X_1)^T a | x] = z(x)^T K^T a
        self.operator_ = self.K_.T.copy()
        self.state_coef_ = None  # forecasts of the state go through the decoder
        self._set_spectrum()

    # ------------------------------------------------------------------ inference
    def _check_X(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "encoder_")
        return super()._check_X(X)

    def transform(self, X: Any) -> np.ndarray:
        """Latent coordinates ``enc(X)``, float64 (n, r)."""
        x = self._check_X(X)  # first: the not-fitted check, before encoder_ is read
        return encode(self.encoder_, x).double().numpy()

    def _observable_coef(self, observable: Any) -> tuple[np.ndarray, tuple[int, ...]]:
        if observable is None:
            raise ValueError(
                "the autoencoder forecasts its state through the nonlinear decoder, which has "
                "no linear coefficients: pass observable= (values on the training pairs)"
            )
        return super()._observable_coef(observable)

    def predict(
        self, X: Any, t: Any = 1, observable: Any = None, unit: str = "steps"
    ) -> np.ndarray:
        """Forecast ``t`` lag steps ahead: the state ``dec(K^t enc(x))``, or an observable.

        Parameters
        ----------
        X : array (m, *state_shape)
        t : int or sequence of int (>= 0)
            Horizon(s) in ``unit`` (see :meth:`dpnets.TransferOperator.predict`); ``t=0``
            returns the input states.
        observable : array (n_samples_, ...), optional
            Values of an observable at the lagged states of the one-step training pairs
            ``(x_s, x_{s+lag})`` (as for :meth:`dpnets.TransferOperator.predict`); it is
            regressed on the latent coordinates and forecast linearly,
            ``enc(x)^T (K^T)^{t-1} c``. Default: the state, through the decoder.

        Returns
        -------
        ndarray, float64
            ``(m, *shape)`` for a scalar ``t``; ``(len(t), m, *shape)`` otherwise.
        """
        if observable is not None:
            return super().predict(X, t, observable, unit)
        check_is_fitted(self, "encoder_")
        scalar = np.ndim(t) == 0
        ts = [self._check_time(s, unit) for s in ([t] if scalar else list(t))]
        x = self._check_X(X)
        dtype = module_dtype(self.encoder_)
        z = encode(self.encoder_, x)
        k64 = self.latent_.weight.detach().double().cpu()
        outs = []
        for s in ts:
            if s == 0:
                outs.append(np.asarray(x, dtype=np.float64).reshape(x.shape[0], *self.state_shape_))
                continue
            kt = torch.linalg.matrix_power(k64, s).T.to(dtype)
            out = encode(self.decoder_, (z @ kt).numpy(), dtype=dtype)
            outs.append(out.reshape(out.shape[0], *self.state_shape_).double().numpy())
        return outs[0] if scalar else np.stack(outs)


_COMMON_DOC = """
    encoder : torch.nn.Module, optional
        Maps states ``(batch, *state_shape)`` to latents ``(batch, r)``; copied at ``fit``.
        ``None`` (default): the MLP of :class:`dpnets.DPNet`'s default encoder, sized to
        the data, with ``r`` outputs.
    decoder : torch.nn.Module, optional
        Maps latents ``(batch, r)`` to ``(batch, *state_shape)`` (or the flattened states).
        ``None`` (default): the mirrored MLP (``r`` inputs, two hidden layers of 64 CELU
        units, the flattened state out).
    r : int, default 4
        Latent dimension of the default encoder (unused when you pass one).
    n_steps : int, default 5
        Prediction horizon ``S`` (in lags) of the training windows.
    lag : int, optional
        Frames between consecutive states of a window (default 1); ``predict(X, t)``
        forecasts ``t`` such steps ahead. For pre-paired data, the lag they were paired at.
    lr, batch_size, epochs, val_fraction, optimizer, optimizer_kwargs
        As :class:`dpnets.DPNet` (the validation score is minus the loss on held-out
        windows; the best epoch is restored).
    seed, init, device, progress
        As :class:`dpnets.DPNet`.
"""


#: the loss weights of each autoencoder (parameters, saved with the model)
_WEIGHTS = ("reconstruction_weight", "prediction_weight", "linearity_weight")
_CONSISTENT_WEIGHTS = (
    "reconstruction_weight",
    "prediction_weight",
    "backward_weight",
    "consistency_weight",
)


class DynamicAutoencoder(_KoopmanAutoencoder):
    __doc__ = f"""Dynamic autoencoder (Lusch et al. 2018): encoder, decoder and linear ``K``.

    Loss (see the module docstring): reconstruction + multi-step state prediction through
    ``dec(K^k enc(x_0))`` + linearity of the latent dynamics ``K^k enc(x_0) ~ enc(x_k)``.

    Parameters
    ----------{_COMMON_DOC}
    reconstruction_weight, prediction_weight, linearity_weight : float, default 1.0
        Weights of the three terms.

    Attributes
    ----------
    encoder_, decoder_ : nn.Module
        Trained networks.
    K_ : ndarray (r, r)
        Latent operator (``z_{{t+1}} = K z_t``); ``eig()`` returns its eigenvalues.
    history_, best_epoch_, n_features_, state_shape_, lag_
        As :class:`dpnets.DPNet`.

    Examples
    --------
    >>> import numpy as np
    >>> from dpnets.nn import MLP
    >>> t = np.arange(300)
    >>> trajectory = np.stack([np.cos(0.3 * t), np.sin(0.3 * t)], axis=1)
    >>> ae = DynamicAutoencoder(MLP(2, (8,), 4), MLP(4, (8,), 2), epochs=2, seed=0, progress=False)
    >>> ae.fit(trajectory).predict(trajectory[:5], t=[1, 2, 3]).shape
    (3, 5, 2)
    """

    _desc = "DynamicAE"

    def __init__(
        self,
        encoder: nn.Module | None = None,
        decoder: nn.Module | None = None,
        *,
        r: int = 4,
        n_steps: int = 5,
        lag: int | None = None,
        reconstruction_weight: float = 1.0,
        prediction_weight: float = 1.0,
        linearity_weight: float = 1.0,
        lr: float = 1e-3,
        batch_size: int = 256,
        epochs: int = 100,
        val_fraction: float = 0.1,
        optimizer: str | type[torch.optim.Optimizer] = "adam",
        optimizer_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
        init: str = "seed",
        device: str | torch.device | None = None,
        progress: bool = True,
    ) -> None:
        self._init_common(**{k: v for k, v in locals().items() if k not in ("self", "__class__")})

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **_KoopmanAutoencoder._parameter_constraints,
        **dict.fromkeys(_WEIGHTS, real(0.0)),
    }

    def _weights(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in _WEIGHTS}

    def _loss(self, x0: Tensor, ys: Tensor) -> Tensor:
        b, s = ys.shape[0], ys.shape[1]
        z0 = self.encoder_(x0)
        zk = self._rollout(self.latent_, z0, s)  # (B, S, r)
        loss = self.reconstruction_weight * torch.mean((self._decode(z0, x0) - x0) ** 2)
        loss = loss + self.prediction_weight * torch.mean((self._decode(zk, ys) - ys) ** 2)
        if self.linearity_weight > 0:
            z_true = self.encoder_(ys.reshape(b * s, *ys.shape[2:])).reshape(b, s, -1)
            loss = loss + self.linearity_weight * torch.mean((zk - z_true) ** 2)
        return loss


def _consistency_weights(r: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """``W[i, j] = sum_{k > max(i, j)} 1 / (2k)``: the block sum of Azencot et al. in one go."""
    inv = 1.0 / (2.0 * torch.arange(1, r + 1, dtype=torch.float64))
    tail = torch.flip(torch.cumsum(torch.flip(inv, [0]), 0), [0])  # tail[m] = sum_{k>=m+1}
    idx = torch.arange(r)
    return tail[torch.maximum(idx[:, None], idx[None, :])].to(device=device, dtype=dtype)


def consistency_penalty(k: Tensor, d: Tensor) -> Tensor:
    """``sum_{k=1}^{r} (|(D K)_{:k,:k} - I_k|_F^2 + |(K D)_{:k,:k} - I_k|_F^2) / (2k)``
    (Azencot et al. 2020, Eq. 8)."""
    r = k.shape[0]
    eye = torch.eye(r, device=k.device, dtype=k.dtype)
    w = _consistency_weights(r, k.device, k.dtype)
    return torch.sum(w * (d @ k - eye) ** 2) + torch.sum(w * (k @ d - eye) ** 2)


class ConsistentAutoencoder(_KoopmanAutoencoder):
    __doc__ = f"""Consistent Koopman autoencoder (Azencot et al. 2020).

    A forward operator ``K`` and a backward operator ``D`` are learned together; the loss
    adds backward prediction ``dec(D^k enc(x_S)) ~ x_{{S-k}}`` and the consistency penalty
    on the leading ``k x k`` blocks of ``DK - I`` and ``KD - I`` (module docstring).
    Forecasts and eigenvalues use ``K``.

    Parameters
    ----------{_COMMON_DOC}
    reconstruction_weight : float, default 1.0
    prediction_weight : float, default 1.0
    backward_weight : float, default 0.1
    consistency_weight : float, default 0.01
        Loss weights; the backward and consistency defaults follow the reference
        implementation of Azencot et al.

    Attributes
    ----------
    K_, D_ : ndarray (r, r)
        Forward and backward latent operators.
    encoder_, decoder_, history_, best_epoch_, n_features_, state_shape_, lag_
        As :class:`DynamicAutoencoder`.
    """

    _desc = "ConsistentAE"
    _backward = True

    def __init__(
        self,
        encoder: nn.Module | None = None,
        decoder: nn.Module | None = None,
        *,
        r: int = 4,
        n_steps: int = 5,
        lag: int | None = None,
        reconstruction_weight: float = 1.0,
        prediction_weight: float = 1.0,
        backward_weight: float = 0.1,
        consistency_weight: float = 0.01,
        lr: float = 1e-3,
        batch_size: int = 256,
        epochs: int = 100,
        val_fraction: float = 0.1,
        optimizer: str | type[torch.optim.Optimizer] = "adam",
        optimizer_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
        init: str = "seed",
        device: str | torch.device | None = None,
        progress: bool = True,
    ) -> None:
        self._init_common(**{k: v for k, v in locals().items() if k not in ("self", "__class__")})

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **_KoopmanAutoencoder._parameter_constraints,
        **dict.fromkeys(_CONSISTENT_WEIGHTS, real(0.0)),
    }

    def _weights(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in _CONSISTENT_WEIGHTS}

    def _loss(self, x0: Tensor, ys: Tensor) -> Tensor:
        s = ys.shape[1]
        z0 = self.encoder_(x0)
        zk = self._rollout(self.latent_, z0, s)
        loss = self.reconstruction_weight * torch.mean((self._decode(z0, x0) - x0) ** 2)
        loss = loss + self.prediction_weight * torch.mean((self._decode(zk, ys) - ys) ** 2)
        if self.backward_weight > 0:
            window = torch.cat([x0[:, None], ys], dim=1)  # (B, S + 1, *state)
            targets = torch.flip(window[:, :s], [1])  # x_{S-1}, ..., x_0
            zb = self._rollout(self.backward_latent_, self.encoder_(ys[:, -1]), s)
            loss = loss + self.backward_weight * torch.mean(
                (self._decode(zb, targets) - targets) ** 2
            )
        if self.consistency_weight > 0:
            loss = loss + self.consistency_weight * consistency_penalty(
                self.latent_.weight, self.backward_latent_.weight
            )
        return loss


# ----------------------------------------------------------------------------- autoencoders
_AE_PARAMS = (
    "r",
    "lag",
    "n_steps",
    "lr",
    "batch_size",
    "epochs",
    "val_fraction",
    "optimizer_kwargs",
    "seed",
    "init",
    "progress",
)


def dump_autoencoder(model: Any, tensors: dict[str, Tensor]) -> dict:
    """The saved form of a fitted Koopman autoencoder (for :func:`dpnets.io.save`):
    parameters, module descriptions, fitted state; weights and matrices go to ``tensors``."""
    from dpnets.exceptions import check_is_fitted

    check_is_fitted(model, "operator_")
    params = {k: getattr(model, k) for k in _AE_PARAMS}
    params.update(model._weights())
    params["optimizer"] = model.optimizer if isinstance(model.optimizer, str) else "adam"
    for name in ("encoder", "decoder"):
        for k, v in getattr(model, name + "_").state_dict().items():
            tensors[f"{name}.{k}"] = v.detach().cpu()
    tensors["K_"] = torch.from_numpy(model.K_)
    if model.backward_latent_ is not None:
        tensors["D_"] = torch.from_numpy(model.D_)
    tensors["cx_"] = torch.from_numpy(model.cx_)
    return {
        "params": jsonable(params),
        "modules": {
            "encoder": describe(model.encoder_),
            "decoder": describe(model.decoder_),
            # the parameters left at None (the default MLPs) stay None after loading
            "defaults": [n for n in ("encoder", "decoder") if getattr(model, n) is None],
        },
        "fitted": {
            "history_": model.history_,
            "best_epoch_": model.best_epoch_,
            "state_shape_": list(model.state_shape_),
            "n_features_": int(model.n_features_),
            "n_samples_": int(model.n_samples_),
            "n_train_": getattr(model, "n_train_", None),
            "lag_": model.lag_,
        },
    }


def restore_autoencoder(cls: type) -> Any:
    """The inverse of :func:`dump_autoencoder` for the autoencoder class ``cls``."""

    def restore(cfg: dict, tensors: dict[str, Tensor], **kw: Any) -> Any:
        device = kw.get("device", "cpu")
        mods = {}
        for name in ("encoder", "decoder"):
            mods[name] = restore_module(
                cfg["modules"][name], kw.get(name), sub_state(tensors, name + "."), name
            ).to(device)
        defaults = cfg["modules"].get("defaults", [])
        model = cls(
            *(None if n in defaults else mods[n] for n in ("encoder", "decoder")),
            device=device,
            **cfg["params"],
        )
        f = cfg["fitted"]
        r = int(f["n_features_"])
        dtype = next(mods["encoder"].parameters()).dtype

        def latent(key: str) -> LatentLinear:
            m = LatentLinear(r).to(device=device, dtype=dtype)
            with torch.no_grad():
                m.weight.copy_(tensors[key].to(dtype))
            return m.eval()

        model.encoder_, model.decoder_ = mods["encoder"], mods["decoder"]
        model.features_, model.features_x_ = mods["encoder"], None
        model.latent_ = latent("K_")
        model.backward_latent_ = latent("D_") if "D_" in tensors else None
        model.K_ = tensors["K_"].numpy()
        if "D_" in tensors:
            model.D_ = tensors["D_"].numpy()
        model.history_ = f["history_"]
        model.best_epoch_ = f["best_epoch_"]
        model.state_shape_ = tuple(f["state_shape_"])
        model.n_features_ = r
        model.lag_ = f["lag_"]
        model.n_train_ = f.get("n_train_")  # absent from files written before it was kept
        model._set_latent_state(tensors["cx_"].numpy(), int(f["n_samples_"]))
        return model

    return restore
