"""From a user's files to a validated model: the work behind ``dpnets fit``, ``dpnets
analyze``, ``dpnets transform`` and ``dpnets forecast`` (:mod:`dpnets.cli` parses the
arguments; everything here is also usable from Python).

A fit folder holds ``model.pt`` (the DPNet and its transfer operator in one file),
``config.toml`` (the resolved settings: ``dpnets fit --config DIR/config.toml --out NEW``
repeats the fit), ``training.png`` (the training curve) and ``report.md``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpnets.diagnostics import (
    ABOVE_ONE_TOL,
    NOISE_FACTOR,
    Diagnostic,
    DiagnosticWarning,
    persistence_diagnostics,
)
from dpnets.fitfolder import (
    DEFAULT_CONFIG,
    WorkflowError,
    absolute_paths,
    bias_spec,
    estimator_params,
    load_config,
    read_fit,
    write_config,
)

__all__ = [
    "WorkflowError",
    "DEFAULT_CONFIG",
    "load_config",
    "write_config",
    "fit_files",
    "analyze",
    "transform_files",
    "forecast_file",
    "demo",
]


# ------------------------------------------------------------------------------ data and model
def _read(data: dict[str, Any], folder: str | os.PathLike | None = None, timed: bool = True):
    """The trajectories of ``data`` (a config's data table) and the time per frame; for new
    files given to the fit in ``folder``, the fit's own MD features (its ``features.json``:
    its distance pairs and Cartesian reference, not chosen again on the new files).
    ``timed=False``: the caller uses no time (transform, forecast), so a file without a
    time per frame is not warned of."""
    from dpnets.datasets import read_trajectories
    from dpnets.md_files import NO_TIME_STEP

    if not data["paths"]:
        raise WorkflowError("no data files given")
    with warnings.catch_warnings():
        if data.get("dt") or not timed:  # --dt gives the time the files lack, or none used
            warnings.filterwarnings("ignore", message=f".*{NO_TIME_STEP}")
        trajs = read_trajectories(
            data["paths"],
            keys=data["keys"] or None,
            columns=data["columns"] or None,
            topology=data["topology"] or None,
            features=data["features"],
            selection=data["selection"],
            stride=int(data["stride"]),
            torsions=[t.strip() for t in str(data.get("torsions") or "phi,psi").split(",") if t],
            cutoff=float(data.get("cutoff") or 0.0) or None,
            reference=data.get("reference") or None,
            fit_features=None if folder is None else _fit_features(folder),
        )
    dt, _ = _time(data, trajs)
    return trajs, dt


#: seconds per time unit, for converting the files' times to ``--time-unit``
_SECONDS = {"fs": 1e-15, "ps": 1e-12, "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def _time(data: dict, trajs: Any) -> tuple[float, str]:
    """The time per frame and its unit: ``--dt`` in ``--time-unit`` (default: the files'
    unit, ps for MD files, else "time units"); else the files' time per frame (MD: ps),
    converted to ``--time-unit`` when one is given; else 1 frame."""
    unit = str(data.get("time_unit") or "")
    given = float(data.get("dt") or 0.0)
    if given:  # in --time-unit, else the files' unit (MD: ps), as --time-unit's help says
        return given, unit or trajs.time_unit or "time units"
    if trajs.dt:
        stored = trajs.time_unit or ""
        if unit and unit != stored:
            if unit in _SECONDS and stored in _SECONDS:
                return trajs.dt * _SECONDS[stored] / _SECONDS[unit], unit
            raise WorkflowError(
                f"--time-unit {unit}: the files' times are in {stored or 'no known unit'}; "
                f"give --dt in {unit} too (or a unit among {', '.join(_SECONDS)})"
            )
        return float(trajs.dt), stored or "time units"
    if unit:
        raise WorkflowError(
            f"--time-unit {unit}: the files store no time per frame; give --dt in {unit} too"
        )
    return 1.0, "frames"


def _read_bias(data: dict[str, Any], trajs: Any) -> list[np.ndarray] | None:
    """The log-weights ``beta V`` of every trajectory of a biased run (``--bias``, one file
    per trajectory, read with ``--stride``), or None for an unbiased run.

    A ``COLVAR``'s rows are matched to the frames by time where both are known (its
    ``time`` column, in ps, and the frames' time from MD files or ``--dt`` in a unit of
    time): rows printed ``r`` times as often as the frames are thinned to every ``r``-th,
    other steps refused; a bias file whose rows are not the trajectory's frames is refused,
    naming both and the remedy."""
    from dpnets.datasets import BOLTZMANN, DataFileError, read_bias_rows

    specs = list(data.get("bias") or [])
    if not specs:
        return None
    if data["bias_units"] not in BOLTZMANN:
        raise WorkflowError(
            f"--bias-units {data['bias_units']!r}: expected one of {', '.join(BOLTZMANN)}"
        )
    if len(specs) != len(trajs.data):
        raise WorkflowError(
            f"--bias: {len(specs)} bias file(s) for {len(trajs.data)} trajectories; give one "
            "FILE[:COLUMN] per trajectory, in the order of the data files"
        )
    temperature = float(data["temperature"]) or None
    if temperature is None and data["bias_units"] != "kT":
        raise WorkflowError(
            f"--bias needs --temperature (kelvin) to turn the bias energies in "
            f"{data['bias_units']} into beta V, or --bias-units kT for energies in kT"
        )
    stride = int(data["stride"])
    frame_ps = _frame_ps(data, trajs)
    out = []
    for spec, source, t in zip(specs, trajs.sources, trajs.data, strict=True):
        path, column = bias_spec(spec)
        if isinstance(column, str) and "rbias" in column:
            warnings.warn(
                f"--bias {spec}: a reweighting bias (rbias = V - c(t)) weighs samples, but "
                "time rescaling needs the bias energy V itself: give the .bias column",
                UserWarning,
                stacklevel=2,
            )
        try:
            lw, times = read_bias_rows(path, column, temperature, data["bias_units"])
        except DataFileError as err:
            raise WorkflowError(str(err)) from None
        every = _rows_per_frame(path, times, frame_ps, source)
        lw = lw[:: every * stride]
        if lw.shape[0] != t.shape[0]:
            raise WorkflowError(
                _bias_count_error(path, lw, times, every * stride, t, source, frame_ps)
            )
        out.append(lw)
    return out


def _check_rescaled_lag(log_weights: list[np.ndarray], lag: int, data: dict[str, Any]) -> None:
    """Refuse a bias under which most pairs in rescaled time pair a frame with itself: the
    frames then last longer than the lag (``exp(beta V)`` frames each), so the pairs see no
    motion and the fit is degenerate, most often because of a wrong ``--temperature`` or
    ``--bias-units`` (an energy in kJ/mol read as kcal/mol is 4.2 times too large in kT)."""
    from dpnets.biased import rescaled_pair_indices

    same = total = 0.0
    for lw in log_weights:
        try:
            i, j, w, _ = rescaled_pair_indices(lw, lag)
        except ValueError:
            continue  # the fit names the trajectory too short in rescaled time
        same += float(w[i == j].sum())
        total += float(w.sum())
    if total and same > 0.5 * total:
        top = max(float(lw.max()) for lw in log_weights)
        units = data["bias_units"]
        given = "energies in kT" if units == "kT" else f"{units} at {data['temperature']:g} K"
        raise WorkflowError(
            f"--bias: at --lag {lag}, {100 * same / total:.0f}% of the pairs in rescaled "
            f"time pair a frame with itself: with beta V up to {top:.3g} ({given}) frames "
            f"last up to {math.exp(min(top, 700.0)):.3g} frames of unbiased time, longer than "
            "the lag, and the pairs see no motion; check --temperature and --bias-units (a "
            "bias in kJ/mol read as kcal/mol is 4.2 times too strong), or use a longer --lag"
        )


def _frame_ps(data: dict[str, Any], trajs: Any) -> float | None:
    """The time between the files' frames (before ``--stride``) in ps, or None when it is
    not known in a unit of time (``--dt`` in "time units", ``.npy`` files without it)."""
    dt, unit = _time(data, trajs)
    if not (data.get("dt") or trajs.dt) or unit not in _SECONDS:
        return None
    return dt * _SECONDS[unit] / _SECONDS["ps"] / int(data["stride"])


def _rows_per_frame(
    path: str, times: np.ndarray | None, frame_ps: float | None, source: str
) -> int:
    """How many rows of a ``COLVAR`` are printed per frame of ``source``: 1 where its
    ``time`` column or the frames' time is unknown; ``r`` where the frames are ``r`` of its
    rows apart (PLUMED printing more often than the trajectory); other ratios refused."""
    if times is None or frame_ps is None or times.shape[0] < 2:
        return 1
    step = float(times[1] - times[0])
    ratio = frame_ps / step
    every = int(round(ratio))
    if every >= 1 and abs(ratio - every) <= 1e-3 * ratio:
        if every > 1:
            warnings.warn(
                f"{path}: a row every {step:g} ps and a frame of {source} every "
                f"{frame_ps:g} ps: one row in {every} is read, those at the frames' times",
                UserWarning,
                stacklevel=2,
            )
        return every
    raise WorkflowError(
        f"{path}: a row every {step:g} ps (its time column, PLUMED's ps unless UNITS TIME= "
        f"says otherwise) but a frame of {source} every "
        f"{frame_ps:g} ps: the bias does not line up with the frames; print the COLVAR "
        "at the trajectory's stride or a divisor of it (PLUMED's PRINT STRIDE), or give the "
        "right --dt and --time-unit"
    )


def _bias_count_error(
    path: str,
    lw: np.ndarray,
    times: np.ndarray | None,
    read: int,
    t: Any,
    source: str,
    frame_ps: float | None,
) -> str:
    """The one line refusing a bias file whose rows (one in ``read``) are not the frames
    of ``source``, with what the counts and times suggest."""
    n_bias, n_frames = int(lw.shape[0]), int(t.shape[0])
    which = f" (one row in {read})" if read > 1 else ""
    msg = (
        f"{path}: {n_bias} bias rows{which} for the {n_frames} frames of {source}: the "
        "bias file must hold one row per frame, from the first frame to the last"
    )
    if n_frames > 1 and n_bias > n_frames and (n_bias - 1) % (n_frames - 1) == 0:
        r = (n_bias - 1) // (n_frames - 1)
        msg += (
            f"; it holds {r} times as many rows as frames (printed {r} times as often?): "
            "give the time per frame (--dt with --time-unit ps, for its time column) so "
            "that its rows are matched to the frames by time"
            if times is not None and frame_ps is None
            else f"; it holds {r} times as many rows as frames: keep one row in {r}"
        )
    elif times is not None and n_bias > 1:
        span = "" if frame_ps is None else f", the frames {frame_ps * (n_frames - 1) * read:g} ps"
        msg += (
            f" (its time column spans {times[0]:g} to {times[-1]:g} ps{span}): check that "
            "it is this trajectory's and covers all of it"
        )
    return msg


def _encoder(spec: str, state_shape: tuple[int, ...], dim: int, atomic_numbers: Any):
    from dpnets.nn import MLP, SchNetEncoder

    if dim < 1:
        raise WorkflowError(f"--dim must be at least 1 (the number of learned features), got {dim}")

    name, _, args = str(spec).partition(":")
    if name == "mlp":
        try:
            hidden = tuple(int(h) for h in args.split(",") if h) or (64, 64)
        except ValueError as err:
            raise WorkflowError(f"--encoder {spec!r}: give widths as mlp:64,64") from err
        if len(state_shape) != 1:
            raise WorkflowError(
                f"--encoder mlp needs vector states, got state shape {state_shape}: use "
                "--features dihedrals or distances for MD files, or --encoder schnet"
            )
        return MLP(state_shape[0], hidden, dim, activation="celu")
    if name == "schnet":
        if atomic_numbers is None or len(state_shape) != 2 or state_shape[1] != 3:
            raise WorkflowError(
                "--encoder schnet needs atom positions: MD files with --features positions"
            )
        # MD readers give positions in nm (mdtraj); SchNet's 5 Å cutoff is 0.5 nm
        return SchNetEncoder(list(map(int, atomic_numbers)), out_dim=dim, cutoff=0.5)
    raise WorkflowError(f"--encoder {spec!r}: expected mlp:W1,W2,... or schnet")


def _preprojected(enc: Any, spec: str, trajs: list, lag: int, log_weights: Any) -> Any:
    """The encoder ``enc`` (an MLP) behind a fixed linear pre-projection of its inputs
    (``--preproject tica:N``): the ``N`` slowest TICA components of the input features at
    the fit's lag, from dpnets' own reversible least squares on the raw features
    (``TransferOperator(None, reversible=True)``: deeptime's TICA, to 1e-8), each of unit
    variance; a :class:`dpnets.nn.ProjectedMLP` whose projection is saved with the model
    and exported with it."""
    import warnings as _warnings

    from dpnets import TransferOperator
    from dpnets.diagnostics import DiagnosticWarning as _Diag
    from dpnets.nn import MLP, ProjectedMLP

    kind, _, count = spec.partition(":")
    try:
        n = int(count)
    except ValueError:
        n = 0
    if kind != "tica" or n < 1:
        raise WorkflowError(f"--preproject {spec!r}: expected tica:N with N >= 1 (e.g. tica:20)")
    if not isinstance(enc, MLP):
        raise WorkflowError("--preproject needs --encoder mlp (vector input features)")
    d = enc.in_dim
    if n > d:
        raise WorkflowError(f"--preproject tica:{n}: the inputs have only {d} features")
    # more features than pairs (a protein's short runs): TICA in the span of the data's
    # leading principal components, at most half as many as there are pairs (PyEMMA's and
    # deeptime's practice of a variance cut-off before TICA)
    flat = [np.asarray(t, dtype=np.float64).reshape(t.shape[0], -1) for t in trajs]
    mean = np.concatenate(flat).mean(0)
    pairs = sum(max(t.shape[0] - lag, 0) for t in flat)
    _, sv, vt = np.linalg.svd(np.concatenate(flat) - mean, full_matrices=False)
    rank = int(np.sum(sv > sv[0] * max(flat[0].shape) * np.finfo(np.float64).eps))
    pcs = vt[: max(1, min(rank, pairs // 2))].T  # (d, k)
    scores = [(t - mean) @ pcs for t in flat]
    with _warnings.catch_warnings():
        _warnings.simplefilter("ignore", _Diag)
        tica = TransferOperator(None, lag=lag, reversible=True).fit(scores, log_weights=log_weights)
    if tica.eig().size < n + 1:
        raise WorkflowError(
            f"--preproject tica:{n}: the data hold only {tica.eig().size - 1} components "
            f"({pairs} pairs); choose fewer"
        )
    right = np.real(tica.right_eigvecs_[:, 1 : n + 1])  # [1, (z - shift) / scale] basis
    weight = pcs @ (right[1:] / tica.feature_scale_[:, None])  # (d, n), on x - mean
    bias = right[0] - (tica.feature_shift_ / tica.feature_scale_) @ right[1:] - mean @ weight
    weight = weight.T
    cfg = enc.config
    out = ProjectedMLP(d, n, cfg["hidden"], cfg["out_dim"], activation=cfg["activation"])
    return out.set_projection(_as_tensor(weight), _as_tensor(bias))


def _as_tensor(a: np.ndarray) -> Any:
    import torch

    return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32)


def _user_entries(out: Path) -> list[Path]:
    """The entries of an output folder other than a fit's lock and staging folder (a
    running fit's are its own; a killed fit's are taken over by the next one)."""
    return [p for p in out.iterdir() if p.name != _LOCK and not p.name.startswith(_PRIVATE)]


def _check_out(out: Path, overwrite: bool) -> None:
    """The output folder must be writable and empty (or ``overwrite``). Under a
    multi-process launch every process checks, and rank 0 alone creates and probes it."""
    from dpnets import distributed

    if out.exists() and not out.is_dir():
        raise WorkflowError(f"{out}: exists and is not a folder")
    if out.is_dir() and not overwrite and any(_user_entries(out)):
        raise WorkflowError(f"{out}: the output folder is not empty (use --overwrite)")
    multi = distributed.is_active()
    if multi:
        import torch.distributed as dist

        dist.barrier()  # every process has looked before rank 0 writes the probe
    problem = ""
    if distributed.is_main_process():
        import threading

        probe = out / f".dpnets-write-test-{os.getpid()}-{threading.get_ident()}"
        for _ in range(3):  # a failed concurrent fit may remove the empty folder
            try:
                out.mkdir(parents=True, exist_ok=True)
                probe.write_bytes(b"")
                probe.unlink()
                problem = ""
                break
            except FileNotFoundError as err:
                problem = err.strerror or str(err)
            except OSError as err:
                problem = err.strerror or str(err)
                break
    if multi and not distributed.broadcast_int(int(not problem)):
        problem = problem or "rank 0 could not write it"
    if problem:
        raise WorkflowError(f"{out}: cannot write to the output folder ({problem})")


_LOCK = ".dpnets-fit.lock"
#: names of a fit's own entries in its output folder (staging folder, write probes)
_PRIVATE = (".dpnets-staging-", ".dpnets-write-test")


def _lock_owner_gone(lock: Path) -> bool:
    """Whether the fit that wrote ``lock`` (``pid@host``) is known to be gone (killed):
    its process does not exist on this host."""
    import socket

    try:
        pid, _, host = lock.read_text().strip().partition("@")
        if host != socket.gethostname():
            return False
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError):
        return False
    return False


def _take_lock(out: Path) -> Path:
    """Create ``out/.dpnets-fit.lock`` exclusively (``O_CREAT | O_EXCL``): a second fit into
    the same folder is refused while the first runs. A lock left by a killed fit of this
    host is taken over."""
    import socket

    lock = out / _LOCK
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _lock_owner_gone(lock):  # a killed fit: its staging folder goes too
                import shutil

                for stale in out.glob(".dpnets-staging-*"):
                    shutil.rmtree(stale, ignore_errors=True)
                lock.unlink(missing_ok=True)
                continue
            try:
                owner = lock.read_text().strip() or "unknown"
            except OSError:
                owner = "unknown"
            raise WorkflowError(
                f"{out}: another dpnets fit or analyze (process {owner}) is writing this output "
                "folder; wait for it to finish or choose another --out"
            ) from None
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()}@{socket.gethostname()}")
        return lock
    raise WorkflowError(f"{out}: cannot lock the output folder")  # pragma: no cover


class _FitFolder:
    """The output folder of one fit, written safely: locked against concurrent fits (the
    folder is checked again once locked, so of several fits started together into one
    empty folder exactly one writes it), the files written into a hidden staging folder
    inside it and moved into place only when every one is complete; on any failure the
    staging folder, the lock and a folder this fit created are removed."""

    def __init__(self, out: Path, overwrite: bool, created: bool) -> None:
        self.out, self.overwrite, self.created = out, overwrite, created
        self.lock: Path | None = None
        self.stage: Path | None = None

    def __enter__(self) -> Path:
        import tempfile

        for attempt in range(3):  # a failed concurrent fit may remove the empty folder
            self.out.mkdir(parents=True, exist_ok=True)
            try:
                self.lock = _take_lock(self.out)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
        try:
            if _user_entries(self.out) and not self.overwrite:
                raise WorkflowError(f"{self.out}: the output folder is not empty (use --overwrite)")
            self.stage = Path(tempfile.mkdtemp(prefix=".dpnets-staging-", dir=self.out))
        except BaseException:
            self._release(failed=True)
            raise
        return self.stage

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        if kind is None:
            for f in sorted(self.stage.iterdir()):
                os.replace(f, self.out / f.name)
        self._release(failed=kind is not None)

    def _release(self, failed: bool) -> None:
        import shutil

        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
        if self.lock is not None:
            self.lock.unlink(missing_ok=True)
        if failed and self.created:
            try:
                self.out.rmdir()  # only if empty: nothing of anyone else is removed
            except OSError:
                pass


def fit_files(
    config: dict[str, dict[str, Any]],
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    progress: bool = True,
) -> str:
    """Train a DPNet and its transfer operator on files; write the fit folder ``out``.

    The output folder is checked before any data are read or trained on, and locked: a
    second fit into a folder another fit is writing is refused (``WorkflowError``), and the
    files appear only when the fit succeeds (a failed fit leaves no half-written folder; see
    :class:`_FitFolder`). Returns the report (markdown). Launched with ``torchrun`` (an
    initialised process group), the DPNet trains on all processes
    (:mod:`dpnets.distributed`) and rank 0 writes the folder.
    """
    from dpnets import distributed

    out = Path(out)
    created = not out.exists()
    _check_out(out, overwrite)
    if not distributed.is_main_process():  # one writer under a multi-process launch
        return _fit(config, out, progress)
    with _FitFolder(out, overwrite, created) as stage:
        return _fit(config, stage, progress)


def _fit(config: dict[str, dict[str, Any]], out: Path, progress: bool) -> str:
    """The work of :func:`fit_files`: read, train, write into ``out`` (the staging folder)."""
    from dpnets import DPNet, TransferOperator, distributed

    data, model = config["data"], config["model"]
    t0 = time.perf_counter()
    trajs, dt = _read(data)
    log_weights = _read_bias(data, trajs)
    lag = int(model["lag"])
    longest = max(t.shape[0] for t in trajs.data)
    stride = int(data.get("stride") or 1)
    kept = f" after --stride {stride}" if stride > 1 else ""
    if lag < 1 or lag >= longest:
        raise WorkflowError(
            f"--lag {lag} must be at least 1 and shorter than the longest trajectory "
            f"({longest} frames{kept})" + ("; use a smaller --stride" if kept else "")
        )
    usable = [t for t in trajs.data if t.shape[0] > lag]
    n_pairs, dim = sum(t.shape[0] - lag for t in usable), int(model["dim"])
    if n_pairs <= dim + 1:  # the covariances of r features and the constant need more
        raise WorkflowError(
            f"{n_pairs} lagged pairs at --lag {lag} ({sum(t.shape[0] for t in usable)} "
            f"frames{kept}) for --dim {dim} learned features and the constant: too few to "
            "fit; use longer or more trajectories, "
            + ("a smaller --stride, " if kept else "")
            + "a shorter --lag or a smaller --dim"
        )
    if log_weights is not None:
        log_weights = [w for w, t in zip(log_weights, trajs.data, strict=True) if t.shape[0] > lag]
        _check_rescaled_lag(log_weights, lag, data)
    found = _dropped(trajs, lag)
    state_shape = tuple(usable[0].shape[1:])
    # the DPNet re-draws the encoder's initial weights from its seed inside fit
    enc = _encoder(model["encoder"], state_shape, int(model["dim"]), trajs.atomic_numbers)
    if model.get("preproject"):
        enc = _preprojected(enc, str(model["preproject"]), usable, lag, log_weights)
    net = DPNet(
        enc,
        lag=lag,
        device=model["device"] or None,
        progress=progress,
        **estimator_params(model, "DPNet"),  # objective, gamma, lr, batch_size, epochs, seed
    )
    op = TransferOperator(net, lag=lag, dt=dt, **estimator_params(model, "TransferOperator"))
    with warnings.catch_warnings():  # the report states them, with the options to use
        warnings.simplefilter("ignore", DiagnosticWarning)
        try:
            op.fit(usable, log_weights=log_weights)
        except ValueError as err:
            if log_weights is None or "rescaled" not in str(err):
                raise
            raise WorkflowError(f"--bias: {err}") from None
    units = _units(data, trajs)
    found += op.diagnostics(units)  # the DPNet's training findings first
    still = any(d.kind == "no_change" for d in found)  # no forecast to compare either
    skill = None if log_weights is not None or still else _forecast_check(op, usable, lag)
    if skill is not None:
        on = "one lag ahead on the training frames"
        found += persistence_diagnostics([skill[0]], [skill[1]], [f"{lag} frame(s)"], on)
    fitted = _Fitted(
        trajs, usable, lag, dt, units, time.perf_counter() - t0, found, log_weights, skill
    )
    report = _fit_report(op, data, fitted, model)
    if distributed.is_main_process():  # one writer under a multi-process launch
        op.save(out / "model.pt")
        # paths stored absolute: the folder's commands work from any folder
        stored = absolute_paths(data)
        if units != "frames":  # the time per frame and its unit as resolved, not 0
            stored["dt"], stored["time_unit"] = float(dt), units
        write_config({"data": stored, "model": dict(model)}, out / "config.toml")
        _plot_history(op.features_.history_, out / "training.png", op.features_.objective)
        (out / "report.md").write_text(report)
        if trajs.md_features is not None:  # what each input column is, with its atoms
            (out / "features.json").write_text(json.dumps(trajs.md_features.describe()))
    return report


def _steps(enabled: bool, total: int):
    """A printer of numbered steps on stderr (the analysis's progress), or a no-op."""
    count = [0]

    def step(what: str) -> None:
        count[0] += 1
        if enabled:
            print(f"[{count[0]}/{total}] {what}", file=sys.stderr, flush=True)

    return step


def _plot_coordinates(
    frames: np.ndarray, data: dict, names: Sequence[str] | None, slow: np.ndarray
) -> tuple[np.ndarray, list[str]]:
    """Coordinates to draw eigenfunctions on, with their names: the two input features
    most correlated with the slowest eigenfunction ``slow`` (values at the frames). For
    dihedral features (``[sin, cos]`` blocks per torsion kind) a torsion's correlation is
    the larger of its sine's and cosine's, and it is drawn as its angle in degrees."""
    flat = frames.reshape(frames.shape[0], -1).astype(np.float64)
    named = names is not None and len(names) == flat.shape[1]

    def corr(cols: np.ndarray) -> np.ndarray:
        c = cols - cols.mean(0)
        s = slow - slow.mean()
        den = np.sqrt((c**2).sum(0) * (s**2).sum())
        return np.abs(c.T @ s) / np.where(den > 0, den, np.inf)

    if data.get("features") == "dihedrals" and named and flat.shape[1] % 2 == 0:
        # pair each "sin X" column with its "cos X" column
        where = {str(n): j for j, n in enumerate(names)}
        pairs = [(j, where.get("cos" + str(n)[3:])) for j, n in enumerate(names)]
        pairs = [(a, b) for a, b in pairs if str(names[a]).startswith("sin") and b is not None]
        if pairs:
            score = np.maximum(
                corr(flat[:, [a for a, _ in pairs]]), corr(flat[:, [b for _, b in pairs]])
            )
            top = np.argsort(-score)[: min(2, len(pairs))]
            coords = np.stack(
                [np.degrees(np.arctan2(flat[:, pairs[t][0]], flat[:, pairs[t][1]])) for t in top],
                axis=1,
            )
            return coords, [f"{str(names[pairs[t][0]])[4:]} (deg)" for t in top]
    top = np.sort(np.argsort(-corr(flat))[: min(2, flat.shape[1])])
    labels = [str(names[t]) if named else f"input coordinate {t}" for t in top]
    return flat[:, top], labels


def _units(data: dict, trajs: Any) -> str:
    """The time unit of timescales (:func:`_time`)."""
    return _time(data, trajs)[1]


def _plot_history(history: dict, path: Path, objective: str = "projection") -> None:
    from dpnets.plot import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.4), layout="constrained")
    ep = np.arange(1, len(history["train_score"]) + 1)
    ax.plot(ep, history["train_score"], "-o", ms=3, label="training batches (mean)")
    if history.get("val_score"):
        ax.plot(ep, history["val_score"], "-s", ms=3, label="validation split")
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"{objective} score (higher is better)")
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=100)
    plt.close(fig)


