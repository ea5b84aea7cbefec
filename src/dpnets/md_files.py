"""Reading molecular-dynamics trajectories: mdtraj first, MDAnalysis where mdtraj cannot.

:func:`dpnets.datasets.read_trajectories` hands every molecular-dynamics file here through
:class:`MDReading`, the part of its reader that knows topologies and atoms:

- ``.xtc`` / ``.trr`` / ``.dcd`` / ``.nc`` / ``.ncdf`` / ``.netcdf`` / ``.mdcrd`` are loaded
  by mdtraj with the reader's topology (:func:`load_topology`: mdtraj's, or, for the
  topologies mdtraj does not know, GROMACS ``.tpr`` and ``.top``, MDAnalysis' rebuilt atom
  for atom; MDAnalysis is optional, the ``files`` extra; Amber residues numbered from 1);
- a trajectory of another number of atoms than the topology is refused naming both; an
  XTC/TRR that mdtraj cannot read to its end (truncated or corrupted) gives its whole
  frames before the first bad one, with a warning; another file mdtraj cannot read is
  read by MDAnalysis and converted to an mdtraj ``Trajectory`` (Å → nm), with a warning;
- an mdtraj HDF5 file (``/coordinates`` and ``/topology``) is read with h5py only
  (:meth:`MDReading._read_mdtraj_hdf5`; mdtraj's own reader would need PyTables);
- the DCD time step comes from the file's header, and a DCD holding
  fewer frames than its header announces gives the frames it holds, with a warning;
- from the trajectory, the selected atoms (:func:`select_atoms`) give either their positions
  and atomic numbers, or the features of :mod:`dpnets.md_features` (dihedrals, distances,
  Cartesians superposed on a reference), fixed by the first file read.

What each MD feature *is* (its atoms, its name, how it is computed) is
:mod:`dpnets.md_features`; this module only reads files. Every problem raises
:class:`dpnets.file_errors.DataFileError`, one line naming the file.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import struct
import sys
import warnings
from typing import Any

import numpy as np

from dpnets.file_errors import DataFileError, check_regular, extension, reason

__all__ = ["MD_EXTENSIONS", "MDReading", "load_topology", "select_atoms", "quiet_c_stdout"]

#: The molecular-dynamics trajectory extensions (an mdtraj HDF5 file is recognised by its
#: content, among the ``.h5`` files).
MD_EXTENSIONS = (".xtc", ".trr", ".dcd", ".nc", ".ncdf", ".netcdf", ".mdcrd")
# Formats whose frames carry their simulation time (mdtraj reads DCD times as 0, 1, 2, ...:
# the DCD time step comes from its header; .mdcrd stores no time).
_MD_TIMED_EXTS = (".xtc", ".trr", ".nc", ".ncdf", ".netcdf")
# mdtraj's loaders of these extensions (``md.load`` does not dispatch ``.ncdf``)
_MDTRAJ_LOADERS = {".ncdf": "load_netcdf", ".nc": "load_netcdf", ".netcdf": "load_netcdf"}
# Topologies mdtraj reads (others go to MDAnalysis when it is installed)
_MDTRAJ_TOPOLOGIES = (
    ".pdb", ".pdb.gz", ".pdbx", ".cif", ".gro", ".prmtop", ".parm7", ".psf", ".mol2",
    ".hoomdxml", ".h5", ".lh5", ".xml",
)  # fmt: skip
#: the end of the warning of a trajectory whose time per frame cannot be known
NO_TIME_STEP = "the time per frame is unknown"
# Why a format without frame times has none (DCD: when its header has no time step)
_NO_TIMES = {
    ".mdcrd": "an Amber .mdcrd file stores no frame times",
    ".dcd": "its DCD header stores no time step (DELTA = 1 AKMA: the placeholder of VMD's "
    "and mdtraj's writers)",
}
# Topologies that store no residue numbers: mdtraj numbers their residues from 0, Amber's
# own tools (cpptraj's ``:1``, ambpdb), VMD and MDAnalysis from 1
_NUMBERED_FROM_ONE = (".prmtop", ".parm7", ".prm7")
# One AKMA time unit (DCD's DELTA) in ps, as MDAnalysis converts it
_AKMA_PS = 4.888821e-2
#: its relative precision (half its last digit)
_AKMA_REL = 0.5e-8 / _AKMA_PS


class MDReading:
    """The molecular-dynamics half of the trajectory reader of :mod:`dpnets.datasets`.

    A mixin: the reader (``datasets._Reader``) inherits it, calls :meth:`_read_md` for an MD
    extension and :meth:`_read_mdtraj_hdf5` for an mdtraj HDF5 file, and at the end
    :meth:`_common_atomic_numbers` and :meth:`_apply_cutoff`. The reader provides ``stride``,
    ``data``, ``sources``, ``names`` (one entry per trajectory) and ``_add(source, array, dt,
    strided=...)``, which checks and appends one trajectory.

    What it holds, set by :meth:`_init_md` (and ``torsions``, ``cutoff``, ``reference_path``
    by :func:`dpnets.datasets.read_trajectories`):

    ``topology_path``, ``selection``, ``features``
        The topology file (loaded once, by mdtraj), the atoms to keep, and what to compute
        from them (``"positions"`` or a kind of :mod:`dpnets.md_features`).
    ``atomic_numbers``
        ``(source, numbers)`` of each file read as positions; all must agree.
    ``md_features``
        The :class:`dpnets.md_features.MDFeatures` of the first MD file (the later files
        reuse it: every file has the same atoms).
    ``fit_features``
        A fit's ``features.json`` (new files given to a fit), or None: the features are
        then the fit's (:meth:`dpnets.md_features.MDFeatures.like_fit`: its distance pairs,
        whatever the cut-off, and its Cartesian reference).
    ``any_md``
        Whether an MD file was read (times are then in ps).
    """

    stride: int
    data: list[np.ndarray]
    sources: list[str]
    names: list[list[str] | None]

    def _init_md(self, topology: str | os.PathLike | None, features: str, selection: str) -> None:
        self.topology_path = None if topology is None else os.fspath(topology)
        self.features = "positions" if features == "raw" else features
        self.selection = selection
        self._topology: Any = None
        self.atomic_numbers: list[tuple[str, np.ndarray]] = []
        self.any_md = False
        self.torsions: list[str] = ["phi", "psi"]
        self.cutoff: float | None = None
        self.reference_path: str | None = None
        self.md_features: Any = None  # the MDFeatures of the first MD file
        self.fit_features: dict[str, Any] | None = None  # a fit's features.json: its features

    def _common_atomic_numbers(self) -> np.ndarray | None:
        """The atomic numbers of the positions read (None when none), the same in every file."""
        if not self.atomic_numbers:
            return None
        s0, z0 = self.atomic_numbers[0]
        for s, z in self.atomic_numbers[1:]:
            if not np.array_equal(z, z0):
                raise DataFileError(s, f"atomic numbers differ from {s0}'s")
        return z0

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

    def _read_mdtraj_hdf5(self, path: str, fh: Any) -> None:
        """An mdtraj HDF5 trajectory from its open h5py file ``fh``: positions (Å → nm when
        stored in Å), times, cell, and the stored topology or the reader's."""
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
            raise DataFileError(path, f"cannot read: {reason(exc)}") from exc
        self._add_md(path, traj, md, timed=time is not None)

    def _load_topology(self, md: Any) -> Any:
        """The reader's topology file, loaded once (:func:`load_topology`)."""
        if self._topology is None:
            top_path = self.topology_path
            assert top_path is not None
            if not os.path.exists(top_path) or os.path.isdir(top_path):
                raise DataFileError(top_path, "no such topology file")
            check_regular(top_path, "topology file")
            try:
                self._topology = load_topology(top_path)
            except DataFileError:
                raise
            except Exception as exc:
                raise DataFileError(top_path, f"cannot read topology: {reason(exc)}") from exc
        return self._topology

    def _read_md(self, path: str) -> None:
        """Read one MD trajectory file with mdtraj, on the topology :func:`load_topology`
        gives (mdtraj's, or MDAnalysis' for GROMACS ``.tpr``/``.top``); a file mdtraj fails
        on: :meth:`_read_damaged`. The DCD time step from its header."""
        ext = extension(path)
        if self.topology_path is None:
            raise DataFileError(
                path, f"a topology file is needed for {ext} trajectories (topology=...)"
            )
        md = _import_mdtraj()
        top = self._load_topology(md)
        dt = None
        try:
            with warnings.catch_warnings(), quiet_c_stdout(stderr=True):
                warnings.simplefilter("ignore")
                load = getattr(md, _MDTRAJ_LOADERS[ext]) if ext in _MDTRAJ_LOADERS else md.load
                traj = load(path, top=top, stride=self.stride)
        except Exception as exc:
            traj = self._read_damaged(md, path, top, exc)
        if ext == ".dcd":
            dt = _check_dcd(path, md, traj.n_frames, self.stride)
            _charmm_box(path, traj, self.stride)
        self._add_md(path, traj, md, timed=ext in _MD_TIMED_EXTS, dt=dt)

    def _read_damaged(self, md: Any, path: str, top: Any, exc: Exception) -> Any:
        """A trajectory file mdtraj failed on (``exc``): a file of another number of atoms
        than the topology refused, naming both; an XTC/TRR read frame by frame up to the
        first frame that cannot be read (a truncated or corrupted file: its whole frames
        before it, with a warning; MDAnalysis' reader crashes the process with a floating
        point exception on some corrupted XTC frames); another format through MDAnalysis,
        with a warning."""
        ext = extension(path)
        n_file = _atoms_in_file(md, path)
        if n_file is not None and n_file != top.n_atoms:
            if n_file > top.n_atoms:
                fix = (
                    "give the topology of the whole system it holds (solvent and ions "
                    "included), or strip the trajectory to the topology's atoms (gmx trjconv "
                    "-n, cpptraj strip)"
                )
            else:
                fix = (
                    "give the topology of the atoms it was written with (a dry or stripped "
                    "one), or strip the topology to them (gmx convert-tpr -n, cpptraj "
                    "parmstrip)"
                )
            raise DataFileError(
                path,
                f"holds {n_file} atoms a frame, but the topology {self.topology_path} has "
                f"{top.n_atoms}: {fix}",
            ) from None
        if ext in _XDR_FILES:
            traj, n_read, failure = _read_whole_xdr_frames(md, path, top, self.stride)
            if traj is None:
                raise DataFileError(
                    path,
                    f"cannot read its first frame ({failure or reason(exc)}): a "
                    f"corrupted file, or not a {ext} file",
                ) from None
            if failure is not None:
                warnings.warn(
                    f"{path}: frame {n_read + 1} cannot be read ({failure}: a truncated or "
                    f"corrupted file); reading the {n_read} whole frames before it",
                    RuntimeWarning,
                    stacklevel=5,
                )
            return traj
        top_path = self.topology_path
        assert top_path is not None
        why = f"mdtraj cannot read it ({reason(exc)})"
        traj = _read_mdanalysis(md, top_path, path, self.stride, why, exc)
        warnings.warn(
            f"{path}: {why}; read through MDAnalysis instead ({traj.n_frames} frames; "
            "a truncated file gives the whole frames it holds)",
            RuntimeWarning,
            stacklevel=5,
        )
        return traj

    def _add_md(
        self, path: str, traj: Any, md: Any, *, timed: bool, dt: float | None = None
    ) -> None:
        """Append the positions or the features of one read trajectory (``timed``: its
        frames carry their times, else ``dt`` when known). A time per frame that cannot be
        known (times all equal or unevenly spaced, a format without times) is warned of
        (:data:`NO_TIME_STEP`)."""
        self.any_md = True
        if dt is None:
            if timed:
                dt, why = _timestep(traj.time)
            else:
                why = _NO_TIMES.get(extension(path), "the file stores no frame times")
            if why and traj.n_frames > 1:
                warnings.warn(
                    f"{path}: {why}: {NO_TIME_STEP} (timescales in frames); give it "
                    "(dpnets fit --dt, the estimators' dt=)",
                    RuntimeWarning,
                    stacklevel=5,
                )
        if self.features == "positions":
            atoms = self._select(path, traj.topology)
            _warn_split(path, traj, atoms, "positions")
            z = np.array([_atomic_number(traj.topology.atom(i)) for i in atoms], dtype=np.int64)
            xyz = np.ascontiguousarray(traj.xyz[:, atoms], dtype=np.float32)
            self._add(path, xyz, dt, strided=True)
            self.atomic_numbers.append((path, z))
            return
        spec = self._md_features(path, traj)
        if spec.kind == "cartesian":
            _warn_split(path, traj, spec.atoms, "superposed positions")
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
            if self.fit_features is not None:  # a fit's pairs, its reference
                spec = spec.like_fit(self.fit_features)
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
        ext = extension(path)
        try:
            with warnings.catch_warnings(), quiet_c_stdout(stderr=True):
                warnings.simplefilter("ignore")
                if ext in _MDTRAJ_LOADERS:  # a trajectory of the topology: its first frame
                    ref = md.load_netcdf(path, top=self._load_topology(md), frame=0)
                elif ext in MD_EXTENSIONS:
                    ref = md.load_frame(path, 0, top=self._load_topology(md))
                else:  # a structure file with its own atoms (.pdb, .gro, ...)
                    ref = md.load(path)[0]
        except DataFileError:
            raise
        except Exception as exc:
            raise DataFileError(
                path, f"cannot read the reference structure: {reason(exc)}"
            ) from exc
        if ref.n_atoms != traj.n_atoms:
            raise DataFileError(
                path, f"the reference has {ref.n_atoms} atoms; the trajectories have {traj.n_atoms}"
            )
        return np.asarray(ref.xyz[0], dtype=np.float64)

    def _select(self, path: str, top: Any) -> np.ndarray:
        return select_atoms(top, self.selection, source=path)


