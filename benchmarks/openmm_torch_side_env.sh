#!/usr/bin/env bash
# OpenMM-Torch beside dpnets (issue 33): OpenMM-Torch 1.10's CPU wheel
# (acellera-openmmtorch-cpu) needs torch < 2.13, so it cannot share dpnets' environment.
# This builds a side environment from the package registry and runs the checks:
#   tests/test_openmm_torch.py (values vs model.eigenfunctions, forces vs finite differences of
#   OpenMM's energies, a TorchForce CV in OpenMM's Metadynamics) and
#   benchmarks/bench_openmm_torch.py (the same on a fit of OpenMM runs, plus ns/day with and
#   without the CV on the Reference and CPU platforms; results in benchmarks/results/openmm_torch/).
#
#   bash benchmarks/openmm_torch_side_env.sh [ENV_DIR (default /tmp/dpnets-openmm-torch)] [--smoke]
#
# Versions: torch 2.12.x, openmm 8.5.2 (8.6.0 and 8.6.1 segfault creating a Context with a
# TorchForce inside a CustomCVForce, the Metadynamics path), acellera-openmmtorch-cpu 1.10.
# dpnets itself is installed from this checkout without its dependencies (--no-deps).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ENV="${1:-/tmp/dpnets-openmm-torch}"
SMOKE=""
for a in "$@"; do [ "$a" = "--smoke" ] && SMOKE="--smoke"; done
[ "$ENV" = "--smoke" ] && ENV=/tmp/dpnets-openmm-torch
if [ ! -x "$ENV/bin/python" ]; then
  python3 -m venv "$ENV"
  nice "$ENV/bin/pip" install "torch==2.12.*" "openmm==8.5.2" "acellera-openmmtorch-cpu==1.10" \
    mdtraj numpy scipy matplotlib pytest deeptime
fi
nice "$ENV/bin/pip" install -q --no-deps --force-reinstall "$ROOT"
"$ENV/bin/python" -c "import torch, openmm, openmmtorch; print('torch', torch.__version__, 'openmm', openmm.__version__)"
cd "$ROOT"
export OMP_NUM_THREADS=1
PYTHONPATH="$ROOT/src" nice "$ENV/bin/python" -m pytest -q -x -p no:cacheprovider tests/test_openmm_torch.py
PYTHONPATH="$ROOT/src" nice "$ENV/bin/python" benchmarks/bench_openmm_torch.py $SMOKE
