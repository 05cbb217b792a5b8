//! Readers of outside bytes in core (`.npy`, Print files): inputs the fuzz targets found
//! or aim at, each an error rather than a panic or a huge allocation.

use spore_core::Tensor;
use spore_core::debug::{npy, print};

fn npy_with_shape(shape: &str) -> Vec<u8> {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&[0; 16]);
    out
}

#[test]
fn an_npy_shape_whose_size_overflows_is_an_error() {
    // 2^32 x 2^32 elements: the product overflows 64 bits (a panic before the fix).
    let err = npy::decode(&npy_with_shape("(4294967296, 4294967296)")).unwrap_err();
    assert!(err.to_string().contains("overflows"), "{err}");
    // 2^40 elements fit in 64 bits but not in the file: rejected before any allocation.
    let err = npy::decode(&npy_with_shape("(1099511627776,)")).unwrap_err();
    assert!(
        err.to_string()
            .contains("expected 4398046511104 data bytes"),
        "{err}"
    );
    // The four floats the file does hold.
    assert_eq!(
        npy::decode(&npy_with_shape("(2, 2)")).unwrap().shape(),
        &[2, 2]
    );
}

#[test]
fn print_file_lengths_beyond_the_file_are_errors() {
    let call = print::encode(&[print::PrintValue::Tensor(
        Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap(),
    )])
    .unwrap();
    let good = [print::MAGIC.to_vec(), call.clone()].concat();
    assert_eq!(print::parse_print_bytes(&good, "p.pb").unwrap().len(), 1);
    // The tensor's u64 length set to 2^64 - 1: `offset + length` overflowed before.
    let mut huge = good.clone();
    let length_at = print::MAGIC.len() + 4 + 1;
    huge[length_at..length_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = print::parse_print_bytes(&huge, "p.pb")
        .unwrap_err()
        .to_string();
    assert!(err.contains("p.pb") && err.contains("truncated"), "{err}");
    // A file cut inside a call's argument count was read as complete before.
    let cut = [good.clone(), vec![1, 0]].concat();
    let err = print::parse_print_bytes(&cut, "p.pb")
        .unwrap_err()
        .to_string();
    assert!(err.contains("truncated"), "{err}");
}
