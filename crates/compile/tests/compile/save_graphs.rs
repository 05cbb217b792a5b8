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
    // One stage per pass of the pipeline, fusion's stages each on their own, then the plan.
    let passes = spore_compile::pass::default_passes();
    let mut wanted = vec!["00_trace".to_string()];
    wanted.extend(
        passes
            .iter()
            .enumerate()
            .map(|(k, p)| format!("{:02}_{}", k + 1, p.name())),
    );
    wanted.push(format!("{:02}_plan", passes.len() + 1));
    for stage in [
        "pool_relu",
        "conv_relu",
        "fuse_elementwise",
        "fuse_sum",
        "contract",
        "matmul_epilogue",
    ] {
        assert!(
            wanted.iter().any(|w| w.ends_with(stage)),
            "no {stage} stage in {wanted:?}"
        );
    }
    for want in &wanted {
        for ext in ["ir", "dot"] {
            let file = format!("{want}.{ext}");
            assert!(names.contains(&file), "{file} missing from {names:?}");
        }
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
    let plan_file = format!("{}.ir", wanted.last().unwrap());
    let plan = std::fs::read_to_string(out.join(plan_file)).unwrap();
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

/// The branches of a `cond` go through the same pipeline as the graph around them: their
/// stages are written (into `node<i>_then/` and `node<i>_else/`) and their elementwise
/// chains are fused.
#[test]
fn sub_graphs_are_compiled_printed_and_fused_like_the_outer_graph() {
    use spore_compile::pass::{default_passes, run_passes};
    use spore_core::control::cond;
    use spore_core::ir::NodeKind;
    use spore_core::{TensorType, trace};
    let dir = std::env::temp_dir().join(format!("spore-sub-graphs-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let types = [
        TensorType::new(&[], DType::F32),
        TensorType::new(&[8], DType::F32),
    ];
    let mut g = trace::trace("branches", &types, |a| {
        let pred = a[0].greater(&Tensor::scalar(0.0f32))?;
        cond(
            &pred,
            &[a[1].clone()],
            |x| Ok(vec![x[0].exp()?.add_scalar(1.0)?.log()?]),
            |x| Ok(vec![x[0].mul_scalar(2.0)?.sub_scalar(1.0)?.tanh()?]),
        )
    })
    .unwrap();
    run_passes(&mut g, &default_passes(), Some(&dir)).unwrap();
    let (node, then_branch, else_branch) = g
        .nodes
        .iter()
        .enumerate()
        .find_map(|(i, n)| match &n.kind {
            NodeKind::Cond {
                then_branch,
                else_branch,
                ..
            } => Some((i, then_branch.clone(), else_branch.clone())),
            _ => None,
        })
        .expect("a Cond node");
    for (name, branch) in [("then", &then_branch), ("else", &else_branch)] {
        assert_eq!(branch.op_count(), 1, "{name}: {}", branch.to_ir());
        assert!(
            branch.to_ir().contains("FusedElementwise"),
            "{name}: {}",
            branch.to_ir()
        );
        let stages = dir.join(format!("node{node}_{name}"));
        let fusion = default_passes()
            .iter()
            .position(|p| p.name() == "fuse_elementwise")
            .unwrap();
        for stage in [
            "00_trace.ir".to_string(),
            format!("{:02}_fuse_elementwise.ir", fusion + 1),
        ] {
            let file = stages.join(stage);
            assert!(file.is_file(), "{} missing", file.display());
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
