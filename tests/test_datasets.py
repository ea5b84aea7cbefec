"""Reading trajectories from files (:mod:`dpnets.datasets`): real files written into tmp_path."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

from dpnets.datasets import DataFileError, Trajectories, read_trajectories

try:
    import h5py
except ImportError:  # pragma: no cover
    h5py = None
try:
    import mdtraj as md
except ImportError:  # pragma: no cover
    md = None

needs_h5py = pytest.mark.skipif(h5py is None, reason="h5py not installed")
needs_mdtraj = pytest.mark.skipif(
    md is None or h5py is None, reason="mdtraj and h5py not installed"
)


@pytest.fixture
def states():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((200, 2)) for _ in range(3)]


def _assert_same(result: Trajectories, expected: list[np.ndarray]) -> None:
    assert len(result.data) == len(expected)
    for got, want in zip(result.data, expected, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def _error(match_file: str, *args, **kwargs) -> str:
    """The message of the DataFileError raised by read_trajectories: one line naming the file."""
    with pytest.raises(DataFileError) as info:
        read_trajectories(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg
    assert match_file in msg
    return msg


# --------------------------------------------------------------------------------------------
# Array and table formats


def test_npy_glob_memory_mapped(tmp_path, states):
    for i, x in enumerate(states):
        np.save(tmp_path / f"run{i}.npy", x.astype(np.float32))
    res = read_trajectories(str(tmp_path / "run*.npy"))
    _assert_same(res, [x.astype(np.float32) for x in states])
    assert isinstance(res.data[0], np.memmap)
    assert res.dt is None and res.time_unit is None and res.atomic_numbers is None
    assert [os.path.basename(s) for s in res.sources] == ["run0.npy", "run1.npy", "run2.npy"]
    res = read_trajectories([tmp_path / "run0.npy"], mmap=False, stride=3)
    assert not isinstance(res.data[0], np.memmap)
    np.testing.assert_array_equal(res.data[0], states[0].astype(np.float32)[::3])


def test_npy_one_dimensional_becomes_column(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(10.0))
    res = read_trajectories(tmp_path / "x.npy")
    assert res.data[0].shape == (10, 1)


def test_npz_every_key_sorted_or_chosen(tmp_path, states):
    np.savez(tmp_path / "runs.npz", c=states[2], a=states[0], b=states[1])
    _assert_same(read_trajectories(tmp_path / "runs.npz"), states)
    res = read_trajectories(tmp_path / "runs.npz", keys=["b", "a"])
    _assert_same(res, [states[1], states[0]])
    assert res.sources[0].endswith("runs.npz[b]")


def test_csv_with_header_columns_by_name_and_index(tmp_path, states):
    for i, x in enumerate(states):
        table = np.column_stack([x, np.arange(len(x))])
        np.savetxt(
            tmp_path / f"run{i}.csv",
            table,
            delimiter=",",
            header="x,y,step",
            comments="",
            fmt="%.17g",
        )
    res = read_trajectories(str(tmp_path / "run*.csv"), columns=["y", "x"])
    _assert_same(res, [x[:, ::-1] for x in states])
    res = read_trajectories(str(tmp_path / "run*.csv"), columns=[0, "y"])
    _assert_same(res, states)
    with pytest.warns(UserWarning, match=r"column 'step' rises by 1 every row: .* --columns x y"):
        assert read_trajectories(tmp_path / "run0.csv").data[0].shape == (200, 3)


def test_csv_column_indices_given_as_text(tmp_path, states):
    """``--columns 0 2`` reaches the reader as text: an index, with or without a header."""
    np.savetxt(tmp_path / "plain.csv", states[0], delimiter=",", fmt="%.17g")
    res = read_trajectories(tmp_path / "plain.csv", columns=["1", "-2"])
    np.testing.assert_array_equal(res.data[0], states[0][:, ::-1])
    (tmp_path / "named.csv").write_text("a,b\n10,20\n30,40\n")
    np.testing.assert_array_equal(
        read_trajectories(tmp_path / "named.csv", columns=["1", "a"]).data[0],
        [[20.0, 10.0], [40.0, 30.0]],
    )
    assert "column index 5 out of range (2 columns)" in _error(
        "plain.csv", tmp_path / "plain.csv", columns=["5"]
    )


def test_csv_of_a_dated_series_with_gaps(tmp_path):
    """A series as pandas writes it (a date column, empty cells for missing values): one
    line naming the line, the column and what to do, never a raw parser error; a year
    column read as data warns, naming the columns to keep."""
    path = tmp_path / "co2.csv"
    path.write_text("date,co2\n1958-03-29,316.1\n1958-04-05,317.3\n")
    assert _error("co2.csv", path) == (
        f"{path}: line 2: non-numeric value '1958-03-29' in column 'date' (a date, time or "
        "label is not a coordinate of the state); read the numeric columns only: --columns "
        "co2 (columns=['co2'] in Python); the time between rows is --dt (dt=)"
    )
    path.write_text("date,co2\n1958-03-29,316.1\n1958-04-05,\n1958-04-12,317.6\n")
    msg = _error("co2.csv", path, columns=["co2"])
    assert msg.startswith(f"{path}: line 3: missing value '' in column 'co2': the frames")
    assert "fill or interpolate the gaps" in msg
    for cell in ("NA", "nan"):
        path.write_text(f"t,x\n0,1.5\n1,{cell}\n")
        assert f"line 3: missing value '{cell}' in column 'x'" in _error("co2.csv", path)
    path = tmp_path / "sun.csv"
    path.write_text("YEAR,SUNACTIVITY\n1700.0,5.0\n1701.0,11.0\n1702.0,16.0\n")
    with pytest.warns(UserWarning, match=r"column 'YEAR' rises by 1 every row") as caught:
        np.testing.assert_array_equal(read_trajectories(path).data[0][:, 1], [5, 11, 16])
    assert "--columns SUNACTIVITY (columns=['SUNACTIVITY'] in Python)" in str(caught[0].message)
    path.write_text('"x","y"\n"1","2"\n"3","5"\n')  # quoted numbers, as spreadsheets write
    np.testing.assert_array_equal(read_trajectories(path).data[0], [[1, 2], [3, 5]])
    path.write_text("x,y,\n1,2,\n3,5,\n")  # a trailing delimiter on every line
    np.testing.assert_array_equal(read_trajectories(path).data[0], [[1, 2], [3, 5]])
    path.write_text("x;y\n1.5;2\n3.25;4\n")  # a spreadsheet's semicolons
    np.testing.assert_array_equal(read_trajectories(path).data[0], [[1.5, 2], [3.25, 4]])
    path.write_text("x;y\n1,5;2\n3,25;4\n")
    assert _error("sun.csv", path).endswith(
        "line 2: '1,5' in column 'x' has a decimal comma: write numbers with a decimal point "
        "(1.5, not 1,5)"
    )
    path.write_text("region,1990,1991\n1.0,2.0,3.0\n")  # a header with numeric names
    assert _error("sun.csv", path).endswith(
        "line 1 mixes text ('region') and numbers: a header line must name every column with "
        "text (rename numeric names such as 1990 to y1990), or remove it"
    )
    path.write_text("1958-03-29,316.1\n1958-04-05,317.3\n")  # dates, no header
    assert "line 1: non-numeric value '1958-03-29' in column 0 (a date" in _error("sun", path)
    path.write_text("time,x\n0,0.3\n1,0.1\n3,0.4\n4,0.2\n")  # irregular sampling
    with pytest.warns(UserWarning, match=r"column 'time' is named as one and rises unevenly"):
        read_trajectories(path)


def test_txt_without_header(tmp_path, states):
    for i, x in enumerate(states):
        np.savetxt(tmp_path / f"run{i}.txt", x, fmt="%.17g")
    _assert_same(read_trajectories(str(tmp_path / "*.txt")), states)
    res = read_trajectories(tmp_path / "run1.txt", columns=[1])
    np.testing.assert_array_equal(res.data[0], states[1][:, 1:])


@needs_h5py
def test_hdf5_datasets_sorted_including_groups(tmp_path, states):
    path = tmp_path / "runs.h5"
    with h5py.File(path, "w") as f:
        f["/runs/a"] = states[0].astype(np.float32)
        f["b"] = states[1]
        f["c"] = states[2]
        f["scalar"] = 3.0  # 0-d: not a trajectory
    res = read_trajectories(path)
    # sorted by path: /b, /c, /runs/a
    _assert_same(res, [states[1], states[2], states[0].astype(np.float32)])
    assert res.sources[2].endswith("runs.h5[/runs/a]")
    res = read_trajectories(path, keys=["runs/a", "/c"], stride=2)
    _assert_same(res, [states[0].astype(np.float32)[::2], states[2][::2]])
    assert type(res.data[0]) is np.ndarray  # read into memory, not an h5py dataset


# --------------------------------------------------------------------------------------------
# Molecular dynamics

N_FRAMES = 50
HEAVY_Z = [6, 6, 8, 7, 6, 6, 6, 8, 7, 6]  # alanine dipeptide heavy atoms in PDB order


@pytest.fixture(scope="module")
def alanine(tmp_path_factory):
    from dpnets.systems.alanine import pdb_path

    pdb = pdb_path()
    ref = md.load(str(pdb))
    rng = np.random.default_rng(1)
    noise = 0.01 * rng.standard_normal((N_FRAMES, ref.n_atoms, 3))
    xyz = (ref.xyz[0][None] + noise).astype(np.float32)
    traj = md.Trajectory(xyz, ref.topology, time=np.arange(N_FRAMES) * 5.0)
    folder = tmp_path_factory.mktemp("md")
    traj.save_xtc(str(folder / "run.xtc"))
    traj.save_dcd(str(folder / "run.dcd"))
    _save_mdtraj_hdf5(traj, folder / "run.h5")
    return pdb, traj, folder


def _save_mdtraj_hdf5(traj, path) -> None:
    """An mdtraj HDF5 trajectory; mdtraj's own writer needs PyTables, so write its layout."""
    from mdtraj.formats import HDF5TrajectoryFile

    topo = HDF5TrajectoryFile.convert_topology_to_dict(traj.topology)
    with h5py.File(path, "w") as f:
        f.attrs["conventions"] = "Pande"
        f.create_dataset("coordinates", data=traj.xyz).attrs["units"] = "nanometers"
        f.create_dataset("time", data=traj.time.astype(np.float32)).attrs["units"] = "picoseconds"
        f.create_dataset("topology", data=np.array([json.dumps(topo).encode("ascii")]))


