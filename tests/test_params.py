"""Declarative parameter constraints (issue 34 item 4, issue 43 item 4): one complete table
per estimator, ``_parameter_constraints``, checked by ``fit`` and by ``dpnets.load``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ESTIMATORS

import dpnets
import dpnets.baselines
from dpnets.base import BaseEstimator
from dpnets.baselines import DMD, NystromKernelDMD
from dpnets.params import BATCH_SIZE, count, integer, one_of, real, satisfies, validate_params


def _public_estimators() -> list[type]:
    """Every estimator class that ``dpnets`` and ``dpnets.baselines`` export."""
    found: dict[type, None] = {}
    for module in (dpnets, dpnets.baselines):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, BaseEstimator):
                found[obj] = None
    return list(found)


def test_every_public_estimator_is_tested():
    assert set(_public_estimators()) == set(ESTIMATORS)


@pytest.mark.parametrize("cls", _public_estimators(), ids=lambda c: c.__name__)
def test_every_constructor_parameter_is_declared_in_the_table(cls):
    # as scikit-learn's check_param_validation: a parameter missing from the table is never
    # checked, an entry that is no parameter is stale
    params, table = set(cls._get_param_names()), set(cls._parameter_constraints)
    assert not params - table, f"{cls.__name__}: undeclared parameters {sorted(params - table)}"
    assert not table - params, f"{cls.__name__}: not parameters {sorted(table - params)}"


@pytest.mark.parametrize("cls", list(ESTIMATORS), ids=lambda c: c.__name__)
def test_every_table_entry_refuses_a_foreign_object_naming_the_parameter(cls):
    est = ESTIMATORS[cls]()
    est._check_params()  # the tested settings are accepted
    for name, check in cls._parameter_constraints.items():
        if hasattr(check, "where"):  # params.checked_in_fit: judged on the data in fit
            continue
        bad = ESTIMATORS[cls]()
        setattr(bad, name, object())
        with pytest.raises((TypeError, ValueError), match=name):
            bad._check_params()


def test_batch_size_has_one_bound_in_every_estimator():
    for cls in ESTIMATORS:
        if "batch_size" in cls._parameter_constraints:
            check = cls._parameter_constraints["batch_size"]
            assert check is BATCH_SIZE, cls.__name__
    with pytest.raises(ValueError, match=r"^batch_size must be an integer >= 2, got 1$"):
        dpnets.Generator(batch_size=1)._check_params()


def test_constraints_name_the_parameter_and_keep_their_error_kinds():
    class P:
        a, b, c, d, e = 2.5, -1.0, "x", 0, "y"

    with pytest.raises(TypeError, match=r"^a must be an integer, got 2.5 \(float\)$"):
        validate_params(P, {"a": integer(1)})
    with pytest.raises(ValueError, match=r"^b must be in \[0, inf\), got -1$"):
        validate_params(P, {"b": real(0.0)})
    with pytest.raises(ValueError, match=r"^c must be one of 'u', 'v'; got 'x'$"):
        validate_params(P, {"c": one_of("u", "v")})
    with pytest.raises(ValueError, match=r"^d must be a positive integer or None, got 0$"):
        validate_params(P, {"d": count()})
    with pytest.raises(ValueError, match=r"^e must be short, got 'y'$"):
        validate_params(P, {"e": satisfies(lambda v: len(v) > 3, "short")})
    validate_params(P, {"c": one_of("x", none=True), "d": integer(0), "e": satisfies(str)})
    for ok in (None, 1, np.int64(3)):
        count()("rank", ok)
    for bad in (True, 2.0, 0, "1"):
        with pytest.raises(ValueError, match="rank must be a positive integer or None"):
            count()("rank", bad)


def test_rank_is_checked_by_the_table_in_fit_and_at_load(tmp_path):
    x = np.random.default_rng(0).standard_normal((200, 3))
    with pytest.raises(ValueError, match="rank must be a positive integer or None, got 0"):
        DMD(rank=0).fit(x)
    with pytest.raises(ValueError, match="n_centers must be a positive integer or None"):
        NystromKernelDMD("rbf", n_centers=1.5).fit(x)
    dmd = DMD(rank=2).fit(x)
    dmd.save(tmp_path / "dmd.pt")
    assert dpnets.load(tmp_path / "dmd.pt").rank == 2
    dmd.rank = -1  # a file whose config carries a bad value is refused at load
    dmd.save(tmp_path / "bad.pt")
    with pytest.raises(dpnets.io.InvalidModelFile, match="rank must be a positive integer"):
        dpnets.load(tmp_path / "bad.pt")
