"""Command line: ``dpnets fit``, ``analyze``, ``transform``, ``forecast`` on the user's files
(:mod:`dpnets.workflow`), ``dpnets export`` (:mod:`dpnets.engines`), ``dpnets demo`` and
``dpnets reproduce NAME``.

A user error (a missing or unreadable file, a bad option, a non-empty output folder) prints
one line, ``dpnets: error: FILE: problem``, and exits with status 2; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]


_FIT_EXAMPLE = """examples:
  dpnets fit traj_*.npy --lag 10 --dt 0.1 --out fit/
  dpnets fit run*.xtc --topology ala.pdb --features dihedrals --lag 10 --out fit/
  dpnets fit --config fit/config.toml --out fit2/      # repeat a fit
  torchrun --nproc-per-node 4 -m dpnets fit run*.xtc ... --out fit/   # 4 GPUs/processes,
      # one exact global batch (--batch-size is the total); rank 0 writes the folder
"""


def _add_fit_options(p: argparse.ArgumentParser, table: str) -> None:
    """The ``dpnets fit`` options of one ``config.toml`` table, from
    :data:`dpnets.fitfolder.FIT_OPTIONS` (name, type, default, help and choices)."""
    from dpnets.fitfolder import FIT_OPTIONS

    for o in FIT_OPTIONS:
        if o.table != table:
            continue
        default = str(o.default).lower() if isinstance(o.default, bool) else o.default
        kw = {k: v for k, v in o.cli.items() if k not in ("aliases", "positional")}
        kw["help"] = o.help.format(default=default)
        if o.cli.get("positional"):
            p.add_argument("data", nargs="*", **kw)
            continue
        if isinstance(o.default, (int, float)) and not isinstance(o.default, bool):
            kw["type"] = type(o.default)
        p.add_argument(*o.flags, dest=o.key, **kw)


def _parser() -> argparse.ArgumentParser:
    from dpnets import __version__
    from dpnets.experiments import EXPERIMENTS
    from dpnets.fitfolder import REVERSIBLE_WORDS

    parser = argparse.ArgumentParser(
        prog="dpnets",
        description="Deep Projection Networks: slow modes, timescales and forecasts from "
        "trajectories",
        epilog="examples:\n  dpnets fit traj_*.npy --lag 10 --out fit/\n  dpnets analyze fit/\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"dpnets {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks of errors (default: one line)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    raw = argparse.RawDescriptionHelpFormatter
    # global options are accepted after the subcommand too (dpnets fit ... --debug)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show tracebacks of errors (default: one line per error)",
    )
    add_parser = sub.add_parser

    def _sub_parser(*args: Any, **kwargs: Any) -> argparse.ArgumentParser:
        return add_parser(*args, parents=[common], **kwargs)

    sub.add_parser = _sub_parser  # type: ignore[method-assign]

    p_fit = sub.add_parser(
        "fit",
        help="learn features and the transfer operator from trajectory files",
        epilog=_FIT_EXAMPLE,
        formatter_class=raw,
    )
    _add_fit_options(p_fit, "data")  # the data paths (positional)
    p_fit.add_argument(
        "--out", required=True, help="output folder, empty or new (required; see --overwrite)"
    )
    p_fit.add_argument(
        "--config",
        help="repeat an earlier fit from its config.toml; options given here override it "
        "(default: none)",
    )
    _add_fit_options(p_fit, "model")
    p_fit.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty --out folder (default: refuse)",
    )
    p_fit.add_argument(
        "--quiet",
        action="store_true",
        help="print no progress bars or report (default: print them)",
    )

    p_an = sub.add_parser(
        "analyze",
        help="validate a fit: timescales vs lag, CK test, metastable sets, plots",
        epilog="example:\n  dpnets analyze fit/ --lags 1 2 5 10 20\n",
        formatter_class=raw,
    )
    p_an.add_argument("fit", help="a folder written by dpnets fit")
    p_an.add_argument(
        "data", nargs="*", help="trajectory files or glob patterns (default: the fit's own)"
    )
    p_an.add_argument(
        "--lags",
        type=int,
        nargs="+",
        help="lags in frames at which to re-estimate the timescales (default: a quarter, "
        "half, 1, 2 and 4 times the model's lag, those the data hold)",
    )
    p_an.add_argument(
        "--sets",
        type=int,
        help="number of metastable sets (PCCA+; default: from the spectral gap, the report "
        "says why)",
    )
    p_an.add_argument(
        "--bootstrap",
        type=int,
        default=40,
        help="bootstrap resamples of whole trajectories for the intervals; 40 or more for "
        "95%% intervals (default 40)",
    )
    p_an.add_argument(
        "--blocks",
        type=int,
        default=None,
        help="bootstrap blocks of a single trajectory (default: as many as hold twice the "
        "longest lag each, 2 to 10)",
    )
    p_an.add_argument(
        "--reversible",
        nargs="?",
        const="true",
        choices=tuple(REVERSIBLE_WORDS),
        help="re-estimate the operator under detailed balance (true), after Koopman "
        "reweighting (reweight) or without it (false); --reversible alone means true "
        "(default: as the fit was)",
    )
    p_an.add_argument("--out", help="output folder (default: FIT/analysis)")
    p_an.add_argument(
        "--quiet", action="store_true", help="print no progress or report (default: print them)"
    )

    p_tr = sub.add_parser(
        "transform",
        help="features (or eigenfunctions) of every frame, one array per input trajectory",
        epilog="examples:\n"
        "  dpnets transform fit/ new_*.npy --out feats.npz   # arrays traj_0, traj_1, ...\n"
        "  dpnets transform fit/ run.xtc --eigenfunctions --out phi.npy   # one trajectory\n",
        formatter_class=raw,
    )
    p_tr.add_argument("fit", help="a folder written by dpnets fit")
    p_tr.add_argument(
        "data", nargs="+", help="trajectory files or glob patterns, read as the fit read its own"
    )
    p_tr.add_argument(
        "--out",
        required=True,
        help="a .npz file (arrays traj_0, traj_1, ... in input order, and sources) or, for "
        "one trajectory, a .npy file (required)",
    )
    p_tr.add_argument(
        "--eigenfunctions",
        action="store_true",
        help="write the model's eigenfunctions (mode 0 the constant) instead of its features "
        "(default: features, the constant first)",
    )
    p_tr.add_argument(
        "--topology",
        default=None,
        help="the topology of these files, when it is not the fit's (e.g. a heavy-atom "
        "trajectory of an all-atom fit); they must give the fit's features (default: the "
        "fit's topology)",
    )

    p_fc = sub.add_parser(
        "forecast",
        help="forecast the state 1..N lags ahead of every frame",
        epilog="example:\n  dpnets forecast fit/ start.npy --steps 10 --out pred.npy\n",
        formatter_class=raw,
    )
    p_fc.add_argument("fit", help="a folder written by dpnets fit")
    p_fc.add_argument(
        "data", nargs="+", help="files of starting states, read as the fit read its own"
    )
    p_fc.add_argument(
        "--steps",
        type=int,
        required=True,
        help="forecast 1..STEPS lags ahead of every frame (required)",
    )
    p_fc.add_argument(
        "--out",
        required=True,
        help="a .npy file: an array (steps, frames, *state_shape) whose [k-1, i] forecasts "
        "the state k lags after frame i of the files' frames in order (required)",
    )

    p_demo = sub.add_parser(
        "demo",
        help="train a DPNet on Ornstein-Uhlenbeck (about a minute)",
        epilog="example:\n  dpnets demo --epochs 10 --out demo.pt\n",
        formatter_class=raw,
    )
    p_demo.add_argument(
        "--out", default="dpnets-demo.pt", help="where to save the model (default dpnets-demo.pt)"
    )
    p_demo.add_argument(
        "--samples", type=int, default=50_000, help="training frames to simulate (default 50000)"
    )
    p_demo.add_argument(
        "--epochs", type=int, default=None, help="training epochs (default: DPNet's default)"
    )
    p_demo.add_argument(
        "--seed", type=int, default=0, help="seed of the data and the fit (default 0)"
    )
    p_demo.add_argument(
        "--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)"
    )
    p_demo.add_argument(
        "--no-progress", action="store_true", help="no progress bar (default: show one)"
    )

    p_ex = sub.add_parser(
        "export",
        help="write slow modes as a TorchScript file for MD engines (PLUMED, OpenMM-Torch)",
        epilog="examples:\n"
        "  dpnets export fit/ --modes 1,2 --out plumed/cv.pt --topology system.pdb"
        "   # + plumed.dat\n"
        "  dpnets export fit/ --input positions --topology system.pdb --out cv.pt"
        "   # OpenMM-Torch\n"
        "  dpnets export model.pt --modes 1 --out cv.pt --precision float64\n",
        formatter_class=raw,
    )
    p_ex.add_argument("fit", help="a folder written by dpnets fit, or a model file")
    p_ex.add_argument(
        "--modes",
        default="1",
        help="eigenfunctions to export, comma-separated; 0 is the constant (default 1: the "
        "slowest)",
    )
    p_ex.add_argument(
        "--out",
        required=True,
        help="the TorchScript file to write (.pt; required); plumed.dat or the OpenMM-Torch "
        "recipe goes next to it",
    )
    p_ex.add_argument(
        "--precision",
        choices=("auto", "float32", "float64"),
        default=None,
        help="the precision computed inside; the file answers in its input's dtype, so "
        "PLUMED's float32 and OpenMM-Torch's float64 run either (default auto: float32 where "
        "it agrees with the model within 1e-4 of the CV's range on frames of the fit's data, "
        "else float64, said in one line)",
    )
    p_ex.add_argument(
        "--double",
        action="store_true",
        help="the same as --precision float64 (default: --precision auto)",
    )
    p_ex.add_argument(
        "--complex-parts",
        action="store_true",
        help="export a complex mode (a non-reversible fit's oscillating pair) as two outputs, "
        "its real and imaginary parts (default: complex modes are refused; dpnets fit "
        "--reversible gives real ones)",
    )
    p_ex.add_argument(
        "--input",
        choices=("auto", "features", "positions"),
        default="auto",
        help="what the file takes: positions (all the engine topology's atoms, nm; "
        "OpenMM-Torch), features (torsions/distances as PLUMED computes them, + plumed.dat); "
        "default auto: features for dihedral/distance fits, positions for cartesian and "
        "position fits",
    )
    p_ex.add_argument(
        "--topology",
        default=None,
        help="the engine's topology (e.g. the all-atom PDB it simulates): atoms are matched "
        "to the fit's by chain, residue and atom name (default: the fit's topology)",
    )
    p_ex.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="simulation temperature in K for the plumed.dat sketches (default: a "
        "placeholder PLUMED refuses until set)",
    )

    p_rep = sub.add_parser(
        "reproduce",
        help="run a paper experiment and print its table",
        epilog="example:\n  dpnets reproduce logistic-map --quick --out results/\n",
        formatter_class=raw,
    )
    p_rep.add_argument("name", choices=sorted(EXPERIMENTS), help="the experiment to run")
    p_rep.add_argument(
        "--quick",
        action="store_true",
        help="a small smoke-test version, minutes not hours (default: the full experiment)",
    )
    p_rep.add_argument(
        "--seeds", type=int, default=None, help="number of seeds (default: the experiment's)"
    )
    p_rep.add_argument(
        "--out",
        default=None,
        help="output folder for results.json and figures (default dpnets-out/NAME)",
    )
    p_rep.add_argument(
        "--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)"
    )
    p_rep.add_argument(
        "--no-progress", action="store_true", help="no progress bars (default: show them)"
    )
    p_rep.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes that run the fits in parallel, where the experiment supports it "
        "(default: the experiment's)",
    )
    p_rep.add_argument(
        "--engine",
        choices=("tabulated", "openmm-torch"),
        default=None,
        help="how OpenMM evaluates the CV, where the experiment biases one in OpenMM "
        "(enhanced-sampling-alanine): tabulated on a (phi, psi) grid, or the network at "
        "every step in an OpenMM-Torch TorchForce, which needs openmmtorch (default: the "
        "experiment's, tabulated)",
    )
    return parser


def _fit_config(args: argparse.Namespace) -> dict:
    from dpnets.fitfolder import FIT_OPTIONS
    from dpnets.workflow import DEFAULT_CONFIG, load_config

    config = (
        load_config(args.config) if args.config else {t: dict(v) for t, v in DEFAULT_CONFIG.items()}
    )
    for o in FIT_OPTIONS:  # options given override the file
        value = getattr(args, "data" if o.cli.get("positional") else o.key)
        if value is None or (o.cli.get("positional") and not value):
            continue
        if o.values is not None:
            value = o.values[value]
        config[o.table][o.key] = list(value) if isinstance(value, list) else value
    return config


def _run(args: argparse.Namespace) -> int:
    from dpnets import workflow
    from dpnets.fitfolder import REVERSIBLE_WORDS

    if args.command == "fit":
        from dpnets import distributed

        distributed.init_from_env()  # a torchrun launch: train on all its processes
        main = distributed.is_main_process()
        report = workflow.fit_files(
            _fit_config(args),
            args.out,
            overwrite=args.overwrite,
            progress=not args.quiet and main,
        )
        if not args.quiet and main:
            print(report)
        return 0
    if args.command == "analyze":
        report = workflow.analyze(
            args.fit,
            args.data,
            lags=args.lags,
            n_sets=args.sets,
            n_bootstrap=args.bootstrap,
            n_blocks=args.blocks,
            reversible=None if args.reversible is None else REVERSIBLE_WORDS[args.reversible],
            out=args.out,
            progress=not args.quiet,
        )
        if not args.quiet:
            print(report)
        return 0
    if args.command == "transform":
        arrays = workflow.transform_files(
            args.fit,
            args.data,
            args.out,
            eigenfunctions=args.eigenfunctions,
            topology=args.topology,
        )
        what = "eigenfunctions" if args.eigenfunctions else "features"
        shapes = ", ".join(str(a.shape) for a in arrays)
        print(f"{args.out}: {what} of {len(arrays)} trajectories, shapes {shapes}")
        return 0
    if args.command == "forecast":
        pred = workflow.forecast_file(args.fit, args.data, args.steps, args.out)
        print(
            f"{args.out}: forecasts of shape {pred.shape}: [k - 1, i] is the state k lags "
            "after frame i (the files' frames in order)"
        )
        return 0
    if args.command == "demo":
        print(
            workflow.demo(
                args.out,
                n=args.samples,
                epochs=args.epochs,
                seed=args.seed,
                progress=not args.no_progress,
                device=args.device,
            )
        )
        return 0
    if args.command == "export":
        import torch

        from dpnets.engines import export_fit
        from dpnets.export import parse_modes, read_metadata

        if args.double and args.precision not in (None, "float64"):
            raise ValueError(f"--double contradicts --precision {args.precision}")
        precision = "float64" if args.double else (args.precision or "auto")
        dtype = {"auto": None, "float32": torch.float32, "float64": torch.float64}[precision]
        written = export_fit(
            args.fit,
            args.out,
            parse_modes(args.modes),
            dtype,
            inputs=args.input,
            topology=args.topology,
            temperature=args.temperature,
            complex_parts=args.complex_parts,
        )
        note = read_metadata(written[0]).get("precision", {}).get("note")
        if note:
            print(note)
        print("wrote " + ", ".join(written))
        return 0
    from dpnets.experiments import run_experiment

    kwargs = {"quick": args.quick, "device": args.device, "progress": not args.no_progress}
    if args.seeds is not None:
        kwargs["seeds"] = args.seeds
    if args.out is not None:
        kwargs["out"] = Path(args.out)
    if args.workers is not None:
        kwargs["workers"] = args.workers
    if args.engine is not None:
        kwargs["engine"] = args.engine
    print(run_experiment(args.name, **kwargs))
    return 0


def _one_line_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> str:
    """A warning as the command line prints it: one line, without the source line."""
    return f"dpnets: warning: {' '.join(str(message).split())}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for user errors)."""
    import warnings

    args = _parser().parse_args(argv)
    if args.debug:
        return _run(args)
    formatter = warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    try:
        return _run(args)
    except (ValueError, OSError, ImportError, FloatingPointError) as err:  # diverged training
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"dpnets: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpnets: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = formatter


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