@needs_mdtraj
def test_xtc_positions_of_heavy_atoms(alanine):
    pdb, traj, folder = alanine
    res = read_trajectories(folder / "run.xtc", topology=pdb, features="positions")
    (x,) = res.data
    assert x.shape == (N_FRAMES, 10, 3) and x.dtype == np.float32
    heavy = [a.index for a in traj.topology.atoms if a.element.symbol != "H"]
    np.testing.assert_allclose(x, traj.xyz[:, heavy], atol=1e-3)  # xtc precision 1e-3 nm
    np.testing.assert_array_equal(res.atomic_numbers, HEAVY_Z)
    assert res.dt == 5.0 and res.time_unit == "ps"
    # "raw" is "positions" for MD; stride multiplies dt
    res = read_trajectories(folder / "run.xtc", topology=pdb, stride=5)
    assert res.data[0].shape == (10, 10, 3) and res.dt == 25.0
    res = read_trajectories(folder / "run.xtc", topology=pdb, selection="all")
    assert res.data[0].shape == (N_FRAMES, 22, 3) and len(res.atomic_numbers) == 22


@needs_mdtraj
def test_dcd_has_no_timestep(alanine):
    pdb, traj, folder = alanine
    res = read_trajectories(folder / "run.dcd", topology=pdb)
    assert res.data[0].shape == (N_FRAMES, 10, 3)
    np.testing.assert_array_equal(res.atomic_numbers, HEAVY_Z)
    # mdtraj reads DCD frame times as 0, 1, 2, ... (not the simulation time): dt unknown
    assert res.dt is None and res.time_unit == "ps"


