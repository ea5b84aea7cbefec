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
from pathlib import Path
from typing import Any

from dpnets.nn.mlp import DEFAULT_WIDTHS
from dpnets.representation import DEFAULTS

__all__ = [
    "WorkflowError",
    "DEFAULT_CONFIG",
    "load_config",
    "write_config",
    "absolute_paths",
    "read_fit",
]


class WorkflowError(ValueError):
    """A user error in the command-line workflow (bad option, folder or file); the command
    line prints its one-line message and exits with status 2."""


#: Settings of ``dpnets fit`` (the ``[data]`` and ``[model]`` tables of ``config.toml``).
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "data": {
        "paths": [],
        "keys": [],
        "columns": [],
        "topology": "",
        "features": "raw",
        "selection": "heavy",
        "stride": 1,
        "dt": 0.0,  # 0: from the files, else 1 frame
    },
    "model": {
        "lag": 1,
        "encoder": "mlp:" + ",".join(str(h) for h in DEFAULT_WIDTHS),
        "dim": DEFAULTS["r"],
        "objective": DEFAULTS["objective"],
        "gamma": DEFAULTS["gamma"],
        "lr": DEFAULTS["lr"],
        "batch_size": DEFAULTS["batch_size"],
        "epochs": DEFAULTS["epochs"],
        "seed": 0,
        "device": "",
        # the operator on the learned features: False, True (detailed balance: symmetrised
        # covariances, real spectrum) or "reweight" (Koopman-reweighted first)
        "reversible": False,
    },
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


#: ranges of the numeric settings: key -> (low, low open)
_CONFIG_RANGES: dict[str, tuple[float, bool]] = {
    "stride": (1, False),
    "dt": (0.0, False),
    "lag": (1, False),
    "dim": (1, False),
    "gamma": (0.0, False),
    "lr": (0.0, True),
    "batch_size": (2, False),
    "epochs": (1, False),
    "seed": (0, False),
}


def _config_value(path: Any, table: str, key: str, value: Any) -> Any:
    """A value of ``config.toml`` checked against the type of its default (and its range);
    a bad one raises a :class:`WorkflowError` naming the file, the table and the key."""
    from dpnets.params import check_int, check_real

    default = DEFAULT_CONFIG[table][key]
    where = f"{path}: [{table}] {key} = {value!r}"
    low, low_open = _CONFIG_RANGES.get(key, (None, False))
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
    if data.get("topology"):
        data["topology"] = os.path.abspath(os.path.expanduser(str(data["topology"])))
    return data


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