#: the report's name of each ``TransferOperator(reversible=...)``
_ESTIMATOR = {
    False: "least squares, non-reversible (--reversible false)",
    True: "reversible, symmetrised covariances (--reversible true)",
    "reweight": "reversible after Koopman reweighting (--reversible reweight)",
}


#: fewest bootstrap units (whole trajectories, or blocks of a single one) whose resamples
#: give error bars: 2 have 3 distinct resamples, 3 have 10, 5 have 126
MIN_BOOTSTRAP_UNITS = 5


def _few_units(n_trajectories: int, n_blocks: int) -> list[Diagnostic]:
    """The bootstrap of the analysis over too few trajectories (or blocks of one)."""
    n = n_trajectories if n_trajectories > 1 else n_blocks
    if n >= MIN_BOOTSTRAP_UNITS:
        return []
    what = "whole trajectories" if n_trajectories > 1 else "blocks of the single trajectory"
    fix = f"use {MIN_BOOTSTRAP_UNITS} or more independent trajectories"
    return [
        Diagnostic(
            "few_units",
            f"the bootstrap intervals resample {n} {what}, which have only "
            f"{math.comb(2 * n - 1, n)} distinct resamples: the intervals are no error bars",
            fix + ("" if n_trajectories > 1 else " (or more n_blocks, if the lags allow)"),
            fix + ("" if n_trajectories > 1 else " (or more --blocks, if the lags allow)"),
            warn=False,
        )
    ]


