"""DMD and EDMD: :class:`dpnets.TransferOperator` on a fixed feature map.

* :class:`DMD` (Schmid 2010): linear features, optionally projected on the leading ``rank``
  principal (POD) directions of the initial states before the least squares.
* :class:`EDMD` (Williams et al. 2015): a Chebyshev or monomial dictionary, or any callable.

Both are thin subclasses of :class:`dpnets.TransferOperator`: ``fit`` builds the feature map
(the POD projection, or the dictionary with its domain) and then runs the operator
regression of Eq. (15); every downstream method (``eig`` with Eq. (16), ``eigenfunctions``,
``predict`` with Eq. (17), ``modes``, ``implied_timescales``, ``save``) is inherited.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import scipy.linalg

from dpnets.base import fit_data
from dpnets.moments import FIT_CHUNK
from dpnets.operators import TransferOperator
from dpnets.pairs import pair_segments, resolve_lag
from dpnets.params import Constraint, boolean, checked_in_fit, count, satisfies
from dpnets.spectral import regression_constraints
from dpnets.states import chunks, is_streaming

from .dictionaries import (
    DICTIONARIES,
    ChebyshevFeatures,
    MonomialFeatures,
    ProjectionFeatures,
    check_degree,
)

__all__ = ["DMD", "EDMD"]


class DMD(TransferOperator):
    """Dynamic mode decomposition (Schmid 2010): least squares on linear features.

    With ``rank=None`` this is ``TransferOperator(None, constant=False)`` (exact DMD on the full
    state). With ``rank=r`` the states are first projected on the ``r`` leading right
    singular vectors of the (uncentred) data matrix of initial states ``X`` (POD modes), and
    the ``r x r`` operator is fitted on the projected coordinates, as in Schmid's projected
    DMD.

    Parameters
    ----------
    rank : int, optional
        Number of POD directions kept; ``None`` keeps the full state.
    ridge : float, default 0.0
        Tikhonov regularisation added to ``Cx`` (Eq. 15 with ridge).
    rtol : float, optional
        Relative rank cut-off of the pseudo-inverse (see :class:`dpnets.TransferOperator`).
    constant : {"auto", True, False}, default False
        Add the constant function to the linear features (affine DMD); ``False`` is
        classical DMD. See :class:`dpnets.TransferOperator`.
    dt : float, default 1.0
        Time between frames (units of the timescales).
    lag : int, optional
        Lag in frames between paired states of trajectories (default 1); for pre-paired
        data, the lag they were paired at (see :class:`dpnets.TransferOperator`).
    stabilize : bool, default False
        Project eigenvalues of modulus above 1 onto the unit circle (the stabilised
        estimate; see :class:`dpnets.TransferOperator`).

    Attributes
    ----------
    projection_ : ProjectionFeatures or None
        The fitted POD projection (``None`` when ``rank`` is None).
    singular_values_ : ndarray or None
        Singular values of ``X / sqrt(n)`` (all of them), when ``rank`` is given.

    Notes
    -----
    Other fitted attributes are those of :class:`dpnets.TransferOperator`; ``modes()`` maps
    back to the full state. Without the constant function (``constant=False``, classical
    DMD) ``k = 0`` is a process, not the constant function, and data whose mean is far
    from 0 against their spread (raw, offset units) get that mean as a mode near 1 which
    biases the others; ``constant=True`` (affine DMD) or centred data avoid it. DMD
    regresses on the states as given, so states whose squares leave float64's range
    (magnitudes near ``1e300`` or ``1e-300``) are refused with a ``ValueError`` naming the
    magnitude (rescale them; ``EDMD``'s Chebyshev dictionary and the kernel models work in
    units of the data).

    Examples
    --------
    >>> import numpy as np
    >>> from dpnets.baselines import DMD
    >>> t = np.arange(200)
    >>> trajectory = np.stack([np.cos(0.3 * t), np.sin(0.3 * t)], axis=1)  # a rotation
    >>> np.abs(DMD(rank=2).fit(trajectory).eig()).round(6)
    array([1., 1.])
    """

    #: accepted values (:mod:`dpnets.params`), checked by ``fit`` and by :func:`dpnets.load`
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "rank": count(),
        **regression_constraints("ridge", "rtol", "constant", "dt", "lag"),
        "stabilize": boolean(),
    }

    def __init__(
        self,
        rank: int | None = None,
        ridge: float = 0.0,
        rtol: float | None = None,
        constant: str | bool = False,
        dt: float = 1.0,
        lag: int | None = None,
        stabilize: bool = False,
    ):
        self.rank = rank
        self.ridge = ridge
        self.rtol = rtol
        self.constant = constant
        self.dt = dt
        self.lag = lag
        self.stabilize = stabilize

    def _fit_features(
        self, data: Any, lag: int | None, log_weights: Any = None
    ) -> ProjectionFeatures | None:
        """The fitted POD projection, or ``None`` (identity on the full state)."""
        return self.projection_

    def fit(self, X: Any, y: Any = None, *, lag: int | None = None) -> DMD:
        """Fit on ``X`` (same forms as :meth:`dpnets.TransferOperator.fit`; ``fit(X, Y)`` is
        ``fit((X, Y))``).

        Raises
        ------
        ValueError
            If ``rank`` is not a positive integer or exceeds ``min(n, d)``.
        TypeError
            For streamed data (a Dataset/DataLoader) with ``rank`` given.
        """
        data, lag = fit_data(self, X, y, lag)
        self._check_params()
        self.projection_ = None
        self.singular_values_ = None
        if self.rank is not None:
            if is_streaming(data):
                raise TypeError("DMD with rank needs in-memory data (array, list or (X, Y))")
            n, r_factor = _r_factor(data, resolve_lag(data, lag)[0])
            if self.rank > min(n, r_factor.shape[1]):
                raise ValueError(
                    f"rank={self.rank} exceeds min(n_samples, n_coordinates) = "
                    f"{min(n, r_factor.shape[1])}"
                )
            _, s, vt = scipy.linalg.svd(r_factor, full_matrices=False)
            self.singular_values_ = s / np.sqrt(n)
            self.projection_ = ProjectionFeatures(vt[: int(self.rank)].T)
        self._fit_operator(data, lag)
        return self

    def _partial_features(self) -> None:
        """A fresh :meth:`partial_fit` runs on the full state (``rank=None``); the POD
        projection of ``rank`` is computed from the data by :meth:`fit` only."""
        if self.rank is not None:
            raise ValueError(
                f"DMD(rank={self.rank!r}) computes its POD projection from the data in fit: "
                "call fit on the first piece, then partial_fit adds the next ones"
            )
        self.projection_ = self.singular_values_ = None
        return None


def _r_factor(data: Any, lag: int) -> tuple[int, np.ndarray]:
    """``(n, R)`` with ``R`` the triangular factor of the QR decomposition of the (flattened)
    initial states ``X`` (n, d): ``X^T X = R^T R``, so ``X`` and ``R`` have the same singular
    values and right singular vectors. Computed chunk by chunk (tall-skinny QR), in
    ``O(chunk d + d^2)`` memory and without the squared condition number of ``X^T X``."""
    n, r_factor = 0, None
    for seg in pair_segments(data, lag):
        for x in seg.x_chunks(FIT_CHUNK):
            flat = np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)
            stack = flat if r_factor is None else np.vstack([r_factor, flat])
            r_factor = np.linalg.qr(stack, mode="r")
            n += flat.shape[0]
    assert r_factor is not None  # pair_segments gives at least one pair
    return n, r_factor


def _check_dictionary(name: str, value: Any) -> None:
    """A named dictionary (:data:`DICTIONARIES`) or a callable feature map."""
    if not callable(value) and not (isinstance(value, str) and value in DICTIONARIES):
        raise ValueError(
            f"unknown {name} {value!r}; expected one of {', '.join(DICTIONARIES)} or a callable"
        )


class EDMD(TransferOperator):
    """Extended DMD (Williams et al. 2015): least squares on a fixed dictionary.

    Parameters
    ----------
    dictionary : {"chebyshev", "monomial"} or callable, default "chebyshev"
        Feature map; a callable maps states ``(n, *state_shape)`` to ``(n, r)``.
    degree : int, default 3
        Highest total degree of the polynomial dictionaries.
    domain : (low, high), optional
        Box of the Chebyshev dictionary; ``None`` uses the bounding box of the training
        states (``domain_``).
    ridge : float, default 0.0
        Tikhonov regularisation added to ``Cx``.
    rtol : float, optional
        Relative rank cut-off of the pseudo-inverse.
    constant : {"auto", True, False}, default "auto"
        Add the constant function unless the dictionary spans it (the polynomial ones do).
    dt : float, default 1.0
        Time between frames (units of the timescales).
    lag : int, optional
        Lag in frames between paired states of trajectories (default 1); for pre-paired
        data, the lag they were paired at (see :class:`dpnets.TransferOperator`).
    stabilize : bool, default False
        Project eigenvalues of modulus above 1 onto the unit circle (the stabilised
        estimate; see :class:`dpnets.TransferOperator`).

    Attributes
    ----------
    dictionary_ : callable
        The feature map used (a :class:`ChebyshevFeatures`/:class:`MonomialFeatures` for
        named dictionaries); other fitted attributes as :class:`dpnets.TransferOperator`.

    Examples
    --------
    >>> import numpy as np
    >>> trajectory = np.random.default_rng(0).uniform(size=(500, 1))
    >>> EDMD("chebyshev", degree=6, domain=(0, 1)).fit(trajectory).eig().shape
    (7,)
    """

    def __init__(
        self,
        dictionary: str | Callable[[np.ndarray], Any] = "chebyshev",
        degree: int = 3,
        domain: Sequence[Any] | None = None,
        ridge: float = 0.0,
        rtol: float | None = None,
        constant: str | bool = "auto",
        dt: float = 1.0,
        lag: int | None = None,
        stabilize: bool = False,
    ):
        self.dictionary = dictionary
        self.degree = degree
        self.domain = domain
        self.ridge = ridge
        self.rtol = rtol
        self.constant = constant
        self.dt = dt
        self.lag = lag
        self.stabilize = stabilize

    #: accepted values (:mod:`dpnets.params`), checked by ``fit`` and by :func:`dpnets.load`
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "dictionary": _check_dictionary,
        "degree": satisfies(check_degree),
        "domain": checked_in_fit("ChebyshevFeatures (a box (low, high) or None)"),
        **regression_constraints("ridge", "rtol", "constant", "dt", "lag"),
        "stabilize": boolean(),
    }

    def _fit_features(self, data: Any, lag: int | None, log_weights: Any = None) -> Any:
        """The fitted dictionary (``dictionary_``)."""
        return self.dictionary_

    def _build_dictionary(self, data: Any, lag: int | None) -> Any:
        if callable(self.dictionary):
            return self.dictionary
        _check_dictionary("dictionary", self.dictionary)
        if self.dictionary == "monomial":
            return MonomialFeatures(self.degree)
        domain = self.domain
        if domain is None:
            if is_streaming(data):
                raise TypeError("give the Chebyshev domain explicitly for streamed data")
            low, high = _bounding_box(data, lag)
            pad = np.where(high > low, 0.0, 0.5)  # constant coordinates: a unit box
            domain = (low - pad, high + pad)
        return ChebyshevFeatures(self.degree, domain)

    def fit(self, X: Any, y: Any = None, *, lag: int | None = None) -> EDMD:
        """Build the dictionary (and its domain) and fit the operator (Eq. 15); ``fit(X, Y)`` is
        ``fit((X, Y))``."""
        data, lag = fit_data(self, X, y, lag)
        self._check_params()
        self.dictionary_ = self._build_dictionary(data, lag)
        self._fit_operator(data, lag)
        return self

    def _partial_features(self) -> Any:
        """The dictionary of a fresh :meth:`partial_fit`: it must not depend on the data."""
        if self.dictionary == "chebyshev" and self.domain is None:
            raise ValueError(
                "EDMD('chebyshev', domain=None) takes its box from the data in fit: give "
                "domain=(low, high), or call fit on the first piece and partial_fit on the next"
            )
        self.dictionary_ = self._build_dictionary(None, None)
        return self.dictionary_


def _bounding_box(data: Any, lag: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Coordinate-wise minimum and maximum of every state of ``data`` (both sides of the
    pairs), read chunk by chunk."""
    low = high = None
    seen: list[int] = []
    for seg in pair_segments(data, resolve_lag(data, lag)[0]):
        for states in (seg.x_states, seg.y_states):
            if id(states) in seen:
                continue
            seen.append(id(states))
            for sl in chunks(states.shape[0], FIT_CHUNK):
                part = np.asarray(states[sl], dtype=np.float64).reshape(sl.stop - sl.start, -1)
                lo, hi = part.min(axis=0), part.max(axis=0)
                low = lo if low is None else np.minimum(low, lo)
                high = hi if high is None else np.maximum(high, hi)
    assert low is not None and high is not None
    return low, high
