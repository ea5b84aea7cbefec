"""Validation, second part (issue 15): PCCA+ metastable sets, bootstrap intervals for the
spectrum and for the Chapman–Kolmogorov test, and the figures of ``dpnets.plot``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpnets import TransferOperator
from dpnets.systems import MarkovChain
from dpnets.validation import bootstrap_spectrum, ck_test, pcca

N = 9
BLOCKS = np.repeat(np.arange(3), 3)


def _block_chain() -> np.ndarray:
    """A reversible 9-state chain with three metastable blocks of three states."""
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 1.0, (N, N))
    w = w + w.T
    w[BLOCKS[:, None] != BLOCKS[None, :]] *= 0.01
    return w / w.sum(1, keepdims=True)


P9 = _block_chain()


def one_hot(s):
    return np.eye(N)[np.asarray(s).reshape(-1).astype(int)]


@pytest.fixture(scope="module")
def block_model():
    traj = MarkovChain(P9).sample(200_000, seed=1)
    return TransferOperator(one_hot).fit(traj), traj


def _match(assign: np.ndarray, ref: np.ndarray) -> tuple[int, ...]:
    """The permutation of set labels that maps ``assign`` onto ``ref`` (exactly), or fail."""
    for perm in itertools.permutations(range(3)):
        if np.array_equal(np.array(perm)[assign], ref):
            return perm
    raise AssertionError(f"{assign} is not a relabelling of {ref}")


def test_pcca_recovers_the_metastable_blocks_and_their_kinetics(block_model):
    from deeptime.markov import pcca as deeptime_pcca

    op, traj = block_model
    states = np.arange(N)
    sets = pcca(op, traj[::20], 3)  # frames of the (equilibrium) trajectory
    np.testing.assert_allclose(sets.memberships.sum(1), 1.0, atol=1e-12)
    assert sets.memberships.min() >= 0.0
    at_states = sets.memberships_of(states, crisp=False)
    perm = _match(np.argmax(at_states, 1), BLOCKS)
    np.testing.assert_array_equal(
        sets.assignments,
        np.argmax(at_states, 1)[traj[::20]],
    )
    # deeptime's PCCA+ of the exact chain: memberships equal up to sampling error
    ref = deeptime_pcca(P9, 3)
    order = np.argsort(perm)
    np.testing.assert_allclose(at_states[:, order], ref.memberships, atol=0.02)
    # the coarse-grained matrix is the lumped chain's one-step matrix under equilibrium
    pi = np.linalg.matrix_power(P9, 2000)[0]
    lumped = np.array(
        [
            [
                pi[BLOCKS == a]
                @ P9[np.ix_(BLOCKS == a, BLOCKS == b)].sum(1)
                / pi[BLOCKS == a].sum()
                for b in range(3)
            ]
            for a in range(3)
        ]
    )
    np.testing.assert_allclose(
        sets.coarse_transition_matrix[np.ix_(order, order)], lumped, atol=0.003
    )
    np.testing.assert_allclose(  # sampling error: a few hundred block changes in the data
        sets.stationary[order], [pi[BLOCKS == a].sum() for a in range(3)], atol=0.02
    )
    # memberships of new states, usable as the sets of a CK test: fuzzy, or (the default)
    # the indicator of the most likely set
    first = traj[:20:20]
    np.testing.assert_allclose(sets.fuzzy_memberships_of(first), sets.memberships[:1], atol=1e-12)
    np.testing.assert_array_equal(
        sets.memberships_of(first), np.eye(3)[np.argmax(sets.memberships[:1], axis=1)]
    )
    # frames given once per state need their equilibrium weights
    by_state = pcca(op, states, 3, weights=pi)
    np.testing.assert_allclose(
        by_state.stationary[order], [pi[BLOCKS == a].sum() for a in range(3)], atol=0.005
    )
    with pytest.raises(ValueError, match="n_sets"):
        pcca(op, states, 1)


def test_pcca_algorithm_equals_deeptime_on_exact_eigenvectors():
    """The inner simplex algorithm and the optimisation, fed deeptime's own normalised
    eigenvectors, give deeptime's memberships."""
    from deeptime.markov import pcca as deeptime_pcca

    from dpnets.metastable import _clip_rows, _pcca_isa, _pcca_optimise

    vals, vecs = np.linalg.eig(P9)
    order = np.argsort(-vals.real)[:3]
    pi = np.linalg.matrix_power(P9, 2000)[0]
    ev = vecs[:, order].real
    ev = ev / np.sqrt(pi @ ev**2)
    ev[:, 0] = np.abs(ev[:, 0])
    chi = _clip_rows(ev @ _pcca_optimise(ev, _pcca_isa(ev)))
    np.testing.assert_allclose(chi, deeptime_pcca(P9, 3).memberships, atol=1e-3)