def load_topology(path: str) -> Any:
    """The mdtraj topology of file ``path``: read by mdtraj, or, for the topologies it
    cannot read (GROMACS ``.tpr`` and ``.top``, Amber's old ``.top``), by MDAnalysis
    (optional, the ``files`` extra) and rebuilt atom for atom. Residues are numbered as the
    file's own tools number them: an Amber ``.prmtop``/``.parm7`` stores no residue numbers,
    and mdtraj numbers its residues from 0 (``VAL0``); they are renumbered from 1
    (``VAL1``, mdtraj's ``resSeq``), as Amber (cpptraj's ``:1``, ambpdb), VMD and
    MDAnalysis number them, so that feature labels read as a chemist expects and atoms
    match a PDB of the same system by residue number. Other formats keep the numbers they
    store. The readers' exceptions propagate (the callers name the file)."""
    md = _import_mdtraj()
    if not _mdtraj_reads_topology(path):
        return _mdanalysis_topology(md, path)
    top = md.load_topology(path)
    if path.lower().endswith(_NUMBERED_FROM_ONE):
        for residue in top.residues:
            residue.resSeq = residue.index + 1
    return top


def select_atoms(top: Any, selection: str, source: str = "topology") -> np.ndarray:
    """0-based indices (int64) of the atoms of mdtraj topology ``top`` that ``selection``
    picks, as :func:`~dpnets.datasets.read_trajectories` selects them: ``"heavy"`` (all but
    hydrogens and virtual sites), ``"all"``, or any mdtraj selection string. A bad or empty
    selection raises :class:`~dpnets.datasets.DataFileError` naming ``source``; an empty one
    lists the residue and atom names the topology has as mdtraj reads it (mdtraj renames
    some of a file's names: Amber's ``WAT`` and CHARMM's ``TIP3`` to ``HOH``, ``OH2`` to
    ``O``, ``HT1`` to ``H``)."""
    try:
        if selection == "heavy":
            atoms = [a.index for a in top.atoms if _atomic_number(a) > 1]
        elif selection == "all":
            atoms = list(range(top.n_atoms))
        else:
            atoms = top.select(selection)
    except Exception as exc:
        quote = (
            "; quote names with symbols: resname 'Na+'"
            if any(c in selection for c in "+-*") and "'" not in selection
            else ""
        )
        raise DataFileError(
            source, f"bad atom selection {selection!r}: {reason(exc)}{quote}"
        ) from exc
    atoms = np.asarray(atoms, dtype=np.int64)
    if atoms.size == 0:
        raise DataFileError(
            source,
            f"atom selection {selection!r} matches no atom; the topology, as mdtraj reads "
            f"and renames it, has residues {_some_names(r.name for r in top.residues)} and "
            f"atoms {_some_names(a.name for a in top.atoms)}",
        )
    return atoms


