"""Kernel DMD: kernel ridge, principal-component and reduced-rank regression of the transfer
operator in an RKHS (Williams et al. 2015; Kostic et al. 2022), exact and with Nyström
sketching (Meanti et al. 2023).

Notation (paper App. A.2 and Kostic et al. 2022): for pairs ``(x_i, y_i)``, ``i < n``, the
sampling operators ``S f = n^{-1/2}(f(x_i))_i`` and ``Z f = n^{-1/2}(f(y_i))_i`` give the
covariance ``C = S^* S``, the cross-covariance ``S^* Z`` and the normalised Gram matrices
``K_X = S S^* = k(X, X) / n`` and ``K_Y = Z Z^* = k(Y, Y) / n``. With ``C_l = C + ridge I``:

* ``"krr"``  kernel ridge regression ``G = C_l^{-1} S^* Z`` (Williams' kernel DMD with a
  Tikhonov term);
* ``"pcr"``  principal-component regression: ``C_l`` truncated to its ``rank`` leading
  eigen-directions (kernel PCA) before inversion;
* ``"rrr"``  reduced-rank regression ``G = C_l^{-1/2} [[C_l^{-1/2} S^* Z]]_rank``, the
  rank-``r`` estimator minimising the ridge-regularised risk (Kostic et al. 2022).

Every such estimator is ``G = A A^* S^* Z`` with ``A: R^r -> H`` (the whitened leading
directions), so it acts on the ``r``-dimensional feature map ``phi(x) = (A^* k(x, .))``,
``phi(x) = k(x, centres) @ weights_``. The fitted model is a :class:`dpnets.TransferOperator`
on ``phi`` whose covariance inverse is replaced by the identity:
``operator_ = phi_X^T phi_Y / n`` (the matrix ``A^* S^* Z S^* A``, which has the non-zero
eigenvalues of ``G``), forecasts ``E[f(X_t) | x] ~ phi(x)^T operator_^{t-1} phi_X^T F / n``
equal the kernel formula ``k(x, X) U (V^T K_YX U)^{t-1} V^T F`` term by term, and the right
eigenfunctions ``phi(x)^T r_i`` are the kernel ones ``k(x, X) U v_i`` (Eq. 16-17). Left
eigenfunctions are the RKHS-adjoint ones, ``k(x, Y) V w_i``, normalised biorthogonally in
the RKHS.

The Nyström estimators sketch the RKHS with ``m`` centres drawn from the training states:
``psi(x) = k(x, centres) K_cc^{+1/2}`` are orthonormal coordinates of the span of
``k(., c_j)``; the same three estimators are then computed on ``psi`` in ``O(n m)`` memory
(the ``n x n`` Gram matrix is never formed). With every training state as a centre the span
contains every ``k(., x_i)`` and ``k(., y_i)``, and the estimators equal the exact ones.

Kernels (extra ``dpnets[kernels]``: scikit-learn): ``"rbf"`` (Gaussian,
``exp(-|x - y|^2 / (2 l^2))``), ``"absexp"`` (``exp(-|x - y|_2 / l)``, Matérn 1/2, the
paper's AbsExp), ``"laplacian"`` (``exp(-|x - y|_1 / l)``; equal to AbsExp in one dimension),
``"poly"`` (``(x.y / l^2 + coef0)^degree``), ``"linear"``
(``x.y``), or any callable ``k(A, B) -> (len(A), len(B))`` Gram matrix on flattened states.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import scipy.linalg

from dpnets import diagnostics
from dpnets.base import fit_data
from dpnets.exceptions import check_is_fitted
from dpnets.linalg import default_rtol
from dpnets.pairs import lagged_pairs, resolve_lag
from dpnets.params import Constraint, boolean, count, real, seed
from dpnets.spectral import DiscreteTimeModel, regression_constraints
from dpnets.states import check_states, chunks, is_streaming
from dpnets.training import progress_bar

__all__ = ["Kernel", "KernelFeatures", "KernelDMD", "NystromKernelDMD", "KERNELS", "ESTIMATORS"]

#: Named kernels.
KERNELS = ("rbf", "laplacian", "absexp", "poly", "linear")
#: Estimators of the operator.
ESTIMATORS = ("rrr", "pcr", "krr")

_CHUNK_ELEMENTS = 1 << 23  # kernel blocks of at most ~64 MB when evaluating features


def _sklearn_pairwise():
    try:
        from sklearn.metrics import pairwise
    except ImportError as exc:  # pragma: no cover - optional dependency
        raise ImportError(
            "this kernel needs scikit-learn; install the extra: pip install 'dpnets[kernels]'"
        ) from exc
    return pairwise


def _flat(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)


class Kernel:
    """A named positive-definite kernel on flattened states, saveable by its config.

    Parameters
    ----------
    name : {"rbf", "laplacian", "absexp", "poly", "linear"}
    length_scale : float, default 1.0
        ``l`` in the formulas of the module docstring (ignored by ``"linear"``).
    degree : int, default 3
        Degree of ``"poly"``.
    coef0 : float, default 1.0
        Offset of ``"poly"``.
    """

    def __init__(
        self, name: str, length_scale: float = 1.0, degree: int = 3, coef0: float = 1.0
    ) -> None:
        if name not in KERNELS:
            raise ValueError(f"unknown kernel {name!r}; expected one of {', '.join(KERNELS)}")
        if not (np.isfinite(length_scale) and length_scale > 0):
            raise ValueError(f"length_scale must be finite and > 0, got {length_scale}")
        if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 1:
            raise ValueError(f"degree must be a positive integer, got {degree!r}")
        self.name = name
        self.length_scale = float(length_scale)
        self.degree = int(degree)
        self.coef0 = float(coef0)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Gram matrix ``k(a_i, b_j)`` of two sets of flattened states.

        The kernels of a length-scale depend on ``a / l`` and ``b / l`` only, so both are
        computed in units of a power of two near ``l`` (an exact rescaling): states of any
        scale (``1e-300 x``, ``1e300 x``) with a length-scale of their scale give the Gram
        matrix of ``x`` at ``l / scale``, with no under- or overflow of the distances."""
        if self.name == "linear":
            return a @ b.T
        pw = _sklearn_pairwise()
        unit = _power_of_two(self.length_scale)
        a, b = a / unit, b / unit
        ell = self.length_scale / unit
        if self.name == "rbf":
            return pw.rbf_kernel(a, b, gamma=0.5 / ell**2)
        if self.name == "laplacian":
            return pw.laplacian_kernel(a, b, gamma=1.0 / ell)
        if self.name == "absexp":
            return np.exp(-pw.euclidean_distances(a, b) / ell)
        return pw.polynomial_kernel(a, b, degree=self.degree, gamma=1.0 / ell**2, coef0=self.coef0)

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "length_scale": self.length_scale,
            "degree": self.degree,
            "coef0": self.coef0,
        }

    def __repr__(self) -> str:
        return f"Kernel({', '.join(f'{k}={v!r}' for k, v in self.get_config().items())})"


