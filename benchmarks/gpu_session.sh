#!/usr/bin/env bash
# Issue 32's GPU checks in one prepared script, for the first session with a GPU (device
# machine, repository root; about 2-4 min on an H100):
#   1. the scale table on CUDA (bench_scale.py: MLP and SchNet at r in {8, 64}, with
#      deeptime's VAMPNet row next to the MLP ones) -> $OUT/gpu.md, $OUT/scale.log;
#   2. the MLP step captured in a CUDA graph (bench_scale.py --cuda-graph) -> $OUT/graph.md;
#   3. the score's cost per objective and decomposition (bench_kernels.py: aten ops, CUDA
#      kernel launches, whether it synchronises, time) -> $OUT/kernels.md, to tighten the
#      bounds of tests/test_step_kernels.py;
#   4. the CUDA tests, those of tests/test_cuda.py tests/test_step_kernels.py that exist
#      -> $OUT/cuda_tests.log;
#   5. $OUT/env.txt: GPU, driver, torch, deeptime.
# deeptime: the device image lacks it. Wheels in .whl/ (git-ignored, named in the run's carry)
# are installed first into /tmp/site without an index; the wheel, fetched where pip works:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl deeptime==0.4.5
# (its needs numpy, scipy, scikit-learn and threadpoolctl are on the device image). Without
# it the table has no VAMPNet rows and the log says so.
#
# Usage:  bash benchmarks/gpu_session.sh [--smoke] [--devices cuda]
#   the device tool:  run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=540)
#   then copy $OUT/gpu.md to benchmarks/results/scale/gpu.md.
# --smoke --devices cpu: the same steps at tiny sizes on the CPU (tests/test_benchmarks.py),
# so that the script is known to work before a GPU is at hand. OUT defaults to a temporary
# folder; PYTHON to python3. Exit status: non-zero if the table or the tests failed.
set -uo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
smoke=()
devices=cuda
while [[ $# -gt 0 ]]; do
    case "$1" in
        --smoke) smoke=(--smoke --models mlp) ;;  # SchNet: bench_scale.py's own smoke
        --devices) devices="$2"; shift ;;
        *) echo "gpu_session.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
export PYTHONUNBUFFERED=1
site=""
if compgen -G ".whl/*.whl" >/dev/null; then
    site=/tmp/site
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl || echo "installing the wheels in .whl/ failed"
fi
export PYTHONPATH="src${site:+:$site}${PYTHONPATH:+:$PYTHONPATH}"
{
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
        || echo "nvidia-smi: none"
    "$py" - <<'PY'
import torch

print("torch", torch.__version__, "cuda", torch.cuda.is_available())
try:
    import deeptime

    print("deeptime", deeptime.__version__)
except ImportError:
    print("deeptime: not installed (no VAMPNet rows; see the head of gpu_session.sh)")
PY
} 2>&1 | tee "$out/env.txt"

name="gpu.md"
[[ "$devices" == cuda* ]] || name="scale_${devices//[^a-z0-9]/_}.md"
"$py" benchmarks/bench_scale.py --devices "$devices" "${smoke[@]}" --out "$out/$name" 2>&1 \
    | tee "$out/scale.log"
rc_table=${PIPESTATUS[0]}

# the same MLP step captured whole in a CUDA graph (a separate process: a failed capture
# cannot spoil the table above); on the CPU it has no rows and says so
"$py" benchmarks/bench_scale.py --devices "$devices" --models mlp "${smoke[@]}" --cuda-graph \
    --no-peer --fit-epochs 0 --out "$out/graph.md" 2>&1 | tee "$out/graph.log"
rc_graph=${PIPESTATUS[0]}

# the score's cost per objective: aten ops, CUDA kernel launches, syncs, time
kernel_args=(--devices "$devices")
[[ ${#smoke[@]} -gt 0 ]] && kernel_args=(--smoke)
"$py" benchmarks/bench_kernels.py "${kernel_args[@]}" --out "$out/kernels.md" 2>&1 \
    | tee "$out/kernels.log"
rc_kernels=${PIPESTATUS[0]}

tests=()
for t in tests/test_cuda.py tests/test_step_kernels.py; do
    if [[ -f "$t" ]]; then tests+=("$t"); else echo "no $t in this checkout" | tee -a "$out/env.txt"; fi
done
rc_tests=0
if [[ ${#tests[@]} -gt 0 ]]; then
    "$py" -m pytest -q -p no:cacheprovider "${tests[@]}" 2>&1 | tee "$out/cuda_tests.log"
    rc_tests=${PIPESTATUS[0]}
    [[ $rc_tests -eq 5 ]] && rc_tests=0  # no tests collected
fi
echo "gpu_session: table exit $rc_table, graph exit $rc_graph, kernels exit $rc_kernels," \
    "tests exit $rc_tests; files in $out"
[[ $rc_table -eq 0 && $rc_graph -eq 0 && $rc_kernels -eq 0 && $rc_tests -eq 0 ]]