def _some_names(names: Any, shown: int = 12) -> str:
    """The distinct ``names`` in order of appearance, the first ``shown`` of them."""
    distinct = list(dict.fromkeys(names))
    more = f", … ({len(distinct)} names)" if len(distinct) > shown else ""
    return ", ".join(distinct[:shown]) + more


# --------------------------------------------------------------------------------------------
# Helpers


def _timestep(time: np.ndarray | None) -> tuple[float | None, str | None]:
    """The time between the frames of times ``time`` (ps), or None and why not (None for
    fewer than 2 frames)."""
    if time is None or len(time) < 2:
        return None, None
    time = np.asarray(time, dtype=np.float64)
    if not np.all(np.isfinite(time)):
        return None, "its frame times are not finite"
    diffs = np.diff(time)
    if np.all(diffs == 0):
        return None, f"every frame has the time {time[0]:g} ps (the file stores no time step)"
    # the mean step; the formats store times in float32 (XTC, TRR, Amber NetCDF): a step
    # of 0.2 ps at 1 us is stored as 0.1875 or 0.25, within float32's spacing there
    dt = float(time[-1] - time[0]) / (len(time) - 1)
    spacing = 2.0 * float(np.spacing(np.float32(np.abs(time).max())))
    if dt <= 0 or np.any(np.abs(diffs - dt) > 1e-4 * abs(dt) + spacing + 1e-6):
        return None, (
            f"its frame times are not evenly spaced (steps from {diffs.min():g} to "
            f"{diffs.max():g} ps: runs joined without renumbering their times?)"
        )
    # the step with the fewest significant digits the stored times cannot tell from the
    # mean (0.2, not 0.20004 or 0.19983: chunks of one run then agree on it)
    return _fewest_digits(dt, spacing / (len(time) - 1)), None


