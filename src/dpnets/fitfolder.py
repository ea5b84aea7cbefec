"""The fit folder that ``dpnets fit`` writes, read and written in one place: its
``config.toml`` (the resolved settings, every key checked against :data:`DEFAULT_CONFIG`) and
its ``model.pt``. ``dpnets analyze``, ``transform``, ``forecast`` (:mod:`dpnets.workflow`) and
``export`` (:mod:`dpnets.export`) all open a fit folder through :func:`read_fit`.

The data paths and the topology are stored absolute (:func:`absolute_paths`), so a fit
folder's commands work from any folder; a relative path in an older folder is read from the
current folder, else from the fit folder.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpnets.nn.mlp import DEFAULT_WIDTHS
from dpnets.representation import DEFAULTS

__all__ = [
    "WorkflowError",
    "DEFAULT_CONFIG",
    "FIT_OPTIONS",
    "FitOption",
    "REVERSIBLE_WORDS",
    "estimator_params",
    "load_config",
    "write_config",
    "absolute_paths",
    "bias_spec",
    "read_fit",
]


class WorkflowError(ValueError):
    """A user error in the command-line workflow (bad option, folder or file); the command
    line prints its one-line message and exits with status 2."""


@dataclass(frozen=True)
class FitOption:
    """One setting of ``dpnets fit``: its ``config.toml`` table and key, its default, the
    range of a number (``low``, ``low_open``), and its command-line option (``--key`` with
    dashes; ``help`` states the default through ``{default}``, ``cli`` holds further
    ``argparse`` settings, ``values`` maps the option's words to the setting), and ``to``:
    the estimator whose parameter of the same name it sets (``"DPNet"``), if it is passed
    through unchanged. The one place an option is defined: :data:`DEFAULT_CONFIG`, the
    checks of a configuration file (:func:`load_config`), the ``dpnets fit`` options
    (:mod:`dpnets.cli`) and the estimator parameters of the fit (:func:`estimator_params`)
    derive from :data:`FIT_OPTIONS`."""

    table: str
    key: str
    default: Any
    help: str
    low: float | None = None
    low_open: bool = False
    cli: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] | None = None
    to: str = ""

    @property
    def flags(self) -> tuple[str, ...]:
        """The option's names: ``--key`` with dashes, then any older names (``cli``)."""
        return ("--" + self.key.replace("_", "-"), *self.cli.get("aliases", ()))


#: ``--reversible`` words -> ``TransferOperator(reversible=...)``
REVERSIBLE_WORDS = {"false": False, "true": True, "reweight": "reweight"}

#: Every setting of ``dpnets fit``, in ``config.toml`` order (``[data]``, then ``[model]``).
FIT_OPTIONS: tuple[FitOption, ...] = (
    FitOption("data", "paths", [], "trajectory files or glob patterns", cli={"positional": True}),
    FitOption(
        "data",
        "keys",
        [],
        ".npz keys or .h5 dataset paths to read (default: all)",
        cli={"nargs": "+"},
    ),
    FitOption(
        "data",
        "columns",
        [],
        ".csv/.txt columns to read, by header name or 0-based index (default: all)",
        cli={"nargs": "+"},
    ),
    FitOption(
        "data",
        "topology",
        "",
        "topology of MD trajectories (.pdb, .gro, .prmtop, .psf; GROMACS .tpr/.top through "
        "MDAnalysis; default: none, needed for MD files)",
    ),
    FitOption(
        "data",
        "features",
        "raw",
        "what MD frames become: atom positions (for schnet), dihedrals (sin/cos of the "
        "--torsions of the selected residues), pairwise distances of the selection (within "
        "--cutoff), or cartesian (the selection's coordinates superposed on --reference) "
        "(default raw: positions)",
        cli={"choices": ("raw", "positions", "dihedrals", "distances", "cartesian")},
    ),
    FitOption(
        "data",
        "selection",
        "heavy",
        "MD atoms to keep: heavy, backbone, all or mdtraj syntax, e.g. 'name CA' or "
        "'resid 5 to 10'; dihedrals keep the torsions of the residues it touches "
        "(default {default})",
    ),
    FitOption(
        "data",
        "torsions",
        "phi,psi",
        "torsion kinds of --features dihedrals, comma-separated among phi, psi, omega, "
        "chi1, chi2, chi3, chi4 (default {default})",
    ),
    FitOption(
        "data",
        "cutoff",
        0.0,
        "--features distances: keep the pairs closer than this many nm in some frame "
        "(contacts; default {default}: every pair)",
        low=0.0,
    ),
    FitOption(
        "data",
        "reference",
        "",
        "--features cartesian: the structure to superpose on, same topology (default: the "
        "first frame read)",
    ),
    FitOption("data", "stride", 1, "keep every k-th frame (default {default}: every frame)", low=1),
    # 0: from the files, else 1 frame
    FitOption(
        "data",
        "dt",
        0.0,
        "time between the frames kept, after --stride (default: the files' time per frame "
        "times --stride, else 1 frame)",
        low=0.0,
    ),
    FitOption(
        "data",
        "time_unit",
        "",
        "the unit of --dt and of the timescales, e.g. ns; the files' times (ps) are converted "
        "to fs, ps, ns, us, ms or s (default: the files' ps, else 'time units')",
    ),
    # a biased run (issue 44): the bias energy per frame -> pairs in rescaled time
    FitOption(
        "data",
        "bias",
        [],
        "the bias energy of every frame of a biased run (metadynamics, OPES, umbrella): "
        "FILE[:COLUMN] per trajectory, in order; PLUMED COLVAR files (the column by name, "
        "default the one ending in .bias; metad.bias+uwall.bias: their sum) or .npy arrays, "
        "read with --stride, rows matched to frames by time when both are known; pairs are then "
        "formed at --lag frames of rescaled (unbiased) time, valid for a bias that changes "
        "slowly against the lag and barely acts at the transition states (default: none, an "
        "unbiased run)",
        cli={"nargs": "+"},
    ),
    FitOption(
        "data",
        "temperature",
        0.0,
        "temperature of the biased run in kelvin, for beta = 1/(k_B T) of --bias (default: "
        "none; needed with --bias unless --bias-units kT)",
        low=0.0,
    ),
    FitOption(
        "data",
        "bias_units",
        "kJ/mol",
        "energy units of the --bias files (default {default}, PLUMED's)",
        cli={"choices": ("kJ/mol", "kcal/mol", "kT")},
    ),
    FitOption("model", "lag", 1, "lag between paired frames, in frames (default {default})", low=1),
    FitOption(
        "model",
        "encoder",
        "mlp:" + ",".join(str(h) for h in DEFAULT_WIDTHS),
        "the network: mlp:W1,W2,... (hidden widths) or schnet for MD positions (default {default})",
    ),
    FitOption(
        "model", "dim", DEFAULTS["r"], "number of learned features r (default {default})", low=1
    ),
    FitOption(
        "model",
        "preproject",
        "",
        "a fixed linear pre-projection of the input features before the network: tica:N, "
        "their N slowest TICA components at the lag (thousands of torsions or contacts "
        "become tens; saved with the model and exported with it; default: none)",
    ),
    FitOption(
        "model",
        "objective",
        DEFAULTS["objective"],
        "the DPNet training objective (default {default})",
        cli={"aliases": ("--score",), "choices": ("projection", "relaxed", "vamp1", "vamp2")},
        to="DPNet",
    ),
    FitOption(
        "model",
        "gamma",
        DEFAULTS["gamma"],
        "weight of the metric distortion penalty (paper Eq. 7; default {default})",
        low=0.0,
        to="DPNet",
    ),
    FitOption(
        "model",
        "lr",
        DEFAULTS["lr"],
        "learning rate of the Adam optimiser (default {default})",
        low=0.0,
        low_open=True,
        to="DPNet",
    ),
    FitOption(
        "model",
        "batch_size",
        DEFAULTS["batch_size"],
        "pairs per optimisation step, the total over all processes (default {default})",
        low=2,
        to="DPNet",
    ),
    FitOption(
        "model",
        "epochs",
        DEFAULTS["epochs"],
        "passes over the training pairs (default {default})",
        low=1,
        to="DPNet",
    ),
    FitOption(
        "model",
        "seed",
        0,
        "seed of the weights, split and batches; the same seed repeats the fit (default {default})",
        low=0,
        to="DPNet",
    ),
    FitOption(
        "model", "device", "", "where to train: cpu, cuda or cuda:N (default: cuda if available)"
    ),
    # the operator on the learned features: False, True (detailed balance: symmetrised
    # covariances, real spectrum) or "reweight" (Koopman-reweighted first)
    FitOption(
        "model",
        "reversible",
        False,
        "estimate the transfer operator under detailed balance (equilibrium data): "
        "symmetrised covariances, real eigenvalues, TICA's timescales on the learned "
        "features; 'reweight' first reweights off-equilibrium data (short runs started away "
        "from equilibrium) by Koopman reweighting; --reversible alone means true (default "
        "{default}: the non-reversible estimate)",
        cli={"nargs": "?", "const": "true", "choices": tuple(REVERSIBLE_WORDS)},
        values=REVERSIBLE_WORDS,
        to="TransferOperator",
    ),
)

#: Settings of ``dpnets fit`` (the ``[data]`` and ``[model]`` tables of ``config.toml``),
#: from :data:`FIT_OPTIONS`.
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    table: {o.key: o.default for o in FIT_OPTIONS if o.table == table}
    for table in ("data", "model")
}

