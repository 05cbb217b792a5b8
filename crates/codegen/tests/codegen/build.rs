//! Building and running a generated project the way the checks need.

use std::path::Path;
use std::process::Command;

/// Strict C99: what the issue asks the generated code to pass.
pub const STRICT: &[&str] = &[
    "-std=c99",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-O2",
];

/// A C file whose allocation functions abort: linked with `-Wl,--wrap=...`, any call
/// to them from the generated objects ends the run.
const NO_ALLOC: &str = r#"#include <stdlib.h>
void *__wrap_malloc(size_t n) { (void)n; abort(); }
void *__wrap_calloc(size_t n, size_t m) { (void)n; (void)m; abort(); }
void *__wrap_realloc(void *p, size_t n) { (void)p; (void)n; abort(); }
void __wrap_free(void *p) { (void)p; abort(); }
"#;

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Compiles the library objects and the benchmark with strict flags and allocation
/// wrapped; returns the benchmark's path.
pub fn build(dir: &Path) -> std::path::PathBuf {
    std::fs::write(dir.join("no_alloc.c"), NO_ALLOC).unwrap();
    for f in ["model.c", "weights.c"] {
        run(Command::new("cc")
            .args(STRICT)
            .arg("-c")
            .arg(f)
            .current_dir(dir));
    }
    run(Command::new("cc")
        .args(STRICT)
        .args([
            "-o",
            "benchmark",
            "benchmark.c",
            "model.o",
            "weights.o",
            "no_alloc.c",
        ])
        .arg("-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free")
        .arg("-lm")
        .current_dir(dir));
    dir.join("benchmark")
}

/// Runs the benchmark on a file of float32 inputs: one output row per input.
pub fn run_benchmark(bin: &Path, inputs: &Path, iterations: usize) -> (Vec<Vec<f32>>, String) {
    let out = Command::new(bin)
        .arg(inputs)
        .arg(iterations.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "benchmark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split(' ').map(|v| v.parse::<f32>().unwrap()).collect())
        .collect();
    (rows, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Writes inputs as raw little-endian float32.
pub fn write_inputs(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

/// The symbols of an object file, as `nm` prints them (`TYPE NAME`).
pub fn symbols(object: &Path) -> Vec<(char, String)> {
    let text = run(Command::new("nm").arg(object));
    text.lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            match parts.as_slice() {
                [_, t, name] | [t, name] => Some((t.chars().next()?, name.to_string())),
                _ => None,
            }
        })
        .collect()
}

/// Asserts the library needs nothing but libm and the block copies every C compiler may
/// emit for a loop (GCC requires memcpy, memmove and memset even freestanding): no
/// allocation, no stdio, no mutable global (no `.data` or `.bss` symbol).
pub fn assert_freestanding(dir: &Path) {
    const ALLOWED_UNDEFINED: &[&str] = &[
        "expf", "logf", "log1pf", "sqrtf", "fabsf", "tanhf", "sinf", "cosf", "erff", "powf",
        "roundf", "lroundf", "memcpy", "memmove", "memset",
    ];
    let weights: Vec<String> = symbols(&dir.join("weights.o"))
        .into_iter()
        .filter(|(t, _)| *t == 'R')
        .map(|(_, n)| n)
        .collect();
    for obj in ["model.o", "weights.o"] {
        for (t, name) in symbols(&dir.join(obj)) {
            assert!(
                !matches!(t, 'B' | 'b' | 'D' | 'd' | 'C'),
                "{obj}: mutable global {name} ({t})"
            );
            if t == 'U' {
                assert!(
                    ALLOWED_UNDEFINED.contains(&name.as_str()) || weights.contains(&name),
                    "{obj} calls {name}: the library may only use libm"
                );
            }
        }
    }
}

/// `size` of `source` compiled with `flags`: (text, data, bss).
pub fn object_size(dir: &Path, source: &str, flags: &[&str]) -> (usize, usize, usize) {
    run(Command::new("cc")
        .args(flags)
        .args(["-c", source, "-o", "sized.o"])
        .current_dir(dir));
    let text = run(Command::new("size").arg("sized.o").current_dir(dir));
    let n: Vec<usize> = text
        .lines()
        .nth(1)
        .expect("size prints a row")
        .split_whitespace()
        .take(3)
        .map(|v| v.parse().expect("a number"))
        .collect();
    (n[0], n[1], n[2])
}
