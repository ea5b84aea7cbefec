r"""Two-dimensional flow past a cylinder with a passive scalar (paper Sec. 5 and App. F).

The paper's data (Raissi et al., *Hidden fluid mechanics*, 201 snapshots of the velocity
``(U, V)``, pressure ``P`` and concentration ``C`` of a passive scalar on a 100x200 grid at
``Re = Pe = 100``) cannot be downloaded offline, so this module generates an equivalent with
a vectorised numpy lattice-Boltzmann solver.

Flow: D2Q9 lattice Boltzmann, lattice units (``dx = dt = 1``)
    * collision: two-relaxation-time (TRT) with the "magic" parameter ``Lambda = 1/4``
      (Ginzburg et al. 2008). The symmetric rate ``omega+ = 1/tau`` sets the viscosity
      ``nu = (tau - 1/2)/3``; the antisymmetric rate is fixed by ``Lambda``. TRT is markedly
      more stable than BGK at the small ``tau - 1/2`` needed at ``Re = 100`` and places the
      bounce-back walls exactly half-way between nodes; ``collision="bgk"`` is available.
    * cylinder (diameter ``D`` cells, centre a quarter of the channel length from the inlet,
      on the centre line): bounce-back on solid nodes.
    * top and bottom: free-slip (specular reflection) walls, i.e. a confined channel of
      blockage ``D / H``. Confinement raises the Strouhal number above the unconfined
      ``St ~ 0.165`` at ``Re = 100``; with ``D/H = 0.2`` we measure ``St = 0.21`` (at 100x200
      and at 40x80).
    * inlet (``x = 0``): uniform velocity ``(U0, 0)`` imposed by the non-equilibrium
      bounce-back of the unknown populations (Zou & He 1997; Latt's formulation);
      outlet (``x = nx - 1``): zero-gradient copy of the unknown populations.
    * ``Re = U0 D / nu``; the shedding is triggered by a seeded perturbation of the initial
      transverse velocity (the geometry is symmetric), so that different seeds give different
      transients and shedding phases.

Scalar: the advection-diffusion equation ``dC/dt + u . grad C = kappa lap C`` with
``Pe = U0 D / kappa``, advanced once per lattice step with the lattice velocity, by a
second-order, flux-limited (van Leer) upwind scheme in *advective* form and forward Euler.
Written as ``C_new = C - A_x (C - C_xup) - A_y (C - C_yup) + d * (sum of neighbours - 4 C)``,
the limiter keeps ``0 <= A <= 2 |u|``, so each update is a convex combination of neighbouring
values whenever ``2 (|u| + |v|) + 4 kappa <= 1`` (checked at run time): the scalar obeys a
discrete maximum principle and stays in ``[0, 1]`` exactly, without clipping (a conservative
form would not, because the lattice velocity is only weakly divergence free). The scalar is
injected through the inlet as a band ``C_in(y) = (1 - tanh((|y - y_c| - D) / 2)) / 2`` of
width ``2 D``; it is zero-gradient at the walls and outlet. Inside the cylinder the velocity is
zero, so there the scalar only diffuses.

Output channels (each ``(ny, nx)``): ``U = u / U0``, ``V = v / U0``, the pressure coefficient
``P = c_s^2 (rho - 1) / U0^2`` (``c_s^2 = 1/3``), and ``C``; ``U = V = P = 0`` inside the
cylinder. Snapshots are taken every ``stride`` lattice steps after ``warmup`` steps.

What is conserved: with a closed domain (``open_x=False``: periodic in ``x``, free-slip
walls, bounce-back cylinder) the total mass ``sum f`` is conserved to round-off (tested). With
the open inlet/outlet it fluctuates only by the small inflow/outflow imbalance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._utils import cache_path, check_finite_scalar, check_positive_int, read_cache, write_cache

__all__ = [
    "CylinderFlow",
    "CylinderFlowData",
    "LatticeBoltzmann2D",
    "strouhal_number",
    "dominant_frequency",
]

#: D2Q9 lattice: velocities, weights and opposite directions.
CX = np.array([0, 1, 0, -1, 0, 1, -1, -1, 1])
CY = np.array([0, 0, 1, 0, -1, 1, 1, -1, -1])
W = np.array([4 / 9] + [1 / 9] * 4 + [1 / 36] * 4)
OPP = np.array([0, 3, 4, 1, 2, 7, 8, 5, 6])
_EAST = np.array([1, 5, 8])  # cx = +1
_WEST = np.array([3, 6, 7])  # cx = -1
_REST_X = np.array([0, 2, 4])  # cx = 0

#: Bumped whenever the generator changes, so that cached files are regenerated.
VERSION = 1

CHANNELS = ("U", "V", "P", "C")


def _equilibrium(rho: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    cu = 3.0 * (CX[:, None, None] * u + CY[:, None, None] * v)
    usq = 1.5 * (u * u + v * v)
    return W[:, None, None] * rho * (1.0 + cu + 0.5 * cu * cu - usq)


def _van_leer(dm: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """Van Leer limited slope ``2 dm dp / (dm + dp)`` if same sign, else 0."""
    prod = dm * dp
    den = dm + dp
    safe = np.where(den == 0.0, 1.0, den)
    return np.where(prod > 0.0, 2.0 * prod / safe, 0.0)


class LatticeBoltzmann2D:
    r"""D2Q9 lattice-Boltzmann channel with obstacles and a passive scalar (lattice units).

    Parameters
    ----------
    solid : bool array (ny, nx)
        Obstacle nodes (bounce-back).
    nu : float
        Kinematic viscosity, ``> 0`` (``tau = 3 nu + 1/2``).
    kappa : float
        Diffusivity of the scalar, ``0 <= kappa < 1/4``.
    u_inlet : float
        Inlet velocity ``U0`` (lattice Mach number ``sqrt(3) U0``; keep ``<= 0.2``).
    c_inlet : array (ny,)
        Scalar profile at the inlet, values in ``[0, 1]``.
    open_x : bool, default True
        Velocity inlet / zero-gradient outlet; if False the domain is periodic in ``x``
        (closed: total mass is exactly conserved).
    collision : {"trt", "bgk"}
        Two-relaxation-time (``Lambda = 1/4``) or single-relaxation-time collision.
    u0, v0 : array (ny, nx), optional
        Initial velocity (default ``(u_inlet, 0)`` in the fluid).
    c0 : array (ny, nx), optional
        Initial scalar (default: the inlet profile everywhere).
    """

    def __init__(
        self,
        solid: np.ndarray,
        nu: float,
        kappa: float,
        u_inlet: float,
        c_inlet: np.ndarray,
        *,
        open_x: bool = True,
        collision: str = "trt",
        u0: np.ndarray | None = None,
        v0: np.ndarray | None = None,
        c0: np.ndarray | None = None,
    ) -> None:
        solid = np.asarray(solid, dtype=bool)
        if solid.ndim != 2 or min(solid.shape) < 4:
            raise ValueError(f"solid must be a 2-D mask of size >= 4x4, got {solid.shape}")
        ny, nx = solid.shape
        nu = check_finite_scalar(nu, "nu")
        kappa = check_finite_scalar(kappa, "kappa")
        u_inlet = check_finite_scalar(u_inlet, "u_inlet")
        if nu <= 0:
            raise ValueError(f"nu must be > 0, got {nu}")
        if not 0.0 <= kappa < 0.25:
            raise ValueError(f"kappa must be in [0, 1/4), got {kappa}")
        if not 0.0 < u_inlet <= 0.3:
            raise ValueError(f"u_inlet must be in (0, 0.3] (low Mach number), got {u_inlet}")
        if collision not in ("trt", "bgk"):
            raise ValueError(f"collision must be 'trt' or 'bgk', got {collision!r}")
        c_inlet = np.asarray(c_inlet, dtype=np.float64)
        if c_inlet.shape != (ny,) or not np.all(np.isfinite(c_inlet)):
            raise ValueError(f"c_inlet must be a finite array of shape ({ny},)")
        if c_inlet.min() < 0 or c_inlet.max() > 1:
            raise ValueError("c_inlet must lie in [0, 1]")
        self.solid = solid
        self._solid_idx = np.nonzero(solid)
        self.nu, self.kappa, self.u_inlet = nu, kappa, u_inlet
        self.open_x = bool(open_x)
        self.collision = collision
        self.c_inlet = c_inlet
        tau = 3.0 * nu + 0.5
        self.omega_plus = 1.0 / tau
        if collision == "trt":
            magic = 0.25
            self.omega_minus = 1.0 / (magic / (tau - 0.5) + 0.5)
        else:
            self.omega_minus = self.omega_plus
        u = np.full((ny, nx), u_inlet) if u0 is None else np.array(u0, dtype=np.float64)
        v = np.zeros((ny, nx)) if v0 is None else np.array(v0, dtype=np.float64)
        if u.shape != (ny, nx) or v.shape != (ny, nx):
            raise ValueError("u0 and v0 must have the shape of solid")
        u[solid] = 0.0
        v[solid] = 0.0
        self.f = _equilibrium(np.ones((ny, nx)), u, v)
        c = np.repeat(c_inlet[:, None], nx, axis=1) if c0 is None else np.array(c0, dtype=float)
        if c.shape != (ny, nx) or c.min() < 0 or c.max() > 1:
            raise ValueError("c0 must have the shape of solid and values in [0, 1]")
        self.c = c
        self.steps = 0
        self._macroscopic()

    @property
    def shape(self) -> tuple[int, int]:
        return self.solid.shape  # type: ignore[return-value]

    def mass(self) -> float:
        """Total mass ``sum_i sum_x f_i(x)`` (fluid and solid nodes)."""
        return float(self.f.sum())

    def _macroscopic(self) -> None:
        f = self.f
        rho = f.sum(axis=0)
        self.rho = rho
        self.u = (f[_EAST].sum(axis=0) - f[_WEST].sum(axis=0)) / rho
        self.v = (f[2] + f[5] + f[6] - f[4] - f[7] - f[8]) / rho

    def fields(self) -> np.ndarray:
        """Channels ``(U, V, P, C)`` normalised by the inlet velocity, shape ``(4, ny, nx)``."""
        u0 = self.u_inlet
        out = np.empty((4, *self.shape))
        out[0] = self.u / u0
        out[1] = self.v / u0
        out[2] = (self.rho - 1.0) / (3.0 * u0 * u0)
        out[:3, self.solid] = 0.0
        out[3] = self.c
        return out

    def step(self, n: int = 1) -> None:
        """Advance the flow and the scalar by ``n`` lattice time steps."""
        for _ in range(int(n)):
            self._step()

    def _step(self) -> None:
        f = self.f
        solid = self.solid
        if self.open_x:  # zero-gradient outlet for the unknown (westward) populations
            f[_WEST, :, -1] = f[_WEST, :, -2]
        self._macroscopic()
        rho, u, v = self.rho, self.u, self.v
        if self.open_x:  # velocity inlet (Zou-He density, non-equilibrium bounce-back)
            u[:, 0] = self.u_inlet
            v[:, 0] = 0.0
            rho[:, 0] = (f[_REST_X, :, 0].sum(axis=0) + 2.0 * f[_WEST, :, 0].sum(axis=0)) / (
                1.0 - self.u_inlet
            )
        u[solid] = 0.0
        v[solid] = 0.0
        # the scalar is advanced with the velocity of this step
        self._advect_scalar(u, v)
        feq = _equilibrium(rho, u, v)
        if self.open_x:
            f[_EAST, :, 0] = feq[_EAST, :, 0] + f[OPP[_EAST], :, 0] - feq[OPP[_EAST], :, 0]
        # collision (TRT: separate rates for the symmetric/antisymmetric parts)
        neq = f - feq
        if self.collision == "trt":
            neq_opp = neq[OPP]
            wp, wm = self.omega_plus, self.omega_minus
            fout = f - (0.5 * (wp + wm)) * neq - (0.5 * (wp - wm)) * neq_opp
        else:
            fout = f - self.omega_plus * neq
        # bounce-back on the obstacle
        sy, sx = self._solid_idx
        fout[:, sy, sx] = f[:, sy, sx][OPP]
        # streaming (periodic rolls), then free-slip walls at the bottom and top rows
        new = np.empty_like(f)
        for i in range(9):
            new[i] = np.roll(fout[i], (CY[i], CX[i]), axis=(0, 1))
        new[2, 0, :] = fout[4, 0, :]
        new[5, 0, :] = np.roll(fout[8, 0, :], 1)
        new[6, 0, :] = np.roll(fout[7, 0, :], -1)
        new[4, -1, :] = fout[2, -1, :]
        new[8, -1, :] = np.roll(fout[5, -1, :], 1)
        new[7, -1, :] = np.roll(fout[6, -1, :], -1)
        self.f = new
        self.steps += 1

    def _advect_scalar(self, u: np.ndarray, v: np.ndarray) -> None:
        """One forward-Euler step of the limited upwind advection-diffusion scheme."""
        k = self.kappa
        if 2.0 * float(np.max(np.abs(u) + np.abs(v))) + 4.0 * k > 1.0:
            raise FloatingPointError(
                "the scalar scheme's positivity condition 2(|u|+|v|) + 4 kappa <= 1 is "
                "violated: the flow is unstable (lower u_inlet or raise the resolution)"
            )
        c = self.c
        # ghost cells: 2 on each side; inlet Dirichlet (x), zero-gradient elsewhere
        if self.open_x:
            g = np.pad(c, ((2, 2), (0, 2)), mode="edge")
            inlet = np.pad(self.c_inlet, 2, mode="edge")[:, None]
            g = np.concatenate([inlet, inlet, g], axis=1)
        else:
            g = np.pad(c, ((2, 2), (0, 0)), mode="edge")
            g = np.pad(g, ((0, 0), (2, 2)), mode="wrap")
        cc = g[2:-2, 2:-2]
        # x-direction
        dx = np.diff(g[2:-2, :], axis=1)  # (ny, nx + 3): dx[:, j] = g[j+1] - g[j]
        sx = _van_leer(dx[:, :-1], dx[:, 1:])  # slopes at g-columns 1..nx+2
        left = g[2:-2, 1:-1] + 0.5 * sx  # face value from the left at (j + 1/2), j = 1..nx+2
        right = g[2:-2, 1:-1] - 0.5 * sx  # face value from the right at (j - 1/2)
        # for cell j (g-column j+2): faces j+1/2 (left[j+1]), j-1/2 (left[j])
        dcdx_pos = left[:, 1:-1] - left[:, :-2]
        dcdx_neg = right[:, 2:] - right[:, 1:-1]
        dcdx = np.where(u > 0.0, dcdx_pos, dcdx_neg)
        dy = np.diff(g[:, 2:-2], axis=0)
        sy = _van_leer(dy[:-1], dy[1:])
        low = g[1:-1, 2:-2] + 0.5 * sy
        high = g[1:-1, 2:-2] - 0.5 * sy
        dcdy = np.where(v > 0.0, low[1:-1] - low[:-2], high[2:] - high[1:-1])
        lap = g[2:-2, 3:-1] + g[2:-2, 1:-3] + g[3:-1, 2:-2] + g[1:-3, 2:-2] - 4.0 * cc
        self.c = cc - u * dcdx - v * dcdy + k * lap


def dominant_frequency(signal: np.ndarray, dt: float = 1.0) -> float:
    """Frequency (cycles per unit time) of the strongest oscillation in a uniformly sampled
    real signal: peak of the Hann-windowed, 16x zero-padded periodogram of the de-meaned
    signal, refined by parabolic interpolation of the log power."""
    x = np.asarray(signal, dtype=np.float64).ravel()
    if x.size < 8 or not np.all(np.isfinite(x)):
        raise ValueError("signal must be a finite 1-D array with at least 8 samples")
    dt = check_finite_scalar(dt, "dt")
    if dt <= 0:
        raise ValueError(f"dt must be > 0, got {dt}")
    x = (x - x.mean()) * np.hanning(x.size)
    n = 16 * x.size
    power = np.abs(np.fft.rfft(x, n)) ** 2
    power[0] = 0.0
    k = int(np.argmax(power))
    if k == 0 or power[k] == 0.0:
        raise ValueError("signal has no oscillation")
    if 0 < k < power.size - 1:
        a, b, c = np.log(power[k - 1 : k + 2] + 1e-300)
        den = a - 2 * b + c
        k = k + (0.5 * (a - c) / den if den != 0 else 0.0)
    return float(k / (n * dt))


def strouhal_number(signal: np.ndarray, dt: float, diameter: float, velocity: float) -> float:
    """Strouhal number ``St = f D / U`` of a probe signal (e.g. the transverse velocity on the
    wake centre line, which oscillates at the shedding frequency ``f``).

    Parameters
    ----------
    signal : array (n,)
        Probe values sampled every ``dt``.
    dt : float
        Sampling interval (lattice steps for :class:`CylinderFlow`).
    diameter, velocity : float
        Cylinder diameter and reference (inlet) velocity, in the units of ``dt``.
    """
    diameter = check_finite_scalar(diameter, "diameter")
    velocity = check_finite_scalar(velocity, "velocity")
    if diameter <= 0 or velocity <= 0:
        raise ValueError("diameter and velocity must be > 0")
    return dominant_frequency(signal, dt) * diameter / velocity


@dataclass
class CylinderFlowData:
    """Snapshots of :class:`CylinderFlow`.

    Attributes
    ----------
    snapshots : float32 array (T, 4, ny, nx)
        Channels ``U, V, P, C`` (see the module docstring).
    probe : float64 array (T * stride,)
        Transverse velocity ``v / U0`` at a wake probe (two diameters behind the cylinder, on
        the centre line), every lattice step of the sampled window.
    mass : float64 array (T,)
        Total lattice mass at each snapshot.
    solid : bool array (ny, nx)
        Cylinder mask.
    params : dict
        Generator parameters (the cache key), with the derived lattice quantities.
    """

    snapshots: np.ndarray
    probe: np.ndarray
    mass: np.ndarray
    solid: np.ndarray
    params: dict = field(default_factory=dict)
    channels: tuple[str, ...] = CHANNELS

    def strouhal(self) -> float:
        """Strouhal number of the probe signal (:func:`strouhal_number`)."""
        p = self.params
        return strouhal_number(self.probe, 1.0, p["diameter"], p["u_inlet"])


class CylinderFlow:
    r"""Flow past a cylinder at given Reynolds and Péclet numbers, with a passive scalar.

    Parameters
    ----------
    shape : (int, int), default (100, 200)
        Grid ``(ny, nx)`` (lattice nodes = output pixels).
    reynolds : float, default 100
        ``Re = U0 D / nu``.
    peclet : float, default 100
        ``Pe = U0 D / kappa``.
    diameter : int, optional
        Cylinder diameter in cells (default ``ny // 5``: blockage 0.2).
    u_inlet : float, default 0.1
        Inlet velocity in lattice units (Mach ``0.17``).
    n_snapshots : int, default 201
    stride : int, default 16
        Lattice steps between snapshots; with the defaults the shedding period is about
        1,000 steps, i.e. about 60 snapshots, and 201 snapshots span about 3 periods.
    warmup : int, default 30000
        Lattice steps before the first snapshot (the vortex street is fully developed
        after about 15,000 steps at the default size).
    collision : {"trt", "bgk"}, default "trt"
    seed : int, default 0
        Seed of the initial perturbation that triggers the shedding.
    perturbation : float, default 1
        Scale of that perturbation: the transverse velocity bump behind the cylinder has an
        amplitude ``perturbation * (0.1 .. 0.2) U0``. The default kicks the wake into shedding
        within a few periods; a small value (e.g. ``0.01``) starts from an almost symmetric
        wake, so that ``warmup=0`` records the whole start-up: the formation of the
        recirculation bubble, the exponential growth of the instability and its saturation
        into periodic shedding (used by :mod:`dpnets.experiments.fluid_transient`). It enters
        :meth:`params` (the cache key) only when it differs from 1, so the cache files of the
        default flow are unchanged.

    Examples
    --------
    >>> data = CylinderFlow(shape=(20, 40), warmup=16, n_snapshots=3).generate()  # no cache
    >>> data.snapshots.shape
    (3, 4, 20, 40)
    """

    def __init__(
        self,
        shape: tuple[int, int] = (100, 200),
        reynolds: float = 100.0,
        peclet: float = 100.0,
        diameter: int | None = None,
        u_inlet: float = 0.1,
        n_snapshots: int = 201,
        stride: int = 16,
        warmup: int = 30_000,
        collision: str = "trt",
        seed: int = 0,
        perturbation: float = 1.0,
    ) -> None:
        self.shape = shape
        self.reynolds = reynolds
        self.peclet = peclet
        self.diameter = diameter
        self.u_inlet = u_inlet
        self.n_snapshots = n_snapshots
        self.stride = stride
        self.warmup = warmup
        self.collision = collision
        self.seed = seed
        self.perturbation = perturbation

    def params(self) -> dict[str, Any]:
        """Validated parameters (the cache key, including the generator version)."""
        try:
            ny, nx = (int(s) for s in self.shape)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"shape must be a pair of ints, got {self.shape!r}") from exc
        ny = check_positive_int(ny, "shape[0]", 16)
        nx = check_positive_int(nx, "shape[1]", 32)
        d = ny // 5 if self.diameter is None else self.diameter
        d = check_positive_int(d, "diameter", 4)
        if d > ny // 2 or d > nx // 4:
            raise ValueError(f"diameter={d} is too large for the grid {ny}x{nx}")
        re = check_finite_scalar(self.reynolds, "reynolds")
        pe = check_finite_scalar(self.peclet, "peclet")
        u0 = check_finite_scalar(self.u_inlet, "u_inlet")
        if re <= 0 or pe <= 0:
            raise ValueError("reynolds and peclet must be > 0")
        if not 0 < u0 <= 0.2:
            raise ValueError(f"u_inlet must be in (0, 0.2], got {u0}")
        nu = u0 * d / re
        kappa = u0 * d / pe
        if 3 * nu + 0.5 < 0.505:
            raise ValueError(
                f"tau = {3 * nu + 0.5:.4f} is too close to 1/2 for a stable run: raise the "
                "diameter (resolution) or u_inlet, or lower the Reynolds number"
            )
        if kappa >= 0.2:
            raise ValueError(f"kappa = {kappa:.3f} too large for the explicit scalar scheme")
        if self.collision not in ("trt", "bgk"):
            raise ValueError(f"collision must be 'trt' or 'bgk', got {self.collision!r}")
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an int, got {seed!r}")
        scale = check_finite_scalar(self.perturbation, "perturbation")
        if not 0.0 < scale <= 1.0:
            raise ValueError(f"perturbation must be in (0, 1], got {scale}")
        out = {
            "name": "cylinder-flow",
            "version": VERSION,
            "shape": [ny, nx],
            "reynolds": re,
            "peclet": pe,
            "diameter": d,
            "u_inlet": u0,
            "n_snapshots": check_positive_int(self.n_snapshots, "n_snapshots", 2),
            "stride": check_positive_int(self.stride, "stride"),
            "warmup": check_positive_int(self.warmup, "warmup", 0),
            "collision": self.collision,
            "seed": int(seed),
        }
        if scale != 1.0:  # only then: the default flow keeps its cache key
            out["perturbation"] = scale
        return out

    def solver(self) -> LatticeBoltzmann2D:
        """A fresh solver in the initial (perturbed, seeded) state."""
        p = self.params()
        ny, nx = p["shape"]
        d = p["diameter"]
        u0 = p["u_inlet"]
        yc = (ny - 1) / 2.0
        xc = nx / 4.0
        yy, xx = np.mgrid[0:ny, 0:nx].astype(np.float64)
        solid = (xx - xc) ** 2 + (yy - yc) ** 2 < (d / 2.0) ** 2
        c_in = 0.5 * (1.0 - np.tanh((np.abs(np.arange(ny) - yc) - d) / 2.0))
        rng = np.random.default_rng(p["seed"])
        # seeded asymmetric perturbation behind the cylinder (triggers the shedding)
        amp = rng.uniform(0.1, 0.2) * rng.choice([-1.0, 1.0]) * u0
        bump = np.exp(-((xx - xc - 1.5 * d) ** 2 + (yy - yc) ** 2) / d**2)
        v0 = amp * bump + 1e-3 * u0 * rng.standard_normal((ny, nx)) * bump
        v0 *= p.get("perturbation", 1.0)
        u_init = np.full((ny, nx), u0)
        return LatticeBoltzmann2D(
            solid,
            nu=u0 * d / p["reynolds"],
            kappa=u0 * d / p["peclet"],
            u_inlet=u0,
            c_inlet=c_in,
            open_x=True,
            collision=p["collision"],
            u0=u_init,
            v0=v0,
        )

    def cache_file(self):
        """Path of the cache file for these parameters."""
        return cache_path("cylinder-flow", self.params())

    def generate(self) -> CylinderFlowData:
        """Run the simulation (no cache)."""
        p = self.params()
        ny, nx = p["shape"]
        d = p["diameter"]
        lbm = self.solver()
        lbm.step(p["warmup"])
        probe_y = int(round((ny - 1) / 2.0))
        probe_x = min(int(nx / 4.0 + 2 * d), nx - 2)
        T, stride = p["n_snapshots"], p["stride"]
        snaps = np.empty((T, 4, ny, nx), dtype=np.float32)
        mass = np.empty(T)
        probe = np.empty(T * stride)
        for t in range(T):
            snaps[t] = lbm.fields()
            mass[t] = lbm.mass()
            for s in range(stride):
                probe[t * stride + s] = lbm.v[probe_y, probe_x] / p["u_inlet"]
                lbm.step()
        if not np.all(np.isfinite(snaps)):
            raise FloatingPointError("the lattice-Boltzmann run diverged (NaN/inf)")
        derived = {
            **p,
            "nu": lbm.nu,
            "kappa": lbm.kappa,
            "tau": 3 * lbm.nu + 0.5,
            "probe": [probe_y, probe_x],
        }
        return CylinderFlowData(snaps, probe, mass, lbm.solid.copy(), derived)

    def load(self, cache: bool = True) -> CylinderFlowData:
        """The snapshots, generated once and cached in the user cache directory
        (:func:`dpnets.systems._utils.cache_path`, honouring ``$DPNETS_CACHE``)."""
        if not cache:
            return self.generate()
        path = self.cache_file()
        z = read_cache(path, ("snapshots", "probe", "mass", "solid", "params"))
        if z is not None:
            params = json.loads(str(z["params"]))
            return CylinderFlowData(z["snapshots"], z["probe"], z["mass"], z["solid"], params)
        data = self.generate()
        write_cache(
            path,
            snapshots=data.snapshots,
            probe=data.probe,
            mass=data.mass,
            solid=data.solid,
            params=np.array(json.dumps(data.params)),
        )
        return data
