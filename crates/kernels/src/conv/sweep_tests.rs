//! A randomised sweep over convolution geometries (strides, dilations, groups, paddings,
//! odd sizes, batch 1 to 64, channels 1 to 512): every path that applies to a geometry
//! runs its pass (forward, input gradient, filter gradient) and is compared with a naive
//! f64 loop. Draws are biased towards the conditions of each specialised path, and the
//! sweep fails unless every path ran at least once (where Spore's GEMM runs).

use super::geometry::ConvGeometry;
use super::plan::{ConvPath, Pass, applicable};
use super::{filter_gradient_on, forward_on, input_gradient_on};

/// xorshift64*, seeded: the sweep is the same on every run.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
    fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[(self.next() % options.len() as u64) as usize]
    }
    pub(super) fn values(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect()
    }
}

/// A geometry before it is checked: batch, channels in and out, image sides, filter
/// sides, stride, dilation, pads (top, bottom, left, right), groups.
struct Draft {
    n: usize,
    c: usize,
    o: usize,
    h: usize,
    w: usize,
    k: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    pads: [usize; 4],
    groups: usize,
}

/// Winograd and the ResNet-like padded paths: 3x3, stride 1, "same"; sides of 7 and
/// 14 (ResNet-50's) end in partial Winograd tiles.
fn resnet_like(rng: &mut Rng) -> Draft {
    let side = rng.pick(&[4, 7, 8, 12, 14, 16]);
    Draft {
        n: rng.range(1, 4),
        c: rng.pick(&[16, 24, 32, 64]),
        o: rng.pick(&[16, 20, 32]),
        h: side,
        w: side,
        k: [3, 3],
        stride: [1, 1],
        dilation: [1, 1],
        pads: [1; 4],
        groups: 1,
    }
}

/// Small unpadded images (LeNet-like): the gathered, wide and scatter-add paths.
fn lenet_like(rng: &mut Rng) -> Draft {
    let side = rng.range(5, 16);
    Draft {
        n: rng.range(1, 8),
        c: rng.pick(&[1, 3, 6, 8]),
        o: rng.pick(&[4, 6, 16, 24]),
        h: side,
        w: side + rng.range(0, 3),
        k: [rng.range(1, 5), rng.range(1, 5)],
        stride: [1, 1],
        dilation: [1, rng.range(1, 2)],
        pads: [0; 4],
        groups: 1,
    }
}

/// Padded layers with many positions: the padded gathered weight gradient.
fn many_positions(rng: &mut Rng) -> Draft {
    let side = rng.pick(&[16, 18]);
    Draft {
        n: rng.range(1, 2),
        c: 16,
        o: 16,
        h: side,
        w: side,
        k: [3, 3],
        stride: [rng.range(1, 2), 1],
        dilation: [1, 1],
        pads: [1, 1, rng.range(0, 2), 1],
        groups: 1,
    }
}

/// Wide layers (more than 18 outputs per group): the panel paths.
fn wide_layers(rng: &mut Rng) -> Draft {
    let side = rng.range(3, 9);
    let og = rng.pick(&[20, 32, 48]);
    let groups = rng.pick(&[1, 2]);
    Draft {
        n: rng.range(1, 5),
        c: 20 * groups,
        o: og * groups,
        h: side,
        w: side + 1,
        k: [rng.range(1, 3), rng.range(1, 3)],
        stride: [rng.range(1, 2), rng.range(1, 2)],
        dilation: [1, rng.range(1, 2)],
        pads: [
            rng.range(0, 2),
            rng.range(0, 1),
            rng.range(0, 2),
            rng.range(0, 1),
        ],
        groups,
    }
}

/// Many channels, few positions (deep layers), up to 512 channels.
fn deep_layers(rng: &mut Rng) -> Draft {
    Draft {
        n: rng.range(1, 3),
        c: rng.pick(&[64, 128, 256, 512]),
        o: rng.pick(&[8, 24, 64]),
        h: 2,
        w: 3,
        k: [rng.range(1, 2), rng.range(1, 2)],
        stride: [1, 1],
        dilation: [1, 1],
        pads: [rng.range(0, 1); 4],
        groups: 1,
    }
}

