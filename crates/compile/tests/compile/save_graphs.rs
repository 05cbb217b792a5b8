//! `save_graphs` writes the IR after every pass as `.ir` and `.dot`; the `.dot` files
//! render with Graphviz and the `.ir` lines name the user's source file and line.

use spore_compile::jit;
use spore_core::context::{ContextUpdate, set_context};
use spore_core::{DType, Tensor};

#[test]
fn save_graphs_writes_renderable_dot_and_located_ir() {
    let dir = std::env::temp_dir().join(format!("spore-save-graphs-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    set_context(ContextUpdate::new().save_graphs(1).save_graphs_path(&dir)).unwrap();
    let f = jit("saved", |x: &[Tensor]| {
        Ok(vec![
            x[0].exp()?
                .add_scalar(1.0)?
                .log()?
                .matmul(&x[0].transpose()?)?,
        ])
    });
    let result = f.call(&[Tensor::ones(&[2, 3], DType::F32).unwrap()]);
    set_context(ContextUpdate::new().save_graphs(0)).unwrap();
    result.unwrap();
    let out = dir.join("saved_0");
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for want in [
        "00_trace.ir",
        "00_trace.dot",
        "01_dce.ir",
        "07_fuse_elementwise.ir",
        "07_fuse_elementwise.dot",
        "09_plan.ir",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    let ir = std::fs::read_to_string(out.join("00_trace.ir")).unwrap();
    // The Exp node names this file and a line that holds the `.exp()` call.
    let exp_line = ir
        .lines()
        .find(|l| l.contains("= Exp("))
        .expect("an Exp node");
    let at = exp_line
        .split(&format!("# In file {}:", file!()))
        .nth(1)
        .unwrap_or_else(|| panic!("no location in {exp_line}"));
    let line: usize = at.trim().parse().unwrap();
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(file!()),
    )
    .unwrap();
    assert!(
        source.lines().nth(line - 1).unwrap().contains(".exp()"),
        "line {line} of {} is not the exp call",
        file!()
    );
    let plan = std::fs::read_to_string(out.join("09_plan.ir")).unwrap();
    assert!(plan.contains("# memory plan"), "{plan}");
    let dot = which_dot().expect("Graphviz `dot` is needed for this test: run scripts/test.sh, which installs it, or apt-get install graphviz");
    for n in names.iter().filter(|n| n.ends_with(".dot")) {
        let status = std::process::Command::new(&dot)
            .arg("-Tsvg")
            .arg(out.join(n))
            .arg("-o")
            .arg(out.join(format!("{n}.svg")))
            .status()
            .unwrap();
        assert!(status.success(), "dot failed on {n}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn which_dot() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join("dot"))
        .find(|p| p.is_file())
}
