"""Validation that cannot mislead (issue 25, part): requested lags and steps are used as
given or refused, k within the model's eigenvalues, too few resamples and intervals that
exclude their estimate are flagged, results print as a summary."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpnets.baselines import EDMD
from dpnets.systems import OrnsteinUhlenbeck
from dpnets.validation import (
    bootstrap_spectrum,
    ck_test,
    implied_timescales,
    resamples_needed,
)


@pytest.fixture(scope="module")
def ou():
    trajs = [OrnsteinUhlenbeck(dt=0.1).sample(1500, seed=s) for s in range(4)]
    return trajs, EDMD("monomial", degree=3, dt=0.1, lag=2).fit(trajs)


def _one_set(x):
    return np.ones((len(x), 1))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda m, x: implied_timescales(m, x, [1.5]), r"lags must be positive integers, got 1\.5"),
        (lambda m, x: implied_timescales(m, x, None), "lags must be a sequence"),
        (lambda m, x: implied_timescales(m, x, []), "lags is empty"),
        (lambda m, x: implied_timescales(m, x, [0]), "got 0"),
        (lambda m, x: implied_timescales(m, x, [1500]), "lag 1500 is not shorter than the"),
        (lambda m, x: ck_test(m, x, steps=[1.5], memberships=_one_set), "steps must be positive"),
        (lambda m, x: ck_test(m, x, steps=[], memberships=_one_set), "steps is empty"),
        (lambda m, x: ck_test(m, x, steps=[750], memberships=_one_set), r"\(1500 frames\)"),
        (lambda m, x: bootstrap_spectrum(m, x, k=5), "k=5 exceeds the model's 4 eigenvalues"),
    ],
)
def test_requested_values_are_used_as_given_or_refused(ou, call, match):
    trajs, model = ou
    with pytest.raises(ValueError, match=match):
        call(model, trajs)


def test_too_few_resamples_warn_with_the_number_needed(ou):
    trajs, model = ou
    assert resamples_needed(0.95) == 40 and resamples_needed(0.9) == 20
    with pytest.warns(RuntimeWarning, match="n_bootstrap=5 is too few.*n_bootstrap >= 40"):
        implied_timescales(model, trajs, [1, 2], k=1, dt=0.1, n_bootstrap=5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # enough resamples: no warning at all
        spec = bootstrap_spectrum(model, trajs, k=3, n_bootstrap=40, seed=0)
    # the exact OU eigenvalues at lag 2 (dt 0.1) lie in the intervals
    exact = np.exp(-0.2 * np.arange(3))
    assert np.all(spec.modulus_lower <= exact + 1e-12) and np.all(exact <= spec.modulus_upper)


def test_an_interval_that_excludes_its_estimate_is_flagged(ou):
    """Three resamples (too few, and said so): the second eigenvalue's modulus of the full
    fit, 0.6686, lies above all three refits; round-off of the stationary eigenvalue 1 is
    never flagged."""
    trajs, model = ou
    with pytest.warns(RuntimeWarning) as record:
        spec = bootstrap_spectrum(model, trajs, k=3, n_bootstrap=3, seed=4)
    flagged = [str(w.message) for w in record if "outside their own" in str(w.message)]
    assert len(flagged) == 1 and flagged[0].startswith("1 eigenvalue moduli lie outside")
    assert abs(spec.eigvals[2]) > spec.modulus_upper[2]
    for seed in (7,):  # resamples whose stationary eigenvalue differs by round-off only
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            bootstrap_spectrum(model, trajs, k=3, n_bootstrap=3, seed=seed)
        assert not [w for w in record if "outside their own" in str(w.message)]


def test_results_print_as_a_summary(ou):
    trajs, model = ou
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        its = implied_timescales(model, trajs, [1, 2], k=2, dt=0.1, n_bootstrap=3, seed=0)
    text = repr(its)
    assert (
        text.splitlines()[0]
        == "ImpliedTimescales(2 processes, 2 lags, 95% intervals from 3 resamples)"
    )
    assert len(text.splitlines()) == 4 and "[" in text.splitlines()[2]
    spec = bootstrap_spectrum(model, trajs, k=2, n_bootstrap=40, seed=0)
    assert repr(spec).splitlines()[0].startswith("Spectrum(2 eigenvalues, 95% intervals")
    assert len(repr(spec)) < 400  # a summary, not every resample
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ck = ck_test(model, trajs, [1, 2], _one_set, n_bootstrap=3, seed=0)
    lines = repr(ck).splitlines()
    assert lines[0].startswith("ChapmanKolmogorov(1 sets, 3 lag times, 95% intervals; largest")
    assert len(lines) == 5 and lines[2].strip().startswith("0 | 1 [1, 1] / 1 [1, 1]")


def test_one_behaviour_at_every_entry_point(tmp_path):
    """Lists of trajectories and loaded models go everywhere fit goes; dt comes from the
    model. A 3-state chain observed through noisy one-hot vectors, dt = 0.5."""
    import dpnets
    from dpnets import TransferOperator
    from dpnets.systems import MarkovChain
    from dpnets.validation import pcca

    P = np.array([[0.98, 0.02, 0.0], [0.01, 0.98, 0.01], [0.0, 0.02, 0.98]])
    rng = np.random.default_rng(0)
    trajs = [
        np.eye(3)[MarkovChain(P).sample(3000, seed=k)] + 0.01 * rng.normal(size=(3000, 3))
        for k in range(3)
    ]
    op = TransferOperator(None, lag=2, dt=0.5).fit(trajs)
    frames = np.concatenate(trajs)
    np.testing.assert_allclose(op.stationary_weights(trajs), op.stationary_weights(frames))
    np.testing.assert_allclose(pcca(op, trajs, 3).memberships, pcca(op, frames, 3).memberships)

    def crisp(x):
        return np.eye(3)[np.argmax(x, axis=1)]

    ck = ck_test(op, trajs, [1, 2], memberships=crisp)
    np.testing.assert_allclose(ck.lag_times, [0.0, 1.0, 2.0])  # time units of the model's dt
    op.save(tmp_path / "op.pt")
    loaded = ck_test(dpnets.load(tmp_path / "op.pt"), trajs, [1, 2], memberships=crisp)
    np.testing.assert_allclose(loaded.predictions, ck.predictions, atol=1e-10)
    np.testing.assert_allclose(loaded.estimates, ck.estimates, atol=1e-10)
    # on crisp sets of a chain the diagonals are the chain's own, P^2 and P^4 (steps 1 and 2
    # of the lag of 2 frames; index 0 is lag 0), within sampling error
    for j, frames_ahead in ((1, 2), (2, 4)):
        exact = np.diag(np.linalg.matrix_power(P, frames_ahead))
        np.testing.assert_allclose(np.diag(ck.estimates[j]), exact, atol=0.02)
        np.testing.assert_allclose(np.diag(ck.predictions[j]), exact, atol=0.02)
    its = implied_timescales(TransferOperator(None, dt=0.5), trajs, [1, 2], k=2)
    np.testing.assert_allclose(its.lag_times, [0.5, 1.0])


def test_ck_test_on_pcca_sets_reads_like_the_hidden_chain():
    """Issue 25's case: a hidden 4-state chain (self-transition 0.99 per frame) seen through
    noisy emissions at the corners of a square in raw units, lag 5. On the (default, crisp)
    PCCA+ sets the CK diagonals are the chain's own, (P^5k)_ii, for predictions and
    estimates; the lag-0 point is the estimator's value (the identity for crisp sets), and
    fuzzy memberships show their self-overlap there instead of a drawn identity."""
    from dpnets import TransferOperator
    from dpnets.systems import MarkovChain
    from dpnets.validation import pcca

    P = np.full((4, 4), 0.01 / 3) + np.eye(4) * (0.99 - 0.01 / 3)
    corners = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    rng = np.random.default_rng(0)
    trajs = []
    for k in range(4):
        s = MarkovChain(P).sample(20_000, seed=k)
        trajs.append(100.0 * (corners[s] + 0.15 * rng.normal(size=(len(s), 2))) + 40.0)

    def bumps(x: np.ndarray) -> np.ndarray:  # smooth features: the eigenfunctions are fuzzy
        z = (np.asarray(x) - 40.0) / 100.0
        return np.exp(-((z[:, None, :] - corners[None]) ** 2).sum(-1) / (2 * 0.8**2))

    op = TransferOperator(bumps, lag=5, dt=0.5).fit(trajs)
    sets = pcca(op, trajs, 4)
    ck = ck_test(op, trajs, [1, 2, 4], memberships=sets.memberships_of)
    np.testing.assert_allclose(ck.lag_times, [0.0, 2.5, 5.0, 10.0])
    np.testing.assert_allclose(ck.predictions[0], np.eye(4), atol=1e-12)
    for j, k in enumerate((1, 2, 4), start=1):
        exact = np.diag(np.linalg.matrix_power(P, 5 * k))
        np.testing.assert_allclose(np.diag(ck.estimates[j]), exact, atol=0.02)
        np.testing.assert_allclose(np.diag(ck.predictions[j]), exact, atol=0.02)
    # fuzzy memberships mix their self-overlap (about 0.9 here) into every point: step 1
    # then reads about 0.86 where the chain stays with probability 0.951
    fuzzy = ck_test(op, trajs, [1], memberships=sets.fuzzy_memberships_of)
    overlap = np.diag(fuzzy.predictions[0])
    assert np.all(overlap < 0.95) and np.allclose(overlap, np.diag(fuzzy.estimates[0]))
    assert np.all(np.diag(fuzzy.predictions[1]) < 0.9)


def test_the_number_of_sets_comes_from_the_spectral_gap():
    from dpnets.validation import sets_from_gap

    # a 4-state chain seen at a lag: three slow processes (0.935), nothing faster resolved
    n, why = sets_from_gap([1.0, 0.935, 0.934, 0.933])
    assert n == 4 and "after 3 process(es)" in why
    assert sets_from_gap([1.0, 0.9, 0.2, 0.1])[0] == 2
    assert sets_from_gap([1.0, 0.95, 0.9, 0.3, 0.25, 0.2], max_sets=6)[0] == 3
    assert sets_from_gap([1.0, 0.9, 0.88, 0.87, 0.1], max_sets=3)[0] == 2  # capped
    with pytest.raises(ValueError, match="no non-stationary eigenvalue"):
        sets_from_gap([1.0])


def test_memory_maps_go_where_arrays_go_and_datasets_of_pairs_are_refused(tmp_path, ou):
    """Item 2: a memory-mapped trajectory (as ``dpnets fit`` reads ``.npy`` files) gives the
    same validation as the array; a Dataset of (X, Y) pairs, which ``fit`` takes, holds one
    lag only, so the functions that re-pair at other lags refuse it by name."""
    import torch
    from torch.utils.data import TensorDataset

    trajs, model = ou
    for i, t in enumerate(trajs):
        np.save(tmp_path / f"t{i}.npy", t)
    maps = [np.load(tmp_path / f"t{i}.npy", mmap_mode="r") for i in range(len(trajs))]
    a = implied_timescales(model, trajs, [1, 2], k=2)
    b = implied_timescales(model, maps, [1, 2], k=2)
    np.testing.assert_array_equal(a.timescales, b.timescales)
    c = ck_test(model, maps, [1, 2], _one_set)
    np.testing.assert_array_equal(c.estimates, ck_test(model, trajs, [1, 2], _one_set).estimates)
    pairs = TensorDataset(torch.tensor(trajs[0][:-2]), torch.tensor(trajs[0][2:]))
    for call in (
        lambda: implied_timescales(model, pairs, [1, 2]),
        lambda: ck_test(model, pairs, [1], _one_set),
        lambda: bootstrap_spectrum(model, pairs, k=2),
    ):
        with pytest.raises(TypeError, match="TensorDataset: this needs the states themselves"):
            call()


def test_ck_bootstrap_resamples_without_a_set_leave_it_out_silently():
    """Set 0 lives in trajectory 0 only (shifted by +20), so about a third of the resamples
    of 4 trajectories draw none of its frames: they say nothing of it and are left out of
    its interval, without numpy's "invalid value" warning and without NaN intervals."""
    from dpnets import TransferOperator

    trajs = [OrnsteinUhlenbeck(dt=0.1).sample(800, seed=s) for s in range(4)]
    trajs[0] = trajs[0] + 20.0
    op = TransferOperator(None, lag=2, dt=0.1).fit(trajs)

    def sets(x):
        return np.column_stack([x[:, 0] > 10, x[:, 0] <= 10]).astype(float)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ck = ck_test(op, trajs, [1, 2], memberships=sets, n_bootstrap=40, seed=0)
    for bound in (ck.predictions_lower, ck.predictions_upper, ck.estimates_lower):
        assert np.all(np.isfinite(bound))
    # the set is closed (no transitions between the trajectories' regions)
    np.testing.assert_allclose(np.diagonal(ck.estimates, axis1=1, axis2=2), 1.0, atol=0.02)
