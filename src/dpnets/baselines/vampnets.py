"""VAMPNets (Mardt et al. 2018) as the special case of DPNets without metric distortion."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import torch
from torch import nn

from dpnets.params import Constraint, one_of
from dpnets.representation import DEFAULTS, DPNet

__all__ = ["VAMPNet"]

_VAMP_SCORES = ("vamp1", "vamp2")
#: DPNet's parameters that VAMPNet does not take
_NOT_VAMPNET = ("gamma", "consistency", "consistency_steps", "sde")


class VAMPNet(DPNet):
    """VAMPNets: maximise the VAMP score of two lobes ``psi``, ``psi'`` (Mardt et al. 2018).

    This is :class:`dpnets.DPNet` with ``objective="vamp2"`` (or ``"vamp1"``) and ``gamma=0``: the
    VAMP-2 score is the projection score ``P^0`` of Eq. (7) without the metric distortion
    penalty (paper Sec. 3; centred features with the constant added, the ``+1`` convention of
    :func:`dpnets.scores.vamp_score`). As in Mardt et al., the evolved states go through a
    separate *lagged* lobe ``psi'``.

    Parameters
    ----------
    encoder : torch.nn.Module, optional
        The instantaneous lobe ``psi`` (``None``: the default MLP of :class:`dpnets.DPNet`,
        sized to the data, with ``r`` outputs).
    lagged_encoder : torch.nn.Module, optional
        The time-lagged lobe ``psi'``. ``None`` (default) trains a separate lobe initialised as
        a deep copy of the initial ``psi`` (same initial weights, trained independently). To
        share the weights of the two lobes, use ``DPNet(encoder, objective="vamp2", gamma=0)``.
    objective : {"vamp2", "vamp1"}, default "vamp2"
    r, lag, lr, batch_size, epochs, val_fraction, standardize
        As :class:`dpnets.DPNet` (``lr``, ``batch_size``, ``epochs`` with its defaults).
    optimizer, optimizer_kwargs, seed, init, device, progress, distributed, autocast, compile
        As :class:`dpnets.DPNet`.
    constant : bool, default True
        The VAMP scores hold the constant function implicitly (centred covariances, ``+1``),
        so this only matters for the record: ``TransferOperator(vampnet)`` adds the constant
        to the centred VAMP features either way (``constant="auto"``), which is what gives
        correct timescales. VAMP scores invert the batch covariances: prefer large
        batches (``batch_size >> r``).

    Attributes
    ----------
    encoder_, lagged_encoder_ : nn.Module
        The trained lobes (``lagged_encoder_`` is never None).
    history_, best_epoch_, n_features_, state_shape_, lag_
        As :class:`dpnets.DPNet`.

    Examples
    --------
    >>> import numpy as np
    >>> from dpnets import TransferOperator
    >>> from dpnets.baselines import VAMPNet
    >>> from dpnets.nn import MLP
    >>> trajectory = np.sin(0.3 * np.arange(400))[:, None]
    >>> net = VAMPNet(MLP(1, (16,), 2), lag=5, epochs=2, seed=0, progress=False)
    >>> net.fit(trajectory).transform(trajectory).shape
    (400, 2)
    >>> TransferOperator(net).fit(trajectory).lag_
    5
    """

    def __init__(
        self,
        encoder: nn.Module | None = None,
        *,
        r: int = 4,
        lag: int | None = None,
        lagged_encoder: nn.Module | None = None,
        objective: str = "vamp2",
        lr: float = DEFAULTS["lr"],
        batch_size: int = DEFAULTS["batch_size"],
        epochs: int = DEFAULTS["epochs"],
        val_fraction: float = 0.1,
        standardize: str | bool = "auto",
        constant: bool = True,
        optimizer: str | type[torch.optim.Optimizer] = "adam",
        optimizer_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
        init: str = "seed",
        device: str | torch.device | None = None,
        progress: bool = True,
        distributed: str | bool = "auto",
        autocast: str | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__(
            encoder,
            r=r,
            lag=lag,
            lagged_encoder=lagged_encoder,
            objective=objective,
            gamma=0.0,
            lr=lr,
            batch_size=batch_size,
            epochs=epochs,
            val_fraction=val_fraction,
            standardize=standardize,
            constant=constant,
            optimizer=optimizer,
            optimizer_kwargs=optimizer_kwargs,
            seed=seed,
            init=init,
            device=device,
            progress=progress,
            distributed=distributed,
            autocast=autocast,
            compile=compile,
        )

    #: DPNet's table for VAMPNet's parameters (no ``gamma``, consistency penalty or SDE;
    #: the VAMP objectives only), checked by ``fit`` and by :func:`dpnets.load`
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **{k: c for k, c in DPNet._parameter_constraints.items() if k not in _NOT_VAMPNET},
        "objective": one_of(*_VAMP_SCORES),
    }

    def _check_params(self) -> None:
        super()._check_params()
        if self.gamma != 0:
            raise ValueError("VAMPNet has no metric distortion penalty (gamma=0); use DPNet")

    _shares_lobes = False

    def _lagged_template(self, enc: nn.Module) -> nn.Module:
        """A separate lobe with the same initial weights as ``psi`` (Mardt et al.) unless one
        is given (a copy: the parameter ``lagged_encoder`` is never changed)."""
        if self.lagged_encoder is not None:
            return super()._lagged_template(enc)
        return copy.deepcopy(enc)

    def fit(self, X: Any, y: Any = None, **kwargs: Any) -> VAMPNet:
        """Train both lobes on ``X`` (same forms and options as :meth:`dpnets.DPNet.fit`)."""
        super().fit(X, y, **kwargs)
        return self
