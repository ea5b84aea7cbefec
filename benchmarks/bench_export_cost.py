"""The cost of an exported collective variable per MD step (issue 33, item 2).

One forward + backward on one state (what an engine does at every step: the CV and its
gradient with respect to the inputs) of the file ``dpnets.export`` writes, against the same
encoder scripted bare (same widths and dtype), in one run, float32 and float64:

* ``features``: the file on the model's own states (what it computes beyond the encoder:
  the basis and eigenvectors, folded into one affine map) against the bare encoder: the
  goal is <= 1.3x;
* ``torsions``: the file taking PLUMED's torsions (sin/cos inside), against the bare
  encoder (which gets the sin/cos features ready made) and against the bare encoder behind
  the same scripted sin/cos map;
* ``positions``: the file taking the 22 atoms' positions of alanine dipeptide (torsions
  computed inside), against the bare encoder behind the same scripted torsion map;
* every feature kind with positions in (issue 41; goal <= 1.5x its bare encoder on the
  features): ``dihedrals`` (phi, psi: 4 features), ``distances`` (the 45 pairs of the 10
  heavy atoms) and ``cartesian`` (the 10 heavy atoms superposed on a reference: 30
  features), each a model fitted on features of its width, the exported positions-in file
  against the bare encoder on the features, and against the floor: the bare encoder behind
  a bare gather of the coordinates of the atoms the map reads (one ``torch.take``; what
  any positions-in file pays before computing a feature). The exported files fuse the map
  with the encoder's first layer (``dpnets.export``: the features and ``W J`` without
  autograd, one gather and one product in the graph) where the per-call ``W J`` is small
  (all three alanine kinds, adk's Cartesians);
* the same three kinds on adenylate kinase (3341 atoms; MDAnalysisTests' ``adk.psf`` +
  ``adk_dims.dcd``, skipped without them or with ``--no-adk``), float32: its 426 backbone
  torsions (852 features), its 1312 C-alpha pairs within 0.9 nm and its 214 C-alpha
  atoms superposed: protein-size encoders, where the maps' arithmetic
  (not the per-op overhead of one state) is what counts.
* the forces-output module of each kind, alanine's and adk's (``dpnets.engines.
  openmm_torch_cv(..., forces=True)``, for OpenMM-Torch's ``setOutputsForces(True)``; adk's
  torsions and contacts, not fused, by the features' local Jacobians): the CV and its
  gradient in one forward without autograd, timed as one call, against the bare encoder's forward +
  autograd (the comparator above) and against the bare encoder with its input gradient
  written by hand too (:class:`HandMLP`, no autograd: what the same trick buys the bare
  network).

Measured single-threaded (``torch.set_num_threads(1)``), interleaved rounds, median over
rounds of the mean per call. The MD throughput with and without the CV in OpenMM-Torch is
measured in the side environment (``benchmarks/openmm_torch_side_env.sh``).

    PYTHONPATH=src python benchmarks/bench_export_cost.py [--smoke] [--rounds 15]
        [--calls 400] [--no-adk] [--out benchmarks/results/export_cost/export_cost.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*implied timescale")  # short synthetic fits
warnings.filterwarnings("ignore", message=".*lagged pairs for")  # adk: 98 frames


def fit_model(dim_in: int, widths: tuple[int, ...], r: int, double: bool, epochs: int):
    """A DPNet + TransferOperator on sin/cos of two slow torsions (4 features)."""
    rng = np.random.default_rng(0)
    n = 3000
    ang = np.zeros((n, 2))
    for t in range(1, n):
        ang[t] = ang[t - 1] + 0.3 * rng.normal(size=2) - 0.05 * np.sin(2 * ang[t - 1])
    x = np.concatenate([np.sin(ang[:, :1]), np.cos(ang[:, :1]), np.sin(ang[:, 1:])], 1)
    x = np.concatenate([x, np.cos(ang[:, 1:])], 1)[:, :dim_in]
    return fit_on(x, widths, r, double, epochs), x


def fit_on(x: np.ndarray, widths: tuple[int, ...], r: int, double: bool, epochs: int):
    """A DPNet (the default MLP of ``dpnets fit``) + TransferOperator fitted on ``x``."""
    from dpnets import DPNet, TransferOperator
    from dpnets.nn import MLP

    enc = MLP(x.shape[1], widths, r, activation="celu")
    if double:
        enc = enc.double()
    net = DPNet(enc, epochs=epochs, batch_size=256, progress=False, seed=0).fit(x)
    return TransferOperator(net, reversible=True).fit(x)


class HandMLP(torch.nn.Module):
    """A bare CELU MLP's first output and its gradient with respect to the input, written by
    hand in the forward (``addmv``, ``celu``, the activation's derivative, ``mv`` with the
    transposed weights back): the bare encoder's comparator without autograd."""

    def __init__(self, enc) -> None:
        super().__init__()
        lin = [m for m in enc.net if isinstance(m, torch.nn.Linear)]
        self.weights = [m.weight.detach().clone() for m in lin[:-1]]
        self.biases = [m.bias.detach().clone() for m in lin[:-1]]
        self.last = lin[-1].weight[0].detach().clone()
        self.last_bias = float(lin[-1].bias[0])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ds: list[torch.Tensor] = []
        h = x
        for i in range(len(self.weights)):
            if i > 0:
                ds.append(torch.where(h > 0, torch.ones_like(h), torch.exp(h)))
                h = torch.celu(h)
            h = torch.addmv(self.biases[i], self.weights[i], h)
        d = torch.where(h > 0, torch.ones_like(h), torch.exp(h))
        y = torch.dot(self.last, torch.celu(h)) + self.last_bias
        g = self.last * d
        for i in range(len(self.weights) - 1, 0, -1):
            g = torch.mv(self.weights[i].t(), g) * ds[i - 1]
        return y, torch.mv(self.weights[0].t(), g)


