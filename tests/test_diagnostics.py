"""Never silently wrong (issue 39): the diagnostics of a fit, from the estimators and from
``dpnets fit`` / ``dpnets analyze`` on realistic data (a protein with more input features
than frames, a short trajectory among long ones, a lag too long for any process)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import dpnets
from dpnets.cli import main
from dpnets.diagnostics import (
    DiagnosticWarning,
    sample_diagnostics,
    spectrum_diagnostics,
    training_diagnostics,
)
from dpnets.systems import OrnsteinUhlenbeck


def _short_ar1(seed: int = 19, n: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    for t in range(1, n):
        x[t] = 0.9 * x[t - 1] + rng.normal()
    return x[:, None]


def _dictionary(x: np.ndarray) -> np.ndarray:
    return np.hstack([x, x**2, np.sin(x), np.cos(2 * x), x**3 / 10])


def test_growing_modes_keep_the_constant_first_have_no_timescale_and_warn():
    """40 frames, 5 features: least squares gives eigenvalues 1.46 and 1.07; the constant
    function's eigenvalue 1 is still k = 0, the growing modes' timescales are nan (not
    inf), the fit warns naming reversible=True, which gives a spectrum in [-1, 1]."""
    x = _short_ar1()
    with pytest.warns(DiagnosticWarning, match=r"modulus above 1.*reversible=True"):
        op = dpnets.TransferOperator(_dictionary, lag=1).fit(x)
    lam, ts = op.eig(), op.implied_timescales()
    assert abs(lam[0] - 1.0) < 1e-12 and np.isinf(ts[0])
    grow = np.abs(lam) > 1.0 + 1e-6
    assert grow.sum() == 2 and np.abs(lam).max() > 1.4
    assert np.all(np.isnan(ts[grow])) and np.all(np.isfinite(ts[1:][~grow[1:]]))
    # the constant function's eigenvector is the constant: eigenfunction 0 is flat
    phi0 = op.eigenfunctions(x)[:, 0]
    assert np.ptp(np.real(phi0)) < 1e-8 * np.abs(phi0).max()
    kinds = [d.kind for d in op.diagnostics()]
    assert kinds == ["above_one"]  # 39 pairs for 6 functions: enough (5 per function)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DiagnosticWarning)
        rev = dpnets.TransferOperator(_dictionary, lag=1, reversible=True).fit(x)
    assert np.abs(rev.eig()).max() <= 1.0 + 1e-12 and abs(rev.eig()[0] - 1) < 1e-12
    assert "above_one" not in [d.kind for d in rev.diagnostics()]


def test_growing_mode_remedies_name_only_the_estimator_s_own_parameters():
    """EDMD has stabilize= but no reversible=, KernelDMD neither: the same growing modes
    as above are told what these estimators can do (before: reversible=True for both)."""
    from dpnets.baselines import EDMD, KernelDMD

    with pytest.warns(DiagnosticWarning) as caught:
        EDMD(_dictionary).fit(_short_ar1())
    assert str(caught[0].message).endswith(
        "growing modes, not relaxation; their implied timescales are undefined (nan) and "
        "forecasts along them grow; refit with more data or fewer features; for reversible "
        "dynamics (equilibrium MD), a reversible estimate (dpnets.TransferOperator(features, "
        "reversible=True)) has a real spectrum in [-1, 1]; for forecasts, stabilize=True "
        "projects them onto the unit circle"
    )
    kernel = spectrum_diagnostics(
        [1.0, 1.2, 0.5 + 0.3j, 0.5 - 0.3j],
        constant=True,
        params=KernelDMD().get_params(deep=False),
    )
    assert [d.kind for d in kernel] == ["above_one", "complex"]
    assert kernel[0].python == (
        "refit with more data or fewer features; for reversible dynamics (equilibrium MD), "
        "a reversible estimate (dpnets.TransferOperator(features, reversible=True)) has a "
        "real spectrum in [-1, 1]"
    )
    assert kernel[1].python == (
        "for reversible dynamics (equilibrium MD) a reversible estimate "
        "(dpnets.TransferOperator(features, reversible=True)) has real modes"
    )


def test_a_restored_spectrum_keeps_the_constant_first():
    """``load`` recomputes the spectrum from the saved matrices (``_set_spectrum``)."""
    x = _short_ar1()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DiagnosticWarning)
        op = dpnets.TransferOperator(_dictionary, lag=1).fit(x)
    lam = op.eig().copy()
    op._set_spectrum()
    assert np.allclose(op.eig(), lam) and abs(op.eig()[0] - 1) < 1e-12


def test_a_rank_deficient_basis_warns_and_names_its_truncated_eigenvalues():
    """Monomials up to degree 3 of an OU trajectory offset to 300 (std 7, raw units) are
    collinear to round-off: the regression keeps 2 of the 4 functions and returns the
    exact zeros 0 and 0 for k = 2, 3 (exact: e^{-0.2}, e^{-0.3}) — a warning names them.
    The same data centred are well conditioned: no warning, the exact spectrum."""
    from dpnets.baselines import EDMD

    x = OrnsteinUhlenbeck(dt=0.1).sample(100_000, seed=0)
    raw = 7.0 * x + 300.0
    with pytest.warns(DiagnosticWarning) as caught:
        model = EDMD("monomial", degree=3).fit(raw)
    assert model.cx_rank_ == 2 and np.abs(model.eig()[2:]).max() < 1e-12
    found = [str(w.message) for w in caught if "linearly independent" in str(w.message)]
    assert found == [
        "only 2 of the 4 basis functions are linearly independent on the data (at the "
        "pseudo-inverse's relative cut-off, rtol=): 2 eigenvalue(s) (k = [2, 3]) are 0 by "
        "truncation, not dynamics, and the rest are fitted on the 2 independent ones; use "
        "fewer or better-conditioned features: a smaller r; DMD(rank=) for snapshots of a "
        "field (its leading POD modes); for monomials of raw, offset data (collinear to "
        "round-off), centred and scaled data or EDMD's 'chebyshev' dictionary (scaled to the "
        "data)"
    ]
    assert [d.kind for d in model.diagnostics()].count("rank_deficient") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", DiagnosticWarning)
        good = EDMD("monomial", degree=3).fit((raw - 300.0) / 7.0)
    assert good.cx_rank_ == 4
    np.testing.assert_allclose(good.eig().real, np.exp(-0.1 * np.arange(4)), atol=0.015)


def test_classical_dmd_of_offset_data_names_the_mean_as_its_slow_mode():
    """DMD without the constant on an AR process (eigenvalues 0.9, 0.5) offset by
    (50, -20), about 20 standard deviations: the mean becomes k = 0 (0.9998, beyond the
    data) and drags the rest (0.69 for 0.9 and 0.5); the warning says so and names
    constant=True, which recovers the exact eigenvalues."""
    from dpnets.baselines import DMD
    from dpnets.systems import LinearGaussian

    x = LinearGaussian(np.diag([0.9, 0.5]), noise_std=1.0).sample(5000, seed=0)
    x = x + np.array([50.0, -20.0])
    with pytest.warns(DiagnosticWarning) as caught:
        plain = DMD().fit(x)
    assert np.abs(plain.eig()).round(4).tolist() == [0.9998, 0.6908]
    assert [str(w.message) for w in caught] == [
        "implied timescale(s) of k = [0] (5295 frames) exceed all the data together "
        "(5000 frames): processes the data cannot have sampled; k = 0 of a basis without "
        "the constant function is often the data's mean fitted as a slow mode, which biases "
        "the other modes too; refit with constant=True (or on centred data), or trust only "
        "timescales well inside the data; add longer trajectories"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DiagnosticWarning)
        affine = DMD(constant=True).fit(x)
    np.testing.assert_allclose(affine.eig().real, [1.0, 0.9, 0.5], atol=0.02)


def test_a_generator_s_growing_mode_names_the_generator_s_own_remedy():
    """A Generator has no reversible= or stabilize=: its growing-mode warning names
    form='dirichlet', which gives a spectrum <= 0 (here: monomials of OU samples in raw
    units, offset 300, where the ito form gives +7.5e-5 for the near-constant mode)."""
    import torch

    from dpnets.ito import SDE

    x = 7.0 * OrnsteinUhlenbeck(dt=0.1).sample(20_000, seed=0) + 300.0
    sde = SDE(lambda y: -(y - 300.0), 7.0 * 2**0.5, reversible=True)

    def psi(y):
        return torch.cat([y, y**2, y**3], dim=1)

    with pytest.warns(DiagnosticWarning) as caught:
        dpnets.Generator(psi, sde).fit(x)
    (message,) = [str(w.message) for w in caught if "positive real part" in str(w.message)]
    assert message == (
        "eigenvalue(s) k = [0] have positive real part (7.457e-05): growing modes, not "
        "relaxation; their implied timescales are undefined (nan) and forecasts along them "
        "grow; refit with form='dirichlet' (with SDE(..., reversible=True): a real spectrum "
        "<= 0 by construction) if the process is reversible, else with more data or fewer "
        "features"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", DiagnosticWarning)
        fixed = dpnets.Generator(psi, sde, form="dirichlet").fit(x)
    lam = fixed.eig()
    assert lam.real.max() <= 0 and abs(lam[1].real + 1.0) < 0.05  # exact: 0, -1


def test_a_composite_model_s_diagnostics_include_its_features_training(tmp_path):
    """TransferOperator(DPNet(...)).fit trains both: its diagnostics() holds the DPNet's
    training findings too (also loaded from a file), and fit warns with them once."""
    x = OrnsteinUhlenbeck(dt=0.1).sample(3000, seed=0)
    net = dpnets.DPNet(r=2, epochs=2, seed=0, progress=False)
    with pytest.warns(DiagnosticWarning) as caught:
        op = dpnets.TransferOperator(net, lag=2).fit(x)
    assert ["gradient steps" in str(w.message) for w in caught].count(True) == 1
    kinds = [d.kind for d in op.diagnostics()]
    assert kinds[0] == "few_steps" and kinds == [
        d.kind for d in op.features_.diagnostics() + op._diagnostics()
    ]
    op.save(tmp_path / "m.pt")
    assert [d.kind for d in dpnets.load(tmp_path / "m.pt").diagnostics()] == kinds


def test_an_autoencoder_warns_about_its_training_like_a_dpnet(tmp_path):
    """The Koopman autoencoders checked only their spectrum: 66 gradient steps now warn as
    a DPNet's do, and the finding survives a save and load."""
    from dpnets.baselines import ConsistentAutoencoder

    x = OrnsteinUhlenbeck(dt=0.1).sample(3000, seed=0)
    with pytest.warns(DiagnosticWarning) as caught:
        model = ConsistentAutoencoder(r=2, epochs=6, seed=0, progress=False).fit(x)
    assert [str(w.message) for w in caught if "gradient steps" in str(w.message)] == [
        "training took 66 gradient steps (6 epoch(s) of 11 batch(es): 2695 training pairs at "
        "batch_size=256), fewer than 100: the features are barely trained; train for more "
        "steps: epochs=10 at this batch size, or a smaller batch_size= (ceil(n_pairs / "
        "batch_size) steps an epoch; keep it well above r)"
    ]
    model.save(tmp_path / "ae.pt")
    assert "few_steps" in [d.kind for d in dpnets.load(tmp_path / "ae.pt").diagnostics()]


