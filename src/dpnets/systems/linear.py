r"""Stable linear Gaussian (vector autoregressive) systems.

.. math::

    x_{t+1} = A x_t + \varepsilon_t, \qquad \varepsilon_t \sim \mathcal{N}(0, Q).

For spectral radius :math:`\rho(A) < 1` the stationary law is :math:`\mathcal{N}(0, \Sigma)`
with :math:`\Sigma = A \Sigma A^\top + Q`. The Koopman operator maps linear observables
:math:`x \mapsto v^\top x` to :math:`x \mapsto v^\top A x`, so its eigenvalues on linear
functions are those of :math:`A`.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike

from ._utils import check_positive_int, sort_by_modulus

__all__ = ["LinearGaussian"]


class LinearGaussian:
    r"""Linear system with additive Gaussian noise, :math:`x_{t+1} = A x_t + \varepsilon_t`.

    Parameters
    ----------
    A : array_like of shape (d, d)
        State matrix (a scalar is treated as ``1 x 1``); its spectral radius must be ``< 1``.
    noise_std : float or array_like of shape (d,), default=0.1
        Standard deviation(s) of independent noise components: :math:`Q = \mathrm{diag}(s^2)`.
        Ignored when ``noise_cov`` is given.
    noise_cov : array_like of shape (d, d), optional
        Full noise covariance :math:`Q` (symmetric positive semi-definite). Takes precedence
        over ``noise_std``.

    Raises
    ------
    ValueError
        If ``A`` is not square and finite, its spectral radius is ``>= 1``, or the noise
        specification has the wrong shape, negative entries or is not PSD.
    """

    def __init__(
        self,
        A: ArrayLike,
        noise_std: float | ArrayLike = 0.1,
        noise_cov: ArrayLike | None = None,
    ) -> None:
        mat = np.atleast_2d(np.array(A, dtype=np.float64))
        if mat.ndim != 2 or mat.shape[0] != mat.shape[1]:
            raise ValueError(f"A must be a square matrix, got shape {mat.shape}.")
        if not np.all(np.isfinite(mat)):
            raise ValueError("A must have finite entries.")
        radius = float(np.abs(np.linalg.eigvals(mat)).max())
        if radius >= 1.0:
            raise ValueError(f"A must have spectral radius < 1 for stability, got {radius:.6g}.")
        d = mat.shape[0]
        if noise_cov is not None:
            cov = np.atleast_2d(np.array(noise_cov, dtype=np.float64))
            if cov.shape != (d, d):
                raise ValueError(f"noise_cov must have shape ({d}, {d}), got {cov.shape}.")
            if not np.all(np.isfinite(cov)):
                raise ValueError("noise_cov must have finite entries.")
            if not np.allclose(cov, cov.T, rtol=1e-10, atol=1e-12):
                raise ValueError("noise_cov must be symmetric.")
            cov = 0.5 * (cov + cov.T)
            evals = np.linalg.eigvalsh(cov)
            if evals.min() < -1e-10 * max(evals.max(), 1e-300):
                raise ValueError("noise_cov must be positive semi-definite.")
        else:
            std = np.array(noise_std, dtype=np.float64)
            if std.ndim == 0:
                std = np.full(d, float(std))
            if std.shape != (d,):
                raise ValueError(
                    f"noise_std must be a scalar or have shape ({d},), got {std.shape}."
                )
            if not np.all(np.isfinite(std)) or np.any(std < 0.0):
                raise ValueError("noise_std must be finite and non-negative.")
            cov = np.diag(std**2)
        self.A = mat
        self.noise_cov = cov

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim})"

    @property
    def dim(self) -> int:
        """State dimension ``d``."""
        return int(self.A.shape[0])

    @staticmethod
    def _psd_sqrt(cov: np.ndarray) -> np.ndarray:
        """A factor ``L`` with ``L @ L.T == cov`` (works for singular PSD matrices)."""
        evals, evecs = np.linalg.eigh(cov)
        return evecs * np.sqrt(np.clip(evals, 0.0, None))

    def eigvals(self) -> np.ndarray:
        """Eigenvalues of ``A`` sorted by decreasing modulus (complex128)."""
        return sort_by_modulus(np.linalg.eigvals(self.A).astype(np.complex128))

    def stationary_cov(self) -> np.ndarray:
        r"""Stationary covariance :math:`\Sigma`, solving :math:`\Sigma = A\Sigma A^\top + Q`."""
        sigma = scipy.linalg.solve_discrete_lyapunov(self.A, self.noise_cov)
        return 0.5 * (sigma + sigma.T)

    def sample(self, n: int, x0: ArrayLike | None = None, seed: int | None = None) -> np.ndarray:
        """Simulate a trajectory.

        Parameters
        ----------
        n : int
            Number of states returned (including the initial one).
        x0 : array_like of shape (d,), optional
            Initial state; if ``None`` it is drawn from the stationary law ``N(0, Sigma)``.
        seed : int, optional
            Seed for :func:`numpy.random.default_rng`.

        Returns
        -------
        numpy.ndarray of shape (n, d)
        """
        n = check_positive_int(n, "n")
        d = self.dim
        rng = np.random.default_rng(seed)
        if x0 is None:
            x = self._psd_sqrt(self.stationary_cov()) @ rng.standard_normal(d)
        else:
            x = np.array(x0, dtype=np.float64).reshape(-1)
            if x.shape != (d,) or not np.all(np.isfinite(x)):
                raise ValueError(f"x0 must be a finite vector of length {d}.")
        noise = rng.standard_normal((n - 1, d)) @ self._psd_sqrt(self.noise_cov).T
        out = np.empty((n, d), dtype=np.float64)
        out[0] = x
        a = self.A
        for t in range(1, n):
            x = a @ x + noise[t - 1]
            out[t] = x
        return out

    def forecast(self, x: ArrayLike, t: int = 1) -> np.ndarray:
        """Conditional mean ``E[x_{s+t} | x_s = x] = A^t x``, applied to each row of ``x``.

        Parameters
        ----------
        x : array_like of shape (m, d) or (d,)
            States.
        t : int, default=1
            Non-negative horizon.

        Returns
        -------
        numpy.ndarray with the same shape as ``x``.
        """
        t = check_positive_int(t, "t", minimum=0)
        arr = np.asarray(x, dtype=np.float64)
        if arr.shape[-1:] != (self.dim,) or arr.ndim > 2:
            raise ValueError(
                f"x must have shape (m, {self.dim}) or ({self.dim},), got {arr.shape}."
            )
        return arr @ np.linalg.matrix_power(self.A, t).T
