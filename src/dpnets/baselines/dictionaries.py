"""Fixed feature maps (dictionaries) for DMD and EDMD (Schmid 2010; Williams et al. 2015).

Each dictionary is a small callable ``states (n, *state_shape) -> float64 features (n, r)``
that describes itself by a JSON config (:meth:`get_config`), so that models fitted on it
can be saved and loaded without pickling (:func:`dpnets.load`).

Multi-dimensional states are flattened to ``d`` coordinates; the polynomial dictionaries
then hold every product ``prod_k p_{a_k}(x_k)`` of total degree ``sum_k a_k <= degree``
(``binom(d + degree, d)`` functions, ordered by total degree, the constant first).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.polynomial import chebyshev

from dpnets.states import check_states

__all__ = [
    "Dictionary",
    "ChebyshevFeatures",
    "MonomialFeatures",
    "ProjectionFeatures",
    "chebyshev_features",
    "monomial_features",
    "DICTIONARIES",
    "check_degree",
]


def _flat(x: Any) -> np.ndarray:
    arr = check_states(x, "X")
    return np.asarray(arr, dtype=np.float64).reshape(arr.shape[0], -1)


def _multi_indices(dim: int, degree: int) -> np.ndarray:
    """All exponent tuples of ``dim`` variables with total degree ``<= degree`` (m, dim),
    read-only (cached per ``(dim, degree)``, so the dictionaries hold no state)."""
    return _multi_indices_cached(int(dim), int(degree))


@functools.lru_cache(maxsize=64)
def _multi_indices_cached(dim: int, degree: int) -> np.ndarray:
    idx = [
        a
        for total in range(degree + 1)
        for a in itertools.product(range(total + 1), repeat=dim)
        if sum(a) == total
    ]
    # within one total degree: lexicographically decreasing (x1^2, x1 x2, x2^2, ...)
    idx.sort(key=lambda a: (sum(a), tuple(-v for v in a)))
    out = np.asarray(idx, dtype=np.int64).reshape(len(idx), dim)
    out.setflags(write=False)
    return out


def check_degree(degree: Any) -> int:
    """``degree`` of a polynomial dictionary: an integer >= 0."""
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 0:
        raise ValueError(f"degree must be an integer >= 0, got {degree!r}")
    return int(degree)


class Dictionary:
    """Base class of the saveable fixed feature maps."""

    kind: str = ""

    def __call__(self, x: Any) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class _PolynomialFeatures(Dictionary):
    def __init__(self, degree: int) -> None:
        self.degree = check_degree(degree)

    def _vander(self, x: np.ndarray) -> np.ndarray:  # (n, d, degree + 1)
        raise NotImplementedError  # pragma: no cover

    def __call__(self, x: Any) -> np.ndarray:
        flat = _flat(x)
        d = flat.shape[1]
        idx = _multi_indices(d, self.degree)
        v = self._vander(flat)
        out = np.ones((flat.shape[0], idx.shape[0]))
        for k in range(d):
            out *= v[:, k, idx[:, k]]
        return out

    def n_features(self, dim: int) -> int:
        """Number of features for ``dim``-dimensional (flattened) states."""
        return int(_multi_indices(dim, self.degree).shape[0])


class ChebyshevFeatures(_PolynomialFeatures):
    """Chebyshev polynomials of the first kind ``T_k`` on a box ``domain`` (Williams 2015).

    Each coordinate is mapped affinely from ``[low, high]`` to ``[-1, 1]``; states outside
    the box are evaluated all the same (the polynomials grow there). With one-dimensional
    states and ``domain=(0, 1)`` the features are ``T_0(2x - 1), ..., T_degree(2x - 1)``,
    the paper's "Cheby-T" dictionary (Table 1).

    Parameters
    ----------
    degree : int
        Highest total degree.
    domain : (low, high)
        Scalars, or sequences with one bound per flattened coordinate.
    """

    kind = "chebyshev"

    def __init__(self, degree: int, domain: Sequence[Any] = (-1.0, 1.0)) -> None:
        super().__init__(degree)
        if len(domain) != 2:
            raise ValueError(f"domain must be (low, high), got {domain!r}")
        low = np.atleast_1d(np.asarray(domain[0], dtype=np.float64))
        high = np.atleast_1d(np.asarray(domain[1], dtype=np.float64))
        try:
            low, high = np.broadcast_arrays(low, high)
        except ValueError:
            raise ValueError(
                "domain bounds must be scalars or 1-D sequences of equal length"
            ) from None
        if low.ndim != 1:
            raise ValueError("domain bounds must be scalars or 1-D sequences of equal length")
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
            raise ValueError(f"domain must be finite with high > low, got {domain!r}")
        self.low, self.high = low.copy(), high.copy()

    def _vander(self, x: np.ndarray) -> np.ndarray:
        if self.low.size not in (1, x.shape[1]):
            raise ValueError(
                f"domain has {self.low.size} bounds but the states have {x.shape[1]} coordinates"
            )
        z = (2.0 * x - (self.low + self.high)) / (self.high - self.low)
        return chebyshev.chebvander(z, self.degree)

    def get_config(self) -> dict[str, Any]:
        return {"degree": self.degree, "domain": [self.low.tolist(), self.high.tolist()]}


class MonomialFeatures(_PolynomialFeatures):
    """Monomials ``x^a`` of total degree ``<= degree`` (``degree=1``: ``[1, x]``).

    Parameters
    ----------
    degree : int
        Highest total degree.
    include_constant : bool, default True
        Keep the constant function (the degree-0 monomial).
    """

    kind = "monomial"

    def __init__(self, degree: int, include_constant: bool = True) -> None:
        super().__init__(degree)
        self.include_constant = bool(include_constant)
        if not self.include_constant and self.degree == 0:
            raise ValueError("degree=0 without the constant leaves no features")

    def _vander(self, x: np.ndarray) -> np.ndarray:
        return x[:, :, None] ** np.arange(self.degree + 1)

    def __call__(self, x: Any) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            out = super().__call__(x)
        if not np.all(np.isfinite(out)):
            top = float(np.max(np.abs(np.asarray(x, dtype=np.float64))))
            raise ValueError(
                f"monomials of degree up to {self.degree} of states of magnitude {top:.3g} "
                "overflow float64: rescale the data to a moderate scale, or use the Chebyshev "
                "dictionary (scaled to the data's bounding box)"
            )
        return out if self.include_constant else out[:, 1:]

    def n_features(self, dim: int) -> int:
        return super().n_features(dim) - (0 if self.include_constant else 1)

    def get_config(self) -> dict[str, Any]:
        return {"degree": self.degree, "include_constant": self.include_constant}


class ProjectionFeatures(Dictionary):
    """Linear features ``x -> x_flat @ components`` (the POD/PCA projection of DMD).

    Parameters
    ----------
    components : ndarray (d, r)
        Orthonormal columns (leading right singular vectors of the data matrix).
    """

    kind = "projection"

    def __init__(self, components: np.ndarray) -> None:
        comp = np.asarray(components, dtype=np.float64)
        if comp.ndim != 2:
            raise ValueError(f"components must be a (d, r) matrix, got shape {comp.shape}")
        self.components = comp

    def __call__(self, x: Any) -> np.ndarray:
        flat = _flat(x)
        if flat.shape[1] != self.components.shape[0]:
            raise ValueError(
                f"states have {flat.shape[1]} coordinates, the projection expects "
                f"{self.components.shape[0]}"
            )
        return flat @ self.components

    def get_config(self) -> dict[str, Any]:
        return {"shape": list(self.components.shape)}


def chebyshev_features(degree: int, domain: Sequence[Any] = (-1.0, 1.0)) -> ChebyshevFeatures:
    """Chebyshev dictionary ``T_a`` up to total degree ``degree`` on ``domain``.

    Examples
    --------
    >>> import numpy as np
    >>> from dpnets import TransferOperator
    >>> x = np.random.default_rng(0).uniform(size=(200, 1))
    >>> TransferOperator(chebyshev_features(6, domain=(0, 1))).fit(x).n_features_
    7
    """
    return ChebyshevFeatures(degree, domain)


def monomial_features(degree: int, include_constant: bool = True) -> MonomialFeatures:
    """Monomial dictionary ``x^a`` up to total degree ``degree``."""
    return MonomialFeatures(degree, include_constant)


#: Dictionary names accepted by :class:`dpnets.baselines.EDMD`.
DICTIONARIES: dict[str, type[Dictionary]] = {
    "chebyshev": ChebyshevFeatures,
    "monomial": MonomialFeatures,
}
