#!/usr/bin/env bash
# The compatibility matrix (docs/compat.md, "The tested matrix"): one virtual environment per
# leg (a Python, a numba-cuda, a numba), kcache installed editable with the leg's versions, and
# the tests marked compat run in it (`pytest -m compat`). One leg has a numba-cuda kcache does
# not support and checks the one-line refusal instead; one checks with `pip install --dry-run`
# that kcache-cuda[cu13] resolves beside cudf. One summary line per leg; exits 1 if any failed.
#
#   tests/compat/run.sh [LEG ...]      all legs, or those named (see `tests/compat/run.sh --list`)
#
# Environments live in .compat-venvs/ (git ignores it; KCACHE_COMPAT_DIR moves it) and are
# reused by a later run (KCACHE_COMPAT_FRESH=1 makes them anew; KCACHE_COMPAT_KEEP=0 removes
# each when its leg ends, as CI does: seven environments of CUDA wheels are about 6 GB, more
# than a CI machine's disk may have free); each leg's log is in .compat-venvs/logs/. Wheels are shared between legs through pip's cache (PIP_CACHE_DIR is
# honoured). KCACHE_COMPAT_JOBS legs run at a time (default 2: installs overlap with tests).
# Interpreters: $(pyenv root)/versions/3.X.*/bin/python (by full path: pyenv's shims refuse a
# version that is not selected), else python3.X on PATH.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
root=${KCACHE_COMPAT_DIR:-$repo/.compat-venvs}
jobs=${KCACHE_COMPAT_JOBS:-2}
# pytest-xdist workers per leg: the cores shared by the legs running at once (-n 0: in-process)
workers=$(( $(nproc) / jobs ))
(( workers > 1 )) || workers=0
test_deps=("pytest>=7" "pytest-xdist>=3.5" "hypothesis>=6" "filecheck" "fsspec>=2023.12")

# name | Python | kcache's extras | what else to install | what to check
# ("compat": pytest -m compat; "refusal": the unsupported numba-cuda's one line; "resolve": pip
# resolves kcache-cuda[cu13] beside cudf-cu13 26.6, which pins numba-cuda < 0.29)
LEGS=(
    "py3.10-nc0.30.4|3.10|[cu13]|numba-cuda[cu13]==0.30.4|compat"
    "py3.11-nc0.26.0-nb0.60|3.11|[cu13]|numba-cuda[cu13]==0.26.0 numba==0.60.0|compat"
    "py3.11-nc0.28.2-nb0.65|3.11|[cu13]|numba-cuda[cu13]==0.28.2 numba==0.65.1|compat"
    "py3.12-nc0.30.4-nb0.64|3.12|[cu13]|numba-cuda[cu13]==0.30.4 numba==0.64.0|compat"
    "py3.13-nc0.30.4-nb0.68|3.13|[cu13]|numba-cuda[cu13]==0.30.4 numba==0.68.1|compat"
    "py3.11-nc0.24.0-unsupported|3.11||numba-cuda[cu13]==0.24.0 numba==0.64.0|refusal"
    "py3.11-resolve-cudf26.6|3.11|||resolve"
)

if [[ ${1:-} == --list ]]; then
    for leg in "${LEGS[@]}"; do echo "${leg%%|*}"; done
    exit 0
fi

find_python() {  # 3.X -> the path of an interpreter of that version, or nothing
    local version=$1 candidates=() path
    if command -v pyenv >/dev/null 2>&1; then
        candidates+=("$(pyenv root)"/versions/"$version".*/bin/python)
    fi
    candidates+=("$HOME"/.pyenv/versions/"$version".*/bin/python "$(command -v "python$version" || true)")
    for path in "${candidates[@]}"; do
        if [[ -x $path ]] && "$path" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$version'.split('.'))))" 2>/dev/null; then
            echo "$path"
            return 0
        fi
    done
    return 1
}

# pip without the index-location chatter some machines' configurations cause
pip_quiet() { "$@" 2>&1 | grep -v "^WARNING: Location '.*' is ignored"; return "${PIPESTATUS[0]}"; }

make_venv() {  # DIR PYTHON: a virtual environment made with PYTHON at DIR (reused when it is one)
    local dir=$1 python=$2
    if [[ ${KCACHE_COMPAT_FRESH:-0} == 1 || ! -x $dir/bin/python ]] \
            || [[ $("$dir/bin/python" -c 'import sys; print(sys.version_info[:2])') != $("$python" -c 'import sys; print(sys.version_info[:2])') ]]; then
        rm -rf "$dir"
        "$python" -m venv "$dir" || return 1
    fi
}

# A leg's kcache install builds the editable wheel in this checkout (egg-info beside the
# code): one at a time.
install_kcache() {  # DIR EXTRAS REQUIREMENTS...: kcache editable with EXTRAS ("[cu13]"), and the rest
    local dir=$1 extras=$2; shift 2
    (
        flock 9
        pip_quiet "$dir/bin/python" -m pip install -q "${test_deps[@]}" -e "$repo$extras" "$@"
    ) 9>"$root/install.lock"
}

versions() {  # DIR: "numba-cuda X numba Y numpy Z cuda-core W" as installed there
    "$1/bin/python" - <<'EOF' 2>/dev/null
from importlib import metadata
out = []
for name in ("numba-cuda", "numba", "numpy", "cuda-core"):
    try:
        out.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        out.append(f"{name} -")
print(", ".join(out))
EOF
}

