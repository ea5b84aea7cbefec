"""Paper experiments, each runnable as ``dpnets reproduce NAME``.

Every experiment lives in its own module exposing::

    run(*, quick: bool = False, seeds: int | None = None, out: str | Path = ...,
        device: str | None = None, progress: bool = True) -> str

which writes its figures and tables into ``out`` and returns the results table as markdown.
The registry maps the command-line name to the module, imported lazily so that optional
dependencies of one experiment never affect the others.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

__all__ = ["EXPERIMENTS", "run_experiment"]

#: name -> (module, one-line description)
EXPERIMENTS: dict[str, tuple[str, str]] = {
    "logistic-map": (
        "dpnets.experiments.logistic_map",
        "Noisy logistic map: spectral error and optimality gap (paper Table 1)",
    ),
    "langevin": (
        "dpnets.experiments.langevin",
        "Overdamped Langevin in a four-well potential: generator eigenvalues (paper Fig. 2)",
    ),
    "ordered-mnist": (
        "dpnets.experiments.ordered_mnist",
        "Ordered MNIST: forecasting accuracy of image encoders (paper Fig. 3, Table 3)",
    ),
    "fluid-flow": (
        "dpnets.experiments.fluid_flow",
        "Flow past a cylinder: forecasting error of a passive scalar (paper Fig. 3)",
    ),
    "fluid-flow-transient": (
        "dpnets.experiments.fluid_transient",
        "Flow past a cylinder off the limit cycle: forecasting the wake's start-up",
    ),
    "alanine-dipeptide": (
        "dpnets.experiments.alanine_dipeptide",
        "Alanine dipeptide with a SchNet encoder: timescales and free energy (paper Table 2)",
    ),
    "enhanced-sampling": (
        "dpnets.experiments.enhanced_sampling",
        "Learned slow mode as a metadynamics CV through its exported TorchScript file (issue 27)",
    ),
    "enhanced-sampling-alanine": (
        "dpnets.experiments.enhanced_sampling_alanine",
        "Alanine dipeptide: learned slow mode tabulated in OpenMM, well-tempered metadynamics",
    ),
    "biased-double-well": (
        "dpnets.experiments.biased_double_well",
        "Slow modes from biased runs against the exact timescale: both routes, both biases",
    ),
    "biased-alanine": (
        "dpnets.experiments.biased_alanine",
        "Alanine dipeptide biased on psi: slow modes with and without the weights, vs the MSM",
    ),
    "alanine-r-lag": (
        "dpnets.experiments.alanine_sweep",
        "Alanine dipeptide: slowest timescale vs lag and r, equal gradient steps (issue 18)",
    ),
}


def run_experiment(name: str, **kwargs: Any) -> str:
    """Run experiment ``name``; keyword arguments go to its ``run`` function."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; expected one of {', '.join(EXPERIMENTS)}")
    module_name = EXPERIMENTS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:  # a missing dependency of that module: one line, its name
        raise ImportError(f"experiment {name!r} cannot be imported ({module_name}): {err}") from err
    kwargs.setdefault("out", Path("dpnets-out") / name)
    accepted = inspect.signature(module.run).parameters
    unsupported = sorted(k for k in kwargs if k not in accepted)
    if unsupported:
        raise ValueError(
            f"experiment {name!r} does not take {', '.join(unsupported)} "
            f"(options: {', '.join(accepted)})"
        )
    return module.run(**kwargs)
