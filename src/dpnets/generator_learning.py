"""Generator learning: the continuous-time objectives of :class:`dpnets.DPNet` (paper Sec. 3
"Generator learning", Thm. 2, Eqs. 12-14).

``DPNet(objective="generator")`` maximises ``P_d^gamma`` from the Itô derivatives of the
features (Eqs. 12-13); ``objective="dirichlet"`` (reversible SDEs) uses first derivatives only.
Both train on samples of the invariant distribution instead of lagged pairs. This module holds
what those modes add to a DPNet fit, as functions of explicit arguments (the SDE, the feature
module, the objective's settings): the training samples, the derivatives and loss of a batch,
and the score of a fitted feature map. DPNet's own training scaffold (the standardisation, the
feature count, the training loop) runs them; the least-squares generator on the learned
features is :class:`dpnets.generator.Generator` (App. E), the SDE maths is in
:mod:`dpnets.ito` and the scores in :mod:`dpnets.scores`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from dpnets.ito import SDE, check_samples, derivatives_in_chunks, warn_if_piecewise_linear
from dpnets.nn.utils import module_device, module_dtype
from dpnets.scores import GeneratorLoss
from dpnets.states import check_state_shape
from dpnets.training_source import TrainingSource

__all__ = [
    "generator_form",
    "generator_samples",
    "generator_objective",
    "generator_objective_score",
]


def generator_form(objective: str) -> str:
    """The derivative form of a generator objective: ``"ito"`` for ``"generator"`` (Eq. 13),
    ``"dirichlet"`` for ``"dirichlet"`` (first derivatives through the diffusion)."""
    return "ito" if objective == "generator" else "dirichlet"


def generator_samples(
    data: Any,
    sde: Any,
    objective: str,
    lagged_encoder: nn.Module | None,
    weights: Callable[[list[int]], Any] | None = None,
) -> TrainingSource:
    """The samples of pi of a generator-objective fit as a training source (pairs
    ``(x_k, x_k)``: the generator objectives need no lag), after checking the settings:
    ``sde`` an :class:`dpnets.ito.SDE` (reversible for ``"dirichlet"``), one feature map.
    ``weights(lengths)``: the samples' importance weights given the lengths of the sample
    arrays (samples of a biased law, :func:`dpnets.biased.importance_weights`), or None."""
    if not isinstance(sde, SDE):
        raise ValueError(
            f"objective={objective!r} needs sde=dpnets.ito.SDE(...) (e.g. "
            "dpnets.ito.overdamped_langevin)"
        )
    if lagged_encoder is not None:
        raise ValueError("generator scores use one feature map; lagged_encoder must be None")
    if objective == "dirichlet" and not sde.reversible:
        raise ValueError("objective='dirichlet' needs a reversible SDE; use objective='generator'")
    samples = check_samples(data)
    if weights is None:
        return TrainingSource.of_samples(samples)
    lengths = [len(t) for t in data] if isinstance(data, list) else [samples.shape[0]]
    return TrainingSource.of_samples(samples, weights(lengths))


def generator_objective(
    fmap: nn.Module,
    sde: SDE,
    objective: str,
    gamma: float,
    constant: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[Callable[[Sequence[Tensor]], tuple[Tensor, ...]], GeneratorLoss]:
    """The training objective of a generator mode on the feature module ``fmap`` (on raw
    states: derivatives are taken with respect to them): ``(outputs, loss)``, where
    ``outputs(batch)`` moves a batch of samples (and their importance weights, third, if
    any) to ``device``/``dtype`` and returns what ``loss`` takes: the features and their
    Itô derivatives (or diffusion Jacobians), then the weights; ``loss(*outputs(batch))``
    is minus ``P_d^gamma`` (Thm. 2, Eq. 14)."""
    if objective == "generator":
        warn_if_piecewise_linear(fmap)
    form = generator_form(objective)
    loss_fn = GeneratorLoss(float(gamma), form, constant=bool(constant))

    def outputs(batch: Sequence[Tensor]) -> tuple[Tensor, ...]:
        xb = batch[0].to(device, non_blocking=True).to(dtype)
        if form == "ito":
            return (*sde.ito_derivative(fmap, xb), *batch[2:])
        return (*sde.diffusion_jacobian(fmap, xb), *batch[2:])

    return outputs, loss_fn


def generator_objective_score(
    fmap: nn.Module,
    data: Any,
    state_shape: tuple[int, ...],
    name: str,
    sde: Any,
    objective: str,
    gamma: float,
    constant: bool,
) -> float:
    """The generator score ``P_d^gamma`` (higher is better) of the fitted feature module
    ``fmap`` on the samples ``data`` (checked: ``(n, *state_shape)``, the fitted shape; ``name``
    the estimator's, for the error), in chunks without gradients on ``fmap``'s device and in
    its dtype; ``fmap``'s training mode is restored."""
    device, dtype = module_device(fmap), module_dtype(fmap)
    if not isinstance(sde, SDE):
        raise ValueError(f"objective={objective!r} needs the model's sde (DPNet(..., sde=...))")
    samples = check_samples(data)
    check_state_shape(samples.shape[1:], state_shape, name)
    was_training = fmap.training
    fmap.eval()  # (evaluation changes nothing on the estimator: the mode is restored)
    form = generator_form(objective)
    try:
        with torch.no_grad():
            parts = list(
                derivatives_in_chunks(
                    fmap, samples, form, sde, chunk=8192, device=device, dtype=dtype
                )
            )
            loss = GeneratorLoss(gamma, form, constant=bool(constant))
            return -float(loss(*(torch.cat(c) for c in zip(*parts, strict=True))))
    finally:
        fmap.train(was_training)
