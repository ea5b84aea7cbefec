"""The walk of the data through ``DPNet.fit`` (issue 24): every call into a dpnets module that
receives the input, or the states, pairs or batchers made from it, until the training loop
starts; consecutive calls in one file make one stop. Also the control-flow walk (every call
into dpnets). Run from a checkout:

    PYTHONPATH=src python benchmarks/trace_fit_walk.py array     # or: dataset
    PYTHONPATH=src python benchmarks/trace_fit_walk.py --smoke   # both kinds (it is small)
"""

import argparse
import os
import sys

import numpy as np
import torch

import dpnets
from dpnets.batching import IndexBatcher
from dpnets.nn import MLP
from dpnets.pairs import DatasetPairs, Pairs, PairSegment
from dpnets.states import Trajectories
from dpnets.training_source import TrainingSource

ROOT = os.path.dirname(dpnets.__file__)
KINDS = (Trajectories, Pairs, DatasetPairs, PairSegment, TrainingSource, IndexBatcher)


def walk(data, carries_only: bool) -> list[str]:
    calls, done = [], [False]

    def carries(v) -> bool:
        if v is data or isinstance(v, KINDS):
            return True
        if isinstance(v, np.ndarray) and v.ndim == 2 and v.shape[0] > 100:
            return True
        return isinstance(v, (list, tuple)) and any(u is data for u in v)

    def tracer(frame, event, arg):
        if done[0] or event != "call" or not frame.f_code.co_filename.startswith(ROOT):
            return None
        name = frame.f_code.co_name
        done[0] = name == "train_estimator"
        if name.startswith("<"):
            return None
        if not carries_only or any(carries(v) for v in frame.f_locals.values()):
            calls.append(f"{os.path.relpath(frame.f_code.co_filename, ROOT)}:{name}")
        return None

    net = dpnets.DPNet(MLP(2, (8,), 2), epochs=1, seed=0, progress=False)
    sys.settrace(tracer)
    try:
        net.fit(data)
    finally:
        sys.settrace(None)
    return calls


def summary(calls: list[str]) -> str:
    files = [c.split(":")[0] for c in calls]
    stops = [f for k, f in enumerate(files) if k == 0 or files[k - 1] != f]
    back = sum(1 for k, f in enumerate(stops) if f in stops[:k])
    return f"{len(calls)} calls, {len(stops)} stops in {len(set(stops))} files, {back} returns"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", nargs="?", default="array", choices=("array", "dataset"))
    ap.add_argument("--smoke", action="store_true", help="both kinds, one thread")
    args = ap.parse_args()
    if args.smoke:
        torch.set_num_threads(1)
    x = np.random.default_rng(0).normal(size=(2000, 2))
    for kind in ("array", "dataset") if args.smoke else (args.kind,):
        data = x
        if kind == "dataset":
            data = torch.utils.data.TensorDataset(torch.as_tensor(x[:-1]), torch.as_tensor(x[1:]))
        carried = walk(data, carries_only=True)
        print(f"{kind}, the data's walk: {summary(carried)}")
        print("  " + " -> ".join(carried))
        print(f"{kind}, every call into dpnets: {summary(walk(data, carries_only=False))}")
