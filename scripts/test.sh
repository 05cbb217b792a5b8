#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests need on a fresh
# Debian machine, then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
# Distributed training runs on Open MPI: mpirun for the multi-process tests, the headers
# and libclang for the `mpi` crate's build (bindgen).
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
# Code generation: the generated C is built with the host's cc and make, and for a
# Cortex-M4 with arm-none-eabi-gcc and newlib.
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v arm-none-eabi-gcc >/dev/null 2>&1 || need_apt+=(gcc-arm-none-eabi)
if command -v dpkg >/dev/null 2>&1; then
    dpkg -s libopenmpi-dev >/dev/null 2>&1 || need_apt+=(libopenmpi-dev)
    dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
    dpkg -s libnewlib-arm-none-eabi >/dev/null 2>&1 || need_apt+=(libnewlib-arm-none-eabi)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing ${need_apt[*]} (needed by the tests)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "the tests need: ${need_apt[*]} (e.g. sudo apt-get install ${need_apt[*]})" >&2
        exit 1
    fi
fi

# NumPy reads the dumped .npy files in the Dump tests.
if ! python3 -c "import numpy" >/dev/null 2>&1; then
    echo "installing numpy (needed by the Dump tests)"
    python3 -m pip install --quiet numpy
fi

# ml_dtypes reads the bfloat16 .npy files back (spore-core's half tests).
if ! python3 -c "import ml_dtypes" >/dev/null 2>&1; then
    echo "installing ml_dtypes (the bfloat16 reference)"
    python3 -m pip install --quiet ml_dtypes
fi

# onnx and onnxruntime make and check the ONNX fixtures (spore-onnx's tests).
if ! python3 -c "import onnx, onnxruntime" >/dev/null 2>&1; then
    echo "installing onnx and onnxruntime (the ONNX tests' reference)"
    python3 -m pip install --quiet onnx onnxruntime
fi

# TensorBoard's event reader checks the training summaries (spore-summary's tests).
if ! python3 -c "import tensorboard" >/dev/null 2>&1; then
    echo "installing tensorboard (its event reader checks the summary files)"
    python3 -m pip install --quiet tensorboard
fi

# The benchmark report's host-speed lines (standard library only).
python3 -m doctest bench/report_host.py

# The download helper's TLS and MPI are opt-in features (off on the main job's path); the
# tests build them in, so that the https path and the multi-process tests (which launch
# themselves through mpirun) run.
cargo test --workspace --features spore-data/https,spore-parallel/mpi,spore/mpi

# The kernels, operators and compiled graphs again with the vector instructions capped
# (`SPORE_MAX_ISA`, crates/kernels/src/isa.rs), so that the AVX2-only and plain paths are
# tested on an AVX-512 machine too.
for isa in avx2 baseline; do
    echo "tests with SPORE_MAX_ISA=$isa (a cap above what the CPU has changes nothing;"
    echo "isa::tests::the_cap_in_the_environment_is_the_level prints the level reached)"
    SPORE_MAX_ISA=$isa cargo test -p spore-kernels -p spore-core -p spore-compile
done
