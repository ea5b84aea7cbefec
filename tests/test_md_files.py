"""Real MD files read as MDAnalysis reads them (issue 26): the MDAnalysisTests files.

For each trajectory format (DCD, XTC, TRR, Amber NetCDF, Amber ASCII ``.mdcrd``) and
topology the library reads through mdtraj or, where mdtraj cannot (GROMACS ``.tpr`` and
``.top``), through MDAnalysis, :func:`dpnets.datasets.read_trajectories` must give
MDAnalysis' frame count, its positions (Å there, nm here) and its time step in ps.
Skipped when MDAnalysis or its test files are not installed.
"""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

pytest.importorskip("mdtraj")
mda = pytest.importorskip("MDAnalysis")
files = pytest.importorskip("MDAnalysisTests.datafiles")

from dpnets.datasets import read_trajectories, select_atoms  # noqa: E402
from dpnets.md_files import load_topology  # noqa: E402


def _reference(top: str, traj: str, **kw) -> tuple[np.ndarray, float | None, int]:
    """MDAnalysis' positions (Å, every frame), time step (ps; None when its frames carry no
    time, or when it says it made one up: "no dt information, set to 1.0 ps") and number
    of frames."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        u = mda.Universe(top, traj, **kw)
        xyz = np.stack([ts.positions.copy() for ts in u.trajectory])
        times = np.array([ts.time for ts in u.trajectory])
    dt = float(times[1] - times[0]) if len(times) > 1 and times[1] > times[0] else None
    if any("no dt information" in str(w.message) for w in caught):
        dt = None
    return xyz, dt, len(xyz)


def _ours(traj, top, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the DCD's announced 500 frames (tested below)
        return read_trajectories(traj, topology=top, selection="all", **kw)


CASES = {
    "dcd": ("PSF", "DCD"),
    "xtc": ("GRO", "XTC"),
    "trr": ("GRO", "TRR"),
    "netcdf": ("PRM_NCBOX", "TRJ_NCBOX"),
    "ncdf": ("PRMncdf", "NCDF"),
    "mdcrd": ("PRM", "TRJ"),
    "tpr+xtc": ("TPR", "XTC"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_frames_positions_and_time_step_match_mdanalysis(case):
    top, traj = (getattr(files, name) for name in CASES[case])
    ref, ref_dt, n = _reference(top, traj)
    res = _ours(traj, top)
    assert res.n_frames == [n]
    assert res.data[0].shape == ref.shape
    # nm here, Å in MDAnalysis; float32 positions
    np.testing.assert_allclose(res.data[0] * 10.0, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
    if ref_dt is None:
        assert res.dt is None
    else:
        assert res.dt == pytest.approx(ref_dt, rel=1e-6)
    assert res.time_unit == "ps"


def test_dcd_time_step_is_read_from_its_header():
    """adk_dims.dcd: DELTA * NSAVC = 1 ps, as MDAnalysis reads it (not 'frames'); exactly 1,
    not the 0.99999991 of DELTA's float32 times the 7-digit AKMA unit (as an XTC's step is
    rounded to what its float32 times can tell apart)."""
    res = _ours(files.DCD, files.PSF)
    assert res.dt == 1.0
    assert _ours(files.DCD, files.PSF, stride=3).dt == 3.0
    assert _ours(files.DCD2, files.PSF).dt == 1.0  # NSAVC 1, DELTA 20.4548 AKMA


def test_dcd_with_fewer_frames_than_its_header_reads_them_with_a_warning():
    """adk_dims.dcd announces 500 frames and holds 98: both readers read the 98."""
    with pytest.warns(RuntimeWarning, match=r"adk_dims\.dcd: the DCD header announces 500"):
        res = read_trajectories(files.DCD, topology=files.PSF, selection="name CA")
    assert res.n_frames == [98]


def test_ncdf_is_amber_netcdf(tmp_path):
    """The same file reads the same under .ncdf and .nc."""
    copy = tmp_path / "bala.nc"
    shutil.copy(files.NCDF, copy)
    a, b = _ours(files.NCDF, files.PRMncdf), _ours(copy, files.PRMncdf)
    np.testing.assert_array_equal(a.data[0], b.data[0])


def test_tpr_topology_gives_elements_and_dihedrals():
    """A GROMACS .tpr (which mdtraj cannot read) through MDAnalysis: atomic numbers and
    backbone dihedrals as for an mdtraj topology of the same atoms (the .gro)."""
    via_tpr = read_trajectories(files.XTC, topology=files.TPR, selection="name CA")
    via_gro = read_trajectories(files.XTC, topology=files.GRO, selection="name CA")
    np.testing.assert_array_equal(via_tpr.atomic_numbers, via_gro.atomic_numbers)
    assert set(via_tpr.atomic_numbers.tolist()) == {6}
    np.testing.assert_allclose(via_tpr.data[0], via_gro.data[0], atol=1e-6)
    d_tpr = read_trajectories(files.XTC, topology=files.TPR, features="dihedrals")
    d_gro = read_trajectories(files.XTC, topology=files.GRO, features="dihedrals")
    assert d_tpr.data[0].shape == d_gro.data[0].shape and d_tpr.data[0].shape[1] > 100
    np.testing.assert_allclose(d_tpr.data[0], d_gro.data[0], atol=1e-4)
    # the export reads the .tpr too (mdtraj refused it: "the detected .tpr format is not
    # supported"), through the same load_topology
    from dpnets.engines import _load_topology

    _, top, _ = _load_topology(files.TPR, "the fit's topology file")
    assert top.n_atoms == 47681 and [str(r) for r in top.residues][:2] == ["MET1", "ARG2"]


def test_gromacs_top_topology(tmp_path, monkeypatch):
    """A GROMACS .top (with #include files found through $GMXLIB) and a trajectory of its
    atoms: the positions MDAnalysis writes come back in nm, the masses' elements right."""
    monkeypatch.setenv("GMXLIB", files.GMX_DIR)
    from MDAnalysis.coordinates.memory import MemoryReader

    path = tmp_path / "run.trr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        top = mda.Universe(files.GMX_TOP, topology_format="ITP", include_dir=files.GMX_DIR)
        n_atoms = top.atoms.n_atoms
        xyz = np.random.default_rng(0).uniform(0, 30, size=(4, n_atoms, 3)).astype(np.float32)
        u = mda.Universe(
            files.GMX_TOP,
            xyz,
            topology_format="ITP",
            include_dir=files.GMX_DIR,
            format=MemoryReader,
            dt=2.0,
        )
        with mda.Writer(str(path), n_atoms=n_atoms) as w:
            for _ in u.trajectory:
                w.write(u.atoms)
    res = read_trajectories(path, topology=files.GMX_TOP, selection="all")
    assert res.n_frames == [4] and res.dt == pytest.approx(2.0)
    np.testing.assert_allclose(res.data[0] * 10.0, xyz, atol=1e-4)
    heavy = read_trajectories(path, topology=files.GMX_TOP)  # selection "heavy": elements
    assert 0 < heavy.data[0].shape[1] < n_atoms


def test_amber_residues_are_numbered_from_one_as_amber_and_mdanalysis_number_them(tmp_path):
    """A .prmtop stores no residue numbers and mdtraj numbers its residues from 0 (VAL0 GLU1
    VAL2); the labels use Amber's, VMD's and MDAnalysis' numbers (VAL1 GLU2 VAL3), and the
    fit's atoms match a PDB of the same system (MDAnalysis writes resSeq 1, 2, 3)."""
    from dpnets.engines import match_atoms

    res = read_trajectories(files.NCDF, topology=files.PRMncdf, features="dihedrals")
    assert res.names == [
        "sin φ GLU2", "sin φ VAL3", "cos φ GLU2", "cos φ VAL3",
        "sin ψ VAL1", "sin ψ GLU2", "cos ψ VAL1", "cos ψ GLU2",
    ]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(files.PRMncdf, files.NCDF)
        u.atoms.write(str(tmp_path / "bala.pdb"))
    quads = res.md_features.atoms
    # the residue of a torsion (its second atom), as MDAnalysis numbers it
    assert [f"{u.atoms[q[1]].resname}{u.atoms[q[1]].resid}" for q in quads] == [
        "GLU2", "VAL3", "VAL1", "GLU2",
    ]  # fmt: skip
    import mdtraj as md

    pdb = md.load_topology(str(tmp_path / "bala.pdb"))
    top = load_topology(files.PRMncdf)
    np.testing.assert_array_equal(match_atoms(top, pdb, quads.ravel()), quads.ravel())


@pytest.mark.parametrize(
    ("top", "traj", "n_file", "n_top", "fix"),
    [
        ("PDB_sub_dry", "XTC_sub_sol", 19385, 937, "solvent and ions included"),
        ("GRO", "DCD", 3341, 47681, "a dry or stripped one"),
    ],
)
def test_a_trajectory_of_another_atom_count_is_refused_naming_both(top, traj, n_file, n_top, fix):
    """A dry topology with the solvated run's trajectory (and the reverse): one line with
    both atom counts and the remedy, not mdtraj's and MDAnalysis' messages."""
    from dpnets.datasets import DataFileError

    with pytest.raises(DataFileError) as err:
        read_trajectories(getattr(files, traj), topology=getattr(files, top))
    msg = str(err.value)
    assert f"holds {n_file} atoms a frame, but the topology" in msg
    assert f"has {n_top}: " in msg and fix in msg


def test_truncated_or_corrupted_xtc_gives_its_whole_frames(tmp_path):
    """An XTC cut inside its 4th frame gives its 3 whole frames (MDAnalysis' positions),
    with a warning; one corrupted inside its 2nd frame gives 1 (MDAnalysis' XTC reader
    dies of a floating point exception on it, with the .gro or the .tpr), also when
    MDAnalysis reads the topology (.tpr)."""
    raw = open(files.XTC, "rb").read()
    cut, bad = tmp_path / "cut.xtc", tmp_path / "bad.xtc"
    cut.write_bytes(raw[:600_000])
    corrupted = bytearray(raw)
    corrupted[300_000:300_100] = b"x" * 100
    bad.write_bytes(bytes(corrupted))
    ref, _, _ = _reference(files.GRO, files.XTC)
    with pytest.warns(RuntimeWarning, match=r"cut\.xtc: frame 4 cannot be read .*the 3 whole"):
        res = read_trajectories(cut, topology=files.GRO, selection="all")
    assert res.n_frames == [3] and res.dt == pytest.approx(100.0, rel=1e-6)
    np.testing.assert_allclose(res.data[0] * 10.0, ref[:3], atol=1e-4 * np.abs(ref).max())
    for top in (files.GRO, files.TPR):
        with pytest.warns(RuntimeWarning, match=r"bad\.xtc: frame 2 cannot be read"):
            res = read_trajectories(bad, topology=top, selection="all")
        assert res.n_frames == [1]
        np.testing.assert_allclose(res.data[0] * 10.0, ref[:1], atol=1e-4 * np.abs(ref).max())


def test_a_time_per_frame_that_cannot_be_known_is_warned_of(tmp_path):
    """bala.ncdf stores time 0 in every frame, a joined XTC restarts its times, an
    mdtraj-written DCD has DELTA 1: each warns that its time per frame is unknown (the
    timescales then in frames), and so does a mix with a timed file; --dt silences it."""
    import mdtraj as md

    from dpnets.cli import main

    with pytest.warns(RuntimeWarning, match=r"bala\.ncdf: every frame has the time 0 ps"):
        assert read_trajectories(files.NCDF, topology=files.PRMncdf).dt is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traj = md.load(files.XTC, top=files.GRO, atom_indices=np.arange(30))
    traj.time = np.r_[np.arange(5), np.arange(5)] * 100.0
    traj.save_xtc(str(tmp_path / "joined.xtc"))
    traj[:3].save_dcd(str(tmp_path / "plain.dcd"))
    traj[:4].save_pdb(str(tmp_path / "top.pdb"))
    traj.time = np.arange(10) * 100.0
    traj.save_xtc(str(tmp_path / "good.xtc"))
    top = tmp_path / "top.pdb"
    with pytest.warns(RuntimeWarning) as caught:
        res = read_trajectories([tmp_path / "good.xtc", tmp_path / "joined.xtc"], topology=top)
    assert res.dt is None
    messages = [str(w.message) for w in caught]
    assert any("joined.xtc: its frame times are not evenly spaced (steps from -400 to 100" in m
               for m in messages)  # fmt: skip
    assert any("joined.xtc has no time per frame, while " in m and "good.xtc's is 100 ps" in m
               for m in messages)  # fmt: skip
    # 0.2 ps frames 1 us into a run: XTC's float32 times step by 0.1875 or 0.25; evenly
    # spaced within float32's spacing (0.0625 there): 0.2 (the mean, 0.2014, cannot be told
    # from it by the stored times), no warning
    traj.time = 1e6 + 0.2 * np.arange(10)
    traj.save_xtc(str(tmp_path / "late.xtc"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        late = read_trajectories(tmp_path / "late.xtc", topology=top).dt
    assert late == 0.2
    with pytest.warns(RuntimeWarning, match=r"plain\.dcd: its DCD header stores no time step"):
        assert read_trajectories(tmp_path / "plain.dcd", topology=top).dt is None
    args = [str(files.NCDF), "--topology", str(files.PRMncdf), "--features", "dihedrals"]
    args += ["--epochs", "1", "--dim", "1", "--quiet", "--dt", "2"]  # in the files' ps
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["fit", *args, "--out", str(tmp_path / "fit")]) == 0
    assert not [w for w in caught if "time per frame" in str(w.message)]
    assert "lag 1 frames = 2 ps" in (tmp_path / "fit" / "report.md").read_text()
    # a fit in frames warns; transform, which uses no time, does not
    args = args[: args.index("--dt")]
    with pytest.warns(RuntimeWarning, match=r"bala\.ncdf: every frame has the time 0 ps"):
        assert main(["fit", *args, "--out", str(tmp_path / "frames")]) == 0
    feats = str(tmp_path / "f.npy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["transform", str(tmp_path / "frames"), str(files.NCDF), "--out", feats]) == 0
    assert not [w for w in caught if "time per frame" in str(w.message)]


def test_an_empty_selection_lists_the_names_mdtraj_gave_the_topology():
    """CHARMM's water is TIP3 with OH2 in the .psf; mdtraj renames them HOH and O, so
    'name OH2' matches nothing: the error lists the names to use. A name with a '+' is
    quoted in mdtraj's syntax."""
    from dpnets.datasets import DataFileError

    names = r"'name OH2' matches no atom; the topology, as mdtraj reads and renames it, "
    names += r"has residues HOH and atoms O, H1, H2$"
    with pytest.raises(DataFileError, match=names):
        read_trajectories(files.DCD_TRICLINIC, topology=files.PSF_TRICLINIC, selection="name OH2")
    with pytest.raises(DataFileError, match=r"quote names with symbols: resname 'Na\+'$"):
        select_atoms(load_topology(files.PRMncdf), "resname Na+")
    assert len(select_atoms(load_topology(files.PRMncdf), "resname 'Na+'")) == 1


def test_charmm_triclinic_dcd_box_gives_minimum_image_distances():
    """tip125_tric_C36.dcd stores CHARMM's box matrix, which mdtraj's reader took for
    lengths and angle cosines (3.08 nm, angles -2.6/9.6/14.6 degrees: every water-water
    distance 1.8e19 nm). The box as MDAnalysis reads it, and the distances the true
    minimum image in it (brute force over neighbouring images), also with a stride."""
    import itertools

    from MDAnalysis.lib.mdamath import triclinic_vectors

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(files.PSF_TRICLINIC, files.DCD_TRICLINIC)
        boxes = [triclinic_vectors(ts.dimensions) / 10.0 for ts in u.trajectory]
        xyz = np.stack([ts.positions / 10.0 for ts in u.trajectory])
    oxygens = u.select_atoms("name OH2").indices
    res = read_trajectories(
        files.DCD_TRICLINIC,
        topology=files.PSF_TRICLINIC,
        features="distances",
        selection="name O",  # mdtraj's name of CHARMM's OH2
        stride=3,
    )
    pairs = res.md_features.atoms
    assert set(pairs.ravel()) == set(oxygens)
    images = np.array(list(itertools.product(range(-2, 3), repeat=3)), dtype=np.float64)
    for row, frame in enumerate(range(0, 10, 3)):
        diff = xyz[frame][pairs[:, 1]] - xyz[frame][pairs[:, 0]]
        shifts = images @ boxes[frame]
        brute = np.linalg.norm(diff[:, None, :] + shifts[None], axis=2).min(axis=1)
        np.testing.assert_allclose(res.data[0][row], brute, atol=1e-5)


def test_files_with_other_time_steps_are_refused_and_float32_steps_agree(tmp_path):
    """Two chunks of one run 1 us in (0.2 ps frames, float32 times: mean steps 0.20004 and
    0.19983) share the time per frame 0.2; a file at 2 ps with one at 1 ps is refused."""
    import mdtraj as md

    from dpnets.datasets import DataFileError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traj = md.load(files.XTC, top=files.GRO, atom_indices=np.arange(30))
    traj = md.join([traj] * 30)  # 300 frames
    traj[:1].save_pdb(str(tmp_path / "top.pdb"))
    for i, (start, step) in enumerate([(1e6, 0.2), (1e6 + 10.1, 0.2), (0.0, 2.0), (0.0, 1.0)]):
        traj.time = start + step * np.arange(traj.n_frames)
        traj.save_xtc(str(tmp_path / f"run{i}.xtc"))
    top = tmp_path / "top.pdb"
    res = read_trajectories([tmp_path / "run0.xtc", tmp_path / "run1.xtc"], topology=top)
    assert res.dt == 0.2
    with pytest.raises(DataFileError, match=r"run3\.xtc: time per frame 1 differs from .*run2"):
        read_trajectories([tmp_path / "run2.xtc", tmp_path / "run3.xtc"], topology=top)


def test_a_netcdf_no_reader_can_read_says_what_it_may_be(tmp_path):
    """A truncated Amber NetCDF fails in mdtraj and in MDAnalysis with numpy's words ("When
    changing to a larger dtype ..."): the line ends by saying what the file may be."""
    from dpnets.datasets import DataFileError

    cut = tmp_path / "cut.ncdf"
    cut.write_bytes(open(files.NCDF, "rb").read()[:400_000])
    with pytest.raises(DataFileError, match=r"a truncated or corrupted file, or not a \.ncdf "):
        read_trajectories(cut, topology=files.PRMncdf)