class Gather(torch.nn.Module):
    """The floor of a positions-in map: the coordinates of the ``atoms`` gathered by one
    ``torch.take`` of the flattened positions (the cheapest gather and scatter back), the
    first ``width`` of them as the features (no geometry)."""

    def __init__(self, atoms: np.ndarray, width: int) -> None:
        super().__init__()
        a = np.asarray(atoms, dtype=np.int64).reshape(-1)
        flat = (3 * a[:, None] + np.arange(3)).reshape(1, -1)
        self.register_buffer("flat", torch.as_tensor(flat))
        self.width = int(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.take(x, self.flat)[:, : self.width]


def alanine_kinds(top) -> tuple[dict, dict, torch.Tensor]:
    """The maps of alanine dipeptide's three kinds (phi, psi; the 45 pairs of the 10 heavy
    atoms; the 10 heavy atoms superposed on the PDB), the atoms each reads, and 3000
    positions of a random walk from the PDB (nm, float64)."""
    import mdtraj as md

    from dpnets.export import PositionCartesian, PositionDistances, PositionTorsions

    heavy = top.topology.select("not element H")
    quads = np.concatenate([md.compute_phi(top)[0], md.compute_psi(top)[0]])
    i, j = np.triu_indices(len(heavy), k=1)
    pairs = np.stack([heavy[i], heavy[j]], 1)
    maps = {
        "dihedrals": PositionTorsions(quads, 1),
        "distances": PositionDistances(pairs),
        "cartesian": PositionCartesian(heavy, top.xyz[0, heavy]),
    }
    atoms = {"dihedrals": quads.ravel(), "distances": pairs.ravel(), "cartesian": heavy}
    rng = np.random.default_rng(1)
    walk = np.cumsum(0.002 * rng.normal(size=(3000,) + top.xyz.shape[1:]), 0)
    return maps, atoms, torch.tensor(top.xyz[0] + walk, dtype=torch.float64)


def adk_kinds() -> tuple[dict, dict, torch.Tensor] | None:
    """Adenylate kinase (MDAnalysisTests' ``adk.psf`` + ``adk_dims.dcd``, 3341 atoms,
    protein-size inputs): its 426 backbone torsions (phi, psi: 852 features), the 1312
    C-alpha pairs within 0.9 nm in the first frame and its 214 C-alpha atoms superposed on
    the first frame; the trajectory's positions. None without MDAnalysisTests."""
    try:
        import MDAnalysisTests.datafiles as files
    except ImportError:
        return None
    import mdtraj as md

    from dpnets.export import PositionCartesian, PositionDistances, PositionTorsions

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traj = md.load(files.DCD, top=files.PSF)
    phi, psi = md.compute_phi(traj)[0], md.compute_psi(traj)[0]
    quads = np.concatenate([phi, psi])
    ca = traj.topology.select("name CA")
    i, j = np.triu_indices(len(ca), k=1)
    close = np.linalg.norm(traj.xyz[0, ca[i]] - traj.xyz[0, ca[j]], axis=-1) < 0.9
    pairs = np.stack([ca[i[close]], ca[j[close]]], 1)
    maps = {
        "dihedrals": PositionTorsions(quads, len(phi)),
        "distances": PositionDistances(pairs),
        "cartesian": PositionCartesian(ca, traj.xyz[0, ca]),
    }
    atoms = {"dihedrals": quads.ravel(), "distances": pairs.ravel(), "cartesian": ca}
    return maps, atoms, torch.tensor(traj.xyz, dtype=torch.float64)


def kind_cases(
    dtype: torch.dtype, epochs: int, widths, maps: dict, atoms: dict, pos: torch.Tensor, tmp: str
) -> dict:
    """Per feature kind: ``(bare encoder, exported file, floor, feature state, positions,
    width, forces-output module, bare encoder with its gradient by hand)`` for the
    positions-in files of models fitted on each map's features of the positions ``pos``
    (T, n_atoms, 3)."""
    from dpnets.engines import openmm_torch_cv
    from dpnets.export import ExportError, export

    double = dtype == torch.float64
    n = pos.shape[1]
    out = {}
    for kind, fmap in maps.items():
        with torch.no_grad():
            x = fmap.double()(pos).numpy()
        op = fit_on(x, widths, 3, double, epochs)
        enc = copy.deepcopy(op.features_.encoder_).to(dtype).eval()
        for p in enc.parameters():
            p.requires_grad_(False)
        bare = torch.jit.script(enc)
        floor = torch.jit.script(torch.nn.Sequential(Gather(atoms[kind], x.shape[1]), enc))
        path = f"{tmp}/{kind}.pt"
        export(op, path, modes=[1], dtype=dtype, inputs=fmap, input_shape=(n, 3))
        k = min(100, len(x) - 1)
        state = torch.tensor(x[k], dtype=dtype)
        try:  # None where the file has no forces (an encoder not written out by hand)
            forces = torch.jit.load(str(openmm_torch_cv(path, forces=True)))
        except ExportError:
            forces = None
        hand = torch.jit.freeze(torch.jit.script(HandMLP(enc)).eval())
        with torch.no_grad():
            _, g = hand(state)
        xi = state.clone().requires_grad_(True)
        (g_auto,) = torch.autograd.grad(enc(xi.unsqueeze(0))[0, 0], xi)
        assert torch.allclose(g, g_auto, rtol=1e-4, atol=1e-5)  # the same gradient
        out[kind] = (
            bare,
            torch.jit.load(path),
            floor,
            state,
            pos[k].to(dtype),
            x.shape[1],
            forces,
            hand,
        )
    return out


class NoGrad:
    """A case timed as one call, no autograd (the module returns its gradient itself)."""

    def __init__(self, fn) -> None:
        self.fn = fn


def per_call(fn, x: torch.Tensor, calls: int, per_output: bool = False) -> float:
    """Seconds per forward + input gradient of ``fn`` on ``x``: one backward of the summed
    outputs, or with ``per_output`` one per output column as PLUMED's PYTORCH_MODEL takes
    them (``autograd::grad`` of each ``node-j`` with the graph retained)."""
    t0 = time.perf_counter()
    if isinstance(fn, NoGrad):
        for _ in range(calls):
            fn.fn(x)
        return (time.perf_counter() - t0) / calls
    for _ in range(calls):
        xi = x.detach().requires_grad_(True)
        y = fn(xi)
        if per_output:
            for j in range(y.shape[-1]):
                (g,) = torch.autograd.grad(y[..., j : j + 1].sum(), xi, retain_graph=True)
        else:
            (g,) = torch.autograd.grad(y.sum(), xi)
    return (time.perf_counter() - t0) / calls


def kind_timings(kinds: dict) -> dict:
    """The timed cases of :func:`kind_cases`: bare encoder, exported file, floor."""
    cases = {}
    for kind, (bare_k, file_k, floor_k, state_k, pos_k, _, forces_k, hand_k) in kinds.items():
        cases[f"{kind}: bare encoder on the features"] = (
            lambda s, m=bare_k: m(s.unsqueeze(0)),
            state_k,
        )
        cases[f"{kind}: exported, positions in"] = (file_k, pos_k)
        cases[f"{kind}: floor (bare gather + encoder)"] = (
            lambda s, m=floor_k: m(s.unsqueeze(0)),
            pos_k,
        )
        if forces_k is not None:
            cases[f"{kind}: forces-output module, no autograd"] = (NoGrad(forces_k), pos_k)
        cases[f"{kind}: bare encoder, gradient by hand"] = (NoGrad(hand_k), state_k)
    return cases


def kind_ratios(kinds: dict, med: dict) -> dict:
    """Per kind: its width, the exported file's, the floor's and the forces-output module's
    ratios to the bare encoder (forward + autograd), and the forces-output module's to the
    bare encoder with its gradient by hand."""
    bare = "{}: bare encoder on the features"
    forces = "{}: forces-output module, no autograd"

    def ratio(kind: str, to: str) -> float | None:  # None: the file has no forces
        f = med.get(forces.format(kind))
        return None if f is None else f / med[to]

    return {
        kind: {
            "features": kinds[kind][5],
            "ratio_positions_in": med[f"{kind}: exported, positions in"]
            / med[f"{kind}: bare encoder on the features"],
            "ratio_floor": med[f"{kind}: floor (bare gather + encoder)"]
            / med[f"{kind}: bare encoder on the features"],
            "ratio_forces_output": ratio(kind, bare.format(kind)),
            "ratio_forces_output_to_hand": ratio(kind, f"{kind}: bare encoder, gradient by hand"),
        }
        for kind in kinds
    }


def timed(cases: dict, rounds: int, calls: int) -> dict:
    """Median over interleaved rounds of the microseconds per call of each case."""
    for fn, inp in cases.values():  # warm-up: TorchScript profiles its first calls
        per_call(fn, inp, 50)
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for k, (fn, inp) in cases.items():
            times[k].append(per_call(fn, inp, calls))
    return {k: float(np.median(v)) * 1e6 for k, v in times.items()}


def bench_adk(rounds: int, calls: int, epochs: int, widths) -> dict | None:
    """:func:`adk_kinds`' positions-in files (float32) against their bare encoders; None
    without MDAnalysisTests."""
    found = adk_kinds()
    if found is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        kinds = kind_cases(torch.float32, epochs, widths, *found, tmp)
    med = timed(kind_timings(kinds), rounds, calls)
    return {
        "system": "adenylate kinase (adk.psf + adk_dims.dcd, 3341 atoms)",
        "dtype": "float32",
        "encoder": f"MLP features-{'-'.join(map(str, widths))}-3 (celu)",
        "us_per_call_fwd_bwd": med,
        "kinds": kind_ratios(kinds, med),
    }


def bench(dtype: torch.dtype, rounds: int, calls: int, epochs: int, widths) -> dict:
    from dpnets.export import PositionTorsions, TorsionInputs, export
    from dpnets.systems.alanine import pdb_path

    double = dtype == torch.float64
    op, x = fit_model(4, widths, 3, double, epochs)
    enc = copy.deepcopy(op.features_.encoder_).to(dtype).eval()
    for p in enc.parameters():
        p.requires_grad_(False)
    bare = torch.jit.script(enc)
    import mdtraj as md

    top = md.load(str(pdb_path()))
    phi = md.compute_phi(top)[0]
    psi = md.compute_psi(top)[0]
    quads = np.concatenate([phi, psi])
    tors_map = torch.jit.script(PositionTorsions(quads, 1).to(dtype))
    bare_pos = torch.jit.script(torch.nn.Sequential(PositionTorsions(quads, 1), enc).to(dtype))
    bare_tors = torch.jit.script(torch.nn.Sequential(TorsionInputs(1), enc).to(dtype))
    with tempfile.TemporaryDirectory() as tmp:
        export(op, f"{tmp}/f.pt", modes=[1], dtype=dtype)
        export(op, f"{tmp}/t.pt", modes=[1], dtype=dtype, inputs=TorsionInputs(1), input_shape=(2,))
        export(
            op,
            f"{tmp}/p.pt",
            modes=[1],
            dtype=dtype,
            inputs=PositionTorsions(quads, 1),
            input_shape=(top.n_atoms, 3),
        )
        files = {k: torch.jit.load(f"{tmp}/{k}.pt") for k in "ftp"}
        kinds = kind_cases(dtype, epochs, widths, *alanine_kinds(top), tmp)
    state = torch.tensor(x[100], dtype=dtype)
    angles = torch.tensor([-1.3, 1.1], dtype=dtype)
    pos = torch.tensor(top.xyz[0], dtype=dtype)
    assert torch.allclose(
        bare_pos(pos[None]), bare(tors_map(pos[None])), rtol=1e-5, atol=1e-6
    )  # the same computation
    cases = {
        "bare encoder (features, batch of 1)": (lambda s: bare(s.unsqueeze(0)), state),
        "exported, features in": (files["f"], state),
        "bare sin/cos map + encoder (torsions)": (lambda s: bare_tors(s.unsqueeze(0)), angles),
        "exported, torsions in": (files["t"], angles),
        "bare torsion map + encoder (positions)": (lambda s: bare_pos(s.unsqueeze(0)), pos),
        "exported, positions in": (files["p"], pos),
    }
    cases.update(kind_timings(kinds))
    med = timed(cases, rounds, calls)
    b = med["bare encoder (features, batch of 1)"]
    bt = med["bare sin/cos map + encoder (torsions)"]
    bp = med["bare torsion map + encoder (positions)"]
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "encoder": f"MLP 4-{'-'.join(map(str, widths))}-3 (celu)",
        "us_per_call_fwd_bwd": med,
        "ratio_features_in": med["exported, features in"] / b,
        "ratio_torsions_in": med["exported, torsions in"] / b,
        "ratio_torsions_in_same_map": med["exported, torsions in"] / bt,
        "ratio_positions_in": med["exported, positions in"] / bp,
        "kinds": kind_ratios(kinds, med),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny: seconds, no file written")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--out", default="benchmarks/results/export_cost/export_cost.json")
    ap.add_argument("--label", default="", help="a label stored with the results")
    ap.add_argument(
        "--no-adk", action="store_true", help="skip adenylate kinase (MDAnalysisTests' files)"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    from dpnets.nn.mlp import DEFAULT_WIDTHS

    widths = tuple(DEFAULT_WIDTHS)
    rounds, calls, epochs = args.rounds, args.calls, 3
    if args.smoke:
        rounds, calls, epochs, widths = 2, 20, 1, (16, 16)
    rows = [bench(dt, rounds, calls, epochs, widths) for dt in (torch.float32, torch.float64)]
    for r in rows:
        print(f"\n{r['dtype']}, {r['encoder']}: fwd+bwd per call on one state (us)")
        for k, v in r["us_per_call_fwd_bwd"].items():
            print(f"  {k:42s} {v:8.1f}")
        print(
            f"  exported / bare: features in {r['ratio_features_in']:.2f}, torsions in "
            f"{r['ratio_torsions_in']:.2f} (against the bare encoder on sin/cos features; "
            f"{r['ratio_torsions_in_same_map']:.2f} with the same map), positions in "
            f"{r['ratio_positions_in']:.2f} (goal <= 1.3)"
        )
        for kind, k in r["kinds"].items():
            print(
                f"  {kind} ({k['features']} features), positions in / bare encoder on the "
                f"features: {k['ratio_positions_in']:.2f} (goal <= 1.5; a bare gather alone: "
                f"{k['ratio_floor']:.2f}); forces-output module (no autograd) / bare "
                f"encoder: {k['ratio_forces_output']:.2f}, / bare encoder with its gradient "
                f"by hand: {k['ratio_forces_output_to_hand']:.2f}"
            )
    adk = None if args.no_adk else bench_adk(rounds, calls, epochs, widths)
    if adk is None:
        print("\nadenylate kinase: skipped (--no-adk, or MDAnalysisTests is not installed)")
    else:
        print(f"\n{adk['system']}, {adk['dtype']}, {adk['encoder']}: fwd+bwd per call (us)")
        for k, v in adk["us_per_call_fwd_bwd"].items():
            print(f"  {k:42s} {v:8.1f}")
        for kind, k in adk["kinds"].items():
            print(
                f"  adk {kind} ({k['features']} features), positions in / bare encoder on the "
                f"features: {k['ratio_positions_in']:.2f} (goal <= 1.5; a bare gather alone: "
                f"{k['ratio_floor']:.2f})"
            )
            if k["ratio_forces_output"] is not None:
                print(
                    f"  adk {kind}: forces-output module (no autograd) / bare encoder: "
                    f"{k['ratio_forces_output']:.2f}, / bare encoder with its gradient by hand: "
                    f"{k['ratio_forces_output_to_hand']:.2f}"
                )
    if args.smoke:
        return
    result = {
        "label": args.label,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "processor": platform.processor(),
        "threads": torch.get_num_threads(),
        "rounds": rounds,
        "calls": calls,
        "rows": rows,
        "adk": adk,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
