"""Biased simulations: lagged pairs in rescaled time, and importance weights of samples.

Rare events are sampled under a bias ``V(x)`` (metadynamics, OPES, umbrella sampling,
accelerated MD), and the slow modes wanted are those of the *unbiased* dynamics. This module
turns the per-frame log-weights ``beta V(x_t)`` of a biased run into what the estimators
regress on, by the two routes the literature offers:

* **Time rescaling** (transfer operators: :meth:`dpnets.TransferOperator.fit` and
  :meth:`dpnets.DPNet.fit` with ``log_weights``): the biased step of length ``dt`` lasts
  ``dt exp(beta V(x_t))`` of unbiased time (Voter's hyperdynamics; Tiwary and Parrinello,
  PRL 111, 230602, 2013), and pairs are formed at the lag in that rescaled time (the
  practice of DeepTICA with OPES/metadynamics: Bonati, Piccini and Parrinello, PNAS 118,
  e2113533118, 2021; mlcolvar's ``create_timelagged_dataset(X, t, lag_time, logweights)``).
  The trajectory is read as piecewise constant in rescaled time, frame ``k`` lasting
  ``exp(log_weights[k])`` frames, and every pair ``(x_i, x_j)`` is weighted by the rescaled
  time ``s`` during which ``x(s) = x_i`` and ``x(s + lag) = x_j`` (:func:`rescaled_pairs`):
  the starting states of the pairs then follow the unbiased law and their lags are exact
  in rescaled time; without a bias (``log_weights = 0``) these are the ordinary pairs,
  each of weight 1. Valid when the bias changes slowly compared with the lag (a static
  bias, or a well-tempered one once quasi-static) and barely acts where the transitions
  happen (the transition states): the rescaled process then has the unbiased slow
  timescales. A bias that flattens the barrier itself makes it wrong (the tutorial and the
  tests show it): use the generator route.
* **Importance weights** (generators: :class:`dpnets.Generator` and
  ``DPNet(objective="generator")``, with ``sample_weight`` or ``log_weights``): the
  generator's least-squares estimator needs samples of a law and expectations under the
  unbiased one, which the weights ``exp(beta V)`` give exactly from samples of the biased
  law, whatever the bias (Devergne, Kostic, Parrinello and Pontil, "From biased to unbiased
  dynamics: an infinitesimal generator approach", NeurIPS 2024). No dynamics is used, only
  the SDE of the unbiased process.

``log_weights`` is ``beta V`` of each frame, ``V`` the bias energy as the engine writes it
(PLUMED's ``metad.bias`` or ``opes.bias``, :func:`dpnets.datasets.read_log_weights`) and
``beta = 1 / kT``; time rescaling depends on its absolute value (it must be about 0 where the
bias does not act), importance weights do not.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpnets.pairs import Pairs, PairSegment, check_lag
from dpnets.scores import GENERATOR_SCORES
from dpnets.states import check_not_rows, check_states, chunks, is_streaming, to_numpy

__all__ = [
    "check_log_weights",
    "rescaled_pair_indices",
    "RescaledSegment",
    "rescaled_segments",
    "rescaled_pairs",
    "weighted_chunks",
    "check_sample_weight",
    "importance_weights",
    "check_weight_args",
]

#: segments of rescaled time shorter than this fraction of the shortest frame are dropped
#: (round-off slivers between breakpoints that coincide)
_SLIVER = 1e-9


def _trajectories(data: Any) -> list:
    """The validated trajectories of ``data`` (an array or a list of arrays); pre-paired
    ``(X, Y)`` data and Datasets are refused: their pairs are already made."""
    if isinstance(data, tuple) or is_streaming(data):
        raise ValueError(
            "log_weights needs trajectories (an array, or a list of arrays, one per "
            "trajectory) to pair in rescaled time; pre-paired (X, Y) data, Datasets and "
            "DataLoaders hold their pairs already"
        )
    if isinstance(data, list):
        if not data:
            raise ValueError("empty list of trajectories")
        check_not_rows(data, "X")
        return [check_states(t, f"trajectory {k}", lazy=True) for k, t in enumerate(data)]
    return [check_states(data, "trajectory", lazy=True)]


def check_log_weights(log_weights: Any, lengths: list[int]) -> list[np.ndarray]:
    """``log_weights`` per trajectory of ``lengths`` frames, float64, checked.

    ``log_weights`` is one array of all the frames in order (of trajectories concatenated)
    or a list of arrays, one per trajectory. A ``ValueError`` names ``log_weights`` for a
    wrong length, a NaN or inf, or values whose exponential overflows.
    """
    if isinstance(log_weights, (list, tuple)) and len(log_weights) and np.ndim(log_weights[0]):
        if len(log_weights) != len(lengths):
            raise ValueError(
                f"log_weights is a list of {len(log_weights)} arrays for {len(lengths)} "
                "trajectories: pass one array per trajectory, or one array of all frames"
            )
        parts = [np.asarray(to_numpy(w), dtype=np.float64) for w in log_weights]
        for k, (w, n) in enumerate(zip(parts, lengths, strict=True)):
            if w.ndim != 1 or w.shape[0] != n:
                raise ValueError(
                    f"log_weights[{k}] has shape {w.shape} for the {n} frames of trajectory {k}"
                )
    else:
        flat = np.asarray(to_numpy(log_weights), dtype=np.float64)
        total = sum(lengths)
        if flat.ndim != 1 or flat.shape[0] != total:
            raise ValueError(
                f"log_weights has shape {flat.shape}; expected ({total},): one value (beta "
                "times the bias energy) per frame"
            )
        parts = np.split(flat, np.cumsum(lengths)[:-1])
    bad = sum(int(np.count_nonzero(~np.isfinite(w))) for w in parts)
    if bad:
        raise ValueError(f"log_weights contains {bad} NaN or inf value(s)")
    top = max(float(w.max()) if w.size else -np.inf for w in parts)
    if top > 700.0:
        raise ValueError(
            f"log_weights reaches {top:.4g}, whose exponential overflows: log_weights is beta "
            "times the bias energy (in units of kT), not the energy itself"
        )
    return parts


def rescaled_pair_indices(
    log_weights: np.ndarray, lag: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The lagged pairs of one trajectory in rescaled time: ``(i, j, w, span)``.

    Frame ``k`` lasts ``exp(log_weights[k])`` frames of rescaled time (``span`` their sum);
    ``x(s)`` is the frame whose interval holds ``s``. Over every ``s`` in
    ``[0, span - lag)`` the pair ``(x(s), x(s + lag))`` is one of the ``(x_i, x_j)``, and
    ``w`` is the measure of the ``s`` that give it; so ``w`` sums to ``span - lag``, each
    frame starts pairs of total weight its own duration (the unbiased law, for a
    quasi-static bias), and ``log_weights = 0`` gives ``i = 0..n-lag-1``, ``j = i + lag``,
    ``w = 1``. At most ``2 n`` pairs.

    Raises
    ------
    ValueError
        If the rescaled trajectory is not longer than ``lag``.
    """
    inc = np.exp(np.asarray(log_weights, dtype=np.float64))
    edges = np.concatenate([[0.0], np.cumsum(inc)])
    span = float(edges[-1])
    if not span > lag:
        raise ValueError(
            f"the rescaled trajectory lasts {span:.6g} frames (the sum of exp(log_weights)), "
            f"not longer than lag={lag}: no pair in rescaled time; use a shorter lag or more "
            "data"
        )
    end = span - lag
    # the starting times s where x(s) or x(s + lag) changes frame
    breaks = np.concatenate([edges, edges - lag])
    breaks = np.unique(breaks[(breaks >= 0.0) & (breaks <= end)])
    width = np.diff(breaks)
    keep = width > _SLIVER * float(inc.min())
    start, width = breaks[:-1][keep], width[keep]
    mid = start + 0.5 * width
    n = inc.shape[0]
    i = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, n - 1)
    j = np.clip(np.searchsorted(edges, mid + lag, side="right") - 1, 0, n - 1)
    return i.astype(np.int64), j.astype(np.int64), width, span


