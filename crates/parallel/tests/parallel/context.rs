//! The auto-parallel context: MindSpore's field names, defaults, ranges and errors; the
//! fields of parallel modes that do not exist yet are refused; a failed update changes
//! nothing. (One process; the context is global, so this is one test.)

use spore_parallel::context::*;

fn error(update: spore_core::Result<AutoParallelUpdate>) -> String {
    match update {
        Err(e) => e.to_string(),
        Ok(u) => set_auto_parallel_context(u).unwrap_err().to_string(),
    }
}

#[test]
fn the_context_takes_mindspores_fields_and_refuses_bad_values() {
    reset_auto_parallel_context();
    let c = get_auto_parallel_context();
    assert_eq!(c.parallel_mode, ParallelMode::StandAlone);
    assert_eq!((c.device_num, c.global_rank), (None, 0));
    assert!(!c.gradients_mean && !c.parameter_broadcast);
    assert!(c.gradient_fp32_sync && c.loss_repeated_mean);
    assert_eq!(c.all_reduce_fusion(), AllReduceFusion::Off);

    let u = AutoParallelUpdate::new()
        .set("parallel_mode", "data_parallel")
        .and_then(|u| u.set("device_num", "8"))
        .and_then(|u| u.set("gradients_mean", "True"))
        .and_then(|u| u.set("parameter_broadcast", "1"))
        .and_then(|u| u.set("all_reduce_fusion_config", "[20, 35]"))
        .unwrap();
    set_auto_parallel_context(u).unwrap();
    let c = get_auto_parallel_context();
    assert_eq!(c.parallel_mode, ParallelMode::DataParallel);
    assert_eq!(c.device_num, Some(8));
    assert!(c.gradients_mean && c.parameter_broadcast);
    assert_eq!(c.all_reduce_fusion(), AllReduceFusion::Index(vec![20, 35]));
    // comm_fusion wins over all_reduce_fusion_config.
    let u = AutoParallelUpdate::new()
        .set(
            "comm_fusion",
            r#"{"allreduce": {"mode": "size", "config": 32}}"#,
        )
        .unwrap();
    set_auto_parallel_context(u).unwrap();
    assert_eq!(
        get_auto_parallel_context().all_reduce_fusion(),
        AllReduceFusion::SizeMb(32.0)
    );
    // Automatic parallelism's fields.
    let u = AutoParallelUpdate::new()
        .set("parallel_mode", "auto_parallel")
        .and_then(|u| u.set("search_mode", "dynamic_programming"))
        .and_then(|u| {
            u.set(
                "strategy_ckpt_config",
                r#"{"save_file": "out.json", "load_file": "", "only_trainable_params": false}"#,
            )
        })
        .unwrap();
    set_auto_parallel_context(u).unwrap();
    let c = get_auto_parallel_context();
    assert_eq!(c.parallel_mode, ParallelMode::AutoParallel);
    assert_eq!(c.search_mode, SearchMode::DynamicProgramming);
    assert_eq!(c.strategy_ckpt_save_file, Some("out.json".into()));
    assert_eq!(c.strategy_ckpt_load_file, None);
    // Pipeline, optimizer and dataset fields (MindSpore's defaults: one stage, no
    // parallel optimizer, each rank its block of the batch).
    assert_eq!(
        (c.pipeline_stages, c.enable_parallel_optimizer, c.full_batch),
        (1, false, false)
    );
    let u = AutoParallelUpdate::new()
        .set("pipeline_stages", "2")
        .and_then(|u| u.set("enable_parallel_optimizer", "true"))
        .and_then(|u| u.set("dataset_strategy", "\"full_batch\""))
        .unwrap();
    set_auto_parallel_context(u).unwrap();
    let c = get_auto_parallel_context();
    assert_eq!(
        (c.pipeline_stages, c.enable_parallel_optimizer, c.full_batch),
        (2, true, true)
    );

    let before = get_auto_parallel_context();
    for (key, value, expected) in refused() {
        let e = error(AutoParallelUpdate::new().device_num(2).set(key, value));
        assert!(e.contains(expected), "{key}={value}: {e}");
        assert!(
            e.starts_with("set_auto_parallel_context") || e.contains("set_auto_parallel_context"),
            "{e}"
        );
    }
    // A valid change in the same update as an invalid one is not applied either.
    assert_eq!(get_auto_parallel_context(), before);
    reset_auto_parallel_context();
    assert_eq!(get_auto_parallel_context(), AutoParallelContext::default());
}

/// Fields and values `set` refuses, with a part of each message.
fn refused() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        (
            "parallel_mode",
            "data",
            "parallel_mode must be one of stand_alone, data_parallel",
        ),
        ("device_num", "0", "device_num must be in [1, 4096], got 0"),
        (
            "device_num",
            "4097",
            "device_num must be in [1, 4096], got 4097",
        ),
        (
            "device_num",
            "-1",
            "device_num must be a non-negative integer",
        ),
        (
            "global_rank",
            "4096",
            "global_rank must be in [0, 4095], got 4096",
        ),
        (
            "gradients_mean",
            "yes",
            "gradients_mean must be true or false",
        ),
        (
            "all_reduce_fusion_config",
            "[35, 20]",
            "must be strictly increasing",
        ),
        ("all_reduce_fusion_config", "[0, 3]", "must be at least 1"),
        ("comm_fusion", "{", "not a JSON dictionary"),
        (
            "comm_fusion",
            r#"{"allreduce": {"mode": "size", "config": -1}}"#,
            "positive number of MB",
        ),
        (
            "comm_fusion",
            r#"{"allreduce": {"mode": "ring"}}"#,
            "unknown mode \"ring\"",
        ),
        (
            "comm_fusion",
            r#"{"allgather": {"mode": "auto"}}"#,
            "parallel optimizer, which is not available yet",
        ),
        ("pipeline_stages", "0", "pipeline_stages must be at least 1"),
        (
            "pipeline_config",
            "{}",
            "pipeline_config belongs to pipeline or optimizer parallelism",
        ),
        (
            "search_mode",
            "dynamic",
            "search_mode must be one of dynamic_programming",
        ),
        (
            "strategy_ckpt_config",
            r#"{"save_file": 3}"#,
            "save_file must be a file name",
        ),
        (
            "strategy_ckpt_config",
            r#"{"saved_file": "a.json"}"#,
            "unknown key \"saved_file\"",
        ),
        ("parallel_optimizer_config", "{}", "not available yet"),
        ("full_batch", "maybe", "must be true or false"),
        (
            "dataset_strategy",
            "((2, 1), (2, 1))",
            "per-input strategy tuples",
        ),
        ("enable_parallel_optimizer", "yes", "must be true or false"),
        ("gradient_mean", "true", "unknown field \"gradient_mean\""),
    ]
}
