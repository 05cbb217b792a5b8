//! Transforms: resize against values recorded from OpenCV (4.5.5, IPP off, as MindSpore
//! builds it), and the other vision and common ops on small hand-checked images.

use spore_core::{DType, Tensor};
use spore_data::prelude::*;
use spore_data::rng::Rng;

use crate::f64s;

/// The test image OpenCV's values were recorded on: pixel i = (37 i + 11) mod 256.
fn ramp(h: usize, w: usize, c: usize) -> Tensor {
    let v: Vec<u8> = (0..h * w * c)
        .map(|i| ((i * 37 + 11) % 256) as u8)
        .collect();
    Tensor::from_vec(v, &[h, w, c]).unwrap()
}

fn apply(op: impl Into<Transform>, x: Tensor) -> Tensor {
    op.into()
        .apply(vec![x], &mut Rng::new(1))
        .unwrap()
        .remove(0)
}

#[test]
fn resize_matches_opencv_bit_for_bit() {
    // (h, w, c, oh, ow), cv2 INTER_LINEAR output, cv2 INTER_NEAREST output,
    // and the first f32 output bits for the image divided by 7.
    type Case = (
        (usize, usize, usize, usize, usize),
        Vec<u8>,
        Vec<u8>,
        [u32; 6],
    );
    let cases: Vec<Case> = vec![
        (
            (5, 7, 1, 8, 3),
            vec![
                35, 122, 208, 37, 123, 209, 39, 125, 211, 41, 127, 213, 42, 129, 215, 44, 131, 217,
                46, 133, 219, 47, 134, 220,
            ],
            vec![
                11, 85, 159, 11, 85, 159, 14, 88, 162, 14, 88, 162, 17, 91, 165, 20, 94, 168, 20,
                94, 168, 23, 97, 171,
            ],
            [
                1084427313, 1099656631, 1106122850, 1084820528, 1099754935, 1106221154,
            ],
        ),
        (
            (4, 9, 3, 6, 5),
            vec![
                55, 92, 129, 204, 36, 73, 199, 236, 17, 143, 180, 217, 86, 124, 160, 120, 80, 117,
                191, 126, 61, 187, 224, 133, 130, 167, 204, 125, 111, 148, 180, 89, 100, 175, 212,
                44, 170, 207, 244, 113, 151, 188, 160, 94, 131, 163, 174, 83, 158, 195, 27, 153,
                190, 227, 97, 134, 171, 143, 78, 115, 147, 184, 67, 141, 178, 113, 137, 174, 211,
                106, 117, 154, 126, 112, 98, 134, 171, 54, 129, 166, 203, 124, 161, 198, 119, 105,
                142, 114, 151, 86,
            ],
            vec![
                11, 48, 85, 122, 159, 196, 88, 125, 162, 54, 91, 128, 20, 57, 94, 11, 48, 85, 122,
                159, 196, 88, 125, 162, 54, 91, 128, 20, 57, 94, 242, 23, 60, 97, 134, 171, 63,
                100, 137, 29, 66, 103, 251, 32, 69, 217, 254, 35, 72, 109, 146, 38, 75, 112, 4, 41,
                78, 226, 7, 44, 217, 254, 35, 72, 109, 146, 38, 75, 112, 4, 41, 78, 226, 7, 44,
                192, 229, 10, 47, 84, 121, 13, 50, 87, 235, 16, 53, 201, 238, 19,
            ],
            [
                1090339285, 1095971636, 1100210878, 1105798289, 1084587098, 1093095542,
            ],
        ),
        (
            (3, 3, 1, 7, 7),
            vec![
                11, 16, 32, 48, 64, 80, 85, 27, 32, 48, 64, 80, 96, 101, 74, 79, 96, 111, 127, 143,
                148, 122, 127, 143, 159, 175, 191, 196, 169, 159, 128, 97, 113, 128, 134, 217, 191,
                113, 34, 51, 66, 72, 233, 202, 108, 14, 30, 46, 51,
            ],
            vec![
                11, 11, 11, 48, 48, 85, 85, 11, 11, 11, 48, 48, 85, 85, 11, 11, 11, 48, 48, 85, 85,
                122, 122, 122, 159, 159, 196, 196, 122, 122, 122, 159, 159, 196, 196, 233, 233,
                233, 14, 14, 51, 51, 233, 233, 233, 14, 14, 51, 51,
            ],
            [
                1070146706, 1075111393, 1083371604, 1088122295, 1091696013, 1094071359,
            ],
        ),
    ];
    for ((h, w, c, oh, ow), linear, nearest, f32_bits) in cases {
        let img = ramp(h, w, c);
        let lin = apply(Resize::new(oh, ow), img.clone());
        assert_eq!(lin.shape(), &[oh, ow, c]);
        assert_eq!(
            lin.to_vec::<u8>().unwrap(),
            linear,
            "linear {h}x{w}x{c} -> {oh}x{ow}"
        );
        let nn = apply(
            Resize::new(oh, ow).interpolation(Inter::Nearest),
            img.clone(),
        );
        assert_eq!(
            nn.to_vec::<u8>().unwrap(),
            nearest,
            "nearest {h}x{w}x{c} -> {oh}x{ow}"
        );
        // OpenCV's reference input was the image divided by 7 in f32.
        let v: Vec<f32> = img
            .to_vec::<u8>()
            .unwrap()
            .iter()
            .map(|&p| p as f32 / 7.0)
            .collect();
        let f = Tensor::from_vec(v, &[h, w, c]).unwrap();
        let bits: Vec<u32> = apply(Resize::new(oh, ow), f).to_vec::<f32>().unwrap()[..6]
            .iter()
            .map(|x| x.to_bits())
            .collect();
        assert_eq!(bits, f32_bits, "float {h}x{w}x{c} -> {oh}x{ow}");
    }
    // A [H, W] image stays 2-D; the longer side is truncated like MindSpore 2.10's
    // (checked there: 4x5 -> 3x3, 40x50x3 -> 30x37x3).
    let flat = Tensor::from_vec(vec![0u8; 20], &[4, 5]).unwrap();
    assert_eq!(apply(Resize::new(2, 3), flat.clone()).shape(), &[2, 3]);
    assert_eq!(apply(Resize::shorter_side(3), flat).shape(), &[3, 3]);
    let big = Tensor::zeros(&[40, 50, 3], DType::U8).unwrap();
    assert_eq!(apply(Resize::shorter_side(30), big).shape(), &[30, 37, 3]);
    let err = Resize::new(2, 2)
        .apply(
            vec![Tensor::from_vec(vec![1i32; 4], &[2, 2]).unwrap()],
            &mut Rng::new(0),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("UInt8 or Float32") && err.contains("Int32"),
        "{err}"
    );
}

