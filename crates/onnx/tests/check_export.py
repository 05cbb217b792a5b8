"""Checks a model Spore exported and runs it with onnxruntime.

    python3 check_export.py MODEL INPUT.npy OUTPUT.npy

onnx.checker (with full shape inference) must accept the model; the outputs of
onnxruntime on the input are saved for the test to compare with Spore's.
"""
import sys

import numpy as np
import onnx
import onnxruntime as ort


def main(model_path, input_path, output_path):
    model = onnx.load(model_path)
    onnx.checker.check_model(model, full_check=True)
    opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]
    assert opset >= 17, f"opset {opset}"
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    x = np.load(input_path)
    outputs = sess.run(None, {sess.get_inputs()[0].name: x})
    # The first output at OUTPUT.npy, any others (a training graph's updated moving
    # statistics) at OUTPUT_1.npy, OUTPUT_2.npy, ...
    np.save(output_path, outputs[0])
    for k, y in enumerate(outputs[1:], start=1):
        np.save(output_path[: -len(".npy")] + f"_{k}.npy", y)
    print(len(model.graph.node), "nodes, opset", opset)


if __name__ == "__main__":
    main(*sys.argv[1:4])
