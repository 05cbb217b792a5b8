"""ONNX fixtures for spore-onnx's tests, with onnxruntime's outputs as the reference.

    python3 fixtures.py OUT_DIR

Writes one folder per model (model.onnx, input_K.npy, output_K.npy) and manifest.json.
The models are built with onnx.helper, no PyTorch needed: one model per operator Spore
imports, LeNet, the MLP and ResNet-18 in both styles PyTorch's exporters produce (the
legacy one: Flatten, Gemm, GlobalAveragePool; the dynamo one: Reshape, MatMul + Add,
ReduceMean), a small Transformer encoder layer, a dynamic batch dimension, and weights
kept as external data.
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)
F = TensorProto.FLOAT


def w(name, *shape, scale=0.1):
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


class Net:
    """A graph under construction."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def fresh(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def add(self, op, inputs, **attrs):
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(op), **attrs))
        return out

    def param(self, *shape, scale=0.1):
        name = self.fresh("w")
        self.inits.append(w(name, *shape, scale=scale))
        return name

    def const(self, values):
        name = self.fresh("c")
        self.inits.append(ints(name, values))
        return name


def save(out, name, graph_nodes, inputs, outputs, inits, feeds, opset=17, external=False):
    graph = helper.make_graph(graph_nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    # Outputs declared without a type get the one shape inference finds.
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for o in model.graph.output:
        if not o.type.HasField("tensor_type") and o.name in known:
            o.type.CopyFrom(known[o.name].type)
    onnx.checker.check_model(model)
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    if external:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="weights.bin", size_threshold=0)
    else:
        onnx.save_model(model, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    results = sess.run(None, dict(zip(names, feeds)))
    entry = {"name": name, "model": path, "inputs": [], "outputs": [], "opset": opset}
    for k, x in enumerate(feeds):
        p = os.path.join(folder, f"input_{k}.npy")
        np.save(p, x)
        entry["inputs"].append(p)
    for k, y in enumerate(results):
        p = os.path.join(folder, f"output_{k}.npy")
        np.save(p, np.ascontiguousarray(y))
        entry["outputs"].append(p)
    return entry


def vi(name, shape, elem=F):
    if shape is None:
        # An output whose type and shape onnxruntime infers.
        return helper.make_empty_tensor_value_info(name)
    return helper.make_tensor_value_info(name, elem, shape)


def single_ops(out):
    """One model per operator (or attribute variant)."""
    x4 = (RNG.standard_normal((2, 3, 6, 6))).astype(np.float32)
    x2 = (RNG.standard_normal((2, 5))).astype(np.float32)
    pos = (RNG.random((2, 5)) + 0.5).astype(np.float32)
    entries = []

    def op(name, op_type, feeds, out_shape=None, extra_inits=(), extra_inputs=(), opset=17, **attrs):
        ins = [vi(f"x{k}", list(f.shape)) for k, f in enumerate(feeds)]
        node = helper.make_node(op_type, [f"x{k}" for k in range(len(feeds))] + list(extra_inputs), ["y"], name=name, **attrs)
        entries.append(save(out, name, [node], ins, [vi("y", None)], list(extra_inits), feeds, opset=opset))

    for t in ["Add", "Sub", "Mul", "Div"]:
        op(t, t, [x4, (RNG.standard_normal((1, 3, 1, 6)) + 2).astype(np.float32)])
    op("Pow", "Pow", [pos, np.array([1.5], np.float32)])
    for t, feed in [("Sqrt", pos), ("Log", pos), ("Exp", x2), ("Relu", x2), ("Sigmoid", x2),
                    ("Tanh", x2), ("Erf", x2), ("Neg", x2), ("Abs", x2), ("Identity", x2)]:
        op(t, t, [feed])
    op("LeakyRelu", "LeakyRelu", [x2], alpha=0.2)
    op("Gelu", "Gelu", [x2], opset=20)
    op("Gelu_tanh", "Gelu", [x2], opset=20, approximate="tanh")
    op("Softmax", "Softmax", [x2], axis=-1)
    op("LogSoftmax", "LogSoftmax", [x4], axis=1)
    op("MaxPool", "MaxPool", [x4], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    op("AveragePool", "AveragePool", [x4], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 0, 1, 0])
    op("AveragePool_include_pad", "AveragePool", [x4], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    op("AveragePool_same", "AveragePool", [x4], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    x7 = (RNG.standard_normal((1, 2, 7, 7))).astype(np.float32)
    op("MaxPool_ceil", "MaxPool", [x7], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    op("AveragePool_ceil", "AveragePool", [x7], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0], ceil_mode=1)
    op("AveragePool_ceil_include_pad", "AveragePool", [x7], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0],
       ceil_mode=1, count_include_pad=1)
    op("GlobalAveragePool", "GlobalAveragePool", [x4])
    op("ReduceMean_13", "ReduceMean", [x4], opset=13, axes=[2, 3], keepdims=1)
    op("ReduceMean_18", "ReduceMean", [x4], opset=18, extra_inits=[ints("ax", [1])], extra_inputs=["ax"], keepdims=0)
    op("ReduceSum", "ReduceSum", [x4], extra_inits=[ints("ax", [-1])], extra_inputs=["ax"], keepdims=1)
    op("ReduceMax", "ReduceMax", [x4], axes=[1, 3], keepdims=0)
    op("Flatten", "Flatten", [x4], axis=2)
    op("Reshape", "Reshape", [x4], extra_inits=[ints("s", [0, -1, 6])], extra_inputs=["s"])
    op("Transpose", "Transpose", [x4], perm=[0, 2, 3, 1])
    op("Squeeze", "Squeeze", [x4[:, :1]], extra_inits=[ints("ax", [1])], extra_inputs=["ax"])
    op("Unsqueeze", "Unsqueeze", [x2], extra_inits=[ints("ax", [0, 3])], extra_inputs=["ax"])
    op("Concat", "Concat", [x4, x4[:, :2]], axis=1)
    op("Gather", "Gather", [x4], extra_inits=[ints("i", [2, 0])], extra_inputs=["i"], axis=1)
    op("Cast", "Cast", [x2], to=TensorProto.INT32)
    op("Clip", "Clip", [x2], extra_inits=[numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
                                          numpy_helper.from_array(np.array(0.7, np.float32), "hi")], extra_inputs=["lo", "hi"])
    op("Equal", "Equal", [np.round(x2), np.zeros_like(x2)])
    op("Less", "Less", [x2, np.zeros_like(x2)])
    op("Greater", "Greater", [x2, np.zeros_like(x2)])
    op("Clip_opset10", "Clip", [x2], opset=10, min=-0.5, max=0.7)
    op("Dropout", "Dropout", [x2])
    # Gemm with every attribute, MatMul with batched operands.
    op("Gemm", "Gemm", [x2.T.copy()], extra_inits=[w("b", 4, 5), w("c", 4)], extra_inputs=["b", "c"],
       transA=1, transB=1, alpha=0.5, beta=2.0)
    op("MatMul", "MatMul", [x4], extra_inits=[w("m", 6, 4)], extra_inputs=["m"])
    op("Conv_same_dilated", "Conv", [x4], extra_inits=[w("k", 4, 3, 3, 3), w("kb", 4)], extra_inputs=["k", "kb"],
       pads=[2, 2, 2, 2], dilations=[2, 2])
    op("Conv_same", "Conv", [x4], extra_inits=[w("k", 4, 3, 3, 3)], extra_inputs=["k"], auto_pad="SAME_LOWER", strides=[2, 2])
    op("Conv_grouped_strided", "Conv", [x4], extra_inits=[w("k", 6, 1, 3, 3)], extra_inputs=["k"],
       group=3, strides=[2, 2], pads=[1, 0, 1, 0])
    op("BatchNormalization_opset7", "BatchNormalization", [x4], opset=7, spatial=1,
       extra_inits=[w("s", 3), w("b", 3), w("m", 3), numpy_helper.from_array((RNG.random(3) + 0.5).astype(np.float32), "v")],
       extra_inputs=["s", "b", "m", "v"])
    op("BatchNormalization", "BatchNormalization", [x4],
       extra_inits=[w("s", 3), w("b", 3), w("m", 3), numpy_helper.from_array((RNG.random(3) + 0.5).astype(np.float32), "v")],
       extra_inputs=["s", "b", "m", "v"], epsilon=1e-3)
    op("LayerNormalization", "LayerNormalization", [x4], extra_inits=[w("g", 6), w("b", 6)], extra_inputs=["g", "b"], axis=-1)
    # ConvTranspose: explicit pads with output_padding, groups and dilations; SAME_UPPER;
    # output_shape (the padding derived from it).
    op("ConvTranspose", "ConvTranspose", [x4], extra_inits=[w("k", 3, 2, 3, 2), w("kb", 2)], extra_inputs=["k", "kb"],
       strides=[2, 1], pads=[1, 0, 0, 1], output_padding=[1, 0], dilations=[1, 2])
    op("ConvTranspose_grouped", "ConvTranspose", [x4], extra_inits=[w("k", 3, 2, 3, 3)], extra_inputs=["k"],
       group=3, strides=[2, 2], pads=[1, 1, 1, 1])
    op("ConvTranspose_same_upper", "ConvTranspose", [x4], extra_inits=[w("k", 3, 4, 3, 3)], extra_inputs=["k"],
       strides=[2, 2], auto_pad="SAME_UPPER")
    op("ConvTranspose_output_shape", "ConvTranspose", [x4], extra_inits=[w("k", 3, 4, 4, 4)], extra_inputs=["k"],
       strides=[2, 2], output_shape=[12, 11])
    # Slice with negative steps, clamped ends and omitted axes; Slice before opset 10.
    op("Slice", "Slice", [x4], extra_inits=[ints("st", [-1, 1]), ints("en", [-9223372036854775807, 5]),
                                            ints("ax", [3, 1]), ints("sp", [-2, 1])],
       extra_inputs=["st", "en", "ax", "sp"])
    op("Slice_no_axes", "Slice", [x4], extra_inits=[ints("st", [1, 0, 2]), ints("en", [2, 100, -1])],
       extra_inputs=["st", "en"])
    op("Slice_opset9", "Slice", [x4], opset=9, starts=[0, 2], ends=[1, 4], axes=[0, 2])
    # Backwards from a start before the axis: ONNX clamps it to 0 (one element).
    op("Slice_reverse_clamped", "Slice", [x4], extra_inits=[ints("st", [-10]), ints("en", [-100]), ints("ax", [3]),
                                                            ints("sp", [-1])], extra_inputs=["st", "en", "ax", "sp"])
    # Pad in every mode, negative (cropping) amounts, and axes (opset 18).
    op("Pad_constant", "Pad", [x4], extra_inits=[ints("p", [0, 0, 1, -1, 0, 1, 2, 0]),
                                                 numpy_helper.from_array(np.array(0.5, np.float32), "v")],
       extra_inputs=["p", "v"])
    op("Pad_reflect", "Pad", [x4], extra_inits=[ints("p", [0, 0, 2, 1, 0, 0, 3, 5])], extra_inputs=["p"], mode="reflect")
    op("Pad_edge", "Pad", [x4], extra_inits=[ints("p", [0, 1, 2, -1, 0, 0, 1, 4])], extra_inputs=["p"], mode="edge")
    op("Pad_wrap", "Pad", [x4], opset=19, extra_inits=[ints("p", [0, 0, 1, 6, 0, 0, 2, 3])], extra_inputs=["p"], mode="wrap")
    op("Pad_axes", "Pad", [x4], opset=18, extra_inits=[ints("p", [2, 1, -1, 3]), ints("ax", [-1, 2])],
       extra_inputs=["p", "", "ax"], mode="reflect")
    # OneHot with negative indices and an axis; MatMul with 1-D operands.
    n = Net()
    k = n.add("Constant", [], value=numpy_helper.from_array(np.array([[1, -1, 3], [0, 2, -4]], np.int64)))
    y = n.add("OneHot", [k, "d", "vals"], axis=1)
    y = n.add("Add", [y, "x0"])
    entries.append(save(out, "OneHot", n.nodes, [vi("x0", [2, 4, 3])], [vi(y, None)],
                        [numpy_helper.from_array(np.array([4.0], np.float32), "d"),
                         numpy_helper.from_array(np.array([-0.5, 2.0], np.float32), "vals")],
                        [RNG.standard_normal((2, 4, 3)).astype(np.float32)]))
    op("MatMul_vector_left", "MatMul", [x2[0].copy()], extra_inits=[w("m", 2, 5, 3)], extra_inputs=["m"])
    op("MatMul_vector_right", "MatMul", [x4], extra_inits=[w("v", 6)], extra_inputs=["v"])
    # Split by sizes, into equal parts (opset 13) and by num_outputs (opset 18).
    for name, opset, extra, attrs, outs, feed in [
        ("Split_sizes", 13, [ints("s", [1, 4, 1])], {"axis": 3}, 3, x4),
        ("Split_equal", 13, [], {"axis": 1}, 3, x4),
        # 7 into 4 parts: 2, 2, 2 and a smaller last one.
        ("Split_num_outputs", 18, [], {"axis": -1, "num_outputs": 4}, 4, x7),
    ]:
        node = helper.make_node("Split", ["x0"] + [e.name for e in extra], [f"s{k}" for k in range(outs)], name=name, **attrs)
        entries.append(save(out, name, [node], [vi("x0", list(feed.shape))], [vi(f"s{k}", None) for k in range(outs)],
                            extra, [feed], opset=opset))
    # Where on a comparison; Shape -> ConstantOfShape; Constant.
    n = Net()
    c = n.add("Greater", ["x0", "x1"])
    y = n.add("Where", [c, "x0", "x1"])
    entries.append(save(out, "Where", n.nodes, [vi("x0", [2, 5]), vi("x1", [2, 5])], [vi(y, None)], [], [x2, pos]))
    n = Net()
    s = n.add("Shape", ["x0"])
    z = n.add("ConstantOfShape", [s], value=numpy_helper.from_array(np.array([0.25], np.float32)))
    k = n.add("Constant", [], value=numpy_helper.from_array(np.full((2, 5), 3.0, np.float32)))
    y = n.add("Add", [z, k])
    y = n.add("Add", [y, "x0"])
    entries.append(save(out, "Shape_ConstantOfShape_Constant", n.nodes, [vi("x0", [2, 5])], [vi(y, None)], [], [x2]))
    return entries


def conv_bn_relu(n, x, cin, cout, stride, relu=True, k=3, pad=1):
    y = n.add("Conv", [x, n.param(cout, cin, k, k, scale=(2.0 / (cin * k * k)) ** 0.5)],
              strides=[stride, stride], pads=[pad] * 4)
    y = n.add("BatchNormalization", [y, n.param(cout, scale=0.1), n.param(cout, scale=0.1), n.param(cout, scale=0.1),
                                     add_var(n, cout)])
    return n.add("Relu", [y]) if relu else y


def add_var(n, c):
    name = n.fresh("var")
    n.inits.append(numpy_helper.from_array((RNG.random(c) + 0.5).astype(np.float32), name))
    return name


def head(n, x, legacy, features, classes):
    if legacy:
        return n.add("Gemm", [x, n.param(classes, features), n.param(classes)], transB=1)
    y = n.add("MatMul", [x, n.param(features, classes)])
    return n.add("Add", [y, n.param(classes)])


def flatten(n, x, legacy, features):
    if legacy:
        return n.add("Flatten", [x], axis=1)
    return n.add("Reshape", [x, n.const([-1, features])])


def lenet(legacy):
    n = Net()
    y = n.add("Relu", [n.add("Conv", ["input", n.param(6, 1, 5, 5, scale=0.2)])])
    y = n.add("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = n.add("Relu", [n.add("Conv", [y, n.param(16, 6, 5, 5, scale=0.1)])])
    y = n.add("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = flatten(n, y, legacy, 400)
    y = n.add("Relu", [head(n, y, legacy, 400, 120)])
    y = n.add("Relu", [head(n, y, legacy, 120, 84)])
    return n, head(n, y, legacy, 84, 10)


def mlp(legacy):
    n = Net()
    y = flatten(n, "input", legacy, 784)
    y = n.add("Relu", [head(n, y, legacy, 784, 512)])
    y = n.add("Relu", [head(n, y, legacy, 512, 512)])
    return n, head(n, y, legacy, 512, 10)


def resnet18(legacy):
    n = Net()
    y = conv_bn_relu(n, "input", 3, 64, 1)
    cin = 64
    for stage, width in enumerate([64, 128, 256, 512]):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            out = conv_bn_relu(n, y, cin, width, stride)
            out = conv_bn_relu(n, out, width, width, 1, relu=False)
            short = y if stride == 1 and cin == width else conv_bn_relu(n, y, cin, width, stride, relu=False, k=1, pad=0)
            y = n.add("Relu", [n.add("Add", [out, short])])
            cin = width
    if legacy:
        y = n.add("Flatten", [n.add("GlobalAveragePool", [y])], axis=1)
    else:
        y = n.add("ReduceMean", [y, n.const([2, 3])], keepdims=0)
    return n, head(n, y, legacy, 512, 10)


def encoder(d=16, heads=2, seq=4, ff=32):
    """A Transformer encoder layer (post-norm), batch 2."""
    n = Net()
    x = "input"
    q = n.add("MatMul", [x, n.param(d, d)])
    k = n.add("MatMul", [x, n.param(d, d)])
    v = n.add("MatMul", [x, n.param(d, d)])
    shape = n.const([2, seq, heads, d // heads])
    split = lambda t: n.add("Transpose", [n.add("Reshape", [t, shape])], perm=[0, 2, 1, 3])
    q, k, v = split(q), split(k), split(v)
    kt = n.add("Transpose", [k], perm=[0, 1, 3, 2])
    scale = n.fresh("scale")
    n.inits.append(numpy_helper.from_array(np.array(np.sqrt(d // heads), np.float32), scale))
    s = n.add("Div", [n.add("MatMul", [q, kt]), scale])
    p = n.add("Softmax", [s], axis=-1)
    a = n.add("Transpose", [n.add("MatMul", [p, v])], perm=[0, 2, 1, 3])
    a = n.add("Reshape", [a, n.const([2, seq, d])])
    a = n.add("MatMul", [a, n.param(d, d)])
    h = n.add("LayerNormalization", [n.add("Add", [x, a]), n.param(d, scale=1.0), n.param(d)], axis=-1)
    f = n.add("Gelu", [n.add("Add", [n.add("MatMul", [h, n.param(d, ff)]), n.param(ff)])])
    f = n.add("Add", [n.add("MatMul", [f, n.param(ff, d)]), n.param(d)])
    return n, n.add("LayerNormalization", [n.add("Add", [h, f]), n.param(d, scale=1.0), n.param(d)], axis=-1)


def networks(out):
    entries = []
    for legacy in [True, False]:
        style = "legacy" if legacy else "dynamo"
        for name, build, shape in [("lenet", lenet, [1, 32, 32]), ("mlp", mlp, [1, 28, 28]), ("resnet18", resnet18, [3, 32, 32])]:
            n, y = build(legacy)
            batch = 2
            inp = vi("input", ["N"] + shape)  # a dynamic batch dimension
            x = RNG.standard_normal([batch] + shape).astype(np.float32)
            entries.append(save(out, f"{name}_{style}", n.nodes, [inp], [vi(y, None)], n.inits, [x],
                                opset=13 if legacy else 18, external=(name == "mlp" and legacy)))
    n, y = encoder()
    x = RNG.standard_normal([2, 4, 16]).astype(np.float32)
    entries.append(save(out, "transformer_encoder", n.nodes, [vi("input", [2, 4, 16])], [vi(y, None)], n.inits, [x], opset=20))
    return entries


def main(out):
    os.makedirs(out, exist_ok=True)
    entries = single_ops(os.path.join(out, "ops")) + networks(os.path.join(out, "nets"))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(entries, f, indent=1)
    print(f"{len(entries)} fixtures in {out}")


if __name__ == "__main__":
    main(sys.argv[1])
