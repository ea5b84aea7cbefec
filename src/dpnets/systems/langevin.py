r"""Overdamped Langevin dynamics in one dimension, with a reference generator spectrum.

.. math::

    dX_t = -\frac{1}{\gamma} V'(X_t)\, dt + \sqrt{\frac{2 k_B T}{\gamma}}\, dW_t,

with friction :math:`\gamma` and thermal energy :math:`k_B T`. The invariant law is the
Boltzmann distribution :math:`\pi \propto e^{-V/k_B T}`, the process is reversible, and its
generator :math:`L f = -V' f' / \gamma + (k_B T/\gamma) f''` is self-adjoint on
:math:`L^2(\pi)` with eigenvalues :math:`0 = \lambda_0 > \lambda_1 > \dots` (paper Sec. 3 and
App. F "Continuous dynamics").

:class:`FourWellLangevin` is the paper's experiment: the four-well potential of Prinz et al.
(2011), used by the paper (Fig. 2, lower panel) and its Kooplearn implementation,

.. math::

    V(x) = 4\big(x^8 + 0.8 e^{-80 x^2} + 0.2 e^{-80 (x - 0.5)^2} + 0.5 e^{-40 (x + 0.5)^2}\big).

Reference eigenvalues come from a conservative finite-difference discretisation of the
Dirichlet form :math:`\mathcal{E}(f, f) = (k_B T/\gamma) \int f'^2\, d\pi` on a uniform grid
(the symmetric tridiagonal matrix :math:`M^{-1/2} K M^{-1/2}`), second-order accurate;
:meth:`OverdampedLangevin1D.reference_eigvals` converges under refinement (tested).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg

from ._utils import check_finite_scalar, check_positive_int

__all__ = ["OverdampedLangevin1D", "FourWellLangevin", "four_well_potential"]


def _exp(x: Any) -> Any:
    """``exp`` for numpy arrays and torch tensors alike."""
    if hasattr(x, "exp") and not isinstance(x, np.ndarray):
        return x.exp()
    return np.exp(x)


def four_well_potential(x: Any) -> Any:
    """The four-well (Prinz) potential ``V(x)``; numpy arrays or torch tensors."""
    return 4.0 * (
        x**8
        + 0.8 * _exp(-80.0 * x**2)
        + 0.2 * _exp(-80.0 * (x - 0.5) ** 2)
        + 0.5 * _exp(-40.0 * (x + 0.5) ** 2)
    )


def four_well_grad(x: Any) -> Any:
    """``V'(x)`` of :func:`four_well_potential`; numpy arrays or torch tensors."""
    return 4.0 * (
        8.0 * x**7
        - 128.0 * x * _exp(-80.0 * x**2)
        - 32.0 * (x - 0.5) * _exp(-80.0 * (x - 0.5) ** 2)
        - 40.0 * (x + 0.5) * _exp(-40.0 * (x + 0.5) ** 2)
    )


