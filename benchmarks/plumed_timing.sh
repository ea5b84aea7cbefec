#!/usr/bin/env bash
# PLUMED's cost per step of the CV `dpnets export` writes (a leftover of issue 33: "in the
# engine, the CV costs what its network costs").
#
# `plumed driver` over the all-atom alanine frames of benchmarks/plumed_check.sh (tiled to
# 4800) with `DEBUG DETAILED_TIMERS`, for the dihedral export (2 TORSIONs + PYTORCH_MODEL) and
# the distance export (45 DISTANCEs + PYTORCH_MODEL), each also with its inputs alone (PRINT
# of the TORSIONs / DISTANCEs). The CV's own cost per frame is the PYTORCH_MODEL action's time
# (its forward-loop and backward-loop timers) over the frames. Against it, one thread each,
# in libtorch from C++ (cv_cost.cpp below, compiled against the torch of $PYTHON) and in
# Python (bench_export_cost.per_call): the same file prepared as PLUMED prepares it (eval,
# freeze, optimize_for_inference; forward + one input gradient per node), the file as loaded
# (forward + one backward), and the fit's bare encoder, scripted (forward + one backward).
# Interleaved: every repetition runs the four PLUMED inputs, then one round of the rest;
# medians over 15 repetitions (ratios: within each repetition, then the median).
# OMP_NUM_THREADS=MKL_NUM_THREADS=1 (libtorch's intra-op threads); the C++ timer checks that
# libtorch runs 1 thread, and the largest thread count seen in the PLUMED process is printed.
#
# Needs what plumed_check.sh needs (PLUMED with libtorch, dpnets with openmm and mdtraj).
# Usage: PLUMED=$HOME/plumed/bin/plumed PYTHON=.venv/bin/python \
#   benchmarks/plumed_timing.sh [--smoke] [WORKDIR]
# WORKDIR: a folder plumed_check.sh filled (fits, exports, full.dcd); when it lacks them,
# plumed_check.sh runs there first. --smoke: 2 repetitions on 1600 frames, few calls.
set -euo pipefail
SMOKE=0
if [[ ${1:-} == --smoke ]]; then SMOKE=1; shift; fi
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SMOKE BENCH PLUMED=${PLUMED:-plumed} WORK=${1:-$(mktemp -d -t dpnets-plumed-XXXX)}
export PYTHON=${PYTHON:-python} OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
"$PLUMED" config has libtorch >/dev/null || { echo "$PLUMED: built without libtorch" >&2; exit 2; }
mkdir -p "$WORK"
if [[ ! -f $WORK/tors/cv.pt || ! -f $WORK/dist/cv.pt || ! -f $WORK/full.dcd ]]; then
  echo "running plumed_check.sh in $WORK first (log: $WORK/plumed_check.log)"
  bash "$BENCH/plumed_check.sh" "$WORK" >"$WORK/plumed_check.log" 2>&1 || {
    tail -20 "$WORK/plumed_check.log" >&2; exit 1; }