#[test]
fn rescale_normalize_hwc2chw_typecast_onehot() {
    let img = Tensor::from_vec(vec![0u8, 255, 51, 102, 153, 204], &[1, 2, 3]).unwrap();
    let r = apply(Rescale::new(1.0 / 255.0, -0.5), img.clone());
    assert_eq!(r.dtype(), DType::F32);
    for (got, want) in f64s(&r).iter().zip([-0.5, 0.5, -0.3, -0.1, 0.1, 0.3]) {
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
    let n = apply(
        Normalize::new(&[0.0, 255.0, 51.0], &[1.0, 255.0, 51.0]),
        img.clone(),
    );
    assert_eq!(
        f64s(&n),
        vec![0.0, 0.0, 0.0, 102.0, -(102.0 / 255.0) as f32 as f64, 3.0]
    );
    let chw = apply(HWC2CHW, img.clone());
    assert_eq!(chw.shape(), &[3, 1, 2]);
    assert_eq!(chw.to_vec::<u8>().unwrap(), vec![0, 102, 255, 153, 51, 204]);
    let nc = apply(Normalize::new(&[1.0], &[2.0]).chw(), chw);
    assert_eq!(f64s(&nc)[..2], [-0.5, 50.5]);
    let err = Normalize::new(&[1.0, 2.0], &[1.0, 1.0])
        .apply(vec![img.clone()], &mut Rng::new(0))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("2 values but the image has 3 channels"),
        "{err}"
    );
    // HWC2CHW leaves a [H, W] image alone and rejects a 1-D tensor.
    let hw = Tensor::from_vec(vec![1u8, 2], &[1, 2]).unwrap();
    assert_eq!(apply(HWC2CHW, hw).shape(), &[1, 2]);
    let bytes = Tensor::from_vec(vec![1u8, 2], &[2]).unwrap();
    let err = HWC2CHW
        .apply(vec![bytes], &mut Rng::new(0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("Decode them first"), "{err}");

    let f = Tensor::from_vec(vec![2.7f32, -1.5, 300.0], &[3]).unwrap();
    assert_eq!(
        apply(TypeCast::new(DType::I32), f.clone())
            .to_vec::<i32>()
            .unwrap(),
        vec![2, -1, 300]
    );
    assert_eq!(
        apply(TypeCast::new(DType::U8), f).to_vec::<u8>().unwrap(),
        vec![2, 0, 255]
    );
    let big = Tensor::from_vec(vec![(1i64 << 53) + 1], &[1]).unwrap();
    assert_eq!(
        apply(
            TypeCast::new(DType::I64),
            apply(TypeCast::new(DType::I32), big.clone())
        )
        .to_vec::<i64>()
        .unwrap(),
        vec![1]
    );
    let labels = Tensor::from_vec(vec![2i32, 0], &[2]).unwrap();
    let hot = apply(OneHot::new(3), labels.clone());
    assert_eq!(
        (hot.shape(), hot.to_vec::<i32>().unwrap()),
        (&[2, 3][..], vec![0, 0, 1, 1, 0, 0])
    );
    let smooth = apply(OneHot::new(4).smoothing_rate(0.4), labels.clone());
    for (got, want) in smooth.to_vec::<f32>().unwrap()[..4]
        .iter()
        .zip([0.1, 0.1, 0.7, 0.1])
    {
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
    let err = OneHot::new(2)
        .apply(vec![labels], &mut Rng::new(0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("label 2 is outside 0..2"), "{err}");
    // Compose chains and names its parts.
    let c = Compose::new(vec![
        TypeCast::new(DType::F32).into(),
        Rescale::new(2.0, 1.0).into(),
    ]);
    assert_eq!(c.name(), "Compose[TypeCast, Rescale]");
    let x = Tensor::from_vec(vec![3u8], &[1, 1]).unwrap();
    assert_eq!(f64s(&apply(c, x)), vec![7.0]);
}

#[test]
fn crops_and_flips() {
    let img = Tensor::from_vec((0..20u8).collect(), &[4, 5, 1]).unwrap();
    // CenterCrop offset floor((H - h) / 2): rows 1..3, cols 1..3 of 4x5.
    let c = apply(CenterCrop::new(2, 2), img.clone());
    assert_eq!(c.to_vec::<u8>().unwrap(), vec![6, 7, 11, 12]);
    let c = apply(CenterCrop::new(3, 2), img.clone());
    assert_eq!(c.to_vec::<u8>().unwrap(), vec![1, 2, 6, 7, 11, 12]);
    // Larger than the image: zero padding, the odd pixel on top/left.
    let p = apply(CenterCrop::new(5, 5), img.clone());
    assert_eq!(p.shape(), &[5, 5, 1]);
    assert_eq!(
        p.to_vec::<u8>().unwrap()[..10],
        [0, 0, 0, 0, 0, 0, 1, 2, 3, 4]
    );

    // RandomCrop with padding: every output is a window of the padded image, the
    // window is a function of the generator, and all offsets show up.
    let mut offsets = std::collections::HashSet::new();
    for seed in 0..200 {
        let op = RandomCrop::new(4, 5).padding(2).fill_value(99.0);
        let out = op
            .apply(vec![img.clone()], &mut Rng::new(seed))
            .unwrap()
            .remove(0);
        let again = op
            .apply(vec![img.clone()], &mut Rng::new(seed))
            .unwrap()
            .remove(0);
        assert_eq!(out.to_vec::<u8>().unwrap(), again.to_vec::<u8>().unwrap());
        let v = out.to_vec::<u8>().unwrap();
        // Find the window: the padded image is 8x9 with the original at (2, 2).
        let found = (0..=4)
            .flat_map(|y| (0..=4).map(move |x| (y, x)))
            .find(|&(y, x)| {
                (0..4).all(|r| {
                    (0..5).all(|c| {
                        let (py, px) = (y + r, x + c);
                        let want = if (2..6).contains(&py) && (2..7).contains(&px) {
                            ((py - 2) * 5 + px - 2) as u8
                        } else {
                            99
                        };
                        v[r * 5 + c] == want
                    })
                })
            });
        offsets.insert(found.expect("output is not a window of the padded image"));
    }
    assert_eq!(offsets.len(), 25, "every offset of the 5x5 range appears");
    let edge = RandomCrop::new(6, 5)
        .pad_if_needed(true)
        .padding_mode(Border::Edge);
    let e = edge
        .apply(vec![img.clone()], &mut Rng::new(3))
        .unwrap()
        .remove(0);
    assert_eq!(e.shape(), &[6, 5, 1]);
    let err = RandomCrop::new(9, 9)
        .apply(vec![img.clone()], &mut Rng::new(0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("larger than"), "{err}");
    // Two columns get the same window.
    let pair = RandomCrop::new(2, 2)
        .apply(vec![img.clone(), img.clone()], &mut Rng::new(9))
        .unwrap();
    assert_eq!(
        pair[0].to_vec::<u8>().unwrap(),
        pair[1].to_vec::<u8>().unwrap()
    );

    let always = apply(RandomHorizontalFlip::new(1.0), img.clone());
    assert_eq!(always.to_vec::<u8>().unwrap()[..5], [4, 3, 2, 1, 0]);
    let never = apply(RandomHorizontalFlip::new(0.0), img.clone());
    assert_eq!(never.to_vec::<u8>().unwrap(), img.to_vec::<u8>().unwrap());
    let flips = (0..400)
        .filter(|&s| {
            let out = RandomHorizontalFlip::default()
                .apply(vec![img.clone()], &mut Rng::new(s))
                .unwrap();
            out[0].to_vec::<u8>().unwrap()[0] == 4
        })
        .count();
    assert!(
        (150..250).contains(&flips),
        "{flips} flips in 400 at p = 0.5"
    );
}

#[test]
fn decode_png_and_jpeg() {
    let rgb: Vec<u8> = (0..4 * 3 * 3).map(|i| (i * 7) as u8).collect();
    let png = crate::sources::encode_png(&rgb, 4, 3);
    let bytes = Tensor::from_vec(png.clone(), &[png.len()]).unwrap();
    let img = apply(Decode, bytes);
    assert_eq!(img.shape(), &[3, 4, 3]);
    assert_eq!(img.to_vec::<u8>().unwrap(), rgb);
    let jpg = crate::sources::encode_jpeg(&[128; 8 * 8 * 3], 8, 8);
    let img = apply(Decode, Tensor::from_vec(jpg.clone(), &[jpg.len()]).unwrap());
    assert_eq!(img.shape(), &[8, 8, 3]);
    assert!(
        img.to_vec::<u8>()
            .unwrap()
            .iter()
            .all(|&p| p.abs_diff(128) <= 2)
    );
    let junk = Tensor::from_vec(vec![1u8, 2, 3], &[3]).unwrap();
    let err = Decode
        .apply(vec![junk], &mut Rng::new(0))
        .unwrap_err()
        .to_string();
    assert!(err.contains("Decode: cannot decode"), "{err}");
}

/// A 70-byte PNG whose header declares 100000 x 100000 pixels (30 GB of RGB): refused by
/// the decoder's memory limit before anything that size is allocated.
#[test]
fn an_image_declaring_a_huge_size_is_refused_before_decoding() {
    let mut png = std::io::Cursor::new(Vec::new());
    image::RgbImage::new(1, 1)
        .write_to(&mut png, image::ImageFormat::Png)
        .unwrap();
    let mut bytes = png.into_inner();
    // IHDR is the first chunk: 8 signature bytes, length, "IHDR", width, height, ..., CRC.
    assert_eq!(&bytes[12..16], b"IHDR");
    bytes[16..20].copy_from_slice(&100_000u32.to_be_bytes());
    bytes[20..24].copy_from_slice(&100_000u32.to_be_bytes());
    let mut crc = flate2::Crc::new();
    crc.update(&bytes[12..29]);
    bytes[29..33].copy_from_slice(&crc.sum().to_be_bytes());
    let err = spore_data::transforms::vision::decode_bytes(&bytes)
        .unwrap_err()
        .to_string();
    assert!(err.contains("Decode: cannot decode the image"), "{err}");
    assert!(err.to_lowercase().contains("limit"), "{err}");
}