@needs_mdtraj
def test_mdtraj_hdf5_needs_no_topology(alanine):
    pdb, traj, folder = alanine
    res = read_trajectories(folder / "run.h5")
    heavy = [a.index for a in traj.topology.atoms if a.element.symbol != "H"]
    np.testing.assert_array_equal(res.data[0], traj.xyz[:, heavy])
    np.testing.assert_array_equal(res.atomic_numbers, HEAVY_Z)
    assert res.dt == 5.0
    res = read_trajectories(folder / "run.h5", features="dihedrals")
    assert res.data[0].shape == (N_FRAMES, 4)


@needs_mdtraj
def test_dihedrals_are_sin_cos_of_mdtraj_angles(alanine):
    pdb, traj, folder = alanine
    res = read_trajectories(folder / "run.dcd", topology=pdb, features="dihedrals")
    (x,) = res.data
    assert x.shape == (N_FRAMES, 4) and res.atomic_numbers is None
    phi = md.compute_phi(traj)[1][:, 0]
    psi = md.compute_psi(traj)[1][:, 0]
    expected = np.column_stack([np.sin(phi), np.cos(phi), np.sin(psi), np.cos(psi)])
    np.testing.assert_allclose(x, expected, atol=1e-5)


@needs_mdtraj
def test_distances_of_heavy_atoms(alanine):
    pdb, traj, folder = alanine
    res = read_trajectories(folder / "run.dcd", topology=pdb, features="distances")
    (x,) = res.data
    assert x.shape == (N_FRAMES, 45) and res.atomic_numbers is None
    heavy = [a.index for a in traj.topology.atoms if a.element.symbol != "H"]
    d01 = np.linalg.norm(traj.xyz[:, heavy[0]] - traj.xyz[:, heavy[1]], axis=1)
    np.testing.assert_allclose(x[:, 0], d01, atol=1e-5)


