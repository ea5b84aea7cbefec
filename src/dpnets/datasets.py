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
    One trajectory per file; semicolon-delimited when the first line holds a semicolon,
    else comma-delimited when it holds a comma, else whitespace-delimited (numbers with a
    decimal point; a decimal comma is refused naming it); lines starting with ``#`` are
    comments. A first row without any number is a header of column names; ``columns``
    picks columns by name or index (an index may be given as text, ``"0"``, as
    ``--columns 0`` gives it). Rows are frames, evenly spaced in time: a missing value (an
    empty cell, ``NA``, ``nan``) or a text cell (a date) in a column read is refused naming
    its line and column and the columns to read; a column read as data that is a time
    axis, calendar or row index (rising by the same step over 10 rows or more, or named
    ``year``, ``date``, ``time``, ...; an unevenly rising one is named as irregular
    sampling) warns, naming the columns to keep.
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

This module is the entry: the paths, the reader that dispatches on the extension, the plain
formats and the bias files of biased runs (:func:`read_log_weights`);
:mod:`dpnets.md_files` reads the molecular-dynamics files, and :mod:`dpnets.file_errors`
holds :class:`DataFileError` and the checks all readers share.
"""

from __future__ import annotations

import glob
import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpnets.file_errors import DataFileError, check_regular, extension, reason
from dpnets.md_files import MD_EXTENSIONS, NO_TIME_STEP, MDReading, select_atoms
from dpnets.md_files import load_topology as load_topology  # engines reads them here
from dpnets.md_files import quiet_c_stdout as quiet_c_stdout
from dpnets.states import nonfinite_problem, time_columns

__all__ = [
    "DataFileError",
    "Trajectories",
    "read_trajectories",
    "select_atoms",
    "read_log_weights",
    "read_bias_rows",
    "BOLTZMANN",
    "FEATURES",
    "EXTENSIONS",
]

#: What :func:`read_trajectories` can compute from a molecular-dynamics trajectory.
FEATURES = ("raw", "positions", "dihedrals", "distances", "cartesian")

_ARRAY_EXTS = (".npy", ".npz")
_TEXT_EXTS = (".csv", ".txt")
_HDF5_EXTS = (".h5", ".hdf5")
#: The file extensions :func:`read_trajectories` reads.
EXTENSIONS = _ARRAY_EXTS + _TEXT_EXTS + _HDF5_EXTS + MD_EXTENSIONS
_GLOB_CHARS = re.compile(r"[*?\[]")


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
    fit_features: Mapping[str, Any] | None = None,
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
        ``.csv`` / ``.txt`` columns to keep, by header name or by (0-based) index, an index
        also as text (``"0"``); default: all.
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
    fit_features : mapping, optional
        The features a fit was trained on (its folder's ``features.json``): new files read
        for that fit give exactly them, its distance pairs (``cutoff`` is then not applied:
        it chose the pairs on the fit's data) and its Cartesian reference (``reference``
        is then not read).

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
    if fit_features is not None:
        reader.fit_features = dict(fit_features)
        reader.cutoff = None
        if fit_features.get("reference") is not None:
            reader.reference_path = None
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
        ext = extension(f)
        if not os.path.exists(f):
            raise DataFileError(f, "no such file")
        if os.path.isdir(f):
            raise DataFileError(f, "is a directory, not a file")
        check_regular(f)
        if ext not in EXTENSIONS:
            shown = f"'{ext}'" if ext else "(none)"
            raise DataFileError(f, f"unknown file type {shown}; supported: {', '.join(EXTENSIONS)}")
    return unique


# --------------------------------------------------------------------------------------------
# Reader


class _Reader(MDReading):
    """One call of :func:`read_trajectories`: reads the files one by one, checks and
    collects their trajectories, and gives the :class:`Trajectories` at the end.

    :meth:`read` picks the reader of a file by its extension: ``.npy``/``.npz``
    (:meth:`_read_npy`, :meth:`_read_npz`), ``.csv``/``.txt`` (:meth:`_read_text`, the
    header and ``columns``), ``.h5``/``.hdf5`` (:meth:`_read_hdf5`: the numeric datasets, or
    an mdtraj HDF5 trajectory) and the molecular-dynamics files, which the
    :class:`dpnets.md_files.MDReading` half reads (topology, atoms, features). Every reader
    hands its arrays to :meth:`_add`, which makes them ``(frames, *state_shape)`` float
    arrays, applies ``stride`` unless the reader did, and refuses empty or non-finite data
    and a state shape that differs from the first file's. :meth:`result` then checks that
    the files agree on the time per frame (``dt`` is None unless every file gives it) and
    the atomic numbers, applies the distance cut-off, and keeps the coordinate names the
    files agree on.
    """

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
        self.mmap = mmap
        self.stride = stride
        self.data: list[np.ndarray] = []
        self.sources: list[str] = []
        self.dts: list[tuple[str, float | None]] = []
        self.names: list[list[str] | None] = []  # per trajectory
        self._init_md(topology, features, selection)

    # -- dispatch ---------------------------------------------------------------------------

    def read(self, path: str) -> None:
        ext = extension(path)
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
        _check_finite(source, arr, self.stride)
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
            else:
                s1 = next(s for s, d in self.dts if d is None)
                warnings.warn(
                    f"{s1} has no time per frame, while {s0}'s is {d0:g}"
                    f"{' ps' if self.any_md else ''}: {NO_TIME_STEP} (timescales in "
                    "frames); give it (dpnets fit --dt, the estimators' dt=)",
                    RuntimeWarning,
                    stacklevel=3,
                )
        atomic_numbers = self._common_atomic_numbers()
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
            raise DataFileError(path, f"cannot read: {reason(exc)}") from exc
        rows = [
            (i + 1, line.strip())
            for i, line in enumerate(lines)
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if not rows:
            raise DataFileError(path, "holds no data")
        # ";" first: a spreadsheet's export where "," is the decimal mark ("1,5;2,25")
        delimiter = next((d for d in (";", ",") if d in rows[0][1]), None)
        if delimiter and all(line.endswith(delimiter) for _, line in rows):
            rows = [(i, line[:-1]) for i, line in rows]  # a spreadsheet's trailing delimiter

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
            if values.shape[1] == len(usecols) and np.isfinite(values).all():
                _warn_time_columns(path, header, usecols, values)
                return values
        except ValueError:
            pass
        first_cells = split(rows[0][1])
        numeric = [j for j in range(min(n_cols, len(first_cells))) if _is_number(first_cells[j])]
        parsed = []
        for lineno, line in rows:
            cells = split(line)
            if len(cells) != n_cols:
                raise DataFileError(path, f"line {lineno}: {len(cells)} columns, expected {n_cols}")
            parsed.append(row := [])
            for j in usecols:
                cell = cells[j].strip("\"'")  # a quoted number, as spreadsheets may write it
                if _is_number(cell) and math.isfinite(float(cell)):
                    row.append(float(cell))
                    continue
                name = _column_name(header, j)
                if cell.lower() in _MISSING or (_is_number(cell) and math.isnan(float(cell))):
                    raise DataFileError(
                        path,
                        f"line {lineno}: missing value {cells[j][:40]!r} in {name}: the "
                        "frames must be evenly sampled and complete; fill or interpolate the "
                        "gaps, or cut the file at them into several files (trajectories)",
                    )
                if _is_number(cell):
                    raise DataFileError(
                        path, f"line {lineno}: infinite value {cells[j][:40]!r} in {name}"
                    )
                if _is_number(cell.replace(",", ".", 1)) and cell.count(",") == 1:
                    raise DataFileError(
                        path,
                        f"line {lineno}: {cells[j][:40]!r} in {name} has a decimal comma: "
                        "write numbers with a decimal point (1.5, not 1,5)",
                    )
                below = split(rows[1][1]) if len(rows) > 1 else []
                if (  # a first line of names, some numeric: a header the rule cannot see
                    header is None
                    and lineno == rows[0][0]
                    and numeric
                    and len(below) == n_cols
                    and _is_number(below[j].strip("\"'"))
                ):
                    raise DataFileError(
                        path,
                        f"line {lineno} mixes text ({cells[j][:40]!r}) and numbers: a header "
                        "line must name every column with text (rename numeric names such "
                        "as 1990 to y1990), or remove it",
                    )
                keep = [_column_label(header, k) for k in numeric if k != j]
                remedy = (
                    f"read the numeric columns only: --columns {' '.join(keep)} (columns="
                    f"{keep!r} in Python); the time between rows is --dt (dt=)"
                    if keep
                    else "every cell of a trajectory must be a number"
                )
                raise DataFileError(
                    path,
                    f"line {lineno}: non-numeric value {cells[j][:40]!r} in {name} (a date, "
                    f"time or label is not a coordinate of the state); {remedy}",
                )
        values = np.asarray(parsed, dtype=np.float64).reshape(len(parsed), len(usecols))
        _warn_time_columns(path, header, usecols, values)
        return values

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
            elif isinstance(col, str) and (header is None or col not in header) and _is_index(col):
                # an index given as text (the command line's --columns 0 2, config.toml)
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
            raise DataFileError(path, f"cannot read: {reason(exc)}") from exc
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
                raise DataFileError(path, f"cannot read: {reason(exc)}") from exc
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
                    raise DataFileError(source, f"cannot read: {reason(exc)}") from exc
                self._add(source, arr, None, strided=True)


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


def _check_finite(source: str, arr: np.ndarray, stride: int = 1) -> None:
    """Refuse NaN/inf values, naming the first (its frame in the file) and the remedy, in
    the words of :func:`dpnets.states.check_states`."""
    if np.issubdtype(arr.dtype, np.floating):
        problem = nonfinite_problem(arr, "frame", "separate files", stride)
        if problem:
            raise DataFileError(source, f"holds {problem}")


#: text cells that mean a missing value (pandas' ``read_csv`` markers, lowercase)
_MISSING = frozenset(
    {"", "na", "n/a", "nan", "-nan", "null", "none", "nil", "<na>", "#n/a", "-", "?", "."}
)


def _column_name(header: list[str] | None, j: int) -> str:
    """Column ``j`` as the messages name it: ``column 'co2'`` or ``column 3``."""
    return f"column {header[j]!r}" if header is not None else f"column {j}"


def _column_label(header: list[str] | None, j: int) -> str:
    """Column ``j`` as ``--columns`` takes it: its name (quoted when it holds a space) or
    its index."""
    if header is None:
        return str(j)
    name = header[j]
    return name if name and " " not in name else repr(name)


def _warn_time_columns(
    path: str, header: list[str] | None, usecols: list[int], values: np.ndarray
) -> None:
    """Warn about columns read as data that are a time axis, a calendar or a row index:
    :func:`dpnets.states.time_columns`. A trend no stationary model follows, and not the
    user's intent: the warning names the other columns to read and ``--dt``."""
    if len(usecols) < 2:
        return
    import warnings

    names = None if header is None else [header[j] for j in usecols]
    found = {usecols[k]: why for k, why in time_columns(values, names).items()}
    if not found:
        return
    keep = [_column_label(header, i) for i in usecols if i not in found]
    what = "; ".join(f"{_column_name(header, j)} {why}" for j, why in found.items())
    remedy = (
        f"leave {'it' if len(found) == 1 else 'them'} out with --columns {' '.join(keep)} "
        f"(columns={keep!r} in Python) and give the time between rows as --dt (dt=)"
        if keep
        else "read the columns that hold the state with --columns (columns=)"
    )
    warnings.warn(
        f"{path}: {what}: a time axis, calendar or row index, read as a coordinate of the "
        f"state (a trend no stationary model follows); {remedy}",
        UserWarning,
        stacklevel=5,
    )


