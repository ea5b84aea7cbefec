"""mlcolvar's DeepTICA on the biased alanine-dipeptide data of ``dpnets reproduce biased-alanine``.

Run with the Python of a side environment that has mlcolvar (it is not a dependency of
dpnets, and this script does not import dpnets)::

    python3 -m venv /work/side-mlcolvar
    /work/side-mlcolvar/bin/pip install torch==2.13.0
    /work/side-mlcolvar/bin/pip install mlcolvar
    /work/side-mlcolvar/bin/python benchmarks/deeptica_biased_alanine.py \
        benchmarks/results/biased_alanine/biased_alanine_data.npz

(tested with mlcolvar 1.3.1, lightning 2.6.6, torch 2.13.0+cpu). ``--smoke`` (no data file)
checks the rescaled clock on a tiny synthetic data set and, where mlcolvar imports, trains
DeepTICA on it for one epoch; it writes nothing (without mlcolvar it says so and measures
nothing, as ``tests/test_benchmarks.py`` runs it in dpnets' own environment).

It reads the ``.npz`` the experiment writes (features ``[sin phi, cos phi, sin psi, cos
psi]`` of the production frames every ``frame_ps``, simulation time, run index, the
log-weights ``beta (V - c)`` of the experiment's two conventions for ``c``, the lag, the
layer widths, epochs and batch size of the dpnets fits), and writes ``deeptica.json`` next
to it; a later ``dpnets reproduce biased-alanine`` (simulations cached) puts its rows into
the table.

* **Weighted** (``transition``: ``log_weights``; ``rbias``: ``log_weights_rbias``): one
  ``create_timelagged_dataset(X, t, lag_time, tprime=...)`` per run (pairs in rescaled
  time, mlcolvar's ``rescale_time`` mode), concatenated. The rescaled time is passed as
  ``tprime = sum of frame_ps * exp(log_weights)`` over the frames before, the same clock as
  dpnets' ``log_weights`` (each frame lasting ``frame_ps exp(log_weights)``): given only
  ``logweights``, mlcolvar's ``tprime_evaluation`` shifts them by their maximum and divides
  them by their log-sum-exp, which changes the time unit (and the relative weights), so that
  its timescales could not be compared with the reference's.
* **Unweighted**: the same call without weights (pairs at the lag in simulation time).
* ``DeepTICA(layers=[4, *hidden, r])`` (mlcolvar's defaults otherwise: input
  normalisation, its loss, Adam), the dpnets fits' batch size and epochs (``--stride K``
  uses every K-th frame and K times the epochs), a random 80/20 split, seeds 0..K-1. The
  slowest timescale is ``-lag / ln |lambda_1|`` of its TICA on the network's outputs over
  all the pairs (``model.tica.compute(..., save_params=True)``, then
  ``model.tica.timescales(lag)``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rescaled_clock(frame_ps: float, log_weights: np.ndarray) -> np.ndarray:
    """The rescaled time at each frame: ``frame_ps * exp(log_weights)`` summed over the
    frames before (dpnets' clock for ``log_weights``: frame ``k`` lasts that long)."""
    return np.concatenate([[0.0], np.cumsum(frame_ps * np.exp(log_weights))])[:-1]


def datasets(d: dict, stride: int, log_weights: str | None) -> Any:
    """The time-lagged pairs of every run, concatenated (an mlcolvar ``DictDataset``)."""
    from mlcolvar.data import DictDataset
    from mlcolvar.utils.timelagged import create_timelagged_dataset

    frame, lag = float(d["frame_ps"]), float(d["lag_ps"])
    parts: dict[str, list[torch.Tensor]] = {}
    for k in np.unique(d["run"]):
        sel = d["run"] == k
        x = torch.tensor(d["features"][sel][::stride], dtype=torch.float32)
        t = d["time_ps"][sel][::stride]
        if log_weights is not None:
            clock = rescaled_clock(frame, d[log_weights][sel])
            ds = create_timelagged_dataset(x, t, lag_time=lag, tprime=clock[::stride])
        else:
            ds = create_timelagged_dataset(x, t, lag_time=lag)
        for key in ("data", "data_lag", "weights", "weights_lag"):
            parts.setdefault(key, []).append(torch.as_tensor(ds[:][key]))
    return DictDataset({k: torch.cat(v) for k, v in parts.items()})


def train(ds: Any, d: dict, seed: int, stride: int) -> float:
    """Train DeepTICA; its slowest implied timescale (ps) on all the pairs."""
    import lightning
    from mlcolvar.cvs import DeepTICA
    from mlcolvar.data import DictModule

    lightning.seed_everything(seed, verbose=False)
    layers = [4, *[int(h) for h in d["hidden"]], int(d["r"])]
    model = DeepTICA(layers)
    module = DictModule(
        ds,
        lengths=(0.8, 0.2),
        batch_size=int(d["batch_size"]),
        generator=torch.Generator().manual_seed(seed),
    )
    trainer = lightning.Trainer(
        max_epochs=int(d["epochs"]) * stride,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(model, module)
    model.eval()
    with torch.no_grad():
        f_t = model.forward_nn(ds[:]["data"])
        f_lag = model.forward_nn(ds[:]["data_lag"])
        model.tica.compute(
            data=[f_t, f_lag],
            weights=[ds[:]["weights"], ds[:]["weights_lag"]],
            save_params=True,
        )
        its = model.tica.timescales(float(d["lag_ps"])).numpy()
    its = its[np.isfinite(its)]
    return float(its.max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "data", type=Path, nargs="?", help="biased_alanine_data.npz of the experiment"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic data, no file")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument(
        "--fits",
        nargs="+",
        default=["transition", "rbias", "unweighted"],
        help="log-weights conventions of the experiment's table to fit (default: all)",
    )
    args = parser.parse_args()
    if args.smoke:
        smoke()
        return
    if args.data is None:
        parser.error("the data file (biased_alanine_data.npz) is required without --smoke")
    import lightning
    import mlcolvar

    torch.set_num_threads(2)
    d = dict(np.load(args.data))
    result = {
        "mlcolvar_version": mlcolvar.__version__,
        "lightning_version": lightning.__version__,
        "torch_version": torch.__version__,
        "stride": args.stride,
        "frame_ps_used": float(d["frame_ps"]) * args.stride,
        "lag_ps": float(d["lag_ps"]),
        "layers": [4, *[int(h) for h in d["hidden"]], int(d["r"])],
        "epochs": int(d["epochs"]) * args.stride,
        "command": (
            "/work/side-mlcolvar/bin/python benchmarks/deeptica_biased_alanine.py "
            f"{args.data} --seeds {args.seeds} --fits {' '.join(args.fits)}"
            + (f" --stride {args.stride}" if args.stride != 1 else "")
        ),
    }
    fits = (
        ("transition", "log_weights"),
        ("rbias", "log_weights_rbias"),
        ("unweighted", None),
    )
    for key, log_weights in fits:
        if key not in args.fits:
            continue
        t0 = time.perf_counter()
        ds = datasets(d, args.stride, log_weights)
        t_pairs = time.perf_counter() - t0
        result[key] = {"timescale_ns": [], "pairs": len(ds), "seconds_pairs": t_pairs}
        for seed in range(args.seeds):
            result[key]["timescale_ns"].append(train(ds, d, seed, args.stride) / 1000.0)
            result[key]["seconds"] = time.perf_counter() - t0
            # written after every fit, so that an interrupted run keeps what it has
            (args.data.parent / "deeptica.json").write_text(json.dumps(result, indent=2) + "\n")
            print(
                f"DeepTICA {key}, seed {seed}: {result[key]['timescale_ns'][-1]:.4g} ns", flush=True
            )


def smoke() -> None:
    """The clock on a known case, then (where mlcolvar imports) one epoch of DeepTICA."""
    rng = np.random.default_rng(0)
    lw = rng.normal(size=50)
    clock = rescaled_clock(2.0, lw)
    assert clock[0] == 0.0 and np.allclose(np.diff(clock), 2.0 * np.exp(lw[:-1]))
    assert np.allclose(rescaled_clock(2.0, np.zeros(5)), [0, 2, 4, 6, 8])
    print("rescaled clock: frame k lasts frame_ps * exp(log_weight[k]): checked")
    try:
        import lightning  # noqa: F401
        import mlcolvar  # noqa: F401
    except ImportError:
        print("mlcolvar is not importable here (a side environment has it): nothing trained")
        return
    n = 400
    x = np.zeros((n, 4))
    for t in range(1, n):
        x[t] = 0.9 * x[t - 1] + rng.normal(size=4)
    d = {
        "features": x,
        "time_ps": np.arange(n) * 10.0,
        "run": np.repeat([0, 1], n // 2),
        "log_weights": rng.normal(scale=0.1, size=n),
        "frame_ps": 10.0,
        "lag_ps": 20.0,
        "hidden": np.array([8]),
        "r": 2,
        "batch_size": 64,
        "epochs": 1,
    }
    ts = train(datasets(d, 1, "log_weights"), d, 0, 1)
    print(f"DeepTICA smoke: slowest timescale {ts:.4g} ps")


if __name__ == "__main__":
    main()
