"""Learned slow modes in the molecular-dynamics engines: a ``dpnets fit`` folder exported
for the engine's own topology, and the engine-side recipes (``plumed.dat``, an OpenMM-Torch
script, a tabulated OpenMM force for CPU-only OpenMM).

:func:`export_fit` (``dpnets export``) makes the TorchScript file of :func:`dpnets.export`
take what the engine computes:

* ``inputs="positions"``: the engine's positions ``(n_atoms, 3)`` in nm, all its atoms in its
  topology's order (hydrogens and solvent included); the fit's features (torsions of any
  kind as sin/cos, distances, Cartesian coordinates superposed on the fit's reference, an
  atom selection) are computed inside, with periodic images when
  the engine passes the box vectors (OpenMM-Torch with
  ``setUsesPeriodicBoundaryConditions(True)``); an OpenMM-Torch recipe is written;
* ``inputs="features"``: the torsions (radians) or distances (nm) that PLUMED's
  ``TORSION``/``DISTANCE`` compute, and a ``plumed.dat`` defining them.

The atoms are matched from the fit's topology to the engine's (``topology=``) by chain,
residue (name and number) and atom name, never by index (:func:`match_atoms`): a fit on a
heavy-atom topology exported for an all-atom engine gets the all-atom indices, and an atom
the engine lacks is refused by name.
"""

from __future__ import annotations

import glob
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpnets.export import (
    CLI_REMEDIES,
    AtomSelection,
    ExportError,
    PositionCartesian,
    PositionDistances,
    PositionTorsions,
    TorsionInputs,
    export,
    read_metadata,
)
from dpnets.io import atomic_write

__all__ = [
    "export_fit",
    "match_atoms",
    "openmm_torch_cv",
    "openmm_torsion_cv",
    "INPUTS",
    "N_EXAMPLES",
]

#: what an exported MD fit can take (``dpnets export --input``)
INPUTS = ("auto", "features", "positions")


# ------------------------------------------------------------------------------ topologies
def _load_topology(path: str, what: str) -> tuple[Any, Any, str]:
    """``(mdtraj, topology, absolute path)``; ExportError (one line) when it cannot be read."""
    try:
        import mdtraj as md
    except ImportError as err:
        raise ExportError(
            "exporting a molecular-dynamics fit needs mdtraj: pip install 'dpnets[md]'"
        ) from err
    if not path:
        raise ExportError(f"{what}: not given")
    found = Path(path).expanduser()
    if not found.is_file():
        raise ExportError(f"{path}: {what} not found")
    from dpnets.datasets import load_topology

    try:
        top = load_topology(str(found))  # Amber's residues numbered from 1
    except Exception as err:  # noqa: BLE001 - any reader failure: one line naming the file
        raise ExportError(f"{found}: cannot read {what} ({' '.join(str(err).split())})") from err
    return md, top, str(found.resolve())


def _chain_keys(*tops: Any) -> bool:
    """Whether every chain of the topologies has a chain identifier (else chains are matched
    by their position)."""
    return all(str(getattr(c, "chain_id", "") or "").strip() for t in tops for c in t.chains)


def _key(atom: Any, by_id: bool) -> tuple:
    chain = atom.residue.chain
    c = str(chain.chain_id).strip() if by_id else chain.index
    return (c, atom.residue.name, int(atom.residue.resSeq), atom.name)


def _atom_label(top: Any, i: int) -> str:
    a = top.atom(int(i))
    return f"{a.residue.name}{a.residue.resSeq}-{a.name}"


def match_atoms(
    source: Any,
    target: Any,
    atoms: Sequence[int],
    *,
    source_name: str = "the fit's topology",
    target_name: str = "the engine topology",
) -> np.ndarray:
    """0-based indices in mdtraj topology ``target`` of the ``atoms`` of ``source``.

    Atoms are matched by chain (its identifier where every chain of both topologies has
    one, else its position), residue name and number, and atom name, never by index. Where
    chains are matched by position and an atom is not found (``target`` written with its
    solvent or a ligand first), all the atoms are matched by residue name and number and
    atom name alone, each the only such atom in either topology, else the first refusal
    stands. An atom of ``source`` that ``target`` lacks, or holds twice, raises
    :class:`ExportError` naming it.
    """
    by_id = _chain_keys(source, target)
    try:
        return _matched(source, target, atoms, by_id, source_name, target_name, loose=False)
    except ExportError as strict:
        if by_id:
            raise
        refusal = strict
    try:  # every atom by residue and atom name alone, each the only one
        return _matched(source, target, atoms, by_id, source_name, target_name, loose=True)
    except ExportError:
        raise refusal from None


def _matched(
    source: Any,
    target: Any,
    atoms: Sequence[int],
    by_id: bool,
    source_name: str,
    target_name: str,
    *,
    loose: bool,
) -> np.ndarray:
    """:func:`match_atoms` by chain, residue and atom name, or ``loose``: by residue and
    atom name alone, each atom the only one of its name in either topology."""

    def key(a: Any) -> tuple:
        k = _key(a, by_id)
        return k[1:] if loose else k

    index: dict[tuple, int] = {}
    twice: set[tuple] = set()
    for a in target.atoms:
        k = key(a)
        if k in index:
            twice.add(k)
        index[k] = a.index
    in_source: dict[tuple, int] = {}
    if loose:
        for a in source.atoms:
            in_source[key(a)] = in_source.get(key(a), 0) + 1
    out = []
    for i in atoms:
        a = source.atom(int(i))
        k = key(a)
        where = (
            f"atom {a.name} of residue {a.residue.name}{a.residue.resSeq} "
            f"(chain {_key(a, by_id)[0]!r}) of {source_name}"
        )
        if k not in index:
            how = "chain" if by_id else "chain (by position: a topology without chain IDs)"
            raise ExportError(
                f"{target_name} has no {where}; atoms are matched by {how}, residue name and "
                "number, and atom name"
            )
        if k in twice or in_source.get(k, 1) > 1:
            raise ExportError(f"{target_name} holds the {where} more than once")
        out.append(index[k])
    return np.asarray(out, dtype=np.int64)