/// Anything: odd sizes, strides up to 3, dilation, groups, uneven padding, large batches.
fn anything(rng: &mut Rng) -> Draft {
    let groups = rng.pick(&[1, 1, 2, 3]);
    Draft {
        n: rng.pick(&[1, 2, 7, 33, 64]),
        c: groups * rng.range(1, 5),
        o: groups * rng.range(1, 7),
        h: rng.range(1, 11),
        w: rng.range(1, 11),
        k: [rng.range(1, 4), rng.range(1, 4)],
        stride: [rng.range(1, 3), rng.range(1, 3)],
        dilation: [rng.range(1, 2), rng.range(1, 2)],
        pads: [
            rng.range(0, 2),
            rng.range(0, 2),
            rng.range(0, 2),
            rng.range(0, 2),
        ],
        groups,
    }
}

/// One draw, shaped after one of the specialised paths' conditions (or none); `None` when
/// the draft is not a valid convolution or its naive loop would be too long.
pub(super) fn draw(rng: &mut Rng) -> Option<ConvGeometry> {
    let shapes: [fn(&mut Rng) -> Draft; 6] = [
        resnet_like,
        lenet_like,
        many_positions,
        wide_layers,
        deep_layers,
        anything,
    ];
    let d = shapes[rng.range(0, 5)](rng);
    if !d.c.is_multiple_of(d.groups) || !d.o.is_multiple_of(d.groups) {
        return None;
    }
    let reach = |s: usize| d.dilation[s] * (d.k[s] - 1) + 1;
    if d.h + d.pads[0] + d.pads[1] < reach(0) || d.w + d.pads[2] + d.pads[3] < reach(1) {
        return None;
    }
    let g = ConvGeometry::new(
        [d.n, d.c, d.h, d.w],
        [d.o, d.c / d.groups, d.k[0], d.k[1]],
        d.stride,
        d.dilation,
        d.pads,
        d.groups,
    );
    // Bound the naive loop's work (multiply-adds per pass).
    let work = g.n * g.o * g.ohw() * g.ckk();
    (work <= 3_000_000).then_some(g)
}

/// The three passes in f64, naively: y, dx, dw, and each output's scale (the sum of its
/// terms' magnitudes).
pub(super) struct Reference {
    pub(super) y: (Vec<f64>, Vec<f64>),
    pub(super) dx: (Vec<f64>, Vec<f64>),
    pub(super) dw: (Vec<f64>, Vec<f64>),
}

pub(super) fn reference(g: &ConvGeometry, x: &[f32], w: &[f32], dy: &[f32]) -> Reference {
    let (cg, og) = (g.c / g.groups, g.o / g.groups);
    let zeros = |len: usize| (vec![0.0; len], vec![0.0; len]);
    let (mut y, mut dx, mut dw) = (
        zeros(g.n * g.o * g.ohw()),
        zeros(g.n * g.c * g.h * g.w),
        zeros(w.len()),
    );
    for s in 0..g.n {
        for oc in 0..g.o {
            let group = oc / og;
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let yi = ((s * g.o + oc) * g.oh + oy) * g.ow + ox;
                    for ci in 0..cg {
                        let c = group * cg + ci;
                        for i in 0..g.kh {
                            let r = (oy * g.stride[0] + i * g.dilation[0]) as isize
                                - g.pads[0] as isize;
                            if r < 0 || r >= g.h as isize {
                                continue;
                            }
                            for j in 0..g.kw {
                                let q = (ox * g.stride[1] + j * g.dilation[1]) as isize
                                    - g.pads[2] as isize;
                                if q < 0 || q >= g.w as isize {
                                    continue;
                                }
                                let xi = ((s * g.c + c) * g.h + r as usize) * g.w + q as usize;
                                let wi = ((oc * cg + ci) * g.kh + i) * g.kw + j;
                                let (xv, wv, dv) = (x[xi] as f64, w[wi] as f64, dy[yi] as f64);
                                y.0[yi] += xv * wv;
                                y.1[yi] += (xv * wv).abs();
                                dx.0[xi] += dv * wv;
                                dx.1[xi] += (dv * wv).abs();
                                dw.0[wi] += dv * xv;
                                dw.1[wi] += (dv * xv).abs();
                            }
                        }
                    }
                }
            }
        }
    }
    Reference { y, dx, dw }
}