def test_spectrum_diagnostics_thresholds():
    # a process at the noise level of 5 functions and 2000 pairs (3 sqrt(5/2000) = 0.15)
    found = spectrum_diagnostics([1.0, 0.1, 0.05, -0.02], constant=True, n_samples=2000)
    assert [d.kind for d in found] == ["unresolved"] and "shorter lag" in found[0].python
    assert "--lag" in found[0].message(cli=True)
    # 11 pairs for 5 functions (a 12-point series): 3 sqrt(5/11) = 2.02, above any |lambda|
    found = spectrum_diagnostics([1.0, 0.64, 0.3, 0.1, 0.05], constant=True, n_samples=11)
    assert (
        found[0]
        .message(cli=True)
        .endswith(
            "within the noise level (2.02) of 0; with 11 pairs for 5 basis functions the noise "
            "level is above 1, so no lag resolves anything: use more data (about 180 pairs bring "
            "it to 0.5) or fewer features (--dim)"
        )
    )
    assert spectrum_diagnostics([1.0, 0.9, 0.5], constant=True, n_samples=2000) == []
    # a timescale beyond all the data together: -1 / ln 0.999 = 999.5 frames > 500
    found = spectrum_diagnostics([1.0, 0.999], constant=True, lag_time=1.0, span=500.0)
    assert [d.kind for d in found] == ["beyond_data"] and "999.5" in found[0].problem
    # complex slow modes are a note (no warning), with the reversible remedy
    (note,) = spectrum_diagnostics([1.0, 0.9 + 0.1j, 0.9 - 0.1j], constant=True)
    assert note.kind == "complex" and not note.warn and "--reversible true" in note.cli
    # a generator: a positive real part grows
    (grow,) = spectrum_diagnostics([0.0, 0.5, -1.0], constant=True, generator=True)
    assert grow.kind == "above_one" and "positive real part" in grow.problem
    assert sample_diagnostics(100, 20) == [] and sample_diagnostics(99, 20)[0].kind == "few_pairs"


