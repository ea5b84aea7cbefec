"""Declarative parameter constraints (issue 34 item 4): one table per estimator,
``_parameter_constraints``, checked by ``fit`` and by ``dpnets.load``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ESTIMATORS

import dpnets
from dpnets.baselines import DMD, NystromKernelDMD
from dpnets.params import count, integer, one_of, real, satisfies, validate_params


@pytest.mark.parametrize("cls", list(ESTIMATORS), ids=lambda c: c.__name__)
def test_every_table_names_parameters_and_passes_on_the_tested_settings(cls):
    est = ESTIMATORS[cls]()
    # a table names parameters the constructor stores (VAMPNet's fixed gamma=0 included)
    assert all(hasattr(est, name) for name in cls._parameter_constraints)
    if cls.__name__ not in ("TransferOperator", "EDMD"):  # regression parameters only
        assert set(cls._parameter_constraints) & set(cls._get_param_names())
    est._check_params()  # the tested settings are accepted


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
