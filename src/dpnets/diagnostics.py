"""What makes a fitted result untrustworthy, found at fit time and said with its remedy.

Every estimator checks its own fit and warns (:class:`DiagnosticWarning`, a
``UserWarning``) when a result should not be trusted as it stands; ``dpnets fit`` writes the
same findings into the report's *Diagnostics* section, with the remedy as command-line
options instead of Python keywords. Each finding is a :class:`Diagnostic`: what was found,
with its numbers, and the remedy in both interfaces.

The checks (documented choices, thresholds in the module constants):

* **growing modes**: an eigenvalue of modulus above ``1 + ABOVE_ONE_TOL`` (a transfer
  operator's spectrum lies in the unit disc; a least-squares estimate from finite or
  non-equilibrium data need not). Its implied timescale is undefined (``nan``), never
  ``inf``. A reversible estimate (``reversible=True``) has real eigenvalues in ``[-1, 1]``
  by construction (``|v^T C_t v| <= v^T C_0 v``).
* **complex leading modes**: a complex pair among the slowest ``LEADING`` processes. Real
  for reversible dynamics (equilibrium MD), so there they signal estimation noise and
  PCCA+ cannot use them; legitimate oscillations for non-reversible dynamics (flows,
  forecasting), so the estimators only note them (``warn=False``) and ``dpnets fit``
  reports them.
* **no process resolved**: the slowest process's ``|lambda|`` within the noise level
  ``NOISE_FACTOR * sqrt(r / n)`` of zero (``r`` features, ``n`` pairs: the size of the
  largest canonical correlation of independent data), so the lag is too long for
  anything to be left of the dynamics.
* **timescales longer than the data**: an implied timescale above the simulated time of
  all trajectories together (a process the data cannot have sampled; many short
  trajectories can resolve a timescale longer than each of them, as Markov state models
  do, but not one longer than all of them).
* **rank-deficient basis** (:func:`rank_diagnostics`): fewer linearly independent basis
  functions on the data (``cx_rank_``, to the relative cut-off ``rtol``) than the basis
  has: the dropped directions get eigenvalue 0 by truncation, not dynamics (monomials of
  raw data with a large offset are collinear to round-off).
* **few pairs**: fewer pairs than ``MIN_PAIRS_PER_FEATURE`` times the number of features
  (of the estimator's inputs for a network, of the basis for a regression).
* **not converged**: the validation score still rising over the last epochs (at least
  ``CONVERGED_MIN_EPOCHS`` epochs; the rise over the last ``max(2, epochs // 5)`` epochs
  more than ``CONVERGED_RISE`` of the score's whole rise).
* **saturated score**: a DPNet's best validation score within ``SATURATION_TOL`` of its
  ceiling (``r + 1`` for the projection, relaxed and VAMP scores of ``[1, psi]``; the
  ``r`` learned features' mean squared canonical correlation at least
  ``1 - SATURATION_TOL``). At a lag short against the dynamics (Lorenz-63 at ``dt = 0.01``,
  lag 1) nearly every smooth function of the state is almost perfectly correlated with
  itself one lag later, so the score cannot tell features apart: it saturates within a
  few epochs and the features need not span the state, which a forecast needs (the
  forecasting tutorial shows both; the remedies: the state appended to the features, a
  larger ``r``, a longer ``lag``).
* **few gradient steps**: a DPNet trained for fewer than ``MIN_GRADIENT_STEPS`` optimiser
  steps (``epochs * ceil(n_train / batch_size)``: 250 frames at the default batch of 1024
  take one step an epoch, 30 in all).
* **forecast worse than persistence** (:func:`persistence_diagnostics`, by ``dpnets fit``
  and ``dpnets forecast``): the model's forecast of the state has a larger RMSE than
  repeating the last state (``x_{t+h} = x_t``), the reference any forecast must beat. The
  learned features need not carry the state (a projection score at its ceiling, a
  trending series); the remedies: the state appended to the features, a stationary series.
* **data that do not change** (:func:`no_change_diagnostics`, at a ``TransferOperator``'s
  fit): every training frame is the same state (the training range of every coordinate is
  one value), so there are no dynamics to learn; it replaces the findings that follow from
  it (no process resolved, a rank-deficient basis). A finding, not a refusal: estimators
  still fit such data (scikit-learn's estimator checks do).
* **inputs outside the training range** (:func:`range_diagnostics`, at ``predict``): states
  beyond the training data's range in some coordinate by more than ``RANGE_MARGIN`` of that
  coordinate's range; a model regressed on the training states extrapolates there.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "Diagnostic",
    "DiagnosticWarning",
    "spectrum_diagnostics",
    "sample_diagnostics",
    "rank_diagnostics",
    "training_diagnostics",
    "saturation_diagnostics",
    "steps_diagnostics",
    "fit_diagnostics",
    "range_diagnostics",
    "persistence_diagnostics",
    "no_change_diagnostics",
    "warn",
    "ABOVE_ONE_TOL",
    "NOISE_FACTOR",
]

#: moduli up to ``1 + ABOVE_ONE_TOL`` count as 1 (round-off of the stationary eigenvalue)
ABOVE_ONE_TOL = 1e-6
#: the number of slowest processes whose eigenvalues are checked for complex pairs
LEADING = 3
#: the noise level of an eigenvalue: ``NOISE_FACTOR * sqrt(r / n)``
NOISE_FACTOR = 3.0
#: fewer pairs than this many per feature are flagged
MIN_PAIRS_PER_FEATURE = 5
#: the fewest epochs on which convergence is judged
CONVERGED_MIN_EPOCHS = 4
#: a rise of the validation score over the last epochs above this fraction of its whole
#: rise counts as still improving
CONVERGED_RISE = 0.05
#: a DPNet's score whose learned features' mean squared canonical correlation is within
#: this of 1 counts as saturated
SATURATION_TOL = 0.05
#: fewer optimiser steps than this are flagged
MIN_GRADIENT_STEPS = 100
#: prediction inputs further outside the training range than this fraction of it are flagged
RANGE_MARGIN = 0.1


class DiagnosticWarning(UserWarning):
    """A fitted result that should not be trusted as it stands; the message names the
    remedy (``warnings.simplefilter("error", DiagnosticWarning)`` makes them errors)."""


@dataclass(frozen=True)
class Diagnostic:
    """One finding about a fit: what was found, and what to do in each interface.

    Attributes
    ----------
    kind : str
        ``"above_one"``, ``"complex"``, ``"unresolved"``, ``"beyond_data"``,
        ``"few_pairs"``, ``"no_change"`` (training states that never change),
        ``"not_converged"``, ``"saturated"``, ``"few_steps"``, ``"out_of_range"``,
        ``"worse_than_persistence"``, ``"time_column"`` (a pandas table's time axis read as
        data, :mod:`dpnets.states`), ``"irregular"`` (a pandas index unevenly spaced in
        time), ``"dropped"``, ``"rank_deficient"``, or, from ``dpnets analyze``,
        ``"few_units"`` (a bootstrap over fewer than 5 trajectories or blocks),
        ``"few_resamples"`` (fewer bootstrap resamples than a 95% interval needs),
        ``"short_blocks"`` (a single trajectory's bootstrap blocks shorter than the slowest
        timescale), ``"step_warning"`` (a warning of one of its validation steps, such as
        timescales beyond the data at a longer lag) and ``"other_time_step"`` (files saved
        at another time step than the fit's).
    problem : str
        What was found, with its numbers.
    python : str
        The remedy in Python keywords.
    cli : str
        The remedy as ``dpnets`` command-line options.
    warn : bool
        Whether the estimators warn (False: a note, reported by ``dpnets fit`` only).
    """

    kind: str
    problem: str
    python: str
    cli: str
    warn: bool = True

    def message(self, cli: bool = False) -> str:
        """``problem; remedy`` in the interface asked for."""
        return f"{self.problem}; {self.cli if cli else self.python}"


def warn(diagnostics: Iterable[Diagnostic]) -> None:
    """Issue a :class:`DiagnosticWarning` for each diagnostic that warns, attributed to
    the first caller outside dpnets (the user's ``fit``)."""
    for d in diagnostics:
        if d.warn:
            warnings.warn(d.message(), DiagnosticWarning, stacklevel=_outside_level())


def _outside_level() -> int:
    """The ``stacklevel`` of ``warnings.warn`` called from :func:`warn` that names the first
    frame outside the dpnets package."""
    import os
    import sys

    root = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(2), 2  # the caller of warn
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(root):
        frame, level = frame.f_back, level + 1
    return level


def _fmt(lam: complex) -> str:
    lam = complex(lam)
    if lam.imag == 0:
        return f"{lam.real:.4g}"
    return f"{lam.real:.4g}{lam.imag:+.4g}i"


def _unresolved_remedy(r: int, n: int, noise: float) -> tuple[str, str]:
    """The remedies of no resolved process, in Python and on the command line: a shorter
    lag; and where the noise level ``NOISE_FACTOR * sqrt(r / n)`` is 1 or more (nothing can
    be resolved at any lag, a short series), the number of pairs that brings it to 0.5."""
    if noise < 1.0:
        return "choose a shorter lag (lag=)", "choose a shorter --lag"
    need = math.ceil(r * (2 * NOISE_FACTOR) ** 2)
    why = (
        f"with {n} pairs for {r} basis functions the noise level is above 1, so no lag "
        f"resolves anything: use more data (about {need} pairs bring it to 0.5) or fewer "
        "features"
    )
    return f"{why} (r=)", f"{why} (--dim)"


def spectrum_diagnostics(
    eigvals: Any,
    *,
    constant: bool,
    n_samples: int | None = None,
    lag_time: float | None = None,
    span: float | None = None,
    units: str = "frames",
    generator: bool = False,
    params: Collection[str] | None = None,
) -> list[Diagnostic]:
    """The findings about a transfer operator's (or generator's) spectrum.

    Parameters
    ----------
    eigvals : array (r,)
        The eigenvalues in the estimator's order (the constant function's first when
        ``constant``).
    constant : bool
        Whether the basis holds the constant function (its eigenvalue, 1, is skipped).
    n_samples : int, optional
        The number of pairs (for the noise level).
    lag_time : float, optional
        The lag in time units (with ``span``: timescales longer than the data).
    span : float, optional
        The total length of the trajectories, in the same units.
    units : str
        The unit of ``lag_time`` and ``span``, for the messages.
    generator : bool
        Eigenvalues of a generator (stable when the real part is at most 0).
    params : collection of str, optional
        The parameters of the estimator (``get_params()``): the Python remedies name only
        these (``reversible=``, ``stabilize=``); default: a :class:`dpnets.TransferOperator`'s.
    """
    lam = np.asarray(eigvals, dtype=np.complex128).ravel()
    start = 1 if constant and lam.size else 0
    rest = lam[start:]
    idx = np.arange(start, lam.size)
    out: list[Diagnostic] = []
    if rest.size == 0:
        return out
    if generator:
        grow = rest.real > ABOVE_ONE_TOL * max(float(np.abs(lam).max()), 1e-300)
    else:
        grow = np.abs(rest) > 1.0 + ABOVE_ONE_TOL
    if grow.any():
        ks = idx[grow].tolist()
        worst = rest[grow][np.argmax(rest[grow].real if generator else np.abs(rest[grow]))]
        what = (
            f"positive real part ({_fmt(worst)})"
            if generator
            else f"modulus above 1 (|lambda| = {abs(worst):.5g}, lambda = {_fmt(worst)})"
        )
        out.append(
            Diagnostic(
                "above_one",
                f"eigenvalue(s) k = {ks} have {what}: growing modes, not relaxation; "
                "their implied timescales are undefined (nan) and forecasts along them grow",
                _growing_remedy(generator, params),
                "refit with --reversible true (a real spectrum in [-1, 1]) if the dynamics "
                "are reversible (equilibrium MD), else with more data or a smaller --dim",
            )
        )
    noise = NOISE_FACTOR * math.sqrt(lam.size / max(int(n_samples), 1)) if n_samples else 0.0
    lead = rest[:LEADING]
    cplx = (np.abs(lead.imag) > 1e-8 * np.maximum(1.0, np.abs(lead))) & (np.abs(lead) > noise)
    if cplx.any() and not generator:
        j = int(np.flatnonzero(cplx)[0])
        out.append(
            Diagnostic(
                "complex",
                f"the slow modes k = {idx[:LEADING][cplx].tolist()} are complex (lambda = "
                f"{_fmt(lead[j])}): an oscillation, or noise of a non-reversible estimate; "
                "PCCA+ and timescales of reversible dynamics need real modes",
                "for reversible dynamics (equilibrium MD) refit with reversible=True"
                if _has(params, "reversible")
                else f"for reversible dynamics (equilibrium MD) {_REVERSIBLE} has real modes",
                "for reversible dynamics (equilibrium MD) refit with --reversible true "
                "(dpnets analyze --reversible true re-estimates without refitting)",
                warn=False,
            )
        )
    if n_samples and not generator:
        top = float(np.abs(rest).max())
        if top <= noise:
            out.append(
                Diagnostic(
                    "unresolved",
                    f"no process is resolved at this lag: the slowest non-stationary "
                    f"|eigenvalue| ({top:.3g}) is within the noise level ({noise:.3g}) of 0",
                    *_unresolved_remedy(lam.size, int(n_samples), noise),
                )
            )
    if lag_time and span and not generator:
        mod = np.abs(rest)
        ok = (mod > 0) & (mod < 1.0 - 1e-10)
        ts = np.full(mod.shape, np.nan)
        ts[ok] = -float(lag_time) / np.log(mod[ok])
        long = ok & (ts > float(span))
        if long.any():
            # without the constant function in the basis (classical DMD), the data's mean
            # is fitted as the slowest mode, k = 0, and pulls the others towards 1
            mean = (
                ""
                if constant or not long[0]
                else (
                    "; k = 0 of a basis without the constant function is often the data's "
                    "mean fitted as a slow mode, which biases the other modes too"
                )
            )
            fix = "" if not mean else "refit with constant=True (or on centred data), or "
            out.append(
                Diagnostic(
                    "beyond_data",
                    f"implied timescale(s) of k = {idx[long].tolist()} ({np.nanmax(ts):.4g} "
                    f"{units}) exceed all the data together ({float(span):.4g} {units}): "
                    f"processes the data cannot have sampled{mean}",
                    f"{fix}trust only timescales well inside the data; add longer trajectories",
                    "trust only timescales well inside the data; add longer trajectories",
                )
            )
    return out


#: a reversible estimate, for the remedies of estimators without ``reversible=``
_REVERSIBLE = "a reversible estimate (dpnets.TransferOperator(features, reversible=True))"


def _has(params: Collection[str] | None, name: str) -> bool:
    """Whether an estimator of parameters ``params`` (None: a TransferOperator's) has
    ``name``."""
    return params is None or name in params


def _growing_remedy(generator: bool, params: Collection[str] | None) -> str:
    """The Python remedy for growing modes, naming only the estimator's own parameters."""
    if generator:  # a Generator has neither reversible= nor stabilize=
        return (
            "refit with form='dirichlet' (with SDE(..., reversible=True): a real spectrum "
            "<= 0 by construction) if the process is reversible, else with more data or "
            "fewer features"
        )
    if _has(params, "reversible"):
        fix = (
            "refit with reversible=True (a real spectrum in [-1, 1]) if the dynamics are "
            "reversible (equilibrium MD), else with more data or fewer features"
        )
    else:
        fix = (
            "refit with more data or fewer features; for reversible dynamics (equilibrium "
            f"MD), {_REVERSIBLE} has a real spectrum in [-1, 1]"
        )
    if _has(params, "stabilize"):
        fix += "; for forecasts, stabilize=True projects them onto the unit circle"
    return fix


def sample_diagnostics(
    n_samples: int,
    n_features: int,
    what: str = "features",
    remedy: str = "fewer features",
    cli: str = "fewer input features (--features, --selection, --stride, --preproject)",
) -> list[Diagnostic]:
    """The finding of too few pairs for ``n_features`` (``what`` names them; ``remedy`` and
    ``cli``: what to reduce, in Python and on the command line)."""
    n, d = int(n_samples), int(n_features)
    if d <= 0 or n >= MIN_PAIRS_PER_FEATURE * d:
        return []
    return [
        Diagnostic(
            "few_pairs",
            f"{n} lagged pairs for {d} {what} (fewer than {MIN_PAIRS_PER_FEATURE} per "
            "one): the fit can follow noise, and its timescales be far too long",
            f"use more data or {remedy}",
            f"use more data, or {cli}",
        )
    ]


def rank_diagnostics(rank: int, n_features: int, eigvals: Any = None) -> list[Diagnostic]:
    """The finding of a regression basis of numerical rank ``rank`` below its
    ``n_features`` functions (``cx_rank_``: the eigenvalues of ``Cx + ridge I`` above the
    relative cut-off ``rtol``); the dropped directions' eigenvalues (of ``eigvals``, 0 by
    construction) are named by their ``k``."""
    rank, r = int(rank), int(n_features)
    if rank >= r:
        return []
    lam = np.abs(np.asarray(eigvals if eigvals is not None else [], dtype=np.complex128))
    zeros = np.flatnonzero(lam <= 1e-12 * max(float(lam.max(initial=0.0)), 1e-300))
    which = f" (k = {zeros.tolist()})" if 0 < zeros.size <= r - rank else ""
    return [
        Diagnostic(
            "rank_deficient",
            f"only {rank} of the {r} basis functions are linearly independent on the data "
            f"(at the pseudo-inverse's relative cut-off, rtol=): {r - rank} eigenvalue(s)"
            f"{which} are 0 by truncation, not dynamics, and the rest are fitted on the "
            f"{rank} independent ones",
            "use fewer or better-conditioned features: a smaller r; DMD(rank=) for "
            "snapshots of a field (its leading POD modes); for monomials of raw, offset "
            "data (collinear to round-off), centred and scaled data or EDMD's 'chebyshev' "
            "dictionary (scaled to the data)",
            "use fewer features (a smaller --dim)",
        )
    ]


def training_diagnostics(history: dict, objective: str = "score") -> list[Diagnostic]:
    """The finding of a training run whose validation (else training) score was still
    rising at its last epochs."""
    scores: Sequence[float] = history.get("val_score") or history.get("train_score") or []
    s = np.asarray(scores, dtype=np.float64)
    s = s[np.isfinite(s)]
    epochs = s.size
    if epochs < CONVERGED_MIN_EPOCHS:
        return []
    w = max(2, epochs // 5)
    rise = s[-1] - s[-1 - w]
    whole = s.max() - s[0]
    if not (whole > 0 and rise > CONVERGED_RISE * whole and rise > 1e-6 * max(1.0, abs(s[-1]))):
        return []
    return [
        Diagnostic(
            "not_converged",
            f"training has not converged: the {objective} rose by {rise:.3g} over the last "
            f"{w} of {epochs} epochs ({100 * rise / whole:.0f}% of its whole rise)",
            "train longer (epochs=)",
            "train longer (--epochs)",
        )
    ]


def saturation_diagnostics(
    history: dict, r: int, trivial: int, objective: str = "score"
) -> list[Diagnostic]:
    """The finding of a validation score at its ceiling ``r + trivial`` (``trivial``: 1
    when the score counts the constant function, as the VAMP scores and the DPNets scores
    of ``[1, psi]`` do; else 0): the ``r`` learned features' mean squared canonical
    correlation ``(score - trivial) / r`` at least ``1 - SATURATION_TOL`` at the best
    epoch."""
    s = np.asarray(history.get("val_score") or history.get("train_score") or [], np.float64)
    s = s[np.isfinite(s)]
    if s.size == 0 or r < 1:
        return []
    level = (s - trivial) / r
    if level.max() < 1.0 - SATURATION_TOL:
        return []
    below = np.flatnonzero(level < 1.0 - SATURATION_TOL)
    first = int(below[-1]) + 2 if below.size else 1  # 1-based epoch from which it stays up
    if first <= s.size:
        first_txt = f"from epoch {first} of {s.size} on"
    else:
        first_txt = f"at epoch {int(np.argmax(level)) + 1} of {s.size}"
    return [
        Diagnostic(
            "saturated",
            f"the {objective} is at its ceiling: {s.max():.4g} of {r + trivial} "
            f"(the {r} features' mean squared correlation one lag later "
            f"{level.max():.3f}) {first_txt}, so it cannot tell features apart: at a lag "
            "short against the dynamics nearly any smooth function of the state is "
            "predictable, and the features need not span the state",
            "to forecast the state append it to the features "
            "(TransferOperator(..., append_state=True)) or learn more features (r=); for "
            "slow processes choose a longer lag (lag=)",
            "learn more features (a larger --dim) or choose a longer --lag; to forecast the "
            "state use TransferOperator(..., append_state=True) in Python",
        )
    ]


def steps_diagnostics(n_train: int, batch_size: int, epochs: int) -> list[Diagnostic]:
    """The finding of fewer than ``MIN_GRADIENT_STEPS`` optimiser steps:
    ``epochs * ceil(n_train / batch_size)``."""
    per_epoch = max(1, math.ceil(int(n_train) / int(batch_size)))
    steps = int(epochs) * per_epoch
    if steps >= MIN_GRADIENT_STEPS:
        return []
    need = math.ceil(MIN_GRADIENT_STEPS / per_epoch)
    return [
        Diagnostic(
            "few_steps",
            f"training took {steps} gradient step{'s' * (steps != 1)} ({epochs} epoch(s) of "
            f"{per_epoch} batch(es): {n_train} training pairs at batch_size={batch_size}), "
            f"fewer than {MIN_GRADIENT_STEPS}: the features are barely trained",
            f"train for more steps: epochs={need} at this batch size, or a smaller "
            "batch_size= (ceil(n_pairs / batch_size) steps an epoch; keep it well above r)",
            f"train for more steps: --epochs {need} at this batch size, or a smaller --batch-size",
        )
    ]


def no_change_diagnostics(low: Any, high: Any) -> list[Diagnostic]:
    """The finding of training states that never change (every frame the same state: the
    training range ``[low, high]`` of every coordinate is one value); none when the range is
    unknown (None)."""
    if low is None or high is None or not np.array_equal(low, high):
        return []
    remedy = (
        "check the data (a constant or frozen signal, or the wrong array or columns); a "
        "model needs states that change"
    )
    return [
        Diagnostic(
            "no_change",
            "the data do not change: every training frame is the same state, so there are no "
            "dynamics to learn (the eigenvalues and timescales mean nothing)",
            remedy,
            remedy,
        )
    ]


def range_diagnostics(
    x: Any, low: Any, high: Any, margin: float = RANGE_MARGIN
) -> list[Diagnostic]:
    """The finding of states ``x`` (n, d) outside the training range ``[low, high]`` (per
    coordinate) by more than ``margin`` of that coordinate's range."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    lo = np.asarray(low, dtype=np.float64).ravel()
    hi = np.asarray(high, dtype=np.float64).ravel()
    if x.size == 0 or x.shape[1] != lo.size:
        return []
    width = hi - lo
    pad = margin * np.where(width > 0, width, np.maximum(np.abs(hi), 1.0))
    beyond = np.maximum(lo - x, x - hi) / np.where(width > 0, width, 1.0)
    out = (x < lo - pad) | (x > hi + pad)
    if not out.any():
        return []
    rows = int(out.any(axis=1).sum())
    j = int(np.argmax(np.where(out, beyond, -np.inf).max(axis=0)))
    worst = float(beyond[:, j].max())
    return [
        Diagnostic(
            "out_of_range",
            f"{rows} of {len(x)} states lie outside the training data's range (coordinate "
            f"{j} up to {worst:.3g} times the width of its range [{lo[j]:.4g}, "
            f"{hi[j]:.4g}] beyond it): the model extrapolates there",
            "fit on data that covers these states, or model a stationary series (e.g. its "
            "differences, or the deviations from a trend)",
            "fit on data that covers these states, or model a stationary series (e.g. its "
            "differences, or the deviations from a trend)",
        )
    ]


def persistence_diagnostics(
    model_rmse: Sequence[float], persistence_rmse: Sequence[float], horizons: Sequence[str], on: str
) -> list[Diagnostic]:
    """The finding of a forecast of the state worse than persistence (``x_{t+h} = x_t``):
    ``model_rmse`` above ``persistence_rmse`` at some of ``horizons`` (their names, e.g.
    ``"1 lag"``), measured ``on`` (what data, for the message). A note (``warn=False``):
    ``dpnets fit`` reports it, ``dpnets forecast`` warns with it."""
    model = np.asarray(model_rmse, dtype=np.float64)
    pers = np.asarray(persistence_rmse, dtype=np.float64)
    worse = np.flatnonzero(model > pers)
    if worse.size == 0:
        return []
    pairs = ", ".join(f"{model[i]:.4g} against {pers[i]:.4g} at {horizons[i]}" for i in worse)
    return [
        Diagnostic(
            "worse_than_persistence",
            f"the model forecasts the state worse than persistence (x_t+h = x_t) {on} (RMSE "
            f"{pairs}): use persistence rather than these forecasts; the learned features do "
            "not carry the state (a trending series, or a score that cannot tell features "
            "apart); this concerns forecasts of the state only, not the slow modes and their "
            "timescales",
            "regress on the state too (TransferOperator(..., append_state=True)), model a "
            "stationary series (its differences, or the deviations from a trend), and compare "
            "with dpnets.forecasting.forecast_errors",
            "model a stationary series (its differences, or the deviations from a trend) or "
            "learn more features (--dim); to regress on the state too, "
            "TransferOperator(dpnets.load('FIT/model.pt').features_, append_state=True)"
            ".fit(x) in Python",
            warn=False,
        )
    ]


def fit_diagnostics(
    history: dict,
    objective: str,
    *,
    n_train: int | None,
    batch_size: int,
    epochs: int,
    n_features: int | None = None,
    trivial: int = 0,
    n_inputs: int | None = None,
) -> list[Diagnostic]:
    """The findings on the training of a neural feature map: a training run not converged
    (:func:`training_diagnostics`), too few gradient steps (:func:`steps_diagnostics`,
    with ``n_train``), a score saturated at its ceiling (:func:`saturation_diagnostics`,
    with ``n_features``, ``trivial`` of them trivial) and few pairs per input coordinate
    (:func:`sample_diagnostics`, with ``n_inputs`` and ``n_train``)."""
    found = training_diagnostics(history, objective)
    if n_train is not None:
        epochs = len(history.get("train_score", [])) or int(epochs)
        found += steps_diagnostics(n_train, int(batch_size), epochs)
    if n_features is not None:
        found += saturation_diagnostics(history, int(n_features), trivial, objective)
    if n_inputs is not None and n_train is not None:
        what, remedy = "input coordinates", "fewer input coordinates"
        found += sample_diagnostics(n_train, int(n_inputs), what, remedy)
    return found
