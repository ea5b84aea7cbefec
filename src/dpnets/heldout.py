"""The held-out score of a fitted model: one function for every estimator.

:func:`heldout_score` is what every estimator's ``score`` computes
(:meth:`dpnets.spectral.SpectralModel.score` for the operators, generators' excepted, and
the baselines; :meth:`dpnets.DPNet.score`), hence what scikit-learn's ``GridSearchCV``
(default scoring), :func:`dpnets.base.vamp2_scorer` and
:func:`dpnets.validation.cross_validate` reach. The estimators only supply the features of
the held-out pairs (:func:`heldout_pairs`) and, for VAMP-E, their training moments.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dpnets.linalg import spectral_method, sym_matrix_function
from dpnets.pairs import Pairs, lagged_pairs, resolve_lag
from dpnets.scores import projection_score, vamp_score

__all__ = ["heldout_score", "basis_score", "heldout_pairs", "vamp_e_score", "HELDOUT_KINDS"]

#: the held-out scores :func:`heldout_score` computes
HELDOUT_KINDS = ("vamp1", "vamp2", "vampE", "projection")


def heldout_pairs(X: Any, lag: int) -> Pairs:
    """The pairs of held-out data ``X`` (trajectories, or pre-paired ``(X, Y)``) at ``lag``."""
    return lagged_pairs(X, resolve_lag(X, lag)[0])


def heldout_score(
    fx: Any,
    fy: Any,
    kind: str = "vamp2",
    *,
    constant: bool = False,
    training: tuple | None = None,
    rtol: float | None = None,
) -> float:
    """Score of a model's features on held-out pairs, higher is better.

    Parameters
    ----------
    fx, fy : ndarray or Tensor (n, k)
        The features ``psi`` of the held-out pairs ``(x_t, x_{t + lag})``, *without* the
        constant function (numpy arrays are scored in float64, tensors in their dtype).
    kind : {"vamp2", "vamp1", "vampE", "projection"}
        * ``"vamp2"``: ``1 + ||K||_F^2`` and ``"vamp1"``: ``1 + ||K||_*``, with
          ``K = Cx^{-1/2} Cxy Cy^{-1/2}`` of the *centred* features (Mardt et al.,
          :func:`dpnets.scores.vamp_score`): how much of the dynamics the features capture.
        * ``"projection"``: ``P^0`` (Eq. 7) of the model's basis, ``[1, psi]`` when
          ``constant`` (then equal to ``"vamp2"``), uncentred.
        * ``"vampE"`` (Wu and Noé 2020, Eq. 30): the Koopman model fitted on the training
          data (``training``) scored against the held-out covariances
          (:func:`vamp_e_score`); comparable across dimensions.
    constant : bool, default False
        Whether the model's basis is ``[1, psi]`` (the constant added).
    training : tuple, optional
        ``"vampE"`` only: the training moments of the model's basis ``(cx, cxy, cy, mean_x,
        mean_y)`` (the constant first when ``constant``).
    rtol : float, optional
        ``"vampE"``: the relative rank cut-off of the inverse square roots.

    Returns
    -------
    float
        Computed with the symmetric eigendecomposition's exact cut-offs on any device
        (``spectral_method("eigh")``: the number is read on the host anyway, so nothing is
        gained by the GPU's Cholesky path and its surrogate for near-singular covariances).
    """
    if kind == "vampE":
        if training is None:
            raise ValueError("the VAMP-E score needs the model's training moments")
        return vamp_e_score(np.asarray(fx), np.asarray(fy), *training, constant, rtol)
    x, y = torch.as_tensor(fx), torch.as_tensor(fy)
    # a number is returned (read on the host) on any device: the eigendecomposition's exact
    # cut-offs, not the Cholesky path's surrogate for near-singular covariances
    with torch.no_grad(), spectral_method("eigh"):
        if kind == "projection":
            return float(projection_score(x, y, 0.0, constant=constant))
        if kind in ("vamp1", "vamp2"):
            return float(vamp_score(x, y, p=int(kind[-1])))
    raise ValueError(f"kind must be one of {', '.join(map(repr, HELDOUT_KINDS))}, got {kind!r}")


def basis_score(
    bx: np.ndarray,
    by: np.ndarray,
    kind: str = "vamp2",
    *,
    constant: bool = False,
    training: tuple | None = None,
    rtol: float | None = None,
) -> float:
    """:func:`heldout_score` of a fitted operator from its basis on the held-out pairs
    (``[1, psi]`` when ``constant``: the constant column is the ``1`` of the scores, so it
    is dropped here)."""
    if constant:
        bx, by = bx[:, 1:], by[:, 1:]
    return heldout_score(bx, by, kind, constant=constant, training=training, rtol=rtol)


def vamp_e_score(
    fx: np.ndarray,
    fy: np.ndarray,
    cx: np.ndarray,
    cxy: np.ndarray,
    cy: np.ndarray,
    mean_x: np.ndarray,
    mean_y: np.ndarray,
    constant: bool,
    rtol: float | None = None,
) -> float:
    """VAMP-E (Wu and Noé 2020, Eq. 30) of the training Koopman model against test features:
    ``1 + tr(2 S U^T C0t V - S U^T C00 U S V^T Ctt V)`` with ``U``, ``S``, ``V`` the
    singular functions and values of the training covariances (centred; the constant's row
    and column dropped when ``constant``) and ``C00``, ``C0t``, ``Ctt`` the centred
    covariances of the test features ``fx``, ``fy`` (without the constant)."""
    k = 1 if constant else 0  # drop the constant column
    mx, my = mean_x[k:], mean_y[k:]

    def centred(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return c[k:, k:] - np.outer(a, b)

    l0, _ = sym_matrix_function(centred(cx, mx, mx), -0.5, rtol)
    lt, _ = sym_matrix_function(centred(cy, my, my), -0.5, rtol)
    a, s, bt = np.linalg.svd(l0 @ centred(cxy, mx, my) @ lt)
    u, v = l0 @ a, lt @ bt.T
    n = fx.shape[0]
    x0, y0 = fx - fx.mean(0), fy - fy.mean(0)
    t00, t0t, ttt = x0.T @ x0 / n, x0.T @ y0 / n, y0.T @ y0 / n
    su = u * s
    return float(1.0 + np.trace(2.0 * su.T @ t0t @ v - su.T @ t00 @ su @ v.T @ ttt @ v))