def test_pcca_refuses_complex_leading_eigenvalues():
    cycle = np.roll(np.eye(3), 1, axis=1) * 0.9 + 0.1 / 3
    op = TransferOperator(lambda s: np.eye(3)[np.asarray(s).reshape(-1)]).fit(
        MarkovChain(cycle).sample(5000, seed=0)
    )
    with pytest.raises(ValueError, match="not all real"):
        pcca(op, np.arange(3), 2)


def test_bootstrap_spectrum_covers_the_exact_eigenvalues():
    """Nominal 95% intervals of |lambda_2| and of t_2 over 30 datasets of 20 trajectories:
    the exact values are inside in at least 26 of them (binomial 5% quantile: 27)."""
    exact = np.sort(np.abs(np.linalg.eigvals(P9)))[::-1]
    hits = 0
    for rep in range(30):
        trajs = [MarkovChain(P9).sample(400, seed=1000 * rep + s) for s in range(20)]
        op = TransferOperator(one_hot).fit(trajs)
        res = bootstrap_spectrum(op, trajs, k=3, n_bootstrap=60, seed=rep)
        hits += res.modulus_lower[1] <= exact[1] <= res.modulus_upper[1]
        assert res.samples.shape == (60, 3) and np.isinf(res.timescales[0])
        assert np.isinf(res.lower[0]) and np.isinf(res.upper[0])
        assert res.lower[1] <= res.timescales[1] <= res.upper[1]
    assert hits >= 26


def test_ck_test_bootstrap_bands_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    trajs = [MarkovChain(P9).sample(2000, seed=s) for s in range(10)]
    op = TransferOperator(one_hot, lag=2).fit(trajs)
    sets = pcca(op, np.arange(N), 3)
    ck = ck_test(op, trajs, [1, 2, 4], sets.memberships_of, n_bootstrap=20, seed=0)
    assert ck.predictions_lower.shape == ck.predictions.shape == (4, 3, 3)
    inner = (ck.estimates_lower[1:] <= ck.estimates[1:] + 1e-12) & (
        ck.estimates[1:] <= ck.estimates_upper[1:] + 1e-12
    )
    assert inner.mean() > 0.9
    # a Markovian model: every prediction lies inside the estimate's band (widened by 0.01)
    assert np.all(ck.predictions[1:] >= ck.estimates_lower[1:] - 0.01)
    assert np.all(ck.predictions[1:] <= ck.estimates_upper[1:] + 0.01)
    fig = ck.plot(units="steps")
    fig.savefig(tmp_path / "ck.png")
    assert len(fig.axes) == 9 and fig.axes[6].get_xlabel() == "lag time (steps)"


