r"""Scalar Ornstein-Uhlenbeck process sampled exactly on a regular time grid.

.. math::

    dX_t = -\theta (X_t - \mu)\, dt + \sigma\, dW_t.

Its stationary law is :math:`\mathcal{N}(\mu, s^2)` with :math:`s^2 = \sigma^2 / (2\theta)`. The
generator is self-adjoint on :math:`L^2(\pi)` with eigenvalues :math:`-j\theta` and
eigenfunctions the normalised probabilists' Hermite polynomials
:math:`He_j((x - \mu)/s)/\sqrt{j!}`; the transfer operator over a time ``lag * dt`` has
eigenvalues :math:`e^{-j \theta\, dt\, \mathrm{lag}}` with the same eigenfunctions.
"""

from __future__ import annotations

import numpy as np
from numpy.polynomial import hermite_e
from numpy.typing import ArrayLike
from scipy.signal import lfilter
from scipy.special import gammaln

from ._utils import check_finite_scalar, check_positive_int

__all__ = ["OrnsteinUhlenbeck"]


class OrnsteinUhlenbeck:
    r"""One-dimensional Ornstein-Uhlenbeck process with exact discretisation.

    .. math::

        X_{t+dt} = \mu + e^{-\theta dt}(X_t - \mu)
        + \sqrt{\tfrac{\sigma^2}{2\theta}\left(1 - e^{-2\theta dt}\right)}\, Z_t,
        \qquad Z_t \sim \mathcal{N}(0, 1).

    Parameters
    ----------
    theta : float, default=1.0
        Mean-reversion rate, ``> 0``.
    sigma : float, default=sqrt(2)
        Diffusion coefficient, ``> 0`` (the default gives unit stationary variance).
    dt : float, default=0.1
        Time step between consecutive samples, ``> 0``.
    mu : float, default=0.0
        Long-run mean.

    Raises
    ------
    ValueError
        If a parameter is non-finite or ``theta``, ``sigma`` or ``dt`` is not positive.
    """

    def __init__(
        self,
        theta: float = 1.0,
        sigma: float = float(np.sqrt(2.0)),
        dt: float = 0.1,
        mu: float = 0.0,
    ) -> None:
        self.theta = check_finite_scalar(theta, "theta")
        self.sigma = check_finite_scalar(sigma, "sigma")
        self.dt = check_finite_scalar(dt, "dt")
        self.mu = check_finite_scalar(mu, "mu")
        for name in ("theta", "sigma", "dt"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}.")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(theta={self.theta}, sigma={self.sigma}, "
            f"dt={self.dt}, mu={self.mu})"
        )

    @property
    def stationary_std(self) -> float:
        r"""Standard deviation :math:`s = \sigma / \sqrt{2\theta}` of the stationary law."""
        return float(self.sigma / np.sqrt(2.0 * self.theta))

    @property
    def decay(self) -> float:
        r"""One-step autoregressive coefficient :math:`e^{-\theta\, dt}`."""
        return float(np.exp(-self.theta * self.dt))

    def sample(self, n: int, x0: float | None = None, seed: int | None = None) -> np.ndarray:
        """Simulate a trajectory with the exact transition law (vectorised AR(1) filter).

        Parameters
        ----------
        n : int
            Number of states returned (including the initial one).
        x0 : float, optional
            Initial state; if ``None`` it is drawn from the stationary law
            ``N(mu, stationary_std**2)``.
        seed : int, optional
            Seed for :func:`numpy.random.default_rng`.

        Returns
        -------
        numpy.ndarray of shape (n, 1)
        """
        n = check_positive_int(n, "n")
        rng = np.random.default_rng(seed)
        s = self.stationary_std
        if x0 is None:
            y0 = s * rng.standard_normal()
        else:
            y0 = check_finite_scalar(x0, "x0") - self.mu
        a = self.decay
        step_std = s * np.sqrt(-np.expm1(-2.0 * self.theta * self.dt))
        innovations = step_std * rng.standard_normal(n - 1)
        out = np.empty(n, dtype=np.float64)
        out[0] = y0
        if n > 1:
            out[1:], _ = lfilter([1.0], [1.0, -a], innovations, zi=np.array([a * y0]))
        return (out + self.mu)[:, None]

    def eigvals(self, k: int, lag: int = 1) -> np.ndarray:
        r"""Leading ``k`` eigenvalues :math:`e^{-j\theta\, dt\, \mathrm{lag}}`, ``j = 0..k-1``.

        Parameters
        ----------
        k : int
            Number of eigenvalues.
        lag : int, default=1
            Number of time steps of the transfer operator.

        Returns
        -------
        numpy.ndarray of shape (k,)
        """
        k = check_positive_int(k, "k")
        lag = check_positive_int(lag, "lag", minimum=0)
        return np.exp(-np.arange(k) * self.theta * self.dt * lag)

    def generator_eigvals(self, k: int) -> np.ndarray:
        r"""Leading ``k`` eigenvalues :math:`-j\theta` of the generator, ``j = 0..k-1``."""
        k = check_positive_int(k, "k")
        return -np.arange(k) * self.theta

    def eigfuns(self, x: ArrayLike, k: int) -> np.ndarray:
        r"""First ``k`` eigenfunctions, orthonormal in :math:`L^2(\pi)`.

        :math:`f_j(x) = He_j((x - \mu)/s)/\sqrt{j!}` with :math:`He_j` the probabilists'
        Hermite polynomials and :math:`s` the stationary standard deviation.

        Parameters
        ----------
        x : array_like of shape (m,) or (m, 1)
            States.
        k : int
            Number of eigenfunctions.

        Returns
        -------
        numpy.ndarray of shape (m, k)
        """
        k = check_positive_int(k, "k")
        z = np.asarray(x, dtype=np.float64)
        if z.ndim == 2 and z.shape[1] == 1:
            z = z[:, 0]
        elif z.ndim > 1:
            raise ValueError(f"x must have shape (m,) or (m, 1), got {z.shape}.")
        z = (np.atleast_1d(z) - self.mu) / self.stationary_std
        vander = hermite_e.hermevander(z, k - 1)
        return vander * np.exp(-0.5 * gammaln(np.arange(k) + 1.0))
