"""Benchmarks that cannot rot (issue 32, item 4): every script in ``benchmarks/`` runs in its
``--smoke`` mode (tiny sizes, seconds) in a subprocess, exits 0, prints what it is for, and
leaves the committed results in ``benchmarks/results/`` untouched.

The scripts are discovered by globbing ``benchmarks/*.py`` and ``benchmarks/*.sh``, so a new
script is picked up without editing this file and must accept ``--smoke``. The runs are
started together, as many at a time as the machine has cores, the first time a test of this
file asks for one; each test then waits for its own. No timing is asserted.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
SCRIPTS = sorted(p.name for p in [*BENCH.glob("*.py"), *BENCH.glob("*.sh")])

#: Seconds one smoke run may take before the test fails (they take a few on an idle machine).
TIMEOUT = 300

#: What each script's smoke output must contain (regular expressions, searched in stdout), on
#: top of the checks every script gets. A number: ``NUM``; a finite one is checked apart.
NUM = r"[0-9][0-9,]*\.?[0-9]*"
EXPECTED: dict[str, list[str]] = {
    "bench_scale.py": [
        r"\| device \| model \| trainer \| r \| batch \(pairs\) \| step \(ms\) \| bare",
        rf"\| cpu \| mlp \| dpnets DPNet \| 4 \| 64 \| {NUM} \| {NUM} \| \*\*{NUM}\*\* \|",
        rf"\| cpu \| mlp \| deeptime VAMPNet \| 4 \| 64 \| {NUM} \| {NUM} \| \*\*{NUM}\*\* \|",
        rf"\| cpu \| schnet \| dpnets DPNet \| 4 \| 4 \| {NUM} \|",
        r"DPNet\.fit pairs/s = [0-9.]+ x the bare step's",
    ],
    "scale_cpu.sh": [rf"\| cpu \| mlp \| dpnets DPNet \| 4 \| 64 \| {NUM} \|", r"wrote \S+cpu\.md"],
    "gpu_session.sh": [
        rf"\| cpu \| mlp \| deeptime VAMPNet \| 4 \| 64 \| {NUM} \|",
        r"gpu_session: table exit 0, graph exit 0, kernels exit 0, tests exit 0",
    ],
    "bench_data_paths.py": [
        r"\| arrays \(one trajectory\) \| [0-9.]+ \| 1\.00 \|",
        r"\| memory-mapped \.npy, read per batch \| [0-9.]+ \| [0-9.]+ \|",
    ],
    "bench_large_r.py": [r"\n\s+16\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\n", r"LAPACK geev"],
    "bench_memory.py": [r"identity\s+9\s+\d+", r"mlp\s+9\s+\d+"],
    "bench_out_of_box.py": [
        r"\| system \| reference \|",
        *[rf"\| {name} \| {NUM}" for name in ("hmm-3d", "double-well-1d", "triple-well-2d")],
        *[rf"\| {name} \| {NUM}" for name in ("cycle-2d", "scales-2d")],
        r"deeptime VAMPNet raw",
    ],
    "bench_schnet.py": [rf"cpu:\s+{NUM} s/epoch\s+{NUM} pairs/s"],
    "bench_kernels.py": [
        r"\| device \| objective \| r \| method \| aten ops \| kernels \| syncs \| ms \|",
        *[
            rf"\| cpu \| {name} \| 4 \| cholesky \| \d+ \| - \| - \| {NUM} \|"
            for name in ("projection", "relaxed", "vamp1", "vamp2", "consistency", "generator")
        ],
    ],
    "bench_standardize_auto.py": [
        r"\| auto \| 0 \| [0-9.]+ \| [0-9.]+ \|",
        r"\| coordinate \| 0 \| [0-9.]+ \| [0-9.]+ \|",
    ],
    "bench_training.py": [
        r"\| 256 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|",
        r"\| projection P\^1 \| [0-9.]+ \| [0-9.]+ \|",
        r"\| deeptime vampnet_loss VAMP2 \|",
    ],
    "bench_validation_cost.py": [
        r"\| ck_test \| [0-9.]+ \| [0-9.]+ \|",
        r"\| implied_timescales \(old route\) \| [0-9.]+ \| [0-9.]+ \|",
    ],
    "trace_fit_walk.py": [
        r"array, the data's walk: \d+ calls",
        r"dataset, every call into dpnets: \d+ calls",
    ],
    "alanine_r_lag_device.sh": [r"all present"],
    "compare_numerics.py": [r"\d+ arrays written", r"largest difference between two runs: 0\n"],
    "bench_export_cost.py": [r"exported / bare: features in [0-9.]+"],
    "deeptica_biased_alanine.py": [
        r"rescaled clock: .*checked",
        r"mlcolvar is not importable here|DeepTICA smoke: slowest timescale",
    ],
    # runs only where openmmtorch imports (a side environment); elsewhere it says so
    "bench_openmm_torch.py": [r"openmmtorch is not importable here|\"ns_per_day"],
}

#: Scripts that cannot run here even in smoke mode, and why; the test parses them (``bash -n``)
#: and checks that the reason still holds (the script contains the command that makes it so).
#: Keep this short: everything else must smoke-run.
SYNTAX_ONLY: dict[str, str] = {
    "openmm_torch_side_env.sh": "builds a side environment from the package registry "
    "(network, minutes); its Python part, bench_openmm_torch.py, is smoke-run on its own",
    "plumed_check.sh": "needs PLUMED built from source with its PYTORCH module (not on the "
    "package registry); the exports it checks are tested in test_export/test_engine_positions",
    "plumed_timing.sh": "times PLUMED's PYTORCH_MODEL action, so needs the same PLUMED build "
    "as plumed_check.sh; its Python reference, bench_export_cost.per_call, is smoke-run there",
}
SYNTAX_ONLY_BECAUSE = {
    "openmm_torch_side_env.sh": "-m venv",
    "plumed_check.sh": "plumed driver",
    "plumed_timing.sh": "plumed driver",
}


#: Scripts whose tables may hold a NaN in smoke mode: one epoch on a fifth of a percent of the
#: data can leave a timescale unresolved (the run, not the accuracy, is what is tested).
NAN_ALLOWED = {"bench_out_of_box.py"}


def _command(script: str) -> list[str]:
    path = str(BENCH / script)
    if script.endswith(".sh"):
        return ["bash", path, "--smoke", *(["--devices", "cpu"] * (script == "gpu_session.sh"))]
    return [sys.executable, path, "--smoke"]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["PYTHON"] = sys.executable  # the shell scripts' interpreter
    env["OUT"] = str(tmp)  # gpu_session.sh's output folder
    env["TMPDIR"] = str(tmp)  # every temporary folder of a smoke run
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = "1"
    env.pop("GLIBC_TUNABLES", None)
    return env


def _run(script: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(
            _command(script),
            cwd=ROOT,
            env=_env(tmp),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        return subprocess.CompletedProcess(err.cmd, -9, out, f"timed out after {TIMEOUT} s")


def _snapshot() -> dict[str, tuple[int, int]]:
    """Size and modification time of every file under ``benchmarks/results``."""
    return {
        str(p.relative_to(RESULTS)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in RESULTS.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def smoke_runs(request, tmp_path_factory):
    """Futures of the smoke runs of the scripts this session selected, started together."""
    wanted = [
        item.callspec.params["script"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_benchmark_smoke"
        and hasattr(item, "callspec")
        and item.callspec.params["script"] not in SYNTAX_ONLY
    ]
    before = _snapshot()
    base = tmp_path_factory.mktemp("bench_smoke")
    with ThreadPoolExecutor(max_workers=max(1, min(os.cpu_count() or 1, 4))) as pool:
        runs: dict[str, Future] = {
            s: pool.submit(_run, s, base / s.replace(".", "_")) for s in dict.fromkeys(wanted)
        }
        yield runs
    assert _snapshot() == before, "a smoke run changed the committed benchmarks/results"


def test_every_script_is_discovered():
    """The glob finds the scripts (a wrong path would make the smoke test vacuous), and
    every script the sanity checks name still exists."""
    assert {"bench_scale.py", "gpu_session.sh", "trace_fit_walk.py"} <= set(SCRIPTS)
    assert set(EXPECTED) | set(SYNTAX_ONLY) <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_smoke(script, smoke_runs):
    """``benchmarks/<script> --smoke`` exits 0 and prints its table with finite numbers."""
    if script.endswith(".sh"):  # the whole script parses, not only the smoke path
        syntax = subprocess.run(["bash", "-n", str(BENCH / script)], capture_output=True)
        assert syntax.returncode == 0, syntax.stderr.decode()
    if script in SYNTAX_ONLY:
        assert SYNTAX_ONLY_BECAUSE[script] in (BENCH / script).read_text(), SYNTAX_ONLY[script]
        return
    res = smoke_runs[script].result()
    tail = f"\n--- stdout ---\n{res.stdout[-3000:]}\n--- stderr ---\n{res.stderr[-3000:]}"
    assert res.returncode == 0, f"{script} --smoke exited {res.returncode}{tail}"
    assert res.stdout.strip(), f"{script} --smoke printed nothing{tail}"
    assert "Traceback" not in res.stdout + res.stderr, tail
    for pattern in EXPECTED.get(script, []):
        assert re.search(pattern, res.stdout), f"{script}: no match for {pattern!r}{tail}"
    if script in NAN_ALLOWED:
        return
    # every number in a markdown table row is finite (no nan or inf from a broken path)
    cells = [
        c.strip().strip("*")
        for line in res.stdout.splitlines()
        if line.startswith("|") and "---" not in line
        for c in line.strip("|").split("|")
    ]
    for cell in cells:
        head = cell.split(" ")[0].replace(",", "").rstrip("x%")
        try:
            value = float(head)
        except ValueError:
            continue
        assert math.isfinite(value), f"{script}: non-finite number in a table cell {cell!r}{tail}"
