"""Features of molecular-dynamics frames, through mdtraj: what each input coordinate of an
MD fit is, computed in one place for reading files (:mod:`dpnets.datasets`) and for
exporting the fit to an engine (:mod:`dpnets.engines`).

An :class:`MDFeatures` names its kind, the atoms of every feature (0-based indices of the
fit's topology) and one human-readable label per output column, as PyEMMA's featurizer
``describe()`` does, its residues named by :func:`residue_labels` (``ALA5``; unique: a
number the topology repeats is qualified by chain or residue index):

* ``"dihedrals"``: torsions by kind (:data:`TORSION_KINDS`: ``phi``, ``psi``, ``omega``,
  ``chi1`` … ``chi4``, from mdtraj's ``compute_<kind>``), those of the residues the
  selection touches, as ``[sin, cos]`` blocks per kind in the order asked
  (``[sin phi.., cos phi.., sin psi.., cos psi..]`` for the default ``phi, psi``);
* ``"distances"``: the distances of atom pairs of the selection in nm (minimum image when
  the frames have a unit cell), all pairs, or those closer than a contact cut-off in some
  frame of the data (:meth:`MDFeatures.subset`);
* ``"cartesian"``: the selection's coordinates in nm after optimal superposition of the
  selection on a reference structure (mdtraj's ``superpose``: the first frame read, or a
  given structure), flattened ``[x1, y1, z1, x2, ...]``.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "TORSION_KINDS",
    "MDFeatures",
    "residue_labels",
    "torsion_features",
    "distance_features",
    "cartesian",
]

#: torsion kinds mdtraj computes (``md.compute_<kind>``), and their symbols in labels
TORSION_KINDS = {
    "phi": "φ",
    "psi": "ψ",
    "omega": "ω",
    "chi1": "χ1",
    "chi2": "χ2",
    "chi3": "χ3",
    "chi4": "χ4",
}


@dataclass(frozen=True, eq=False)
class MDFeatures:
    """The input features of an MD fit.

    Attributes
    ----------
    kind : str
        ``"dihedrals"``, ``"distances"`` or ``"cartesian"``.
    atoms : ndarray of int
        Per feature (not per column): the torsions' atom quadruplets ``(n, 4)``, the
        distances' pairs ``(n, 2)``, or the Cartesian atoms ``(n,)``.
    names : list of str
        One label per output column (kind, residue, atoms).
    blocks : tuple of (str, int)
        Dihedrals: the torsion kinds in column order and how many of each (each block
        gives ``count`` sines, then ``count`` cosines).
    reference : ndarray, optional
        Cartesian: the reference positions ``(n_atoms_topology, 3)`` (nm) of the
        superposition.
    """

    kind: str
    atoms: np.ndarray
    names: list[str]
    blocks: tuple[tuple[str, int], ...] = ()
    reference: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_columns(self) -> int:
        return len(self.names)

    def compute(self, traj: Any) -> np.ndarray:
        """The features of the frames of mdtraj trajectory ``traj`` (its topology the fit's),
        float32 ``(frames, n_columns)``."""
        import mdtraj as md

        if self.kind == "dihedrals":
            ang = md.compute_dihedrals(traj, self.atoms)
            out, start = [], 0
            for _, count in self.blocks:
                block = ang[:, start : start + count]
                out += [np.sin(block), np.cos(block)]
                start += count
            return np.concatenate(out, axis=1).astype(np.float32)
        if self.kind == "distances":
            return md.compute_distances(traj, self.atoms).astype(np.float32)
        ref = md.Trajectory(self.reference[None].astype(np.float32), traj.topology)
        moved = traj.superpose(ref, 0, atom_indices=self.atoms, ref_atom_indices=self.atoms)
        return moved.xyz[:, self.atoms].reshape(traj.n_frames, -1).astype(np.float32)

    def subset(self, keep: np.ndarray) -> MDFeatures:
        """The features ``keep`` (a boolean mask over features; distances only)."""
        if self.kind != "distances":
            raise ValueError("only distances are subset by a cut-off")
        keep = np.asarray(keep, dtype=bool)
        names = [n for n, k in zip(self.names, keep, strict=True) if k]
        return MDFeatures(self.kind, self.atoms[keep], names)

    def like_fit(self, fit: dict[str, Any]) -> MDFeatures:
        """These features made the ones a fit was trained on, from its description
        (:meth:`describe`, the fit folder's ``features.json``), for new files read with the
        fit's settings: distances, the fit's pairs in its order (picked by name: a contact
        cut-off chose them on the fit's data, not on the new files'); Cartesians,
        superposed on the fit's reference (not the new files' first frame). Dihedrals are
        fixed by the selection and the torsion kinds. ``ValueError`` for a pair the new
        topology lacks or a reference of another number of atoms."""
        if self.kind == "distances" and fit.get("names") is not None:
            seen: Counter = Counter()  # a name repeated (older fits): its k-th occurrence
            where = {}
            for i, name in enumerate(self.names):
                where[(name, seen[name])] = i
                seen[name] += 1
            seen = Counter()
            keys = []
            for name in fit["names"]:
                keys.append((name, seen[name]))
                seen[name] += 1
            missing = [n for n, k in keys if (n, k) not in where]
            if missing:
                raise ValueError(
                    f"the selection has no pair {missing[0]} of the fit's distances "
                    f"({len(missing)} of {len(fit['names'])} missing)"
                )
            idx = np.array([where[k] for k in keys], dtype=np.int64)
            return MDFeatures(self.kind, self.atoms[idx], list(fit["names"]))
        if self.kind == "cartesian" and fit.get("reference") is not None:
            ref = np.asarray(fit["reference"], dtype=np.float64)
            if ref.shape != (len(self.atoms), 3):
                raise ValueError(
                    f"the fit's reference holds {len(ref)} atoms; the selection has "
                    f"{len(self.atoms)}"
                )
            assert self.reference is not None
            full = self.reference.copy()
            full[self.atoms] = ref  # superposition uses the selected atoms only
            return MDFeatures(self.kind, self.atoms, self.names, reference=full)
        return self

    def describe(self) -> dict[str, Any]:
        """A JSON-serialisable description (the fit folder's ``features.json``)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "atoms": self.atoms.tolist(),
            "names": list(self.names),
        }
        if self.blocks:
            out["blocks"] = [[k, int(c)] for k, c in self.blocks]
        if self.reference is not None:  # the superposition's target: the selected atoms (nm)
            out["reference"] = self.reference[self.atoms].tolist()
        return out


def residue_labels(top: Any) -> list[str]:
    """One label per residue of mdtraj topology ``top``, unique: its name and number
    (``ALA5``); a label the topology repeats (a homodimer's two chains, numbered alike) is
    qualified by its chain identifier (``ALA5:B``) where that tells them apart, else by
    mdtraj's 0-based residue index, which ``--selection 'resid 282'`` selects
    (``TYR7(resid 282)``: a GROMACS ``.gro`` holds no chains)."""
    plain = [str(r) for r in top.residues]
    counts = Counter(plain)
    labels = []
    for r, name in zip(top.residues, plain, strict=True):
        chain = str(getattr(r.chain, "chain_id", "") or "").strip()
        labels.append(name if counts[name] == 1 or not chain else f"{name}:{chain}")
    counts = Counter(labels)
    return [
        label if counts[label] == 1 else f"{label}(resid {r.index})"
        for r, label in zip(top.residues, labels, strict=True)
    ]


def _atom_label(top: Any, residues: list[str], i: int) -> str:
    a = top.atom(int(i))
    return f"{residues[a.residue.index]}-{a.name}"


def torsion_features(top: Any, kinds: list[str] | tuple[str, ...], atoms: np.ndarray) -> MDFeatures:
    """The torsions of the kinds ``kinds`` of the residues that the selected ``atoms``
    touch (a torsion belongs to the residue of its second atom: ``N_i`` of ``phi_i``,
    ``CA_i`` of ``psi_i`` and ``chi*_i``, ``C_i`` of ``omega_i``, as mdtraj orders them).
    ``ValueError`` for an unknown kind or when no torsion is left."""
    import mdtraj as md

    unknown = [k for k in kinds if k not in TORSION_KINDS]
    if unknown or not kinds:
        raise ValueError(
            f"torsion kinds must be among {', '.join(TORSION_KINDS)}; got {', '.join(kinds)!s}"
        )
    probe = md.Trajectory(np.zeros((1, top.n_atoms, 3), dtype=np.float32), top)
    labels = residue_labels(top)
    residues = {top.atom(int(a)).residue.index for a in atoms}
    quads, names, blocks, missing = [], [], [], []
    for kind in dict.fromkeys(kinds):  # each kind once, in the order asked
        idx = np.asarray(getattr(md, f"compute_{kind}")(probe)[0], dtype=np.int64).reshape(-1, 4)
        idx = idx[[top.atom(int(q[1])).residue.index in residues for q in idx]]
        if not len(idx):
            missing.append(kind)
            continue
        sym = TORSION_KINDS[kind]
        res = [labels[top.atom(int(q[1])).residue.index] for q in idx]
        names += [f"{f} {sym} {r}" for f in ("sin", "cos") for r in res]
        quads.append(idx)
        blocks.append((kind, len(idx)))
    names_of = [top.residue(i).name for i in sorted(residues)]
    counts = {n: names_of.count(n) for n in dict.fromkeys(names_of)}
    touched = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in list(counts.items())[:12])
    touched += ", …" if len(counts) > 12 else ""
    if not quads:
        raise ValueError(
            f"the selected residues ({touched}) have no {', '.join(dict.fromkeys(kinds))} torsion"
        )
    if missing:
        warnings.warn(
            f"the selected residues ({touched}) have no {', '.join(missing)} torsion: left "
            f"out of the features (kept: {', '.join(k for k, _ in blocks)})",
            RuntimeWarning,
            stacklevel=4,
        )
    return MDFeatures("dihedrals", np.concatenate(quads), names, tuple(blocks))