def _is_index(text: str) -> bool:
    """Whether ``text`` is a whole number, a column index given as text (``"0"``, ``"-1"``)."""
    return re.fullmatch(r"[+-]?\d+", text.strip()) is not None


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _npy_reason(exc: BaseException) -> str:
    text = reason(exc)
    if "allow_pickle" in text or "pickle" in text.lower():
        return "holds pickled (object) data, which is never loaded"
    return text


def _import_h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("reading HDF5 files (.h5, .hdf5) needs h5py: pip install h5py") from exc
    return h5py


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
        a restarted run's repeated ``#! FIELDS`` header must name the same columns, and where
        its ``time`` goes back the rows it repeats are the continued run's; a ``time``
        column with rows missing is refused), or a ``.npy`` array of bias energies (1-D,
        one per frame; ``.npz``: its one array, or the array named by ``column``), or a
        ``.txt``/``.csv`` table read like a trajectory.
    column : str or int, optional
        The bias column, by name (``"metad.bias"``, ``"opes.bias"``) or 0-based index;
        ``"metad.bias+uwall.bias"``: the sum of these columns (the total bias of a run with
        several biasing actions, such as walls).
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
        are listed), the ``time`` column named as the bias, a row of the wrong width,
        non-numeric or non-finite values, rows missing (a gap in the ``time`` column).

    Warns
    -----
    UserWarning
        For a restarted run whose ``time`` goes back (PLUMED appends the continued run from
        its checkpoint): the earlier rows from that time on are dropped, the continued run's
        kept, as the engine's appended trajectory holds them, naming the line.
    """
    return read_bias_rows(path, column, temperature, units)[0]


def read_bias_rows(
    path: str | os.PathLike,
    column: str | int | None = None,
    temperature: float | None = None,
    units: str = "kJ/mol",
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(log_weights, times)``: :func:`read_log_weights` and the file's ``time`` column
    (PLUMED's, in ps unless ``UNITS TIME=``) after a restart's overlap is dropped, or None
    when the file has none (``.npy``, a table without a ``time`` header). The times let a
    caller match the rows to the frames of a trajectory (:func:`dpnets.workflow`'s
    ``--bias``)."""
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
    check_regular(path, "bias file")
    ext = extension(path)
    times = None
    if ext in _ARRAY_EXTS:
        energy = _bias_array(path, column)
    else:
        energy, times = _colvar_column(path, column)
    if energy.size == 0:
        raise DataFileError(path, "holds no bias values")
    bad = int(np.count_nonzero(~np.isfinite(energy)))
    if bad:
        first = int(np.argmax(~np.isfinite(energy)))
        raise DataFileError(
            path, f"the bias holds {bad} NaN or inf value(s) (first in data row {first + 1})"
        )
    return beta * energy, times


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
        raise DataFileError(path, f"cannot read: {reason(exc)}") from exc
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


