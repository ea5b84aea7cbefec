"""Finite-state Markov chains with exact spectral quantities."""

from __future__ import annotations

import bisect

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from ._utils import check_positive_int, sort_by_modulus

__all__ = ["MarkovChain"]


class MarkovChain:
    r"""Finite Markov chain with a row-stochastic transition matrix.

    The transfer operator acts on functions :math:`f: \{0..n-1\} \to \mathbb{R}` as
    :math:`\mathsf{T} f = P f`, i.e. :math:`(\mathsf{T}f)(i) = \mathbb{E}[f(X_{t+1}) | X_t=i]`.

    Parameters
    ----------
    P : array_like of shape (n_states, n_states)
        Transition matrix: non-negative entries, rows summing to 1 (within 1e-10). The chain
        must have a unique stationary distribution, i.e. exactly one closed communicating
        class (transient states are allowed).

    Raises
    ------
    ValueError
        If ``P`` is not square, has negative or non-finite entries, rows not summing to one,
        or more than one closed communicating class.
    """

    def __init__(self, P: ArrayLike) -> None:
        mat = np.array(P, dtype=np.float64)
        if mat.ndim != 2 or mat.shape[0] != mat.shape[1] or mat.shape[0] == 0:
            raise ValueError(f"P must be a non-empty square matrix, got shape {mat.shape}.")
        if not np.all(np.isfinite(mat)):
            raise ValueError("P must have finite entries.")
        if np.any(mat < 0.0):
            raise ValueError("P must have non-negative entries.")
        row_err = np.abs(mat.sum(axis=1) - 1.0).max()
        if row_err > 1e-10:
            raise ValueError(f"Rows of P must sum to 1 (max deviation {row_err:.3e}).")
        closed = self._closed_classes(mat)
        if len(closed) != 1:
            raise ValueError(
                f"P has {len(closed)} closed communicating classes; a unique stationary "
                "distribution requires exactly one."
            )
        self.P = mat
        self._recurrent = closed[0]  # boolean mask of the support of the stationary law

    @staticmethod
    def _closed_classes(mat: np.ndarray) -> list[np.ndarray]:
        """Boolean masks of the closed communicating classes of the transition graph."""
        n_comp, labels = connected_components(
            csr_matrix(mat > 0.0), directed=True, connection="strong"
        )
        rows, cols = np.nonzero(mat > 0.0)
        leaving = labels[rows] != labels[cols]
        open_classes = set(np.unique(labels[rows[leaving]]).tolist())
        return [labels == c for c in range(n_comp) if c not in open_classes]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_states={self.n_states})"

    @property
    def n_states(self) -> int:
        """Number of states."""
        return int(self.P.shape[0])

    @classmethod
    def random(
        cls, n_states: int, seed: int | None = None, reversible: bool = False
    ) -> MarkovChain:
        """Random dense chain (all transition probabilities positive, hence ergodic).

        Parameters
        ----------
        n_states : int
            Number of states.
        seed : int, optional
            Seed for :func:`numpy.random.default_rng`.
        reversible : bool, default=False
            If ``False``, rows are i.i.d. flat-Dirichlet vectors (generically non-reversible).
            If ``True``, ``P = D^{-1} W`` for a random symmetric positive weight matrix ``W``,
            which is reversible with respect to the normalised row sums of ``W``.

        Returns
        -------
        MarkovChain
        """
        n_states = check_positive_int(n_states, "n_states")
        rng = np.random.default_rng(seed)
        if reversible:
            weights = rng.random((n_states, n_states)) + 1e-3
            weights = weights + weights.T
            mat = weights / weights.sum(axis=1, keepdims=True)
        else:
            mat = rng.dirichlet(np.ones(n_states), size=n_states)
        mat = mat / mat.sum(axis=1, keepdims=True)
        return cls(mat)

    def stationary_distribution(self) -> np.ndarray:
        r"""Unique stationary distribution :math:`\pi` (``pi @ P = pi``, ``sum(pi) = 1``)."""
        rec = self._recurrent
        sub = self.P[np.ix_(rec, rec)]  # stochastic: the recurrent class is closed
        m = sub.shape[0]
        system = np.vstack([sub.T - np.eye(m), np.ones((1, m))])
        rhs = np.zeros(m + 1)
        rhs[-1] = 1.0
        sol, *_ = scipy.linalg.lstsq(system, rhs)
        pi = np.zeros(self.n_states)
        pi[rec] = np.clip(sol, 0.0, None)
        return pi / pi.sum()

    def eigvals(self) -> np.ndarray:
        """Eigenvalues of ``P`` sorted by decreasing modulus (complex128)."""
        return sort_by_modulus(scipy.linalg.eigvals(self.P).astype(np.complex128))

    def svals(self) -> np.ndarray:
        r"""Singular values of :math:`\mathsf{T} f = P f` on :math:`L^2(\pi)`, decreasing.

        These are the singular values of :math:`D^{1/2} P D^{-1/2}`, ``D = diag(pi)``. States
        outside the support of :math:`\pi` (transient states) are null in :math:`L^2(\pi)` and
        are dropped, so the output has one value per state in the support. The first value is 1.
        """
        pi = self.stationary_distribution()
        support = self._recurrent
        sq = np.sqrt(pi[support])
        sub = self.P[np.ix_(support, support)]
        return scipy.linalg.svdvals(sq[:, None] * sub / sq[None, :])

    def one_hot(self, states: ArrayLike) -> np.ndarray:
        """One-hot encoding of integer states, shape ``(n, n_states)``, float64."""
        idx = np.asarray(states)
        if idx.ndim == 2 and idx.shape[1] == 1:
            idx = idx[:, 0]
        if idx.ndim != 1:
            raise ValueError(f"states must have shape (n,) or (n, 1), got {idx.shape}.")
        if idx.size and (
            not np.all(np.equal(np.mod(idx, 1), 0)) or idx.min() < 0 or idx.max() >= self.n_states
        ):
            raise ValueError(f"states must be integers in [0, {self.n_states - 1}].")
        out = np.zeros((idx.shape[0], self.n_states), dtype=np.float64)
        out[np.arange(idx.shape[0]), idx.astype(np.intp)] = 1.0
        return out

    def sample(self, n: int, x0: int | None = None, seed: int | None = None) -> np.ndarray:
        """Simulate a trajectory.

        All uniforms are drawn at once; each step is a binary search in the cumulative row of
        the current state.

        Parameters
        ----------
        n : int
            Number of states returned (including the initial one).
        x0 : int, optional
            Initial state; if ``None`` it is drawn from the stationary distribution.
        seed : int, optional
            Seed for :func:`numpy.random.default_rng`.

        Returns
        -------
        numpy.ndarray of int64, shape (n,)
        """
        n = check_positive_int(n, "n")
        rng = np.random.default_rng(seed)
        last = self.n_states - 1
        if x0 is None:
            cum_pi = np.cumsum(self.stationary_distribution())
            cum_pi /= cum_pi[-1]
            state = min(int(np.searchsorted(cum_pi, rng.random(), side="right")), last)
        else:
            state = check_positive_int(x0, "x0", minimum=0)
            if state > last:
                raise ValueError(f"x0 must be in [0, {last}], got {x0}.")
        cum = np.cumsum(self.P, axis=1)
        cum /= cum[:, -1:]  # exact 1.0 from the last positive entry on: never selects p = 0
        rows = cum.tolist()
        uniforms = rng.random(n - 1).tolist()
        out = np.empty(n, dtype=np.int64)
        out[0] = state
        for t, u in enumerate(uniforms, start=1):
            state = min(bisect.bisect_right(rows[state], u), last)
            out[t] = state
        return out
