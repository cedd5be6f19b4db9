#!/usr/bin/env bash
# The GPU part of the benchmark on the GPU machine, in one go, from the repository root:
#
#     bash bench/gpu_run.sh [SECTIONS] [OUT_FILE] [-- more bench/run.py gpu options]
#
# SECTIONS: first_calls,fleet,app (the default) or some of them, e.g. "first_calls,fleet" in one
# device call and "app" in another (each fits one 10-minute call; all three together may not).
# OUT_FILE: default $OUT/gpu.json (the device machine's returned folder), else
# bench/results/gpu.json. A section run alone keeps the other sections' figures: OUT_FILE starts
# as a copy of bench/results/gpu.json when it does not exist yet.
#
# What it does: installs the carried wheels (.whl/*.whl, when there are any) into /tmp/site for
# kcache's dependencies the machine lacks; then bench/run.py gpu --install wheel builds a wheel of
# this tree, installs it into a temp folder, compiles the bytecode of everything the timed
# processes import (bench/install.py) and runs the sections with PYTHONDONTWRITEBYTECODE unset.
set -euo pipefail
cd "$(dirname "$0")/.."

sections=${1:-first_calls,fleet,app}
out=${2:-${OUT:+$OUT/gpu.json}}
out=${out:-bench/results/gpu.json}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift

export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ ! -e "$out" ] && [ -e bench/results/gpu.json ] && [ "$out" != bench/results/gpu.json ]; then
    mkdir -p "$(dirname "$out")"
    cp bench/results/gpu.json "$out"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
start=$(date +%s)
status=0
python3 bench/run.py gpu --install wheel --sections "$sections" --out "$out" "$@" || status=$?
echo "bench/gpu_run.sh: sections $sections done in $(( $(date +%s) - start )) s (exit $status); results in $out"
exit $status
