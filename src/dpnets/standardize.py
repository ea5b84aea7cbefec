"""The input standardisation of the neural estimators (``standardize=``), in one place.

It is decided, computed and applied here, and handed around as one fitted object:
:func:`fit_scaling` decides the scaling of a fit (:func:`scaling_mode`: ``"auto"`` standardises
vector states fed to an encoder whose first operation is affine, :func:`affine_first`),
computes it in float64 from one pass over the training states (:func:`state_moments`),
warns where inputs left as given have an extreme scale, and returns a :class:`Scaling`:
its ``shift`` and ``scale`` (None when the inputs are used as given), applied to numpy
states by :meth:`Scaling.apply` (:func:`standardise`; also the transform of the training
batches), and put in front of an encoder as an :class:`InputScaler` module by
:meth:`Scaling.compose` (derivatives with respect to the raw states: generator learning,
the exported collective variables). A fitted :class:`dpnets.DPNet` stores it as
``input_shift_`` / ``input_scale_`` (:meth:`Scaling.of`), the keys of its saved file.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "MODES",
    "Scaling",
    "InputScaler",
    "fit_scaling",
    "scaling_mode",
    "affine_first",
    "state_moments",
    "standardise",
]

#: the values of ``standardize`` (besides True, "coordinate", and False, "none")
MODES = ("auto", "coordinate", "global", "none")


def affine_first(module: nn.Module) -> bool:
    """Whether a module's first operation on its input is affine (standardising the input
    then only reparametrises it): its own ``standardize_inputs`` declaration, else a
    ``Linear`` layer or a ``Sequential`` whose first child is affine."""
    declared = getattr(module, "standardize_inputs", None)
    if declared is not None:
        return bool(declared)
    if isinstance(module, nn.Linear):
        return True
    if isinstance(module, nn.Sequential) and len(module) > 0:
        return affine_first(module[0])
    return False


def scaling_mode(standardize: str | bool, encoder: nn.Module, state_ndim: int) -> str:
    """The scaling of a fit: ``"coordinate"``, ``"global"`` or ``"none"``.

    ``"auto"`` is "coordinate" for vector states and an encoder whose first operation is
    affine, else "none". Fields (states with several axes) are left as given even when
    the encoder flattens them into a ``Linear`` layer (the default MLP): z-scoring each
    pixel lifts near-constant ones (the far field of a cylinder flow) to the weight of the
    active ones (the measurements: ``docs/concepts.md``, input standardisation).
    """
    if standardize is True:
        return "coordinate"
    if standardize is False:
        return "none"
    if standardize == "auto":
        return "coordinate" if state_ndim == 1 and affine_first(encoder) else "none"
    return str(standardize)


@dataclass(frozen=True)
class Scaling:
    """A fitted input standardisation ``x -> (x - shift) / scale`` (float64 ``shift`` and
    ``scale`` broadcast over the batch axis; both None: the inputs as given)."""

    shift: np.ndarray | None = None
    scale: np.ndarray | None = None

    @classmethod
    def of(cls, model: Any) -> Scaling:
        """The scaling a fitted model stores (``input_shift_``, ``input_scale_``)."""
        return cls(getattr(model, "input_shift_", None), getattr(model, "input_scale_", None))

    def apply(self, x: Any) -> Any:
        """Standardised states (float64), or ``x`` itself without standardisation."""
        return x if self.shift is None else standardise(x, self.shift, self.scale)

    def compose(self, encoder: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
        """``encoder`` on raw states: an :class:`InputScaler` in ``dtype`` on ``device``
        followed by ``encoder`` (``encoder`` itself without standardisation)."""
        if self.shift is None:
            return encoder
        scaler = InputScaler(
            torch.as_tensor(self.shift, dtype=dtype), torch.as_tensor(self.scale, dtype=dtype)
        )
        return nn.Sequential(scaler.to(device), encoder)


def fit_scaling(
    standardize: str | bool,
    encoder: nn.Module,
    states: Callable[[], Iterable[np.ndarray]],
    state_shape: tuple[int, ...],
) -> Scaling:
    """The input standardisation of one fit, from ``states()`` (the training states in
    chunks, e.g. :meth:`dpnets.training_source.TrainingSource.states`): ``standardize`` as
    the estimators take it, decided by :func:`scaling_mode` for ``encoder``; float64 mean
    and spread over the states (``"coordinate"``: per coordinate; ``"global"``: one for
    all; a zero or non-finite spread is taken as 1). Inputs left as given under ``"auto"``
    are checked for an extreme scale (a warning naming the fix)."""
    mode = scaling_mode(standardize, encoder, len(state_shape))
    if mode == "none":
        if standardize == "auto":
            field = len(state_shape) > 1 and affine_first(encoder)
            _warn_extreme_scale(next(iter(states())), field)
        return Scaling()
    axes = tuple(range(len(state_shape) + 1)) if mode == "global" else (0,)
    shift, std = state_moments(states(), axes)
    return Scaling(shift, np.where(np.isfinite(std) & (std > 0), std, 1.0))


def state_moments(
    parts: Iterable[np.ndarray], axes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 mean and standard deviation over ``axes`` in one pass over chunks of states.

    Sums are taken around the first chunk's mean, so a large offset (``x + 1e6``) does not
    cancel the variance away, and in units of the first chunk's spread, so that states of
    tiny or huge scale (``1e-300 x``, ``1e300 x``) neither underflow nor overflow; nothing
    but the current chunk is held in memory.
    """
    total, pilot, unit, s1, s2 = 0, None, None, 0.0, 0.0
    for part in parts:
        part = np.asarray(part, dtype=np.float64)
        if pilot is None:
            pilot = part.mean(axis=axes, keepdims=True)
            if not np.all(np.isfinite(pilot)):  # |x| near the float64 limit: mean of x / 2
                pilot = (part / 2).mean(axis=axes, keepdims=True) * 2
            unit = np.abs(part - pilot).max(axis=axes, keepdims=True)
            unit = np.where(np.isfinite(unit) & (unit > 0), unit, 1.0)
        d = (part - pilot) / unit
        s1 = s1 + d.sum(axis=axes, keepdims=True)
        s2 = s2 + (d * d).sum(axis=axes, keepdims=True)
        total += part.size // pilot.size
    mean = s1 / total
    std = np.sqrt(np.maximum(s2 / total - mean * mean, 0.0)) * unit
    return (pilot + mean * unit)[0], std[0]