def _colvar_column(path: str, column: str | int | None) -> tuple[np.ndarray, np.ndarray | None]:
    """One column of a PLUMED ``COLVAR`` file (``#! FIELDS`` header), or of a plain table,
    and its ``time`` column (None when it has none), a restart's overlap dropped
    (:func:`_drop_restart_overlap`)."""
    fields: list[str] | None = None
    rows: list[tuple[int, str]] = []  # (line number in the file, text)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                if line.startswith("#! FIELDS"):
                    names = line.split()[2:]
                    if fields is not None and names != fields:
                        raise DataFileError(
                            path,
                            f"line {number}: a later '#! FIELDS' header names other columns "
                            f"({' '.join(names)}) than the first ({' '.join(fields)})",
                        )
                    fields = names
                elif line.strip() and not line.lstrip().startswith("#"):
                    rows.append((number, line))
    except OSError as exc:
        raise DataFileError(path, f"cannot read: {reason(exc)}") from exc
    if fields is None and rows and "," in rows[0][1]:
        fields = [c.strip() for c in rows[0][1].split(",")]
        if all(_is_number(c) for c in fields):
            fields = None
        else:
            rows = rows[1:]
    parts: list[str | int | None] = [column]
    if isinstance(column, str) and "+" in column:  # a sum of columns, by name or index
        parts = [int(c) if c.strip().isdigit() else c.strip() for c in column.split("+")]
    indices = [_bias_index(path, fields, part) for part in parts]
    for index in indices:
        if fields is not None and fields[index] == "time":
            raise DataFileError(
                path, f"column {index} is the time, not a bias; columns: {', '.join(fields)}"
            )
    t_index = fields.index("time") if fields is not None and "time" in fields else None
    values = np.empty(len(rows))
    times = np.empty(len(rows)) if t_index is not None else None
    for k, (number, row) in enumerate(rows):
        cells = row.replace(",", " ").split()
        if fields is not None and len(cells) != len(fields):
            raise DataFileError(
                path, f"line {number} has {len(cells)} values for {len(fields)} columns"
            )
        try:
            values[k] = sum(float(cells[index]) for index in indices)
            if times is not None:
                times[k] = float(cells[t_index])
        except (IndexError, ValueError):
            raise DataFileError(
                path, f"line {number}: no number in the bias or time column ({row.strip()[:60]!r})"
            ) from None
    if times is None:
        return values, None
    lines = np.array([number for number, _ in rows], dtype=np.int64)
    keep = _drop_restart_overlap(path, times, lines)
    values, times, lines = values[keep], times[keep], lines[keep]
    _check_no_gap(path, times, lines)
    return values, times


