"""Reading a user's trajectories from files on disk.

:func:`read_trajectories` turns files into a :class:`Trajectories`: a list of numpy arrays of
shape ``(frames, *state_shape)`` (one per trajectory, ready for the dpnets estimators), the time
per frame when the files store it, and where each trajectory came from.

Formats (chosen by the file extension, case-insensitive):

``.npy``
    One trajectory per file, memory-mapped by default (``mmap=True``). Pickled (object)
    arrays are never loaded.
``.npz``
    Every array is a trajectory (sorted by key), or only the arrays named by ``keys``.
``.csv`` / ``.txt``
    One trajectory per file; comma-delimited when the first line holds a comma, else
    whitespace-delimited; lines starting with ``#`` are comments. A first row without any
    number is a header of column names; ``columns`` picks columns by name or index.
``.h5`` / ``.hdf5``
    Every numeric dataset with at least one dimension is a trajectory (sorted by path), or
    only the datasets named by ``keys``. An mdtraj HDF5 trajectory (``/coordinates`` and
    ``/topology`` at the root) is read as molecular dynamics instead, with h5py only (mdtraj's
    own HDF5 reader would need PyTables).
``.xtc`` / ``.trr`` / ``.dcd`` / ``.nc`` / ``.ncdf`` / ``.netcdf`` / ``.mdcrd``
    Molecular dynamics through mdtraj, which needs a ``topology`` file (``.pdb``, ``.gro``,
    ``.prmtop``, ``.psf``, ...). ``features`` chooses what is returned from the selected atoms.
    Positions are in nm and times in ps, as mdtraj and MDAnalysis give them (after MDAnalysis'
    Å → nm): ``.ncdf`` is Amber NetCDF (as ``.nc``); the DCD time step is read from its header
    (``DELTA * NSAVC`` in AKMA units, as MDAnalysis reads it; ``DELTA = 1``, the placeholder
    VMD's and mdtraj's writers store, means unknown); a DCD file holding fewer frames
    than its header announces (an unfinished run) gives the frames it holds, with a warning;
    ``.mdcrd`` (Amber ASCII) needs its ``.prmtop``. Where mdtraj cannot read a file, among
    them the topologies it does not know (GROMACS ``.tpr`` and ``.top``), MDAnalysis reads
    it when installed (the ``files`` extra); for a GROMACS ``.top`` the ``#include`` files are
    looked up next to it and in ``$GMXLIB``.

Every problem with a file (missing, unknown type, truncated, non-numeric, NaN or infinite
values, state shapes that differ between trajectories) raises :class:`DataFileError`, whose
message is one line that starts with the file's name. Only regular files are read: a FIFO or
a device is refused without being opened for reading.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import json
import math
import os
import re
import stat
import struct
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DataFileError",
    "Trajectories",
    "read_trajectories",
    "select_atoms",
    "read_log_weights",
    "BOLTZMANN",
    "FEATURES",
    "EXTENSIONS",
]

#: What :func:`read_trajectories` can compute from a molecular-dynamics trajectory.
FEATURES = ("raw", "positions", "dihedrals", "distances", "cartesian")

_ARRAY_EXTS = (".npy", ".npz")
_TEXT_EXTS = (".csv", ".txt")
_HDF5_EXTS = (".h5", ".hdf5")
_MD_EXTS = (".xtc", ".trr", ".dcd", ".nc", ".ncdf", ".netcdf", ".mdcrd")
#: The file extensions :func:`read_trajectories` reads.
EXTENSIONS = _ARRAY_EXTS + _TEXT_EXTS + _HDF5_EXTS + _MD_EXTS
# Formats whose frames carry their simulation time (mdtraj reads DCD times as 0, 1, 2, ...:
# the DCD time step comes from its header; .mdcrd stores no time).
_MD_TIMED_EXTS = (".xtc", ".trr", ".nc", ".ncdf", ".netcdf") + _HDF5_EXTS
# mdtraj's loaders of these extensions (``md.load`` does not dispatch ``.ncdf``)
_MDTRAJ_LOADERS = {".ncdf": "load_netcdf", ".nc": "load_netcdf", ".netcdf": "load_netcdf"}
# Topologies mdtraj reads (others go to MDAnalysis when it is installed)
_MDTRAJ_TOPOLOGIES = (
    ".pdb", ".pdb.gz", ".pdbx", ".cif", ".gro", ".prmtop", ".parm7", ".psf", ".mol2",
    ".hoomdxml", ".h5", ".lh5", ".xml",
)  # fmt: skip
# One AKMA time unit (DCD's DELTA) in ps, as MDAnalysis converts it
_AKMA_PS = 4.888821e-2
_GLOB_CHARS = re.compile(r"[*?\[]")
# Elements of the finiteness check per chunk (memory-mapped files are not read all at once).
_CHUNK = 1 << 22


class DataFileError(ValueError):
    """A data file cannot be read as trajectories; the message is one line naming the file."""

    def __init__(self, source: str | os.PathLike, problem: str) -> None:
        self.source = str(source)
        self.problem = _one_line(problem)
        super().__init__(f"{_one_line(self.source)}: {self.problem}")


@dataclass(eq=False)
class Trajectories:
    """Trajectories read by :func:`read_trajectories`.

    Attributes
    ----------
    data : list of numpy.ndarray
        One array per trajectory, shape ``(frames, *state_shape)`` with the same
        ``state_shape`` for all, float32 or float64 (``.npy`` arrays may be read-only
        memory maps).
    dt : float or None
        Time per frame (after ``stride``) read from the files, in ``time_unit``; None when the
        format does not store times or the files disagree on it.
    sources : list of str
        Where each trajectory came from: the file, followed by ``[key]`` for ``.npz`` arrays
        and ``[/dataset/path]`` for HDF5 datasets.
    time_unit : str or None
        ``"ps"`` for molecular-dynamics files, None otherwise.
    atomic_numbers : numpy.ndarray or None
        Element numbers ``(n_atoms,)`` of the atoms of molecular-dynamics ``"positions"``
        (the input of :class:`dpnets.nn.schnet.SchNetEncoder`), else None.
    names : list of str or None
        The name of each coordinate of vector states where the files give one: the
        ``.csv``/``.txt`` header (the chosen columns), ``"sin φ ALA2"``-style names of
        backbone dihedral features, ``"d(ALA2-CA, ALA2-CB)"`` for distances; None otherwise
        or when the files disagree.
    md_features : dpnets.md_features.MDFeatures or None
        For molecular-dynamics features (dihedrals, distances, cartesian): what each column
        is, with its atoms (the fit folder's ``features.json``).
    """

    data: list[np.ndarray]
    dt: float | None = None
    sources: list[str] = field(default_factory=list)
    time_unit: str | None = None
    atomic_numbers: np.ndarray | None = None
    names: list[str] | None = None
    md_features: Any = None

    def __len__(self) -> int:
        return len(self.data)

    @property
    def n_frames(self) -> list[int]:
        """Number of frames of each trajectory."""
        return [len(x) for x in self.data]

    @property
    def state_shape(self) -> tuple[int, ...]:
        """Shape of one frame (common to all trajectories)."""
        return tuple(self.data[0].shape[1:]) if self.data else ()

    def __repr__(self) -> str:
        dtypes = sorted({str(x.dtype) for x in self.data})
        return (
            f"Trajectories(n={len(self.data)}, frames={self.n_frames}, "
            f"state_shape={self.state_shape}, dtype={'/'.join(dtypes)}, dt={self.dt}, "
            f"time_unit={self.time_unit!r})"
        )


def read_trajectories(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    keys: Sequence[str] | None = None,
    columns: Sequence[str | int] | None = None,
    topology: str | os.PathLike | None = None,
    features: str = "raw",
    selection: str = "heavy",
    mmap: bool = True,
    stride: int = 1,
    torsions: Sequence[str] = ("phi", "psi"),
    cutoff: float | None = None,
    reference: str | os.PathLike | None = None,
) -> Trajectories:
    """Read trajectories from files (one or more per file).

    Parameters
    ----------
    paths : path, glob pattern, or sequence of them
        Files to read; patterns (``"runs/*.npy"``, ``"runs/**/*.xtc"``) are expanded and
        sorted. Each file gives one trajectory, except ``.npz`` and HDF5 files, which give one
        per array / dataset.
    keys : sequence of str, optional
        ``.npz`` keys or HDF5 dataset paths (``"runs/a"`` or ``"/runs/a"``) to read from every
        such file; default: all of them. Ignored for other formats.
    columns : sequence of str or int, optional
        ``.csv`` / ``.txt`` columns to keep, by header name or by (0-based) index; default: all.
        Ignored for other formats.
    topology : path, optional
        Topology of molecular-dynamics trajectories (``.pdb``, ``.gro``, ``.prmtop``, ...),
        needed for ``.xtc``, ``.trr``, ``.dcd`` and ``.nc`` files; for mdtraj HDF5 files it
        replaces the stored topology.
    features : {"raw", "positions", "dihedrals", "distances", "cartesian"}
        What to return for molecular dynamics (ignored for other formats;
        :mod:`dpnets.md_features` computes them through mdtraj):
        ``"positions"`` (or ``"raw"``): positions of the selected atoms in nm,
        ``(frames, n_atoms, 3)`` float32, and their ``atomic_numbers``;
        ``"dihedrals"``: the torsions of the kinds ``torsions`` of the residues the
        selection touches, as ``[sin, cos]`` blocks per kind (``[sin(phi), cos(phi),
        sin(psi), cos(psi)]`` by default), ``(frames, 2 * n_torsions)``;
        ``"distances"``: the pairwise distances of the selected atoms in nm (minimum image
        when the file has a unit cell), all pairs or those within ``cutoff``;
        ``"cartesian"``: the selected atoms' coordinates in nm after optimal superposition
        of the selection on ``reference``, ``(frames, 3 * n_atoms)``.
    selection : str
        Molecular-dynamics atoms: ``"heavy"`` (all but hydrogens and virtual sites),
        ``"backbone"``, ``"all"``, or any mdtraj selection string (``"name CA"``,
        ``"resid 5 to 10"``).
    mmap : bool
        Memory-map ``.npy`` files instead of reading them into memory.
    stride : int
        Keep every ``stride``-th frame; ``dt`` is multiplied accordingly.
    torsions : sequence of str, default ("phi", "psi")
        ``features="dihedrals"``: the torsion kinds, among ``phi``, ``psi``, ``omega``,
        ``chi1``, ``chi2``, ``chi3``, ``chi4``.
    cutoff : float, optional
        ``features="distances"``: keep only the pairs closer than ``cutoff`` nm in at least
        one frame of the data (contacts that form); default: all pairs.
    reference : path, optional
        ``features="cartesian"``: a structure of the same topology to superpose on
        (default: the first frame read).

    Returns
    -------
    Trajectories
        The arrays, the time per frame, their sources, and the atomic numbers for positions.

    Raises
    ------
    DataFileError
        For a pattern matching no file, a missing, unknown, truncated or unreadable file,
        non-numeric, NaN or infinite values, state shapes differing between trajectories, or
        molecular-dynamics files that disagree on the time per frame or the atoms.
    ValueError
        For invalid arguments (``features``, ``stride``).
    ImportError
        When h5py (HDF5 files) or mdtraj (molecular dynamics) is needed but not installed.
    """
    if features not in FEATURES:
        raise ValueError(f"features must be one of {', '.join(FEATURES)}; got {features!r}")
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 1:
        raise ValueError(f"stride must be a positive integer; got {stride!r}")
    stride = int(stride)
    if isinstance(keys, str):
        keys = [keys]
    if isinstance(columns, (str, int)):
        columns = [columns]

    files = _expand(paths)
    if cutoff is not None and not (isinstance(cutoff, (int, float)) and cutoff > 0):
        raise ValueError(f"cutoff must be a positive distance in nm; got {cutoff!r}")
    reader = _Reader(keys, columns, topology, features, selection, mmap, stride)
    reader.torsions = [str(t) for t in ([torsions] if isinstance(torsions, str) else torsions)]
    reader.cutoff = None if cutoff is None else float(cutoff)
    reader.reference_path = None if reference is None else os.fspath(reference)
    for path in files:
        reader.read(path)
    return reader.result()


# --------------------------------------------------------------------------------------------
# Paths


def _expand(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    items = [os.fspath(p) for p in paths]
    if not items:
        raise ValueError("no paths given")
    files: list[str] = []
    for item in items:
        if _GLOB_CHARS.search(item) and not os.path.exists(item):
            matches = sorted(m for m in glob.glob(item, recursive=True) if os.path.isfile(m))
            if not matches:
                raise DataFileError(item, "no file matches this pattern")
            files.extend(matches)
        else:
            files.append(item)
    seen: set[str] = set()
    unique = []
    for f in files:
        key = os.path.realpath(f)
        if key not in seen:
            seen.add(key)
            unique.append(f)
    for f in unique:
        ext = _ext(f)
        if not os.path.exists(f):
            raise DataFileError(f, "no such file")
        if os.path.isdir(f):
            raise DataFileError(f, "is a directory, not a file")
        _check_regular(f)
        if ext not in EXTENSIONS:
            shown = f"'{ext}'" if ext else "(none)"
            raise DataFileError(f, f"unknown file type {shown}; supported: {', '.join(EXTENSIONS)}")
    return unique


def _ext(path: str) -> str:
    return os.path.splitext(path)[1].lower()


def _check_regular(path: str, what: str = "file") -> None:
    """Refuse a FIFO, device or socket before anything opens it (a FIFO blocks a reader)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise DataFileError(path, f"cannot read: {_reason(exc)}") from exc
    if stat.S_ISREG(mode):
        return
    from dpnets.io import file_kind

    raise DataFileError(path, f"the {what} is {file_kind(mode)}; only regular files are read")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _reason(exc: BaseException) -> str:
    """A short one-line description of a library exception."""
    text = _one_line(str(exc)) or type(exc).__name__
    if len(text) > 200:
        text = text[:197] + "..."
    return text


# --------------------------------------------------------------------------------------------
# Reader


class _Reader:
    def __init__(
        self,
        keys: Sequence[str] | None,
        columns: Sequence[str | int] | None,
        topology: str | os.PathLike | None,
        features: str,
        selection: str,
        mmap: bool,
        stride: int,
    ) -> None:
        self.keys = None if keys is None else [str(k) for k in keys]
        self.columns = None if columns is None else list(columns)
        self.topology_path = None if topology is None else os.fspath(topology)
        self.features = "positions" if features == "raw" else features
        self.selection = selection
        self.mmap = mmap
        self.stride = stride
        self._topology: Any = None
        self.data: list[np.ndarray] = []
        self.sources: list[str] = []
        self.dts: list[tuple[str, float | None]] = []
        self.atomic_numbers: list[tuple[str, np.ndarray]] = []
        self.any_md = False
        self.names: list[list[str] | None] = []  # per trajectory
        self.torsions: list[str] = ["phi", "psi"]
        self.cutoff: float | None = None
        self.reference_path: str | None = None
        self.md_features: Any = None  # the MDFeatures of the first MD file

    # -- dispatch ---------------------------------------------------------------------------

    def read(self, path: str) -> None:
        ext = _ext(path)
        if ext == ".npy":
            self._add(path, self._read_npy(path), None)
        elif ext == ".npz":
            self._read_npz(path)
        elif ext in _TEXT_EXTS:
            self._add(path, self._read_text(path), None)
        elif ext in _HDF5_EXTS:
            self._read_hdf5(path)
        else:
            self._read_md(path)

    def _add(self, source: str, arr: Any, dt: float | None, *, strided: bool = False) -> None:
        """Check and append one trajectory (``strided``: the reader applied ``stride``)."""
        arr = _as_trajectory(source, arr)
        if self.stride > 1 and not strided:
            arr = arr[:: self.stride]
        if len(arr) == 0:
            raise DataFileError(source, "holds no frames")
        _check_finite(source, arr)
        if self.data and arr.shape[1:] != self.data[0].shape[1:]:
            raise DataFileError(
                source,
                f"state shape {tuple(arr.shape[1:])} differs from "
                f"{self.sources[0]}'s {tuple(self.data[0].shape[1:])}",
            )
        self.data.append(arr)
        self.sources.append(source)
        self.dts.append((source, dt))
        if len(self.names) < len(self.data):  # a reader that names no coordinates
            self.names.append(None)

    def result(self) -> Trajectories:
        dt = None
        known = [(s, d) for s, d in self.dts if d is not None]
        if known:
            s0, d0 = known[0]
            for s, d in known[1:]:
                if not math.isclose(d, d0, rel_tol=1e-6, abs_tol=1e-9):
                    raise DataFileError(s, f"time per frame {d:g} differs from {s0}'s {d0:g}")
            if len(known) == len(self.dts):
                dt = d0
        atomic_numbers = None
        if self.atomic_numbers:
            s0, z0 = self.atomic_numbers[0]
            for s, z in self.atomic_numbers[1:]:
                if not np.array_equal(z, z0):
                    raise DataFileError(s, f"atomic numbers differ from {s0}'s")
            atomic_numbers = z0
        if self.cutoff is not None and self.md_features is not None:
            self._apply_cutoff()
        first = self.names[0] if self.names else None
        names = first if all(n == first for n in self.names) else None
        return Trajectories(
            data=self.data,
            dt=dt,
            sources=self.sources,
            time_unit="ps" if self.any_md else None,
            atomic_numbers=atomic_numbers,
            names=None if names is None else list(names),
            md_features=self.md_features,
        )

    def _apply_cutoff(self) -> None:
        """Keep the distances closer than the cut-off in some frame of the data."""
        closest = np.min([np.asarray(t).min(axis=0) for t in self.data], axis=0)
        keep = closest < self.cutoff
        if not keep.any():
            raise DataFileError(
                self.sources[0],
                f"no pair of the selection comes closer than the cut-off {self.cutoff:g} nm "
                f"(closest: {closest.min():.3g} nm)",
            )
        self.md_features = self.md_features.subset(keep)
        self.data = [np.ascontiguousarray(np.asarray(t)[:, keep]) for t in self.data]
        self.names = [self.md_features.names for _ in self.data]

    # -- numpy ------------------------------------------------------------------------------

    def _read_npy(self, path: str) -> np.ndarray:
        try:
            return np.load(path, mmap_mode="r" if self.mmap else None, allow_pickle=False)
        except Exception as exc:
            raise DataFileError(path, f"cannot read: {_npy_reason(exc)}") from exc

    def _read_npz(self, path: str) -> None:
        try:
            npz = np.load(path, allow_pickle=False)
        except Exception as exc:
            raise DataFileError(path, f"cannot read: {_npy_reason(exc)}") from exc
        if not hasattr(npz, "files"):  # np.load read a .npy saved under a .npz name
            raise DataFileError(path, "cannot read: not a .npz archive")
        with npz:
            names = sorted(npz.files)
            if self.keys is not None:
                for key in self.keys:
                    if key not in names:
                        raise DataFileError(
                            path, f"no array {key!r} (has: {', '.join(names) or 'none'})"
                        )
                names = list(self.keys)
            if not names:
                raise DataFileError(path, "holds no arrays")
            for key in names:
                source = f"{path}[{key}]"
                try:
                    arr = npz[key]
                except Exception as exc:
                    raise DataFileError(source, f"cannot read: {_npy_reason(exc)}") from exc
                self._add(source, arr, None)

    # -- text -------------------------------------------------------------------------------

    def _read_text(self, path: str) -> np.ndarray:
        try:
            with open(path, encoding="utf-8-sig") as fh:
                lines = fh.read().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise DataFileError(path, f"cannot read: {_reason(exc)}") from exc
        rows = [
            (i + 1, line.strip())
            for i, line in enumerate(lines)
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if not rows:
            raise DataFileError(path, "holds no data")
        delimiter = "," if "," in rows[0][1] else None

        def split(line: str) -> list[str]:
            return [c.strip() for c in line.split(delimiter)]

        header: list[str] | None = None
        first = split(rows[0][1])
        if not any(_is_number(c) for c in first):
            header = [c.strip("\"'") for c in first]
            rows = rows[1:]
            if not rows:
                raise DataFileError(path, "holds a header line but no data")
        n_cols = len(header) if header is not None else len(split(rows[0][1]))
        usecols = self._text_columns(path, header, n_cols)
        self.names.append(None if header is None else [header[j] for j in usecols])

        try:  # fast path; the scan below finds the line of any problem
            values = np.loadtxt(
                [line for _, line in rows],
                delimiter=delimiter,
                usecols=None if self.columns is None else usecols,
                ndmin=2,
                dtype=np.float64,
            )
            if values.shape[1] == len(usecols):
                return values
        except ValueError:
            pass
        for lineno, line in rows:
            cells = split(line)
            if len(cells) != n_cols:
                raise DataFileError(path, f"line {lineno}: {len(cells)} columns, expected {n_cols}")
            for j in usecols:
                if not _is_number(cells[j]):
                    raise DataFileError(path, f"line {lineno}: non-numeric value {cells[j][:40]!r}")
        raise DataFileError(path, "cannot read: not a table of numbers")

    def _text_columns(self, path: str, header: list[str] | None, n_cols: int) -> list[int]:
        if self.columns is None:
            return list(range(n_cols))
        out = []
        for col in self.columns:
            if isinstance(col, (int, np.integer)) and not isinstance(col, bool):
                j = int(col)
                if not -n_cols <= j < n_cols:
                    raise DataFileError(path, f"column index {j} out of range ({n_cols} columns)")
                out.append(j % n_cols)
            elif isinstance(col, str):
                if header is None:
                    raise DataFileError(
                        path, f"column {col!r} asked by name but the file has no header line"
                    )
                if col not in header:
                    raise DataFileError(path, f"no column {col!r} (header: {', '.join(header)})")
                out.append(header.index(col))
            else:
                raise ValueError(f"columns must be names or integer indices; got {col!r}")
        if not out:
            raise ValueError("columns is empty")
        return out

    # -- HDF5 -------------------------------------------------------------------------------

    def _read_hdf5(self, path: str) -> None:
        h5py = _import_h5py()
        try:
            fh = h5py.File(path, "r")
        except Exception as exc:
            raise DataFileError(path, f"cannot read: {_reason(exc)}") from exc
        with fh:
            is_md = "coordinates" in fh and isinstance(fh["coordinates"], h5py.Dataset)
            if is_md and ("topology" in fh or self.topology_path is not None):
                self._read_mdtraj_hdf5(path, fh)
                return
            datasets: dict[str, Any] = {}

            def visit(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset) and obj.ndim >= 1:
                    datasets["/" + name] = obj

            try:
                fh.visititems(visit)
            except Exception as exc:
                raise DataFileError(path, f"cannot read: {_reason(exc)}") from exc
            if self.keys is not None:
                chosen = []
                for key in self.keys:
                    name = "/" + key.lstrip("/")
                    obj = fh.get(name) if name in fh else None
                    if not isinstance(obj, h5py.Dataset):
                        raise DataFileError(
                            path,
                            f"no dataset {name!r} (has: {', '.join(sorted(datasets)) or 'none'})",
                        )
                    chosen.append((name, obj))
            else:
                chosen = [(n, d) for n, d in sorted(datasets.items()) if _numeric_dtype(d.dtype)]
                if not chosen:
                    raise DataFileError(path, "holds no numeric datasets")
            for name, ds in chosen:
                source = f"{path}[{name}]"
                if not _numeric_dtype(ds.dtype):
                    raise DataFileError(source, f"non-numeric dataset of type {ds.dtype}")
                if ds.ndim == 0:
                    raise DataFileError(source, "is a scalar, not a trajectory")
                try:
                    arr = ds[:: self.stride]
                except Exception as exc:
                    raise DataFileError(source, f"cannot read: {_reason(exc)}") from exc
                self._add(source, arr, None, strided=True)

    def _read_mdtraj_hdf5(self, path: str, fh: Any) -> None:
        md = _import_mdtraj()
        try:
            coords = fh["coordinates"]
            xyz = np.asarray(coords[:: self.stride], dtype=np.float32)
            units = coords.attrs.get("units", b"nanometers")
            units = units.decode() if isinstance(units, bytes) else str(units)
            if units.lower().startswith("angstrom"):
                xyz = xyz * np.float32(0.1)
            time = None
            if "time" in fh:
                time = np.asarray(fh["time"][:: self.stride], dtype=np.float64)
            cell = {}
            if "cell_lengths" in fh and "cell_angles" in fh:
                cell_units = fh["cell_lengths"].attrs.get("units", b"nanometers")
                cell_units = cell_units.decode() if isinstance(cell_units, bytes) else cell_units
                lengths = np.asarray(fh["cell_lengths"][:: self.stride], dtype=np.float32)
                if str(cell_units).lower().startswith("angstrom"):
                    lengths = lengths * np.float32(0.1)
                cell = {
                    "unitcell_lengths": lengths,
                    "unitcell_angles": np.asarray(
                        fh["cell_angles"][:: self.stride], dtype=np.float32
                    ),
                }
            if self.topology_path is not None:
                top = self._load_topology(md)
            else:
                top = _topology_from_json(md, fh["topology"][0])
            traj = md.Trajectory(xyz, top, time=time, **cell)
        except DataFileError:
            raise
        except Exception as exc:
            raise DataFileError(path, f"cannot read: {_reason(exc)}") from exc
        self._add_md(path, traj, md, timed=time is not None)

    # -- molecular dynamics -----------------------------------------------------------------

    def _load_topology(self, md: Any) -> Any:
        if self._topology is None:
            top_path = self.topology_path
            assert top_path is not None
            if not os.path.exists(top_path) or os.path.isdir(top_path):
                raise DataFileError(top_path, "no such topology file")
            _check_regular(top_path, "topology file")
            try:
                self._topology = md.load_topology(top_path)
            except Exception as exc:
                raise DataFileError(top_path, f"cannot read topology: {_reason(exc)}") from exc
        return self._topology

    def _read_md(self, path: str) -> None:
        ext = _ext(path)
        if self.topology_path is None:
            raise DataFileError(
                path, f"a topology file is needed for {ext} trajectories (topology=...)"
            )
        md = _import_mdtraj()
        top_path = self.topology_path
        timed, dt = ext in _MD_TIMED_EXTS, None
        if not _mdtraj_reads_topology(top_path):  # .tpr, .top, ...: MDAnalysis reads them
            if not os.path.exists(top_path) or os.path.isdir(top_path):
                raise DataFileError(top_path, "no such topology file")
            _check_regular(top_path, "topology file")
            why = f"mdtraj cannot read {_ext(top_path) or 'this'} topologies"
            traj = _read_mdanalysis(md, top_path, path, self.stride, why)
            timed = ext != ".mdcrd"
        else:
            top = self._load_topology(md)
            try:
                with warnings.catch_warnings(), quiet_c_stdout():
                    warnings.simplefilter("ignore")
                    load = getattr(md, _MDTRAJ_LOADERS[ext]) if ext in _MDTRAJ_LOADERS else md.load
                    traj = load(path, top=top, stride=self.stride)
            except Exception as exc:  # another reader may know the file: MDAnalysis
                why = f"mdtraj cannot read it ({_reason(exc)})"
                traj = _read_mdanalysis(md, top_path, path, self.stride, why, exc)
                warnings.warn(
                    f"{path}: {why}; read through MDAnalysis instead ({traj.n_frames} frames; "
                    "a truncated file gives the whole frames it holds)",
                    RuntimeWarning,
                    stacklevel=4,
                )
        if ext == ".dcd":
            dt = _check_dcd(path, md, traj.n_frames, self.stride)
        self._add_md(path, traj, md, timed=timed, dt=dt)

    def _add_md(
        self, path: str, traj: Any, md: Any, *, timed: bool, dt: float | None = None
    ) -> None:
        self.any_md = True
        if dt is None:
            dt = _timestep(traj.time) if timed else None
        if self.features == "positions":
            atoms = self._select(path, traj.topology)
            z = np.array([_atomic_number(traj.topology.atom(i)) for i in atoms], dtype=np.int64)
            xyz = np.ascontiguousarray(traj.xyz[:, atoms], dtype=np.float32)
            self._add(path, xyz, dt, strided=True)
            self.atomic_numbers.append((path, z))
            return
        spec = self._md_features(path, traj)
        self.names.append(list(spec.names))
        self._add(path, spec.compute(traj), dt, strided=True)

    def _md_features(self, path: str, traj: Any) -> Any:
        """The features of the first MD file read (every file has its atoms: the state
        shapes are checked file by file)."""
        from dpnets import md_features

        if self.md_features is not None:
            return self.md_features
        top = traj.topology
        atoms = self._select(path, top)
        try:
            if self.features == "dihedrals":
                spec = md_features.torsion_features(top, self.torsions, atoms)
            elif self.features == "distances":
                spec = md_features.distance_features(top, atoms)
            else:
                spec = md_features.cartesian(top, atoms, self._reference(traj))
        except ValueError as exc:
            raise DataFileError(path, str(exc)) from None
        self.md_features = spec
        return spec

    def _reference(self, traj: Any) -> np.ndarray:
        """The positions to superpose on: the reference file's, else the first frame."""
        if self.reference_path is None:
            return np.asarray(traj.xyz[0], dtype=np.float64)
        md = _import_mdtraj()
        path = self.reference_path
        if not os.path.isfile(path):
            raise DataFileError(path, "no such reference structure")
        try:
            if _ext(path) == ".pdb":
                ref = md.load_pdb(path)
            else:
                ref = md.load_frame(path, 0, top=self.topology_path)
        except Exception as exc:
            raise DataFileError(
                path, f"cannot read the reference structure: {_reason(exc)}"
            ) from exc
        if ref.n_atoms != traj.n_atoms:
            raise DataFileError(
                path, f"the reference has {ref.n_atoms} atoms; the trajectories have {traj.n_atoms}"
            )
        return np.asarray(ref.xyz[0], dtype=np.float64)

    def _select(self, path: str, top: Any) -> np.ndarray:
        return select_atoms(top, self.selection, source=path)


def select_atoms(top: Any, selection: str, source: str = "topology") -> np.ndarray:
    """0-based indices (int64) of the atoms of mdtraj topology ``top`` that ``selection``
    picks, as :func:`read_trajectories` selects them: ``"heavy"`` (all but hydrogens and
    virtual sites), ``"all"``, or any mdtraj selection string. A bad or empty selection
    raises :class:`DataFileError` naming ``source``."""
    try:
        if selection == "heavy":
            atoms = [a.index for a in top.atoms if _atomic_number(a) > 1]
        elif selection == "all":
            atoms = list(range(top.n_atoms))
        else:
            atoms = top.select(selection)
    except Exception as exc:
        raise DataFileError(source, f"bad atom selection {selection!r}: {_reason(exc)}") from exc
    atoms = np.asarray(atoms, dtype=np.int64)
    if atoms.size == 0:
        raise DataFileError(source, f"atom selection {selection!r} matches no atom")
    return atoms


# --------------------------------------------------------------------------------------------
# Helpers


def _as_trajectory(source: str, arr: Any) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        arr = np.asarray(arr)
    if not _numeric_dtype(arr.dtype):
        raise DataFileError(source, f"non-numeric data of type {arr.dtype}")
    if arr.ndim == 0:
        raise DataFileError(source, "is a scalar, not a trajectory")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    return arr


def _numeric_dtype(dtype: np.dtype) -> bool:
    return dtype.kind in "biuf"


def _check_finite(source: str, arr: np.ndarray) -> None:
    per_frame = max(1, int(np.prod(arr.shape[1:])))
    step = max(1, _CHUNK // per_frame)
    for start in range(0, len(arr), step):
        block = np.asarray(arr[start : start + step])
        ok = np.isfinite(block).reshape(len(block), -1).all(axis=1)
        if not ok.all():
            frame = start + int(np.argmin(ok))
            raise DataFileError(source, f"holds NaN or infinite values (first at frame {frame})")


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _npy_reason(exc: BaseException) -> str:
    text = _reason(exc)
    if "allow_pickle" in text or "pickle" in text.lower():
        return "holds pickled (object) data, which is never loaded"
    return text


def _timestep(time: np.ndarray | None) -> float | None:
    if time is None or len(time) < 2:
        return None
    diffs = np.diff(np.asarray(time, dtype=np.float64))
    dt = float(diffs[0])
    if not np.isfinite(dt) or dt <= 0:
        return None
    if not np.allclose(diffs, dt, rtol=1e-4, atol=1e-6):
        return None
    return dt


def _atomic_number(atom: Any) -> int:
    element = atom.element
    number = getattr(element, "atomic_number", None)
    return int(number) if number is not None else 0


def _topology_from_json(md: Any, raw: Any) -> Any:
    """An mdtraj Topology from the JSON of an mdtraj HDF5 file (as mdtraj's own reader)."""
    if isinstance(raw, bytes):
        raw = raw.decode()
    spec = json.loads(str(raw))
    elements = md.element
    top = md.Topology()
    for chain_spec in sorted(spec["chains"], key=lambda c: c["index"]):
        chain = top.add_chain()
        for res_spec in sorted(chain_spec["residues"], key=lambda r: r["index"]):
            residue = top.add_residue(
                res_spec["name"],
                chain,
                resSeq=res_spec.get("resSeq"),
                segment_id=res_spec.get("segmentID", ""),
            )
            for atom_spec in sorted(res_spec["atoms"], key=lambda a: a["index"]):
                try:
                    element = elements.get_by_symbol(atom_spec["element"])
                except KeyError:
                    element = elements.virtual
                top.add_atom(atom_spec["name"], element, residue)
    atoms = list(top.atoms)
    for a, b in spec.get("bonds", []):
        top.add_bond(atoms[a], atoms[b])
    return top


def _dcd_header(path: str) -> tuple[int, int, float] | None:
    """``(NSET, NSAVC, DELTA)`` of a DCD file's header (None when it is not a DCD header):
    the frames announced, the steps between saved frames and the time step in AKMA units
    (a float for CHARMM/NAMD files, a double for X-PLOR ones, as MDAnalysis reads it)."""
    with open(path, "rb") as fh:
        head = fh.read(92)
    if len(head) < 92:
        raise DataFileError(path, "cannot read: truncated DCD header")
    for order in "<>":
        size, magic = struct.unpack(order + "i4s", head[:8])
        if size == 84 and magic == b"CORD":
            break
    else:
        return None
    icntrl = struct.unpack(order + "20i", head[8:88])
    charmm = icntrl[19] != 0
    if charmm:
        delta = struct.unpack(order + "f", head[8 + 36 : 8 + 40])[0]
    else:
        delta = struct.unpack(order + "d", head[8 + 36 : 8 + 44])[0]
    return icntrl[0], icntrl[2], float(delta)


def _check_dcd(path: str, md: Any, n_read: int, stride: int) -> float | None:
    """The time per (strided) frame of a DCD file from its header, in ps (None when the
    header has none); a file holding fewer frames than its header announces (a run that
    was stopped) gives the frames it holds, with a warning."""
    try:
        header = _dcd_header(path)
        if header is None:
            return None
        with warnings.catch_warnings(), quiet_c_stdout():
            warnings.simplefilter("ignore")
            with md.formats.DCDTrajectoryFile(path) as dcd:
                n_frames = len(dcd)
    except DataFileError:
        raise
    except Exception as exc:
        raise DataFileError(path, f"cannot read: {_reason(exc)}") from exc
    n_set, nsavc, delta = header
    if n_set > n_frames:
        warnings.warn(
            f"{path}: the DCD header announces {n_set} frames but the file holds {n_frames} "
            f"(a run that was stopped, or a truncated copy); reading the {n_frames} it holds",
            RuntimeWarning,
            stacklevel=5,
        )
    if delta == 1.0:  # the placeholder of VMD's dcdplugin writers (mdtraj's save_dcd too):
        return None  # no time step stored (1 AKMA = 48.9 fs is no MD integration step)
    dt = delta * _AKMA_PS * max(nsavc, 1) * stride
    return dt if math.isfinite(dt) and dt > 0 else None


def _mdtraj_reads_topology(path: str) -> bool:
    name = path.lower()
    return any(name.endswith(ext) for ext in _MDTRAJ_TOPOLOGIES)


def _import_mdanalysis(path: str, why: str, cause: BaseException | None = None) -> Any:
    try:
        import MDAnalysis
    except ImportError:
        raise DataFileError(
            path,
            f"cannot read: {why}; MDAnalysis can read it: pip install MDAnalysis (the files "
            "extra: pip install dpnets[files])",
        ) from cause
    return MDAnalysis


def _read_mdanalysis(
    md: Any, top_path: str, path: str, stride: int, why: str, cause: BaseException | None = None
) -> Any:
    """Read ``path`` with topology ``top_path`` through MDAnalysis (for what mdtraj cannot
    read), as an mdtraj ``Trajectory``: positions and cell lengths converted from Å to nm,
    times in ps, the topology's atoms, residues, segments (as chains) and elements."""
    mda = _import_mdanalysis(path, why, cause)
    kwargs: dict[str, Any] = {}
    if _ext(top_path) == ".top" and _gromacs_top(top_path):  # not Amber's .top
        kwargs = {
            "topology_format": "ITP",
            "include_dir": os.environ.get("GMXLIB", os.path.dirname(os.path.abspath(top_path))),
        }
    failure = None
    with _quiet_finalizers():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                u = mda.Universe(top_path, path, **kwargs)
        except Exception as exc:  # its traceback holds the half-built reader: dropped here
            failure = f"cannot read ({why}; MDAnalysis with {top_path}: {_reason(exc)})"
    if failure is not None:
        raise DataFileError(path, failure) from None
    try:
        top = _mdtraj_topology(md, u)
        xyz, time, lengths, angles = [], [], [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for ts in u.trajectory[::stride]:
                xyz.append(np.array(ts.positions, dtype=np.float32) * np.float32(0.1))
                time.append(float(ts.time))
                dims = ts.dimensions
                if dims is not None and np.all(np.asarray(dims[:3]) > 0):
                    lengths.append(np.asarray(dims[:3], dtype=np.float32) * np.float32(0.1))
                    angles.append(np.asarray(dims[3:], dtype=np.float32))
        cell = {}
        if xyz and len(lengths) == len(xyz):
            cell = {"unitcell_lengths": np.stack(lengths), "unitcell_angles": np.stack(angles)}
        frames = np.stack(xyz) if xyz else np.zeros((0, u.atoms.n_atoms, 3), np.float32)
        return md.Trajectory(frames, top, time=np.asarray(time), **cell)
    except DataFileError:
        raise
    except Exception as exc:
        raise DataFileError(path, f"cannot read through MDAnalysis: {_reason(exc)}") from exc


@contextlib.contextmanager
def quiet_c_stdout():
    """Within the block, what C code writes to the process's standard output is discarded:
    mdtraj's DCD plugin prints its diagnosis of a bad header ("dcdplugin) unrecognized DCD
    header: ...") there before raising, and the error we raise says it in one line."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no real stdout (a notebook): nothing to do
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


@contextlib.contextmanager
def _quiet_finalizers():
    """Within the block, and while its garbage is collected at its end, exceptions raised in
    finalisers are not printed. MDAnalysis readers that fail in ``__init__`` fail again in
    ``__del__`` (``AttributeError: 'XTCReader' object has no attribute '_xdr'``), which
    Python prints to stderr as "Exception ignored in ..." after our one-line error."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        yield
    finally:
        try:
            gc.collect()
        finally:
            sys.unraisablehook = hook


def _gromacs_top(path: str) -> bool:
    """Whether a ``.top`` file is a GROMACS topology (``[ section ]`` lines, ``;`` comments)
    rather than Amber's (``%VERSION`` / ``%FLAG``)."""
    with open(path, errors="replace") as fh:
        head = fh.read(4096)
    return "%FLAG" not in head and "%VERSION" not in head


def _mdtraj_topology(md: Any, u: Any) -> Any:
    """An mdtraj Topology of MDAnalysis universe ``u``, atom for atom in the same order."""
    atoms = u.atoms
    n = atoms.n_atoms
    symbols = list(atoms.elements) if hasattr(atoms, "elements") else [""] * n
    if any(not str(x).strip() for x in symbols):
        try:  # MDAnalysis >= 2.8
            from MDAnalysis.guesser.default_guesser import DefaultGuesser

            guess = DefaultGuesser(None).guess_atom_element
        except ImportError:  # pragma: no cover - older MDAnalysis
            from MDAnalysis.topology.guessers import guess_atom_element as guess
        symbols = [
            str(x).strip() or guess(name) for x, name in zip(symbols, atoms.names, strict=True)
        ]
    cache: dict[str, Any] = {}

    def element(sym: str) -> Any:
        if sym not in cache:
            try:
                cache[sym] = md.element.get_by_symbol(sym.strip().capitalize())
            except KeyError:
                cache[sym] = md.element.virtual
        return cache[sym]

    top = md.Topology()
    names = atoms.names
    resnames = atoms.resnames if hasattr(atoms, "resnames") else ["UNK"] * n
    resids = atoms.resids if hasattr(atoms, "resids") else np.zeros(n, dtype=int)
    resindices, segindices = atoms.resindices, atoms.segindices
    chain = residue = None
    last_seg = last_res = None
    for i in range(n):
        if segindices[i] != last_seg:
            chain, last_seg, last_res = top.add_chain(), segindices[i], None
        if resindices[i] != last_res:
            residue = top.add_residue(str(resnames[i]), chain, resSeq=int(resids[i]))
            last_res = resindices[i]
        top.add_atom(str(names[i]), element(str(symbols[i])), residue)
    return top


def _import_h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("reading HDF5 files (.h5, .hdf5) needs h5py: pip install h5py") from exc
    return h5py


def _import_mdtraj() -> Any:
    try:
        import mdtraj
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading molecular-dynamics trajectories needs mdtraj: pip install mdtraj"
        ) from exc
    return mdtraj


# --------------------------------------------------------------------------------------------
# Bias energies of a biased simulation

#: Boltzmann's constant per mole in the energy units of the engines (kJ/mol/K, PLUMED's and
#: GROMACS' default; kcal/mol/K, Amber's and NAMD's); "kT": the energies are in units of kT.
BOLTZMANN = {"kJ/mol": 0.0083144626181532, "kcal/mol": 0.0019872042586408316, "kT": None}


def read_log_weights(
    path: str | os.PathLike,
    column: str | int | None = None,
    temperature: float | None = None,
    units: str = "kJ/mol",
) -> np.ndarray:
    """The log-weights ``beta V`` of every frame of a biased run, from the engine's file.

    Parameters
    ----------
    path : path
        A PLUMED ``COLVAR`` file (any other extension, or none: a header line
        ``#! FIELDS time cv ... metad.bias`` names the columns; ``#! SET`` lines are skipped;
        a restarted run's repeated ``#! FIELDS`` header must name the same columns), or a
        ``.npy`` array of bias energies (1-D, one per frame; ``.npz``: its one array, or the
        array named by ``column``), or a ``.txt``/``.csv`` table read like a trajectory.
    column : str or int, optional
        The bias column, by name (``"metad.bias"``, ``"opes.bias"``) or 0-based index.
        Default: the one column whose name ends in ``.bias`` (refused when there are none
        or several), or the array itself.
    temperature : float, optional
        In kelvin: ``beta = 1 / (k_B T)``. Needed unless ``units="kT"``.
    units : {"kJ/mol", "kcal/mol", "kT"}, default "kJ/mol"
        Energy units of the file (PLUMED's default is kJ/mol; ``UNITS ENERGY=kcal/mol``
        changes it).

    Returns
    -------
    ndarray (n_frames,)
        ``beta V``, for ``log_weights=`` of :meth:`dpnets.TransferOperator.fit`,
        :meth:`dpnets.DPNet.fit` and :meth:`dpnets.Generator.fit`. The frames must be those
        of the trajectory (same stride); time rescaling also needs them equally spaced in
        simulation time.

    Raises
    ------
    DataFileError
        One line naming the file: missing or special file, no such column (the columns
        are listed), a row of the wrong width, non-numeric or non-finite values.
    ValueError
        For a bad ``temperature`` or ``units``.
    """
    from dpnets.params import check_choice, check_real

    check_choice("units", units, tuple(BOLTZMANN))
    kb = BOLTZMANN[units]
    beta = 1.0
    if kb is not None:
        if temperature is None:
            raise ValueError(
                f"temperature is needed to turn bias energies in {units} into beta V (or pass "
                "units='kT')"
            )
        beta = 1.0 / (kb * check_real("temperature", temperature, 0.0, low_open=True))
    path = os.fspath(path)
    _check_regular(path, "bias file")
    ext = _ext(path)
    if ext in _ARRAY_EXTS:
        energy = _bias_array(path, column)
    else:
        energy = _colvar_column(path, column)
    if energy.size == 0:
        raise DataFileError(path, "holds no bias values")
    bad = int(np.count_nonzero(~np.isfinite(energy)))
    if bad:
        raise DataFileError(path, f"the bias holds {bad} NaN or inf value(s)")
    return beta * energy


def _bias_array(path: str, column: str | int | None) -> np.ndarray:
    """A 1-D array of bias energies from a ``.npy`` or ``.npz`` file."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            data = loaded
        else:
            with loaded:
                keys = sorted(loaded.files)
                key = column if isinstance(column, str) else (keys[0] if len(keys) == 1 else None)
                if key not in keys:
                    raise DataFileError(path, f"name the bias array among {', '.join(keys)}")
                data = loaded[key]
    except (OSError, ValueError) as exc:
        if isinstance(exc, DataFileError):
            raise
        raise DataFileError(path, f"cannot read: {_reason(exc)}") from exc
    data = np.asarray(data)
    if data.dtype.kind not in "iuf":
        raise DataFileError(path, f"the bias must be numeric, got dtype {data.dtype}")
    if data.ndim == 2 and isinstance(column, int):
        data = data[:, column]
    if data.ndim != 1:
        raise DataFileError(
            path, f"the bias must be one value per frame (1-D), got shape {data.shape}"
        )
    return data.astype(np.float64)


def _colvar_column(path: str, column: str | int | None) -> np.ndarray:
    """One column of a PLUMED ``COLVAR`` file (``#! FIELDS`` header), or of a plain table."""
    fields: list[str] | None = None
    rows: list[str] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("#! FIELDS"):
                    names = line.split()[2:]
                    if fields is not None and names != fields:
                        raise DataFileError(
                            path,
                            f"a later '#! FIELDS' header names other columns ({' '.join(names)}) "
                            f"than the first ({' '.join(fields)})",
                        )
                    fields = names
                elif line.strip() and not line.lstrip().startswith("#"):
                    rows.append(line)
    except OSError as exc:
        raise DataFileError(path, f"cannot read: {_reason(exc)}") from exc
    if fields is None and rows and "," in rows[0]:
        fields = [c.strip() for c in rows[0].split(",")]
        if all(_is_number(c) for c in fields):
            fields = None
        else:
            rows = rows[1:]
    index = _bias_index(path, fields, column)
    values = np.empty(len(rows))
    for k, row in enumerate(rows):
        cells = row.replace(",", " ").split()
        if fields is not None and len(cells) != len(fields):
            raise DataFileError(
                path, f"row {k + 1} has {len(cells)} values for {len(fields)} columns"
            )
        try:
            values[k] = float(cells[index])
        except (IndexError, ValueError):
            raise DataFileError(
                path, f"row {k + 1}: no number in column {index} ({row.strip()[:60]!r})"
            ) from None
    return values


def _bias_index(path: str, fields: list[str] | None, column: str | int | None) -> int:
    """The 0-based index of the bias column among ``fields`` (None: no header)."""
    if isinstance(column, int) and not isinstance(column, bool):
        if fields is not None and not 0 <= column < len(fields):
            raise DataFileError(path, f"no column {column}: it has {len(fields)}")
        return column
    if fields is None:
        raise DataFileError(
            path,
            "no '#! FIELDS' header names the columns: give the bias column's 0-based index",
        )
    if column is None:
        biases = [k for k, f in enumerate(fields) if f.endswith(".bias")]
        if len(biases) != 1:
            raise DataFileError(
                path,
                f"name the bias column ({'none' if not biases else 'several'} ends in "
                f"'.bias'); columns: {', '.join(fields)}",
            )
        return biases[0]
    if str(column) not in fields:
        raise DataFileError(path, f"no column {column!r}; columns: {', '.join(fields)}")
    return fields.index(str(column))
