"""Figures for validating and reading a kinetic model (needs matplotlib: ``pip install
dpnets[plot]``).

Every function returns one kind of object, the matplotlib :class:`~matplotlib.figure.Figure`
it drew on (a new one, or the figure of the axes given), so it can be restyled or saved
(``fig.savefig(...)``; ``fig.axes`` holds the panels). Nothing here chooses a backend:
without a display matplotlib falls back to its file-only Agg backend, so the functions work
headless (in CI, on a cluster node) and in notebooks alike.

* :func:`eigenvalues`: the spectrum in the complex plane with the unit circle, next to the
  distance ``1 − |λ|`` of each eigenvalue from the circle on a log scale (with its implied
  timescale), which stays readable when the slow eigenvalues crowd at 1;
* :func:`implied_timescales`: timescales against the lag, with bootstrap bands and the
  ``timescale = lag`` line (:func:`dpnets.validation.implied_timescales`);
* :func:`ck_test`: the Chapman–Kolmogorov grid (:func:`dpnets.validation.ck_test`);
* :func:`eigenfunctions`: eigenfunctions on one or two coordinates of the states;
* :func:`eigenfunction_traces`: each slow eigenfunction against time, a line per trajectory;
* :func:`modes`: the spatial (Koopman) modes of a field, each with its eigenvalue;
* :func:`free_energy`: a free-energy surface ``-kT ln p`` of two coordinates from (reweighted)
  frames.

A complex-conjugate pair of eigenvalues is one oscillating process: the plots draw and label
it once (its implied timescale, eigenfunction and mode are those of either member).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "eigenvalues",
    "modes",
    "implied_timescales",
    "ck_test",
    "eigenfunctions",
    "eigenfunction_traces",
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


def _figure(ax: Any, figsize: tuple[float, float]) -> tuple[Any, Any]:
    """The figure and axes to draw on: the given axes and their figure, or a new pair."""
    if ax is None:
        fig, ax = pyplot().subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax


def _pair_members(lam: np.ndarray) -> np.ndarray:
    """Whether each eigenvalue is the second member of a complex-conjugate pair (the
    conjugate of an earlier one, within round-off), to be drawn and labelled once."""
    lam = np.asarray(lam, dtype=np.complex128).ravel()
    second = np.zeros(lam.size, dtype=bool)
    for i in range(1, lam.size):
        tol = 1e-8 * max(1.0, abs(lam[i]))
        if (
            abs(lam[i].imag) > tol
            and not second[i - 1]
            and abs(lam[i] - np.conj(lam[i - 1])) <= tol
        ):
            second[i] = True
    return second


def _eig_label(lam: complex) -> str:
    """``λ = a`` or, for a complex pair, ``λ = a ± bi``."""
    lam = complex(lam)
    if lam.imag == 0:
        return f"λ = {lam.real:.4g}"
    return f"λ = {lam.real:.4g} ± {abs(lam.imag):.3g}i"


def eigenvalues(
    model: Any,
    ax: Any = None,
    k: int | None = None,
    *,
    view: str = "both",
    dt: float | None = None,
    units: str = "",
) -> Any:
    """Eigenvalues in the complex plane, and their distance from the unit circle.

    Slow processes have eigenvalues crowded at 1, where the complex plane cannot tell
    0.999 from 0.9999 (a factor 10 in timescale). The second panel shows ``1 − |λ|`` on a
    logarithmic axis, one point per eigenvalue, labelled with its implied timescale
    ``−lag·dt / ln|λ|`` (paper Sec. 2) when the model knows its lag; the stationary
    eigenvalue (``1 − |λ| ≤ 1e-10``) is marked on the bottom edge.

    Parameters
    ----------
    model : fitted model or array
        A model with ``eig()`` (a transfer operator: eigenvalues in the unit disc; a
        generator: rates in the left half-plane, drawn without the circle and with
        ``|Re λ|`` in the second panel) or the eigenvalues themselves.
    ax : matplotlib axes or a pair of axes, optional
        Where to draw: one axes for ``view="plane"`` or ``"gap"``, two for ``"both"``.
    k : int, optional
        Highlight the ``k`` leading eigenvalues (filled markers).
    view : {"both", "plane", "gap"}, default "both"
        The complex plane, the distance from the circle, or both side by side.
    dt : float, optional
        Time per frame for the timescale labels (default: the model's ``dt``).
    units : str
        Time units of the timescale labels (e.g. "ns").

    Returns
    -------
    matplotlib figure
    """
    if view not in ("both", "plane", "gap"):
        raise ValueError(f"view must be 'both', 'plane' or 'gap'; got {view!r}")
    plt = pyplot()
    vals = np.asarray(model.eig() if hasattr(model, "eig") else model, dtype=np.complex128)
    vals = vals.reshape(-1)
    if vals.size == 0:
        raise ValueError("eigenvalues: there are no eigenvalues to plot")
    n_panels = 2 if view == "both" else 1
    if ax is None:
        fig, axes = plt.subplots(
            1, n_panels, figsize=(4.2 * n_panels, 4.0), layout="constrained", squeeze=False
        )
        axes = list(axes[0])
    else:
        axes = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(axes) != n_panels:
            raise ValueError(f"ax: view={view!r} draws {n_panels} panel(s); got {len(axes)} axes")
        fig = axes[0].figure
    generator = hasattr(model, "eig") and type(model).__name__ == "Generator"
    k = vals.size if k is None else min(int(k), vals.size)
    if view in ("both", "plane"):
        _eig_plane(axes[0], vals, k, generator)
    if view in ("both", "gap"):
        _eig_gap(axes[-1], model, vals, k, generator, dt, units)
    return fig


def _eig_plane(ax: Any, vals: np.ndarray, k: int, generator: bool) -> None:
    if not generator:
        t = np.linspace(0, 2 * np.pi, 400)
        ax.plot(np.cos(t), np.sin(t), color="0.6", linewidth=1, label="unit circle")
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


def _eig_gap(
    ax: Any, model: Any, vals: np.ndarray, k: int, generator: bool, dt: Any, units: str
) -> None:
    """``1 − |λ|`` (``|Re λ|`` for a generator) per eigenvalue on a log axis."""
    gap = np.abs(vals.real) if generator else 1.0 - np.abs(vals)
    floor = 1e-10
    stationary = gap <= floor
    # the stationary eigenvalue sits on the bottom edge, a decade below the slowest process,
    # so that the processes keep the axis
    bottom = float(np.min(gap[~stationary])) / 10 if (~stationary).any() else floor
    shown = np.where(stationary, bottom, gap)
    index = np.arange(vals.size)
    lead = index < k
    ax.scatter(index[lead & ~stationary], shown[lead & ~stationary], s=28, zorder=3, color="C0")
    ax.scatter(
        index[~lead & ~stationary],
        shown[~lead & ~stationary],
        s=20,
        facecolors="none",
        edgecolors="C0",
    )
    if stationary.any():
        ax.scatter(
            index[stationary],
            shown[stationary],
            marker="v",
            color="0.4",
            s=30,
            label="stationary (λ = 0)" if generator else "stationary (|λ| = 1)",
        )
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.margins(x=0.2)  # room for the labels of the last points
    ax.set_yscale("log")
    ax.set_xlabel("eigenvalue index")
    ax.set_ylabel("|Re λ|" if generator else "1 − |λ|")
    timescales = _timescales(model, dt)
    if timescales is not None:
        unit = f" {units}" if units else ""
        second = _pair_members(vals)
        last_y = None  # the previous label's height: close neighbours alternate above/below
        below = False
        for i in np.flatnonzero(lead & ~stationary & ~second)[:8]:
            if not (np.isfinite(timescales[i]) and timescales[i] > 0):
                continue
            pair = i + 1 < vals.size and second[i + 1]
            close = last_y is not None and abs(np.log10(shown[i] / last_y)) < 0.15
            below = (not below) if close else False
            ax.annotate(
                f"{timescales[i]:.3g}{unit}" + (" (pair)" if pair else ""),
                # a pair's one label sits between its two points
                (index[i] + 0.5 * pair, shown[i]),
                textcoords="offset points",
                xytext=(4, -10 if below else 4),
                fontsize="x-small",
                ha="center" if pair else "left",
            )
            last_y = shown[i]
    if stationary.any():
        ax.legend(fontsize="small", loc="lower right")
    ax.set_title(
        "rates (labels: timescales)" if generator else "distance from 1 (labels: timescales)",
        fontsize="medium",
    )


def _timescales(model: Any, dt: float | None) -> np.ndarray | None:
    """The model's own implied timescales (its lag and ``dt``, or the ``dt`` given), in the
    order of ``eig()``; None for bare eigenvalues or a model without a known lag."""
    if not hasattr(model, "implied_timescales") or getattr(model, "lag_", 1) is None:
        return None
    try:
        ts = model.implied_timescales() if dt is None else model.implied_timescales(dt)
        return np.asarray(ts, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None


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

    Returns
    -------
    matplotlib figure
    """
    fig, ax = _figure(ax, (5.0, 3.6))
    ts = np.asarray(result.timescales, dtype=np.float64)
    # a complex pair gives two equal columns: one line, labelled with both processes
    same = [
        i > 0 and np.allclose(ts[:, i], ts[:, i - 1], rtol=1e-9, equal_nan=True)
        for i in range(ts.shape[1])
    ]
    for i in range(ts.shape[1]):
        if np.all(np.isnan(ts[:, i])) or same[i]:
            continue  # fewer processes than asked for, or the second member of a pair
        pair = i + 1 < ts.shape[1] and same[i + 1]
        label = f"processes {i + 1}, {i + 2} (pair)" if pair else f"process {i + 1}"
        (line,) = ax.plot(result.lag_times, ts[:, i], "o-", label=label)
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
    return fig


def ck_test(result: Any, units: str = "", names: Sequence[str] | None = None) -> Any:
    """The ``n_sets x n_sets`` Chapman–Kolmogorov grid: predicted (line, band) against
    estimated (markers, error bars) probabilities over the lag time.

    Parameters
    ----------
    result : dpnets.validation.ChapmanKolmogorov
    units : str
        Time units of the lag axis.
    names : sequence of str, optional
        Names of the sets (default 0, 1, ...).

    Returns
    -------
    matplotlib figure
    """
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
    low = float(min(np.min(result.predictions), np.min(result.estimates)))
    if low < 0:  # a model's set-to-set "probabilities" need not be; say so on the figure
        fig.suptitle(
            f"negative entries (down to {low:.2g}): the model's projections onto the sets "
            "are not probabilities there",
            fontsize="small",
        )
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
            ax.set_ylim(min(-0.05, low - 0.05), 1.05)
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
        How many eigenfunctions (a complex pair counts once: the real parts of its two
        eigenfunctions are equal).
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
    second = _pair_members(lam)  # a conjugate pair's real parts are equal: drawn once
    idx = [i for i in range(start, phi.shape[1]) if not second[i]][: int(k)]
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
        title = f"φ{i}, {_eig_label(lam[i])}"
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


def eigenfunction_traces(
    model: Any,
    trajectories: Sequence[Any],
    k: int = 2,
    *,
    dt: float = 1.0,
    units: str = "",
    names: Sequence[str] | None = None,
    max_lines: int = 10,
) -> Any:
    """Each slow eigenfunction (real part) against time, one line per trajectory: where
    the trajectories cross between the metastable states a slow eigenfunction separates.

    Parameters
    ----------
    model : fitted model with ``eig`` and ``eigenfunctions``
    trajectories : sequence of arrays (frames, ...)
    k : int, default 2
        How many eigenfunctions after the constant one (a complex pair counts once).
    dt : float, default 1.0
        Time per frame.
    units : str
        Time units.
    names : sequence of str, optional
        A label per trajectory (e.g. its file name).
    max_lines : int, default 10
        The most trajectories drawn (the first ones).

    Returns
    -------
    matplotlib figure
    """
    plt = pyplot()
    lam = np.asarray(model.eig())
    second = _pair_members(lam)  # a conjugate pair's real parts are equal: drawn once
    idx = [i for i in range(1, lam.size) if not second[i]][: int(k)]
    if not idx:
        raise ValueError("the model has no eigenfunction besides the constant one")
    shown = list(trajectories)[: int(max_lines)]
    fig, axes = plt.subplots(
        len(idx), 1, figsize=(7.0, 2.0 * len(idx) + 0.6), sharex=True, layout="constrained",
        squeeze=False,
    )  # fmt: skip
    for n, traj in enumerate(shown):
        phi = np.real(model.eigenfunctions(np.asarray(traj)))
        t = np.arange(phi.shape[0]) * float(dt)
        label = None if names is None else str(names[n])
        for ax, i in zip(axes[:, 0], idx, strict=True):
            ax.plot(t, phi[:, i], lw=0.8, label=label)
    for ax, i in zip(axes[:, 0], idx, strict=True):
        ax.set_ylabel(f"φ{i}")
        ax.set_title(f"eigenfunction {i}, {_eig_label(lam[i])}", fontsize="small")
    axes[-1, 0].set_xlabel(f"time{_unit(units)}")
    if names is not None:
        axes[0, 0].legend(fontsize="x-small", ncol=2)
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
    matplotlib figure
    """
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
    fig, ax = _figure(ax, (4.8, 3.8))
    top = np.nanpercentile(f, 99) if vmax is None else vmax
    img = ax.pcolormesh(xe, ye, f.T, cmap="viridis", vmin=0, vmax=top, shading="flat")
    ax.figure.colorbar(img, ax=ax, label=f"free energy ({energy_units})")
    labels = list(labels) if labels is not None else ["coordinate 1", "coordinate 2"]
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(
        "free energy" + (" (reweighted)" if weights is not None else ""), fontsize="medium"
    )
    return fig


def modes(
    model: Any,
    k: int = 4,
    *,
    observable: Any = None,
    shape: Sequence[int] | None = None,
    channel: int = 0,
    skip_stationary: bool = True,
    dt: float | None = None,
    units: str = "",
) -> Any:
    """The spatial (Koopman) modes of a field, each titled with its eigenvalue and implied
    timescale: ``E[x_t | x_0] ≈ Σ λ_iᵗ φ_i(x_0) m_i`` (:meth:`modes`, App. D.3).

    Each panel draws the real part of one mode ``m_i`` (a complex pair once: its modes
    are conjugate), as an image for 2-D fields, as a line for 1-D ones; the colour scale
    is symmetric about 0 (a mode is a pattern of signs, its scale set by ``φ_i``).

    Parameters
    ----------
    model : fitted model with ``modes()``, ``eig()``
        A transfer operator (or DMD, EDMD, kernel model) of field snapshots.
    k : int, default 4
        How many modes (after the stationary one with ``skip_stationary``).
    observable : array, optional
        Passed to ``model.modes`` (default: the state).
    shape : sequence of int, optional
        The shape of one field when the states are flattened (default: the model's
        ``state_shape_``).
    channel : int, default 0
        Which channel of fields of shape ``(channels, ny, nx)``.
    skip_stationary : bool, default True
        Leave out the mode of eigenvalue 1 (the mean field).
    dt : float, optional
        Time per frame for the timescales (default: the model's ``dt``).
    units : str
        Time units of the timescales.

    Returns
    -------
    matplotlib figure
    """
    plt = pyplot()
    m = np.asarray(model.modes(observable))
    lam = np.asarray(model.eig(), dtype=np.complex128)
    field_shape = tuple(shape) if shape is not None else tuple(m.shape[1:])
    if int(np.prod(field_shape)) != int(np.prod(m.shape[1:])):
        raise ValueError(
            f"shape={tuple(field_shape)} does not hold the {int(np.prod(m.shape[1:]))} values "
            "of a mode"
        )
    m = m.reshape(m.shape[0], *field_shape)
    if m.ndim == 4:  # (r, channels, ny, nx)
        if not 0 <= int(channel) < m.shape[1]:
            raise ValueError(f"channel={channel} is not one of the {m.shape[1]} channels")
        m = m[:, int(channel)]
    if m.ndim not in (2, 3):
        raise ValueError(
            f"modes of shape {field_shape} are not a 1-D or 2-D field (or channels of one): "
            "pass shape=(ny, nx)"
        )
    stationary = np.abs(lam - 1.0) < 1e-6
    second = _pair_members(lam)
    keep = ~second & ~(stationary if skip_stationary else np.zeros_like(stationary))
    idx = np.flatnonzero(keep)[: int(k)]
    if idx.size == 0:
        raise ValueError("the model has no mode to draw besides the stationary one")
    timescales = _timescales(model, dt)
    unit = f" {units}" if units else ""
    fig, axes = plt.subplots(
        1, idx.size, figsize=(3.2 * idx.size + 0.4, 2.8), layout="constrained", squeeze=False
    )
    for ax, i in zip(axes[0], idx, strict=True):
        re = np.real(m[i])
        top = float(np.max(np.abs(re))) or 1.0
        if re.ndim == 1:
            ax.plot(np.arange(re.size), re)
            ax.axhline(0, color="0.85", linewidth=0.8, zorder=0)
            ax.set_xlabel("coordinate")
        else:
            img = ax.imshow(re, cmap="coolwarm", vmin=-top, vmax=top, origin="lower")
            fig.colorbar(img, ax=ax, shrink=0.8)
            ax.set_xticks([])
            ax.set_yticks([])
        title = f"mode {i}, {_eig_label(lam[i])}"
        if timescales is not None and np.isfinite(timescales[i]) and timescales[i] > 0:
            title += f"\ntimescale {timescales[i]:.3g}{unit}"
        ax.set_title(title, fontsize="small")
    return fig
