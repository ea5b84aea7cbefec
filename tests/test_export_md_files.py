"""``dpnets export`` on real MD files nobody tuned for (issue 39, findings 4 and 5):
MDAnalysisTests' adenylate kinase (``adk.psf`` + ``adk_dims.dcd`` + ``adk_dims2.dcd``, 200
frames; ``adk_open.pdb`` as the engine topology). A complex mode is refused by name or
exported as its two parts, and every encoder's fit exports (the dihedral MLP with
positions in, SchNet), checked against the model computed in float64."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from dpnets import load
from dpnets.cli import main
from dpnets.export import read_metadata

files = pytest.importorskip("MDAnalysisTests.datafiles")
md = pytest.importorskip("mdtraj")
OPEN_PDB = str(Path(files.PSF).parent / "adk_open.pdb")


def _fit(folder: Path, *args: str) -> Path:
    out = folder / "fit"
    cmd = ["fit", files.DCD, files.DCD2, "--topology", files.PSF, "--lag", "2", "--seed", "0"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # adk_dims.dcd's header announces 500 frames: 98
        assert main([*cmd, *args, "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def dihedral_fit(tmp_path_factory) -> Path:
    """852 sin/cos dihedral features; 3 epochs leave a complex pair among the leading modes
    (0.97500 +- 0.09627i, modes 2 and 3 at this seed)."""
    return _fit(tmp_path_factory.mktemp("dih"), "--features", "dihedrals", "--epochs", "3")


def _float64_eigenfunctions(model, states: np.ndarray) -> np.ndarray:
    """The model's eigenfunctions with its feature map computed in float64."""
    import copy

    exact = copy.copy(model)
    exact.features_ = copy.deepcopy(model.features_.feature_module()).double().eval()
    return exact.eigenfunctions(states)