@pytest.mark.skipif(
    importlib.util.find_spec("tables") is None,
    reason="mdtraj writes HDF5 with PyTables",
)
@needs_mdtraj
def test_hdf5_written_by_mdtraj(alanine, tmp_path):
    _, traj, _ = alanine
    traj.save_hdf5(str(tmp_path / "md.h5"))
    res = read_trajectories(tmp_path / "md.h5", selection="all")
    np.testing.assert_array_equal(res.data[0], traj.xyz)
    assert res.dt == 5.0


@needs_mdtraj
def test_several_md_files_are_several_trajectories(alanine):
    pdb, _, folder = alanine
    res = read_trajectories([folder / "run.xtc", folder / "run.dcd"], topology=pdb)
    assert len(res.data) == 2
    assert res.dt is None  # the DCD does not know it


# --------------------------------------------------------------------------------------------
# Errors: DataFileError, one line, naming the file


@needs_mdtraj
def test_no_backbone_dihedrals(alanine, tmp_path):
    _, traj, _ = alanine
    cap = traj.atom_slice(range(6))  # the acetyl cap alone: no phi, no psi
    cap[0].save_pdb(str(tmp_path / "cap.pdb"))
    cap.save_dcd(str(tmp_path / "cap.dcd"))
    msg = _error(
        "cap.dcd", tmp_path / "cap.dcd", topology=tmp_path / "cap.pdb", features="dihedrals"
    )
    assert "dihedrals" in msg


def test_missing_file(tmp_path):
    _error("nothere.npy", tmp_path / "nothere.npy")


def test_empty_glob(tmp_path):
    msg = _error("*.npy", str(tmp_path / "*.npy"))
    assert "no file matches" in msg


def test_unknown_extension(tmp_path):
    (tmp_path / "data.parquet").write_bytes(b"PAR1")
    msg = _error("data.parquet", tmp_path / "data.parquet")
    assert "unknown file type" in msg


@needs_mdtraj
def test_xtc_without_topology(alanine):
    _, _, folder = alanine
    msg = _error("run.xtc", folder / "run.xtc")
    assert "topology" in msg


def test_csv_with_non_numeric_cell_names_the_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("x,y\n1.0,2.0\n3.0,oops\n5.0,6.0\n")
    msg = _error("bad.csv", path)
    assert "line 3" in msg and "oops" in msg


def test_truncated_npy(tmp_path):
    path = tmp_path / "cut.npy"
    np.save(path, np.zeros((100, 3)))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    for mmap in (True, False):
        assert "cannot read" in _error("cut.npy", path, mmap=mmap)


