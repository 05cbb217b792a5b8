#!/usr/bin/env bash
# The one benchmark script (issue #8): runs Spore's benchmark harness and the peer frameworks'
# benchmarks in the same run, on the same machine, then regenerates the generated section of
# BENCHMARKS.md (between <!-- generated:start --> and <!-- generated:end -->).
#
#   bash bench/run_all.sh [--quick] [--only BENCH[,BENCH...]] [--skip-spore] [--skip-python] [--skip-rust]
#
# Steps: (a) create/reuse the peer venv, (b) Spore's harness, (c) Python peers (PyTorch eager and
# torch.compile, MindSpore PyNative/Graph/PyNative+jit, JAX jit, NumPy GEMM), (d) Rust peers (Candle,
# Burn flex), (e) data-pipeline peers (torch DataLoader, MindSpore dataset), (f) bench/report.py.
# Raw results and logs: target/bench/. Every run starts from empty result files, so a skipped or
# failed step shows as "not run" / "failed: ..." in the tables, never as an older number.
#
# Environment:
#   SPORE_PEER_VENV        venv for the Python peers (default ~/.cache/spore-peer-venv; created and
#                          filled from bench/peers/requirements.txt on first use, several GB)
#   SPORE_BENCH_THREADS    threads for every framework (default 2)
#   SPORE_BENCH_PRIORITY   1 (default): run in an own session whose scheduler autogroup gets nice -20,
#                          so other jobs on the machine barely disturb the timing; 0: normal priority
#                          (the Python peers then wait for a quiet machine before each job)
#   SPORE_BENCH_RUST_TIMEOUT  seconds per Rust peer run (default 900)
#   ANCHOR_*               knobs of the Python peer driver, see bench/peers/README.md
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ALL_BENCHES="lenet5_train_b32 mlp_train_b64 mlp_infer_b64 resnet18_train_b32 gemm_2048 fma_peak pipeline_mnist"

usage() {
  cat <<EOF
usage: bash bench/run_all.sh [options]

Runs Spore's benchmarks and the peer frameworks' in one session and rewrites the generated
section of BENCHMARKS.md.

options:
  --quick              fewer and shorter repeats everywhere (a smoke test, not a measurement)
  --only B1,B2,...     run only these benchmarks; names: ${ALL_BENCHES// /, }
  --skip-spore         do not run Spore's harness
  --skip-python        do not run the Python peers (PyTorch, MindSpore, JAX, NumPy, pipelines)
  --skip-rust          do not build or run the Rust peers (Candle, Burn)
  -h, --help           this text
EOF
}

die() { echo "run_all.sh: error: $*" >&2; exit 2; }

ORIG_ARGS=("$@")
QUICK=0 SKIP_SPORE=0 SKIP_PY=0 SKIP_RUST=0 ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --skip-spore) SKIP_SPORE=1 ;;
    --skip-python) SKIP_PY=1 ;;
    --skip-rust) SKIP_RUST=1 ;;
    --only) [ $# -ge 2 ] || die "--only needs a comma-separated list of benchmarks"; ONLY="$2"; shift ;;
    --only=*) ONLY="${1#--only=}" ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
  shift
done