#: most atom pairs of a distance featurisation (1,415 atoms): beyond it the features,
#: their names and the network's first layer no longer fit in memory for any useful run
MAX_DISTANCE_PAIRS = 1_000_000


def _warn_solvent(top: Any, atoms: np.ndarray, what: str) -> None:
    """Warn when the selected ``atoms`` include water: its distances or positions are no
    slow coordinate of the solute (waters exchange), and they swamp the solute's."""
    water = np.isin(atoms, top.select("water"))
    if water.any():
        n = len({top.atom(int(a)).residue.index for a in atoms[water]})
        warnings.warn(
            f"the selection holds {int(water.sum())} atoms of {n} water molecules among its "
            f"{len(atoms)}: their {what} are no slow coordinate of the solute (waters "
            "exchange); select the solute (--selection 'protein and name CA', 'not water')",
            RuntimeWarning,
            stacklevel=4,
        )


def distance_features(top: Any, atoms: np.ndarray) -> MDFeatures:
    """All pairwise distances of the selected ``atoms`` (``ValueError`` for fewer than 2, or
    more pairs than :data:`MAX_DISTANCE_PAIRS`; a warning when they include water)."""
    atoms = np.asarray(atoms, dtype=np.int64)
    if len(atoms) < 2:
        raise ValueError(f"distances need two atoms; the selection has {len(atoms)}")
    n_pairs = len(atoms) * (len(atoms) - 1) // 2
    if n_pairs > MAX_DISTANCE_PAIRS:
        raise ValueError(
            f"the selection has {len(atoms)} atoms, {n_pairs:,} pairs of distances: more "
            f"than {MAX_DISTANCE_PAIRS:,}; select fewer atoms (--selection 'protein and name "
            "CA'), then --cutoff keeps the contacts"
        )
    _warn_solvent(top, atoms, "distances")
    i, j = np.triu_indices(len(atoms), k=1)
    pairs = np.stack([atoms[i], atoms[j]], axis=1)
    residues = residue_labels(top)
    label = {int(a): _atom_label(top, residues, a) for a in atoms}
    names = [f"d({label[int(a)]}, {label[int(b)]})" for a, b in pairs]
    return MDFeatures("distances", pairs, names)


def cartesian(top: Any, atoms: np.ndarray, reference: np.ndarray) -> MDFeatures:
    """The selected ``atoms``' coordinates after superposition on ``reference``
    (``(top.n_atoms, 3)`` positions in nm)."""
    atoms = np.asarray(atoms, dtype=np.int64)
    if len(atoms) < 3:
        raise ValueError(f"a superposition needs at least 3 atoms; the selection has {len(atoms)}")
    _warn_solvent(top, atoms, "positions")
    residues = residue_labels(top)
    names = [f"{c} {_atom_label(top, residues, a)}" for a in atoms for c in "xyz"]
    return MDFeatures("cartesian", atoms, names, reference=np.asarray(reference, np.float64))
