"""Validating a kinetic model, by what you ask of it (one module each; every name is
importable from here too):

* :mod:`dpnets.timescales`: are the implied timescales independent of the lag
  (:func:`implied_timescales`), and how certain is the spectrum (:func:`bootstrap_spectrum`)?
* :mod:`dpnets.chapman_kolmogorov`: does the model predict its own transitions at multiples of
  the lag (:func:`ck_test`)?
* :mod:`dpnets.metastable`: which metastable sets, and how many (:func:`pcca`,
  :func:`sets_from_gap`)?
* :mod:`dpnets.cross_validation`: how well do refits score on held-out trajectories
  (:func:`cross_validate`)?
* :mod:`dpnets.resampling`: the bootstrap over whole trajectories behind the intervals
  (:func:`bootstrap_trajectories`, :func:`percentile_interval`, :func:`resamples_needed`) and
  the per-trajectory sums that refit a fixed-feature operator without cloning it.
"""

from __future__ import annotations

from dpnets.base import clone
from dpnets.chapman_kolmogorov import ChapmanKolmogorov, ck_test
from dpnets.cross_validation import cross_validate
from dpnets.metastable import MetastableSets, pcca, sets_from_gap
from dpnets.resampling import bootstrap_trajectories, percentile_interval, resamples_needed
from dpnets.timescales import (
    ImpliedTimescales,
    Spectrum,
    bootstrap_spectrum,
    check_lags,
    implied_timescales,
)

__all__ = [
    "ImpliedTimescales",
    "implied_timescales",
    "cross_validate",
    "ChapmanKolmogorov",
    "ck_test",
    "Spectrum",
    "bootstrap_spectrum",
    "bootstrap_trajectories",
    "percentile_interval",
    "MetastableSets",
    "pcca",
    "check_lags",
    "sets_from_gap",
    "resamples_needed",
    "clone",
]
