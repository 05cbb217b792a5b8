//! The convolution planner: which path computes a pass of a given geometry, decided in
//! one place ([`choose`]), with every threshold in one table below.
//!
//! ```
//! use spore_kernels::conv::{choose, ConvGeometry, ConvPath, Pass};
//! // A convolution with f64 data, or on a CPU without AVX2 and FMA, takes the general path.
//! let g = ConvGeometry::new([8, 3, 9, 9], [4, 3, 3, 3], [2, 2], [1, 1], [1; 4], 1);
//! assert_eq!(choose(&g, Pass::Forward, false), ConvPath::Im2col);
//! // ResNet's 3x3 layers run as Winograd F(4x4, 3x3) where Spore's GEMM runs.
//! let resnet = ConvGeometry::new([32, 64, 32, 32], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1);
//! let path = choose(&resnet, Pass::Forward, true);
//! assert!(path == ConvPath::Winograd || !spore_kernels::matmul::own_f32_gemm());
//! ```
//!
//! Every pass of every geometry has one path that always applies (im2col and a GEMM,
//! col2im for the input gradient); the others are faster where their conditions hold,
//! and only for f32 on CPUs where Spore's own GEMM runs (AVX2 and FMA). [`applicable`]
//! lists the paths whose conditions hold, best first; [`choose`] takes the first, unless
//! `SPORE_CONV_PATH` names one of the others (for debugging and comparison:
//! `SPORE_CONV_PATH=im2col` runs every convolution on the general path).
//!
//! | path | passes | where it applies |
//! |---|---|---|
//! | `Winograd` | forward, filter gradient | 3x3, stride 1, padding 1 on every side, at least [`WINOGRAD_MIN_CHANNELS`] in and out, no groups or dilation, `SPORE_WINOGRAD` not `off`; chosen from [`WINOGRAD_MIN_TILES`] tiles |
//! | `Implicit` | forward, filter gradient | unpadded, one image's group within [`MAX_IMAGE_BYTES`], at least [`NR`] outputs per group |
//! | `PaddedGathered` | filter gradient | padded, at least [`NR`] outputs, [`PADDED_GATHER_MIN_TAPS`] taps, [`PADDED_GATHER_MIN_POSITIONS`] positions, `dWᵀ` within [`MAX_GATHERED_GRADIENT`] |
//! | `Wide` | forward, filter gradient | unpadded, stride 1, small images, fewer than [`NR`] outputs per group, wide positions within 5/4 |
//! | `Panels` | forward, filter gradient | more than [`THIN_MAX_ROWS`] outputs per group |
//! | `AsForward` | input gradient | stride 1, the transposed convolution takes `Panels`-sized layers and computes at most 9/8 of the gradient |
//! | `ScatterAdd` | input gradient | unpadded, stride 1, small images, at least [`MR`] inputs per group, wide positions within 3/2 |
//! | `PaddedScatterAdd` | input gradient | padded, stride 1, at least [`MR`] inputs and [`NR`] outputs per group, wide positions within 9/8, a bordered image gradient within [`MAX_PADDED_IMAGE`] |
//! | `Im2colPackedFilters` | input gradient | `Panels`-sized layers whose GEMMs run one per thread |
//! | `Im2col` | all | always |

use std::sync::OnceLock;

use super::batch::batch_blocks;
use super::geometry::ConvGeometry;
use crate::matmul::parallelism_for;
use crate::sgemm::{self, MR, NR, THIN_MAX_ROWS};

// ----- The thresholds. Each says what it is for; the measurements that set them are in
// ----- BENCHMARKS.md (the sections on convolution paths: "LeNet's convolutions lose
// ----- im2col", "Winograd F(4x4, 3x3)", "Ten/Eleven rounds ago").

/// Largest image (one group's channels) the gathered and wide paths read: L1 holds it
/// while the offset tables sweep it.
pub const MAX_IMAGE_BYTES: usize = 32 << 10;

/// Positions the gathered weight gradient sums per product: a chunk of images forms one
/// depth block of the GEMM.
pub const GRADIENT_DEPTH: usize = 320;

/// Fewest channels in and out for Winograd: with fewer, the products are too shallow to
/// pay for the transforms (ResNet's first layer has 3).
pub const WINOGRAD_MIN_CHANNELS: usize = 16;

/// Fewest tiles (images × tiles per image) Winograd takes. Each call transforms the
/// filters into 36 · O · C values (four times the weights) that the 36 products then
/// read; with fewer tiles than this the products are too narrow to pay for writing and
/// reading them, and the direct form, which reads the 9 · O · C weights once, is faster
/// (ResNet-18 at batch 1: layer3 and layer4 have 4 and 1 tiles per image).
pub const WINOGRAD_MIN_TILES: usize = 16;