/// Checks `got` against `want` within `tol` of each output's scale.
fn check(got: &[f32], (want, scale): &(Vec<f64>, Vec<f64>), what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((&a, &b), &s)) in got.iter().zip(want).zip(scale).enumerate() {
        let err = (a as f64 - b).abs();
        assert!(
            err <= 2e-5 * s + 1e-6,
            "{what}: element {i}: {a} against {b} (terms' magnitude {s})"
        );
    }
}

/// Runs every applicable path of `count` random geometries against the naive loops;
/// returns how often each (path, pass) ran.
fn sweep(seed: u64, count: usize) -> std::collections::HashMap<(ConvPath, Pass), usize> {
    let mut rng = Rng(seed);
    let mut ran: std::collections::HashMap<(ConvPath, Pass), usize> = Default::default();
    let mut cases = 0;
    while cases < count {
        let Some(g) = draw(&mut rng) else { continue };
        cases += 1;
        let x = rng.values(g.n * g.c * g.h * g.w);
        let w = rng.values(g.o * g.ckk());
        let dy = rng.values(g.n * g.o * g.ohw());
        let want = reference(&g, &x, &w, &dy);
        for pass in [Pass::Forward, Pass::InputGradient, Pass::FilterGradient] {
            for path in applicable(&g, pass, true) {
                *ran.entry((path, pass)).or_default() += 1;
                let what = format!("{path:?} {pass:?} of {g:?}");
                match pass {
                    Pass::Forward => {
                        let (y, relu_applied) = forward_on(path, &x, &w, &g, false);
                        assert!(!relu_applied, "{what}");
                        check(&y, &want.y, &what);
                    }
                    Pass::InputGradient => {
                        check(&input_gradient_on(path, &dy, &w, &g), &want.dx, &what)
                    }
                    Pass::FilterGradient => {
                        check(&filter_gradient_on(path, &dy, &x, &g), &want.dw, &what)
                    }
                }
            }
        }
    }
    ran
}

#[test]
fn every_path_matches_naive_f64_on_random_geometries() {
    let ran = sweep(0x5EED_C0DE_2026_1126, 220);
    let mut counts: Vec<_> = ran
        .iter()
        .map(|((p, s), n)| format!("{p:?}/{s:?}: {n}"))
        .collect();
    counts.sort();
    eprintln!("220 geometries; paths run: {}", counts.join(", "));
    let every = [
        (ConvPath::Winograd, Pass::Forward),
        (ConvPath::Winograd, Pass::FilterGradient),
        (ConvPath::Implicit, Pass::Forward),
        (ConvPath::Implicit, Pass::FilterGradient),
        (ConvPath::PaddedGathered, Pass::FilterGradient),
        (ConvPath::Wide, Pass::Forward),
        (ConvPath::Wide, Pass::FilterGradient),
        (ConvPath::Panels, Pass::Forward),
        (ConvPath::Panels, Pass::FilterGradient),
        (ConvPath::AsForward, Pass::InputGradient),
        (ConvPath::ScatterAdd, Pass::InputGradient),
        (ConvPath::PaddedScatterAdd, Pass::InputGradient),
        (ConvPath::Im2colPackedFilters, Pass::InputGradient),
        (ConvPath::Im2col, Pass::Forward),
        (ConvPath::Im2col, Pass::InputGradient),
        (ConvPath::Im2col, Pass::FilterGradient),
    ];
    if crate::sgemm::available() && super::plan::winograd_enabled() {
        let missing: Vec<_> = every.iter().filter(|k| !ran.contains_key(k)).collect();
        assert!(missing.is_empty(), "the sweep never ran {missing:?}");
    } else {
        eprintln!(
            "NOTE: Spore's GEMM (AVX2 and FMA) or Winograd is off here: only the paths that \
             apply on this machine were checked"
        );
    }
}