def _short_blocks(
    data: list, n_blocks: int, timescales: Any, dt: float, units: str
) -> list[Diagnostic]:
    """A single trajectory's bootstrap blocks shorter than the model's slowest timescale:
    neighbouring blocks are then correlated, which the block bootstrap assumes they are
    not (its resamples then understate the variance of the estimate)."""
    if len(data) != 1:
        return []
    ts = np.asarray(timescales, dtype=np.float64)[1:]
    ts = ts[np.isfinite(ts)]
    block = data[0].shape[0] // n_blocks * dt
    if not ts.size or block >= ts.max():
        return []
    return [
        Diagnostic(
            "short_blocks",
            f"the {n_blocks} bootstrap blocks of the single trajectory last {block:.4g} "
            f"{units} each, shorter than the slowest timescale ({ts.max():.4g} {units}): "
            "neighbouring blocks are correlated, which the block bootstrap assumes they are "
            "not: its intervals are unreliable",
            "use fewer n_blocks (longer blocks), or several independent trajectories",
            "use fewer --blocks (longer blocks), or several independent trajectories",
            warn=False,
        )
    ]


def _few_resamples(n_bootstrap: int) -> list[Diagnostic]:
    """Too few bootstrap resamples for the report's 95% intervals (their bounds are then
    the extreme resamples)."""
    from dpnets.resampling import resamples_needed

    needed = resamples_needed(0.95)
    if not 0 < n_bootstrap < needed:
        return []
    return [
        Diagnostic(
            "few_resamples",
            f"the 95% intervals come from {n_bootstrap} bootstrap resamples, fewer than the "
            f"{needed} a percentile interval needs for each tail to hold one: their bounds "
            "are just the extreme resamples",
            f"n_bootstrap={needed} or more",
            f"--bootstrap {needed} or more",
            warn=False,
        )
    ]


