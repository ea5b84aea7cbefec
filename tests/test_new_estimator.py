"""The example of ARCHITECTURE.md's "Adding an estimator": a minimal estimator built the
documented way, which passes scikit-learn's ``check_estimator``, saves, loads and goes
through :func:`dpnets.validation.ck_test` like the library's own estimators.

:class:`AffineOperator` is the least-squares transfer operator on the affine features
``[1, x]`` of the (flattened) state: parameters in ``__init__`` only, ``fit`` from
:class:`dpnets.moments.Moments` through :func:`dpnets.estimation.estimate_operator`, the
fitted attributes set from the :class:`dpnets.estimation.OperatorFit`, and a saved form
registered with :func:`dpnets.io.register`. It is ``TransferOperator(None, constant=True)``
written from the parts, so the tests compare it with that.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

from dpnets import TransferOperator, load
from dpnets.base import fit_data
from dpnets.estimation import estimate_operator, operator_products
from dpnets.io import arrays_to_tensors, register, tensors_to_arrays
from dpnets.moments import FIT_CHUNK, Moments
from dpnets.pairs import pair_segments, resolve_lag
from dpnets.spectral import (
    OPTIONAL_ARRAYS,
    DiscreteTimeModel,
    dump_fitted_scalars,
    regression_constraints,
    restore_fitted_state,
)
from dpnets.systems import OrnsteinUhlenbeck
from dpnets.validation import ck_test


class AffineOperator(DiscreteTimeModel):
    """Least-squares transfer operator on the affine features ``[1, x]`` (the example).

    Parameters
    ----------
    ridge : float, default 0.0
        Tikhonov regularisation added to ``Cx``.
    rtol : float, optional
        Relative rank cut-off of the pseudo-inverse.
    lag : int, optional
        Lag in frames between paired states (default 1).
    dt : float, default 1.0
        Time between frames.
    """

    def __init__(
        self, ridge: float = 0.0, rtol: float | None = None, lag: int | None = None, dt: float = 1.0
    ):
        # 1. parameters: stored unchanged, read by get_params/clone/set_params
        self.ridge = ridge
        self.rtol = rtol
        self.lag = lag
        self.dt = dt

    # every constructor parameter's accepted values, checked by fit and by dpnets.load
    _parameter_constraints = regression_constraints("ridge", "rtol", "lag", "dt")

    def fit(self, X: Any, y: Any = None) -> AffineOperator:
        """Fit on trajectories ``X`` (an array or a list of arrays); ``fit(X, Y)`` is pairs."""
        # 2. validation at the boundary: the parameters, then the data (pairs at the lag)
        self._check_params()
        data, lag = fit_data(self, X, y)  # fit(X, Y) is fit((X, Y))
        pair_lag, lag_ = resolve_lag(data, lag)
        segments = pair_segments(data, pair_lag)
        # 3. the sufficient statistics, chunk by chunk (features: the identity, None)
        stats = Moments(operator_products())
        for seg in segments:
            for x, x_lag in seg.chunks(FIT_CHUNK):
                TransferOperator.add_pairs(stats, _identity, x, x_lag)
        # 4. the numerics: a pure function of the moments, then the fitted attributes
        fit = estimate_operator(stats, ridge=float(self.ridge), rtol=self.rtol, constant=True)
        fit.apply_to(self)
        self.features_, self.lag_ = None, lag_
        self.state_shape_ = segments[0].state_shape
        # 5. the training inputs' features, for observables given on the training samples
        self.features_x_ = np.concatenate(
            [self.transform(x) for seg in segments for x in seg.x_chunks(FIT_CHUNK)]
        )
        return self


def _identity(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)


#: 6. persistence: the arrays to save (the spectrum is recomputed at load)
_ARRAYS = ("operator_", "cx_", "cxy_", "cx_pinv_", "state_coef_")


def _dump(model: AffineOperator, tensors: dict[str, torch.Tensor]) -> dict:
    arrays_to_tensors(model, _ARRAYS, tensors)
    optional = [name for name in OPTIONAL_ARRAYS if getattr(model, name, None) is not None]
    arrays_to_tensors(model, optional, tensors)
    return {"params": model.get_params(), "fitted": dump_fitted_scalars(model)}


def _restore(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> AffineOperator:
    model = AffineOperator(**cfg["params"])
    model.features_ = None
    tensors_to_arrays(model, tensors, _ARRAYS)
    restore_fitted_state(model, cfg["fitted"], tensors)
    return model


register("tests.AffineOperator", AffineOperator, _dump, _restore)


# ------------------------------------------------------------------------------ the tests
def _ou(n: int = 4, length: int = 800) -> list[np.ndarray]:
    return [OrnsteinUhlenbeck(dt=0.1).sample(length, seed=s) + 3.0 for s in range(n)]


def test_it_is_the_transfer_operator_on_affine_features():
    trajs = _ou()
    mine = AffineOperator(lag=2, dt=0.1).fit(trajs)
    ref = TransferOperator(None, constant=True, lag=2, dt=0.1).fit(trajs)
    for name in ("operator_", "cx_", "cxy_", "state_coef_", "eigvals_"):
        np.testing.assert_allclose(getattr(mine, name), getattr(ref, name), rtol=1e-12, atol=1e-12)
    # the OU process: eigenvalue exp(-lag dt) of its linear eigenfunction, here from data
    assert abs(mine.eigvals_[1].real - np.exp(-0.2)) < 0.02
    x0 = trajs[0][:5]
    np.testing.assert_allclose(mine.predict(x0, t=3), ref.predict(x0, t=3), atol=1e-12)


def test_check_estimator():
    pytest.importorskip("sklearn")
    from sklearn.utils.estimator_checks import check_estimator
    from test_sklearn_checks import TIME_SERIES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(
            AffineOperator(), expected_failed_checks=TIME_SERIES, on_fail=None
        )
    failed = {r["check_name"]: str(r["exception"]) for r in results if r["status"] == "failed"}
    assert not failed, failed
    assert len({r["check_name"] for r in results}) >= 40


def test_save_load_and_ck_test(tmp_path):
    trajs = _ou()
    model = AffineOperator(lag=2).fit(trajs)
    model.save(tmp_path / "affine.pt")
    again = load(tmp_path / "affine.pt")
    assert type(again) is AffineOperator and again.get_params() == model.get_params()
    np.testing.assert_array_equal(again.eigvals_, model.eigvals_)
    np.testing.assert_array_equal(
        again.predict(trajs[1][:4], t=2), model.predict(trajs[1][:4], t=2)
    )

    def sets(x: np.ndarray) -> np.ndarray:  # below and above the mean
        return np.eye(2)[(np.asarray(x)[:, 0] > 3.0).astype(int)]

    ck = ck_test(model, trajs, [1, 2, 4], sets)
    ref = ck_test(TransferOperator(None, constant=True, lag=2).fit(trajs), trajs, [1, 2, 4], sets)
    np.testing.assert_allclose(ck.predictions, ref.predictions, atol=1e-10)
    np.testing.assert_allclose(ck.estimates, ref.estimates, atol=1e-10)
    # a loaded model holds no training inputs: ck_test re-estimates it on the data
    loaded = ck_test(again, trajs, [1, 2, 4], sets)
    np.testing.assert_allclose(loaded.predictions, ck.predictions, atol=1e-10)
    # rows of a crisp CK test are probabilities
    np.testing.assert_allclose(ck.estimates.sum(-1), 1.0, atol=1e-10)