def test_training_diagnostics_judge_the_last_epochs():
    rising = {"val_score": [1.0, 2.0, 2.5, 2.8, 3.0, 3.2]}
    flat = {"val_score": [1.0, 2.0, 2.9, 3.0, 3.0, 3.001]}
    (d,) = training_diagnostics(rising, "projection score")
    assert d.kind == "not_converged" and "--epochs" in d.cli and "epochs=" in d.python
    assert training_diagnostics(flat) == []
    assert training_diagnostics({"val_score": [1.0, 2.0, 3.0]}) == []  # too few to judge


def test_dpnet_warns_when_training_has_not_converged_and_pairs_are_few():
    x = np.random.default_rng(0).normal(size=(60, 30)).cumsum(axis=0)
    with pytest.warns(DiagnosticWarning, match="lagged pairs for 30 input coordinates"):
        net = dpnets.DPNet(r=2, epochs=2, batch_size=32, progress=False, seed=0).fit(x)
    # 53 training pairs at batch 32, 2 epochs: 4 gradient steps
    assert [d.kind for d in net.diagnostics()] == ["few_steps", "few_pairs"]
    assert "training took 4 gradient steps" in net.diagnostics()[0].problem


def test_validation_refits_do_not_repeat_the_diagnostics():
    ou = OrnsteinUhlenbeck(dt=0.1)
    x = ou.sample(3000, seed=0)
    op = dpnets.TransferOperator(lambda X: np.hstack([X, X**2]), lag=1).fit(x)
    from dpnets.validation import implied_timescales

    with warnings.catch_warnings():
        warnings.simplefilter("error", DiagnosticWarning)
        implied_timescales(op, x, [1, 300])  # lag 300: nothing resolved, no warning here