class _StepWarnings:
    """The warnings of the analysis' validation steps, each kept once for the report's
    Diagnostics (``step_warning``: a result of that step not to trust as it stands) and
    printed once when the analysis is done, instead of once per step on the console only.
    The too-few-resamples warning is left out: :func:`_few_resamples` states it."""

    def __init__(self) -> None:
        self.seen: dict[str, list[str]] = {}

    def record(self, step: str) -> Any:
        import contextlib

        @contextlib.contextmanager
        def recording() -> Any:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    yield
                finally:
                    for w in caught:
                        text = " ".join(str(w.message).split())
                        if "is too few for 95% intervals" in text:
                            continue
                        steps = self.seen.setdefault(text, [])
                        if step not in steps:
                            steps.append(step)

        return recording()

    def diagnostics(self) -> list[Diagnostic]:
        found = []
        for text, steps in self.seen.items():
            problem, _, remedy = text.rpartition("; ")
            if not problem:
                problem, remedy = text, "judge that step's result with care"
            where = ", ".join(steps)
            found.append(Diagnostic("step_warning", f"{where}: {problem}", remedy, remedy))
        return found

    def emit(self) -> None:
        for text in self.seen:
            warnings.warn(text, DiagnosticWarning, stacklevel=4)


def _dropped(trajs: Any, lag: int) -> list[Diagnostic]:
    """The trajectories too short for one pair at ``lag``, named (they are left out)."""
    pairs = zip(trajs.sources, trajs.data, strict=True)
    short = [(src, t.shape[0]) for src, t in pairs if t.shape[0] <= lag]
    if not short:
        return []
    names = ", ".join(f"{src} ({n} frames)" for src, n in short)
    return [
        Diagnostic(
            "dropped",
            f"{len(short)} trajectory(ies) with no pair at lag {lag} left out: {names}",
            "use a shorter lag, or leave those files out",
            "use a shorter --lag, or leave those files out",
        )
    ]


@dataclass
class _Fitted:
    """What a fit read and found, for its report."""

    trajs: Any
    usable: list
    lag: int
    dt: float
    units: str
    seconds: float
    diagnostics: list
    log_weights: list | None = None
    skill: tuple[float, float, float] | None = None  # one-lag RMSE: model, persistence, mean


#: the most pairs the fit report's forecast check predicts from (evenly spread), and the
#: most numbers their starting states may hold (large states: fewer pairs)
_CHECK_PAIRS = 10_000
_CHECK_NUMBERS = 4_000_000


