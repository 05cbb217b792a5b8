#!/usr/bin/env bash
# Spore against PyTorch on a lent many-core host (issue 40's thread sweep), with binaries
# built elsewhere: such a host has Python and PyTorch but no Rust toolchain.
#
#   here:   bash bench/lent_host.sh stage          # builds, strips and stages the binaries
#   there:  bash bench/lent_host.sh profile OUT    # Spore's per-op profiles at 2 and N threads
#           bash bench/lent_host.sh sweep OUT [THREADS] [ROUNDS]
#           bash bench/lent_host.sh avx512 OUT      # the 12x16 AVX-512 GEMM kernel, off/on
#           bash bench/lent_host.sh onnx OUT        # imported ResNet-18 against onnxruntime
#           bash bench/lent_host.sh session OUT     # onnx, the AVX-512 GEMM, then the sweep
#   here:   bash bench/lent_host.sh stage-mpi      # the MPI binaries and an Open MPI runtime
#   there:  bash bench/lent_host.sh distributed OUT [RANKS]   # issues 34 and 35 on many cores
#
# `stage` puts stripped `bench` and `profile_lenet` binaries in .lent/ (git ignores it through
# .git/info/exclude; the device tool's `carry` takes it). `profile` writes the op-by-op
# profiles of ResNet-18, ResNet-50 and the BERT encoder at each of THREADS (default: 2 and
# the host's core count). `sweep` runs bench/interleaved.py at THREADS (default 2,4,8,16) against PyTorch eager,
# Spore in Graph mode, with a short protocol so the whole sweep fits one call; it writes
# interleaved.jsonl and interleaved.md to OUT, plus host.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=.lent

case "${1:-}" in
stage)
    cargo build --release -p spore --example bench --example profile_lenet --example bench_onnx
    mkdir -p "$STAGE"
    grep -qx "/$STAGE/" .git/info/exclude 2>/dev/null || echo "/$STAGE/" >> .git/info/exclude
    for b in bench profile_lenet bench_onnx; do
        strip -o "$STAGE/$b" "target/release/examples/$b"
    done
    cargo build --release -p spore-kernels --example gemm_micro
    strip -o "$STAGE/gemm_micro" target/release/examples/gemm_micro
    git rev-parse --short HEAD > "$STAGE/commit"
    git diff --quiet HEAD || echo "(with uncommitted changes)" >> "$STAGE/commit"
    ls -la "$STAGE"
    ;;
