"""Helpers shared by the experiment modules: output files, provenance, plots, tables.

One place for what every ``dpnets reproduce NAME`` run does around its science: create the
output folder, import matplotlib headless (optional), write ``results.json`` with the machine
it ran on, format markdown tables, and time a fit.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "jsonable",
    "markdown_table",
    "output_dir",
    "provenance",
    "pyplot",
    "timer",
    "torch_threads",
    "write_results",
]


def jsonable(x: Any) -> Any:
    """Recursively convert numpy arrays/scalars (complex ones as ``{real, imag}``) for JSON."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        if np.iscomplexobj(x):
            return {"real": x.real.tolist(), "imag": x.imag.tolist()}
        return x.tolist()
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, complex):
        return {"real": x.real, "imag": x.imag}
    if isinstance(x, Path):
        return str(x)
    return x


def provenance(**extra: Any) -> dict[str, Any]:
    """Machine and library versions for ``results.json`` (plus any ``extra`` entries)."""
    import torch

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
    info.update(extra)
    return info


def output_dir(out: str | Path) -> Path:
    """Create (if needed) and return the output folder of an experiment."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_results(out: Path, table: str, payload: dict[str, Any]) -> None:
    """Write ``table.md`` and ``results.json`` (with :func:`provenance` added) into ``out``."""
    (out / "table.md").write_text(table.rstrip() + "\n", encoding="utf-8")
    payload = {**payload, "machine": provenance()}
    (out / "results.json").write_text(json.dumps(jsonable(payload), indent=1), encoding="utf-8")


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` with the headless Agg backend, or None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - optional dependency
        return None
    return plt


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats are written with 4 significant digits."""

    def cell(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            return f"{float(v):.4g}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def mean_std(values: Any, fmt: str = ".3g", std_fmt: str = ".2g", ddof: int = 1) -> str:
    """``"mean ± std"`` of a 1-D sequence over seeds (``ddof=1``: the sample std), or the
    single value when there is one."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 1:
        return format(v[0], fmt)
    return f"{format(v.mean(), fmt)} ± {format(v.std(ddof=ddof), std_fmt)}"


@contextmanager
def timer() -> Iterator[dict[str, float]]:
    """``with timer() as t: ...`` then ``t["seconds"]`` holds the wall time of the block."""
    t: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield t
    finally:
        t["seconds"] = time.perf_counter() - start


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (unchanged if None), then restore."""
    import torch

    previous = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(previous)