# ------------------------------------------------------------------------- the command line
FAST = ["--epochs", "4", "--dim", "2", "--seed", "0", "--quiet"]


@pytest.fixture(scope="module")
def ou_files(tmp_path_factory):
    """Three OU trajectories of 1500 frames (dt 0.1, timescale 1) and one of 4 frames."""
    folder = tmp_path_factory.mktemp("ou")
    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    for i in range(3):
        np.save(folder / f"run{i}.npy", ou.sample(1500, seed=i))
    np.save(folder / "short.npy", ou.sample(4, seed=9))
    return folder


def test_a_short_trajectory_among_long_ones_is_named(ou_files, tmp_path):
    out = tmp_path / "fit"
    files = [str(ou_files / f"run{i}.npy") for i in range(3)] + [str(ou_files / "short.npy")]
    assert main(["fit", *files, "--lag", "5", "--dt", "0.1", "--out", str(out), *FAST]) == 0
    report = (out / "report.md").read_text()
    assert "3 trajectories" in report and "from 4 source(s)" in report
    assert "short.npy`: 4 frames — left out: no pair at lag 5" in report
    assert "**dropped**" in report and "short.npy (4 frames)" in report and "--lag" in report
    row0 = next(r for r in report.splitlines() if r.startswith("| 0 |"))
    assert "1.00000+0.00000i" in row0 and "inf (stationary)" in row0