def test_complex_mode_refused_by_name_or_exported_as_two_parts(dihedral_fit, tmp_path, capsys):
    model = load(dihedral_fit / "model.pt")
    lam = model.eig()
    k = int(np.flatnonzero(lam.imag > 0)[0])
    assert abs(lam[k] - (0.975 + 0.0963j)) < 1e-3
    out = tmp_path / "plumed" / "cv.pt"
    args = ["export", str(dihedral_fit), "--topology", files.PSF, "--out", str(out)]
    assert main([*args, "--modes", str(k)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"mode {k} is complex (eigenvalue 0.975" in err
    for remedy in ("dpnets fit --reversible", "--modes", "--complex-parts"):
        assert remedy in err
    assert not out.parent.exists()
    # the slowest real mode exports, and plumed.dat says the truth about both
    assert main([*args, "--modes", f"1,{k}", "--complex-parts"]) == 0
    plumed = (out.parent / "plumed.dat").read_text()
    ts = model.implied_timescales()[1]  # in the fit's ps (the DCD's 1 ps a frame): said so
    node0 = f"# cv.node-0: eigenfunction 1 (eigenvalue {lam[1].real:.5g}, implied timescale "
    assert f"{node0}{ts:.4g} ps)" in plumed
    assert f"# cv.node-1: real part of the complex eigenfunction {k} (eigenvalue 0.975" in plumed
    assert f"# cv.node-2: imaginary part of the complex eigenfunction {k}" in plumed
    assert "OPES_METAD ARG=cv.node-0 " in plumed  # the slowest mode, real: biased alone
    meta = read_metadata(out)
    assert meta["output_parts"] == [None, "real", "imaginary"] and meta["time_unit"] == "ps"
    # the file on the fit's torsions: the real mode and both parts of the complex one
    traj = md.load(files.DCD, top=files.PSF)
    phi_idx, phi = md.compute_phi(traj)
    psi_idx, psi = md.compute_psi(traj)
    feats = np.concatenate([np.sin(phi), np.cos(phi), np.sin(psi), np.cos(psi)], 1)
    ef = _float64_eigenfunctions(model, feats.astype(np.float64))
    ref = np.stack([ef[:, 1].real, ef[:, k].real, ef[:, k].imag], 1)
    cv = torch.jit.load(str(out))
    got = cv(torch.tensor(np.concatenate([phi, psi], 1), dtype=torch.float64)).numpy()
    assert np.abs(ef[:, k].imag).max() > 0.5  # the imaginary part is no rounding error
    assert meta["precision"]["checked_on"] == 64 and meta["precision"]["error"] < 1e-4
    assert np.all(np.abs(got - ref).max(0) / np.ptp(ref, 0) < 1e-4)


def test_dihedral_fit_with_positions_in_for_another_topology(dihedral_fit, tmp_path, capsys):
    """Finding 5: the all-atom adk_open.pdb as the engine topology, positions in: written
    (by default float32, which agrees within 1e-4 of the CV's range), equal to the model on
    the fit's frames."""
    out = tmp_path / "omm" / "cv.pt"
    args = ["export", str(dihedral_fit), "--input", "positions", "--topology", OPEN_PDB]
    assert main([*args, "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    meta = read_metadata(out)
    prec = meta["precision"]
    assert prec["dtype"] == "float32" and prec["checked_on"] == 64
    assert 0 < prec["error"] < 1e-4
    model = load(dihedral_fit / "model.pt")
    traj = md.load(files.DCD2, top=files.PSF)  # the other file: not the checked frames
    _, phi = md.compute_phi(traj)
    _, psi = md.compute_psi(traj)
    feats = np.concatenate([np.sin(phi), np.cos(phi), np.sin(psi), np.cos(psi)], 1)
    ref = _float64_eigenfunctions(model, feats.astype(np.float64))[:, 1].real
    own = model.eigenfunctions(feats)[:, 1].real  # the float32 model itself
    assert md.load_topology(OPEN_PDB).n_atoms == traj.n_atoms == 3341
    got = torch.jit.load(str(out))(torch.tensor(traj.xyz, dtype=torch.float64)).numpy()[:, 0]
    span = np.ptp(ref)
    assert np.abs(got - ref).max() / span < 1e-4
    assert np.abs(own - ref).max() / span < 1e-4


def test_schnet_fit_exports_and_agrees_with_the_model(tmp_path):
    """Every encoder exports: a SchNet fit (24 C-alpha atoms, nm positions) with the
    engine's positions in; the file equals the model's eigenfunctions computed in float64
    and its transform within the float32 model's own rounding."""
    pytest.importorskip("torch_geometric")
    fit = _fit(
        tmp_path,
        *("--features", "positions", "--selection", "name CA and resid < 25"),
        *("--encoder", "schnet", "--epochs", "2", "--dim", "2"),
    )
    out = tmp_path / "cv.pt"
    assert main(["export", str(fit), "--modes", "1,2", "--out", str(out)]) == 0
    meta = read_metadata(out)
    assert meta["inputs"]["map"] == "AtomSelection" and meta["precision"]["checked_on"] == 64
    model = load(fit / "model.pt")
    traj = md.load(files.DCD2, top=files.PSF)
    sel = traj.topology.select("name CA and resid < 25")
    states = traj.xyz[:, sel].astype(np.float64)
    ref = _float64_eigenfunctions(model, states)[:, [1, 2]].real
    span = np.ptp(ref, 0)
    cv = torch.jit.load(str(out))
    got = cv(torch.tensor(traj.xyz, dtype=torch.float64)).numpy()
    tol = 1e-4 if meta["dtype"] == "float32" else 1e-9
    assert np.all(np.abs(got - ref).max(0) / span < tol)
    # transform: the model's features (float32) through its basis and eigenvectors
    own = model.transform(states) @ model.right_eigvecs_[:, [1, 2]]
    assert np.all(np.abs(got - own.real).max(0) / span < 1e-3)
    # one state (n_atoms, 3), as OpenMM-Torch passes it
    assert np.allclose(cv(torch.tensor(traj.xyz[4], dtype=torch.float64)).numpy(), got[4])
