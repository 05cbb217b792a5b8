//! Invalid dump configurations give errors naming the field and the allowed values; the
//! environment variable is honoured.

use spore_core::debug::dump::config::DumpConfig;

fn err(json: &str) -> String {
    DumpConfig::parse(json).unwrap_err().to_string()
}

#[test]
fn invalid_configs_give_specific_errors() {
    let base = |over: &str| {
        format!(
            r#"{{"common_dump_settings": {{"dump_mode": 0, "path": "/tmp/d", "net_name": "N", "iteration": "0", "input_output": 0, "kernels": [], "support_device": [0]{over}}}}}"#
        )
    };
    assert!(DumpConfig::parse(&base("")).is_ok());
    let e = err(&base("").replace("\"/tmp/d\"", "\"relative/dir\""));
    assert!(
        e.contains("path") && e.contains("absolute") && e.contains("relative/dir"),
        "{e}"
    );
    let e = err(&base("").replace("\"iteration\": \"0\"", "\"iteration\": \"3-1|x\""));
    assert!(
        e.contains("iteration") && e.contains("0|5-8|100-120"),
        "{e}"
    );
    let e = err(&base("").replace("\"dump_mode\": 0", "\"dump_mode\": 5"));
    assert!(
        e.contains("dump_mode") && e.contains("0, 1") && e.contains('5'),
        "{e}"
    );
    let e = err(&base("").replace("\"net_name\": \"N\", ", ""));
    assert!(
        e.contains("missing required field common_dump_settings.net_name"),
        "{e}"
    );
    let e = err(&base(", \"input_output\": 3").replace("\"input_output\": 0, ", ""));
    assert!(e.contains("input_output") && e.contains("0, 1, 2"), "{e}");
    let e = err(&base(", \"op_debug_mode\": 9"));
    assert!(
        e.contains("op_debug_mode") && e.contains("0, 1, 2, 3"),
        "{e}"
    );
    let e = err(&base(", \"saved_data\": \"everything\""));
    assert!(e.contains("saved_data") && e.contains("statistic"), "{e}");
    let e = err(&base(", \"colour\": 1"));
    assert!(
        e.contains("unknown field common_dump_settings.colour"),
        "{e}"
    );
    let e = err(&base("").replace("\"dump_mode\": 0", "\"dump_mode\": 1"));
    assert!(e.contains("kernels") && e.contains("dump_mode is 1"), "{e}");
    assert!(err(&format!("{}x", base(""))).contains("not valid JSON"));
    let e = err(r#"{"common_dump_settings": {}, "e2e_dump_settings": {"enable": "yes"}}"#);
    assert!(e.contains("missing required field"), "{e}");
}

#[test]
fn the_environment_variables_name_the_config_and_bad_files_are_reported() {
    let _guard = super::serial();
    let dir = super::temp_dir("envcfg");
    let good = dir.join("dump.json");
    std::fs::write(&good, super::dump_json(&dir.join("out"), "")).unwrap();
    // MindSpore's variable works; Spore's takes precedence when both are set.
    // SAFETY (edition 2024 marks set_var unsafe): the observer tests hold the serial lock
    // and nothing else in this binary reads these variables concurrently.
    unsafe { std::env::set_var("MINDSPORE_DUMP_CONFIG", &good) };
    assert!(spore_core::debug::reload_env().unwrap());
    assert_eq!(
        spore_core::debug::dump::current().unwrap().config.path,
        dir.join("out")
    );
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"common_dump_settings": {"dump_mode": 0}}"#).unwrap();
    unsafe { std::env::set_var("SPORE_DUMP_CONFIG", &bad) };
    let e = spore_core::debug::reload_env().unwrap_err().to_string();
    assert!(
        e.contains("bad.json") && e.contains("missing required field"),
        "{e}"
    );
    unsafe {
        std::env::remove_var("SPORE_DUMP_CONFIG");
        std::env::remove_var("MINDSPORE_DUMP_CONFIG");
    }
    spore_core::debug::dump::disable().unwrap();
    assert!(!spore_core::debug::reload_env().unwrap());
    assert!(
        dir.join("out/rank_0/.dump_metadata/data_dump.json")
            .is_file()
    );
}
