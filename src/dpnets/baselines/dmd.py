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
from typing import Any

import numpy as np
import scipy.linalg

from dpnets.data import is_streaming, pairs, resolve_lag
from dpnets.operators import TransferOperator

from .dictionaries import DICTIONARIES, ChebyshevFeatures, MonomialFeatures, ProjectionFeatures

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

    Attributes
    ----------
    projection_ : ProjectionFeatures or None
        The fitted POD projection (``None`` when ``rank`` is None).
    singular_values_ : ndarray or None
        Singular values of ``X / sqrt(n)`` (all of them), when ``rank`` is given.

    Other fitted attributes are those of :class:`dpnets.TransferOperator`; ``modes()`` maps
    back to the full state.

    Examples
    --------
    >>> from dpnets.baselines import DMD
    >>> DMD(rank=2).fit(trajectory).eig()  # doctest: +SKIP
    """

    def __init__(
        self,
        rank: int | None = None,
        ridge: float = 0.0,
        rtol: float | None = None,
        constant: str | bool = False,
        dt: float = 1.0,
    ):
        self.rank = rank
        self.ridge = ridge
        self.rtol = rtol
        self.constant = constant
        self.dt = dt

    def _fit_features(self, data: Any, lag: int | None) -> ProjectionFeatures | None:
        """The fitted POD projection, or ``None`` (identity on the full state)."""
        return self.projection_

    def fit(self, data: Any, lag: int | None = None) -> DMD:
        """Fit on ``data`` (same forms as :meth:`dpnets.TransferOperator.fit`).

        Raises
        ------
        ValueError
            If ``rank`` is not a positive integer or exceeds ``min(n, d)``.
        TypeError
            For streamed data (a Dataset/DataLoader) with ``rank`` given.
        """
        self.projection_ = None
        self.singular_values_ = None
        if self.rank is not None:
            if (
                isinstance(self.rank, bool)
                or not isinstance(self.rank, (int, np.integer))
                or self.rank < 1
            ):
                raise ValueError(f"rank must be a positive integer or None, got {self.rank!r}")
            if is_streaming(data):
                raise TypeError("DMD with rank needs in-memory data (array, list or (X, Y))")
            x = pairs(data, resolve_lag(data, lag)[0]).X
            flat = np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)
            if self.rank > min(flat.shape):
                raise ValueError(
                    f"rank={self.rank} exceeds min(n_samples, n_coordinates) = {min(flat.shape)}"
                )
            _, s, vt = scipy.linalg.svd(flat, full_matrices=False)
            self.singular_values_ = s / np.sqrt(flat.shape[0])
            self.projection_ = ProjectionFeatures(vt[: int(self.rank)].T)
        super().fit(data, lag)
        return self


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

    Attributes
    ----------
    dictionary_ : callable
        The feature map used (a :class:`ChebyshevFeatures`/:class:`MonomialFeatures` for
        named dictionaries); other fitted attributes as :class:`dpnets.TransferOperator`.

    Examples
    --------
    >>> EDMD("chebyshev", degree=6, domain=(0, 1)).fit(trajectory).eig()  # doctest: +SKIP
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
    ):
        self.dictionary = dictionary
        self.degree = degree
        self.domain = domain
        self.ridge = ridge
        self.rtol = rtol
        self.constant = constant
        self.dt = dt

    def _fit_features(self, data: Any, lag: int | None) -> Any:
        """The fitted dictionary (``dictionary_``)."""
        return self.dictionary_

    def _build_dictionary(self, data: Any, lag: int | None) -> Any:
        if callable(self.dictionary):
            return self.dictionary
        if self.dictionary not in DICTIONARIES:
            raise ValueError(
                f"unknown dictionary {self.dictionary!r}; expected one of "
                f"{', '.join(DICTIONARIES)} or a callable"
            )
        if self.dictionary == "monomial":
            return MonomialFeatures(self.degree)
        domain = self.domain
        if domain is None:
            if is_streaming(data):
                raise TypeError("give the Chebyshev domain explicitly for streamed data")
            p = pairs(data, resolve_lag(data, lag)[0])
            flat = np.asarray(p.x_states, dtype=np.float64).reshape(p.x_states.shape[0], -1)
            if p.y_states is not p.x_states:
                y = np.asarray(p.y_states, dtype=np.float64).reshape(p.y_states.shape[0], -1)
                flat = np.concatenate([flat, y])
            low, high = flat.min(axis=0), flat.max(axis=0)
            pad = np.where(high > low, 0.0, 0.5)  # constant coordinates: a unit box
            domain = (low - pad, high + pad)
        return ChebyshevFeatures(self.degree, domain)

    def fit(self, data: Any, lag: int | None = None) -> EDMD:
        """Build the dictionary (and its domain) and fit the operator (Eq. 15)."""
        self.dictionary_ = self._build_dictionary(data, lag)
        super().fit(data, lag)
        return self
