"""Figures for validating and reading a kinetic model (needs matplotlib: ``pip install
dpnets[plot]``).

Every function draws on the given axes (or a new figure) and returns the matplotlib axes or
figure, so it can be restyled or saved. Nothing here chooses a backend: without a display
matplotlib falls back to its file-only Agg backend, so the functions work headless (in CI,
on a cluster node) and in notebooks alike.

* :func:`eigenvalues`: the spectrum in the complex plane with the unit circle;
* :func:`implied_timescales`: timescales against the lag, with bootstrap bands and the
  ``timescale = lag`` line (:func:`dpnets.validation.implied_timescales`);
* :func:`ck_test`: the Chapman–Kolmogorov grid (:func:`dpnets.validation.ck_test`);
* :func:`eigenfunctions`: eigenfunctions on one or two coordinates of the states;
* :func:`free_energy`: a free-energy surface ``-kT ln p`` of two coordinates from (reweighted)
  frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "eigenvalues",
    "implied_timescales",
    "ck_test",
    "eigenfunctions",
    "free_energy",
    "pyplot",
]


def pyplot() -> Any:
    """``matplotlib.pyplot``, or an ImportError that says how to install matplotlib."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - optional dependency
        raise ImportError(
            "dpnets.plot needs matplotlib: pip install 'dpnets[plot]' (or matplotlib)"
        ) from err
    return plt


def _unit(units: str) -> str:
    return f" ({units})" if units else ""


def eigenvalues(model: Any, ax: Any = None, k: int | None = None) -> Any:
    """Eigenvalues in the complex plane with the unit circle.

    Parameters
    ----------
    model : fitted model or array
        A model with ``eig()`` (a transfer operator: eigenvalues in the unit disc; a
        generator: rates in the left half-plane, drawn without the circle) or the
        eigenvalues themselves.
    ax : matplotlib axes, optional
    k : int, optional
        Highlight the ``k`` leading eigenvalues (filled markers).

    Returns
    -------
    matplotlib axes
    """
    plt = pyplot()
    vals = np.asarray(model.eig() if hasattr(model, "eig") else model, dtype=np.complex128)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 4.0), layout="constrained")
    generator = hasattr(model, "eig") and type(model).__name__ == "Generator"
    if not generator:
        t = np.linspace(0, 2 * np.pi, 400)
        ax.plot(np.cos(t), np.sin(t), color="0.6", linewidth=1, label="unit circle")
    k = vals.size if k is None else min(int(k), vals.size)
    ax.scatter(vals.real[:k], vals.imag[:k], s=28, zorder=3, label=f"leading {k}")
    if k < vals.size:
        ax.scatter(
            vals.real[k:], vals.imag[k:], s=20, facecolors="none", edgecolors="C0", label="others"
        )
    ax.axhline(0, color="0.85", linewidth=0.8, zorder=0)
    ax.axvline(0, color="0.85", linewidth=0.8, zorder=0)
    ax.set_xlabel("Re λ" + (" (rate)" if generator else ""))
    ax.set_ylabel("Im λ")
    if not generator:
        ax.set_aspect("equal")
        ax.set_xlim(-1.1, 1.1)
        ax.set_ylim(-1.1, 1.1)
    ax.legend(fontsize="small", loc="lower left")
    ax.set_title("eigenvalues", fontsize="medium")
    return ax


def implied_timescales(result: Any, ax: Any = None, units: str = "", log: bool = True) -> Any:
    """Implied timescales against lag time with interval bands and the ``timescale = lag``
    line (below it a process is faster than the lag and cannot be resolved).

    Parameters
    ----------
    result : dpnets.validation.ImpliedTimescales
    ax : matplotlib axes, optional
    units : str
        Time units of the axes (e.g. "ns").
    log : bool, default True
        Logarithmic timescale axis.
    """
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.6), layout="constrained")
    for i in range(result.timescales.shape[1]):
        if np.all(np.isnan(result.timescales[:, i])):
            continue  # fewer processes than asked for
        (line,) = ax.plot(result.lag_times, result.timescales[:, i], "o-", label=f"process {i + 1}")
        if result.lower is not None:
            ax.fill_between(
                result.lag_times,
                result.lower[:, i],
                result.upper[:, i],
                color=line.get_color(),
                alpha=0.25,
                linewidth=0,
            )
    ax.plot(result.lag_times, result.lag_times, "k--", linewidth=1, label="timescale = lag")
    if result.lower is not None:
        ax.fill_between([], [], color="0.6", alpha=0.25, label=f"{result.confidence:.0%} interval")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(f"lag time{_unit(units)}")
    ax.set_ylabel(f"implied timescale{_unit(units)}")
    ax.legend(fontsize="small")
    return ax