@dataclass(frozen=True)
class RescaledSegment(PairSegment):
    """The pairs of one trajectory in rescaled time: ``(x_states[i[k]], x_states[j[k]])``
    of weight ``w[k]`` (:func:`rescaled_pair_indices`; ``x0 = y0 = 0``, ``n`` pairs), the
    states referenced, never copied; ``span`` is the trajectory's rescaled length in
    frames. A :class:`dpnets.pairs.PairSegment` everywhere one is read (:meth:`chunks`,
    :meth:`x_chunks`); :func:`weighted_chunks` adds the weights."""

    i: np.ndarray
    j: np.ndarray
    w: np.ndarray
    span: float

    def chunks(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for x, y, _ in self.weighted_chunks(size):
            yield x, y

    def x_chunks(self, size: int) -> Iterator[np.ndarray]:
        for sl in chunks(self.n, size):
            yield np.asarray(self.x_states[self.i[sl]])

    def weighted_chunks(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(X, Y, w)`` chunks of at most ``size`` pairs, in order."""
        for sl in chunks(self.n, size):
            yield (
                np.asarray(self.x_states[self.i[sl]]),
                np.asarray(self.x_states[self.j[sl]]),
                self.w[sl],
            )


def rescaled_segments(data: Any, lag: int, log_weights: Any) -> list[RescaledSegment]:
    """The pairs of trajectories ``data`` at ``lag`` frames of rescaled time, one
    :class:`RescaledSegment` per trajectory (see :func:`rescaled_pair_indices`).

    Parameters
    ----------
    data : array or list of arrays
        Trajectories of a biased simulation, frames equally spaced in simulation time.
    lag : int
        Lag in frames of unbiased (rescaled) time.
    log_weights : array (n_frames,) or list of arrays
        ``beta V`` of every frame (:func:`check_log_weights`).
    """
    lag = check_lag(lag)
    trajs = _trajectories(data)
    shape = trajs[0].shape[1:]
    for k, t in enumerate(trajs):
        if t.shape[1:] != shape:
            raise ValueError(
                f"trajectory {k} has state shape {t.shape[1:]}, trajectory 0 has {shape}"
            )
    parts = check_log_weights(log_weights, [int(t.shape[0]) for t in trajs])
    out = []
    for k, (t, lw) in enumerate(zip(trajs, parts, strict=True)):
        try:
            i, j, w, span = rescaled_pair_indices(lw, lag)
        except ValueError as err:
            where = f"trajectory {k}: " if len(trajs) > 1 else ""
            raise ValueError(f"{where}{err}") from None
        out.append(RescaledSegment(t, t, 0, 0, int(i.shape[0]), i, j, w, span))
    return out


def rescaled_pairs(data: Any, lag: int, log_weights: Any) -> Pairs:
    """The weighted :class:`dpnets.pairs.Pairs` (``w``) of :func:`rescaled_segments`, the
    trajectories' states concatenated (one trajectory's referenced), for the training
    batches of :class:`dpnets.DPNet`."""
    segs = rescaled_segments(data, lag, log_weights)
    if len(segs) == 1:
        s = segs[0]
        states = s.x_states
        if not isinstance(states, np.ndarray):  # out of core: read (pairs index anywhere)
            states = np.asarray(states)
        return Pairs(states, states, s.i, s.j, s.w)
    trajs = [np.asarray(s.x_states) for s in segs]
    offsets = np.cumsum([0] + [t.shape[0] for t in trajs[:-1]])
    states = np.concatenate(trajs)
    i = np.concatenate([o + s.i for o, s in zip(offsets, segs, strict=True)])
    j = np.concatenate([o + s.j for o, s in zip(offsets, segs, strict=True)])
    w = np.concatenate([s.w for s in segs])
    return Pairs(states, states, i, j, w)


def weighted_chunks(
    seg: PairSegment, size: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """``(X, Y, weights)`` chunks of a segment of pairs: a :class:`RescaledSegment`'s
    weights, None (uniform) for any other :class:`dpnets.pairs.PairSegment`."""
    if isinstance(seg, RescaledSegment):
        yield from seg.weighted_chunks(size)
        return
    for x, y in seg.chunks(size):
        yield x, y, None


def check_sample_weight(sample_weight: Any, n: int) -> np.ndarray | None:
    """Validated sample weights of ``n`` samples (float64), or None for uniform weights: a
    ``ValueError`` naming ``sample_weight`` for a wrong length, negative or non-finite
    values, or weights all zero."""
    if sample_weight is None:
        return None
    w = np.asarray(to_numpy(sample_weight), dtype=np.float64)
    if w.ndim > 1 and w.size != w.shape[0]:
        raise ValueError(
            f"sample_weight must hold one weight per sample, got shape {w.shape}: "
            "Generator.fit(X, sample_weight) takes samples of the invariant law, not "
            "lagged pairs (fit(X) on the states)"
        )
    w = w.reshape(-1)
    if w.shape[0] != n:
        raise ValueError(f"sample_weight has {w.shape[0]} entries for {n} samples")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError("sample_weight must be finite, non-negative and not all zero")
    return w


def importance_weights(
    sample_weight: Any, log_weights: Any, lengths: list[int]
) -> np.ndarray | None:
    """The importance weights of the samples of a biased law (arrays of ``lengths``
    samples), checked: ``sample_weight`` as given (:func:`check_sample_weight`), or
    ``exp(log_weights)`` (one array of all samples, or one per array; the weighted averages
    divide out any constant factor, and pieces of a ``partial_fit`` stay on one scale), or
    None when neither is given; both at once are refused."""
    if log_weights is None:
        return check_sample_weight(sample_weight, sum(lengths))
    check_weight_args(log_weights, sample_weight, objective="generator")
    return np.exp(np.concatenate(check_log_weights(log_weights, lengths)))


def check_weight_args(
    log_weights: Any, sample_weight: Any, *, objective: str, windows: bool = False
) -> None:
    """Refuse weights a fit cannot use, each in one line naming the argument. On samples
    (``objective`` ``"generator"`` or ``"dirichlet"``) both are importance weights: one or
    the other. On lagged pairs (any other ``objective``), ``sample_weight`` is refused
    (``log_weights`` pairs frames in rescaled time), and so are ``log_weights`` with
    multi-step ``windows`` (rescaled time has none)."""
    if objective in GENERATOR_SCORES:
        if log_weights is not None and sample_weight is not None:
            raise ValueError(
                "pass either sample_weight (importance weights exp(beta V)) or log_weights "
                "(beta V), not both"
            )
        return
    if sample_weight is not None:
        raise ValueError(
            f"sample_weight weighs the samples of the generator objectives, not lagged "
            f"pairs (objective={objective!r}): for trajectories of a biased run pass "
            "log_weights (beta V per frame), which pairs them in rescaled time"
        )
    if log_weights is not None and windows:
        raise ValueError(
            "log_weights pairs frames in rescaled time, which has no multi-step windows: "
            "set consistency=0"
        )