/// Outputs per Winograd tile side (F(4x4, 3x3)); other sides end in partial tiles.
pub const WINOGRAD_TILE: usize = 4;

/// Values of one group's zero-bordered image gradient a thread may hold for
/// `PaddedScatterAdd` (2 MB; ResNet's first stage needs 74k).
pub const MAX_PADDED_IMAGE: usize = 1 << 19;

/// Fewest taps for `PaddedGathered`: 24 row tiles share each packed panel of `dYᵀ`.
pub const PADDED_GATHER_MIN_TAPS: usize = 24 * MR;

/// Fewest output positions per image for `PaddedGathered`.
pub const PADDED_GATHER_MIN_POSITIONS: usize = 256;

/// Largest `dWᵀ` (taps x outputs of a group) of `PaddedGathered`: 640 KB, ResNet's
/// second stage; a larger one, which every depth block adds into, leaves L2.
pub const MAX_GATHERED_GRADIENT: usize = 160 << 10;

/// The ratios of wide positions to real ones each wide-position path tolerates, as
/// (numerator, denominator) of `wide_len / ohw`: `Wide` computes on the columns no window
/// starts at, `ScatterAdd` and `PaddedScatterAdd` add zeros there.
pub const WIDE_RATIO: (usize, usize) = (5, 4);
pub const SCATTER_RATIO: (usize, usize) = (3, 2);
pub const PADDED_SCATTER_RATIO: (usize, usize) = (9, 8);

/// Most extra outputs `AsForward` may compute, as `H·W / (OH·OW)`: at most 9/8 (a "same"
/// convolution computes none; an unpadded one's full padding would compute on zeros).
pub const AS_FORWARD_RATIO: (usize, usize) = (9, 8);

/// Columns one im2col GEMM aims for: a block's images are lowered side by side until the
/// product is about this wide (deep layers' 4x4 and 8x8 outputs make narrow products).
pub const GEMM_COLUMNS: usize = 1024;

/// Bytes of column matrix one im2col GEMM stays within when one image's columns are
/// small: half of a 512 KiB L2.
pub const CACHED_COLUMNS_BYTES: usize = 256 << 10;

/// Fewest columns the L2 rule above may leave an im2col GEMM with.
pub const MIN_CACHED_COLUMNS: usize = 256;

/// A convolution pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pass {
    Forward,
    /// `dX` from `dY` and the filter.
    InputGradient,
    /// `dW` from `dY` and the input.
    FilterGradient,
}

/// The ways to compute a pass (see the table in the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConvPath {
    Winograd,
    Implicit,
    PaddedGathered,
    Wide,
    Panels,
    AsForward,
    ScatterAdd,
    PaddedScatterAdd,
    Im2colPackedFilters,
    Im2col,
}

impl ConvPath {
    pub const ALL: [ConvPath; 10] = [
        ConvPath::Winograd,
        ConvPath::Implicit,
        ConvPath::PaddedGathered,
        ConvPath::Wide,
        ConvPath::Panels,
        ConvPath::AsForward,
        ConvPath::ScatterAdd,
        ConvPath::PaddedScatterAdd,
        ConvPath::Im2colPackedFilters,
        ConvPath::Im2col,
    ];

    /// The name `SPORE_CONV_PATH` takes: `winograd`, `implicit`, `padded-gathered`,
    /// `wide`, `panels`, `as-forward`, `scatter-add`, `padded-scatter-add`,
    /// `im2col-packed-filters`, `im2col`.
    pub fn name(self) -> &'static str {
        match self {
            ConvPath::Winograd => "winograd",
            ConvPath::Implicit => "implicit",
            ConvPath::PaddedGathered => "padded-gathered",
            ConvPath::Wide => "wide",
            ConvPath::Panels => "panels",
            ConvPath::AsForward => "as-forward",
            ConvPath::ScatterAdd => "scatter-add",
            ConvPath::PaddedScatterAdd => "padded-scatter-add",
            ConvPath::Im2colPackedFilters => "im2col-packed-filters",
            ConvPath::Im2col => "im2col",
        }
    }
}

/// The path for `pass` of `g`; `f32`: whether the data is f32 (other types take
/// `Im2col`). The first of [`applicable`], or the one `SPORE_CONV_PATH` names if it
/// applies.
pub fn choose(g: &ConvGeometry, pass: Pass, f32: bool) -> ConvPath {
    let paths = applicable(g, pass, f32);
    let preferred = paths
        .iter()
        .find(|p| match p {
            ConvPath::Im2colPackedFilters => packs_filters(g),
            ConvPath::Winograd => winograd_pays(g),
            _ => true,
        })
        .copied()
        .unwrap_or(ConvPath::Im2col);
    match forced() {
        Some(forced) if paths.contains(&forced) => forced,
        _ => preferred,
    }
}

