"""The pieces of ``dpnets reproduce enhanced-sampling`` (issue 27) against exact values: the
potential's gradient, the Metropolis-adjusted integrator's invariant law, the exact bin free
energies and the transition counter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpnets.experiments import EXPERIMENTS
from dpnets.experiments import enhanced_sampling as es


def test_registered():
    assert EXPERIMENTS["enhanced-sampling"][0] == "dpnets.experiments.enhanced_sampling"


def test_gradient_matches_finite_differences():
    x = np.random.default_rng(0).uniform(-1.5, 1.5, size=(50, 2))
    h = 1e-6
    fd = np.stack(
        [(es.potential(x + h * e) - es.potential(x - h * e)) / (2 * h) for e in np.eye(2)], 1
    )
    assert np.abs(es.grad_potential(x) - fd).max() < 1e-6
    assert es.potential(np.array([[1.0, 0.0], [-1.0, 0.0]])).tolist() == [0.0, 0.0]
    assert es.potential(np.array([0.0, -1.0])) == es.H  # the saddle: the barrier height


def test_mala_keeps_the_boltzmann_law():
    """Walkers drawn from exp(-U) (on a fine grid) stay distributed as exp(-U) under 100
    steps at a coarse dt = 0.01: the means of x^2 and y against quadrature, within about 2
    standard errors. Plain Euler-Maruyama from the same start and noise drifts away by more
    (its time-step bias), so the test sees the Metropolis correction."""
    rng = np.random.default_rng(1)
    g = np.linspace(-2.0, 2.0, 401)
    h = np.linspace(-2.5, 3.5, 601)
    gx, gy = np.meshgrid(g, h, indexing="ij")
    p = np.exp(-es.potential(np.stack([gx, gy], -1)))
    p /= p.sum()
    exact = np.array([(p * gx**2).sum(), (p * gy).sum()])
    idx = rng.choice(p.size, size=4000, p=p.ravel())
    x0 = np.stack([gx.ravel()[idx], gy.ravel()[idx]], 1)
    dt, tol = 1e-2, np.array([0.015, 0.02])
    end = es._unbiased(x0, 100, dt, 100, np.random.default_rng(2))[-1]
    assert np.all(np.abs([np.mean(end[:, 0] ** 2), np.mean(end[:, 1])] - exact) < tol)
    x, noise = x0.copy(), np.random.default_rng(2)
    for _ in range(100):  # Euler-Maruyama: biased at this dt
        x = x - es.grad_potential(x) * dt + np.sqrt(2 * dt) * noise.normal(size=x.shape)
    assert np.all(np.abs([np.mean(x[:, 0] ** 2), np.mean(x[:, 1])] - exact) > tol)


def test_exact_fes_and_transitions():
    ex = np.arange(-2.0, 2.0 + 1e-9, 0.2)
    ey = np.arange(-2.0, 3.0 + 1e-9, 0.2)
    f = es._exact_fes(ex, ey)
    assert np.isclose(np.exp(-f).sum(), 1.0)
    i, j = np.unravel_index(np.argmin(f), f.shape)  # the minimum is in a well's bin
    assert abs(abs(0.5 * (ex[i] + ex[i + 1])) - 1.0) < 0.2 and abs(ey[j] + 0.1) < 0.2
    path = np.array([-1.0, -0.5, 0.0, 0.9, 0.5, 0.8, -0.8, -0.9, 1.0])
    xs = np.stack([path, np.zeros_like(path)], -1)[:, None, :]  # (frames, 1 walker, 2)
    assert es._transitions(xs) == 3


def test_fes_error_of_an_unsampled_window_is_inf_and_says_nowhere():
    """Short runs (``--quick``) may miss part of the window: the error is inf and the result
    still has its keys (the quick run crashed with KeyError 'where')."""
    cfg = {"bin_width": 0.2, "fes_window_kT": 3.0}
    only_one_well = np.column_stack([np.full(500, -1.0), np.zeros(500)])
    err, fes = es._fes_error(only_one_well, np.ones(500), cfg)
    assert err == np.inf and fes["where"] is None
    rng = np.random.default_rng(0)
    everywhere = np.column_stack([rng.uniform(-2, 2, 400_000), rng.uniform(-2, 3, 400_000)])
    weights = np.exp(-es.potential(everywhere) / es.KT)
    err, fes = es._fes_error(everywhere, weights, cfg)
    assert err < 0.5 and len(fes["where"]) == 3


# --------------------------------------------------------------------------------------------
# alanine dipeptide in OpenMM (dpnets reproduce enhanced-sampling-alanine)


def test_alanine_pieces_against_exact_values():
    """Core-to-core transition counts of a hand-made phi path, and the FES error of a known
    perturbation (constant offsets are aligned away; cells above the window are ignored; a
    missed cell inside it is an infinite error)."""
    from dpnets.experiments import enhanced_sampling_alanine as esa

    assert EXPERIMENTS["enhanced-sampling-alanine"][0] == esa.__name__
    # A core: phi <= -40 or >= 160; B core: 30 <= phi <= 100; in between: no commitment
    path = np.array([-80, -20, 10, -60, 20, 50, 110, 170, -170, 60, 0, 70, -50.0])
    assert esa.transitions(path) == 4  # -> B at 50, -> A at 170, -> B at 60, -> A at -50
    assert esa.transitions(np.array([0.0, 10.0, 20.0])) == 0
    ref = np.array([[0.0, 1.0, 7.0], [2.0, 4.5, np.inf]])
    est = ref + 3.0
    est[1, 1] += 0.4
    est[0, 2] = np.inf  # outside the 5 kT window: ignored
    err, where = esa._fes_error(est, ref, 5.0)
    p = np.exp(-np.array([0.0, 1.0, 2.0, 4.5]))
    shift = 0.4 * p[3] / p.sum()
    assert np.isclose(err, 0.4 - shift) and where[2] == 4.5
    est[1, 0] = np.inf
    assert esa._fes_error(est, ref, 5.0)[0] == np.inf


def test_alanine_metadynamics_engine_matches_exported_file(tmp_path):
    """A two-torsion CV exported by dpnets.export, tabulated in OpenMM and biased by OpenMM's
    well-tempered metadynamics (:func:`simulate_metadynamics`): the engine's CV at every saved
    frame equals the TorchScript file at the frame's (phi, psi) to the grid's interpolation
    error, the bias grows during the build and is static in production (every production
    frame's bias energy is the final bias at its CV value)."""
    pytest.importorskip("openmm")
    from openmm import app

    from dpnets import TransferOperator, export
    from dpnets.engines import openmm_torsion_cv
    from dpnets.experiments import enhanced_sampling_alanine as esa
    from dpnets.export import TorsionInputs

    rng = np.random.default_rng(0)
    ang = np.cumsum(rng.normal(scale=20.0, size=(2000, 2)), 0) % 360.0 - 180.0
    x = esa.dihedral_features(ang[:, 0], ang[:, 1])
    assert np.allclose(x, TorsionInputs(1)(torch.tensor(np.deg2rad(ang))).numpy(), atol=1e-6)
    torch.manual_seed(0)
    feats = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    op = TransferOperator(feats, dt=1.0).fit(x)
    path = tmp_path / "cv.pt"
    export(op, path, modes=[1], inputs=TorsionInputs(1), input_shape=(2,))
    phi_atoms, psi_atoms = esa.torsion_atoms()
    force, interp = openmm_torsion_cv(path, [phi_atoms, psi_atoms], n_grid=61)
    table = np.asarray(force.getTabulatedFunction(0).getFunctionParameters()[2])
    lo, hi = table.min(), table.max()
    var = app.BiasVariable(force, lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), 0.05 * (hi - lo))
    cfg = {**esa.QUICK, "equilibration_ps": 2.0, "save_ps": 1.0, "pace_steps": 50}
    run = esa.simulate_metadynamics(
        cfg, 3, 250 * 30, {"variable": var, "build_steps": 250 * 15}, False
    )
    cv = torch.jit.load(str(path))
    with torch.no_grad():
        want = cv(torch.tensor(np.deg2rad(np.stack([run["phi"], run["psi"]], 1))))[:, 0]
    assert np.abs(run["s"] - want.double().numpy()).max() < 3 * interp * (hi - lo) + 1e-6
    v = run["bias_kj"]
    assert run["first_prod"] == 15 and v[:15].max() > 0  # Gaussians were deposited
    final = np.interp(run["s"][15:], run["bias_grid"], run["bias_final_kj"])
    assert np.abs(v[15:] - final).max() < 0.05 * max(np.ptp(run["bias_final_kj"]), 1e-9) + 1e-6