profile)
    out=${2:?profile needs an output folder}
    shift 2
    counts=("$@")
    [ ${#counts[@]} -gt 0 ] || counts=(2 "$(nproc)")
    mkdir -p "$out"
    for t in "${counts[@]}"; do
        for net in resnet resnet50 bert; do
            "$STAGE/profile_lenet" --graph "--$net" --threads "$t" | sed -n 1,12p
            cp "${TMPDIR:-/tmp}/spore-profile-lenet/profiler/cpu_op_detail_info_0.csv" \
                "$out/profile_${net}_${t}t.csv"
        done
    done
    ;;
sweep)
    out=${2:?sweep needs an output folder}
    threads=${3:-2,4,8,16}
    rounds=${4:-2}
    mkdir -p "$out"
    [ -x "$STAGE/bench" ] || { echo "no $STAGE/bench: run 'bash bench/lent_host.sh stage' first" >&2; exit 1; }
    # What the host is (nothing here may stop the sweep).
    { cat "$STAGE/commit"; lscpu; nproc; python3 -c "import torch; print('torch', torch.__version__)"; } \
        > "$out/host.txt" 2>&1 || true
    rm -f "$out/interleaved.md" "$out/interleaved.jsonl"
    # The protocol is shorter than interleaved.py's default so that 4 thread counts and 2
    # rounds of 6 workloads fit one 10-minute call; the rounds still interleave.
    # SWEEP_LIMIT_S stops it in time for the call's limit; the rounds done so far stay.
    CUDA_VISIBLE_DEVICES="" ANCHOR_WARMUP=2 ANCHOR_REPEATS=3 ANCHOR_REPEAT_S=0.3 \
        timeout "${SWEEP_LIMIT_S:-86400}" python3 bench/interleaved.py --spore-bin "$STAGE/bench" --python "$(command -v python3)" \
        --thread-list "$threads" --rounds "$rounds" --spore-modes graph --peers torch_eager \
        --workloads lenet5_train_b32,mlp_train_b64,resnet18_train_b32,bert_train_b16,resnet50_train_b8,resnet50_infer_b1 \
        --timeout 240 --out "$out" || echo "sweep stopped early (exit $?)"
    # Rounds go outermost, so a sweep cut short keeps whole rounds; this rebuilds its report.
    [ -s "$out/interleaved.md" ] || python3 bench/interleaved.py --report-from "$out/interleaved.jsonl" \
        > "$out/interleaved.md"
    ;;
stage-mpi)
    # The distributed benchmarks, and this machine's Open MPI runtime packed so that a host
    # without one can run them: files of the Debian/Ubuntu packages, unpacked there only where
    # nothing is (tar --skip-old-files), so a host's own libraries are never replaced.
    cargo build --release --features mpi -p spore --example bench_data_parallel
    cargo build --release -p spore-parallel --features mpi --example bench_allreduce --example sharding_predict
    mkdir -p "$STAGE"
    grep -qx "/$STAGE/" .git/info/exclude 2>/dev/null || echo "/$STAGE/" >> .git/info/exclude
    for b in bench_data_parallel bench_allreduce sharding_predict; do
        strip -o "$STAGE/$b" "target/release/examples/$b"
    done
    pkgs=$(dpkg -S "$(readlink -f "$(command -v mpirun)")" "$(readlink -f "$(ldconfig -p | awk '/libmpi.so.40 /{print $NF; exit}')")" \
        | cut -d: -f1 | sort -u)
    deps="openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7"
    # shellcheck disable=SC2086
    dpkg -L $pkgs $deps | while read -r f; do
        [ -d "$f" ] && [ ! -L "$f" ] && continue
        case "$f" in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/*) continue ;; esac
        [ -e "$f" ] || [ -L "$f" ] && echo "$f"
    done > "$STAGE/openmpi.files"
    readlink -f "$(command -v mpirun)" >> "$STAGE/openmpi.files"
    tar -czf "$STAGE/openmpi.tgz" -P -T "$STAGE/openmpi.files"
    mpirun --version | head -1 > "$STAGE/openmpi.version"
    git rev-parse --short HEAD > "$STAGE/commit"
    git diff --quiet HEAD || echo "(with uncommitted changes)" >> "$STAGE/commit"
    ls -la "$STAGE"
    ;;
distributed)
    # Issue 34's weak scaling and AllReduce bandwidth, issue 35's cost model against the clock,
    # on a host with a spare core per rank. Uses the host's mpirun, or the staged runtime.
    out=${2:?distributed needs an output folder}
    ranks=${3:-2,4,8}
    mkdir -p "$out"
    if ! command -v mpirun > /dev/null; then
        [ -s "$STAGE/openmpi.tgz" ] || { echo "no mpirun and no $STAGE/openmpi.tgz: run stage-mpi" >&2; exit 1; }
        tar -xzf "$STAGE/openmpi.tgz" -P --skip-old-files
        ldconfig
        mkdir -p /tmp/mpibin
        ln -sf "$(tail -1 "$STAGE/openmpi.files")" /tmp/mpibin/mpirun
        export PATH=/tmp/mpibin:$PATH
        echo "mpirun: staged $(cat "$STAGE/openmpi.version")"
    fi
    # Shared memory without single-copy (sandboxed kernels may lack cross-memory attach);
    # components whose libraries a host lacks are skipped quietly.
    export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mca_base_component_show_load_errors=0
    { cat "$STAGE/commit"; mpirun --version | head -1; lscpu; nproc; } > "$out/host.txt" 2>&1 || true
    python3 bench/data_parallel.py --bin-dir "$STAGE" --rounds "${DP_ROUNDS:-3}" --ranks "$ranks" \
        --only allreduce 2>&1 | tee "$out/allreduce.md"
    python3 bench/data_parallel.py --bin-dir "$STAGE" --rounds "${DP_ROUNDS:-3}" --ranks "$ranks" \
        --only lenet 2>&1 | tee "$out/lenet.md"
    for n in 2 4 "${ranks##*,}"; do
        for run in 1 2; do
            echo "== sharding_predict, $n ranks, run $run"
            RAYON_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none \
                -x RAYON_NUM_THREADS -n "$n" "$STAGE/sharding_predict" || echo "failed (exit $?)"
        done
    done 2>&1 | tee "$out/sharding_predict.txt"
    python3 bench/data_parallel.py --bin-dir "$STAGE" --rounds 2 --ranks "$ranks" \
        --only resnet18 2>&1 | tee "$out/resnet18.md"
    ;;
onnx)
    # Issue 36's comparison on this host: the imported ResNet-18 against the host's
    # onnxruntime, at 2 threads and at every core, rounds alternating.
    out=${2:?onnx needs an output folder}
    mkdir -p "$out"
    for t in 2 "$(nproc)"; do
        "$STAGE/bench_onnx" --threads "$t" --rounds "${ONNX_ROUNDS:-3}" || echo "bench_onnx failed (exit $?)"
    done 2>&1 | tee "$out/onnx.txt"
    ;;
session)
    # One lent call's worth: `onnx`, the AVX-512 GEMM's micro-benchmark off/on, then the
    # sweep (one round) with what is left of SESSION_LIMIT_S (default 560 s).
    out=${2:?session needs an output folder}
    mkdir -p "$out"
    start=$SECONDS
    bash "$0" onnx "$out"
    for v in off on off on; do
        echo "== SPORE_AVX512_GEMM=$v"
        SPORE_AVX512_GEMM=$v "$STAGE/gemm_micro" | sed -n 1,4p || true
    done > "$out/gemm_micro.txt" 2>&1
    left=$((${SESSION_LIMIT_S:-560} - (SECONDS - start)))
    echo "sweep: ${left} s left"
    SWEEP_LIMIT_S=$left bash "$0" sweep "$out" "${3:-2,4,8,16}" 1
    ;;
avx512)
    # The GEMM and the steps that rest on it with the 12x16 kernel off and on
    # (SPORE_AVX512_GEMM), alternated; a child that fails leaves an error record.
    out=${2:?avx512 needs an output folder}
    mkdir -p "$out"
    for v in off on; do
        echo "== SPORE_AVX512_GEMM=$v"
        SPORE_AVX512_GEMM=$v "$STAGE/gemm_micro" | sed -n 1,4p || true
    done > "$out/gemm_micro.txt" 2>&1
    export ANCHOR_WARMUP=1 ANCHOR_REPEATS=3 ANCHOR_REPEAT_S=0.2
    for t in 2 16; do
        for w in bert_train_b16 resnet18_train_b32 resnet50_train_b8 resnet50_infer_b1; do
            for v in off on; do
                SPORE_AVX512_GEMM=$v "$STAGE/bench" --child "$w:graph" --threads "$t" | grep '^RESULT' \
                    | sed "s/^RESULT /{\"avx512\":\"$v\",\"threads\":$t,\"rec\":/; s/\$/}/" \
                    || echo "{\"avx512\":\"$v\",\"threads\":$t,\"workload\":\"$w\",\"error\":\"no RESULT line\"}"
            done
        done
    done > "$out/avx512.jsonl" 2> "$out/avx512.err"
    ;;
*)
    echo "usage: bash bench/lent_host.sh stage | profile OUT | sweep OUT [THREADS] [ROUNDS] | avx512 OUT | onnx OUT | session OUT" \
        "| stage-mpi | distributed OUT [RANKS]" >&2
    exit 2
    ;;
esac