def _drop_restart_overlap(path: str, times: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """The rows to keep of a ``COLVAR`` whose ``time`` goes back: a restarted run appends
    from its checkpoint, and the rows it repeats are replaced by its own (those the engine's
    appended trajectory holds), with a warning naming the line. A NaN time is refused."""
    if not np.all(np.isfinite(times)):
        first = int(np.argmax(~np.isfinite(times)))
        raise DataFileError(path, f"line {lines[first]}: the time is not a number")
    back = np.flatnonzero(np.diff(times) <= 0.0) + 1
    if back.size == 0:
        return np.arange(times.shape[0])
    keep = np.ones(times.shape[0], dtype=bool)
    dropped = 0
    for k in back:
        # rows before k from the restart time on: superseded by the continued run
        earlier = np.flatnonzero(keep[:k] & (times[:k] >= times[k]))
        dropped += earlier.size
        keep[earlier] = False
    first = int(back[0])
    times_back = "" if back.size == 1 else f", {back.size} times"
    warnings.warn(
        f"{path}: line {lines[first]}: the time goes back from {times[first - 1]:g} to "
        f"{times[first]:g} (a restarted run appended{times_back}): "
        f"the {dropped} earlier row(s) it repeats are dropped and the continued run's kept, as "
        "in an appended trajectory; check that the trajectory holds the same frames",
        UserWarning,
        stacklevel=4,
    )
    return np.flatnonzero(keep)


def _check_no_gap(path: str, times: np.ndarray, lines: np.ndarray) -> None:
    """Refuse a ``COLVAR`` with rows missing: a step of its ``time`` column longer than 1.5
    of its usual (median) step, which would shift every later bias value against the
    trajectory's frames."""
    if times.shape[0] < 3:
        return
    steps = np.diff(times)
    usual = float(np.median(steps))
    bad = np.flatnonzero(np.abs(steps - usual) > 0.01 * usual)
    if bad.size:
        k = int(bad[0])
        raise DataFileError(
            path,
            f"line {lines[k + 1]}: the time steps from {times[k]:g} to {times[k + 1]:g}, "
            f"where the rows are {usual:g} apart elsewhere: rows are missing or the printing "
            "stride changed, and the bias would no longer line up with the frames; give "
            "the bias of every frame, one row each, equally spaced",
        )


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
                f"'.bias'); columns: {', '.join(fields)}"
                + (
                    f"; the total bias of several actions is their sum: "
                    f"{'+'.join(fields[k] for k in biases)}"
                    if biases
                    else ""
                ),
            )
        return biases[0]
    if str(column) not in fields:
        raise DataFileError(path, f"no column {column!r}; columns: {', '.join(fields)}")
    return fields.index(str(column))