def test_plots_are_headless_and_labelled(tmp_path, block_model):
    pytest.importorskip("matplotlib")
    from dpnets import plot
    from dpnets.systems import OrnsteinUhlenbeck

    op, _ = block_model
    fig = plot.eigenvalues(op, k=3)
    plane, gap = fig.axes
    assert plane.get_xlabel() == "Re λ" and plane.get_legend() is not None
    assert gap.get_ylabel() == "1 − |λ|" and gap.get_yscale() == "log"
    # the gap panel separates eigenvalues the complex plane draws on top of each other
    d = 1 - np.abs(op.eig())
    ys = np.concatenate([c.get_offsets()[:, 1] for c in gap.collections])
    expect = np.where(d <= 1e-10, d[d > 1e-10].min() / 10, d)  # stationary: bottom edge
    assert np.allclose(np.sort(ys), np.sort(expect))
    fig.savefig(tmp_path / "eig.png")
    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.5)  # unit variance
    x = np.hstack([ou.sample(40_000, seed=0), ou.sample(40_000, seed=1)])
    herm = TransferOperator(lambda s: np.hstack([s, s**2 - 1])).fit(x)
    fig = plot.eigenfunctions(herm, x, k=2, labels=["x (nm)", "y (nm)"], bins=20)
    assert len(fig.axes) == 4  # two maps and their colour bars
    assert fig.axes[0].get_xlabel() == "x (nm)" and "λ" in fig.axes[0].get_title()
    fig.savefig(tmp_path / "phi2d.png")
    fig = plot.eigenfunctions(herm, x, coords=x[:, 0], k=2, labels=["x (nm)"])
    fig.savefig(tmp_path / "phi1d.png")
    fig = plot.free_energy(x, kT=2.5, energy_units="kJ/mol", labels=["x (nm)", "y (nm)"])
    assert fig.axes[1].get_ylabel() == "free energy (kJ/mol)"
    fig.savefig(tmp_path / "fes.png")
    # a harmonic well: F = x^2/2 + y^2/2 in units of kT (unit variance)
    hist, xe, ye = np.histogram2d(x[:, 0], x[:, 1], bins=7, range=[[-1.4, 1.4]] * 2, density=True)
    f = -np.log(hist)
    xc = 0.5 * (xe[1:] + xe[:-1])
    expect = 0.5 * (xc[:, None] ** 2 + xc[None, :] ** 2)
    assert np.max(np.abs((f - f[3, 3]) - expect)) < 0.3
    for name in ("eig", "phi2d", "phi1d", "fes"):
        assert (tmp_path / f"{name}.png").stat().st_size > 5000
    with pytest.raises(ValueError, match="coords must be"):
        plot.free_energy(x[:, 0])


def test_ck_test_on_our_pcca_sets_equals_deeptime_msm_on_the_same_crisp_sets():
    """Issue 25, item 1: on a metastable chain, our PCCA+ sets (crisp by default) are
    deeptime's PCCA+ assignments of the same MSM, and our CK test on them equals deeptime's
    MSM CK test with those crisp sets, to round-off, at every step and at lag 0."""
    msm = pytest.importorskip("deeptime.markov.msm")
    from deeptime.markov._base import MembershipsObservable
    from deeptime.util.validation import ck_test as deeptime_ck

    trajs = [MarkovChain(P9).sample(100_000, seed=s) for s in (3, 4, 5)]
    tau, steps = 3, [1, 2, 4]
    op = TransferOperator(one_hot, constant=False, lag=tau).fit(trajs)
    sets = pcca(op, trajs, 3)
    crisp = sets.memberships_of(np.arange(N))  # (9 states, 3 sets), one 1 per row
    np.testing.assert_array_equal(crisp.sum(1), 1.0)
    models = [
        msm.MaximumLikelihoodMSM(reversible=False, lagtime=k * tau).fit(trajs).fetch_model()
        for k in steps
    ]
    reversible = msm.MaximumLikelihoodMSM(reversible=True, lagtime=tau).fit(trajs)
    ref_sets = reversible.fetch_model().pcca(3).assignments  # deeptime needs detailed balance
    _match(np.argmax(crisp, 1), ref_sets)  # the same partition as deeptime's, up to labels
    _match(np.argmax(crisp, 1), BLOCKS)  # and the chain's blocks
    ours = ck_test(op, trajs, steps, sets.memberships_of)
    ref = deeptime_ck(models, MembershipsObservable(models[0], crisp), test_model=models[0])
    np.testing.assert_allclose(ours.predictions, np.array(ref.predictions), atol=1e-10)
    np.testing.assert_allclose(ours.estimates, np.array(ref.estimates), atol=1e-10)
    np.testing.assert_array_equal(ours.lag_times, ref.lagtimes)
    # and both read like the truth: the lumped chain's own probability of staying
    pi = np.linalg.matrix_power(P9, 4000)[0]
    for j, k in enumerate(steps, start=1):
        Pk = np.linalg.matrix_power(P9, k * tau)
        for a in range(3):
            inside = np.argmax(crisp, 1) == a
            stay = pi[inside] @ Pk[np.ix_(inside, inside)].sum(1) / pi[inside].sum()
            assert ours.estimates[j, a, a] == pytest.approx(stay, abs=0.015)