def ck_test(result: Any, units: str = "", names: Sequence[str] | None = None) -> Any:
    """The ``n_sets x n_sets`` Chapman–Kolmogorov grid: predicted (line, band) against
    estimated (markers, error bars) probabilities over the lag time. Returns the figure."""
    plt = pyplot()
    n = result.predictions.shape[1]
    names = [str(i) for i in range(n)] if names is None else [str(v) for v in names]
    fig, axes = plt.subplots(
        n,
        n,
        figsize=(2.2 * n + 1, 2.0 * n + 0.5),
        sharex=True,
        sharey=True,
        layout="constrained",
        squeeze=False,
    )
    t = result.lag_times
    for i in range(n):
        for j in range(n):
            ax = axes[i, j]
            ax.plot(t, result.predictions[:, i, j], "-", color="C0", label="predicted")
            if result.predictions_lower is not None:
                ax.fill_between(
                    t,
                    result.predictions_lower[:, i, j],
                    result.predictions_upper[:, i, j],
                    color="C0",
                    alpha=0.2,
                    linewidth=0,
                )
                err = np.abs(
                    np.stack([result.estimates_lower[:, i, j], result.estimates_upper[:, i, j]])
                    - result.estimates[None, :, i, j]
                )
                ax.errorbar(
                    t,
                    result.estimates[:, i, j],
                    yerr=err,
                    fmt="o",
                    color="C1",
                    ms=3.5,
                    label="estimated",
                )
            else:
                ax.plot(t, result.estimates[:, i, j], "o", color="C1", ms=3.5, label="estimated")
            ax.set_title(f"{names[i]} → {names[j]}", fontsize="small")
            ax.set_ylim(-0.05, 1.05)
            if i == n - 1:
                ax.set_xlabel(f"lag time{_unit(units)}")
            if j == 0:
                ax.set_ylabel("probability")
    axes[0, 0].legend(fontsize="x-small")
    return fig


