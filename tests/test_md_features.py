"""The features a computational chemist expects from MD files (issue 41), against mdtraj on
the same frames: torsions by kind restricted by the selection, Cartesians after
superposition, distances within a contact cut-off; every column named; and the command
line around them (names in the fit folder and the report, --time-unit, transform
--topology, analyze's figures)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

md = pytest.importorskip("mdtraj")
files = pytest.importorskip("MDAnalysisTests.datafiles")

from dpnets.cli import main  # noqa: E402
from dpnets.datasets import DataFileError, read_trajectories  # noqa: E402

ADK = [files.DCD, files.DCD2]


def _read(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the DCD header, short by 402
        return read_trajectories(ADK, topology=files.PSF, **kw)


@pytest.fixture(scope="module")
def adk():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return md.load(files.DCD, top=files.PSF)


def test_torsions_by_kind_of_the_selected_residues_equal_mdtraj(adk):
    t = _read(features="dihedrals", selection="resid 5 to 10", torsions=["phi", "psi", "chi1"])
    top = adk.topology
    expect, names = [], []
    for kind, sym in (("phi", "φ"), ("psi", "ψ"), ("chi1", "χ1")):
        idx, ang = getattr(md, f"compute_{kind}")(adk)
        keep = [i for i, q in enumerate(idx) if 5 <= top.atom(int(q[1])).residue.index <= 10]
        expect += [np.sin(ang[:, keep]), np.cos(ang[:, keep])]
        res = [str(top.atom(int(idx[i][1])).residue) for i in keep]
        names += [f"{f} {sym} {r}" for f in ("sin", "cos") for r in res]
    np.testing.assert_allclose(t.data[0], np.concatenate(expect, axis=1), atol=1e-6)
    assert t.names == names and t.state_shape == (28,)  # 6 phi, 6 psi, 2 chi1 (LEU6, PRO9)
    assert t.md_features.blocks == (("phi", 6), ("psi", 6), ("chi1", 2))
    # the default is every backbone phi/psi: 214 residues, 213 of each
    assert _read(features="dihedrals").state_shape == (852,)
    with pytest.warns(RuntimeWarning, match=r"residues \(ALA\) have no chi1 torsion: left out"):
        t = read_trajectories(
            ADK,
            topology=files.PSF,
            features="dihedrals",
            selection="resid 7",
            torsions=["phi", "chi1"],
        )  # ALA8 has no chi1
    assert t.names == ["sin φ ALA8", "cos φ ALA8"]
    with pytest.raises(DataFileError, match=r"the selected residues \(ALA\) have no chi4 "):
        _read(features="dihedrals", selection="resid 7", torsions=["chi4"])  # ALA8
    # the residues named, so that a chemist sees why (glycines have no chi1)
    with pytest.raises(DataFileError, match=r"residues \(GLY x20\) have no chi1, chi2 torsion$"):
        _read(features="dihedrals", selection="resname GLY", torsions=["chi1", "chi2"])
    with pytest.raises(ValueError, match="torsion kinds must be among"):
        _read(features="dihedrals", torsions=["chi9"])


def test_cartesians_superposed_equal_mdtraj(adk, tmp_path):
    t = _read(features="cartesian", selection="name CA")
    ca = adk.topology.select("name CA")
    moved = adk.superpose(adk[0], 0, atom_indices=ca)
    np.testing.assert_allclose(t.data[0], moved.xyz[:, ca].reshape(98, -1), atol=1e-5)
    assert t.names[:4] == ["x MET1-CA", "y MET1-CA", "z MET1-CA", "x ARG2-CA"]
    # on a given reference: the second trajectory's last frame
    ref = tmp_path / "ref.pdb"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        last = md.load(files.DCD2, top=files.PSF)[-1]
    last.save_pdb(str(ref))
    r = _read(features="cartesian", selection="name CA", reference=ref)
    moved = adk.superpose(md.load(str(ref)), 0, atom_indices=ca)
    np.testing.assert_allclose(r.data[0], moved.xyz[:, ca].reshape(98, -1), atol=2e-4)  # pdb: 1e-4


def test_contacts_keep_the_pairs_that_come_closer_than_the_cutoff(adk):
    every = _read(features="distances", selection="name CA")
    t = _read(features="distances", selection="name CA", cutoff=0.8)
    assert every.state_shape == (214 * 213 // 2,) and t.state_shape == (1295,)
    closest = np.minimum(every.data[0].min(0), every.data[1].min(0))
    assert np.sum(closest < 0.8) == 1295
    pairs = t.md_features.atoms
    np.testing.assert_allclose(t.data[0], md.compute_distances(adk, pairs), atol=1e-6)
    assert t.names == [n for n, c in zip(every.names, closest, strict=True) if c < 0.8]


def test_the_command_line_names_its_features_and_draws_the_figures(tmp_path):
    """A fit on the chi1 and phi/psi torsions of ten residues, in ns: the names in
    features.json and the report, the time unit converted, the fit's lag kept by load, and
    analyze's free-energy and time-trace figures."""
    import dpnets

    out = tmp_path / "fit"
    args = ["fit", *ADK, "--topology", files.PSF, "--features", "dihedrals"]
    args += ["--torsions", "phi,psi,chi1", "--selection", "resid 0 to 9", "--lag", "2"]
    args += ["--time-unit", "ns", "--epochs", "3", "--seed", "0", "--quiet", "--out", str(out)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert main(args) == 0
    described = json.loads((out / "features.json").read_text())
    assert described["kind"] == "dihedrals" and described["names"][0] == "sin φ ARG2"
    assert [k for k, _ in described["blocks"]] == ["phi", "psi", "chi1"]
    report = (out / "report.md").read_text()
    assert "lag 2 frames = 0.002 ns" in report and "(ns)" in report
    assert "Inputs: features `dihedrals` (phi,psi,chi1), selection `resid 0 to 9`" in report
    assert "[data]" in (out / "config.toml").read_text()
    assert 'time_unit = "ns"' in (out / "config.toml").read_text()
    model = dpnets.load(out / "model.pt")
    assert model.get_params()["lag"] == 2 and model.lag_ == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert main(["analyze", str(out), "--reversible", "--quiet"]) == 0
    for name in ("free_energy.png", "eigenfunctions_time.png", "eigenfunctions.png"):
        assert (out / "analysis" / name).stat().st_size > 5000
    text = (out / "analysis" / "report.md").read_text()
    assert "most correlated with the slowest" in text and "(ns)" in text
    # the same molecule's heavy atoms, with their own topology: the same features
    heavy = tmp_path / "heavy"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traj = md.load(files.DCD, top=files.PSF)
    traj.atom_slice(traj.topology.select("element != H")).save_dcd(str(heavy) + ".dcd")
    traj[0].atom_slice(traj.topology.select("element != H")).save_pdb(str(heavy) + ".pdb")
    feats = tmp_path / "f.npy"
    cmd = ["transform", str(out), str(heavy) + ".dcd", "--topology", str(heavy) + ".pdb"]
    assert main([*cmd, "--out", str(feats)]) == 0
    np.testing.assert_allclose(
        np.load(feats), model.transform(_read_one(files.DCD, files.PSF, described)), atol=1e-4
    )
    # a topology that gives other features is refused by name
    ca = tmp_path / "ca"
    traj.atom_slice(traj.topology.select("name CA")).save_dcd(str(ca) + ".dcd")
    traj[0].atom_slice(traj.topology.select("name CA")).save_pdb(str(ca) + ".pdb")
    cmd = ["transform", str(out), str(ca) + ".dcd", "--topology", str(ca) + ".pdb"]
    assert main([*cmd, "--out", str(feats)]) == 2


def _read_one(path, top, described):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = read_trajectories(
            path,
            topology=top,
            features="dihedrals",
            selection="resid 0 to 9",
            torsions=[k for k, _ in described["blocks"]],
        )
    return t.data[0]


def test_debug_after_the_subcommand_and_one_line_warnings(tmp_path):
    """Global options anywhere on the line (--debug shows the traceback: the error itself);
    a warning on the command line is one line, without the source line."""
    from dpnets.cli import _one_line_warning

    missing = ["fit", str(tmp_path / "none.npy"), "--out", str(tmp_path / "o")]
    assert main(missing) == 2
    with pytest.raises(DataFileError, match="no such file"):
        main([*missing, "--debug"])
    line = _one_line_warning("a long\n   message", RuntimeWarning, "file.py", 3, "src")
    assert line == "dpnets: warning: a long message\n"


def test_a_tica_pre_projection_before_the_network(tmp_path):
    """--preproject tica:5 on the 852 dihedral features: the network sees 5 coordinates
    that are TICA's on the data (uncorrelated, unit variance, their symmetrised lagged
    correlations the TICA eigenvalues), saved with the model, kept by the seeded fit, and
    in the positions-in export, which equals the model's eigenfunctions."""
    import dpnets
    from dpnets.nn import ProjectedMLP

    out = tmp_path / "fit"
    args = ["fit", *ADK, "--topology", files.PSF, "--features", "dihedrals", "--lag", "2"]
    args += ["--preproject", "tica:5", "--reversible", "--epochs", "3", "--seed", "0"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert main([*args, "--quiet", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "pre-projected onto their 5 slowest TICA components" in report
    assert "852 input coordinates" not in report  # the network sees 5
    model = dpnets.load(out / "model.pt")
    enc = model.features_.encoder_
    assert isinstance(enc, ProjectedMLP) and tuple(enc.weight.shape) == (5, 852)
    x = _read(features="dihedrals").data
    z = [
        np.asarray(t, np.float64) @ enc.weight.double().numpy().T + enc.bias.double().numpy()
        for t in x
    ]
    both = np.concatenate([np.concatenate([t[:-2], t[2:]]) for t in z])
    np.testing.assert_allclose(both.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(both.T @ both / len(both), np.eye(5), atol=1e-3)
    ct = sum(t[:-2].T @ t[2:] for t in z) / sum(len(t) - 2 for t in z)
    lam = np.linalg.eigvalsh(0.5 * (ct + ct.T))[::-1]
    np.testing.assert_allclose(np.diag(0.5 * (ct + ct.T)), lam, atol=1e-3)  # diagonal
    assert np.all(np.diff(lam) <= 1e-9) and lam[0] > 0.9  # slowest first
    cv = tmp_path / "cv.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cmd = ["export", str(out), "--input", "positions", "--topology", files.PSF]
        assert main([*cmd, "--out", str(cv)]) == 0
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frames = md.load(files.DCD, top=files.PSF)[:5]
    got = torch.jit.load(str(cv))(torch.tensor(frames.xyz, dtype=torch.float64)).numpy()
    expect = np.real(model.eigenfunctions(x[0][:5]))[:, 1]
    np.testing.assert_allclose(got[:, 0], expect, atol=1e-3 * np.ptp(expect) + 1e-6)


@pytest.mark.parametrize(
    "kind", [["distances", "--cutoff", "0.8"], ["cartesian", "--selection", "name CA"]]
)
def test_new_files_get_the_fits_pairs_and_reference(tmp_path, kind):
    """Contacts were chosen (--cutoff) on the fit's data and Cartesians superposed on its
    first frame: transform of one file alone gives exactly what it gives with the fit's
    files (it chose other pairs on the file, 68 not 70: refused; and superposed on the
    file's own first frame: features off by 36 where they vary by 1, silently)."""
    out = tmp_path / "fit"
    sel = ["--selection", "name CA and resid 0 to 20"] if kind[0] == "distances" else []
    args = ["fit", *ADK, "--topology", files.PSF, "--features", *kind, *sel]
    args += ["--epochs", "2", "--quiet", "--out", str(out)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert main(args) == 0
        assert main(["transform", str(out), *ADK, "--out", str(tmp_path / "both.npz")]) == 0
        assert main(["transform", str(out), ADK[1], "--out", str(tmp_path / "one.npy")]) == 0
    with np.load(tmp_path / "both.npz") as both:
        np.testing.assert_array_equal(np.load(tmp_path / "one.npy"), both["traj_1"])


def test_a_fits_pair_the_new_selection_lacks_is_named(adk):
    from dpnets.md_features import distance_features

    spec = distance_features(adk.topology, adk.topology.select("name CA and resid 0 to 2"))
    fit = {"names": [spec.names[2], spec.names[0]]}
    np.testing.assert_array_equal(spec.like_fit(fit).atoms, spec.atoms[[2, 0]])
    with pytest.raises(ValueError, match=r"^the selection has no pair d\(X, Y\) of the fit's "):
        spec.like_fit({"names": ["d(X, Y)", spec.names[0]]})


def test_the_report_names_the_torsion_kinds_kept(tmp_path, capsys):
    """phi,chi1 of ALA8: chi1 left out with a warning naming the residue, and the report's
    inputs say phi (it said the kinds asked for, phi,chi1)."""
    out = tmp_path / "fit"
    args = ["fit", *ADK, "--topology", files.PSF, "--features", "dihedrals", "--dim", "1"]
    args += ["--selection", "resid 7", "--torsions", "phi,chi1", "--epochs", "1", "--quiet"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert main([*args, "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "Inputs: features `dihedrals` (phi), selection `resid 7`" in report


def test_distances_of_a_solvated_system_refused_or_warned():
    """bala.prmtop's 2661 atoms are 3.5 million pairs (adenylate kinase's solvated 12744
    heavy atoms, 81 million: gigabytes a frame): refused naming the remedy; a selection
    with waters warns (distances and superposed positions alike)."""
    from dpnets.md_features import cartesian, distance_features
    from dpnets.md_files import load_topology

    top = load_topology(files.PRMncdf)
    with pytest.raises(ValueError, match=r"^the selection has 2661 atoms, 3,539,130 pairs "):
        distance_features(top, np.arange(top.n_atoms))
    atoms = top.select("protein or (water and resid 3 to 10)")
    with pytest.warns(RuntimeWarning, match=r"holds 21 atoms of 7 water molecules among its 71"):
        assert distance_features(top, atoms).n_columns == 71 * 70 // 2
    with pytest.warns(RuntimeWarning, match=r"their positions are no slow coordinate"):
        cartesian(top, atoms, np.zeros((top.n_atoms, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        distance_features(top, top.select("protein"))


def test_labels_tell_apart_the_residues_a_topology_numbers_alike():
    """YiiP (a homodimer in a .gro: one chain, both monomers numbered from TYR7): every
    label once, qualified by mdtraj's residue index where the number repeats; chains with
    identifiers qualify by chain; a unique label stays as it is (POPG572, ALA2)."""
    from dpnets.md_features import residue_labels
    from dpnets.md_files import load_topology

    labels = residue_labels(load_topology(files.GRO_MEMPROT))
    assert len(set(labels)) == len(labels) == 848
    assert labels[0] == "TYR7(resid 0)" and labels[282] == "TYR7(resid 282)"
    assert labels[-1] == "POPG572"
    top = md.Topology()
    for chain_id in "AB":
        chain = top.add_chain(chain_id=chain_id)
        top.add_residue("ALA", chain, resSeq=1)
    top.add_residue("ALA", chain, resSeq=2)
    assert residue_labels(top) == ["ALA1:A", "ALA1:B", "ALA2"]
    t = read_trajectories(
        files.XTC_MEMPROT, topology=files.GRO_MEMPROT, features="dihedrals", selection="protein"
    )
    assert len(set(t.names)) == len(t.names) == 2252


def test_a_selection_split_across_the_box_is_warned_of():
    """adk_oplsaa.xtc holds the protein broken at the box's faces (GROMACS' default): its
    superposed C-alpha positions are those of pieces (RMSD 2.1 nm to the first frame, 0.2
    whole); bala.ncdf, boxed and whole, warns of nothing."""
    split = r"adk_oplsaa\.xtc: the selection is split across the periodic box in 10 of 10 "
    split += r"frames \(ARG124-CA and VAL125-CA"
    with pytest.warns(RuntimeWarning, match=split):
        read_trajectories(files.XTC, topology=files.GRO, features="cartesian", selection="name CA")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*time per frame is unknown")
        warnings.filterwarnings("ignore", category=UserWarning)  # netCDF4 not installed
        read_trajectories(
            files.NCDF, topology=files.PRMncdf, features="cartesian", selection="protein"
        )


def test_analyze_flags_files_saved_at_another_time_step(tmp_path):
    """dpnets analyze FIT new.xtc takes the fit's time per frame (1 ps); files saved every
    10 ps make its lag another lag time and its timescales 10 times too short: flagged in
    the report's Diagnostics (other_time_step), not for files saved as the fit's."""
    from dpnets.workflow import _other_time_step

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traj = md.load(files.DCD2, top=files.PSF)
    traj.time = 10.0 * np.arange(traj.n_frames)
    traj.save_xtc(str(tmp_path / "slow.xtc"))
    res = read_trajectories(tmp_path / "slow.xtc", topology=files.PSF, selection="name CA")
    (diag,) = _other_time_step(res, {"dt": 1.0, "time_unit": "ps", "stride": 1}, 1)
    assert diag.kind == "other_time_step" and diag.message(cli=True).endswith(
        "the timescales are 10 times too short; analyze files saved as often as the fit's, "
        "or refit on these"
    )
    assert _other_time_step(res, {"dt": 0.01, "time_unit": "ns", "stride": 1}, 1) == []
    assert _other_time_step(res, {"dt": 1.0, "time_unit": "time units"}, 1) == []


def test_a_reference_structure_of_any_format():
    """--reference as a .gro (mdtraj's load_frame raised NotImplementedError: "cannot read
    the reference structure: NotImplementedError") or a trajectory of the topology (its
    first frame; an Amber .ncdf too): the same superposition as the same positions given
    otherwise."""
    kw = {"features": "cartesian", "selection": "name CA"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the protein split across the box
        gro = read_trajectories(files.XTC, topology=files.GRO, reference=files.GRO, **kw)
        ref = md.load(files.GRO)
    # the .gro is the run's first frame: superposed on it, that frame is the .gro's C-alphas
    ca = ref.topology.select("name CA")
    np.testing.assert_allclose(gro.data[0][0], ref.xyz[0, ca].ravel(), atol=2e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kw["selection"] = "protein"
        first = read_trajectories(files.NCDF, topology=files.PRMncdf, **kw)
        ncdf = read_trajectories(files.NCDF, topology=files.PRMncdf, reference=files.NCDF, **kw)
    np.testing.assert_array_equal(first.data[0], ncdf.data[0])
