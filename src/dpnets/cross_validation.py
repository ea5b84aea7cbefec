"""Cross-validation of a model by whole trajectories: the held-out VAMP-1/2/E score
(:func:`dpnets.heldout.basis_score`) of refits on the other folds; a plain
:class:`dpnets.TransferOperator` on fixed features is refitted from summed moments
(:class:`dpnets.resampling.TrajectorySums`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpnets.heldout import HELDOUT_KINDS, basis_score, heldout_pairs
from dpnets.pairs import check_lag
from dpnets.params import check_choice, check_int, check_seed
from dpnets.resampling import (
    TrajectorySums,
    as_trajectories,
    check_units,
    fit_at_lag,
    fixed_feature_operator,
    refit_factory,
    split_blocks,
    whole_trajectories,
)
from dpnets.spectral import as_feature_map

__all__ = ["cross_validate"]


def cross_validate(
    estimator: Any,
    data: Any,
    *,
    lag: int = 1,
    cv: int = 5,
    kind: str = "vamp2",
    refit_features: bool = False,
    seed: int | None = None,
) -> np.ndarray:
    """Held-out VAMP scores, splitting by whole trajectories.

    The trajectories are shuffled (``seed``) and split into ``cv`` folds; a single
    trajectory is cut into ``cv`` contiguous blocks instead, so that no pair straddles the
    train/test boundary. For each fold the estimator is cloned, fitted on the other folds
    at ``lag`` (with ``refit_features``, a DPNet feature map is retrained on them too;
    otherwise fitted features are used as they are, which leaks their training data into
    the test folds) and scored on the held-out fold with ``score(kind=...)``
    (``"vamp1"``/``"vamp2"``: comparable across models with the same number of features).

    Returns
    -------
    ndarray (cv,)
        One score per fold.
    """
    lag = check_lag(lag)
    cv = check_int("cv", cv, 2)
    trajs = as_trajectories(data)
    if len(trajs) >= cv:
        order = np.random.default_rng(check_seed(seed)).permutation(len(trajs))
        folds = [[trajs[i] for i in part] for part in np.array_split(order, cv)]
    else:
        if len(trajs) > 1:
            raise ValueError(f"{len(trajs)} trajectories cannot make {cv} folds; lower cv")
        folds = [[block] for block in split_blocks(trajs[0], cv)]
    regression = fixed_feature_operator(estimator, refit_features)
    if regression is not None:
        return _cross_validate_from_sums(*regression, folds, lag, kind)
    build = refit_factory(estimator, refit_features)
    scores = np.empty(cv)
    for f in range(cv):
        train = [t for g, fold in enumerate(folds) if g != f for t in fold]
        est = fit_at_lag(build(lag, train), train, lag)
        scores[f] = est.score(folds[f], lag=lag, kind=kind)
    return scores


def _cross_validate_from_sums(
    features: Any, params: dict, folds: list[list[np.ndarray]], lag: int, kind: str
) -> np.ndarray:
    """:func:`cross_validate` of a plain :class:`TransferOperator` on fixed features: each
    fold's operator from the summed moments of the other folds' trajectories (encoded once),
    scored on the held-out fold by :func:`dpnets.heldout.basis_score` (the score of
    :meth:`TransferOperator.score`)."""
    check_choice("kind", kind, HELDOUT_KINDS)
    trajs = [t for fold in folds for t in fold]
    fold_of = [f for f, fold in enumerate(folds) for _ in fold]
    check_units(trajs, whole_trajectories(trajs), [lag])
    sums = TrajectorySums(features, params, trajs, [lag], [whole_trajectories(trajs)])
    fmap = as_feature_map(features)
    scores = np.empty(len(folds))
    for f, fold in enumerate(folds):
        fit = sums.fit(lag, 0, [int(g != f) for g in fold_of])
        p = heldout_pairs(fold, lag)
        training = (fit.cx, fit.cxy, fit.cy, fit.features_mean, fit.features_mean_y)
        bx, by = fit.basis(fmap(p.X)), fit.basis(fmap(p.Y))
        scores[f] = basis_score(
            bx, by, kind, constant=fit.constant, training=training, rtol=params["rtol"]
        )
    return scores
