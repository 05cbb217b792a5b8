//! The vectorised float32 functions through the elementwise kernels.

/// float32 `exp`, `erf` and sigmoid: contiguous inputs, strided views (gathered in blocks)
/// and single elements give the same bits, so PyNative and Graph mode agree.
#[test]
fn vectorised_unary_functions_equal_element_by_element_on_any_layout() {
    use spore_kernels::elementwise::{Num, UnaryFn, unary};
    use spore_kernels::{Buffer, layout::Layout};
    let (rows, cols) = (300, 37);
    let values: Vec<f32> = (0..rows * cols)
        .map(|i| (i as f32 * 0.731).sin() * 30.0 - 3.0)
        .collect();
    let src = Buffer::F32(values.clone());
    let transposed = Layout::contiguous(&[rows, cols]).permute(&[1, 0]);
    for f in [UnaryFn::Exp, UnaryFn::Erf, UnaryFn::Sigmoid] {
        let Buffer::F32(flat) = unary(f, &src, &Layout::contiguous(&[rows, cols])).unwrap() else {
            panic!("float32 in, float32 out")
        };
        let Buffer::F32(strided) = unary(f, &src, &transposed).unwrap() else {
            panic!("float32 in, float32 out")
        };
        for (i, y) in flat.iter().enumerate() {
            assert_eq!(y.to_bits(), values[i].unary(f).to_bits(), "{f:?} at {i}");
        }
        for (k, y) in strided.iter().enumerate() {
            let (c, r) = (k / rows, k % rows);
            assert_eq!(
                y.to_bits(),
                flat[r * cols + c].to_bits(),
                "{f:?} at ({r}, {c})"
            );
        }
    }
}