def _fewest_digits(value: float, resolution: float) -> float:
    """``value`` with the fewest significant digits that stay within ``resolution`` of it
    (what the stored numbers cannot tell apart): 1.0 for 0.99999991 read from float32."""
    for digits in range(1, 17):
        nice = float(f"{value:.{digits}g}")
        if abs(nice - value) <= resolution:
            return nice
    return value


def _warn_split(path: str, traj: Any, atoms: np.ndarray, what: str) -> None:
    """Warn when the selected ``atoms`` are split across the periodic box in some frame:
    two of them in neighbouring residues of one chain (or one residue) farther apart than
    their minimum image (GROMACS writes molecules broken at the box's faces unless told
    otherwise): positions, superposed or not, are then those of pieces. Torsions and
    distances take the minimum image and need no whole molecules."""
    if traj.unitcell_lengths is None or len(atoms) < 2:
        return
    md = _import_mdtraj()
    top = traj.topology
    res = np.array([top.atom(int(a)).residue.index for a in atoms])
    chain = np.array([top.atom(int(a)).residue.chain.index for a in atoms])
    near = (np.abs(np.diff(res)) <= 1) & (chain[1:] == chain[:-1])
    if not near.any():
        return
    pairs = np.stack([atoms[:-1][near], atoms[1:][near]], axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        direct = md.compute_distances(traj, pairs, periodic=False)
        image = md.compute_distances(traj, pairs, periodic=True)
    split = direct > image + 0.1  # nm: a neighbour seen across the box
    if not split.any():
        return
    frames = int(split.any(axis=1).sum())
    f, k = np.argwhere(split)[0]
    a, b = (top.atom(int(x)) for x in pairs[k])
    warnings.warn(
        f"{path}: the selection is split across the periodic box in {frames} of "
        f"{traj.n_frames} frames ({a} and {b}, neighbours, {direct[f, k]:.2f} nm apart "
        f"through the box in frame {f}): its {what} are those of pieces, not of the "
        "molecule; make the molecules whole first (gmx trjconv -pbc mol, cpptraj "
        "autoimage) or use --features dihedrals or distances (minimum image)",
        RuntimeWarning,
        stacklevel=6,
    )


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


def _dcd_unit_cells(path: str, n_frames: int, stride: int) -> np.ndarray | None:
    """The six numbers of the unit cell block of the frames ``0, stride, ...`` (``n_frames``
    of them) of a CHARMM/NAMD DCD file, as stored (``[A, gamma, B, beta, alpha, C]`` or
    CHARMM's box matrix), or None when the file has no such block or a layout this reader
    does not know (fixed atoms)."""
    with open(path, "rb") as fh:
        head = fh.read(92)
        if len(head) < 92:
            return None
        order = next((o for o in "<>" if struct.unpack(o + "i4s", head[:8]) == (84, b"CORD")), None)
        if order is None:
            return None
        icntrl = struct.unpack(order + "20i", head[8:88])
        if icntrl[19] == 0 or icntrl[10] == 0 or icntrl[8] != 0:  # X-PLOR, no cell, fixed atoms
            return None
        size = struct.unpack(order + "i", fh.read(4))[0]  # the title block
        fh.seek(size + 4, os.SEEK_CUR)
        marker, n_atoms, end = struct.unpack(order + "3i", fh.read(12))
        if marker != 4 or end != 4:
            return None
        start = fh.tell()
        frame = 56 + 3 * (8 + 4 * n_atoms) + (8 + 4 * n_atoms) * (icntrl[11] == 1)
        cells = np.empty((n_frames, 6), dtype=np.float64)
        for i in range(n_frames):
            fh.seek(start + i * stride * frame)
            block = fh.read(56)
            if len(block) < 56 or struct.unpack(order + "i", block[:4])[0] != 48:
                return None
            cells[i] = struct.unpack(order + "6d", block[4:52])
    return cells


def _charmm_box(path: str, traj: Any, stride: int) -> None:
    """Set the unit cells of a DCD trajectory written by CHARMM in its box-matrix form
    (lower triangle of the symmetric box matrix, Å), which mdtraj's reader takes for
    lengths and angle cosines (a 3.5 nm triclinic water box read as 3.1 nm with angles of
    -2.6, 9.6 and 14.6 degrees, and minimum-image distances of 1.8e19 nm). The same
    test as MDAnalysis' reader: a cell is a box matrix where its angles are not cosines
    and some number is negative or an angle above 180."""
    try:
        raw = _dcd_unit_cells(path, traj.n_frames, stride)
    except (OSError, struct.error):
        return
    if raw is None:
        return
    uc = raw[:, [0, 2, 5, 4, 3, 1]]  # A, B, C, alpha, beta, gamma
    cosines = np.all(np.abs(uc[:, 3:]) <= 1.0, axis=1)
    matrix = ~cosines & (np.any(uc < 0.0, axis=1) | np.any(uc[:, 3:] > 180.0, axis=1))
    if not matrix.any():
        return
    vectors = np.stack([raw[:, [0, 1, 3]], raw[:, [1, 2, 4]], raw[:, [3, 4, 5]]], axis=1) / 10.0
    with warnings.catch_warnings():  # mdtraj's vectors of the misread cells: invalid
        warnings.simplefilter("ignore")
        if not matrix.all() and traj.unitcell_vectors is not None:
            vectors[~matrix] = traj.unitcell_vectors[~matrix]
        traj.unitcell_vectors = vectors.astype(np.float32)


def _dcd_header(path: str) -> tuple[int, int, float, bool] | None:
    """``(NSET, NSAVC, DELTA, CHARMM)`` of a DCD file's header (None when it is not a DCD
    header): the frames announced, the steps between saved frames and the time step in AKMA
    units (a float for CHARMM/NAMD files, ``CHARMM`` True, a double for X-PLOR ones, as
    MDAnalysis reads it)."""
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
    return icntrl[0], icntrl[2], float(delta), charmm


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
        raise DataFileError(path, f"cannot read: {reason(exc)}") from exc
    n_set, nsavc, delta, charmm = header
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
    if not (math.isfinite(dt) and dt > 0):
        return None
    # DELTA is a float32 (CHARMM, NAMD) and the AKMA unit has 7 digits: 1 ps is read as
    # 0.99999991 ps; the step with the fewest digits within what they can tell apart
    ulp = float(np.spacing(np.float32(delta) if charmm else np.float64(delta)))
    resolution = ulp * _AKMA_PS * max(nsavc, 1) * stride + dt * _AKMA_REL
    return _fewest_digits(dt, resolution)


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
    kwargs = _mdanalysis_topology_kwargs(top_path)
    failure = None
    with _quiet_finalizers():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                u = mda.Universe(top_path, path, **kwargs)
        except Exception as exc:  # its traceback holds the half-built reader: dropped here
            failure = (
                f"cannot read ({why}; MDAnalysis with {top_path}: {reason(exc)}): a truncated "
                f"or corrupted file, or not a {extension(path) or 'trajectory'} file?"
            )
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
        raise DataFileError(path, f"cannot read through MDAnalysis: {reason(exc)}") from exc


def _mdanalysis_topology_kwargs(top_path: str) -> dict[str, Any]:
    """MDAnalysis' arguments for topology file ``top_path``: a GROMACS ``.top`` is read as
    ``ITP`` with its ``#include`` files from ``$GMXLIB`` or its folder."""
    if extension(top_path) == ".top" and _gromacs_top(top_path):  # not Amber's .top
        return {
            "topology_format": "ITP",
            "include_dir": os.environ.get("GMXLIB", os.path.dirname(os.path.abspath(top_path))),
        }
    return {}


def _mdanalysis_topology(md: Any, top_path: str) -> Any:
    """The mdtraj topology of a topology file mdtraj cannot read, through MDAnalysis."""
    why = f"mdtraj cannot read {extension(top_path) or 'this'} topologies"
    mda = _import_mdanalysis(top_path, why)
    with _quiet_finalizers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = mda.Universe(top_path, **_mdanalysis_topology_kwargs(top_path))
    return _mdtraj_topology(md, u)


#: the XDR trajectories (GROMACS), read frame by frame after a failure
_XDR_FILES = (".xtc", ".trr")


def _atoms_in_file(md: Any, path: str) -> int | None:
    """The number of atoms of a trajectory file's first frame as mdtraj reads it (None
    when it cannot tell)."""
    ext = extension(path)
    try:
        with warnings.catch_warnings(), quiet_c_stdout(stderr=True):
            warnings.simplefilter("ignore")
            if ext in _MDTRAJ_LOADERS:
                with md.formats.NetCDFTrajectoryFile(path) as fh:
                    return int(fh.n_atoms)
            cls = {
                ".xtc": md.formats.XTCTrajectoryFile,
                ".trr": md.formats.TRRTrajectoryFile,
                ".dcd": md.formats.DCDTrajectoryFile,
            }.get(ext)
            if cls is None:
                return None
            with cls(path) as fh:
                xyz = fh.read(n_frames=1)[0]
            return int(xyz.shape[1]) if xyz.ndim == 3 and len(xyz) else None
    except Exception:  # noqa: BLE001 - unknown: the caller's own error says why
        return None


def _read_whole_xdr_frames(md: Any, path: str, top: Any, stride: int) -> tuple[Any | None, str]:
    """The frames of an XTC/TRR file that mdtraj reads one by one up to the first it cannot
    (every ``stride``-th), as a ``Trajectory`` (None when it reads none), and why it
    stopped."""
    cls = (
        md.formats.XTCTrajectoryFile if extension(path) == ".xtc" else md.formats.TRRTrajectoryFile
    )
    xyz, time, box, failure, i = [], [], [], None, 0
    with warnings.catch_warnings(), quiet_c_stdout(stderr=True):
        warnings.simplefilter("ignore")
        try:
            with cls(path) as fh:
                while True:
                    frame = fh.read(n_frames=1)
                    if not len(frame[0]):
                        break
                    if i % stride == 0:
                        xyz.append(frame[0][0])
                        time.append(float(frame[1][0]))
                        box.append(None if frame[3] is None else frame[3][0])
                    i += 1
        except Exception as exc:  # noqa: BLE001 - the frame that cannot be read
            failure = reason(exc)
    if not xyz:
        return None, i, failure
    traj = md.Trajectory(np.stack(xyz), top, time=np.asarray(time))
    if all(b is not None for b in box):
        boxes = np.stack(box)
        if np.all(np.linalg.norm(boxes, axis=2) > 0):
            traj.unitcell_vectors = boxes
    return traj, i, failure


@contextlib.contextmanager
def quiet_c_stdout(stderr: bool = False):
    """Within the block, what C code writes to the process's standard output is discarded:
    mdtraj's DCD plugin prints its diagnosis of a bad header ("dcdplugin) unrecognized DCD
    header: ...") there before raising, and the error we raise says it in one line.
    ``stderr``: the standard error too (mdtraj's XDR library prints "(xdrfile error) ..."
    there); Python's own writes to ``sys.stderr`` in the block are lost with it."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_quiet_fd(sys.stdout))
        if stderr:
            stack.enter_context(_quiet_fd(sys.stderr))
        yield


@contextlib.contextmanager
def _quiet_fd(stream: Any):
    """Within the block, what is written to the file descriptor of ``stream`` is dropped."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # no real stream (a notebook): nothing to do
        yield
        return
    stream.flush()
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


def _import_mdtraj() -> Any:
    try:
        import mdtraj
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading molecular-dynamics trajectories needs mdtraj: pip install mdtraj"
        ) from exc
    return mdtraj