class OverdampedLangevin1D:
    r"""Overdamped Langevin dynamics ``dX = -V'(X)/gamma dt + sqrt(2 kT/gamma) dW`` on R.

    Parameters
    ----------
    potential, grad_potential : callable
        ``V`` and ``V'``, elementwise, accepting numpy arrays *and* torch tensors (write them
        with arithmetic and a dispatching ``exp``, as :func:`four_well_potential`).
    kT : float, default 1.0
        Thermal energy, ``> 0``.
    friction : float, default 1.0
        Friction ``gamma > 0``; all rates scale as ``1 / friction``.
    dt : float, default 1e-5
        Euler-Maruyama time step (its bias on the invariant law is ``O(dt)``; keep
        ``dt * max V'' / friction`` well below 1).
    domain : (float, float), default (-1.5, 1.5)
        Interval for the reference discretisation and the exact stationary sampler; the
        Boltzmann weight must be negligible outside it.
    """

    def __init__(
        self,
        potential: Any,
        grad_potential: Any,
        kT: float = 1.0,  # noqa: N803 - physics notation
        friction: float = 1.0,
        dt: float = 1e-5,
        domain: tuple[float, float] = (-1.5, 1.5),
    ) -> None:
        self._potential = potential
        self._grad_potential = grad_potential
        self.kT = check_finite_scalar(kT, "kT")
        self.friction = check_finite_scalar(friction, "friction")
        self.dt = check_finite_scalar(dt, "dt")
        for name in ("kT", "friction", "dt"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}.")
        lo, hi = (check_finite_scalar(v, "domain") for v in domain)
        if not lo < hi:
            raise ValueError(f"domain must be an interval (lo, hi) with lo < hi, got {domain}")
        self.domain = (lo, hi)
        self._spectra: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(kT={self.kT}, friction={self.friction}, dt={self.dt}, "
            f"domain={self.domain})"
        )

    # ------------------------------------------------------------------ the SDE
    def potential(self, x: Any) -> Any:
        """``V(x)`` (numpy or torch)."""
        return self._potential(x)

    def grad_potential(self, x: Any) -> Any:
        """``V'(x)`` (numpy or torch)."""
        return self._grad_potential(x)

    def drift(self, x: Any) -> Any:
        """``A(x) = -V'(x) / friction`` (numpy or torch)."""
        return -self.grad_potential(x) / self.friction

    @property
    def diffusion(self) -> float:
        """The constant ``B = sqrt(2 kT / friction)``."""
        return float(np.sqrt(2.0 * self.kT / self.friction))

    def sde(self):
        """The torch :class:`dpnets.ito.SDE` of this process (for ``DPNet(objective="generator")``
        and :class:`dpnets.Generator`)."""
        from dpnets.ito import overdamped_langevin

        return overdamped_langevin(
            grad_potential=self.grad_potential, kT=self.kT, friction=self.friction
        )

    # ------------------------------------------------------------------ stationary law
    def _grid(self, n_grid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Grid, Boltzmann weights at nodes and midpoints (max-normalised)."""
        lo, hi = self.domain
        x = np.linspace(lo, hi, n_grid)
        v = np.asarray(self.potential(x), dtype=np.float64)
        mid = 0.5 * (x[1:] + x[:-1])
        vm = np.asarray(self.potential(mid), dtype=np.float64)
        vmin = min(v.min(), vm.min())
        return x, np.exp(-(v - vmin) / self.kT), np.exp(-(vm - vmin) / self.kT)

    def stationary_density(self, x: Any, n_grid: int = 20001) -> np.ndarray:
        """Normalised Boltzmann density ``exp(-V/kT) / Z`` (``Z`` by quadrature on the domain)."""
        from scipy.integrate import trapezoid

        grid, w, _ = self._grid(n_grid)
        vmin = float(np.min(self.potential(grid)))
        z = trapezoid(w, grid)
        v = np.asarray(self.potential(np.asarray(x, dtype=np.float64)), dtype=np.float64)
        return np.exp(-(v - vmin) / self.kT) / z

    def sample_stationary(self, n: int, seed: int | None = None, n_grid: int = 20001):
        """``n`` exact draws from the Boltzmann law (inverse CDF on a fine grid), shape (n, 1)."""
        n = check_positive_int(n, "n")
        grid, w, _ = self._grid(n_grid)
        cdf = np.concatenate([[0.0], np.cumsum(0.5 * (w[1:] + w[:-1]) * np.diff(grid))])
        cdf /= cdf[-1]
        u = np.random.default_rng(seed).random(n)
        return np.interp(u, cdf, grid)[:, None]

    # ------------------------------------------------------------------ simulation
    def _step_noise(self) -> float:
        return float(np.sqrt(2.0 * self.kT * self.dt / self.friction))

    def simulate(
        self,
        x0: Any,
        n_steps: int,
        *,
        record_every: int = 1,
        seed: int | None = None,
    ) -> np.ndarray:
        """Euler-Maruyama trajectories, vectorised over initial conditions.

        Parameters
        ----------
        x0 : float or array (c,)
            Initial states of ``c`` independent chains.
        n_steps : int
            Number of steps of size ``dt``.
        record_every : int, default 1
            Keep every ``record_every``-th state.
        seed : int, optional

        Returns
        -------
        ndarray of shape (n_steps // record_every + 1, c)
            States at times ``0, record_every * dt, ...``.
        """
        n_steps = check_positive_int(n_steps, "n_steps")
        record_every = check_positive_int(record_every, "record_every")
        rng = np.random.default_rng(seed)
        x = np.atleast_1d(np.asarray(x0, dtype=np.float64)).copy()
        if x.ndim != 1 or not np.all(np.isfinite(x)):
            raise ValueError("x0 must be a finite scalar or 1-D array of initial states")
        out = [x.copy()]
        noise = self._step_noise()
        for s in range(1, n_steps + 1):
            x += self.drift(x) * self.dt + noise * rng.standard_normal(x.shape[0])
            if s % record_every == 0:
                out.append(x.copy())
        traj = np.stack(out)
        if not np.all(np.isfinite(traj)):
            raise FloatingPointError("Euler-Maruyama diverged; decrease dt")
        return traj

    def sample(
        self,
        n: int,
        *,
        mean_stride: float = 100.0,
        n_chains: int = 1000,
        burn_in: int = 1000,
        seed: int | None = None,
        return_times: bool = False,
    ):
        """``n`` states observed at random times with geometric gaps (as in the paper).

        ``n_chains`` independent Euler-Maruyama chains, started from exact Boltzmann draws
        (:meth:`sample_stationary`) and run for ``burn_in`` steps, are observed at times whose
        gaps (in steps) are i.i.d. geometric with mean ``mean_stride``; this gives
        non-uniformly sampled trajectories whose states are all distributed according to the
        invariant law (up to the ``O(dt)`` discretisation bias), which is what generator
        learning needs (Thm. 2 uses samples of ``pi`` only).

        Parameters
        ----------
        n : int
            Number of states returned.
        mean_stride : float, default 100
            Mean gap between observations, in steps (``>= 1``).
        n_chains : int, default 1000
        burn_in : int, default 1000
            Steps before the first observation.
        seed : int, optional
        return_times : bool, default False
            Also return the observation times and the chain of each state.

        Returns
        -------
        X : ndarray (n, 1)
            Chain after chain, each in time order.
        times, chain : ndarray (n,), only with ``return_times``
        """
        n = check_positive_int(n, "n")
        n_chains = min(check_positive_int(n_chains, "n_chains"), n)
        burn_in = check_positive_int(burn_in, "burn_in", minimum=0)
        mean_stride = check_finite_scalar(mean_stride, "mean_stride")
        if mean_stride < 1.0:
            raise ValueError(f"mean_stride must be >= 1 (steps), got {mean_stride}")
        rng = np.random.default_rng(seed)
        per_chain = -(-n // n_chains)
        gaps = rng.geometric(1.0 / mean_stride, size=(n_chains, per_chain))
        when = burn_in + np.cumsum(gaps, axis=1) - gaps[:, :1]  # first observation at burn_in
        x = self.sample_stationary(n_chains, seed=int(rng.integers(2**31)))[:, 0]
        out = np.empty((n_chains, per_chain))
        ptr = np.zeros(n_chains, dtype=np.int64)
        rows = np.arange(n_chains)
        noise = self._step_noise()
        last = int(when[:, -1].max())
        for s in range(last + 1):
            if s > 0:
                x += self.drift(x) * self.dt + noise * rng.standard_normal(n_chains)
            due = ptr < per_chain
            due[due] = when[rows[due], ptr[due]] == s
            if due.any():
                out[rows[due], ptr[due]] = x[due]
                ptr[due] += 1
        if not np.all(np.isfinite(out)):
            raise FloatingPointError("Euler-Maruyama diverged; decrease dt")
        X = out.reshape(-1)[:n, None]
        if not return_times:
            return X
        times = (when * self.dt).reshape(-1)[:n]
        chain = np.repeat(rows, per_chain)[:n]
        return X, times, chain

    # ------------------------------------------------------------------ reference spectrum
    def reference_spectrum(self, k: int, n_grid: int = 8001):
        r"""Leading ``k`` eigenpairs of the generator by finite differences.

        The Dirichlet form ``(kT/gamma) int f'^2 dpi`` is discretised on a uniform grid of
        the domain with the Boltzmann weight at cell midpoints (a conservative,
        detailed-balance-preserving scheme with reflecting ends), giving
        ``K f = mu M f`` with ``M = diag(pi_i h)``; the symmetric tridiagonal
        ``M^{-1/2} K M^{-1/2}`` is diagonalised with :func:`scipy.linalg.eigh_tridiagonal`.
        Second-order accurate in the grid step.

        Returns
        -------
        eigvals : ndarray (k,)
            ``0 = lambda_0 > lambda_1 > ...`` (the first is zero up to round-off).
        grid : ndarray (n_grid,)
        eigfuns : ndarray (n_grid, k)
            Eigenfunctions on the grid, orthonormal in ``L^2(pi)``, sign fixed so that the
            value at the grid's right end is positive.
        """
        k = check_positive_int(k, "k")
        n_grid = check_positive_int(n_grid, "n_grid", minimum=max(k + 2, 10))
        key = (k, n_grid, self.kT, self.friction, self.domain)
        if key in self._spectra:
            return self._spectra[key]
        x, w, wm = self._grid(n_grid)
        h = x[1] - x[0]
        coef = self.kT / self.friction / (h * h)
        diag = np.zeros(n_grid)
        diag[:-1] += wm
        diag[1:] += wm
        diag = coef * diag / w
        off = -coef * wm / np.sqrt(w[1:] * w[:-1])
        mu, u = scipy.linalg.eigh_tridiagonal(diag, off, select="i", select_range=(0, k - 1))
        f = u / np.sqrt(w * h)[:, None]
        # L2(pi) normalisation with the same (cell) quadrature
        norm = np.sqrt(np.sum(f * f * w[:, None], axis=0) / np.sum(w))
        f = f / norm
        f = f * np.where(f[-1] < 0, -1.0, 1.0)
        out = (-mu, x, f)
        self._spectra[key] = out
        return out

    def reference_eigvals(self, k: int, n_grid: int = 8001) -> np.ndarray:
        """Leading ``k`` generator eigenvalues ``0 = lambda_0 > lambda_1 > ...``.

        See :meth:`reference_spectrum`; with the default grid the relative error of the
        non-zero eigenvalues of :class:`FourWellLangevin` is below ``1e-6``.
        """
        return self.reference_spectrum(k, n_grid)[0]

    def reference_eigfuns(self, x: Any, k: int, n_grid: int = 8001) -> np.ndarray:
        """The ``k`` reference eigenfunctions at states ``x`` (linear interpolation), (m, k)."""
        _, grid, f = self.reference_spectrum(k, n_grid)
        xv = np.asarray(x, dtype=np.float64).reshape(-1)
        return np.stack([np.interp(xv, grid, f[:, j]) for j in range(f.shape[1])], axis=1)

    def implied_timescales(self, k: int, n_grid: int = 8001) -> np.ndarray:
        """``-1 / lambda_j`` of the reference eigenvalues (``inf`` for ``lambda_0 = 0``)."""
        lam = self.reference_eigvals(k, n_grid)
        out = np.full(k, np.inf)
        out[1:] = -1.0 / lam[1:]
        return out


class FourWellLangevin(OverdampedLangevin1D):
    r"""Overdamped Langevin dynamics in the paper's four-well potential (App. F).

    ``V(x) = 4 (x^8 + 0.8 e^{-80 x^2} + 0.2 e^{-80 (x-0.5)^2} + 0.5 e^{-40 (x+0.5)^2})``
    (:func:`four_well_potential`). Defaults follow the authors' Kooplearn implementation:
    ``kT = 1`` and ``friction = 0.1``, i.e. diffusion ``sqrt(20)``. Then the barriers (at most
    about ``3 kT``) are crossed often, and the generator spectrum has four metastable
    eigenvalues ``0, -11.99, -78.89, -153.61`` well separated from the next (``-820.8``),
    so that ``r = 4`` features capture a clean invariant subspace. The Euler-Maruyama step
    ``dt = 1e-5`` keeps ``dt * max|V''| / friction < 0.08`` where the Boltzmann weight is
    non-negligible.

    Parameters
    ----------
    kT, friction, dt
        See :class:`OverdampedLangevin1D`.
    domain : (float, float), default (-1.5, 1.5)
        ``V(+-1.5) ~ 100``: the Boltzmann weight is below ``e^{-20}`` there for ``kT <= 5``.
    """

    def __init__(
        self,
        kT: float = 1.0,  # noqa: N803 - physics notation
        friction: float = 0.1,
        dt: float = 1e-5,
        domain: tuple[float, float] = (-1.5, 1.5),
    ) -> None:
        super().__init__(four_well_potential, four_well_grad, kT, friction, dt, domain)