#: keys renamed since: old name -> new name (old config files still load)
_RENAMED = {"score": "objective"}


# ------------------------------------------------------------------------------ configuration
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string (JSON escapes are valid TOML)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(u) for u in v) + "]"
    raise TypeError(f"cannot write {v!r} to TOML")


def write_config(config: dict[str, dict[str, Any]], path: str | os.PathLike) -> None:
    """Write the two tables of a configuration as TOML (atomically)."""
    from dpnets.io import atomic_write

    lines = ["# dpnets fit configuration: dpnets fit --config THIS_FILE --out NEW_FOLDER"]
    for table in ("data", "model"):
        lines.append(f"\n[{table}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in config[table].items()]
    text = "\n".join(lines) + "\n"
    atomic_write(path, lambda fh: fh.write(text.encode()))


def load_config(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Read a ``config.toml``, checking every key against :data:`DEFAULT_CONFIG`."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError as err:
            raise WorkflowError("--config on Python 3.10 needs tomli: pip install tomli") from err
    from dpnets.io import open_regular

    try:
        with open_regular(path, "configuration file") as fh:  # a FIFO is refused unread
            raw = tomllib.load(fh)
    except FileNotFoundError as err:
        raise WorkflowError(f"{path}: no such configuration file") from err
    except tomllib.TOMLDecodeError as err:
        raise WorkflowError(f"{path}: not valid TOML ({err})") from err
    except IsADirectoryError as err:
        raise WorkflowError(f"{path}: is a folder, not a configuration file") from err
    except ValueError as err:  # a FIFO, device or folder
        raise WorkflowError(str(err)) from err
    config = {t: dict(v) for t, v in DEFAULT_CONFIG.items()}
    for table, values in raw.items():
        if table not in config or not isinstance(values, dict):
            raise WorkflowError(f"{path}: unknown table [{table}]; expected [data] and [model]")
        for key, value in values.items():
            key = _RENAMED.get(key, key) if table == "model" else key
            if key not in config[table]:
                raise WorkflowError(
                    f"{path}: unknown key {key!r} in [{table}]; expected one of "
                    f"{', '.join(config[table])}"
                )
            config[table][key] = _config_value(path, table, key, value)
    return config


def estimator_params(model: dict[str, Any], estimator: str) -> dict[str, Any]:
    """The parameters of ``estimator`` (``"DPNet"``) that ``[model]`` settings give
    (:attr:`FitOption.to`), by name (numbers as the type of their default; a missing
    setting: its default)."""
    return {
        o.key: type(o.default)(model.get(o.key, o.default))
        if isinstance(o.default, (int, float)) and not isinstance(o.default, bool)
        else model.get(o.key, o.default)
        for o in FIT_OPTIONS
        if o.table == "model" and o.to == estimator
    }


#: the options by table and key
_OPTIONS = {(o.table, o.key): o for o in FIT_OPTIONS}


def _config_value(path: Any, table: str, key: str, value: Any) -> Any:
    """A value of ``config.toml`` checked against the type of its default (and its range);
    a bad one raises a :class:`WorkflowError` naming the file, the table and the key."""
    from dpnets.params import check_int, check_real

    default = DEFAULT_CONFIG[table][key]
    where = f"{path}: [{table}] {key} = {value!r}"
    low, low_open = _OPTIONS[table, key].low, _OPTIONS[table, key].low_open
    try:
        if isinstance(default, bool):  # pragma: no cover - no bool settings yet
            if not isinstance(value, bool):
                raise TypeError("expected true or false")
        elif isinstance(default, int):
            return check_int(key, value, None if low is None else int(low))
        elif isinstance(default, float):
            return check_real(key, value, low, low_open=low_open)
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise TypeError(f"expected a string, got {type(value).__name__}")
        elif isinstance(default, list):
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
                raise TypeError("expected a list of strings")
    except (TypeError, ValueError) as err:
        raise WorkflowError(f"{where}: {err}") from None
    return value


# ------------------------------------------------------------------------------ fit folders
def absolute_paths(data: dict[str, Any]) -> dict[str, Any]:
    """The ``[data]`` table with its file patterns and topology made absolute (from the
    current folder), as a fit folder stores them."""
    data = dict(data)
    data["paths"] = [os.path.abspath(os.path.expanduser(str(p))) for p in data["paths"]]
    if data.get("bias"):
        data["bias"] = [_absolute_bias(str(b)) for b in data["bias"]]
    for key in ("topology", "reference"):
        if data.get(key):
            data[key] = os.path.abspath(os.path.expanduser(str(data[key])))
    return data


def bias_spec(spec: str) -> tuple[str, str | int | None]:
    """``(file, column)`` of a ``--bias FILE[:COLUMN]`` entry (the column by name, or a
    0-based index; None: the file's bias column)."""
    path, sep, column = str(spec).rpartition(":")
    if not sep or not path or "/" in column or os.sep in column:
        return str(spec), None
    return path, int(column) if column.isdigit() else column


def _absolute_bias(spec: str) -> str:
    path, column = bias_spec(spec)
    path = os.path.abspath(os.path.expanduser(path))
    return path if column is None else f"{path}:{column}"


def _resolved(path: str, folder: Path) -> str:
    """A stored path: absolute as written; a relative one (older folders) from the current
    folder where it matches, else from the fit folder."""
    if not path or os.path.isabs(path) or glob.glob(path, recursive=True):
        return path
    inside = str(folder / path)
    return inside if glob.glob(inside, recursive=True) else path


def read_fit(folder: str | os.PathLike) -> tuple[Path, dict[str, dict[str, Any]]]:
    """``(model file, configuration)`` of a folder written by ``dpnets fit``.

    The one reader of the fit-folder format: ``model.pt`` must be a file, ``config.toml``
    is read by :func:`load_config` (every key checked), and the stored data paths and
    topology are resolved (:func:`_resolved`). A bad folder raises :class:`WorkflowError`
    (one line naming it).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise WorkflowError(f"{folder}: no such fit folder")
    model = folder / "model.pt"
    if not model.is_file():
        raise WorkflowError(f"{folder}: not a dpnets fit folder (no model.pt)")
    if not (folder / "config.toml").exists():
        raise WorkflowError(f"{folder}: not a dpnets fit folder (no config.toml)")
    config = load_config(folder / "config.toml")
    data = config["data"]
    data["paths"] = [_resolved(str(p), folder) for p in data["paths"]]
    data["topology"] = _resolved(str(data["topology"]), folder)
    return model, config
