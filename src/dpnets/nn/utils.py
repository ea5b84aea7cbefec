"""Running a torch module on numpy states: the one place for dtype, device and chunking."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["module_dtype", "module_device", "encode", "reset_parameters"]


def reset_parameters(module: nn.Module) -> int:
    """Re-draw a module's weights from torch's RNG, in place: ``reset_parameters()`` of every
    submodule that has one (``Linear``, convolutions, norms, torch-geometric layers), in
    the order of ``module.modules()``. Returns how many submodules were reset.

    Parameters held directly by a module without ``reset_parameters`` keep their values.
    """
    count = 0
    for m in module.modules():
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            reset()
            count += 1
    return count


def module_dtype(module: nn.Module) -> torch.dtype:
    """The dtype of a module's first floating-point parameter (else torch's default)."""
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.get_default_dtype()


def module_device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter (CPU for a module without parameters)."""
    p = next(module.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def encode(
    module: Callable[[Tensor], Tensor],
    x: np.ndarray,
    *,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
    batch_size: int = 8192,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
    name: str | None = None,
) -> Tensor:
    """``module(x)`` in chunks of ``batch_size`` states, without gradients, as a CPU tensor.

    Each chunk goes through ``transform`` (e.g. the input standardisation, in float64) and
    is cast to the module's dtype on its device; integer and bool states are cast too, so a
    module taking integer inputs must be given ``dtype`` explicitly. A module is run in eval
    mode and left in the mode it was in. With ``name`` (the argument the states came in),
    floating-point features that are NaN or inf raise a ``ValueError`` naming it.
    """
    is_module = isinstance(module, nn.Module)
    if device is None:
        device = module_device(module) if is_module else torch.device("cpu")
    if dtype is None:
        dtype = module_dtype(module) if is_module else torch.get_default_dtype()
    was_training = is_module and module.training
    if is_module:
        module.eval()
    out = []
    try:
        with torch.no_grad():
            for s in range(0, x.shape[0], int(batch_size)):
                part = x[s : s + int(batch_size)]
                if transform is not None:
                    part = transform(part)
                out.append(module(torch.as_tensor(part).to(device=device, dtype=dtype)).cpu())
    finally:
        if was_training:
            module.train()
    if not out:
        raise ValueError("no states to encode (an empty array)")
    out = torch.cat(out)
    if name is not None and out.is_floating_point() and not bool(torch.isfinite(out).all()):
        bad = int((~torch.isfinite(out)).any(dim=1).sum()) if out.ndim == 2 else -1
        head = x[: min(len(x), 10**5)]
        big = float(np.abs(head if transform is None else transform(np.asarray(head))).max())
        raise ValueError(
            f"{name}: the features are NaN or inf on {bad} of {len(x)} states (valid-looking "
            f"input gives no finite features): the states are far outside the range the "
            f"model was trained on (standardised |x| up to {big:.3g}) or overflow the "
            f"encoder's dtype {dtype}"
        )
    return out