/// The path `SPORE_CONV_PATH` asks for (read once); an unknown name is reported once
/// and ignored.
fn forced() -> Option<ConvPath> {
    static FORCED: OnceLock<Option<ConvPath>> = OnceLock::new();
    *FORCED.get_or_init(|| {
        let name = std::env::var("SPORE_CONV_PATH").ok()?;
        let path = ConvPath::ALL.into_iter().find(|p| p.name() == name);
        if path.is_none() {
            let names: Vec<&str> = ConvPath::ALL.iter().map(|p| p.name()).collect();
            eprintln!(
                "SPORE_CONV_PATH={name:?} is not a convolution path (one of {}); ignored",
                names.join(", ")
            );
        }
        path
    })
}

/// Paths that apply to one pass: at most six, held inline (planning a convolution
/// allocates nothing, so a compiled step does not).
pub type Paths = smallvec::SmallVec<[ConvPath; 6]>;

/// The paths that can compute `pass` of `g`, best first; `Im2col` always last.
pub fn applicable(g: &ConvGeometry, pass: Pass, f32: bool) -> Paths {
    let mut paths = Paths::new();
    if f32 {
        let mut add = |path, applies: bool| {
            if applies {
                paths.push(path);
            }
        };
        match pass {
            Pass::Forward => {
                add(ConvPath::Winograd, winograd_applies(g));
                add(ConvPath::Implicit, implicit_applies(g));
                add(ConvPath::Wide, wide_applies(g));
                add(ConvPath::Panels, panels_applies(g));
            }
            Pass::InputGradient => {
                add(ConvPath::AsForward, transposed_geometry(g).is_some());
                add(ConvPath::ScatterAdd, scatter_applies(g));
                add(ConvPath::PaddedScatterAdd, padded_scatter_applies(g));
                add(ConvPath::Im2colPackedFilters, panels_applies(g));
            }
            Pass::FilterGradient => {
                add(ConvPath::Winograd, winograd_applies(g));
                add(ConvPath::Implicit, implicit_applies(g));
                add(ConvPath::PaddedGathered, padded_gather_applies(g));
                add(ConvPath::Panels, panels_applies(g));
                add(ConvPath::Wide, wide_applies(g));
            }
        }
    }
    paths.push(ConvPath::Im2col);
    paths
}

/// Whether the input gradient's GEMMs run one per thread (the batch split across
/// threads), so that packing each group's `Wᵀ` once serves them all.
pub(crate) fn packs_filters(g: &ConvGeometry) -> bool {
    matches!(inner_par(g), gemm::Parallelism::None)
}

/// Parallelism of the im2col path's GEMMs: one thread each when the batch is split
/// across threads, else the product's own.
pub(crate) fn inner_par(g: &ConvGeometry) -> gemm::Parallelism {
    if g.n > 1 {
        gemm::Parallelism::None
    } else {
        parallelism_for(g.og() * g.ohw() * g.ckk())
    }
}

/// Spore's GEMM runs here and the environment does not turn Winograd off (read once).
pub(crate) fn winograd_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        sgemm::available() && std::env::var("SPORE_WINOGRAD").as_deref() != Ok("off")
    })
}

pub(crate) fn winograd_applies(g: &ConvGeometry) -> bool {
    g.kh == 3
        && g.kw == 3
        && g.stride == [1, 1]
        && g.dilation == [1, 1]
        && g.groups == 1
        && g.pads == [1; 4]
        && g.h > 0
        && g.w > 0
        && g.c >= WINOGRAD_MIN_CHANNELS
        && g.o >= WINOGRAD_MIN_CHANNELS
        && winograd_enabled()
}

/// Whether Winograd, where it applies, is worth its filter transform (see
/// [`WINOGRAD_MIN_TILES`]) and the outputs its partial tiles compute and drop: at least
/// half of the tiles' outputs must lie inside the image. Why half: ResNet-50's 14x14 and
/// 7x7 layers (77 % inside) run about twice and 1.15 times as fast as the direct form
/// (BENCHMARKS.md, "Where the time goes: ResNet-50 training"), while a side of 1 or 2
/// computes 16 or 4 times the outputs it keeps and the form saves 4x at most.
fn winograd_pays(g: &ConvGeometry) -> bool {
    let (th, tw) = (g.h.div_ceil(WINOGRAD_TILE), g.w.div_ceil(WINOGRAD_TILE));
    let covered = th * tw * WINOGRAD_TILE * WINOGRAD_TILE;
    g.n * th * tw >= WINOGRAD_MIN_TILES && 2 * g.h * g.w >= covered
}