# The refusal of an unsupported numba-cuda (docs/compat.md): the bridge's own tests, and
# `kcache warm` on a module of kernels: exit status 1 and one line on stderr.
check_refusal() {  # DIR
    local dir=$1 work
    "$dir/bin/python" -m pytest -q -p no:cacheprovider -m compat -n 0 tests/test_compat_refusal.py || return 1
    work=$(mktemp -d)
    printf 'from numba import cuda\n\n@cuda.jit("void(float32[::1])")\ndef k(a):\n    a[0] = 1\n' >"$work/kernels.py"
    KCACHE_DIR="$work/cache" "$dir/bin/kcache" warm --cc 9.0 "$work/kernels.py" >"$work/out" 2>"$work/err"
    local status=$?
    echo "kcache warm exit status $status; stderr:"; cat "$work/err"
    local lines
    lines=$(wc -l <"$work/err")
    if [[ $status == 1 && $lines == 1 && ! -s $work/out ]] \
            && grep -q "^kcache: numba-cuda .* is not supported by kcache (supported: numba-cuda" "$work/err" \
            && [[ ! -e $work/cache ]]; then
        rm -rf "$work"
        return 0
    fi
    echo "expected: exit status 1, one line 'kcache: numba-cuda ... is not supported by kcache (supported: ...', nothing cached"
    rm -rf "$work"
    return 1
}

# cudf-cu13 26.6 pins numba-cuda < 0.29 (which pins cuda-core < 1.0) and numba < 0.65: kcache's
# cu13 extra must resolve beside it. A dry run: nothing of cudf is installed.
check_resolve() {  # DIR
    local dir=$1 report
    report=$(mktemp)
    pip_quiet "$dir/bin/python" -m pip install -q --dry-run --ignore-installed --report "$report" \
        -e "$repo[cu13]" "cudf-cu13==26.6.*" || { rm -f "$report"; return 1; }
    "$dir/bin/python" - "$report" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
got = {i["metadata"]["name"].replace("_", "-").lower(): i["metadata"]["version"]
       for i in report["install"]}
print("resolved:", ", ".join(f"{n} {got.get(n, '-')}" for n in
                             ("kcache-cuda", "cudf-cu13", "numba-cuda", "numba", "cuda-core", "numpy")))
EOF
    local status=$?
    rm -f "$report"
    return $status
}

run_leg() {  # "name|python|extras|requirements|check" -> writes $root/results/NAME
    local name python extras reqs check
    IFS='|' read -r name python extras reqs check <<<"$1"
    local dir=$root/$name log=$root/logs/$name.log started=$SECONDS status=0 detail=""
    {
        local interpreter
        if ! interpreter=$(find_python "$python"); then
            echo "no Python $python found (pyenv or python$python on PATH)"
            status=1
        elif ! make_venv "$dir" "$interpreter"; then
            status=1
        elif [[ $check == resolve ]]; then
            check_resolve "$dir" || status=1
        else
            # shellcheck disable=SC2086  # the requirements are words
            install_kcache "$dir" "$extras" $reqs || status=1
            if [[ $status == 0 && $check == compat ]]; then
                # Only the files with compat tests are collected: a module of other tests
                # that cannot import on an old version is not this matrix's concern.
                # -p no:randomly: the order as written, where that plugin is installed.
                mapfile -t files < <(grep -l 'mark\.compat' tests/test_*.py)
                "$dir/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly -m compat \
                    -n "$workers" "${files[@]}" || status=1
            elif [[ $status == 0 ]]; then
                check_refusal "$dir" || status=1
            fi
        fi
    } >"$log" 2>&1
    if [[ $check == resolve ]]; then
        detail=$(grep -m1 '^resolved:' "$log" | sed 's/^resolved: //')
    else
        detail="$(versions "$dir")"
        local tally
        tally=$(grep -E '[0-9]+ (passed|failed|errors?|skipped|deselected).* in [0-9.]+s' "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')
        [[ -n $tally ]] && detail="$detail; $tally"
    fi
    local verdict=PASS
    [[ $status == 0 ]] || verdict=FAIL
    printf '%s %s (Python %s; %s) in %d s\n' "$verdict" "$name" "$python" "$detail" \
        $(( SECONDS - started )) >"$root/results/$name"
    [[ ${KCACHE_COMPAT_KEEP:-1} != 0 ]] || rm -rf "$dir"
}

selected=()
for leg in "${LEGS[@]}"; do
    if (( $# == 0 )) || [[ " $* " == *" ${leg%%|*} "* ]]; then selected+=("$leg"); fi
done
if (( ${#selected[@]} == 0 )); then
    echo "compat: no leg named $*; legs: $(for l in "${LEGS[@]}"; do printf '%s ' "${l%%|*}"; done)" >&2
    exit 2
fi

mkdir -p "$root/logs" "$root/results"
rm -f "$root/results/"*
began=$SECONDS
echo "compat: ${#selected[@]} legs, $jobs at a time, in $root (logs in $root/logs)"
running=()
for leg in "${selected[@]}"; do
    while (( ${#running[@]} >= jobs )); do
        wait -n
        alive=()
        for pid in "${running[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        running=("${alive[@]}")
    done
    run_leg "$leg" &
    running+=($!)
done
wait

failed=0
for leg in "${selected[@]}"; do
    name=${leg%%|*}
    if [[ -f $root/results/$name ]]; then
        echo "compat: $(cat "$root/results/$name")"
        grep -q '^PASS' "$root/results/$name" || failed=1
    else
        echo "compat: FAIL $name (no result)"
        failed=1
    fi
done
for leg in "${selected[@]}"; do  # the end of each failed leg's log, for CI's output
    name=${leg%%|*}
    if ! grep -qs '^PASS' "$root/results/$name"; then
        echo "---- compat: the last lines of $root/logs/$name.log"
        tail -n 25 "$root/logs/$name.log"
    fi
done
echo "compat: $(( SECONDS - began )) s; $([[ $failed == 0 ]] && echo "every leg passed" || echo "some legs failed")"
exit $failed