fi
# The same calls without PLUMED and without Python: libtorch from C++ (the torch of $PYTHON).
mkdir -p "$WORK/timing"
cat >"$WORK/timing/cv_cost.cpp" <<'CPP'
// forward + input gradient(s) of a TorchScript file on one state, as PLUMED's PYTORCH_MODEL does
#include <torch/script.h>
#include <torch/torch.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: cv_cost FILE N_IN CALLS ROUNDS FREEZE(0|1) PER_NODE(0|1)\n");
    return 2;
  }
  const int n_in = std::atoi(argv[2]), calls = std::atoi(argv[3]), rounds = std::atoi(argv[4]);
  const bool freeze = std::atoi(argv[5]), per_node = std::atoi(argv[6]);
  torch::jit::script::Module m = torch::jit::load(argv[1]);
  m.eval();
  if (freeze) {  // as PLUMED does
    m = torch::jit::freeze(m); m = torch::jit::optimize_for_inference(m);
  }
  std::vector<float> s(n_in, 0.5f);
  auto step = [&]() {
    torch::Tensor x = torch::tensor(s).view({1, n_in});
    x.set_requires_grad(true);
    torch::Tensor y = m.forward({x}).toTensor();
    const int n_out = per_node ? y.size(1) : 1;
    for (int j = 0; j < n_out; j++) {
      torch::Tensor yj = per_node ? y.slice(1, j, j + 1) : y.sum().view({1, 1});
      auto g = torch::autograd::grad({yj}, {x}, {torch::ones({1, 1})}, true, false)[0];
      volatile float v = g.data_ptr<float>()[0]; (void)v;
    }
  };
  for (int i = 0; i < 50; i++) step();
  for (int r = 0; r < rounds; r++) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; i++) step();
    auto t1 = std::chrono::steady_clock::now();
    std::printf("%.3f\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::printf("threads %d\n", at::get_num_threads());
}
CPP
T=$("$PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
nice "${CXX:-g++}" -O2 -std=c++20 -D_GLIBCXX_USE_CXX11_ABI=1 -I"$T/include" \
  -I"$T/include/torch/csrc/api/include" "$WORK/timing/cv_cost.cpp" -o "$WORK/timing/cv_cost" \
  -L"$T/lib" -Wl,-rpath,"$T/lib" -ltorch -ltorch_cpu -lc10
exec "$PYTHON" - <<'EOF'
import copy, os, re, subprocess, sys, time
from pathlib import Path
import numpy as np, mdtraj as md, torch
import dpnets

sys.path.insert(0, os.environ["BENCH"])
from bench_export_cost import per_call  # noqa: E402

torch.set_num_threads(1)
PLUMED, W = os.environ["PLUMED"], Path(os.environ["WORK"]).resolve()
smoke = os.environ["SMOKE"] == "1"
reps, tile, calls = (2, 1, 50) if smoke else (15, 3, 3000)
RUN = W / "timing"; RUN.mkdir(exist_ok=True)
load0 = os.getloadavg()

full = md.load(str(W / "full.dcd"), top=str(W / "ala_full.pdb"))
frames = full[np.tile(np.arange(full.n_frames), tile)]
frames.save_dcd(str(RUN / "frames.dcd"))

def inputs(tag):
    """(plumed.dat without its PRINT lines, the labels of its TORSION/DISTANCE lines, the nodes)"""
    text = "".join(l + "\n" for l in (W / tag / "plumed.dat").read_text().splitlines()
                   if not l.startswith("PRINT"))
    labels = re.findall(r"^(\w+): (?:TORSION|DISTANCE) ", text, re.M)
    nodes = sorted(set(re.findall(r"cv\.node-\d+", text)), key=lambda s: int(s.split("-")[1]))
    return text, labels, nodes

def plumed_input(tag, with_cv):
    text, labels, nodes = inputs(tag)
    if not with_cv:  # the inputs alone: the same lines up to the PYTORCH_MODEL
        text = text.split("cv: PYTORCH_MODEL")[0]
    args = nodes if with_cv else labels
    return text + f"DEBUG DETAILED_TIMERS\nPRINT ARG={','.join(args)} STRIDE=1 FILE=OUT\n"

def driver(tag, with_cv, watch=False):
    d = RUN / f"{tag}-{'cv' if with_cv else 'inputs'}"; d.mkdir(exist_ok=True)
    for f in d.iterdir(): f.unlink()
    (d / "in.dat").write_text(plumed_input(tag, with_cv))
    cmd = [PLUMED, "driver", "--plumed", "in.dat", "--mf_dcd", str(RUN / "frames.dcd"),
           "--natoms", str(full.n_atoms), "--timestep", "0.5"]
    p = subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threads = 0
    while watch and p.poll() is None:  # the PLUMED process's thread count, sampled
        try: threads = max(threads, len(os.listdir(f"/proc/{p.pid}/task")))
        except OSError: pass
        time.sleep(0.01)
    out = p.communicate()[0]
    if p.returncode:
        sys.exit(f"plumed driver ({d}) failed:\n{out[-3000:]}")
    rows = {}
    for line in out.splitlines():
        tok = line.split()
        if len(tok) > 6 and tok[0] == "PLUMED:" and re.fullmatch(r"\d[AB]?", tok[1]):
            rows[" ".join(tok[1:-5])] = (int(tok[-5]), float(tok[-4]))
    n = rows["4 Calculating (forward loop)"][0]
    step = sum(t for k, (c, t) in rows.items() if re.fullmatch(r"\d \D.*", k)) / n
    cv = sum(t for k, (c, t) in rows.items() if re.fullmatch(r"[45]A +\d+ cv", k)) / n
    assert n == frames.n_frames, (n, frames.n_frames)
    return {"step": step * 1e6, "action": cv * 1e6, "threads": threads}

def python_cases(tag, fit):
    file = str(W / tag / "cv.pt")
    as_plumed = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.load(file).eval()))
    loaded = torch.jit.load(file)
    enc = copy.deepcopy(dpnets.load(str(W / fit / "model.pt")).features_.encoder_).float().eval()
    for p in enc.parameters(): p.requires_grad_(False)
    bare = torch.jit.script(enc)
    bare.save(str(RUN / f"bare-{tag}.pt"))
    _, labels, _ = inputs(tag)
    x = torch.tensor(np.loadtxt(RUN / f"{tag}-inputs" / "OUT")[0, 1:], dtype=torch.float32)[None]
    assert x.shape == (1, len(labels)), x.shape
    first = next(m for m in enc.modules() if isinstance(m, torch.nn.Linear))
    feats = torch.zeros(1, first.in_features)  # the encoder's cost does not depend on the values
    py = lambda fn, x, po: lambda n: per_call(fn, x, n, po) * 1e6
    return {
        "C++ file as PLUMED runs it": cxx(file, x.shape[1], True, True),
        "C++ file, per node": cxx(file, x.shape[1], False, True),
        "C++ file": cxx(file, x.shape[1], False, False),
        "C++ bare encoder": cxx(str(RUN / f"bare-{tag}.pt"), feats.shape[1], False, False),
        "file as PLUMED runs it": py(as_plumed, x, True),
        "file as loaded": py(loaded, x, False),
        "bare encoder": py(bare, feats, False),
    }

