#!/usr/bin/env bash
# Regenerates crates/onnx/src/onnx_proto.rs from ONNX's schema, as shipped with the `onnx`
# Python package, with prost-build (needs protoc). The result is committed: building
# Spore needs neither protoc nor Python.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "needs protoc (apt-get install protobuf-compiler)" >&2; exit 1; }
proto=$(python3 -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'onnx.proto'))")
cargo run -q -p spore-onnx --example generate_proto -- "$proto" crates/onnx/src
echo "regenerated crates/onnx/src/onnx_proto.rs from $proto"