def eigenfunctions(
    model: Any,
    X: Any,
    coords: Any = None,
    k: int = 3,
    *,
    labels: Sequence[str] | None = None,
    bins: int = 60,
    skip_stationary: bool = True,
) -> Any:
    """The leading eigenfunctions (real parts) on one or two coordinates of the states.

    Parameters
    ----------
    model : fitted model with ``eigenfunctions(X)``
    X : array (n, ...)
        States at which to evaluate them.
    coords : array (n,) or (n, 2), optional
        The projection to plot against (default: the first one or two coordinates of the
        flattened states): one coordinate gives a scatter of the values, two give maps of
        the mean value in ``bins x bins`` cells.
    k : int, default 3
        How many eigenfunctions.
    labels : sequence of str, optional
        Axis labels of the coordinates (with units).
    skip_stationary : bool, default True
        Leave out the constant eigenfunction (eigenvalue 1).

    Returns
    -------
    matplotlib figure
    """
    from scipy.stats import binned_statistic_2d

    plt = pyplot()
    x = np.asarray(X)
    phi = np.real(model.eigenfunctions(x))
    lam = np.asarray(model.eig())
    generator = type(model).__name__ == "Generator"
    stationary = abs(lam[0]) < 1e-8 if generator else abs(lam[0] - 1.0) < 1e-6
    start = 1 if skip_stationary and stationary else 0
    idx = list(range(start, min(start + int(k), phi.shape[1])))
    flat = x.reshape(x.shape[0], -1)
    c = flat[:, : min(2, flat.shape[1])] if coords is None else np.asarray(coords)
    c = c.reshape(c.shape[0], -1)
    if c.shape[0] != x.shape[0] or c.shape[1] not in (1, 2):
        raise ValueError(f"coords must be (n,) or (n, 2) for n = {x.shape[0]}; got {c.shape}")
    labels = list(labels) if labels is not None else [f"x{j}" for j in range(c.shape[1])]
    fig, axes = plt.subplots(
        1, len(idx), figsize=(3.4 * len(idx) + 0.4, 3.2), layout="constrained", squeeze=False
    )
    for ax, i in zip(axes[0], idx, strict=True):
        title = f"φ{i}, λ = {lam[i].real:.3g}" + (f"{lam[i].imag:+.2g}i" if lam[i].imag else "")
        if c.shape[1] == 1:
            order = np.argsort(c[:, 0])
            ax.plot(c[order, 0], phi[order, i], ".", ms=2, alpha=0.5)
            ax.set_xlabel(labels[0])
            ax.set_ylabel("value")
        else:
            stat = binned_statistic_2d(c[:, 0], c[:, 1], phi[:, i], "mean", bins=bins)
            top = float(np.nanmax(np.abs(stat.statistic)))  # a scale symmetric about 0
            img = ax.pcolormesh(
                stat.x_edge,
                stat.y_edge,
                stat.statistic.T,
                cmap="coolwarm",
                vmin=-top,
                vmax=top,
                shading="flat",
            )
            fig.colorbar(img, ax=ax, label="mean value")
            ax.set_xlabel(labels[0])
            ax.set_ylabel(labels[1])
        ax.set_title(title, fontsize="small")
    return fig


def free_energy(
    coords: Any,
    weights: Any = None,
    *,
    kT: float = 1.0,
    energy_units: str = "kT",
    labels: Sequence[str] | None = None,
    bins: int = 60,
    ax: Any = None,
    vmax: float | None = None,
) -> Any:
    """Free-energy surface ``F = -kT ln p`` of two coordinates, shifted to a minimum of 0.

    Parameters
    ----------
    coords : array (n, 2)
        The two coordinates of each frame (e.g. dihedral angles).
    weights : array (n,), optional
        Frame weights, e.g. :meth:`dpnets.TransferOperator.stationary_weights` to reweight
        off-equilibrium data to equilibrium (negative weights are clipped to 0).
    kT : float, default 1.0
        Thermal energy in ``energy_units`` (e.g. 3.326 kJ/mol at 400 K).
    labels : sequence of str, optional
        Axis labels with units.
    bins : int, default 60
    vmax : float, optional
        Top of the colour scale (default: the 99th percentile of the finite values).

    Returns
    -------
    matplotlib axes
    """
    plt = pyplot()
    c = np.asarray(coords, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != 2:
        raise ValueError(f"coords must be (n, 2); got shape {c.shape}")
    w = (
        None
        if weights is None
        else np.clip(np.real(np.asarray(weights, dtype=np.complex128)), 0, None)
    )
    hist, xe, ye = np.histogram2d(c[:, 0], c[:, 1], bins=bins, weights=w, density=True)
    with np.errstate(divide="ignore"):
        f = -float(kT) * np.log(hist)
    f -= np.min(f[np.isfinite(f)])
    f[~np.isfinite(f)] = np.nan
    if ax is None:
        _, ax = plt.subplots(figsize=(4.8, 3.8), layout="constrained")
    top = np.nanpercentile(f, 99) if vmax is None else vmax
    img = ax.pcolormesh(xe, ye, f.T, cmap="viridis", vmin=0, vmax=top, shading="flat")
    ax.figure.colorbar(img, ax=ax, label=f"free energy ({energy_units})")
    labels = list(labels) if labels is not None else ["coordinate 1", "coordinate 2"]
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(
        "free energy" + (" (reweighted)" if weights is not None else ""), fontsize="medium"
    )
    return ax
