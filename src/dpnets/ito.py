r"""Itô derivatives of torch feature maps, for learning generators of SDEs (paper Sec. 3).

For an Itô diffusion (paper Eq. 11)

.. math::

    dX_t = A(X_t)\,dt + B(X_t)\,dW_t,\qquad A: \mathbb{R}^d \to \mathbb{R}^d,\;
    B: \mathbb{R}^d \to \mathbb{R}^{d \times m},

the generator acts on a smooth feature ``psi_i`` as (Eqs. 12-13)

.. math::

    d\psi_i(x) = (L\psi_i)(x) = \nabla\psi_i(x)^\top A(x)
    + \tfrac12 \operatorname{tr}\big(B(x)^\top \nabla^2\psi_i(x)\, B(x)\big)
    = D\psi_i(x)[A(x)] + \tfrac12 \sum_{k=1}^m D^2\psi_i(x)[b_k(x), b_k(x)],

with ``b_k`` the columns of ``B``. :func:`ito_derivative` evaluates the right-hand side with
forward-mode automatic differentiation (:func:`torch.func.jvp`): one Jacobian-vector product
along the drift and one jvp-of-jvp (a second directional derivative) per noise column, each
giving all ``r`` features at once for the whole batch. No Hessian is ever formed, so the cost
is ``O((1 + m) * Cost(psi))`` whatever the state dimension ``d``; for scalar states (``d = 1``)
a single jvp-of-jvp gives ``psi``, ``psi'`` and ``psi''`` together. The results are
differentiable with respect to the parameters of ``psi`` (for training, :mod:`dpnets.scores`
``generator_score``).

For a *reversible* diffusion the generator is self-adjoint on :math:`L^2(\pi)` and minus its
quadratic form is the Dirichlet form

.. math::

    -\mathbb{E}_\pi[\psi(X)\,(L\psi)(X)^\top]
    = \tfrac12\,\mathbb{E}_\pi\big[\nabla\psi(X)^\top B(X) B(X)^\top \nabla\psi(X)\big],

which needs first derivatives only (:func:`diffusion_jacobian`); for overdamped Langevin
dynamics it is ``(kT / friction) E[grad psi grad psi^T]``.

Feature maps must be twice differentiable for the Itô form (smooth activations such as CELU,
SiLU, tanh or softplus): a ReLU network has a zero second derivative almost everywhere, so its
diffusion term would silently vanish. The feature map must act sample-wise (no batch
normalisation across the batch in training mode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from dpnets.states import chunks

__all__ = [
    "SDE",
    "ito_derivative",
    "diffusion_jacobian",
    "overdamped_langevin",
    "diffusion_columns",
    "check_samples",
    "warn_if_piecewise_linear",
]

FeatureFn = Callable[[Tensor], Tensor]
#: A diffusion: a scalar (``B = s I``), a constant ``(d,)``/``(d, m)`` tensor, or a callable
#: ``x (n, d) -> (n, d)`` (diagonal ``B``) or ``(n, d, m)`` (full ``B``).
Diffusion = float | Tensor | Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class SDE:
    r"""An Itô SDE ``dX = A(X) dt + B(X) dW`` (paper Eq. 11) given by torch callables.

    Parameters
    ----------
    drift : callable
        ``A``: states ``(n, *state_shape)`` to a tensor of the same shape.
    diffusion : float, tensor or callable
        ``B``. A scalar ``s`` means ``B = s I``; a tensor of shape ``(d,)`` a constant diagonal
        and ``(d, m)`` a constant matrix (``d`` the flattened state dimension); a callable
        maps states ``(n, *state_shape)`` to ``(n, d)`` (diagonal ``B``) or ``(n, d, m)``.
    reversible : bool, default False
        Whether the process is reversible with respect to its invariant law (its generator is
        self-adjoint), which makes the Dirichlet form available (:func:`diffusion_jacobian`,
        ``dpnets.scores.dirichlet_score``).
    name : str, optional
        A label (e.g. ``"overdamped Langevin"``).
    """

    drift: Callable[[Tensor], Tensor]
    diffusion: Diffusion
    reversible: bool = False
    name: str = "SDE"

    def ito_derivative(self, features: FeatureFn, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(psi(x), d psi(x))``; see :func:`ito_derivative`."""
        return ito_derivative(features, x, self.drift, self.diffusion)

    def diffusion_jacobian(self, features: FeatureFn, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(psi(x), grad psi(x)^T B(x))``; see :func:`diffusion_jacobian`."""
        return diffusion_jacobian(features, x, self.diffusion)


def overdamped_langevin(
    potential: Callable[[Tensor], Tensor] | None = None,
    *,
    grad_potential: Callable[[Tensor], Tensor] | None = None,
    kT: float = 1.0,  # noqa: N803 - physics notation
    friction: float = 1.0,
) -> SDE:
    r"""Overdamped Langevin dynamics ``dX = -grad V(X) / friction dt + sqrt(2 kT / friction) dW``.

    The invariant law is the Boltzmann distribution ``pi ~ exp(-V / kT)``, with respect to
    which the process is reversible; the Dirichlet form is
    ``(kT / friction) E[grad psi grad psi^T]``.

    Parameters
    ----------
    potential : callable, optional
        ``V``: states ``(n, *state_shape)`` to energies ``(n,)`` (or ``(n, 1)``); its gradient
        is taken with autograd. Give this or ``grad_potential``.
    grad_potential : callable, optional
        ``grad V``: states to a tensor of the same shape (faster than autograd).
    kT : float, default 1.0
        Thermal energy ``k_B T > 0``.
    friction : float, default 1.0
        Friction coefficient ``gamma > 0`` (time scales are proportional to it).

    Returns
    -------
    SDE
        With ``reversible=True`` and a constant scalar diffusion ``sqrt(2 kT / friction)``.
    """
    if (potential is None) == (grad_potential is None):
        raise ValueError("give exactly one of potential or grad_potential")
    if not (float(kT) > 0 and float(friction) > 0):
        raise ValueError(f"kT and friction must be > 0, got kT={kT}, friction={friction}")
    kT, friction = float(kT), float(friction)
    if grad_potential is None:
        assert potential is not None

        def grad_potential(x: Tensor) -> Tensor:
            with torch.enable_grad():
                xr = x.detach().requires_grad_(True)
                (g,) = torch.autograd.grad(potential(xr).sum(), xr)
            return g

    gradv = grad_potential

    def drift(x: Tensor) -> Tensor:
        return -gradv(x) / friction

    return SDE(
        drift=drift,
        diffusion=(2.0 * kT / friction) ** 0.5,
        reversible=True,
        name=f"overdamped Langevin (kT={kT:g}, friction={friction:g})",
    )


# ----------------------------------------------------------------------------- internals


def diffusion_columns(diffusion: Diffusion, x: Tensor) -> Tensor:
    """The diffusion matrix ``B(x)`` as a tensor ``(n, d, m)`` (``d`` = flattened state size).

    A scalar or a diagonal is expanded to a (diagonal) ``(n, d, d)`` tensor; this is for
    inspection and tests, :func:`ito_derivative` never materialises a diagonal ``B``.
    """
    n = x.shape[0]
    d = x[0].numel()
    kind, val = _diffusion_spec(diffusion, x)
    if kind == "scalar":
        return val * torch.eye(d, dtype=x.dtype, device=x.device).expand(n, d, d)
    if kind == "diag":
        return torch.diag_embed(val)
    return val


def _diffusion_spec(diffusion: Diffusion, x: Tensor) -> tuple[str, Any]:
    """Classify ``B``: ``("scalar", s)``, ``("diag", (n, d))`` or ``("full", (n, d, m))``."""
    n = x.shape[0]
    d = x[0].numel()
    if isinstance(diffusion, (int, float)) and not isinstance(diffusion, bool):
        return "scalar", float(diffusion)
    if callable(diffusion) and not isinstance(diffusion, Tensor):
        b = diffusion(x)
        if isinstance(b, (int, float)):
            return "scalar", float(b)
        b = torch.as_tensor(b, dtype=x.dtype, device=x.device)
        if b.ndim == 0:
            return "scalar", float(b)
        if b.ndim == 1 and d == 1 and b.shape[0] == n:  # scalar states: (n,) is (n, 1)
            return "diag", b[:, None]
        if b.ndim == 2 and b.shape == (n, d):
            return "diag", b
        if b.ndim == 3 and b.shape[:2] == (n, d):
            return "full", b
        raise ValueError(
            f"diffusion(x) must have shape (n, d) = ({n}, {d}) (diagonal B) or (n, d, m); "
            f"got {tuple(b.shape)}"
        )
    b = torch.as_tensor(diffusion, dtype=x.dtype, device=x.device)
    if b.ndim == 0:
        return "scalar", float(b)
    if b.ndim == 1 and b.shape[0] == d:
        return "diag", b.expand(n, d)
    if b.ndim == 2 and b.shape[0] == d:
        return "full", b.expand(n, d, b.shape[1])
    raise ValueError(f"a constant diffusion must have shape (d,) or (d, m) with d={d}")


def _fwd_jvp(fn: FeatureFn, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    return torch.func.jvp(fn, (x,), (v,))


def _fwd_jvp2(fn: FeatureFn, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    (f, d1), (_, d2) = torch.func.jvp(lambda y: _fwd_jvp(fn, y, v), (x,), (v,))
    return f, d1, d2


def _rev_jvp(fn: FeatureFn, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Reverse-mode fallback: ``J v`` by the double-vjp trick (two backward passes)."""
    with torch.enable_grad():
        xr = x if x.requires_grad else x.detach().requires_grad_(True)
        f = fn(xr)
        u = torch.zeros_like(f, requires_grad=True)
        (g,) = torch.autograd.grad(f, xr, grad_outputs=u, create_graph=True)
        (jv,) = torch.autograd.grad(g, u, grad_outputs=v, create_graph=True)
    return f, jv


def _rev_jvp2(fn: FeatureFn, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    with torch.enable_grad():
        xr = x.detach().requires_grad_(True)
        f, d1 = _rev_jvp(fn, xr, v)
        u = torch.zeros_like(d1, requires_grad=True)
        (g,) = torch.autograd.grad(d1, xr, grad_outputs=u, create_graph=True)
        (d2,) = torch.autograd.grad(g, u, grad_outputs=v, create_graph=True)
    return f, d1, d2


def _with_fallback(forward: Callable, reverse: Callable, fn: FeatureFn, x: Tensor, v: Tensor):
    """Forward-mode AD; if an operator lacks a forward-mode formula, retry with grad mode on
    (some decompositions differ under ``no_grad``), then fall back to reverse mode."""
    grad_on = torch.is_grad_enabled()
    try:
        return forward(fn, x, v)
    except (NotImplementedError, RuntimeError) as err:
        if "forward AD" not in str(err) and "forward-mode" not in str(err):
            raise
    if not grad_on:
        try:
            with torch.enable_grad():
                return tuple(t.detach() for t in forward(fn, x, v))
        except (NotImplementedError, RuntimeError):
            pass
    out = reverse(fn, x, v)
    return out if grad_on else tuple(t.detach() for t in out)


def _jvp(fn: FeatureFn, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """``(fn(x), D fn(x)[v])``: forward-mode AD (reverse-mode fallback)."""
    return _with_fallback(_fwd_jvp, _rev_jvp, fn, x, v)


def _jvp2(fn: FeatureFn, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(fn(x), D fn(x)[v], D^2 fn(x)[v, v])`` by a jvp of a jvp (``v`` held fixed)."""
    return _with_fallback(_fwd_jvp2, _rev_jvp2, fn, x, v)


def _check_features(psi: Tensor, n: int) -> None:
    if psi.ndim != 2 or psi.shape[0] != n:
        raise ValueError(f"the feature map must return shape (n, r) = ({n}, r); got {psi.shape}")


def _as_state_shape(v: Tensor, x: Tensor) -> Tensor:
    """A flattened direction ``(n, d)`` in the shape of ``x``."""
    return v.reshape(x.shape)


def ito_derivative(
    features: FeatureFn,
    x: Tensor,
    drift: Callable[[Tensor], Tensor] | SDE,
    diffusion: Diffusion | None = None,
) -> tuple[Tensor, Tensor]:
    r"""Features and their Itô derivatives, ``(psi(x), d psi(x))`` (paper Eqs. 12-13).

    ``d psi_i(x) = grad psi_i(x)^T A(x) + 1/2 tr(B(x)^T Hess psi_i(x) B(x))`` for all ``r``
    features and ``n`` states at once, by forward-mode AD: one jvp along the drift plus one
    jvp-of-jvp per noise column (a single jvp-of-jvp for scalar states), never forming a
    Hessian. Differentiable with respect to the parameters of ``features``.

    Parameters
    ----------
    features : callable
        ``psi``: a torch function (e.g. an ``nn.Module``) mapping states
        ``(n, *state_shape)`` to ``(n, r)``, twice differentiable and acting sample-wise.
    x : Tensor of shape (n, *state_shape)
        States (floating point; use float64 for estimation, float32 is fine for training).
    drift : callable or SDE
        ``A``: states to a tensor of the same shape; or an :class:`SDE` (then ``diffusion``
        must be omitted).
    diffusion : float, tensor or callable
        ``B``; see :class:`SDE`.

    Returns
    -------
    psi, dpsi : Tensor of shape (n, r)

    Examples
    --------
    Ornstein-Uhlenbeck ``dX = -X dt + sqrt(2) dW`` and ``psi(x) = x^2``:
    ``d psi = -2 x^2 + 2``.

    >>> import torch
    >>> x = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
    >>> _, d = ito_derivative(lambda y: y**2, x, lambda y: -y, 2**0.5)
    >>> [round(v, 12) + 0.0 for v in d.ravel().tolist()]
    [2.0, 0.0, -6.0]
    """
    if isinstance(drift, SDE):
        if diffusion is not None:
            raise ValueError("pass either an SDE or drift and diffusion, not both")
        drift, diffusion = drift.drift, drift.diffusion
    if diffusion is None:
        raise ValueError("diffusion is required (use 0.0 for an ordinary differential equation)")
    if not torch.is_floating_point(x):
        raise TypeError(f"states must be floating point, got {x.dtype}")
    n = x.shape[0]
    d = x[0].numel()
    with torch.no_grad():
        a = torch.as_tensor(drift(x), dtype=x.dtype, device=x.device)
    if a.numel() != x.numel():
        raise ValueError(f"drift(x) must have the shape of x {tuple(x.shape)}; got {a.shape}")
    a = a.reshape(n, d)
    with torch.no_grad():
        kind, b = _diffusion_spec(diffusion, x)
    if d == 1:
        # every direction is a multiple of e_1: one jvp-of-jvp gives psi, psi', psi''
        ones = torch.ones_like(x)
        psi, d1, d2 = _jvp2(features, x, ones)
        _check_features(psi, n)
        if kind == "scalar":
            b2 = torch.full((n, 1), b * b, dtype=x.dtype, device=x.device)
        elif kind == "diag":
            b2 = b * b
        else:
            b2 = (b * b).sum(-1)
        return psi, d1 * a + 0.5 * d2 * b2
    psi, dpsi = _jvp(features, x, _as_state_shape(a, x))
    _check_features(psi, n)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    if kind == "scalar":
        if b == 0.0:
            return psi, dpsi
        cols = [b * eye[k].expand(n, d) for k in range(d)]
    elif kind == "diag":
        cols = [b[:, k : k + 1] * eye[k] for k in range(d)]
    else:
        cols = [b[:, :, k] for k in range(b.shape[2])]
    for col in cols:
        _, _, d2 = _jvp2(features, x, _as_state_shape(col, x))
        dpsi = dpsi + 0.5 * d2
    return psi, dpsi


def diffusion_jacobian(
    features: FeatureFn, x: Tensor, diffusion: Diffusion | SDE
) -> tuple[Tensor, Tensor]:
    r"""Features and their derivatives along the noise columns, ``(psi(x), J(x))``.

    ``J[n, i, k] = grad psi_i(x_n)^T b_k(x_n)``, so that the Dirichlet form of a reversible
    diffusion is ``1/2 E[J J^T] = -E[psi (L psi)^T]`` (first derivatives only; see the module
    docstring and ``dpnets.scores.dirichlet_score``). One jvp per noise column (one in total
    for scalar states).

    Parameters
    ----------
    features : callable
        ``psi`` as in :func:`ito_derivative` (once differentiable suffices).
    x : Tensor of shape (n, *state_shape)
    diffusion : float, tensor, callable or SDE
        ``B``; see :class:`SDE`.

    Returns
    -------
    psi : Tensor (n, r)
    jac : Tensor (n, r, m)
    """
    if isinstance(diffusion, SDE):
        diffusion = diffusion.diffusion
    if not torch.is_floating_point(x):
        raise TypeError(f"states must be floating point, got {x.dtype}")
    n = x.shape[0]
    d = x[0].numel()
    with torch.no_grad():
        kind, b = _diffusion_spec(diffusion, x)
    if d == 1:
        psi, d1 = _jvp(features, x, torch.ones_like(x))
        _check_features(psi, n)
        if kind == "scalar":
            return psi, (d1 * b)[:, :, None]
        if kind == "diag":
            return psi, (d1 * b)[:, :, None]
        return psi, d1[:, :, None] * b[:, 0, None, :]
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    if kind == "scalar":
        cols = [b * eye[k].expand(n, d) for k in range(d)]
    elif kind == "diag":
        cols = [b[:, k : k + 1] * eye[k] for k in range(d)]
    else:
        cols = [b[:, :, k] for k in range(b.shape[2])]
    jac = []
    psi = None
    for col in cols:
        psi, dk = _jvp(features, x, _as_state_shape(col, x))
        jac.append(dk)
    assert psi is not None
    _check_features(psi, n)
    return psi, torch.stack(jac, dim=-1)


# ----------------------------------------------------------------------------- validation

#: Activations whose second derivative vanishes almost everywhere (piecewise linear).
_PIECEWISE_LINEAR = (
    torch.nn.ReLU,
    torch.nn.LeakyReLU,
    torch.nn.ReLU6,
    torch.nn.PReLU,
    torch.nn.RReLU,
    torch.nn.Hardtanh,
)


def derivatives_in_chunks(
    features: FeatureFn,
    x: Any,
    what: str,
    sde: SDE | None,
    *,
    chunk: int,
    device: torch.device,
    dtype: torch.dtype,
) -> Iterator[tuple[Tensor, ...]]:
    """Features (and derivatives) of numpy states ``x``, a chunk of rows at a time, as
    tensors on ``device``: ``what="features"`` gives ``(psi,)``, ``"ito"``
    :func:`ito_derivative` and ``"dirichlet"`` :func:`diffusion_jacobian` of ``sde``. The
    one chunked loop of generator learning (:class:`dpnets.Generator`, the generator
    objectives of :class:`dpnets.DPNet`); call it under ``torch.no_grad()`` to evaluate."""
    if what not in ("features", "ito", "dirichlet"):
        raise ValueError(f"what must be 'features', 'ito' or 'dirichlet', got {what!r}")
    for sl in chunks(x.shape[0], int(chunk)):
        xb = torch.as_tensor(x[sl]).to(device=device, dtype=dtype)
        if what == "features":
            yield (features(xb),)
        elif what == "ito":
            yield ito_derivative(features, xb, sde)  # type: ignore[arg-type]
        else:
            yield diffusion_jacobian(features, xb, sde)  # type: ignore[arg-type]


def warn_if_piecewise_linear(module: torch.nn.Module) -> bool:
    """Warn (and return True) if ``module`` contains piecewise-linear activations.

    Their second derivative is zero almost everywhere, so the diffusion term of the Itô
    derivative (Eq. 13) vanishes: use CELU, SiLU, tanh or softplus for ``form="ito"``.
    """
    bad = sorted({type(m).__name__ for m in module.modules() if isinstance(m, _PIECEWISE_LINEAR)})
    if bad:
        import warnings

        warnings.warn(
            f"the feature map uses piecewise-linear activations ({', '.join(bad)}): their second "
            "derivative vanishes, so the Itô derivative misses the diffusion term. Use a smooth "
            "activation (celu, silu, tanh, softplus) or the Dirichlet form",
            stacklevel=3,
        )
        return True
    return False


def check_samples(data: Any) -> Any:
    """Validate samples of the invariant distribution: an array ``(n, *state_shape)`` or a list
    of arrays (concatenated). Returns a numpy array (1-D input becomes ``(n, 1)``)."""
    import numpy as np

    from dpnets.states import check_states, is_streaming

    if isinstance(data, tuple):
        raise TypeError(
            "generator learning takes samples of the invariant distribution (an array), not "
            "(X, Y) pairs"
        )
    if is_streaming(data):
        raise TypeError("generator learning takes in-memory samples (an array or list of arrays)")
    if isinstance(data, list):
        if not data:
            raise ValueError("empty list of trajectories")
        parts = [check_states(t, f"trajectory {k}") for k, t in enumerate(data)]
        if any(p.shape[1:] != parts[0].shape[1:] for p in parts):
            raise ValueError("all trajectories must have the same state shape")
        return np.concatenate(parts)
    return check_states(data, "X")