/// On 16 threads a batch of 1 to 11 images, one block per thread, leaves threads idle, so
/// the products of `Panels` and `Im2colPackedFilters` are split among the threads instead
/// where they are large enough (`batch::split_products_pay`): the same sweep on such a
/// pool, then geometries whose products are surely split, every applicable path each.
#[test]
fn paths_split_among_more_threads_than_images_match_naive_f64() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(16)
        .build()
        .expect("a 16-thread pool");
    let ran = pool.install(|| {
        assert!(!super::batch::batch_split_pays(8));
        let ran = sweep(0x16_7412_EAD5, 80);
        // A "same" 3x3 layer (Panels forward and filter gradient: 64 x 256 x 576 per
        // image, 3 images per product), a strided 1x1 one (the packed-filter input
        // gradient: 64 x 245 x 256, 5 images per product), and a layer of one image per
        // product, so that its filter gradient adds the later images' products into dW.
        let large = [
            ConvGeometry::new([3, 64, 16, 16], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1),
            ConvGeometry::new([5, 64, 14, 14], [256, 64, 1, 1], [2, 2], [1, 1], [0; 4], 1),
            ConvGeometry::new([3, 16, 24, 24], [32, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        ];
        let mut rng = Rng(7);
        for g in &large {
            assert!(super::batch::split_products_pay(
                g.n,
                g.og() * g.ohw() * g.ckk()
            ));
            let x = rng.values(g.n * g.c * g.h * g.w);
            let w = rng.values(g.o * g.ckk());
            let dy = rng.values(g.n * g.o * g.ohw());
            let want = reference(g, &x, &w, &dy);
            for path in applicable(g, Pass::Forward, true) {
                check(
                    &forward_on(path, &x, &w, g, false).0,
                    &want.y,
                    &format!("{path:?} forward of {g:?}"),
                );
            }
            for path in applicable(g, Pass::InputGradient, true) {
                check(
                    &input_gradient_on(path, &dy, &w, g),
                    &want.dx,
                    &format!("{path:?} input gradient of {g:?}"),
                );
            }
            for path in applicable(g, Pass::FilterGradient, true) {
                check(
                    &filter_gradient_on(path, &dy, &x, g),
                    &want.dw,
                    &format!("{path:?} filter gradient of {g:?}"),
                );
            }
        }
        ran
    });
    if crate::sgemm::available() {
        for key in [
            (ConvPath::Panels, Pass::Forward),
            (ConvPath::Panels, Pass::FilterGradient),
            (ConvPath::Im2colPackedFilters, Pass::InputGradient),
        ] {
            assert!(
                ran.contains_key(&key),
                "the 16-thread sweep never ran {key:?}"
            );
        }
    }
}

/// `SPORE_CONV_PATH` aside, [`super::plan::choose`] takes the first applicable path that
/// pays (packed filters where they are reused, Winograd from its minimum of tiles), and
/// `Im2col` applies to everything.
#[test]
fn im2col_applies_everywhere_and_choose_takes_the_first_path() {
    let mut rng = Rng(42);
    let mut seen = 0;
    while seen < 100 {
        let Some(g) = draw(&mut rng) else { continue };
        seen += 1;
        for pass in [Pass::Forward, Pass::InputGradient, Pass::FilterGradient] {
            let paths = applicable(&g, pass, true);
            assert_eq!(paths.last(), Some(&ConvPath::Im2col));
            assert_eq!(applicable(&g, pass, false).as_slice(), [ConvPath::Im2col]);
            if std::env::var_os("SPORE_CONV_PATH").is_none() {
                let chosen = super::plan::choose(&g, pass, true);
                let packs = super::plan::packs_filters(&g);
                let (th, tw) = (g.h.div_ceil(4), g.w.div_ceil(4));
                // Enough tiles, and at least half of their outputs inside the image.
                let winograd_pays = g.n * th * tw >= super::plan::WINOGRAD_MIN_TILES
                    && 2 * g.h * g.w >= 16 * th * tw;
                let first = paths
                    .iter()
                    .find(|p| match p {
                        ConvPath::Im2colPackedFilters => packs,
                        ConvPath::Winograd => winograd_pays,
                        _ => true,
                    })
                    .copied();
                assert_eq!(Some(chosen), first, "{pass:?} of {g:?}");
            }
        }
    }
}

/// The input gradient of 1x1 layers (ResNet-50's), where `AsForward` packs `Wᵀ` straight
/// from `W`, with and without groups, equals the naive f64 loop.
#[test]
fn one_by_one_input_gradients_as_forward_match_naive_f64() {
    let geometries = [
        ConvGeometry::new([2, 32, 9, 9], [128, 32, 1, 1], [1, 1], [1, 1], [0; 4], 1),
        ConvGeometry::new([2, 48, 9, 9], [256, 24, 1, 1], [1, 1], [1, 1], [0; 4], 2),
        ConvGeometry::new([1, 24, 12, 12], [96, 24, 1, 1], [1, 1], [1, 1], [0; 4], 1),
    ];
    let mut rng = Rng(0x1B1);
    for g in geometries {
        let paths = applicable(&g, Pass::InputGradient, true);
        if !paths.contains(&ConvPath::AsForward) {
            eprintln!("NOTE: AsForward does not apply to {g:?} on this machine; not checked");
            continue;
        }
        // Images too large for the gathered path: the transposed pass packs panels.
        let gt = super::plan::transposed_geometry(&g).expect("stride 1");
        assert_eq!(
            super::plan::choose(&gt, Pass::Forward, true),
            ConvPath::Panels,
            "{gt:?}"
        );
        let x = rng.values(g.n * g.c * g.h * g.w);
        let w = rng.values(g.o * g.ckk());
        let dy = rng.values(g.n * g.o * g.ohw());
        let want = reference(&g, &x, &w, &dy);
        let dx = input_gradient_on(ConvPath::AsForward, &dy, &w, &g);
        check(&dx, &want.dx, &format!("AsForward input gradient of {g:?}"));
    }
}

/// Pointwise layers, whose panels are packed as one run across output rows (and broken
/// only at an image's end), on the `Panels` path in all three passes: planes of 49, 81,
/// 900 and 56x56 positions (panels straddling rows and images, several images per
/// product, grouped),
/// a padded 1x1 layer (flat over the padded plane) and a strided one (not flat), against
/// the naive f64 loops.
#[test]
fn pointwise_panels_across_rows_and_images_match_naive_f64() {
    let geometries = [
        ConvGeometry::new([5, 40, 7, 7], [24, 40, 1, 1], [1, 1], [1, 1], [0; 4], 1),
        ConvGeometry::new([3, 16, 9, 9], [36, 16, 1, 1], [1, 1], [1, 1], [0; 4], 1),
        ConvGeometry::new([2, 8, 56, 56], [20, 8, 1, 1], [1, 1], [1, 1], [0; 4], 1),
        // 16 taps and more per group: whole weight-gradient panels transposed from the
        // planes, with groups.
        ConvGeometry::new([2, 32, 56, 56], [32, 16, 1, 1], [1, 1], [1, 1], [0; 4], 2),
        ConvGeometry::new([3, 20, 30, 30], [12, 20, 1, 1], [1, 1], [1, 1], [0; 4], 1),
        ConvGeometry::new([2, 12, 6, 5], [10, 12, 1, 1], [1, 1], [1, 1], [1; 4], 1),
        ConvGeometry::new([3, 12, 9, 9], [10, 12, 1, 1], [2, 2], [1, 1], [0; 4], 1),
    ];
    let mut rng = Rng(0x0F1A7);
    for g in geometries {
        let x = rng.values(g.n * g.c * g.h * g.w);
        let w = rng.values(g.o * g.ckk());
        let dy = rng.values(g.n * g.o * g.ohw());
        let want = reference(&g, &x, &w, &dy);
        let what = |pass: &str| format!("Panels {pass} of {g:?}");
        let (y, _) = forward_on(ConvPath::Panels, &x, &w, &g, false);
        check(&y, &want.y, &what("forward"));
        let dw = filter_gradient_on(ConvPath::Panels, &dy, &x, &g);
        check(&dw, &want.dw, &what("filter gradient"));
        if applicable(&g, Pass::InputGradient, true).contains(&ConvPath::AsForward) {
            let dx = input_gradient_on(ConvPath::AsForward, &dy, &w, &g);
            check(&dx, &want.dx, &what("input gradient (as forward)"));
        }
    }
}