def test_a_lag_too_long_says_so_and_analyze_still_writes_its_report(ou_files, tmp_path):
    """Lag 150 frames = 15 timescales of the process: every eigenvalue is noise. The fit
    says no process is resolved (a shorter --lag); analyze skips PCCA+ and the CK test
    with that reason and writes everything else."""
    out = tmp_path / "fit"
    files = [str(ou_files / f"run{i}.npy") for i in range(3)]
    assert main(["fit", *files, "--lag", "150", "--dt", "0.1", "--out", str(out), *FAST]) == 0
    report = (out / "report.md").read_text()
    assert "**unresolved**" in report and "shorter --lag" in report
    assert main(["analyze", str(out), "--lags", "150", "--quiet"]) == 0
    analysis = out / "analysis"
    text = (analysis / "report.md").read_text()
    assert "## Skipped" in text and "PCCA+ metastable sets" in text and "--lag" in text
    assert (analysis / "timescales.png").stat().st_size > 5000
    assert (analysis / "eigenvalues.png").stat().st_size > 5000
    assert not (analysis / "ck_test.png").exists()
    res = json.loads((analysis / "results.json").read_text())
    assert "PCCA+ metastable sets" in res["skipped"] and res["diagnostics"]


NO_CHANGE = (
    "the data do not change: every training frame is the same state, so there are no "
    "dynamics to learn (the eigenvalues and timescales mean nothing); check the data (a "
    "constant or frozen signal, or the wrong array or columns); a model needs states that change"
)


def test_data_that_never_change_are_said_so_not_a_shorter_lag(tmp_path):
    """Every frame the same state (each coordinate its own constant): one finding, that the
    data do not change, instead of 'no process is resolved: choose a shorter lag' and a
    rank-deficient basis; a finding, not a refusal (scikit-learn's checks fit such data)."""
    from dpnets.baselines import DMD

    still = np.tile([1.0, 2.0, 3.0], (300, 1))
    for est in (dpnets.TransferOperator(lag=1), DMD(lag=1)):
        with pytest.warns(DiagnosticWarning) as rec:
            est.fit(still)
        assert [str(w.message) for w in rec] == [NO_CHANGE]
        assert [(d.kind, d.message()) for d in est.diagnostics()] == [("no_change", NO_CHANGE)]
    moving = still + np.linspace(0.0, 1e-9, 300)[:, None] * [1, 0, 0]  # one coordinate moves
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        dpnets.TransferOperator(lag=1).fit(moving)
    assert not any("do not change" in str(w.message) for w in rec)
    np.save(tmp_path / "still.npy", still)
    out = tmp_path / "fit"
    assert main(["fit", str(tmp_path / "still.npy"), "--out", str(out), *FAST]) == 0
    report = (out / "report.md").read_text()
    assert f"- **no_change**: {NO_CHANGE}" in report
    assert "**unresolved**" not in report and "**worse_than_persistence**" not in report


files = pytest.importorskip("MDAnalysisTests.datafiles")


def test_a_protein_with_more_features_than_frames(tmp_path):
    """Adenylate kinase (MDAnalysisTests): 852 dihedral features, 200 frames. The default
    fit flags the few pairs; the constant is k = 0; a growing mode, if any, has no
    timescale; the default analyze finishes and writes its report whatever it skips."""
    out = tmp_path / "fit"
    args = [files.DCD, files.DCD2, "--topology", files.PSF, "--features", "dihedrals"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the DCD's header, short by 402
        assert main(["fit", *args, "--lag", "2", "--seed", "0", "--epochs", "5", "--quiet",
                     "--out", str(out)]) == 0  # fmt: skip
    report = (out / "report.md").read_text()
    assert "**few_pairs**" in report and "852 input coordinates" in report
    assert "Inputs: features `dihedrals`" in report and "(852 in all)" in report
    rows = [r for r in report.splitlines() if r.startswith("| ") and "i |" in r]
    assert rows[0].startswith("| 0 | 1.00000+0.00000i") and "inf (stationary)" in rows[0]
    for row in rows[1:]:
        if abs(complex(row.split("|")[2].strip().replace("i", "j"))) > 1 + 1e-6:
            assert "undefined" in row and "inf" not in row
        else:
            assert "undefined" not in row
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert main(["analyze", str(out), "--quiet"]) == 0
    text = (out / "analysis" / "report.md").read_text()
    assert "## Diagnostics" in text and (out / "analysis" / "results.json").exists()
    assert ("PCCA+ (" in text) != ("PCCA+ metastable sets" in text)  # run, or skipped