def _gram(kernel: Callable[[np.ndarray, np.ndarray], Any], a: np.ndarray, b: np.ndarray):
    g = np.asarray(kernel(a, b), dtype=np.float64)
    if g.shape != (a.shape[0], b.shape[0]):
        raise ValueError(
            f"kernel must return a ({a.shape[0]}, {b.shape[0]}) Gram matrix, got {g.shape}"
        )
    if not np.all(np.isfinite(g)):
        raise ValueError("kernel returned NaN or inf values")
    return g


class KernelFeatures:
    """Finite feature map ``x -> k(x_flat, centres) @ weights`` of a fitted kernel estimator.

    Evaluated in row blocks so that at most ``~8e6`` kernel entries exist at a time.
    """

    def __init__(self, kernel: Callable, centres: np.ndarray, weights: np.ndarray) -> None:
        self.kernel = kernel
        self.centres = centres
        self.weights = weights

    def __call__(self, x: Any) -> np.ndarray:
        flat = _flat(check_states(x, "X"))
        if flat.shape[1] != self.centres.shape[1]:
            raise ValueError(
                f"states have {flat.shape[1]} coordinates, the kernel model expects "
                f"{self.centres.shape[1]}"
            )
        size = max(1, _CHUNK_ELEMENTS // max(1, self.centres.shape[0]))
        out = [
            _gram(self.kernel, flat[sl], self.centres) @ self.weights
            for sl in chunks(flat.shape[0], size)
        ]
        return np.concatenate(out) if out else np.zeros((0, self.weights.shape[1]))


def _power_of_two(value: float) -> float:
    """The power of two nearest ``value`` (> 0): dividing by it is exact."""
    exponent = int(np.round(np.log2(value))) if np.isfinite(value) and value > 0 else 0
    return float(2.0 ** np.clip(exponent, -1000, 1000))


def _check_inner_products(x: np.ndarray, ell: float, name: str) -> None:
    """Refuse states whose inner products ``x.y / l^2`` (the ``poly`` and ``linear``
    kernels) overflow or underflow float64, naming the scale: the Gram matrix would be inf,
    or silently constant (``coef0^degree``)."""
    top = float(np.max(np.abs(x))) if x.size else 0.0
    if top == 0.0:
        return
    exponent = 2.0 * (np.log2(top) - np.log2(ell))
    if -1000.0 < exponent < 1000.0:
        return
    what = "x.y" if name == "linear" else f"x.y / length_scale^2 (length_scale {ell:g})"
    fix = "rescale the data" if name == "linear" else "give a length_scale of the data's scale"
    raise ValueError(
        f"states of magnitude {top:.3g} with the {name!r} kernel: the inner products {what} "
        f"{'overflow' if exponent > 0 else 'underflow'} float64; {fix}, or use a kernel of "
        "distances ('rbf', 'laplacian', 'absexp'), which are computed in units of their "
        "length-scale"
    )


def _median_distance(x: np.ndarray, metric: str) -> float:
    """Median pairwise distance of at most 1000 evenly spaced states (median heuristic),
    computed in units of the states' spread (a power of two: exact), so that states of
    tiny or huge scale neither underflow nor overflow the distances."""
    step = max(1, x.shape[0] // 1000)
    sub = x[::step][:1000]
    spread = float(np.max(np.abs(sub - sub.mean(0)))) if sub.size else 0.0
    unit = _power_of_two(spread)
    d = _sklearn_pairwise().pairwise_distances(sub / unit, metric=metric)
    d = d[np.triu_indices(sub.shape[0], k=1)]
    d = d[d > 0]
    return float(np.median(d)) * unit if d.size else 1.0


def _reduce(
    s: np.ndarray, ridge: float, rank: int | None, estimator: str, whitened_out: Any = None
) -> np.ndarray:
    """Coefficients ``A'`` (m, r) of the estimator in the eigenbasis of ``C`` (eigenvalues ``s``,
    decreasing).

    ``G = A A^* S^* Z`` with ``A = B A'`` and ``B`` the orthonormal eigenbasis. ``whitened_out``
    is a callable returning ``D H D`` with ``D = (s + ridge)^{-1/2}`` and ``H = (S^* K_Y S)`` in
    that basis, needed by ``"rrr"`` only.
    """
    d = 1.0 / np.sqrt(s + ridge)
    m = s.shape[0]
    if rank is None or rank >= m or estimator == "krr":
        return np.diag(d)
    if estimator == "pcr":
        return np.diag(d)[:, :rank]
    e = whitened_out()
    e = 0.5 * (e + e.T)
    _, p = scipy.linalg.eigh(e, subset_by_index=[m - rank, m - 1])
    return d[:, None] * p[:, ::-1]


def _check_kernel(name: str, value: Any) -> None:
    if not (isinstance(value, str) or callable(value)):
        raise TypeError(f"{name} must be a name or a callable k(A, B) -> Gram matrix")
    if isinstance(value, str) and value not in KERNELS:
        raise ValueError(f"unknown {name} {value!r}; expected one of {', '.join(KERNELS)}")


def _check_estimator(name: str, value: Any) -> None:
    if value not in ESTIMATORS:
        raise ValueError(f"unknown {name} {value!r}; expected one of {', '.join(ESTIMATORS)}")


class _KernelRegression(DiscreteTimeModel):
    """Shared fit/transform/eigenfunctions of the exact and Nyström kernel estimators."""

    kernel: Any
    rank: int | None
    estimator: str
    length_scale: float | None
    degree: int
    coef0: float

    def solve_lstsq(self, rhs: np.ndarray) -> np.ndarray:
        """The fitted features are orthonormal on the training inputs up to the ridge (the
        kernel estimator whitens them), so least squares reduces to ``Phi_X^T F / n``."""
        return rhs

    # ------------------------------------------------------------------ validation
    #: accepted values (:mod:`dpnets.params`), checked by ``fit`` and by :func:`dpnets.load`
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "kernel": _check_kernel,
        "rank": count(),
        "estimator": _check_estimator,
        **regression_constraints("ridge"),
        "length_scale": real(0.0, low_open=True, none=True),
        "degree": count(none=False),
        "coef0": real(),
        **regression_constraints("rtol", "lag", "dt"),
    }

    def _check_params(self) -> None:
        super()._check_params()
        if self.estimator == "krr" and self.rank is not None:
            raise ValueError("estimator='krr' is full rank: use rank=None, or 'pcr'/'rrr'")

    def _resolve_kernel(self, x: np.ndarray) -> Callable:
        if callable(self.kernel):
            return self.kernel
        ell = self.length_scale
        if ell is None:
            if self.kernel in ("rbf", "absexp"):
                ell = _median_distance(x, "euclidean")
            elif self.kernel == "laplacian":
                ell = _median_distance(x, "manhattan")
            else:
                ell = 1.0
        if self.kernel in ("poly", "linear"):
            _check_inner_products(x, 1.0 if self.kernel == "linear" else ell, self.kernel)
        return Kernel(self.kernel, ell, self.degree, self.coef0)

    def _rtol(self, dim: int) -> float:
        return default_rtol(dim) if self.rtol is None else float(self.rtol)

    def _keep(self, s: np.ndarray, smax: float, dim: int) -> np.ndarray:
        return s > self._rtol(dim) * smax if smax > 0 else np.zeros_like(s, dtype=bool)

    def _effective_rank(self, m: int) -> int | None:
        if self.rank is None:
            return None
        if self.rank > m:
            warnings.warn(
                f"rank={self.rank} exceeds the numerical rank {m} of the kernel covariance; "
                f"using {m}",
                stacklevel=3,
            )
            return m
        return int(self.rank)

    # ------------------------------------------------------------------ fitting
    def _solve(self, p: Any, x: np.ndarray, y: np.ndarray, kernel: Callable) -> dict:
        raise NotImplementedError  # pragma: no cover

    def fit(self, X: Any, y: Any = None, *, lag: int | None = None) -> _KernelRegression:
        """Fit the estimator on ``X`` (array, list of trajectories or ``(X, Y)``), paired at
        the parameter ``lag`` (``fit(X, Y)`` is ``fit((X, Y))``; ``fit(X, lag=k)`` is deprecated).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            For invalid parameters or data (NaN/inf, shapes, lag too long, fewer than two
            pairs).
        TypeError
            For a torch Dataset/DataLoader (kernel methods need the data in memory).
        """
        self._check_params()
        data, lag = fit_data(self, X, y, lag)
        if is_streaming(data):
            raise TypeError("kernel estimators need in-memory data (array, list or (X, Y))")
        p = lagged_pairs(data, resolve_lag(data, lag)[0])
        n = len(p)
        if n < 2:
            raise ValueError(f"at least 2 pairs are needed, got {n}")
        x, y_states = _flat(p.X), _flat(p.Y)
        kernel = self._resolve_kernel(x)
        sol = self._solve(p, x, y_states, kernel)
        phi_x, phi_y = sol["phi_x"], sol["phi_y"]
        r = phi_x.shape[1]
        self.kernel_ = kernel
        self.features_ = KernelFeatures(kernel, sol["centres"], sol["weights"])
        self.left_features_ = KernelFeatures(kernel, sol["left_centres"], sol["left_weights"])
        self.features_x_ = phi_x
        self.features_mean_ = phi_x.mean(0)
        self.cx_ = phi_x.T @ phi_x / n
        self.cxy_ = phi_x.T @ phi_y / n
        # phi is whitened by construction: the operator needs no covariance inverse
        self.operator_ = self.cxy_
        self.state_coef_ = phi_x.T @ y_states / n
        self.cx_rank_ = r
        self.n_samples_, self.n_features_ = n, r
        self.state_shape_ = tuple(p.state_shape)
        self.state_min_ = np.minimum(x.min(0), y_states.min(0))
        self.state_max_ = np.maximum(x.max(0), y_states.max(0))
        self.lag_ = resolve_lag(data, lag)[1]
        self._set_spectrum()
        diagnostics.warn(self._diagnostics())
        return self

    # ------------------------------------------------------------------ downstream
    def eigenfunctions(self, X: Any, side: str = "right") -> np.ndarray:
        """Eigenfunctions of the kernel estimator at states ``X``, complex (n, r).

        ``side="right"``: ``phi(x)^T r_i = k(x, X) U v_i`` (unit empirical norm, Eq. 16).
        ``side="left"``: the complex conjugate of the RKHS-adjoint eigenfunctions
        ``g_i = Z^* V w_i``, i.e. ``k(x, Y) V w_i`` with ``<g_i, f_j>_H = delta_ij`` for the
        right eigenfunctions ``f_j`` (as in kernel DMD; zero for eigenvalues that vanish).
        """
        if side != "left":
            return super().eigenfunctions(X, side)
        check_is_fitted(self, "operator_")
        g = self.left_features_(self._check_X(X))
        lam = self.eigvals_
        small = np.abs(lam) <= np.finfo(np.float64).eps * max(1.0, float(np.abs(lam).max()))
        scale = np.where(small, 0.0, 1.0 / np.where(small, 1.0, lam))
        return g @ (self.left_eigvecs_.conj() * scale[None, :])


#: above this many pairs, exact :class:`KernelDMD` warns and names :class:`NystromKernelDMD`
#: (its ``O(n^3)`` eigendecomposition of ``n x n`` Gram matrices; timing:
#: ``benchmarks/README.md``)
EXACT_MAX_SAMPLES = 5000
#: from this many pairs on, exact :class:`KernelDMD` shows its stages on a progress bar
PROGRESS_MIN_SAMPLES = 2000


class _Stages:
    """A progress bar over the named stages of a long fit (no bar when disabled or
    without tqdm)."""

    def __init__(self, enabled: bool, total: int, desc: str) -> None:
        bar = progress_bar(range(total), enabled, desc, total)
        self.bar = bar if hasattr(bar, "update") else None

    def __call__(self, stage: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(stage, refresh=False)
            self.bar.update()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class KernelDMD(_KernelRegression):
    """Kernel DMD / kernel operator regression (Williams et al. 2015; Kostic et al. 2022).

    Exact estimators from the ``n x n`` Gram matrices (cost ``O(n^3)``; keep ``n`` to a few
    thousand, or use :class:`NystromKernelDMD`). See the module docstring for the formulas.

    Parameters
    ----------
    kernel : {"rbf", "laplacian", "absexp", "poly", "linear"} or callable, default "rbf"
        A callable ``k(A, B)`` receives flattened float64 states ``(na, d)``, ``(nb, d)``.
    rank : int, optional
        Rank ``r`` of the ``"pcr"``/``"rrr"`` estimators; ``None`` keeps every direction
        (all three estimators then coincide with kernel ridge regression).
    estimator : {"rrr", "pcr", "krr"}, default "rrr"
    ridge : float, default 1e-6
        Tikhonov parameter ``ridge`` added to the covariance ``C = S^* S`` (equivalently
        ``n * ridge`` added to the raw Gram matrix).
    length_scale : float, optional
        Kernel length-scale ``l``; ``None`` uses the median heuristic (median pairwise
        distance of the training inputs) for ``"rbf"``/``"laplacian"`` and 1 for ``"poly"``.
    degree : int, default 3
        Degree of the polynomial kernel.
    coef0 : float, default 1.0
        Offset of the polynomial kernel.
    rtol : float, optional
        Relative cut-off on the eigenvalues of ``K_X`` (default ``max(n eps, 1e-12)``).
    lag : int, optional
        Lag in frames between paired states of trajectories (default 1); for pre-paired
        data, the lag they were paired at (see :class:`dpnets.TransferOperator`).
    dt : float, default 1.0
        Time between frames: timescales and ``predict(..., unit="time")`` in its units.
    progress : bool, default True
        Show the stages of fits of at least ``PROGRESS_MIN_SAMPLES`` (2000) pairs on a
        progress bar (needs tqdm). Above ``EXACT_MAX_SAMPLES`` (5000) pairs ``fit`` warns
        and names :class:`NystromKernelDMD` (the exact fit is ``O(n^3)`` in the number of
        pairs).

    Attributes
    ----------
    kernel_ : Kernel or callable
        The kernel with its resolved length-scale.
    features_ : KernelFeatures
        ``phi(x) = k(x, X) @ W``, ``W`` of shape ``(n, r)``.
    n_features_ : int
        ``r`` (the numerical rank of ``K_X`` when ``rank=None``).

    Notes
    -----
    Other fitted attributes as :class:`dpnets.TransferOperator` (``operator_`` is
    ``phi_X^T phi_Y / n``).

    Examples
    --------
    >>> import numpy as np
    >>> from dpnets.baselines import KernelDMD
    >>> t = np.arange(300)
    >>> trajectory = np.stack([np.cos(0.3 * t), np.sin(0.3 * t)], axis=1)
    >>> model = KernelDMD("rbf", rank=5, ridge=1e-6, progress=False).fit(trajectory)
    >>> model.eig().shape, model.predict(trajectory[:10], t=3).shape
    ((5,), (10, 2))
    """

    def __init__(
        self,
        kernel: str | Callable[[np.ndarray, np.ndarray], Any] = "rbf",
        *,
        rank: int | None = None,
        estimator: str = "rrr",
        ridge: float = 1e-6,
        length_scale: float | None = None,
        degree: int = 3,
        coef0: float = 1.0,
        rtol: float | None = None,
        lag: int | None = None,
        dt: float = 1.0,
        progress: bool = True,
    ) -> None:
        self.kernel = kernel
        self.rank = rank
        self.estimator = estimator
        self.ridge = ridge
        self.length_scale = length_scale
        self.degree = degree
        self.coef0 = coef0
        self.rtol = rtol
        self.lag = lag
        self.dt = dt
        self.progress = progress

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **_KernelRegression._parameter_constraints,
        "progress": boolean(),
    }

    def _solve(self, p: Any, x: np.ndarray, y: np.ndarray, kernel: Callable) -> dict:
        n = x.shape[0]
        if n > EXACT_MAX_SAMPLES:
            warnings.warn(
                f"exact KernelDMD on {n} pairs (above {EXACT_MAX_SAMPLES}) builds {n} x {n} "
                "Gram matrices and eigendecomposes them, O(n^3): use "
                "NystromKernelDMD(kernel, n_centers=...) for large data",
                stacklevel=3,
            )
        stage = _Stages(bool(self.progress) and n >= PROGRESS_MIN_SAMPLES, 4, "KernelDMD")
        try:
            return self._solve_exact(x, y, kernel, stage)
        finally:
            stage.close()

    def _solve_exact(self, x: np.ndarray, y: np.ndarray, kernel: Callable, stage: _Stages) -> dict:
        n = x.shape[0]
        kx = _gram(kernel, x, x) / n  # K_X = S S^*
        stage("K_X")
        kx = 0.5 * (kx + kx.T)
        rank = self.rank
        if self.estimator == "pcr" and rank is not None and rank < n:
            s, q = scipy.linalg.eigh(kx, subset_by_index=[n - rank, n - 1])
        else:
            s, q = scipy.linalg.eigh(kx)
        s, q = s[::-1], q[:, ::-1]
        stage("eigh")
        keep = self._keep(s, float(s[0]), n)
        s, q = s[keep], q[:, keep]
        rank = self._effective_rank(s.shape[0])
        lam = float(self.ridge)

        def whitened_out() -> np.ndarray:
            ky = _gram(kernel, y, y) / n  # K_Y = Z Z^*
            g = q.T @ ky @ q
            w = np.sqrt(s / (s + lam))  # D s^{1/2}: S^* K_Y S in the basis b_j = S^* q_j / s_j^.5
            return w[:, None] * g * w[None, :]

        a = _reduce(s, lam, rank, self.estimator, whitened_out)  # (m, r)
        stage("regression")
        # phi(x) = psi_b(x) @ a with psi_b(x) = k(x, X) q s^{-1/2} / sqrt(n)
        weights = (q / np.sqrt(s)[None, :]) @ a / np.sqrt(n)
        phi_x = np.sqrt(n) * (q * np.sqrt(s)[None, :]) @ a  # exact: k(X, X) q = n q s
        phi_y = _gram(kernel, y, x) @ weights
        stage("K_YX")
        return {
            "phi_x": phi_x,
            "phi_y": phi_y,
            "centres": x,
            "weights": weights,
            "left_centres": y,
            "left_weights": phi_x / n,
        }


class NystromKernelDMD(_KernelRegression):
    """Kernel operator regression with Nyström sketching (Meanti et al. 2023).

    ``m = n_centers`` centres are drawn uniformly without replacement from the training states
    (initial and evolved states together; one sketch serves both sides, so the estimator maps
    the sketched space to itself and can be iterated). With ``psi(x) = k(x, centres)
    K_cc^{+1/2}`` the covariances ``psi_X^T psi_X / n``, ``psi_X^T psi_Y / n`` are ``m x m`` and
    the ``"krr"``, ``"pcr"`` and ``"rrr"`` estimators of :class:`KernelDMD` are computed in
    ``O(n m^2 + m^3)`` time and ``O(n m)`` memory. With ``n_centers=None`` (or at least the
    number of training states) every state is a centre and the result equals
    :class:`KernelDMD` up to rounding.

    Parameters
    ----------
    kernel, rank, estimator, ridge, length_scale, degree, coef0, rtol, lag, dt
        As :class:`KernelDMD` (``rtol`` also cuts the eigenvalues of ``K_cc``).
    n_centers : int or None, default 1000
        Number of Nyström centres ``m``.
    seed : int, optional
        Seed of the centre sampling.

    Attributes
    ----------
    centres_ : ndarray (m, d)
        The flattened centres.
    """

    def __init__(
        self,
        kernel: str | Callable[[np.ndarray, np.ndarray], Any] = "rbf",
        *,
        n_centers: int | None = 1000,
        rank: int | None = None,
        estimator: str = "rrr",
        ridge: float = 1e-6,
        length_scale: float | None = None,
        degree: int = 3,
        coef0: float = 1.0,
        rtol: float | None = None,
        seed: int | None = None,
        lag: int | None = None,
        dt: float = 1.0,
    ) -> None:
        self.kernel = kernel
        self.n_centers = n_centers
        self.rank = rank
        self.estimator = estimator
        self.ridge = ridge
        self.length_scale = length_scale
        self.degree = degree
        self.coef0 = coef0
        self.rtol = rtol
        self.seed = seed
        self.lag = lag
        self.dt = dt

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **_KernelRegression._parameter_constraints,
        "n_centers": count(),
        "seed": seed(),
    }

    def _states(self, p: Any) -> np.ndarray:
        """The distinct training states (initial and evolved), flattened."""
        if p.x_states is p.y_states:
            idx = np.unique(np.concatenate([p.i, p.j]))
            return _flat(p.x_states[idx])
        return np.concatenate([_flat(p.X), _flat(p.Y)])

    def _solve(self, p: Any, x: np.ndarray, y: np.ndarray, kernel: Callable) -> dict:
        n = x.shape[0]
        states = self._states(p)
        m = states.shape[0] if self.n_centers is None else min(int(self.n_centers), len(states))
        if m < len(states):
            rng = np.random.default_rng(self.seed)
            states = states[np.sort(rng.choice(len(states), size=m, replace=False))]
        centres = states
        kcc = _gram(kernel, centres, centres)
        sc, qc = scipy.linalg.eigh(0.5 * (kcc + kcc.T))
        sc, qc = sc[::-1], qc[:, ::-1]
        keep = self._keep(sc, float(sc[0]), m)
        root = qc[:, keep] / np.sqrt(sc[keep])[None, :]  # K_cc^{+1/2} restricted: psi = k R
        psi_x = _gram(kernel, x, centres) @ root  # (n, m')
        psi_y = _gram(kernel, y, centres) @ root
        cx = psi_x.T @ psi_x / n
        s, q = scipy.linalg.eigh(0.5 * (cx + cx.T))
        s, q = s[::-1], q[:, ::-1]
        keep = self._keep(s, float(s[0]), m)
        s, q = s[keep], q[:, keep]
        rank = self._effective_rank(s.shape[0])
        lam = float(self.ridge)
        psi_ex = psi_x @ q  # eigen-coordinates: psi_ex^T psi_ex / n = diag(s)

        def whitened_out() -> np.ndarray:
            b = psi_ex.T @ psi_y / n  # C_xy in the eigenbasis; H = B B^T
            d = 1.0 / np.sqrt(s + lam)
            db = d[:, None] * b
            return db @ db.T

        a = _reduce(s, lam, rank, self.estimator, whitened_out)
        weights = root @ (q @ a)
        phi_x = psi_ex @ a
        phi_y = psi_y @ (q @ a)
        self.centres_ = centres
        return {
            "phi_x": phi_x,
            "phi_y": phi_y,
            "centres": centres,
            "weights": weights,
            "left_centres": centres,
            "left_weights": root @ (psi_y.T @ phi_x) / n,
        }