def _forecast_check(op: Any, usable: list, lag: int) -> tuple[float, float, float]:
    """The RMSE of the model's forecast of the state one lag ahead on its training frames
    (at most :data:`_CHECK_PAIRS` pairs, evenly spread), of persistence (``x_{t+lag} =
    x_t``) and of climatology (the training mean): in-sample, so a model worse than
    persistence here forecasts worse than it on new data too."""
    total = sum(len(t) - lag for t in usable)
    size = int(np.prod(usable[0].shape[1:]))
    most = max(1, min(_CHECK_PAIRS, _CHECK_NUMBERS // max(size, 1)))
    every = max(1, -(-total // most))
    x0 = np.concatenate([np.asarray(t[:-lag:every], dtype=np.float64) for t in usable])
    xh = np.concatenate([np.asarray(t[lag::every], dtype=np.float64) for t in usable])
    with warnings.catch_warnings():  # the check's own states are the training states
        warnings.simplefilter("ignore", DiagnosticWarning)
        pred = np.asarray(op.predict(x0, t=1), dtype=np.float64)
    frames = sum(len(t) for t in usable)  # the training mean, without a float64 copy
    mean = sum(np.sum(t, axis=0, dtype=np.float64) for t in usable) / frames

    def rmse(a: np.ndarray) -> float:
        return float(np.sqrt(np.mean((a - xh) ** 2)))

    return rmse(pred), rmse(x0), rmse(np.broadcast_to(mean, xh.shape))


#: the number of feature names the report lists
_NAMES_SHOWN = 8


def _inputs_line(data: dict, trajs: Any, model: dict | None = None) -> str:
    """The report's line on the inputs: feature kind, selection, how many, their names."""
    features = data.get("features") or "as stored"
    what = f"features `{features}`"
    if features == "dihedrals":
        blocks = getattr(trajs.md_features, "blocks", ())
        kept = ",".join(k for k, _ in blocks) if blocks else data.get("torsions") or "phi,psi"
        what += f" ({kept})"  # the kinds the selected residues have, as computed
    if features == "distances" and data.get("cutoff"):
        what += f" closer than {data['cutoff']:g} nm in some frame"
    if data.get("selection") and features in ("dihedrals", "distances", "cartesian", "positions"):
        what += f", selection `{data['selection']}`"
    if features == "cartesian":
        what += f", superposed on `{data.get('reference') or 'the first frame'}`"
    if data.get("topology"):
        what += f", topology `{data['topology']}`"
    names = trajs.names or []
    if names:
        shown = ", ".join(str(n) for n in names[:_NAMES_SHOWN])
        more = f", … ({len(names)} in all)" if len(names) > _NAMES_SHOWN else ""
        what += f": {shown}{more}"
    if model and model.get("preproject"):
        n = str(model["preproject"]).partition(":")[2]
        what += f"; pre-projected onto their {n} slowest TICA components (--preproject)"
    return f"Inputs: {what}."


def _files_lines(trajs: Any, lag: int) -> str:
    lines = []
    for src, t in zip(trajs.sources, trajs.data, strict=True):
        note = "" if t.shape[0] > lag else f" — left out: no pair at lag {lag}"
        lines.append(f"- `{src}`: {t.shape[0]} frames{note}")
    return "\n".join(lines)


def timescale_cell(lam: complex, ts: float, k: int, lag_time: float, noise: float) -> str:
    """A timescale as the report prints it: ``inf`` only for the constant function
    (``k = 0``), never for a growing mode (``|lambda| > 1``: undefined), and marked where the
    mode is complex, shorter than the lag, or within the noise level of 0."""
    mod = abs(lam)
    if k == 0 and not np.isfinite(ts):
        return "inf (stationary)"
    if mod > 1.0 + ABOVE_ONE_TOL or np.isnan(ts):
        return f"undefined: \\|λ\\| = {mod:.4f} > 1 (see Diagnostics)"
    cell = f"{ts:.4g}"
    notes = []
    if lam.imag != 0:
        notes.append("complex")
    if mod <= noise:
        notes.append("noise")
    elif ts < lag_time:
        notes.append("shorter than the lag: unresolved")
    return cell + (f" ({', '.join(notes)})" if notes else "")


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _fit_report(op: Any, data: dict, f: _Fitted, model: dict | None = None) -> str:
    ts = op.implied_timescales()
    lam = op.eig()
    lag_time = f.lag * f.dt
    noise = NOISE_FACTOR * (lam.size / max(op.n_samples_, 1)) ** 0.5
    rows = "\n".join(
        f"| {i} | {lam[i].real:.5f}{lam[i].imag:+.5f}i | "
        f"{timescale_cell(lam[i], ts[i], i, lag_time, noise)} |"
        for i in range(len(lam))
    )
    net = op.features_
    hist = net.history_
    val = hist.get("val_score") or hist.get("train_score") or [float("nan")]
    epochs = len(hist.get("train_score") or [])
    converged = not any(d.kind == "not_converged" for d in f.diagnostics)
    training = (
        f"Training: {epochs} epochs of the {net.objective} score; validation score "
        f"{val[-1]:.4f} at the last epoch, best {np.nanmax(val):.4f}"
        + ("" if converged else " (still rising: see Diagnostics)")
        + "."
    )
    if f.diagnostics:
        diag = "\n".join(f"- **{d.kind}**: {d.message(cli=True)}" for d in f.diagnostics)
    else:
        diag = "None: no eigenvalue above 1, the slow modes real and resolved, enough pairs."
    return (
        f"# dpnets fit\n\n{len(f.usable)} {_plural(len(f.usable), 'trajectory', 'trajectories')} "
        f"({sum(len(t) for t in f.usable)} frames, state shape "
        f"{tuple(f.usable[0].shape[1:])}) from "
        f"{len(set(f.trajs.sources))} source(s); lag {f.lag} frames = {lag_time:g} {f.units}; "
        f"{op.n_features_ - 1} learned features and the constant; {f.seconds:.0f} s.\n\n"
        f"{_files_lines(f.trajs, f.lag)}\n\n"
        f"{_inputs_line(data, f.trajs, model)}\n\n"
        f"{training}\n\n"
        f"{_bias_line(data, f)}"
        f"VAMP-2 on the training data: {op.score(f.usable):.4f}"
        f"{' (the biased frames, unweighted)' if f.log_weights else ''}\n\n"
        f"Transfer operator: {_ESTIMATOR[getattr(op, 'reversible', False)]}.\n\n"
        f"{_skill_line(f)}"
        f"| k | eigenvalue | implied timescale ({f.units}) |\n|---|---|---|\n{rows}\n\n"
        f"## Diagnostics\n\n{diag}\n\n"
        "Validate before trusting the timescales: `dpnets analyze` (timescales against "
        "lag, Chapman–Kolmogorov test, metastable sets).\n"
    )


def _skill_line(f: _Fitted) -> str:
    """The report's line on the forecast of the state one lag ahead against the
    references (``dpnets forecast``), or nothing for a biased fit."""
    if f.skill is None:
        return ""
    model, pers, clim = f.skill
    verdict = "better than" if model < pers else "no better than"
    return (
        f"Forecast of the state {f.lag} frame(s) ahead (`dpnets forecast`), on the training "
        f"frames: RMSE {model:.4g}, persistence {pers:.4g}, training mean {clim:.4g}: "
        f"{verdict} persistence (in-sample; judge forecasts on held-out data).\n\n"
    )


def _bias_line(data: dict, f: _Fitted) -> str:
    """The report's paragraph on the bias of a biased run (``--bias``), or nothing."""
    if not f.log_weights:
        return ""
    frames = sum(len(w) for w in f.log_weights)
    rescaled = sum(float(np.exp(w).sum()) for w in f.log_weights)
    where = f"{data['temperature']:g} K" if data["bias_units"] != "kT" else "energies in kT"
    return (
        f"Bias: {', '.join(map(str, data['bias']))} ({data['bias_units']}, {where}); pairs "
        f"formed at {f.lag} frames of rescaled time (frame k lasting exp(beta V_k) frames): "
        f"the {frames} biased frames span {rescaled:.6g} frames of unbiased time (mean "
        f"acceleration {rescaled / frames:.3g}); timescales are the unbiased dynamics' where "
        "the bias changes slowly against the lag and barely acts at the transition states.\n\n"
    )


def _check_like_fit(op: Any, trajs: Any, folder: str | os.PathLike) -> None:
    """Every trajectory read has the state shape the fit in ``folder`` was trained on; a
    ``WorkflowError`` naming the file otherwise."""
    want = getattr(op, "state_shape_", None)
    if want is None:
        return
    want = tuple(want)
    for source, t in zip(trajs.sources, trajs.data, strict=True):
        if tuple(t.shape[1:]) != want:
            raise WorkflowError(
                f"{source}: states of shape {tuple(t.shape[1:])} (read as the fit in {folder} "
                f"reads its files), but that model takes states of shape {want}"
            )


def _fit_features(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The MD features the fit in ``folder`` was trained on (its ``features.json``), or
    None (not an MD fit, or a folder from before the file)."""
    path = Path(folder) / "features.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _other_time_step(trajs: Any, data: dict, lag: int) -> list[Diagnostic]:
    """New files whose own time per frame differs from the one the fit's config holds
    (which the analysis uses): the model's lag in frames is then another lag time on them,
    and the timescales are off by the ratio if the files' times are right."""
    unit, fit_dt = str(data.get("time_unit") or ""), float(data.get("dt") or 0.0)
    stored = trajs.time_unit or ""
    if trajs.dt is None or not fit_dt or unit not in _SECONDS or stored not in _SECONDS:
        return []
    files_dt = trajs.dt * _SECONDS[stored] / _SECONDS[unit]
    if math.isclose(files_dt, fit_dt, rel_tol=1e-3):
        return []
    fix = "analyze files saved as often as the fit's, or refit on these"
    return [
        Diagnostic(
            "other_time_step",
            f"{trajs.sources[0]}: its frames are {files_dt:g} {unit} apart (with the fit's "
            f"stride {int(data.get('stride') or 1)}), the fit's {fit_dt:g} {unit}: the "
            f"analysis takes the fit's {fit_dt:g} {unit} a frame, and the lag of {lag} "
            "frames is another lag time on these files; if their times are right, the "
            f"timescales are {files_dt / fit_dt:.3g} times too short",
            fix,
            fix,
            warn=False,
        )
    ]


def _check_feature_names(trajs: Any, folder: str | os.PathLike) -> None:
    """The files give the features the fit in ``folder`` was trained on (its
    ``features.json``), named alike; a ``WorkflowError`` naming the first that differs."""
    fit = _fit_features(folder)
    if trajs.md_features is None or fit is None:
        return
    want = fit.get("names") or []
    got = list(trajs.md_features.names)
    if got != want:
        first = next(
            (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
            min(len(got), len(want)),
        )
        a = got[first] if first < len(got) else "none"
        b = want[first] if first < len(want) else "none"
        raise WorkflowError(
            f"{trajs.sources[0]}: input feature {first} is {a!r}, but the fit in {folder} was "
            f"trained on {b!r}: check --topology and the atom names"
        )


def _load_fit(folder: str | os.PathLike):
    from dpnets import load

    model, config = read_fit(folder)
    return load(model), config


def _data_like(config: dict, paths: Sequence[str]) -> dict[str, Any]:
    data = dict(config["data"])
    if paths:
        data["paths"] = list(paths)
    return data


# ------------------------------------------------------------------------------ analysis
def analyze(
    folder: str | os.PathLike,
    paths: Sequence[str] = (),
    *,
    lags: Sequence[int] | None = None,
    n_sets: int | None = None,
    n_bootstrap: int = 40,
    n_blocks: int | None = None,
    out: str | os.PathLike | None = None,
    overwrite: bool = True,
    progress: bool = True,
    reversible: bool | str | None = None,
) -> str:
    """Validate a fitted model on data (default: its training files): eigenvalues, implied
    timescales against lag with bootstrap bands, PCCA+ sets and the Chapman–Kolmogorov
    test, eigenfunctions. Writes PNG files, ``report.md`` and ``results.json``.

    Every step that can run is written: a step that cannot (PCCA+ on complex or
    unresolved modes, a CK test on sets that hold no frame, a lag the data cannot hold) is
    skipped, and the report says why and which option to change; the other steps and the
    report are still written. ``n_sets``: the number of PCCA+ sets (default: from the gap
    among the resolved real eigenvalues, never at the edge of the learned basis,
    :func:`dpnets.validation.sets_from_gap`; fewer when a set holds no frame, and the
    report says why). ``n_bootstrap``: resamples of whole trajectories (40: the fewest for
    95% intervals). ``n_blocks``: bootstrap blocks of a single trajectory (default: as many
    as the data hold, up to 10, each longer than twice the longest lag). ``reversible``:
    re-estimate the operator with ``TransferOperator(reversible=...)`` (False, True or
    "reweight"; default None: as the fit was). The output folder is written as
    :func:`fit_files` writes its own: locked against a concurrent fit or analyze, the
    files staged and moved into place only when every one is complete."""
    op, config = _load_fit(folder)
    out = Path(folder) / "analysis" if out is None else Path(out)
    created = not out.exists()
    _check_out(out, overwrite)
    settings = _AnalysisSettings(lags, n_sets, n_bootstrap, n_blocks, progress, reversible)
    with _FitFolder(out, overwrite, created) as stage:  # as fit: locked, staged
        return _analyze(op, config, stage, paths, settings, folder)


@dataclass
class _AnalysisSettings:
    lags: Sequence[int] | None
    n_sets: int | None
    n_bootstrap: int
    n_blocks: int | None
    progress: bool
    reversible: bool | str | None


#: the largest |predicted - estimated| of a CK test that the report calls agreement
CK_AGREEMENT = 0.05

#: what a step of the analysis may fail with and still leave the others to run
_STEP_ERRORS = (ValueError, ArithmeticError, RuntimeError, np.linalg.LinAlgError)


def _auto_blocks(data: list, lags: Sequence[int]) -> int:
    """Bootstrap blocks of a single trajectory: as many as hold twice the longest lag each,
    from 2 to 10."""
    frames = max(t.shape[0] for t in data)
    return int(min(10, max(2, frames // max(1, 2 * max(lags)))))


def _analysis_sets(op: Any, frames: np.ndarray, n_sets: int | None) -> tuple[Any, int, str]:
    """PCCA+ sets: ``n_sets`` as asked, else from the gap among the resolved real
    eigenvalues; with fewer sets while a set would hold no frame. ``ValueError`` with the
    reason (naming the options) when PCCA+ cannot run."""
    from dpnets.validation import pcca, sets_from_gap

    lam = np.asarray(op.eig())
    if n_sets is None:
        try:
            n, why = sets_from_gap(
                lam, max_sets=min(6, lam.size), edge=False, n_samples=op.n_samples_
            )
        except ValueError as err:
            v = complex(lam[1]) if lam.size > 1 else 0j
            fix = (
                "re-estimate with --reversible true (real eigenvalues in [-1, 1])"
                if abs(v.imag) > 1e-8 * max(1.0, abs(v)) or abs(v) > 1.0 + ABOVE_ONE_TOL
                else "refit at a shorter --lag"
            )
            raise ValueError(f"{err}: PCCA+ needs real, resolved slow modes; {fix}") from None
    else:
        n, why = int(n_sets), "as asked (--sets)"
        if not 2 <= n <= lam.size:
            raise WorkflowError(
                f"--sets {n} must be between 2 and the model's {lam.size} eigenvalues"
            )
        lead = lam[:n]
        if np.any(np.abs(lead.imag) > 1e-8 * np.maximum(1.0, np.abs(lead))):
            raise ValueError(
                f"the {n} leading eigenvalues are not all real ({np.round(lead, 4)}): "
                "PCCA+ needs real modes; re-estimate with --reversible true, or choose --sets "
                "so as not to split a complex pair"
            )
    asked = n
    while True:
        sets = pcca(op, frames, n)
        empty = np.flatnonzero(np.bincount(sets.assignments, minlength=n) == 0)
        if not empty.size:
            break
        if n == 2:
            raise ValueError(
                f"PCCA+ found no frame most likely in set(s) {empty.tolist()} even with 2 sets: "
                "the slow modes separate no states on these data; refit at a shorter --lag or "
                "with more data"
            )
        n -= 1
    if n < asked:
        why += f"; {asked} sets left some set with no frame, so {n}"
    return sets, n, why


def _analyze(
    op: Any,
    config: dict,
    out: Path,
    paths: Sequence[str],
    settings: _AnalysisSettings,
    folder: str | os.PathLike,
) -> str:
    """The work of :func:`analyze`, writing into ``out`` (the staging folder)."""
    from dpnets import plot
    from dpnets.base import clone
    from dpnets.validation import bootstrap_spectrum, check_lags, ck_test, implied_timescales

    if config["data"].get("bias"):
        raise WorkflowError(
            f"{folder}: fitted on a biased run (--bias), whose validation (timescales against "
            "lag, bootstrap, CK test) would refit on unweighted pairs of the biased frames: "
            "not supported yet; the fit's report holds its timescales"
        )
    trajs, dt = _read(_data_like(config, paths), folder)
    _check_like_fit(op, trajs, folder)
    lag = int(op.lag_)
    other_step = _other_time_step(trajs, config["data"], lag) if paths else []
    data = [t for t in trajs.data if t.shape[0] > lag]
    if not data:
        raise WorkflowError(f"every trajectory is shorter than the model's lag ({lag} frames)")
    # the operator is re-estimated on these data with the fit's learned features (a model
    # file does not keep the training features that observables are regressed on)
    params: dict[str, Any] = {"features": op.features_, "lag": lag}
    if settings.reversible is not None:
        params["reversible"] = settings.reversible
    with warnings.catch_warnings():  # the report states the diagnostics
        warnings.simplefilter("ignore", DiagnosticWarning)
        op = clone(op).set_params(**params).fit(data)
    units = _units(config["data"], trajs)
    found = other_step + _dropped(trajs, lag) + op.diagnostics(units)
    longest = max(t.shape[0] for t in data)
    if settings.lags is None:  # the default scan: the lags the data can hold
        scan = {max(1, lag // 4), max(1, lag // 2), lag, 2 * lag, 4 * lag}
        lags = sorted(k for k in scan if k < longest)
    else:  # the user's lags: all of them, or a clear error (none is dropped or rounded)
        lags = check_lags(list(settings.lags), "--lags", longest).tolist()
    n_boot = settings.n_bootstrap
    blocks = settings.n_blocks if settings.n_blocks is not None else _auto_blocks(data, lags)
    found += _few_units(len(data), blocks) + _few_resamples(n_boot)
    found += _short_blocks(data, blocks, op.implied_timescales(dt), dt, units)
    steps = _StepWarnings()
    plt = plot.pyplot()
    step = _steps(settings.progress, 5)
    bars = {"seed": 0, "progress": settings.progress, "n_blocks": blocks}
    skipped: dict[str, str] = {}
    results: dict[str, Any] = {
        "lag": lag,
        "dt": dt,
        "time_unit": units,
        "reversible": getattr(op, "reversible", False),
        "eigenvalues": [[float(v.real), float(v.imag)] for v in op.eig()],
        "timescales": [float(v) for v in op.implied_timescales(dt)],
        "diagnostics": [{"kind": d.kind, "message": d.message(cli=True)} for d in found],
        "bootstrap_over": (
            f"the {len(data)} trajectories"
            if len(data) > 1
            else f"{blocks} blocks of the trajectory"
        ),
    }
    step("implied timescales against lag (bootstrap)")
    try:
        with steps.record("timescales against lag"):
            its = implied_timescales(op, data, lags, dt=dt, n_bootstrap=n_boot, **bars)
        its.plot(units=units).savefig(out / "timescales.png", dpi=100)
        results.update(
            its_lags=its.lags.tolist(),
            its=its.timescales.tolist(),
            its_lower=None if its.lower is None else its.lower.tolist(),
            its_upper=None if its.upper is None else its.upper.tolist(),
        )
    except _STEP_ERRORS as err:
        skipped["timescales against lag"] = str(err)
    step("eigenvalues with bootstrap intervals")
    spec = None
    try:
        k_eig = min(4, int(np.asarray(op.eig()).size))  # the model's eigenvalues, no more
        with steps.record("eigenvalue intervals"):
            spec = bootstrap_spectrum(op, data, k=k_eig, dt=dt, n_bootstrap=max(n_boot, 2), **bars)
        plot.eigenvalues(op, k=k_eig, dt=dt, units=units).savefig(out / "eigenvalues.png", dpi=100)
        results["timescales_interval"] = [spec.lower.tolist(), spec.upper.tolist()]
    except _STEP_ERRORS as err:
        skipped["eigenvalue intervals"] = str(err)
    frames = np.concatenate(data)
    step("PCCA+ metastable sets")
    sets = why = None
    try:
        sets, n_found, why = _analysis_sets(op, frames, settings.n_sets)
        results["sets_stationary"] = sets.stationary.tolist()
        results["coarse_transition_matrix"] = sets.coarse_transition_matrix.tolist()
    except WorkflowError:
        raise
    except _STEP_ERRORS as err:
        skipped["PCCA+ metastable sets"] = str(err)
        skipped["Chapman–Kolmogorov test"] = "it tests the PCCA+ sets, which were skipped"
    step("Chapman–Kolmogorov test (bootstrap)")
    ck = None
    if sets is not None:
        ck_steps = [k for k in (1, 2, 4) if k * lag < longest]  # the multiples the data hold
        try:
            with steps.record("Chapman–Kolmogorov test"):
                ck = ck_test(
                    op, data, ck_steps, sets.memberships_of, dt=dt, n_bootstrap=n_boot, **bars
                )
            ck.plot(units=units).savefig(out / "ck_test.png", dpi=100)
            results["ck_max_abs_diff"] = float(np.abs(ck.predictions - ck.estimates).max())
            results["ck_min"] = float(min(ck.predictions.min(), ck.estimates.min()))
        except _STEP_ERRORS as err:
            skipped["Chapman–Kolmogorov test"] = str(err)
    step("eigenfunctions and free energy")
    every = max(1, frames.shape[0] // 20000)
    try:
        sub = frames[::every]
        slow = np.real(op.eigenfunctions(sub))[:, min(1, op.eig().size - 1)]
        coords, labels = _plot_coordinates(sub, config["data"], trajs.names, slow)
        fig = plot.eigenfunctions(op, sub, coords=coords, k=3, labels=labels)
        fig.savefig(out / "eigenfunctions.png", dpi=100)
        results["eigenfunction_coordinates"] = labels
    except _STEP_ERRORS as err:
        skipped["eigenfunctions"] = str(err)
    try:
        names = [
            Path(s).name for s, t in zip(trajs.sources, trajs.data, strict=True) if t.shape[0] > lag
        ]
        fig = plot.eigenfunction_traces(op, data, k=2, dt=dt, units=units, names=names)
        fig.savefig(out / "eigenfunctions_time.png", dpi=100)
    except _STEP_ERRORS as err:
        skipped["eigenfunctions against time"] = str(err)
    try:
        _free_energy_figure(op, data, frames, every).savefig(out / "free_energy.png", dpi=100)
    except _STEP_ERRORS as err:
        skipped["free energy along the slow eigenfunctions"] = str(err)
    plt.close("all")
    found += steps.diagnostics()
    results["diagnostics"] = [{"kind": d.kind, "message": d.message(cli=True)} for d in found]
    results["skipped"] = skipped
    steps.emit()
    (out / "results.json").write_text(json.dumps(results, indent=1, allow_nan=True))
    report = _analysis_report(op, results, spec, sets, why, found, skipped)
    (out / "report.md").write_text(report)
    return report


def _free_energy_figure(op: Any, data: list, frames: np.ndarray, every: int) -> Any:
    """The free energy (kT) along the two slowest eigenfunctions, the frames weighted to
    equilibrium by the model's stationary weights (Koopman reweighting: equal weights
    for equilibrium data)."""
    from dpnets import plot

    lam = np.asarray(op.eig())
    if lam.size < 3:
        raise ValueError("the model has fewer than two eigenfunctions besides the constant")
    if np.any(np.abs(lam[1:3].imag) > 1e-8 * np.maximum(1.0, np.abs(lam[1:3]))):
        raise ValueError(
            "the two slowest eigenfunctions are complex; re-estimate with --reversible true"
        )
    sub = frames[::every]
    phi = np.real(op.eigenfunctions(sub))[:, 1:3]
    weights = np.real(op.stationary_weights(data))[::every]
    return plot.free_energy(
        phi,
        weights=weights,
        bins=int(np.clip(np.sqrt(phi.shape[0] / 4), 10, 60)),  # a few frames per cell
        labels=[
            f"eigenfunction 1 (λ = {lam[1].real:.4g})",
            f"eigenfunction 2 (λ = {lam[2].real:.4g})",
        ],
    )


def _analysis_report(
    op: Any, results: dict, spec: Any, sets: Any, why: str | None, found: list, skipped: dict
) -> str:
    lag, dt, units = results["lag"], results["dt"], results["time_unit"]
    lam, ts = op.eig(), results["timescales"]
    lines = [
        f"# dpnets analyze\n\nModel lag {lag} frames ({lag * dt:g} {units}); transfer "
        f"operator re-estimated on the fit's features: {_ESTIMATOR[results['reversible']]}.\n"
    ]
    cells = []
    for i in range(1, min(4, len(ts))):
        if not np.isfinite(ts[i]) or abs(lam[i]) > 1.0 + ABOVE_ONE_TOL:
            cells.append(f"undefined (|λ| = {abs(lam[i]):.4f})")
        elif spec is not None and i < spec.lower.size:
            cells.append(f"{ts[i]:.4g} [{spec.lower[i]:.3g}, {spec.upper[i]:.3g}]")
        else:
            cells.append(f"{ts[i]:.4g}")
    over = results.get("bootstrap_over", "trajectories")
    interval = f" (95% bootstrap intervals over {over})" if spec is not None else ""
    lines.append(f"Slowest implied timescales ({units}): {', '.join(cells)}{interval}.\n")
    if sets is not None:
        lines.append(
            f"PCCA+ ({sets.stationary.size} sets: {why}): equilibrium populations "
            f"{np.round(sets.stationary, 3).tolist()}.\n"
        )
    if results.get("ck_min", 0.0) < 0:
        lines.append(
            f"The CK grid has negative entries (down to {results['ck_min']:.2g}): the "
            "model's projections onto the sets are not probabilities there (too few "
            "features to resolve the sets, or sets that are not metastable).\n"
        )
    if "ck_max_abs_diff" in results:
        worst = results["ck_max_abs_diff"]
        verdict = (
            "the model predicts its own set-to-set transitions"
            if worst <= CK_AGREEMENT
            else "the model does not predict its own set-to-set transitions well (not "
            "Markovian at this lag, or sets that are not metastable): compare the curves "
            "with their bands in `ck_test.png`; try a longer --lag or fewer --sets"
        )
        lines.append(
            f"Chapman–Kolmogorov test: largest |predicted − estimated| = {worst:.2g}: {verdict}.\n"
        )
    coords = ", ".join(results.get("eigenfunction_coordinates") or [])
    figures = {
        "timescales.png": ("its", "implied timescales against the lag: flat above the "
                           "lag line = Markovian"),
        "eigenvalues.png": ("timescales_interval", "the spectrum and 1 − |λ|"),
        "ck_test.png": ("ck_max_abs_diff", "predicted against estimated set-to-set "
                        "transitions"),
        "eigenfunctions.png": ("eigenfunction_coordinates", "the slow eigenfunctions on the "
                               f"two inputs most correlated with the slowest ({coords})"),
        "eigenfunctions_time.png": (None, "each slow eigenfunction against time, a line per "
                                    "trajectory"),
        "free_energy.png": (None, "the free energy (kT) along the two slowest "
                            "eigenfunctions, weighted to equilibrium"),
    }  # fmt: skip
    skip_of = {
        "eigenfunctions_time.png": "eigenfunctions against time",
        "free_energy.png": "free energy along the slow eigenfunctions",
    }
    made = []
    for name, (key, note) in figures.items():
        if (key is not None and key not in results) or skip_of.get(name) in skipped:
            continue
        made.append(f"- `{name}`: {note}")
    lines.append("Figures:\n\n" + ("\n".join(made) or "none") + "\n")
    if skipped:
        lines.append(
            "## Skipped\n\n" + "\n".join(f"- **{k}**: {v}" for k, v in skipped.items()) + "\n"
        )
    diag = "\n".join(f"- **{d.kind}**: {d.message(cli=True)}" for d in found)
    lines.append("## Diagnostics\n\n" + (diag or "None.") + "\n")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ apply a model
def transform_files(
    folder: str | os.PathLike,
    paths: Sequence[str],
    out: str | os.PathLike,
    *,
    eigenfunctions: bool = False,
    topology: str | os.PathLike | None = None,
) -> list[np.ndarray]:
    """The model's features (the constant first), or its eigenfunctions, of every frame of
    every input trajectory: one array per trajectory, in input order.

    ``out`` is a ``.npz`` file holding ``traj_0``, ``traj_1``, ... (``(frames, n)`` each) and
    ``sources`` (the file each came from), or a ``.npy`` file when the input is one
    trajectory. ``eigenfunctions=True`` writes ``model.eigenfunctions`` (complex only where
    the spectrum is) instead of the features. ``topology``: the files' topology when it is
    not the fit's (a heavy-atom trajectory of an all-atom fit): the features are computed
    from it as the fit computed its own, and must be the same (names checked).
    """
    op, config = _load_fit(folder)
    out = Path(out)
    if out.suffix not in (".npz", ".npy"):
        raise WorkflowError(f"{out}: the output must be a .npz file (or .npy for one trajectory)")
    data = _data_like(config, paths)
    if topology is not None:
        data["topology"] = os.fspath(topology)
    trajs, _ = _read(data, folder, timed=False)
    _check_like_fit(op, trajs, folder)
    _check_feature_names(trajs, folder)
    if out.suffix == ".npy" and len(trajs.data) != 1:
        raise WorkflowError(
            f"{out}: {len(trajs.data)} trajectories need a .npz output (one array each); "
            ".npy holds one trajectory"
        )
    arrays = [op.eigenfunctions(t) if eigenfunctions else op.transform(t) for t in trajs.data]
    if eigenfunctions and all(np.isrealobj(a) or not np.any(a.imag) for a in arrays):
        arrays = [np.ascontiguousarray(np.real(a)) for a in arrays]
    if out.suffix == ".npy":
        _save_npy(out, arrays[0])
    else:
        from dpnets.io import atomic_write

        named = {f"traj_{i}": a for i, a in enumerate(arrays)}
        named["sources"] = np.asarray(trajs.sources, dtype=str)
        atomic_write(out, lambda fh: np.savez(fh, allow_pickle=False, **named))
    return arrays


def forecast_file(
    folder: str | os.PathLike, paths: Sequence[str], steps: int, out: str | os.PathLike
) -> np.ndarray:
    """Forecasts ``E[x_{t + k lag} | x_t]`` for ``k = 1..steps`` from every frame:
    an array ``(steps, frames, *state_shape)`` saved as ``.npy``.

    ``pred[k - 1, i]`` forecasts the state ``k`` lags (``k * lag`` frames, the fit's lag)
    after frame ``i`` of the files' frames in input order (read as the fit read its own,
    ``--stride`` included; several files are concatenated, each forecast from its own
    frame). Where the files hold the frames forecast, the forecasts are scored against them
    and against persistence (``x_{t+k lag} = x_t``): a ``DiagnosticWarning`` names the steps
    at which the model does worse (:func:`dpnets.diagnostics.persistence_diagnostics`). A
    biased fit's lag is in rescaled (unbiased) time, so its forecasts are not scored.
    """
    op, config = _load_fit(folder)
    if int(steps) < 1:
        raise WorkflowError(f"--steps must be >= 1, got {steps}")
    trajs, _ = _read(_data_like(config, paths), folder, timed=False)
    _check_like_fit(op, trajs, folder)
    x = np.concatenate(trajs.data)
    pred = op.predict(x, t=list(range(1, int(steps) + 1)))
    _save_npy(out, pred)
    if config["data"].get("bias"):  # lags of rescaled time: no frame to score against
        return pred
    lag = int(getattr(op, "lag_", None) or 1)
    model, pers, names = [], [], []
    for k in range(1, int(steps) + 1):
        h, start, se_model, se_pers, count = k * lag, 0, 0.0, 0.0, 0
        for t in trajs.data:
            n = len(t)
            if n > h:
                truth = np.asarray(t[h:], dtype=np.float64)
                se_model += float(np.sum((pred[k - 1, start : start + n - h] - truth) ** 2))
                se_pers += float(np.sum((np.asarray(t[:-h], dtype=np.float64) - truth) ** 2))
                count += truth.size
            start += n
        if count:
            model.append(np.sqrt(se_model / count))
            pers.append(np.sqrt(se_pers / count))
            names.append(f"{k} lag(s)")
    on = "on the frames of these files"
    for d in persistence_diagnostics(model, pers, names, on):
        warnings.warn(d.message(cli=True), DiagnosticWarning, stacklevel=2)
    return pred


def _save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    from dpnets.io import atomic_write

    path = Path(path)
    if path.suffix != ".npy":
        raise WorkflowError(f"{path}: the output must be a .npy file")
    atomic_write(path, lambda fh: np.save(fh, array, allow_pickle=False))


def demo(
    out: str | Path = "dpnets-demo.pt",
    n: int = 50_000,
    epochs: int | None = None,
    seed: int = 0,
    progress: bool = True,
    device: str | None = None,
) -> str:
    """Train a DPNet on an Ornstein-Uhlenbeck process and compare with its exact spectrum.

    OU with ``theta = 1``, ``sigma = sqrt(2)`` (stationary N(0, 1)), sampled every
    ``dt = 0.1``: the transfer operator's eigenvalues are ``exp(-k dt)`` with Hermite
    eigenfunctions, and the implied timescales are ``1 / k``. This is the README path with
    the library defaults: a small MLP (64-64, CELU) with ``r = 4`` learned features, then a
    :class:`~dpnets.TransferOperator` on them, which adds the constant function (``k = 0``,
    timescale inf). Returns the printed table.
    """
    from dpnets import DPNet, TransferOperator
    from dpnets.representation import DEFAULTS
    from dpnets.systems import OrnsteinUhlenbeck

    epochs = DEFAULTS["epochs"] if epochs is None else epochs
    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    x = ou.sample(n, seed=seed)
    t0 = time.perf_counter()
    net = DPNet(  # the library's defaults: the default MLP (64-64, CELU), r = 4
        epochs=epochs,
        seed=seed,
        progress=progress,
        device=device,
    ).fit(x)
    op = TransferOperator(net, dt=ou.dt).fit(x)
    elapsed = time.perf_counter() - t0
    est = op.eig()
    k_max = len(est)
    ref = ou.eigvals(k_max)
    ts_est = op.implied_timescales()
    with np.errstate(divide="ignore"):
        ts_ref = 1.0 / (ou.theta * np.arange(k_max))
    lines = [
        f"Ornstein-Uhlenbeck (theta=1, dt={ou.dt}), n={n}, DPNet r=4 (+ the constant), "
        f"{epochs} epochs: {elapsed:.1f} s",
        "",
        "| k | eigenvalue (DPNet) | exact exp(-k dt) | rel. error | timescale (DPNet) "
        "| exact 1/k |",
        "|---|---|---|---|---|---|",
    ]
    for k in range(k_max):
        lam = est[k]
        lam_s = f"{lam.real:.4f}" + (f"{lam.imag:+.4f}i" if abs(lam.imag) > 1e-12 else "")
        rel = abs(abs(lam) - ref[k]) / ref[k]
        lines.append(
            f"| {k} | {lam_s} | {ref[k]:.4f} | {100 * rel:.2f}% | {ts_est[k]:.3f} | "
            f"{ts_ref[k]:.3f} |"
        )
    net.save(str(out))
    lines += ["", f"model saved to {out} (load with dpnets.load)"]
    return "\n".join(lines)