#: the most frames of the fit's data an exported file is checked on
N_EXAMPLES = 64


def _spread(n: int) -> np.ndarray:
    """Up to :data:`N_EXAMPLES` indices spread evenly over ``n`` frames."""
    return np.unique(np.linspace(0, n - 1, min(n, N_EXAMPLES)).round().astype(np.int64))


def _fit_frames(md: Any, data: dict[str, Any], top_path: str, atoms: np.ndarray) -> Any:
    """Positions (nm, float64) of the fit topology's ``atoms`` in up to :data:`N_EXAMPLES`
    frames spread over the fit's first trajectory file (read as ``dpnets fit`` read it:
    mdtraj, else MDAnalysis), else the topology's own coordinates (one frame), else None:
    the states the exported file is checked on."""
    from dpnets.datasets import quiet_c_stdout, read_trajectories

    atoms = np.asarray(atoms, dtype=np.int64)
    for pattern in data.get("paths") or []:
        files = sorted(glob.glob(str(pattern), recursive=True))
        if not files:
            continue
        with warnings.catch_warnings(), quiet_c_stdout():
            warnings.simplefilter("ignore")
            try:
                with md.open(files[0]) as fh:
                    stride = max(1, len(fh) // N_EXAMPLES)
                xyz = md.load(files[0], top=top_path, stride=stride, atom_indices=atoms).xyz
            except Exception:  # noqa: BLE001 - the fit's reader knows more formats
                try:
                    trajs = read_trajectories(
                        [files[0]], topology=top_path, features="positions", selection="all"
                    )
                    xyz = trajs.data[0][:, atoms]
                except Exception:  # noqa: BLE001 - the topology's own coordinates
                    break
        if len(xyz):
            return np.asarray(xyz[_spread(len(xyz))], dtype=np.float64)
    try:
        with warnings.catch_warnings(), quiet_c_stdout():
            warnings.simplefilter("ignore")
            return np.asarray(md.load(top_path).xyz[:, atoms], dtype=np.float64)
    except Exception:  # noqa: BLE001
        return None


def _in_topology(xyz: np.ndarray, atoms: np.ndarray, n_atoms: int) -> np.ndarray:
    """Positions ``xyz (k, len(atoms), 3)`` placed at ``atoms`` of a topology of ``n_atoms``
    (the others at the origin: no exported feature reads them)."""
    out = np.zeros((len(xyz), n_atoms, 3))
    out[:, atoms] = xyz
    return out


def _data_examples(data: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray | None:
    """Up to :data:`N_EXAMPLES` states spread over the first file of a fit on non-MD data
    (read as ``dpnets fit`` read it), else None."""
    from dpnets.datasets import read_trajectories

    for pattern in data.get("paths") or []:
        files = sorted(glob.glob(str(pattern), recursive=True))
        if not files:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trajs = read_trajectories(
                    [files[0]], keys=data.get("keys") or None, columns=data.get("columns") or None
                )
        except Exception:  # noqa: BLE001 - no examples: the file is checked by estimate
            return None
        x = trajs.data[0]
        if tuple(x.shape[1:]) != shape or not len(x):
            return None
        return np.asarray(x[_spread(len(x))], dtype=np.float64)
    return None


# ------------------------------------------------------------------------------ export_fit
def export_fit(
    fit: str | os.PathLike,
    out: str | os.PathLike,
    modes: Sequence[int] | int = (1,),
    dtype: torch.dtype | None = None,
    *,
    inputs: str = "auto",
    topology: str | os.PathLike | None = None,
    temperature: float | None = None,
    complex_parts: bool = False,
) -> list[str]:
    """``dpnets export``: export a fit folder's (or model file's) slow modes for an engine.

    For a folder written by ``dpnets fit`` on molecular-dynamics files, the exported module
    (:func:`dpnets.export.export`) takes what the engine computes, and a recipe is written
    next to ``out``:

    * ``inputs="positions"`` (the default for ``features = "positions"`` fits): the
      positions of *all* the atoms of the engine topology in nm, ``(n_atoms, 3)`` or
      ``(B, n_atoms, 3)``, in its atom order, and optionally the periodic box vectors
      ``(3, 3)`` as a second argument (OpenMM-Torch's ``boxvectors``); the fit's features
      are computed inside: torsions as ``sin``/``cos`` (mdtraj's sign convention,
      :class:`dpnets.export.PositionTorsions`), distances
      (:class:`dpnets.export.PositionDistances`), Cartesian coordinates superposed on the
      fit's reference (:class:`dpnets.export.PositionCartesian`; the default for
      ``cartesian`` fits) or the atom selection (:class:`dpnets.export.AtomSelection`). An
      OpenMM-Torch recipe (``openmm_torch_recipe.py``) is written.
    * ``inputs="features"`` (the default for dihedral and distance fits): the raw torsions
      in radians (in the fit's order of kinds) or the distances in nm that PLUMED computes;
      ``plumed.dat`` defines them (``TORSION``/``DISTANCE`` with the engine topology's
      1-based indices), loads the file by its absolute path with ``PYTORCH_MODEL`` and
      sketches ``OPES_METAD``/``METAD`` on the slowest mode with ``TEMP`` and ``SIGMA``.

    The features are those of the fit folder's ``features.json`` (kinds, atoms, names, the
    Cartesian reference); a folder written before it exists exports backbone phi/psi or all
    the selection's pairs, as ``dpnets fit`` then computed them, and a Cartesian fit without
    it is refused. Cartesian fits do not export to PLUMED (``--input features`` is refused
    in one line naming ``--input positions``).

    The engine topology (``topology``, default: the fit's) decides the indices: the fit's
    atoms are matched to it by chain, residue and atom name (:func:`match_atoms`), so a
    heavy-atom fit exported for an all-atom engine gets the all-atom indices, and a missing
    atom is refused by name. Other fits (and model files) export on the model's own states.

    The file is checked against the model on up to :data:`N_EXAMPLES` frames spread over
    the fit's first file (:func:`dpnets.export.export`'s ``example``): float32 where it
    agrees within :data:`dpnets.export.FLOAT32_TOLERANCE` of the CV's range, else float64
    (``dtype=None``, the default; the metadata's ``precision`` says which and why). A complex
    mode is refused by name unless ``complex_parts``. Refusals name the command line's
    options (``--precision``, ``--complex-parts``, ``--modes``).

    Parameters
    ----------
    fit : path
        A folder written by ``dpnets fit``, or a model file.
    out : path
        The TorchScript file to write (missing folders are created).
    modes : int or sequence of int, default (1,)
        The eigenfunctions to export (1 is the slowest non-constant one).
    dtype : None, torch.float32 or torch.float64, default None
        The precision computed inside (None: float32 where it agrees with the model, else
        float64); the result comes back in the input's dtype, so a float64 file runs under
        PLUMED (which feeds float32).
    inputs : {"auto", "features", "positions"}
        What the file takes (above).
    topology : path, optional
        The engine's topology (PDB, ...); default the fit's.
    temperature : float, optional
        The simulation's temperature in K for the ``plumed.dat`` sketches; without it they
        carry a placeholder that PLUMED refuses until it is set.
    complex_parts : bool, default False
        Export a complex mode as two outputs, its real and imaginary parts
        (``--complex-parts``); False refuses complex modes.

    Returns
    -------
    list of str
        The files written (the model first).
    """
    from dpnets.fitfolder import WorkflowError, read_fit
    from dpnets.io import load

    if inputs not in INPUTS:
        raise ExportError(f"--input {inputs!r}: expected one of {', '.join(INPUTS)}")
    if temperature is not None and not (np.isfinite(temperature) and temperature > 0):
        raise ExportError(f"--temperature {temperature!r}: must be a positive number of kelvin")
    fit = Path(fit)
    out = Path(out)
    if fit.is_dir():
        try:
            model_path, config = read_fit(fit)
        except WorkflowError as err:
            raise ExportError(str(err)) from None
        data = config["data"]
    elif fit.is_file():
        model_path, data = fit, {}
    else:
        raise ExportError(f"{fit}: no such fit folder or model file")
    _check_out(out, fit, Path(model_path), data, topology)
    model = load(model_path)
    # the unit of the fit's timescales (a folder's config stores it unless it is frames)
    unit = str(data.get("time_unit") or "frames") if fit.is_dir() else None

    def export_model(out: Path, **kw: Any) -> dict[str, Any]:
        """:func:`dpnets.export.export` of the fit's model, refusals naming CLI options."""
        if unit is not None:
            kw["metadata"] = {"time_unit": unit, **(kw.get("metadata") or {})}
        meta = export(
            model, out, modes, dtype, complex_parts=complex_parts, remedies=CLI_REMEDIES, **kw
        )
        if fit.is_dir() and not meta["precision"]["checked_on"]:
            paths = ", ".join(str(p) for p in data.get("paths") or []) or "none recorded"
            warnings.warn(
                f"{out} was not checked against the model on any state: the fit's data "
                f"({paths}) could not be read (moved or deleted?): its {meta['dtype']} "
                "precision was not measured; put the data back to check it",
                UserWarning,
                stacklevel=3,
            )
        return meta

    kind = str(data.get("features") or "raw")
    shape = tuple(getattr(model, "state_shape_", ()))
    if kind == "raw" and data.get("topology") and len(shape) == 2 and shape[1] == 3:
        kind = "positions"  # MD files read with features="raw" are atom positions
    md_fit = bool(data.get("topology")) and kind in _MD_KINDS
    source = str(fit.resolve())
    if not md_fit:
        if inputs == "positions" or topology is not None:
            raise ExportError(
                f"{fit}: --input positions and --topology need a dpnets fit on molecular-"
                "dynamics files (dpnets fit --topology ...); this model takes its own states"
            )
        ex = _data_examples(data, shape) if data else None
        export_model(out, example=ex, metadata={"source": source})
        return [str(out)]
    if kind == "positions" and inputs == "features":
        raise ExportError(
            f"{fit}: a fit on positions takes positions; --input features is for dihedral "
            "and distance fits (PLUMED's TORSION and DISTANCE)"
        )
    if kind == "cartesian" and inputs == "features":
        raise ExportError(
            f"{fit}: PLUMED has no action giving Cartesian coordinates superposed on a "
            "reference as dpnets fit computed them; export with --input positions (the file "
            "superposes inside; OpenMM-Torch)"
        )
    positions_in = kind in ("positions", "cartesian") or inputs == "positions"
    spec = _features_json(fit) if fit.is_dir() else None
    if kind == "cartesian" and spec is None:
        raise ExportError(
            f"{fit}: a Cartesian fit without features.json (the reference it superposes on); "
            "refit it with dpnets fit --features cartesian"
        )
    md, fit_top, fit_path = _load_topology(str(data["topology"]), "the fit's topology file")
    if topology is None:
        eng_top, eng_path = fit_top, fit_path
    else:
        _, eng_top, eng_path = _load_topology(str(topology), "the engine topology file")
    names_ = {"source_name": f"the fit's topology {fit_path}", "target_name": eng_path}
    meta_base: dict[str, Any] = {"source": source, "topology": eng_path, "fit_topology": fit_path}
    if spec is not None:
        meta_base["features"] = {"kind": spec["kind"], "names": list(spec.get("names") or [])}

    def positions_file(
        features: torch.nn.Module, fit_atoms: np.ndarray, eng_atoms: np.ndarray, **extra: Any
    ) -> list[str]:
        """The file that takes the engine's positions, ``features`` computing the fit's
        features inside, and its OpenMM-Torch recipe."""
        xyz = _fit_frames(md, data, fit_path, fit_atoms)
        ex = None if xyz is None else _in_topology(xyz, eng_atoms, eng_top.n_atoms)
        meta = export_model(
            out,
            inputs=features,
            input_shape=(eng_top.n_atoms, 3),
            example=ex,
            metadata={
                **meta_base,
                "engine_inputs": "positions of all the engine topology's atoms (nm)",
                **extra,
            },
        )
        return [str(out), _write_openmm_recipe(out, meta, eng_top.n_atoms, eng_path)]

    def check_shape(n: int, what: str) -> None:
        if shape != (n,):
            raise ExportError(
                f"{fit_path}: {what} give {n} features, but the model takes states of shape {shape}"
            )

    if kind == "dihedrals":
        if spec is not None:
            quads = _spec_atoms(spec, fit, 4, fit_top.n_atoms)
            blocks = [(str(k), int(c)) for k, c in spec["blocks"]]
            spec_names = list(spec["names"])
        else:  # a fit folder from before features.json: backbone phi and psi
            probe = md.Trajectory(np.zeros((1, fit_top.n_atoms, 3), dtype=np.float32), fit_top)
            phi = np.asarray(md.compute_phi(probe)[0], dtype=np.int64).reshape(-1, 4)
            psi = np.asarray(md.compute_psi(probe)[0], dtype=np.int64).reshape(-1, 4)
            quads, blocks, spec_names = (
                np.concatenate([phi, psi]),
                [("phi", len(phi)), ("psi", len(psi))],
                [],
            )
        check_shape(2 * len(quads), f"the {len(quads)} torsions (sin and cos)")
        eng = match_atoms(fit_top, eng_top, quads.ravel(), **names_).reshape(-1, 4)
        names, what = _torsion_labels(blocks, spec_names)
        labels = [
            f"{w}: {' '.join(_atom_label(eng_top, i) for i in q)}"
            for w, q in zip(what, eng, strict=True)
        ]
        counts = [c for _, c in blocks]
        if positions_in:
            fit_atoms = np.unique(quads.ravel())
            return positions_file(
                PositionTorsions(eng, blocks=counts),
                fit_atoms,
                match_atoms(fit_top, eng_top, fit_atoms, **names_),
                torsions={n: [int(i) for i in q] for n, q in zip(names, eng, strict=True)},
            )
        xyz = _fit_frames(md, data, fit_path, np.unique(quads))
        angles = None
        if xyz is not None:
            full = _in_topology(xyz, np.unique(quads), fit_top.n_atoms)
            angles = md.compute_dihedrals(md.Trajectory(full, fit_top), quads, periodic=False)
        meta = export_model(
            out,
            example=angles,
            inputs=TorsionInputs(blocks=counts),
            input_shape=(len(quads),),
            input_names=names,
            metadata={**meta_base, "engine_inputs": "torsions (radians)"},
        )
        lines = [
            f"{n}: TORSION ATOMS={','.join(str(int(i) + 1) for i in q)}"
            for n, q in zip(names, eng, strict=True)
        ]
        return [str(out), _write_plumed(out, meta, names, lines, labels, eng_path, temperature)]

    from dpnets.datasets import DataFileError, select_atoms

    if kind == "cartesian":
        assert spec is not None
        atoms = _spec_atoms(spec, fit, 1, fit_top.n_atoms).reshape(-1)
        check_shape(3 * len(atoms), f"the {len(atoms)} atoms' coordinates")
        eng_atoms = match_atoms(fit_top, eng_top, atoms, **names_)
        return positions_file(
            PositionCartesian(eng_atoms, spec["reference"]),
            atoms,
            eng_atoms,
            selection=[int(a) for a in eng_atoms],
        )
    if kind == "distances":
        if spec is not None:
            fit_pairs = _spec_atoms(spec, fit, 2, fit_top.n_atoms)
        else:  # a fit folder from before features.json: every pair of the selection
            try:
                sel = select_atoms(fit_top, str(data.get("selection") or "heavy"), source=fit_path)
            except DataFileError as err:
                raise ExportError(str(err)) from None
            i, j = np.triu_indices(len(sel), k=1)
            fit_pairs = np.stack([sel[i], sel[j]], axis=1)
        check_shape(len(fit_pairs), f"the {len(fit_pairs)} atom pairs")
        pairs = match_atoms(fit_top, eng_top, fit_pairs.ravel(), **names_).reshape(-1, 2)
        names = [f"d{k + 1}" for k in range(len(pairs))]
        if positions_in:
            fit_atoms = np.unique(fit_pairs)
            return positions_file(
                PositionDistances(pairs),
                fit_atoms,
                match_atoms(fit_top, eng_top, fit_atoms, **names_),
                pairs=pairs.tolist(),
            )
        xyz = _fit_frames(md, data, fit_path, np.unique(fit_pairs))
        dist = None
        if xyz is not None:
            full = _in_topology(xyz, np.unique(fit_pairs), fit_top.n_atoms)
            dist = md.compute_distances(md.Trajectory(full, fit_top), fit_pairs, periodic=False)
        meta = export_model(
            out,
            example=dist,
            input_names=names,
            metadata={**meta_base, "engine_inputs": "distances (nm)"},
        )
        lines = [
            f"{n}: DISTANCE ATOMS={a + 1},{b + 1}" for n, (a, b) in zip(names, pairs, strict=True)
        ]
        labels = [f"{_atom_label(eng_top, a)} {_atom_label(eng_top, b)}" for a, b in pairs]
        return [str(out), _write_plumed(out, meta, names, lines, labels, eng_path, temperature)]

    try:
        sel = select_atoms(fit_top, str(data.get("selection") or "heavy"), source=fit_path)
    except DataFileError as err:
        raise ExportError(str(err)) from None
    eng_sel = match_atoms(fit_top, eng_top, sel, **names_)
    if shape != (len(sel), 3):
        raise ExportError(
            f"{fit_path}: the selection has {len(sel)} atoms, but the model takes states of "
            f"shape {shape}"
        )
    return positions_file(AtomSelection(eng_sel), sel, eng_sel, selection=[int(a) for a in eng_sel])


def _check_out(out: Path, fit: Path, model_path: Path, data: dict[str, Any], topology: Any) -> None:
    """ExportError (one line) when ``out`` is a file the export reads: the model, the fit
    folder's ``config.toml`` or ``features.json``, a topology or a data file of the fit
    (writing there would destroy the fit or its data)."""
    mine = [(model_path, "the fit's model")]
    if fit.is_dir():
        mine += [(fit / "config.toml", "the fit's config.toml")]
        mine += [(fit / "features.json", "the fit's features.json")]
    mine += [(p, "the fit's topology") for p in [data.get("topology")] if p]
    mine += [(p, "the engine topology") for p in [topology] if p]
    mine += [(p, "a data file of the fit") for p in data.get("paths") or [] if p]
    try:
        target = out.expanduser().resolve()
        hit = next((w for p, w in mine if Path(str(p)).expanduser().resolve() == target), None)
    except (OSError, RuntimeError):
        return  # an unresolvable path: the write reports it
    if hit is not None:
        raise ExportError(
            f"--out {out} is {hit}, which the export reads; give a new file, e.g. cv.pt"
        )


#: the fit kinds with atoms (``dpnets fit --features``; raw MD files read as positions)
_MD_KINDS = ("dihedrals", "distances", "cartesian", "positions")


def _features_json(folder: Path) -> dict[str, Any] | None:
    """A fit folder's ``features.json`` (what each input column is, with its atoms), or None
    for folders written before it existed; ExportError (one line) when it cannot be read."""
    import json

    path = folder / "features.json"
    if not path.is_file():
        return None
    try:
        spec = json.loads(path.read_text())
        spec["atoms"], spec["names"]  # noqa: B018 - the keys every kind has
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ExportError(f"{path}: cannot read the fit's features ({err})") from None
    return spec


def _spec_atoms(spec: dict[str, Any], folder: Path, width: int, n_atoms: int) -> np.ndarray:
    """The atoms of ``features.json`` as ``(k, width)`` 0-based indices of the fit's
    topology (``width`` 4 for torsions, 2 for pairs, 1 for atoms); ExportError (one line)
    for anything else: a negative index would silently take an atom from the end."""
    raw = spec["atoms"]
    rows = [r if isinstance(r, list) else [r] for r in raw] if isinstance(raw, list) else None
    ok = rows is not None and all(
        len(r) == width
        and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_atoms for i in r)
        for r in rows
    )
    if not ok:
        what = {4: "quadruplets", 2: "pairs"}.get(width, "indices")
        raise ExportError(
            f"{folder / 'features.json'}: its atoms are not {what} of 0-based atom indices "
            f"of the fit's topology ({n_atoms} atoms): the file is corrupted or belongs to "
            "another fit; refit with dpnets fit --config on the fit's config.toml"
        )
    return np.asarray(rows, dtype=np.int64).reshape(-1, width)


def _torsion_labels(
    blocks: Sequence[tuple[str, int]], names: Sequence[str]
) -> tuple[list[str], list[str]]:
    """``(labels, descriptions)`` of the torsions of ``blocks``: PLUMED labels ``phi1``,
    ``psi1``, ``omega1``, ``chi1_1``... (numbered within their kind) and what each is (the
    fit's feature name without ``sin``, e.g. ``φ ALA2``; the label where the fit named
    none)."""
    labels, what, col = [], [], 0
    for kind, count in blocks:
        sep = "_" if kind[-1].isdigit() else ""
        for k in range(count):
            labels.append(f"{kind}{sep}{k + 1}")
            name = names[col + k] if col + k < len(names) else labels[-1]
            what.append(name[4:] if name.startswith("sin ") else name)
        col += 2 * count
    return labels, what


# ------------------------------------------------------------------------------ recipes
#: the placeholder PLUMED refuses (not a number) until the user sets the temperature
TEMP_PLACEHOLDER = "SET_TEMPERATURE_IN_K"


def _write_plumed(
    out: Path,
    meta: dict,
    names: list[str],
    lines: list[str],
    labels: list[str],
    top: str,
    temperature: float | None,
) -> str:
    """``plumed.dat`` next to ``out``: the inputs, the model, OPES_METAD/METAD sketches."""
    path = out.parent / "plumed.dat"
    modes = meta["modes"]
    comps = [f"cv.node-{k}" for k in range(len(meta["outputs"]))]
    temp = TEMP_PLACEHOLDER if temperature is None else f"{float(temperature):g}"
    text = [
        f"# written by dpnets export: the slow modes {modes} of {meta.get('source', '')}",
        f"# atoms: 1-based indices of {top}, matched to the fit's topology",
        f"# {meta.get('fit_topology', '')} by chain, residue and atom name",
        "# lengths in nm, angles in radians (PLUMED units). PLUMED must be built with the",
        "# PyTorch module (and OPES for the OPES_METAD sketch): ./configure",
        "# --enable-libtorch --enable-cxx=20 --enable-modules=+pytorch:+opes (checked with",
        "# PLUMED 2.11-dev, benchmarks/plumed_check.sh). The file computes in "
        f"{meta['dtype']} and answers in PLUMED's float32.",
    ]
    note = (meta.get("precision") or {}).get("note")
    if note:
        text.append(f"# {note}.")
    for line, label in zip(lines, labels, strict=True):
        text.append(f"{line}   # {label}")
    file = str(out.resolve())
    if any(c.isspace() for c in file):  # PLUMED reads a value with spaces in braces
        file = "{" + file + "}"
    text.append(f"cv: PYTORCH_MODEL FILE={file} ARG={','.join(names)}")
    for comp, what in zip(comps, meta["descriptions"], strict=True):
        text.append(f"# {comp}: {what}")
    # a complex mode's two parts are one CV: biased together
    biased = comps[:2] if _output_modes(meta)[0][1] == "real" else comps[:1]
    arg, sigma = ",".join(biased), ",".join(["0.1"] * len(biased))
    text += [
        "",
        "# Enhanced sampling on the slowest mode: uncomment one. TEMP: your simulation's",
        "# temperature in K"
        + (" (PLUMED refuses the placeholder until it is set)" if temperature is None else "")
        + "; SIGMA: about",
        "# the CV's fluctuation within one basin (the CV has unit variance on the training",
        "# data); BARRIER (kJ/mol): the free-energy barrier you expect; PACE to your system.",
        f"# opes: OPES_METAD ARG={arg} TEMP={temp} PACE=500 BARRIER=40 SIGMA={sigma}",
        f"# metad: METAD ARG={arg} TEMP={temp} PACE=500 HEIGHT=1.2 SIGMA={sigma} BIASFACTOR=10",
        f"PRINT ARG={','.join(names[:4] + comps)} STRIDE=100 FILE=COLVAR",
        "",
    ]
    body = "\n".join(text).encode()
    atomic_write(path, lambda fh: fh.write(body))
    return str(path)


def _output_modes(meta: dict) -> list[tuple[int, str | None]]:
    """``(mode, part)`` of each output of an exported file (files written before complex
    parts existed: one real output per mode)."""
    if "output_modes" not in meta:
        return [(int(m), None) for m in meta["modes"]]
    return [(int(m), p) for m, p in zip(meta["output_modes"], meta["output_parts"], strict=True)]


_OPENMM_RECIPE = '''"""OpenMM-Torch recipe for the slow modes exported by dpnets export.

{file} maps the positions of all {n_atoms} atoms of {top} (nm, in its atom order;
one state (n_atoms, 3) or a batch (B, n_atoms, 3)) to {outputs}, and takes
the periodic box vectors (3, 3) as a second argument: with
cv_force.setUsesPeriodicBoundaryConditions(True) OpenMM-Torch passes them, and bond vectors
and distances take their nearest periodic image. OpenMM-Torch needs a scalar: the wrapper
below picks one mode. Run it with your System and Simulation (openmm, openmmtorch installed;
OpenMM-Torch 1.10's CPU wheel acellera-openmmtorch-cpu needs torch < 2.13 and works with
openmm 8.4.0 to 8.5.2; 8.6.0 and 8.6.1 crash on a TorchForce inside a CustomCVForce, the
Metadynamics path).
"""

from typing import Optional

import openmm
import torch
from openmm import app, unit
from openmmtorch import TorchForce


class SlowMode(torch.nn.Module):
    def __init__(self, path: str, k: int = 0):
        super().__init__()
        self.cv = torch.jit.load(path)
        self.k = k

    def forward(
        self, positions: torch.Tensor, boxvectors: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.cv(positions, boxvectors)[self.k]


# (where dpnets is installed, dpnets.engines.openmm_torch_cv("{path}") writes the same file)
torch.jit.script(SlowMode("{path}", 0)).save("{stem}_openmm.pt")
cv_force = TorchForce("{stem}_openmm.pt")  # the CV: its "energy" is the eigenfunction
# cv_force.setUsesPeriodicBoundaryConditions(True)  # periodic systems: the box is passed

# As a biased collective variable of OpenMM's own well-tempered metadynamics:
# bias = app.BiasVariable(cv_force, minValue=-3.0, maxValue=3.0, biasWidth=0.1, periodic=False)
# meta = app.Metadynamics(system, [bias], 300 * unit.kelvin, biasFactor=10.0,
#                         height=1.0 * unit.kilojoules_per_mole, frequency=500)
# simulation = app.Simulation(topology, system, integrator)   # after creating meta
# meta.step(simulation, 1_000_000)
#
# Cheaper per step, the same CV and forces (no autograd in OpenMM-Torch's step; files whose
# metadata says forces are available: an encoder of Linear layers and the MLP's activations):
# from dpnets.engines import openmm_torch_cv
# cv_force = TorchForce(str(openmm_torch_cv("{path}", forces=True)))  # returns (cv, forces)
# cv_force.setOutputsForces(True)
#
# Or inside a CustomCVForce of your own:
# cvf = openmm.CustomCVForce("0.5 * k * (s - s0)^2")
# cvf.addGlobalParameter("k", 100.0); cvf.addGlobalParameter("s0", 0.0)
# cvf.addCollectiveVariable("s", cv_force)
# system.addForce(cvf)
'''


def _write_openmm_recipe(out: Path, meta: dict, n_atoms: int, top: str) -> str:
    path = out.parent / "openmm_torch_recipe.py"
    text = _OPENMM_RECIPE.format(
        file=out.name,
        path=str(out.resolve()),
        stem=out.stem,
        n_atoms=n_atoms,
        top=top,
        outputs=", ".join(meta["outputs"]),
    ).encode()
    atomic_write(path, lambda fh: fh.write(text))
    return str(path)


# ------------------------------------------------------------------------------ OpenMM-Torch
#: the exported files' input maps that take the engine's positions (``dpnets export
#: --input positions``)
_POSITION_MAPS = (
    PositionTorsions.__name__,
    PositionDistances.__name__,
    PositionCartesian.__name__,
    AtomSelection.__name__,
)


class _ScalarCV(torch.nn.Module):
    """One output of a positions-in exported file as OpenMM-Torch's scalar "energy"."""

    def __init__(self, cv: torch.jit.ScriptModule, output: int) -> None:
        super().__init__()
        self.cv = cv
        self.output = output

    def forward(
        self,
        positions: torch.Tensor,
        boxvectors: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.cv(positions, boxvectors)[self.output]


class _ForcesCV(torch.nn.Module):
    """One output of a positions-in exported file and its forces (minus its gradient), for
    OpenMM-Torch's ``setOutputsForces(True)``: the file's ``forces`` method, no autograd."""

    def __init__(self, cv: torch.jit.ScriptModule, output: int) -> None:
        super().__init__()
        self.cv = cv
        self.output = output

    def forward(
        self,
        positions: torch.Tensor,
        boxvectors: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cv.forces(positions, boxvectors, self.output)


def openmm_torch_cv(
    path: str | os.PathLike,
    out: str | os.PathLike | None = None,
    output: int = 0,
    *,
    forces: bool = False,
) -> Path:
    """One slow mode of a positions-in exported file as the scalar OpenMM-Torch takes.

    OpenMM-Torch's ``TorchForce`` calls its module with the positions (nm) and, with
    ``setUsesPeriodicBoundaryConditions(True)``, the box vectors, and takes the scalar it
    returns as an energy. A ``dpnets export --input positions`` file returns every exported
    mode. This writes (atomically) the TorchScript module that returns mode ``output``
    alone: the wrapper of the OpenMM-Torch recipe that ``dpnets export`` writes, for
    ``TorchForce(str(openmm_torch_cv("cv.pt")))``. Only torch is needed, not OpenMM.

    With ``forces=True`` the module returns ``(cv, forces)``, the forces ``-dcv/dpositions``
    ``(n_atoms, 3)`` in the positions' dtype, computed in one forward without autograd
    (the file's ``forces`` method: the positions map's Jacobian, then back through the
    encoder's layers by hand); give the ``TorchForce`` ``setOutputsForces(True)``. It costs
    less per step than the autograd module (``benchmarks/results/export_cost``); available
    for files whose positions map is a ``Position*`` map (fused with the encoder, or for a
    protein's torsions and contacts the features' local Jacobians) and whose encoder is
    made of ``Linear`` layers and the activations of :class:`dpnets.nn.MLP` (no
    ``layer_norm``): the metadata's
    ``forces`` entry says whether and why not. Same values and forces as the autograd
    module.

    Parameters
    ----------
    path : path
        A file of :func:`export_fit` (``dpnets export``) that takes the engine's positions.
    out : path, optional
        Where to write; default ``<stem>_openmm.pt`` next to ``path``.
    output : int, default 0
        Which of the file's outputs (``cv.node-k``; ``0``: the first exported mode).
    forces : bool, default False
        Write the ``(cv, forces)`` module for ``setOutputsForces(True)`` (default file
        ``<stem>_openmm_forces.pt``); False: the scalar, differentiated by OpenMM-Torch.

    Returns
    -------
    Path
        The file written.
    """
    meta = read_metadata(path)
    kind = meta.get("inputs", {}).get("map")
    if kind not in _POSITION_MAPS:
        raise ExportError(
            f"{path}: takes {meta.get('inputs', {}).get('shape')} features ({kind}), not the "
            "engine's positions: export it with dpnets export --input positions --topology "
            "ENGINE_TOPOLOGY"
        )
    n = len(_output_modes(meta))
    if isinstance(output, bool) or not isinstance(output, (int, np.integer)):
        raise ExportError(f"output must be an integer, got {output!r}")
    if not 0 <= int(output) < n:
        raise ExportError(f"output={output}: {path} has {n} outputs (0 to {n - 1})")
    if forces:
        how = meta.get("forces") or {}
        if not how.get("available"):
            reason = how.get("reason") or "written before dpnets wrote forces"
            raise ExportError(
                f"forces=True: {path} has no autograd-free forces ({reason}); use "
                "forces=False (OpenMM-Torch differentiates the CV)"
            )
    src = Path(path)
    suffix = "_openmm_forces.pt" if forces else "_openmm.pt"
    target = Path(out) if out is not None else src.with_name(f"{src.stem}{suffix}")
    wrapper = _ForcesCV if forces else _ScalarCV
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*torch\.jit\.", DeprecationWarning)
        scripted = torch.jit.script(wrapper(torch.jit.load(os.fspath(src)), int(output)))
    atomic_write(target, lambda fh: torch.jit.save(scripted, fh))
    return target


# ------------------------------------------------------------------------------ OpenMM, tabulated
def openmm_torsion_cv(
    path: str | os.PathLike,
    torsions: Sequence[Sequence[int]],
    output: int = 0,
    n_grid: int = 121,
) -> tuple[Any, float]:
    """An OpenMM ``CustomCVForce`` whose energy is a two-torsion CV file, tabulated.

    Without OpenMM-Torch (whose CPU wheel, ``acellera-openmmtorch-cpu`` 1.10, needs
    torch < 2.13 and so a separate environment), the exported function of two torsions
    (a ``dpnets export`` of a fit on one phi/psi pair) goes into OpenMM as a periodic
    bicubic spline (``Continuous2DFunction``) of two ``CustomTorsionForce`` angles, on an
    ``n_grid x n_grid`` grid over ``[-pi, pi]^2``. Its "energy" (kJ/mol) is the CV value, so
    it can be a ``BiasVariable`` of ``openmm.app.Metadynamics`` or a term of a bias.

    Parameters
    ----------
    path : path
        A file written by :func:`export` that takes two torsions in radians.
    torsions : two sequences of 4 ints
        0-based atom indices of the two torsions, in the order of the file's inputs (for a
        ``dpnets export`` of a dihedral fit: phi then psi, as in its ``plumed.dat``).
    output : int, default 0
        Which of the file's outputs (``cv.node-k``) to tabulate.
    n_grid : int, default 121
        Grid points per angle (the last equals the first: periodic).

    Returns
    -------
    (openmm.CustomCVForce, float)
        The force, and the interpolation error estimate: the largest difference between the
        spline and the file at the centres of the grid cells, relative to the CV's range.
    """
    import openmm

    meta = read_metadata(path)
    if meta.get("inputs", {}).get("shape") != [2]:
        raise ExportError(
            f"{path}: takes inputs of shape {meta.get('inputs', {}).get('shape')}; the "
            "tabulated OpenMM force needs a CV of two torsions (radians)"
        )
    n_out = len(_output_modes(meta))
    if not 0 <= int(output) < n_out:
        raise ExportError(f"output={output}: {path} has {n_out} outputs")
    tors = [list(map(int, t)) for t in torsions]
    if len(tors) != 2 or any(len(t) != 4 for t in tors):
        raise ExportError(f"torsions must be two lists of 4 atom indices, got {torsions!r}")
    if int(n_grid) < 8:
        raise ExportError(f"n_grid must be at least 8, got {n_grid}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*torch\.jit\.", DeprecationWarning)
        cv = torch.jit.load(os.fspath(path), map_location="cpu")
    n = int(n_grid)
    g = np.linspace(-np.pi, np.pi, n)

    def table(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        x = np.stack([a.ravel(), b.ravel()], 1)
        with torch.no_grad():
            return cv(torch.tensor(x, dtype=torch.float64))[:, int(output)].double().numpy()

    ga, gb = np.meshgrid(g, g, indexing="ij")  # [i, j] = (phi_i, psi_j)
    values = table(ga, gb).reshape(n, n)
    values[-1, :], values[:, -1] = values[0, :], values[:, 0]  # exactly periodic
    func = openmm.Continuous2DFunction(
        n, n, values.T.ravel().tolist(), -np.pi, np.pi, -np.pi, np.pi, True
    )  # OpenMM's order: x fastest
    force = openmm.CustomCVForce("cv(t1, t2)")
    force.addTabulatedFunction("cv", func)
    for name, atoms in zip(("t1", "t2"), tors, strict=True):
        t = openmm.CustomTorsionForce("theta")
        t.addTorsion(*atoms, [])
        force.addCollectiveVariable(name, t)
    # interpolation error at the cell centres, by OpenMM's own spline through a bicubic
    # estimate: compare the file with the spline evaluated by scipy's periodic cubic spline
    from scipy.interpolate import RectBivariateSpline

    mid = 0.5 * (g[1:] + g[:-1])
    spline = RectBivariateSpline(g, g, values, kx=3, ky=3, s=0)
    ma, mb = np.meshgrid(mid, mid, indexing="ij")
    exact = table(ma, mb).reshape(ma.shape)
    err = float(np.abs(spline(mid, mid) - exact).max() / max(np.ptp(values), 1e-300))
    return force, err
