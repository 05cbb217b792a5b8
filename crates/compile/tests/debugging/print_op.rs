//! Print: Graph mode prints in the same order as PyNative, print_file_path writes a file
//! (with a timestamp suffix when it already exists) that reads back as text.

use spore_compile::jit;
use spore_core::context::{ContextUpdate, set_context};
use spore_core::debug::print::{current_print_file, parse_print_text};
use spore_core::ops::{self, PrintArg};
use spore_core::{DType, Result, Tensor};

use super::{serial, temp_dir};

fn program(x: &[Tensor]) -> Result<Vec<Tensor>> {
    ops::print(&["start".into()])?;
    let y = x[0].mul_scalar(2.0)?;
    ops::print(&["y =".into(), PrintArg::from(&y)])?;
    ops::print(&[
        "again".into(),
        PrintArg::from(&y),
        "and x".into(),
        PrintArg::from(&x[0]),
    ])?;
    Ok(vec![y.sum(&[], false)?])
}

#[test]
fn print_order_and_print_file_path() {
    let _guard = serial();
    let dir = temp_dir("print");
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();

    let eager_file = dir.join("eager.pb");
    set_context(ContextUpdate::new().print_file_path(Some(eager_file.clone()))).unwrap();
    let r = program(std::slice::from_ref(&x));
    let eager_written = current_print_file();
    set_context(ContextUpdate::new().print_file_path(None)).unwrap();
    r.unwrap();
    assert_eq!(eager_written.as_deref(), Some(eager_file.as_path()));

    // The graph file exists already: output goes to a suffixed file, the old one is kept.
    let graph_file = dir.join("graph.pb");
    std::fs::write(&graph_file, b"keep me").unwrap();
    set_context(ContextUpdate::new().print_file_path(Some(graph_file.clone()))).unwrap();
    let f = jit("printer", program);
    let r1 = f.call(std::slice::from_ref(&x));
    let r2 = f.call(std::slice::from_ref(&x)); // prints again on every run
    let actual = current_print_file().unwrap();
    set_context(ContextUpdate::new().print_file_path(None)).unwrap();
    r1.unwrap();
    r2.unwrap();
    assert_eq!(std::fs::read(&graph_file).unwrap(), b"keep me");
    assert_ne!(actual, graph_file);
    assert!(
        actual
            .to_string_lossy()
            .starts_with(&format!("{}_", graph_file.display())),
        "{}",
        actual.display()
    );

    let eager_text = parse_print_text(&eager_file).unwrap();
    let graph_text = parse_print_text(&actual).unwrap();
    assert!(
        eager_text.starts_with(
            "start\ny =\nTensor(shape=[2], dtype=Float32, value=[ 2.0  4.0])\nagain\n"
        ),
        "{eager_text}"
    );
    assert_eq!(
        graph_text,
        format!("{eager_text}{eager_text}"),
        "graph mode prints the same, in the same order, each run"
    );
    assert!(
        parse_print_text(dir.join("missing.pb"))
            .unwrap_err()
            .to_string()
            .contains("missing.pb")
    );
    let _ = DType::F32;
}
