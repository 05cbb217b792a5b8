#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests need on a fresh
# Debian machine, then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v dot >/dev/null 2>&1 || need_apt+=(graphviz)
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

# NumPy reads the dumped .npy files in the Dump tests (tests never need other Python).
if ! python3 -c "import numpy" >/dev/null 2>&1; then
    echo "installing numpy (needed by the Dump tests)"
    python3 -m pip install --quiet numpy
fi

# The benchmark report's host-speed lines (standard library only).
python3 -m doctest bench/report_host.py

# The download helper's TLS is an opt-in feature (off on the main job's path); the tests
# build it in, so that the https path compiles and its tests run.
cargo test --workspace --features spore-data/https