# Selected benchmarks, validated: SEL_LIST (array), SELECTED (" a b c ", for matching), ONLY (a,b,c)
SEL_LIST=()
if [ -n "$ONLY" ]; then
  IFS=',' read -r -a only_items <<< "$ONLY"
  for b in "${only_items[@]}"; do
    b="${b// /}"
    [ -n "$b" ] || continue
    case " $ALL_BENCHES " in
      *" $b "*) SEL_LIST+=("$b") ;;
      *) die "unknown benchmark '$b' in --only (known: ${ALL_BENCHES// /, })" ;;
    esac
  done
  [ ${#SEL_LIST[@]} -gt 0 ] || die "--only selected no benchmark"
  ONLY="$(IFS=,; echo "${SEL_LIST[*]}")"
else
  read -r -a SEL_LIST <<< "$ALL_BENCHES"
fi
SELECTED=" ${SEL_LIST[*]} "
SELECTED_CSV="$(IFS=,; echo "${SEL_LIST[*]}")"
selected() { case "$SELECTED" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# ---- noise control: an own session whose autogroup gets nice -20 ---------------------------
# Linux shares CPU between autogroups (sessions) regardless of per-process nice, so the whole
# benchmark runs in its own session and raises that session's priority (as the peer anchors did).
PRIORITY="${SPORE_BENCH_PRIORITY:-1}"
if [ "$PRIORITY" = 1 ] && [ -z "${SPORE_BENCH_IN_SETSID:-}" ]; then
  command -v setsid >/dev/null || die "setsid not found (util-linux); or set SPORE_BENCH_PRIORITY=0"
  # Started in the background of this non-interactive shell, setsid is no process-group leader, so
  # it execs in place: $! is the new session's leader and group, which Ctrl-C here takes down.
  SPORE_BENCH_IN_SETSID=1 setsid bash "$0" "${ORIG_ARGS[@]}" &
  child=$!
  trap 'echo "run_all.sh: interrupted, stopping the benchmark session" >&2; kill -TERM -- "-$child" 2>/dev/null; wait "$child" || true; exit 130' INT TERM
  rc=0
  wait "$child" || rc=$?
  exit "$rc"
fi
PRIORITY_NOTE="off (SPORE_BENCH_PRIORITY=0)"
if [ "$PRIORITY" = 1 ]; then
  if echo -20 > /proc/self/autogroup 2>/dev/null; then
    PRIORITY_NOTE="own session, scheduler autogroup nice -20"
    export ANCHOR_WAIT_MAX="${ANCHOR_WAIT_MAX:-0}"   # priority instead of waiting for quiet
  else
    PRIORITY_NOTE="own session, but raising its autogroup priority failed (needs root or CAP_SYS_NICE)"
    echo "run_all.sh: warning: could not raise the autogroup priority; timings may be disturbed by other jobs" >&2
  fi
fi

THREADS="${SPORE_BENCH_THREADS:-2}"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS"
export RAYON_NUM_THREADS="$THREADS" MATMUL_NUM_THREADS="$THREADS" ANCHOR_THREADS="$THREADS"
export RUST_BACKTRACE=0
export PYTHONDONTWRITEBYTECODE=1   # no __pycache__ folders in bench/

OUT="$ROOT/target/bench"
LOGS="$OUT/logs"
STATUS="$OUT/status.tsv"
mkdir -p "$OUT"
# No stale numbers: every run starts from empty results.
rm -rf "$LOGS"
rm -f "$OUT/spore.jsonl" "$OUT/peers_py.json" "$OUT/peers_rust.jsonl" "$OUT"/pipeline_*.txt "$STATUS" "$OUT/report.md" \
  "$OUT/host_speed.tsv"
mkdir -p "$LOGS"
: > "$STATUS"
exec > >(tee "$LOGS/run_all.log") 2>&1

START_S=$(date +%s)
say() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
# one line per step: name <TAB> ok|skipped|failed <TAB> reason (read by report.py)
record() {
  local reason="${3:-}"
  reason="$(printf '%s' "$reason" | tr '\t\r\n' '   ' | cut -c1-300)"
  printf '%s\t%s\t%s\n' "$1" "$2" "$reason" >> "$STATUS"
  [ "$2" = failed ] && echo "run_all.sh: $1 failed: $reason" >&2
  return 0
}
# last meaningful line of a log, for "failed: <reason>"
last_error() {
  local l
  l="$(grep -E 'error(\[|:)|Error|panicked|Traceback|No such file|not found' "$1" 2>/dev/null | grep -v '^warning' | tail -n 1 || true)"
  [ -n "$l" ] || l="$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1 || true)"
  printf '%s' "${l:-no output}" | cut -c1-200
}

# The host's speed at each phase: Spore's two-thread FMA peak probe (1 s), one line per phase
# (phase <TAB> GFLOP/s <TAB> UTC time) in host_speed.tsv. Why: this host's speed drifts by
# minutes (shared hardware), and a phase that ran on a slower host has slower numbers, Spore's and
# the peers' alike; report.py prints the probes beside the ratios so that drift is visible.
probe_host() {
  local bin="$ROOT/target/release/examples/bench" g=""
  if [ -x "$bin" ]; then
    g="$("$bin" --child fma_peak:n/a --quick --threads "$THREADS" 2>/dev/null | grep -o '"gflops":[0-9.]*' | cut -d: -f2 || true)"
  fi
  printf '%s\t%s\t%s\n' "$1" "${g:-none}" "$(date -u +%H:%M:%S)" >> "$OUT/host_speed.tsv"
  echo "host probe ($1): ${g:-not measured (no Spore bench binary)} GFLOP/s"
}

say "Spore benchmark run: ${ORIG_ARGS[*]:-(all)}; benchmarks:$SELECTED"
echo "threads $THREADS; noise control: $PRIORITY_NOTE; results in $OUT"
[ "$QUICK" = 1 ] && echo "QUICK mode: short repeats, numbers are a smoke test only"

cd "$ROOT"

# ---- (a) venv for the Python peers ----------------------------------------------------------
VENV="${SPORE_PEER_VENV:-$HOME/.cache/spore-peer-venv}"
REQ="$ROOT/bench/peers/requirements.txt"
VENV_OK=0
ensure_venv() {  # runs inside `if`, where set -e is off: every step checks its status itself
  if [ ! -x "$VENV/bin/python" ]; then
    echo "creating venv $VENV"
    python3 -m venv "$VENV" || return 1
  fi
  if cmp -s "$REQ" "$VENV/.spore-peer-requirements.txt"; then
    echo "venv $VENV is up to date with bench/peers/requirements.txt"
    return 0
  fi
  echo "installing bench/peers/requirements.txt into $VENV (first time: several GB, ~5-15 min)"
  "$VENV/bin/python" -m pip install --upgrade pip || return 1
  "$VENV/bin/python" -m pip install -r "$REQ" || return 1
  cp "$REQ" "$VENV/.spore-peer-requirements.txt"
}
if [ "$SKIP_PY" = 1 ]; then
  record python skipped "--skip-python"
else
  say "(a) Python peer venv"
  if ensure_venv 2>&1 | tee "$LOGS/venv.log"; then
    VENV_OK=1
    record python ok ""
  else
    record python failed "venv setup failed: $(last_error "$LOGS/venv.log") (log: target/bench/logs/venv.log)"
  fi
fi

# ---- (b) Spore ------------------------------------------------------------------------------
if [ "$SKIP_SPORE" = 1 ]; then
  record spore skipped "--skip-spore"
else
  say "(b) Spore harness"
  spore_args=(--json "$OUT/spore.jsonl" --threads "$THREADS")
  [ "$QUICK" = 1 ] && spore_args+=(--quick)
  [ -n "$ONLY" ] && spore_args+=(--only "$ONLY")
  built=1
  cargo build --release -p spore --example bench 2>&1 | tee "$LOGS/spore-build.log" || built=0
  [ "$built" = 1 ] && probe_host "Spore"
  if [ "$built" = 0 ]; then
    record spore failed "build failed: $(last_error "$LOGS/spore-build.log") (log: target/bench/logs/spore-build.log)"
  elif ! cargo run --release -q -p spore --example bench -- "${spore_args[@]}" 2>&1 | tee "$LOGS/spore.log"; then
    record spore failed "harness failed: $(last_error "$LOGS/spore.log") (log: target/bench/logs/spore.log)"
  elif [ ! -s "$OUT/spore.jsonl" ]; then
    record spore failed "harness wrote no results to target/bench/spore.jsonl"
  else
    record spore ok ""
  fi
fi

# ---- (c) Python peers -----------------------------------------------------------------------
if [ "$VENV_OK" = 1 ]; then
  # canonical benchmark names -> job-name substrings of bench/peers/py/driver.py
  py_only=()
  selected lenet5_train_b32 && py_only+=(lenet_train/)
  selected mlp_train_b64 && py_only+=(mlp_train/)
  selected mlp_infer_b64 && py_only+=(mlp_infer/)
  selected resnet18_train_b32 && py_only+=(resnet18_train/)
  selected gemm_2048 && py_only+=(gemm/)
  if [ ${#py_only[@]} -eq 0 ]; then
    record python-peers skipped "not selected by --only"
  else
    say "(c) Python peers (PyTorch, MindSpore, JAX, NumPy): one process per job"
    probe_host "Python peers"
    py_args=(--out "$OUT/peers_py.json" --logs "$LOGS" --only "${py_only[@]}")
    [ "$QUICK" = 1 ] && py_args+=(--quick)
    if (cd "$ROOT/bench/peers/py" && "$VENV/bin/python" driver.py "${py_args[@]}") 2>&1 | tee "$LOGS/peers-py.log"; then
      record python-peers ok ""
    else
      record python-peers failed "driver failed: $(last_error "$LOGS/peers-py.log") (log: target/bench/logs/peers-py.log)"
    fi
  fi
fi

# ---- (d) Rust peers -------------------------------------------------------------------------
RUST_DIR="$ROOT/bench/peers/rust"
RUST_TARGET="$ROOT/target/peers-rust"
rust_benches=()
selected lenet5_train_b32 && rust_benches+=(lenet)
selected mlp_train_b64 && rust_benches+=(mlp_train)
selected mlp_infer_b64 && rust_benches+=(mlp_infer)
selected resnet18_train_b32 && rust_benches+=(resnet18)
selected gemm_2048 && rust_benches+=(matmul)
busy_pct() {  # machine-wide busy % over 2 s
  local u n s i w q sq st b0 t0 b1 t1
  read -r _ u n s i w q sq st _ < /proc/stat; b0=$((u+n+s+q+sq+st)); t0=$((b0+i+w))
  sleep 2
  read -r _ u n s i w q sq st _ < /proc/stat; b1=$((u+n+s+q+sq+st)); t1=$((b1+i+w))
  echo $(( 100 * (b1-b0) / (t1-t0 > 0 ? t1-t0 : 1) ))
}
wait_quiet() {  # only without the priority trick, as in the peer anchors
  [ "${ANCHOR_WAIT_MAX:-600}" = 0 ] && return 0
  local waited=0 p
  while :; do
    p=$(busy_pct)
    [ "$p" -lt 10 ] && return 0
    echo "  waiting for quiet machine: ${p}% busy"
    waited=$((waited + 5)); [ "$waited" -ge "${ANCHOR_WAIT_MAX:-600}" ] && { echo "  giving up waiting"; return 0; }
    sleep 3
  done
}
json_str() { printf '%s' "$1" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g'; }

if [ "$SKIP_RUST" = 1 ]; then
  record rust-candle skipped "--skip-rust"
  record rust-burn-flex skipped "--skip-rust"
elif [ ${#rust_benches[@]} -eq 0 ]; then
  record rust-candle skipped "not selected by --only"
  record rust-burn-flex skipped "not selected by --only"
else
  say "(d) Rust peers (Candle, Burn flex); first build ~20 min of both cores"
  : > "$OUT/peers_rust.jsonl"
  [ "$QUICK" = 1 ] && export BENCH_QUICK=1
  for lib in candle burn-flex; do
    case "$lib" in
      candle) feat=candle; tdir="$RUST_TARGET/candle"; cmd=("$tdir/release/bench_candle") ;;
      burn-flex) feat=burn-flex; tdir="$RUST_TARGET/burn"; cmd=("$tdir/release/bench_burn" flex) ;;
    esac
    echo "-- building $lib (features $feat, target dir ${tdir#"$ROOT"/})"
    if ! (cd "$RUST_DIR" && CARGO_TARGET_DIR="$tdir" cargo build --release --locked --features "$feat") \
        2>&1 | tee "$LOGS/rust-build-$lib.log"; then
      record "rust-$lib" failed "build failed: $(last_error "$LOGS/rust-build-$lib.log") (log: target/bench/logs/rust-build-$lib.log)"
      continue
    fi
    probe_host "$lib"
    for b in "${rust_benches[@]}"; do
      echo "-- $lib $b"
      tmp="$LOGS/rust-$lib-$b.out"; err="$LOGS/rust-$lib-$b.err"
      rc=0
      for attempt in 1 2; do
        wait_quiet
        rc=0
        BENCHES=$b timeout "${SPORE_BENCH_RUST_TIMEOUT:-900}" "${cmd[@]}" > "$tmp" 2> "$err" || rc=$?
        cat "$err" >&2
        f=$(grep -o '"foreign_cpu_pct":[0-9.]*' "$tmp" | tail -n 1 | cut -d: -f2 | cut -d. -f1 || true)
        if [ "$rc" = 0 ] && [ -n "$f" ] && [ "$f" -ge 10 ] && [ "$attempt" -lt 2 ] && [ "$QUICK" = 0 ]; then
          echo "  other processes used ${f}% CPU during the run; retrying"
          continue
        fi
        break
      done
      if [ "$rc" = 0 ] && grep -q '^{' "$tmp"; then
        grep '^{' "$tmp" >> "$OUT/peers_rust.jsonl"
        grep '^{' "$tmp" | tail -n 1
      else
        if [ "$rc" = 124 ]; then msg="timeout after ${SPORE_BENCH_RUST_TIMEOUT:-900} s"
        else msg="rc=$rc: $( (grep -A2 'panicked' "$err" || tail -n 3 "$err") | head -n 3 | tr '\n' ' ' | cut -c1-300)"; fi
        printf '{"lib":"%s","bench":"%s","error":"%s"}\n' "$lib" "$b" "$(json_str "$msg")" >> "$OUT/peers_rust.jsonl"
        echo "  failed: $msg"
      fi
    done
    record "rust-$lib" ok ""
  done
  unset BENCH_QUICK
fi

# ---- (e) data-pipeline peers ----------------------------------------------------------------
if ! selected pipeline_mnist; then
  record pipeline-torch skipped "not selected by --only"
  record pipeline-mindspore skipped "not selected by --only"
elif [ "$SKIP_PY" = 1 ]; then
  record pipeline-torch skipped "--skip-python"
  record pipeline-mindspore skipped "--skip-python"
elif [ "$VENV_OK" = 0 ]; then
  record pipeline-torch failed "no Python peer venv"
  record pipeline-mindspore failed "no Python peer venv"
else
  say "(e) data-pipeline peers"
  probe_host "pipeline peers"
  epochs=5; [ "$QUICK" = 1 ] && epochs=1
  for lib in torch mindspore; do
    echo "-- pipeline_$lib.py --epochs $epochs"
    if "$VENV/bin/python" "$ROOT/bench/peers/pipeline_$lib.py" --epochs "$epochs" --data "$ROOT/data/mnist/train" \
        > "$OUT/pipeline_$lib.txt" 2> "$LOGS/pipeline-$lib.err"; then
      cat "$OUT/pipeline_$lib.txt"
      record "pipeline-$lib" ok ""
    else
      cat "$OUT/pipeline_$lib.txt"
      record "pipeline-$lib" failed "$(last_error "$LOGS/pipeline-$lib.err") (log: target/bench/logs/pipeline-$lib.err)"
    fi
  done
fi

# ---- (f) report -----------------------------------------------------------------------------
probe_host "end"
say "(f) report -> BENCHMARKS.md"
report_py=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  [ -x "$VENV/bin/python" ] || die "bench/report.py needs Python >= 3.10"
  report_py="$VENV/bin/python"
fi
report_args=()
[ "$QUICK" = 1 ] && report_args+=(--quick)
"$report_py" "$ROOT/bench/report.py" "${report_args[@]}" \
  --dir "$OUT" \
  --benchmarks "$ROOT/BENCHMARKS.md" \
  --command "bash bench/run_all.sh${ORIG_ARGS[*]:+ ${ORIG_ARGS[*]}}" \
  --selected "$SELECTED_CSV" \
  --venv-python "$VENV/bin/python" \
  --priority "$PRIORITY_NOTE" \
  --threads "$THREADS" \
  --wall-s "$(( $(date +%s) - START_S ))"

say "done in $(( ($(date +%s) - START_S) / 60 )) min; step status:"
column -t -s $'\t' "$STATUS" 2>/dev/null || cat "$STATUS"
