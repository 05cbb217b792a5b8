//! The attributes the importer reads, per operator. An attribute outside this list would
//! change the result in a way the importer does not model, so it is an error, not
//! silently ignored.

/// Attribute names `op_type` may carry (empty for operators with none).
pub(super) fn known(op_type: &str) -> &'static [&'static str] {
    match op_type {
        "Conv" => &[
            "auto_pad",
            "pads",
            "strides",
            "dilations",
            "kernel_shape",
            "group",
        ],
        "ConvTranspose" => &[
            "auto_pad",
            "pads",
            "strides",
            "dilations",
            "kernel_shape",
            "group",
            "output_padding",
            "output_shape",
        ],
        "MaxPool" => &[
            "auto_pad",
            "pads",
            "strides",
            "dilations",
            "kernel_shape",
            "ceil_mode",
            "storage_order",
        ],
        "AveragePool" => &[
            "auto_pad",
            "pads",
            "strides",
            "dilations",
            "kernel_shape",
            "ceil_mode",
            "count_include_pad",
        ],
        "Gemm" => &["transA", "transB", "alpha", "beta"],
        "LeakyRelu" => &["alpha"],
        "Gelu" => &["approximate"],
        "Softmax" | "LogSoftmax" | "Flatten" | "Concat" | "Gather" | "OneHot" => &["axis"],
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" => {
            &["axes", "keepdims", "noop_with_empty_axes"]
        }
        // `spatial` (opsets 7 and 8) must be 1, the per-channel normalisation imported.
        "BatchNormalization" => &["epsilon", "momentum", "training_mode", "spatial"],
        // Before opset 11 the bounds are attributes.
        "Clip" => &["min", "max"],
        "LayerNormalization" => &["axis", "epsilon", "stash_type"],
        "Dropout" => &["ratio", "seed"],
        "Reshape" => &["allowzero"],
        "Transpose" => &["perm"],
        "Squeeze" | "Unsqueeze" => &["axes"],
        "Shape" => &["start", "end"],
        "Constant" => &[
            "value",
            "value_float",
            "value_floats",
            "value_int",
            "value_ints",
            "sparse_value",
            "value_string",
            "value_strings",
        ],
        "ConstantOfShape" => &["value"],
        "Cast" => &["to", "saturate"],
        "Slice" => &["starts", "ends", "axes"],
        "Split" => &["axis", "split", "num_outputs"],
        "Pad" => &["mode", "pads", "value"],
        // Elementwise operators, products and the rest have no attributes.
        _ => &[],
    }
}