@needs_mdtraj
def test_truncated_xtc(alanine, tmp_path):
    """A cut inside a frame: the whole frames before the cut, read by mdtraj frame by
    frame, with a warning naming the file and the frame (issue 26; MDAnalysis not needed)."""
    pdb, traj, folder = alanine
    data = (folder / "run.xtc").read_bytes()
    path = tmp_path / "cut.xtc"
    # cut inside a frame's coordinates (a cut exactly between frames is a valid shorter file)
    path.write_bytes(data[: len(data) // 2 + 40])
    with pytest.warns(RuntimeWarning, match=r"cut\.xtc: frame \d+ cannot be read"):
        res = read_trajectories(path, topology=pdb, selection="all")
    n = res.n_frames[0]
    assert 0 < n < N_FRAMES
    np.testing.assert_allclose(res.data[0], traj.xyz[:n], atol=2e-3)  # xtc precision


@needs_mdtraj
def test_truncated_dcd(alanine, tmp_path):
    """A DCD holding fewer frames than its header announces gives the frames it holds,
    with a warning (as mdtraj and MDAnalysis read it; issue 26)."""
    pdb, traj, folder = alanine
    data = (folder / "run.dcd").read_bytes()
    path = tmp_path / "cut.dcd"
    path.write_bytes(data[: len(data) // 2])
    with pytest.warns(RuntimeWarning, match="cut.dcd: the DCD header announces 50 frames"):
        res = read_trajectories(path, topology=pdb, selection="all")
    n = res.n_frames[0]
    assert 0 < n < N_FRAMES
    np.testing.assert_allclose(res.data[0], traj.xyz[:n], atol=1e-5)


@needs_h5py
def test_truncated_hdf5(tmp_path, states):
    path = tmp_path / "cut.h5"
    with h5py.File(path, "w") as f:
        f["a"] = states[0]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert "cannot read" in _error("cut.h5", path)


def test_mismatched_state_shapes(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((10, 2)))
    np.save(tmp_path / "b.npy", np.zeros((10, 3)))
    msg = _error("b.npy", str(tmp_path / "*.npy"))
    assert "a.npy" in msg and "(3,)" in msg and "(2,)" in msg


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf(tmp_path, bad):
    x = np.zeros((20, 2))
    x[7, 1] = bad
    np.save(tmp_path / "nan.npy", x)
    remedy = (
        "missing values: a trajectory must be complete and evenly sampled; fill or interpolate "
        "the gaps (pandas' .interpolate()), or pass the pieces between them as separate files"
        if np.isnan(bad)
        else "an infinite value (an overflow upstream?)"
    )
    msg = _error("nan.npy", tmp_path / "nan.npy")
    assert msg == (
        f"{tmp_path / 'nan.npy'}: holds 1 NaN or inf value(s) (first at frame 7, coordinate 1): "
        + remedy
    )
    x[12, 0] = bad  # stride 3 skips frame 7: the first read is the file's frame 12 (row 4)
    np.savez(tmp_path / "nan.npz", a=x)
    msg = _error("nan.npz", tmp_path / "nan.npz", stride=3)
    assert "holds 1 NaN or inf value(s) (first at frame 12, coordinate 0): " + remedy in msg
    np.savetxt(tmp_path / "nan.txt", x)
    _error("nan.txt", tmp_path / "nan.txt")
    if importlib.util.find_spec("h5py") is not None:
        import h5py

        with h5py.File(tmp_path / "nan.h5", "w") as fh:
            fh["x"] = x
        msg = _error("nan.h5", tmp_path / "nan.h5")
        assert "holds 2 NaN or inf value(s) (first at frame 7, coordinate 1): " + remedy in msg


def test_npz_with_object_array_is_not_unpickled(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, a=np.zeros((5, 2)), b=np.array([{"x": 1}, None], dtype=object))
    msg = _error("obj.npz", path)
    assert "pickle" in msg
    # the numeric array alone can still be read
    assert read_trajectories(path, keys=["a"]).data[0].shape == (5, 2)


def test_missing_npz_key_and_csv_column(tmp_path, states):
    np.savez(tmp_path / "r.npz", a=states[0])
    assert "'zz'" in _error("r.npz", tmp_path / "r.npz", keys=["zz"])
    np.savetxt(tmp_path / "r.txt", states[0])
    assert "header" in _error("r.txt", tmp_path / "r.txt", columns=["x"])


def test_bad_arguments(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((10, 2)))
    with pytest.raises(ValueError, match="features"):
        read_trajectories(tmp_path / "a.npy", features="xyz")
    with pytest.raises(ValueError, match="stride"):
        read_trajectories(tmp_path / "a.npy", stride=0)