def standardise(x: Any, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The input standardisation ``(x - shift) / scale``, in float64."""
    return (np.asarray(x, dtype=np.float64) - shift) / scale


class InputScaler(nn.Module):
    """``x -> (x - shift) / scale`` with buffers broadcast over the batch axis.

    The input standardisation of a fitted :class:`dpnets.DPNet` as a module, so that
    derivatives (generator learning) are taken with respect to the raw states.
    """

    def __init__(self, shift: Tensor, scale: Tensor) -> None:
        super().__init__()
        shift, scale = torch.as_tensor(shift), torch.as_tensor(scale)
        if not bool(torch.isfinite(shift).all()) or not bool(
            (torch.isfinite(scale) & (scale > 0)).all()
        ):
            raise ValueError(
                f"the input standardisation (input_shift_, input_scale_) is not representable "
                f"in {shift.dtype}: the scale underflows to 0 or the shift/scale overflow "
                f"(scales from {float(scale.min()):.3g} to {float(scale.max()):.3g}); rescale "
                "the states, or use a float64 encoder (encoder.double())"
            )
        self.register_buffer("shift", shift)
        self.register_buffer("scale", scale)

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.shift) / self.scale


def _warn_extreme_scale(
    states: np.ndarray, field: bool = False, low: float = 1e-3, high: float = 1e3
) -> None:
    """Warn when inputs left as given under ``standardize="auto"`` have an extreme scale,
    saying why they were left (the reason true for the encoder at hand) and the fix.

    ``field``: states with several axes and an encoder whose first operation is affine
    (the default MLP flattens them into a ``Linear`` layer); they are judged by their
    overall scale, since near-constant pixels are normal in a field, and the fix is
    ``standardize="global"``. Otherwise (an encoder whose first operation is not affine)
    every coordinate is judged and the fix is ``"coordinate"`` or a declaration."""
    x = np.asarray(states, dtype=np.float64).reshape(len(states), -1)
    if x.shape[0] < 2:
        return
    if field:
        spread, sd = np.abs(x).max(), x.std()
        if spread <= high and not (0 < sd < low):
            return
        warnings.warn(
            f"the inputs are left as given (standardize='auto': states of shape "
            f"{tuple(np.shape(states)[1:])} are fields, and z-scoring each of their "
            f"{x.shape[1]} coordinates would weigh near-constant pixels like the active "
            f"ones), and their overall scale is extreme (|x| up to {spread:.3g}, standard "
            f"deviation {sd:.3g}); pass standardize='global' (one shift and scale for the "
            "whole field)",
            RuntimeWarning,
            stacklevel=6,
        )
        return
    spread = np.abs(x).max(axis=0)
    sd = x.std(axis=0)
    if np.any(spread > high) or np.any((sd > 0) & (sd < low)):
        warnings.warn(
            f"the inputs are left as given (standardize='auto': the encoder's first "
            f"operation is not affine, so standardising would change its function), and "
            f"their coordinates have extreme scales (|x| up to {spread.max():.3g}, standard "
            f"deviations down to {sd[sd > 0].min() if np.any(sd > 0) else 0.0:.3g}); if the "
            "encoder expects standardised inputs pass standardize='coordinate', or declare "
            "standardize_inputs = True on it",
            RuntimeWarning,
            stacklevel=6,
        )
