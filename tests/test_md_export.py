"""Every MD feature kind of ``dpnets fit`` exports (issue 41): dihedrals of any kinds
(omega, chi), distances within a cut-off and Cartesian coordinates superposed on a
reference, read from the fit folder's ``features.json``; the positions-in file equals the
fit's features and ``dpnets transform`` on the same frames, with finite gradients equal to
finite differences; PLUMED's ``TORSION``/``DISTANCE`` lines carry the engine topology's
1-based indices; Cartesian fits are refused to PLUMED in one line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ALANINE_PDB, alanine_walk

from dpnets.cli import main
from dpnets.export import PositionCartesian, PositionTorsions, TorsionInputs

md = pytest.importorskip("mdtraj")
files = pytest.importorskip("MDAnalysisTests.datafiles")

PDB = ALANINE_PDB


@pytest.fixture(scope="module")
def alanine(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ala")
    full = md.load(str(PDB))
    md.Trajectory(alanine_walk(160), full.topology).save_dcd(str(tmp / "walk.dcd"))
    return tmp


def _fit(folder: Path, name: str, *args: str) -> Path:
    out = folder / name
    cmd = ["fit", str(folder / "walk.dcd"), "--topology", str(PDB), "--lag", "2"]
    cmd += ["--epochs", "2", "--dim", "2", "--batch-size", "64", "--reversible"]
    assert main([*cmd, *args, "--out", str(out), "--quiet"]) == 0
    return out


def _transform(fit: Path, data: Path, out: Path) -> np.ndarray:
    assert main(["transform", str(fit), str(data), "--eigenfunctions", "--out", str(out)]) == 0
    return np.load(out)


def _plumed(text: str, kind: str) -> dict[str, list[int]]:
    got = {}
    for line in text.splitlines():
        if f"{kind} ATOMS=" in line and not line.startswith("#"):
            label, rest = line.split(":", 1)
            got[label] = [int(a) - 1 for a in rest.split("ATOMS=")[1].split()[0].split(",")]
    return got


def _check_positions_file(fit: Path, alanine: Path, tmp: Path) -> None:
    """The positions-in file of ``fit`` equals ``dpnets transform`` on the same frames; its
    gradient is finite and equals finite differences."""
    out = tmp / "pos" / "cv.pt"
    assert main(["export", str(fit), "--input", "positions", "--double", "--out", str(out)]) == 0
    ref = _transform(fit, alanine / "walk.dcd", tmp / "ef.npy")[:, 1]
    xyz = md.load(str(alanine / "walk.dcd"), top=str(PDB)).xyz.astype(np.float64)
    cv = torch.jit.load(str(out))
    got = cv(torch.tensor(xyz)).numpy()[:, 0]
    assert np.abs(got - ref).max() / np.ptp(ref) < 1e-4  # transform: the float32 model
    x = torch.tensor(xyz[7], requires_grad=True)
    (g,) = torch.autograd.grad(cv(x)[0], x)
    assert torch.isfinite(g).all() and g.abs().max() > 0
    h, base = 1e-6, xyz[7]
    for i, k in [(4, 0), (6, 1), (8, 2), (14, 0), (16, 2)]:
        e = np.zeros_like(base)
        e[i, k] = h
        fd = (float(cv(torch.tensor(base + e))[0]) - float(cv(torch.tensor(base - e))[0])) / (2 * h)
        assert abs(float(g[i, k]) - fd) < 1e-5 * max(1.0, float(g.abs().max()))


def test_dihedrals_of_several_kinds(alanine, tmp_path):
    """psi before phi (the dipeptide has no omega or chi; adk's are below): TORSION lines in
    features.json's order with 1-based indices and the features' names; the torsions-in
    file equals transform; positions in equals transform."""
    fit = _fit(alanine, "dih", "--features", "dihedrals", "--torsions", "psi,phi")
    spec = json.loads((fit / "features.json").read_text())
    assert [k for k, _ in spec["blocks"]] == ["psi", "phi"]
    out = tmp_path / "plumed" / "cv.pt"
    assert main(["export", str(fit), "--out", str(out)]) == 0
    text = (out.parent / "plumed.dat").read_text()
    got = _plumed(text, "TORSION")
    labels = [f"{k}{i + 1}" for k, c in spec["blocks"] for i in range(c)]
    assert list(got) == labels and len(labels) == len(spec["atoms"])
    assert list(got.values()) == spec["atoms"]  # the fit's own topology: same numbering
    assert "   # ψ ALA2: ALA2-N ALA2-CA ALA2-C NME3-N" in text
    assert f"ARG={','.join(labels)}" in text
    # the file on mdtraj's torsions equals transform
    traj = md.load(str(alanine / "walk.dcd"), top=str(PDB))
    angles = md.compute_dihedrals(traj, np.asarray(spec["atoms"]))
    ref = _transform(fit, alanine / "walk.dcd", tmp_path / "ef.npy")[:, 1]
    got_cv = torch.jit.load(str(out))(torch.tensor(angles, dtype=torch.float64)).numpy()[:, 0]
    assert np.abs(got_cv - ref).max() / np.ptp(ref) < 1e-4
    _check_positions_file(fit, alanine, tmp_path)


def test_distances_within_a_cutoff(alanine, tmp_path):
    fit = _fit(alanine, "dist", "--features", "distances", "--cutoff", "0.3")
    spec = json.loads((fit / "features.json").read_text())
    assert 0 < len(spec["atoms"]) < 45  # a subset of the 10 heavy atoms' 45 pairs
    out = tmp_path / "plumed" / "cv.pt"
    assert main(["export", str(fit), "--out", str(out)]) == 0
    got = _plumed((out.parent / "plumed.dat").read_text(), "DISTANCE")
    assert list(got.values()) == spec["atoms"]
    _check_positions_file(fit, alanine, tmp_path)


def test_cartesian_positions_in_and_refused_to_plumed(alanine, tmp_path, capsys):
    fit = _fit(alanine, "cart", "--features", "cartesian", "--selection", "not element H")
    out = tmp_path / "plumed" / "cv.pt"
    assert main(["export", str(fit), "--input", "features", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--input positions" in err
    assert not out.parent.exists()
    _check_positions_file(fit, alanine, tmp_path)


def test_cartesian_map_equals_mdtraj_superpose_on_adk():
    """Horn's rotation inside the file equals mdtraj's superpose (214 C-alpha atoms of
    adenylate kinase); the gradient is finite and equals finite differences, scripted and
    frozen alike."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traj = md.load(files.DCD, top=files.PSF)[::10]
    atoms = traj.topology.select("name CA")
    ref = traj.xyz[3].astype(np.float64)
    target = md.Trajectory(ref[None].astype(np.float32), traj.topology)
    moved = md.Trajectory(traj.xyz.copy(), traj.topology).superpose(
        target, 0, atom_indices=atoms, ref_atom_indices=atoms
    )
    want = moved.xyz[:, atoms].reshape(traj.n_frames, -1)
    cart = PositionCartesian(atoms, ref[atoms]).double()
    frozen = torch.jit.freeze(torch.jit.script(cart).eval())
    for m in (cart, frozen):
        got = m(torch.tensor(traj.xyz, dtype=torch.float64)).numpy()
        assert np.abs(got - want).max() < 2e-6  # mdtraj computes in float32
    x = torch.tensor(traj.xyz[5:6], dtype=torch.float64)
    w = torch.tensor(np.random.default_rng(0).normal(size=3 * len(atoms)))
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad((frozen(xg) * w).sum(), xg)
    assert torch.isfinite(g).all()
    h = 1e-6
    for i, k in [(atoms[0], 0), (atoms[50], 1), (atoms[200], 2)]:
        e = torch.zeros_like(x)
        e[0, i, k] = h
        fd = float(((cart(x + e) - cart(x - e)) * w).sum()) / (2 * h)
        assert abs(float(g[0, i, k]) - fd) < 1e-6 * float(g.abs().max())


def test_torsion_blocks_equal_mdtraj_on_adk():
    """phi, omega and chi1 of residues 10-40 of adenylate kinase: the positions map and
    the torsions map give the fit's features (MDFeatures.compute through mdtraj)."""
    from dpnets.md_features import torsion_features

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traj = md.load(files.DCD, top=files.PSF)[::20]
    top = traj.topology
    spec = torsion_features(top, ["phi", "omega", "chi1"], top.select("resid 10 to 40"))
    want = spec.compute(traj)
    counts = [c for _, c in spec.blocks]
    pos = PositionTorsions(spec.atoms, blocks=spec.blocks)
    got = torch.jit.script(pos)(torch.tensor(traj.xyz, dtype=torch.float64)).numpy()
    assert np.abs(got - want).max() < 1e-5
    angles = md.compute_dihedrals(traj, spec.atoms)
    got = TorsionInputs(blocks=counts)(torch.tensor(angles, dtype=torch.float64)).numpy()
    assert np.abs(got - want).max() < 1e-6
