"""Learned slow modes in the engine's own topology (issue 33): a fit on a heavy-atom
topology exported for the all-atom system the engine simulates, with the engine's positions
in (the torsions computed inside, periodic images handled) or PLUMED's torsions in (the
all-atom indices in ``plumed.dat``, equal to mdtraj's); a fit folder's commands from any
folder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ALANINE_PDB, alanine_walk

from dpnets.cli import main

md = pytest.importorskip("mdtraj")

PDB = ALANINE_PDB


@pytest.fixture(scope="module")
def heavy_fit(tmp_path_factory):
    """A dihedral fit on a heavy-atom topology (10 atoms: not the engine's 22), made with
    relative paths from its own folder."""
    tmp = tmp_path_factory.mktemp("heavy")
    full = md.load(str(PDB))
    xyz = alanine_walk()
    traj = md.Trajectory(xyz, full.topology)
    heavy = traj.atom_slice(full.topology.select("not element H"))
    heavy[0].save_pdb(str(tmp / "heavy.pdb"))
    heavy.save_dcd(str(tmp / "heavy.dcd"))
    traj.save_dcd(str(tmp / "full.dcd"))
    import os

    cwd = os.getcwd()
    os.chdir(tmp)
    try:  # relative paths, as a user types them
        args = ["fit", "heavy.dcd", "--topology", "heavy.pdb", "--features", "dihedrals"]
        args += ["--lag", "2", "--epochs", "2", "--dim", "2", "--batch-size", "64"]
        assert main([*args, "--out", "fit", "--quiet"]) == 0
    finally:
        os.chdir(cwd)
    return tmp


def _plumed_atoms(text: str, kind: str = "TORSION") -> dict[str, list[int]]:
    out = {}
    for line in text.splitlines():
        if f"{kind} ATOMS=" in line and not line.startswith("#"):
            label, rest = line.split(":", 1)
            atoms = rest.split("ATOMS=")[1].split()[0]
            out[label] = [int(a) - 1 for a in atoms.split(",")]  # PLUMED is 1-based
    return out


def test_plumed_indices_follow_the_engine_topology(heavy_fit, tmp_path):
    fit = heavy_fit / "fit"
    # the fit's own topology: the heavy-atom numbering
    assert main(["export", str(fit), "--out", str(tmp_path / "own" / "cv.pt")]) == 0
    own = _plumed_atoms((tmp_path / "own" / "plumed.dat").read_text())
    heavy = md.load(str(heavy_fit / "heavy.pdb"))
    assert own == {
        "phi1": md.compute_phi(heavy)[0][0].tolist(),
        "psi1": md.compute_psi(heavy)[0][0].tolist(),
    }
    # the all-atom engine system: mdtraj's phi/psi atoms of the all-atom pdb
    out = tmp_path / "new" / "dir" / "cv.pt"  # missing folders are created
    args = ["export", str(fit), "--out", str(out), "--topology", str(PDB), "--modes", "1,2"]
    assert main([*args, "--temperature", "400"]) == 0
    text = (out.parent / "plumed.dat").read_text()
    got = _plumed_atoms(text)
    full = md.load(str(PDB))
    phi_idx, psi_idx = md.compute_phi(full)[0], md.compute_psi(full)[0]
    assert got == {"phi1": phi_idx[0].tolist(), "psi1": psi_idx[0].tolist()}
    assert got != own  # the numbering really differs: 4,6,7,9 against 1,3,4,5
    # the file by its absolute path; the sketches carry TEMP and SIGMA
    assert f"cv: PYTORCH_MODEL FILE={out.resolve()} ARG=phi1,psi1" in text
    assert "# opes: OPES_METAD ARG=cv.node-0 TEMP=400 " in text and "SIGMA=" in text
    assert "# metad: METAD ARG=cv.node-0 TEMP=400 " in text
    # without --temperature: a placeholder PLUMED cannot read as a number
    assert main(["export", str(fit), "--out", str(tmp_path / "p" / "cv.pt")]) == 0
    assert "TEMP=SET_TEMPERATURE_IN_K" in (tmp_path / "p" / "plumed.dat").read_text()


def test_an_engine_lacking_an_atom_is_refused_by_name(heavy_fit, tmp_path, capsys):
    full = md.load(str(PDB))
    ca = full.topology.select("resname ALA and name CA")
    keep = [a.index for a in full.topology.atoms if a.index not in ca]
    full.atom_slice(keep).save_pdb(str(tmp_path / "noca.pdb"))
    args = ["export", str(heavy_fit / "fit"), "--out", str(tmp_path / "cv.pt")]
    assert main([*args, "--topology", str(tmp_path / "noca.pdb")]) == 2
    err = capsys.readouterr().err
    assert "no atom CA of residue ALA2" in err and err.count("\n") == 1
    assert not (tmp_path / "cv.pt").exists()


def test_corrupted_features_json_is_refused(heavy_fit, tmp_path, capsys):
    """A hand-edited features.json: a negative atom index (numpy would take the last atom
    of the topology, a silently wrong torsion), one past the end, or three atoms for a
    torsion is refused in one line naming the file, with either input."""
    import json
    import shutil

    for k, bad in enumerate(([-1, 1, 3, 4], [0, 1, 3, 10], [0, 1, 3])):
        fit = tmp_path / f"fit{k}"
        shutil.copytree(heavy_fit / "fit", fit)
        spec = json.loads((fit / "features.json").read_text())
        spec["atoms"][0] = bad
        (fit / "features.json").write_text(json.dumps(spec))
        for inputs in ("features", "positions"):
            out = tmp_path / f"{k}{inputs}" / "cv.pt"
            assert main(["export", str(fit), "--input", inputs, "--out", str(out)]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and not out.exists()
            assert f"{fit / 'features.json'}: its atoms are not quadruplets of 0-based atom " in err
            assert "topology (10 atoms): the file is corrupted or belongs to another fit" in err


def test_out_that_the_export_reads_is_refused(heavy_fit, capsys):
    """--out the fit's own model.pt (a slip when exporting 'next to the fit') overwrote it
    with the TorchScript file, and the fit could not be read again; the topology or the
    data likewise: refused in one line, nothing written."""
    fit = heavy_fit / "fit"
    before = (fit / "model.pt").read_bytes()
    cases = [
        (fit, fit / "model.pt", "the fit's model"),
        (fit / "model.pt", fit / "." / "model.pt", "the fit's model"),
        (fit, fit / "features.json", "the fit's features.json"),
        (fit, heavy_fit / "heavy.pdb", "the fit's topology"),
        (fit, heavy_fit / "heavy.dcd", "a data file of the fit"),
    ]
    for source, out, what in cases:
        assert main(["export", str(source), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"dpnets: error: --out {out} is {what}, which the export reads; give a new file, "
            "e.g. cv.pt\n"
        )
    assert (fit / "model.pt").read_bytes() == before
    assert not (fit / "plumed.dat").exists()


def test_engine_topology_with_the_solvent_first(tmp_path):
    """A fit topology without chain IDs (.gro) against an engine PDB whose first chain is
    the solvent: chains cannot be matched by position, so the atoms are matched by residue
    and atom name, each the only one: the engine's indices, shifted by the waters (it was
    refused as 'has no atom C of residue ACE1 (chain 0)'); a peptide held twice is
    refused."""
    from dpnets.datasets import load_topology
    from dpnets.engines import match_atoms

    pep = md.load(str(PDB))
    pep.save_gro(str(tmp_path / "fit.gro"))
    fit = load_topology(str(tmp_path / "fit.gro"))

    def engine(copies: int) -> object:
        top = md.Topology()
        water = top.add_chain()
        for k in range(3):
            res = top.add_residue("HOH", water, k + 1)
            for name, el in (("O", "O"), ("H1", "H"), ("H2", "H")):
                top.add_atom(name, md.element.get_by_symbol(el), res)
        for _ in range(copies):
            chain = top.add_chain()
            for r in pep.topology.residues:
                res = top.add_residue(r.name, chain, r.resSeq)
                for a in r.atoms:
                    top.add_atom(a.name, a.element, res)
        xyz = np.zeros((1, top.n_atoms, 3))
        path = tmp_path / f"engine{copies}.pdb"
        md.Trajectory(xyz, top).save_pdb(str(path))
        return load_topology(str(path))

    phi, psi = md.compute_phi(pep)[0][0], md.compute_psi(pep)[0][0]
    assert not any(str(c.chain_id or "").strip() for c in fit.chains)
    got = match_atoms(fit, engine(1), np.concatenate([phi, psi]))
    assert got.tolist() == (np.concatenate([phi, psi]) + 9).tolist()
    from dpnets.export import ExportError

    with pytest.raises(
        ExportError,
        match=r"has no atom C of residue ACE1 \(chain 0\) .*"
        r"matched by chain \(by position: a topology without chain IDs\)",
    ):
        match_atoms(fit, engine(2), phi)


def test_positions_in_for_the_all_atom_engine(heavy_fit, tmp_path):
    """The heavy-atom dihedral fit exported with the engine's 22-atom positions in equals
    ``dpnets transform --eigenfunctions`` (run from another folder) on the same frames, its
    gradients equal finite differences, and periodic images do not change it."""
    fit = heavy_fit / "fit"
    out = tmp_path / "cv.pt"
    args = ["export", str(fit), "--input", "positions", "--topology", str(PDB), "--double"]
    assert main([*args, "--modes", "1,2", "--out", str(out)]) == 0
    assert (tmp_path / "openmm_torch_recipe.py").is_file()
    # dpnets transform from another folder: the fit stored its paths absolute
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        data = str(heavy_fit / "heavy.dcd")
        assert main(["transform", str(fit), data, "--eigenfunctions", "--out", "ef.npy"]) == 0
    finally:
        os.chdir(cwd)
    ref = np.load(tmp_path / "ef.npy")[:, [1, 2]]
    full = md.load(str(heavy_fit / "full.dcd"), top=str(PDB))
    cv = torch.jit.load(str(out))
    got = cv(torch.tensor(full.xyz, dtype=torch.float64)).numpy()
    span = np.ptp(ref, axis=0)
    assert np.all(np.abs(got - ref).max(0) / span < 1e-5)
    # one state (n_atoms, 3), as OpenMM-Torch passes it -> (n_modes,)
    assert np.allclose(cv(torch.tensor(full.xyz[5], dtype=torch.float64)).numpy(), got[5])
    # gradients against central finite differences of the file (float64)
    x = torch.tensor(full.xyz[7], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(cv(x)[0], x)
    h = 1e-6
    fd = np.zeros((22, 3))
    base = full.xyz[7].astype(np.float64)
    for i in range(22):
        for k in range(3):
            e = np.zeros((22, 3))
            e[i, k] = h
            up = float(cv(torch.tensor(base + e))[0])
            down = float(cv(torch.tensor(base - e))[0])
            fd[i, k] = (up - down) / (2 * h)
    assert np.abs(g.numpy() - fd).max() < 1e-6 * max(1.0, np.abs(fd).max())
    assert np.abs(g.numpy()).sum(1)[[1, 2, 3]].max() == 0  # ACE's hydrogens play no part
    # periodic images: atoms moved by whole box vectors give the same CV with the box
    box = np.array([[2.0, 0.0, 0.0], [0.4, 2.5, 0.0], [-0.3, 0.6, 3.0]])
    rng = np.random.default_rng(1)
    shifts = rng.integers(-1, 2, size=(22, 3)) @ box
    moved = torch.tensor(base + shifts)
    assert abs(float(cv(moved, torch.tensor(box))[0]) - got[7, 0]) < 1e-9 * span[0] + 1e-12
    assert abs(float(cv(moved)[0]) - got[7, 0]) > 1e-3  # without the box it is wrong
    # an engine system with one more particle (a water's virtual site) is refused: the
    # file took it and computed on the first 22 atoms
    more = torch.cat([torch.tensor(base), torch.zeros(1, 3, dtype=torch.float64)])
    told = (
        r"this file takes inputs of shape \[22, 3\] \(one state\) or \[B, \.\.\.\] \(a batch\): "
        rf"the positions of the 22 atoms of {PDB}, in its order; [\s\S]*got inputs of "
        r"shape \[23, 3\]"
    )
    with pytest.raises(torch.jit.Error, match=told):
        cv(more)
    with pytest.raises(torch.jit.Error, match=r"forces take one state, got \[2, 22, 3\]"):
        cv.forces(torch.tensor(full.xyz[:2], dtype=torch.float64), None, 0)
    with pytest.raises(torch.jit.Error, match=r"got inputs of shape \[66\]"):
        cv(torch.tensor(base).reshape(-1))


def test_float64_file_under_float32_inputs(heavy_fit, tmp_path):
    """``--double`` for PLUMED: fed float32 torsions, the file answers float32, computed in
    float64 inside."""
    fit = heavy_fit / "fit"
    out = tmp_path / "cv.pt"
    assert main(["export", str(fit), "--double", "--out", str(out)]) == 0
    cv = torch.jit.load(str(out))
    angles = torch.tensor([[-1.4, 1.2], [1.1, -0.6]], dtype=torch.float32)
    y32 = cv(angles)
    assert y32.dtype == torch.float32
    assert torch.allclose(y32.double(), cv(angles.double()), rtol=0, atol=1e-6)


def test_distances_with_positions_in_and_a_box(tmp_path):
    """A distance fit with positions in: the distances of the matched atoms, nearest
    periodic image with a box (mdtraj's compute_distances with periodic=True)."""
    from dpnets.export import PositionDistances

    full = md.load(str(PDB))
    pairs = np.array([[4, 14], [6, 16], [8, 18]])
    box = np.diag([1.5, 1.7, 1.9]).astype(np.float32)
    xyz = alanine_walk(5)
    rng = np.random.default_rng(2)
    wrapped = xyz + (rng.integers(-1, 2, size=xyz.shape[:2] + (3,)) @ box).astype(np.float32)
    traj = md.Trajectory(wrapped, full.topology)
    traj.unitcell_vectors = np.repeat(box[None], len(xyz), 0)
    ref = md.compute_distances(traj, pairs, periodic=True)
    got = PositionDistances(pairs)(torch.tensor(wrapped), torch.tensor(box)).numpy()
    assert np.abs(got - ref).max() < 1e-5
