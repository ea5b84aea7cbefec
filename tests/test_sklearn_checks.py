"""scikit-learn's own estimator checks (``check_estimator``) on every dpnets estimator.

Only the checks that time-series input makes inapplicable are listed as expected failures,
each with its reason, through scikit-learn's ``expected_failed_checks``; the test asserts
that they do fail (so the list stays true) and that every other check passes.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

from dpnets import DPNet, TransferOperator  # noqa: E402
from dpnets.baselines import (  # noqa: E402
    DMD,
    EDMD,
    ConsistentAutoencoder,
    DynamicAutoencoder,
    KernelDMD,
    NystromKernelDMD,
    VAMPNet,
)

#: inapplicable to trajectories: these fail by design, for every estimator
TIME_SERIES = {
    "check_fit1d": "a 1-D array is one trajectory of scalar states, not an error",
    "check_fit2d_predict1d": "a 1-D array is one trajectory of scalar states, not an error",
    "check_transformer_data_not_an_array": (
        "a Python list is a list of trajectories: X.tolist() is 20 trajectories of 3 scalar "
        "states, so the features come back as a list of 20 arrays"
    ),
}
#: float32 networks: a state's features depend on the batch it is encoded in at float32
#: round-off (about 1e-7 relative), above these checks' 1e-7 absolute tolerance; they may
#: pass or fail with the weights, so they are allowed to fail (test_batch_invariance below
#: checks the same property at float32 tolerance)
FLOAT32 = {
    "check_methods_subset_invariance": "float32 network: batch-dependent round-off (1e-7)",
    "check_methods_sample_order_invariance": "float32 network: batch-dependent round-off",
}

#: DPNet.fit's sample_weight weighs the samples of its generator objectives (samples of a
#: biased law, issue 44); on lagged pairs (the default objective) it is refused in one line
#: naming log_weights, the weights of a biased run's pairs: scikit-learn's sample_weight
#: checks on the default objective therefore fail by design
PAIR_WEIGHTS = {
    name: "sample_weight is for the generator objectives; lagged pairs take log_weights"
    for name in (
        "check_all_zero_sample_weights_error",
        "check_sample_weight_equivalence_on_dense_data",
        "check_sample_weights_list",
        "check_sample_weights_not_an_array",
        "check_sample_weights_not_overwritten",
        "check_sample_weights_pandas_series",
        "check_sample_weights_shape",
    )
}

_NET = dict(r=2, epochs=2, seed=0, progress=False)
ESTIMATORS = {
    "TransferOperator": (lambda: TransferOperator(), False),
    "DMD": (lambda: DMD(), False),
    "EDMD": (lambda: EDMD("monomial", degree=1), False),
    "KernelDMD": (lambda: KernelDMD(rank=2), False),
    "NystromKernelDMD": (lambda: NystromKernelDMD(n_centers=20, rank=2, seed=0), False),
    "DPNet": (lambda: DPNet(**_NET), True),
    "VAMPNet": (lambda: VAMPNet(**_NET), True),
    "DynamicAutoencoder": (lambda: DynamicAutoencoder(n_steps=1, **_NET), True),
    "ConsistentAutoencoder": (lambda: ConsistentAutoencoder(n_steps=1, **_NET), True),
}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_check_estimator(name):
    make, neural = ESTIMATORS[name]
    expected = {**TIME_SERIES, **(FLOAT32 if neural else {})}
    if name == "DPNet":
        expected.update(PAIR_WEIGHTS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(make(), expected_failed_checks=expected, on_fail=None)
    status = {}
    for r in results:
        status.setdefault(r["check_name"], set()).add(r["status"])
    failed = {
        r["check_name"]: f"{type(r['exception']).__name__}: {r['exception']}"
        for r in results
        if r["status"] == "failed"
    }
    assert not failed, failed
    assert len(status) >= 40  # the whole battery ran
    for check in TIME_SERIES:  # inapplicable, and truly so
        assert status[check] == {"xfail"}, (check, status[check])


@pytest.mark.parametrize("name", ["DPNet", "ConsistentAutoencoder"])
def test_batch_invariance(name):
    """What the float32 checks test, at float32 tolerance: the features of a subset (or a
    permutation) of states are those of the whole batch."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    model = ESTIMATORS[name][0]().fit(x)
    full = model.transform(x)
    perm = rng.permutation(200)
    np.testing.assert_allclose(model.transform(x[perm]), full[perm], rtol=1e-5, atol=1e-6)
    for sl in (slice(0, 1), slice(3, 5), slice(10, 47)):
        np.testing.assert_allclose(model.transform(x[sl]), full[sl], rtol=1e-5, atol=1e-6)
