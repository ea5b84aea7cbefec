#!/usr/bin/env bash
# Alanine dipeptide, the r x lag sweep of issue 18 on the device machine (one GPU, 16 CPU cores):
# `dpnets reproduce alanine-r-lag` (dpnets.experiments.alanine_sweep) with every trained method
# on the same number of gradient steps (1,680 of batch 512), r in {4, 8, 16, 32} and 30
# bootstrap resamples of whole trajectories (its defaults; 30 is the count the cached MSM scan
# was made with), 2 seeds (SEEDS=3 for three: about 1.5x the time), 12 worker processes sharing
# the GPU (WORKERS=N; one torch and BLAS thread each). Writes table.md, results.json,
# its_r.png, fits.jsonl and log.txt into $OUT/alanine_r_lag/ and prints the wall time. Took
# 418 s on an H100 with 16 cores for 2 seeds and 8 workers (r_lag/README.md).
#
# Usage, from the repository root:  [SEEDS=3] [WORKERS=8] bash benchmarks/alanine_r_lag_device.sh CACHE_DIR
#                                   bash benchmarks/alanine_r_lag_device.sh --smoke
# --smoke (tests/test_benchmarks.py, seconds, no cache or GPU needed): checks only that the
# command this script runs still exists with the options it passes (PYTHON: the interpreter,
# default python3).
#
# CACHE_DIR (becomes DPNETS_CACHE) must hold what the sweep reads, nothing is simulated:
#   - the 96 trajectories of the full ensemble, alanine-dipeptide-*.npz (about 45 MB), as
#     written by `dpnets reproduce alanine-dipeptide` (OpenMM/mdtraj are not needed here);
#   - the MSM scan, alanine-msm-scan-*.npz (2 kB): msm_reference needs deeptime, which the
#     device image lacks, so compute it once where deeptime is installed (any sweep call on
#     the full ensemble with the same lags and bootstrap count writes it, e.g.
#     dpnets.experiments.alanine_sweep.run(methods=("Nyström-RRR",), r_values=(4,), seeds=1)),
#     then copy it along.
#     Without it the sweep still runs and says "no MSM reference".
# To carry them: copy those files into a git-ignored folder of the checkout (for instance
# .alanine-cache/, listed in .git/info/exclude) and name it in the device call's carry.
set -euo pipefail
if [[ "${1:-}" == "--smoke" ]]; then
    help="$(PYTHONPATH=src "${PYTHON:-python3}" -m dpnets reproduce --help)"
    for word in alanine-r-lag --seeds --workers --device --out; do
        grep -q -- "$word" <<<"$help" || { echo "dpnets reproduce lacks $word" >&2; exit 1; }
    done
    echo "smoke: dpnets reproduce alanine-r-lag --seeds --workers --device --out: all present"
    exit 0
fi
cache="${1:?usage: bash benchmarks/alanine_r_lag_device.sh CACHE_DIR}"
cache="$(cd "$cache" && pwd)"
out="${OUT:-out}/alanine_r_lag"
mkdir -p "$out"
export DPNETS_CACHE="$cache" PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "trajectories in the cache: $(ls "$cache"/alanine-dipeptide-*.npz | wc -l)"
ls "$cache"/alanine-msm-scan-*.npz 2>/dev/null || echo "no MSM scan in the cache"
python3 -c "import deeptime" 2>/dev/null && echo "deeptime: yes" || echo "deeptime: no"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
start=$(date +%s)
set +e
PYTHONPATH=src python3 -m dpnets reproduce alanine-r-lag --seeds "${SEEDS:-2}" \
    --workers "${WORKERS:-12}" --device cuda --out "$out" 2>&1 | tee "$out/log.txt"
rc=${PIPESTATUS[0]}
echo "wall time: $(($(date +%s) - start)) s (exit $rc)" | tee -a "$out/log.txt"
exit "$rc"
