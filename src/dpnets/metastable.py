"""Metastable sets of a model: PCCA+ memberships from its leading eigenfunctions
(:func:`pcca`) and the number of sets from the spectral gap (:func:`sets_from_gap`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpnets.diagnostics import ABOVE_ONE_TOL, NOISE_FACTOR
from dpnets.params import check_int
from dpnets.states import check_frames

__all__ = ["MetastableSets", "sets_from_gap", "pcca"]


# ------------------------------------------------------------------------------ PCCA+
@dataclass
class MetastableSets:
    """Metastable sets of a model by PCCA+ (:func:`pcca`).

    Attributes
    ----------
    memberships : ndarray (n_frames, n_sets)
        Fuzzy memberships of the frames (non-negative, rows sum to 1).
    assignments : ndarray (n_frames,)
        The set of largest membership of each frame.
    coarse_transition_matrix : ndarray (n_sets, n_sets)
        Transition probabilities between the sets in one lag (row-stochastic).
    stationary : ndarray (n_sets,)
        Equilibrium probability of each set.
    rotation : ndarray (n_sets, n_sets)
        ``memberships = [1, phi_1, ..., phi_{n-1}] @ rotation`` in the normalised eigenfunctions.
    """

    memberships: np.ndarray
    assignments: np.ndarray
    coarse_transition_matrix: np.ndarray
    stationary: np.ndarray
    rotation: np.ndarray
    _model: Any = None
    _scale: np.ndarray | None = None

    def memberships_of(self, X: Any, crisp: bool = True) -> np.ndarray:
        """Memberships of states (e.g. for :func:`ck_test`).

        ``crisp=True`` (default): the indicator of each state's most likely set, so that a
        Chapman-Kolmogorov test on the sets reads as transition probabilities between
        them (fuzzy memberships mix the sets' self-overlap ``E[m^2] / E[m]`` into every
        curve, which reads as "not metastable" on a metastable system). ``crisp=False``:
        the fuzzy PCCA+ memberships, clipped and renormalised as for the frames.
        """
        phi = np.real(self._model.eigenfunctions(X))[:, : self.rotation.shape[0]] / self._scale
        phi[:, 0] = 1.0
        fuzzy = _clip_rows(phi @ self.rotation)
        if not crisp:
            return fuzzy
        return np.eye(fuzzy.shape[1])[np.argmax(fuzzy, axis=1)]

    def fuzzy_memberships_of(self, X: Any) -> np.ndarray:
        """The fuzzy PCCA+ memberships of states (``memberships_of(X, crisp=False)``)."""
        return self.memberships_of(X, crisp=False)


def sets_from_gap(
    eigvals: Any, max_sets: int = 6, *, edge: bool = True, n_samples: int | None = None
) -> tuple[int, str]:
    """The number of metastable sets the spectrum suggests, and why.

    ``n`` sets describe the ``n - 1`` slowest processes; the choice is the ``n`` in
    ``2..max_sets`` with the largest gap ``|lambda_{n-1}| - |lambda_n|`` between the moduli
    of the eigenvalues (decreasing; the first is the stationary one), a process the model
    does not hold counting as ``|lambda| = 0`` (unresolved at the lag). Returns
    ``(n, reason)``.

    Parameters
    ----------
    eigvals : array
        The model's eigenvalues, the stationary one first (:meth:`eig`).
    max_sets : int, default 6
    edge : bool, default True
        Whether the gap after the model's last eigenvalue (to 0) counts: right for a basis
        known to be complete (indicator functions of every state of a Markov chain); for a
        learned basis of ``r`` functions (``edge=False``) that gap marks the size of the
        basis, not a gap of the dynamics, and it counts only when no other is measurable.
    n_samples : int, optional
        The number of pairs of the fit. Given, the sets describe only resolved processes:
        the leading eigenvalues (in the model's order, after the stationary one) that are
        real, in ``(0, 1]`` and above the noise level ``3 sqrt(r / n)``
        (:mod:`dpnets.diagnostics`); a complex pair, a negative or an unresolved
        eigenvalue ends them. ``ValueError`` if there is none.
    """
    check_int("max_sets", max_sets, 2)
    lam = np.asarray(eigvals)
    if n_samples is None:
        mod = np.sort(np.abs(lam))[::-1][1:]  # without the stationary one
        usable = mod.size
    else:
        mod = np.abs(lam[1:])
        usable = _leading_real(lam, int(n_samples))
    if mod.size == 0:
        raise ValueError("the model has no non-stationary eigenvalue: no metastable sets")
    if usable == 0:
        raise ValueError(
            f"no resolved real process to describe: the slowest eigenvalue after the "
            f"stationary one is {np.round(lam[1], 4)} ({_why_not(lam, int(n_samples))})"
        )
    top = min(int(max_sets), usable + 1)
    padded = np.concatenate([mod, [0.0]])
    candidates = list(range(2, top + 1))
    if not edge and len(candidates) > 1:  # the gap after the basis' last function is no gap
        candidates = [n for n in candidates if n - 1 < mod.size]
    gaps = [padded[n - 2] - padded[n - 1] for n in candidates]
    best = candidates[int(np.argmax(gaps))]
    return best, (
        f"the largest gap in |eigenvalue| is after {best - 1} process(es): "
        f"{padded[best - 2]:.3g} then {padded[best - 1]:.3g}"
    )


def _why_not(lam: np.ndarray, n_samples: int) -> str:
    """Why the eigenvalue after the stationary one describes no metastable process."""
    v, noise = complex(lam[1]), NOISE_FACTOR * np.sqrt(lam.size / max(n_samples, 1))
    if abs(v.imag) > 1e-8 * max(1.0, abs(v)):
        return "complex"
    if v.real > 1.0 + ABOVE_ONE_TOL:
        return "above 1"
    if v.real <= 0:
        return "negative"
    return f"within the noise level {noise:.3g} of 0"


def _leading_real(lam: np.ndarray, n_samples: int) -> int:
    """How many eigenvalues after the stationary one (in the model's order) are real, in
    ``(0, 1 + tol]`` and above the noise level, before the first that is not."""
    noise = NOISE_FACTOR * np.sqrt(lam.size / max(n_samples, 1))
    count = 0
    for v in lam[1:]:
        real = abs(v.imag) <= 1e-8 * max(1.0, abs(v))
        if not (real and noise < v.real <= 1.0 + ABOVE_ONE_TOL):
            break
        count += 1
    return count


def pcca(model: Any, X: Any, n_sets: int, weights: Any = None) -> MetastableSets:
    """PCCA+ metastable sets from the leading eigenfunctions of a model, evaluated at frames.

    The algorithm is deeptime's PCCA+ (Röblitz and Weber, Adv. Data Anal. Classif. 7, 147,
    2013: the inner simplex algorithm, then the Nelder–Mead optimisation of the crispness of
    the memberships), applied to the eigenfunction values at the frames ``X`` instead of the
    eigenvectors of a transition matrix. Written here because deeptime's public ``pcca``
    takes a row-stochastic matrix on discrete states, which a model on continuous features
    does not have; on indicator features of a Markov chain, evaluated at its states, it gives
    deeptime's memberships (tested).

    Parameters
    ----------
    model : fitted TransferOperator (or another model with real leading eigenvalues)
        Its ``n_sets`` leading eigenvalues must be real (a reversible process).
    X : array (n, ...) or list of arrays
        Frames on which the sets are defined (e.g. the training trajectories: a list is
        taken frame by frame, in order).
    n_sets : int
        Number of metastable sets (>= 2).
    weights : array (n,), optional
        Equilibrium weights of the frames (default: the model's
        :meth:`~dpnets.TransferOperator.stationary_weights`, which handles off-equilibrium
        data); they normalise the eigenfunctions and weigh the coarse-grained matrix.

    Returns
    -------
    MetastableSets
        With the Galerkin coarse-grained matrix
        ``P_c = (chi^T W chi)^{-1} chi^T W Phi Lambda A`` (``W`` the weights,
        ``chi = Phi A``), renormalised to be row-stochastic.
    """
    n_sets = check_int("n_sets", n_sets, 2)
    if not callable(getattr(model, "eigenfunctions", None)):
        raise TypeError(
            f"model must be a fitted dpnets model (with eig and eigenfunctions); got "
            f"{type(model).__name__}"
        )
    lam = np.asarray(model.eig())
    if n_sets > lam.size:
        raise ValueError(f"n_sets={n_sets} exceeds the model's {lam.size} eigenvalues")
    lead = lam[:n_sets]
    if np.any(np.abs(lead.imag) > 1e-8 * np.maximum(1.0, np.abs(lead))):
        raise ValueError(
            f"the {n_sets} leading eigenvalues are not all real ({np.round(lead, 4)}): PCCA+ needs "
            "a reversible model; choose n_sets so as not to split a complex pair"
        )
    x = check_frames(X, "X")  # a list of trajectories: their frames, in order
    phi = np.real(model.eigenfunctions(x))[:, :n_sets]
    if weights is None:  # estimated: tiny negative values of an off-equilibrium fit clipped
        w = np.clip(np.real(model.stationary_weights(x)), 0.0, None)
        if not (np.all(np.isfinite(w)) and w.sum() > 0):
            raise ValueError(
                "the model's stationary weights on X are not positive anywhere (no "
                "equilibrium distribution); pass weights= explicitly"
            )
    else:
        w = _pcca_weights(weights, x.shape[0])
    w = w / w.sum()
    col0 = phi[:, 0]
    if np.ptp(col0) > 1e-6 * max(1.0, float(np.abs(col0).max())):
        raise ValueError(
            "the leading eigenfunction is not constant on X: the model has no stationary "
            "eigenvalue 1 in front (add the constant function, constant=True)"
        )
    scale = np.sqrt(w @ phi**2)  # unit norm under the equilibrium weights
    evecs = phi / scale
    evecs[:, 0] = 1.0
    rot = _pcca_isa(evecs)
    rot = _pcca_optimise(evecs, rot)
    chi = _clip_rows(evecs @ rot)
    # Galerkin coarse graining under the equilibrium weights
    wchi = chi * w[:, None]
    pc = np.linalg.solve(chi.T @ wchi, wchi.T @ (evecs * lead.real) @ rot)
    pc = np.clip(pc, 0.0, None)
    sums = pc.sum(1, keepdims=True)
    if not (np.all(np.isfinite(pc)) and np.all(sums > 0)):
        raise ValueError(
            "PCCA+ failed: the memberships of some metastable set vanish on X (weighted by "
            "weights), so its coarse-grained transition row is undefined; use fewer sets "
            "(n_sets) or frames that visit every set"
        )
    pc = pc / sums
    stationary = chi.T @ w
    return MetastableSets(
        chi, np.argmax(chi, axis=1), pc, stationary / stationary.sum(), rot, model, scale
    )


def _pcca_weights(weights: Any, n: int) -> np.ndarray:
    """User-given PCCA+ weights: ``n`` finite non-negative values, not all zero."""
    try:
        w = np.asarray(weights, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"weights must be an array of {n} numbers, got {weights!r}") from None
    if w.shape != (n,) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be {n} finite values (one per frame); got shape {w.shape}")
    if np.any(w < 0):
        raise ValueError(
            f"weights must be non-negative (equilibrium weights of the frames); "
            f"{int(np.sum(w < 0))} are negative (smallest {w.min():.3g})"
        )
    if not w.sum() > 0:
        raise ValueError("weights are all zero: at least one frame needs a positive weight")
    return w


def _clip_rows(chi: np.ndarray) -> np.ndarray:
    """Memberships in [0, 1] summing to 1; a frame whose memberships all clip to zero (it
    lies outside the simplex) goes wholly to the set it is nearest to."""
    clipped = np.clip(chi, 0.0, 1.0)
    sums = clipped.sum(1, keepdims=True)
    empty = sums[:, 0] <= 0
    if np.any(empty):
        clipped[empty] = np.eye(chi.shape[1])[np.argmax(chi[empty], axis=1)]
        sums[empty] = 1.0
    return clipped / sums


def _pcca_isa(evecs: np.ndarray) -> np.ndarray:
    """Inner simplex algorithm (Deuflhard and Weber 2005): the rotation that maps the
    ``n`` most simplex-vertex-like frames to the unit vectors."""
    n = evecs.shape[1]
    ortho = evecs.copy()
    ind = np.zeros(n, dtype=np.int64)
    ind[0] = int(np.argmax(np.linalg.norm(evecs, axis=1)))
    ortho -= evecs[ind[0]]
    for k in range(1, n):
        temp = ortho[ind[k - 1]].copy()
        ortho -= np.outer(ortho @ temp, temp)
        dist = np.linalg.norm(ortho, axis=1)
        dist[ind[:k]] = -1.0
        ind[k] = int(np.argmax(dist))
        ortho /= np.linalg.norm(ortho[ind[k]])
    return np.linalg.inv(evecs[ind])


def _pcca_fill(crop: np.ndarray, evecs: np.ndarray) -> np.ndarray:
    """The feasible rotation from its inner block (memberships >= 0 summing to 1)."""
    full = np.concatenate([-crop.sum(1, keepdims=True), crop], axis=1)
    top = np.max(-(evecs[:, 1:] @ full), axis=0, keepdims=True)
    return np.concatenate([top, full], axis=0) / top.sum()


def _pcca_optimise(evecs: np.ndarray, rot: np.ndarray) -> np.ndarray:
    """Maximise the crispness ``sum_ij A_ji^2 / A_0i`` over feasible rotations (Nelder–Mead)."""
    from scipy.optimize import fmin

    n = evecs.shape[1]
    # the fill takes a maximum of linear functions over the frames: attained at the vertices
    # of their convex hull, so the optimisation needs only those (a few hundred frames, not
    # every frame of the data: the same rotation, at a fraction of the cost)
    evecs = evecs[_hull_rows(evecs[:, 1:])]

    def objective(v: np.ndarray) -> float:
        a = _pcca_fill(v.reshape(n - 1, n - 1), evecs)
        return -float(np.sum(a**2 / a[0][None, :]))

    best = fmin(objective, rot[1:, 1:].ravel(), disp=False)
    return _pcca_fill(best.reshape(n - 1, n - 1), evecs)


def _hull_rows(points: np.ndarray) -> np.ndarray:
    """Indices of rows of ``points`` (n, d) that include every vertex of their convex hull
    (all distinct rows where the hull is degenerate)."""
    _, rows = np.unique(points, axis=0, return_index=True)
    if points.shape[1] == 1:
        return np.array([np.argmin(points[:, 0]), np.argmax(points[:, 0])])
    if rows.size <= 4 * (points.shape[1] + 1):
        return rows
    from scipy.spatial import ConvexHull, QhullError

    try:
        return rows[ConvexHull(points[rows]).vertices]
    except QhullError:  # flat or degenerate: every distinct row
        return rows
