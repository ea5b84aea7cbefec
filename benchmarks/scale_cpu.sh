#!/usr/bin/env bash
# The CPU scale table, benchmarks/results/scale/cpu.md, in one command (issues 17 and 32): two
# runs of bench_scale.py on one thread with the CPU clock, 30 repetitions, MLP and SchNet at
# r in {8, 64}, deeptime's VAMPNet row next to the MLP ones; the first with glibc's default
# allocator settings, the second (appended) with GLIBC_TUNABLES that keep freed memory in the
# process (see bench_scale.py's docstring). About 35 min on the dev box (2 shared cores, loaded).
#
# Usage, from the repository root:  bash benchmarks/scale_cpu.sh [--smoke]
# --smoke: both runs at tiny sizes (MLP only, no peer: bench_scale.py's own --smoke covers the
# rest), the table to a temporary folder (never the committed results).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-python3}"
nice=nice  # the full run yields to other work (its CPU clock does not count their time)
args=(--devices cpu --threads 1 --clock cpu --steps 30)
if [[ "${1:-}" == "--smoke" ]]; then
    out="$(mktemp -d)/cpu.md"
    args=(--smoke --devices cpu --clock cpu --models mlp --no-peer --out "$out")
    nice=""
else
    out=auto
    args+=(--out auto)
fi
$nice "$py" benchmarks/bench_scale.py "${args[@]}"
GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295 \
    $nice "$py" benchmarks/bench_scale.py "${args[@]}" --append
