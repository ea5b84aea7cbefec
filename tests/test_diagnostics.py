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


def test_a_restored_spectrum_keeps_the_constant_first():
    """``load`` recomputes the spectrum from the saved matrices (``_set_spectrum``)."""
    x = _short_ar1()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DiagnosticWarning)
        op = dpnets.TransferOperator(_dictionary, lag=1).fit(x)
    lam = op.eig().copy()
    op._set_spectrum()
    assert np.allclose(op.eig(), lam) and abs(op.eig()[0] - 1) < 1e-12


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