/// What the gathered and wide paths need: the AVX2 GEMM, no padding (every tap of every
/// window lies inside the image), something to compute, and one image's channels of a
/// group within [`MAX_IMAGE_BYTES`].
fn small_unpadded(g: &ConvGeometry) -> bool {
    let image = g.cg() * g.h * g.w;
    sgemm::available()
        && g.pads == [0; 4]
        && g.n > 0
        && g.og() > 0
        && g.ckk() > 0
        && g.ohw() > 0
        && image * std::mem::size_of::<f32>() <= MAX_IMAGE_BYTES
}

/// Images whose positions form one depth of the gathered weight gradient's product.
pub(crate) fn chunk_images(g: &ConvGeometry, per: usize) -> usize {
    (GRADIENT_DEPTH / g.ohw().max(1)).clamp(1, per.max(1))
}

/// `a / b <= num / den`, in integers.
fn within((num, den): (usize, usize), a: usize, b: usize) -> bool {
    den * a <= num * b
}

fn implicit_applies(g: &ConvGeometry) -> bool {
    let (_, per) = batch_blocks(g.n);
    let chunk_reach = g.c * g.h * g.w * chunk_images(g, per);
    small_unpadded(g) && g.og() >= NR && chunk_reach < i32::MAX as usize
}

fn wide_applies(g: &ConvGeometry) -> bool {
    small_unpadded(g)
        && g.stride == [1, 1]
        && g.og() < NR
        && within(WIDE_RATIO, g.wide_len(), g.ohw())
}

fn scatter_applies(g: &ConvGeometry) -> bool {
    small_unpadded(g)
        && g.cg() >= MR
        && g.stride == [1, 1]
        && within(SCATTER_RATIO, g.wide_len(), g.ohw())
}

fn padded_scatter_applies(g: &ConvGeometry) -> bool {
    let (hp, wp) = g.padded_size();
    sgemm::available()
        && g.pads != [0; 4]
        && g.stride == [1, 1]
        && g.n > 0
        && g.cg() >= MR
        && g.og() >= NR
        && g.ohw() > 0
        && within(PADDED_SCATTER_RATIO, g.wide_len(), g.ohw())
        && g.cg() * hp * wp <= MAX_PADDED_IMAGE
        && g.c * hp * wp < i32::MAX as usize
}

fn padded_gather_applies(g: &ConvGeometry) -> bool {
    let (hp, wp) = g.padded_size();
    sgemm::available()
        && g.pads != [0; 4]
        && g.n > 0
        && g.og() >= NR
        && g.ckk() >= PADDED_GATHER_MIN_TAPS
        && g.ohw() >= PADDED_GATHER_MIN_POSITIONS
        && g.ckk() * g.og() <= MAX_GATHERED_GRADIENT
        && g.cg() * hp * wp * chunk_images(g, batch_blocks(g.n).1) < i32::MAX as usize
}

pub(crate) fn panels_applies(g: &ConvGeometry) -> bool {
    sgemm::available() && g.og() > THIN_MAX_ROWS && g.n > 0 && g.ohw() > 0 && g.ckk() > 0
}

/// The geometry of a stride-1 convolution's input gradient computed as a forward
/// convolution of the output gradient with the filter transposed and turned by 180°:
/// `dY` [N, O, OH, OW] is its input, and each side's padding becomes
/// `dilation·(K-1) - pad`, so that its output is [N, C, H, W] again. `None` unless that
/// forward pass takes `Panels`-sized layers and computes at most [`AS_FORWARD_RATIO`] of
/// the gradient's outputs.
pub(crate) fn transposed_geometry(g: &ConvGeometry) -> Option<ConvGeometry> {
    if g.stride != [1, 1] {
        return None;
    }
    let reach = [
        g.dilation[0] * g.kh.saturating_sub(1),
        g.dilation[1] * g.kw.saturating_sub(1),
    ];
    let mut pads = [0; 4];
    for (side, pad) in pads.iter_mut().enumerate() {
        *pad = reach[side / 2].checked_sub(g.pads[side])?;
    }
    let gt = ConvGeometry::new(
        [g.n, g.o, g.oh, g.ow],
        [g.c, g.og(), g.kh, g.kw],
        [1, 1],
        g.dilation,
        pads,
        g.groups,
    );
    let extra_ok = within(AS_FORWARD_RATIO, g.h * g.w, g.ohw());
    (extra_ok && panels_applies(&gt) && (gt.oh, gt.ow) == (g.h, g.w)).then_some(gt)
}