def cxx(file, n_in, freeze, per_node):
    def run(n):
        cmd = [str(RUN / "cv_cost"), file, str(n_in), str(n), "1", str(int(freeze)), str(int(per_node))]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
        assert out[-2:] == ["threads", "1"], out  # libtorch's intra-op threads
        return float(out[0])
    return run

cvs = {"tors": "fit-dihedrals", "dist": "fit-distances"}
# warm-up, the PLUMED process's thread count, the inputs' values for Python
threads = max(driver(tag, k, watch=True)["threads"] for tag in cvs for k in (False, True))
cases = {tag: python_cases(tag, fit) for tag, fit in cvs.items()}
for tag in cvs:
    for run in cases[tag].values():
        run(50)
res = {(tag, k): [] for tag in cvs for k in ("inputs", "cv", *cases[tag])}
for _ in range(reps):
    for tag in cvs:
        res[tag, "inputs"].append(driver(tag, False))
        res[tag, "cv"].append(driver(tag, True))
    for tag in cvs:
        for k, run in cases[tag].items():
            res[tag, k].append(run(calls))
load1 = os.getloadavg()

def med(tag, k, key=None):
    v = [r[key] for r in res[tag, k]] if key else res[tag, k]
    return float(np.median(v)), min(v), max(v)

def cell(m):
    return f"{m[0]:.1f} ({m[1]:.1f}–{m[2]:.1f})"

n_nodes = {tag: len(inputs(tag)[2]) for tag in cvs}
n_in = {tag: len(inputs(tag)[1]) for tag in cvs}
rows = [
    ("PLUMED step, inputs + PRINT only (timers 1–6)", lambda t: med(t, "inputs", "step")),
    ("PLUMED step with the CV (timers 1–6)", lambda t: med(t, "cv", "step")),
    ("**PYTORCH_MODEL action** (4A + 5A timers)", lambda t: med(t, "cv", "action")),
    ("libtorch in C++: the file as PLUMED runs it (frozen, optimized; fwd + 1 grad per node)",
     lambda t: med(t, "C++ file as PLUMED runs it")),
    ("libtorch in C++: the file as loaded, fwd + 1 grad per node", lambda t: med(t, "C++ file, per node")),
    ("libtorch in C++: the file as loaded (fwd + 1 backward)", lambda t: med(t, "C++ file")),
    ("libtorch in C++: the fit's bare encoder, scripted (fwd + 1 backward)",
     lambda t: med(t, "C++ bare encoder")),
    ("Python: the file as PLUMED runs it (frozen, optimized; fwd + 1 grad per node)",
     lambda t: med(t, "file as PLUMED runs it")),
    ("Python: the file as loaded (fwd + 1 backward)", lambda t: med(t, "file as loaded")),
    ("Python: the fit's bare encoder, scripted (fwd + 1 backward)", lambda t: med(t, "bare encoder")),
]
print(f"torch {torch.__version__}, {torch.get_num_threads()} thread; {frames.n_frames} frames x "
      f"{reps} repetitions, {calls} Python calls per case and repetition; PLUMED process: at most "
      f"{threads} threads; load average {load0[0]:.2f} before, {load1[0]:.2f} after\n")
print("| µs per frame, median (min–max) | dihedral CV: " + f"{n_in['tors']} TORSIONs → {n_nodes['tors']} nodes"
      + f" | distance CV: {n_in['dist']} DISTANCEs → {n_nodes['dist']} node{'s' * (n_nodes['dist'] > 1)} |")
print("|---|---|---|")
for name, f in rows:
    print(f"| {name} | " + " | ".join(cell(f(t)) for t in cvs) + " |")
def ratio(t, k):  # within each repetition (interleaved), then the median over repetitions
    return float(np.median([a["action"] / b for a, b in zip(res[t, "cv"], res[t, k])]))
for what, k in (("the bare encoder in C++", "C++ bare encoder"),
                ("the file as PLUMED runs it, in C++", "C++ file as PLUMED runs it"),
                ("the bare encoder in Python", "bare encoder")):
    print(f"| PYTORCH_MODEL action / {what} (median of the repetitions' ratios) | " + " | ".join(f"{ratio(t, k):.2f}" for t in cvs) + " |")
EOF
