//! Flag parsing, YAML layering and precedence of the generated command line (table-driven).

use std::io::Write as _;

use hermes_runtime::config::cli::{parse, Invocation};
use hermes_runtime::config::{
    resolve, ConfigError, EnvDescriptor, EvalHandling, HermesEnvConfig, Mode, NoConfig,
    ResolvedConfig, ScalarKind, ServerType,
};

fn descriptor() -> EnvDescriptor {
    let defaults = HermesEnvConfig {
        group_size: 8,
        ..Default::default()
    };
    EnvDescriptor::new::<NoConfig>("my-env", "A test environment.", defaults)
}

/// `my-env ARGS` parsed.
fn parse_args(desc: &EnvDescriptor, args: &[&str]) -> Result<Invocation, ConfigError> {
    let argv = std::iter::once("my-env").chain(args.iter().copied());
    parse(
        "my-env",
        desc,
        &hermes_runtime::commands::definitions(desc),
        argv,
    )
}

fn run(args: &[&str]) -> Result<ResolvedConfig, ConfigError> {
    let desc = descriptor();
    match parse_args(&desc, args)? {
        Invocation::Run(mode, flags) => resolve(&desc, mode, *flags),
        Invocation::Print(text) => panic!("unexpected help output: {text}"),
        Invocation::Utility(name, _) => panic!("unexpected utility subcommand {name}"),
    }
}

fn yaml(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

#[test]
fn flag_value_forms() {
    type Check = fn(&ResolvedConfig) -> bool;
    let cases: &[(&[&str], Check)] = &[
        (&["process", "--env.total_steps", "-1"], |c| {
            c.env.total_steps == -1
        }),
        (&["process", "--env.total_steps=-1"], |c| {
            c.env.total_steps == -1
        }),
        (&["process", "--env.total_steps", "7"], |c| {
            c.env.total_steps == 7
        }),
        (&["process", "--env.group_size=3"], |c| {
            c.env.group_size == 3
        }),
        (&["process", "--env.use_wandb", "false"], |c| {
            !c.env.use_wandb
        }),
        (&["process", "--env.use_wandb", "False"], |c| {
            !c.env.use_wandb
        }),
        (&["process", "--env.use_wandb", "True"], |c| c.env.use_wandb),
        (&["process", "--env.use_wandb=true"], |c| c.env.use_wandb),
        (&["process", "--testing"], |c| c.manager.testing),
        (&["process", "--testing", "true"], |c| c.manager.testing),
        (&["process", "--env.rollout_timeout", "-0.5"], |c| {
            c.env.rollout_timeout == -0.5
        }),
        (&["process", "--env.wandb_name", "None"], |c| {
            c.env.wandb_name.as_deref() == Some("my-env")
        }),
        (&["process", "--env.system_prompt", "be brief"], |c| {
            c.env.system_prompt.as_deref() == Some("be brief")
        }),
        (&["process", "--env.eval_handling", "LIMIT_TRAIN"], |c| {
            c.env.eval_handling == EvalHandling::LimitTrain
        }),
        (
            &["process", "--env.enabled_toolsets", "terminal,file"],
            |c| c.env.enabled_toolsets == Some(vec!["terminal".into(), "file".into()]),
        ),
        (&["process", "--env.enabled_toolsets", r#"["file"]"#], |c| {
            c.env.enabled_toolsets == Some(vec!["file".into()])
        }),
        (
            &[
                "process",
                "--env.extra_body",
                r#"{"provider": {"order": ["a"]}}"#,
            ],
            |c| c.env.extra_body.as_ref().unwrap()["provider"]["order"][0] == "a",
        ),
        (
            &[
                "process",
                "--openai.base_url",
                "http://h:1/v1",
                "--openai.model_name",
                "M",
            ],
            |c| {
                c.servers.len() == 1
                    && c.servers[0].base_url.as_deref() == Some("http://h:1/v1")
                    && c.servers[0].model_name == "M"
            },
        ),
        (
            &[
                "process",
                "--openai.server_type",
                "vllm",
                "--openai.health_check",
                "false",
            ],
            |c| c.servers[0].server_type == ServerType::Vllm && !c.servers[0].health_check,
        ),
        (
            &["process", "--env.group_size", "2", "--env.group_size", "5"],
            |c| c.env.group_size == 5,
        ),
    ];
    for (args, check) in cases {
        let cfg = run(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(check(&cfg), "{args:?} resolved to {:?}", cfg.env_map);
    }
}

#[test]
fn mode_defaults_and_upstream_fixes() {
    let c = run(&["process"]).unwrap();
    assert_eq!(c.mode, Mode::Process);
    assert_eq!(c.env.group_size, 8, "the environment's own default");
    assert!(!c.env.ensure_scores_are_not_same && c.env.include_messages && c.env.use_wandb);
    assert_eq!(
        c.env.data_path_to_save_groups.as_deref(),
        Some("data/my-env.jsonl")
    );
    assert_eq!(
        c.env.wandb_name.as_deref(),
        Some("my-env"),
        "wandb_name defaults to the env name (upstream bug fixed)"
    );

    let c = run(&["evaluate"]).unwrap();
    assert!(
        c.env.ensure_scores_are_not_same,
        "process-mode overrides do not apply to evaluate"
    );
    assert_eq!(c.env.data_path_to_save_groups, None);
}

#[test]
fn precedence_is_defaults_then_yaml_then_flags() {
    let f = yaml("env:\n  group_size: 12\n  total_steps: '30'\nopenai:\n  model_name: yaml-model\n  server_type: sglang\ntesting: true\n");
    let path = f.path().to_str().unwrap();
    let c = run(&["process", "--config", path]).unwrap();
    assert_eq!((c.env.group_size, c.env.total_steps), (12, 30));
    assert_eq!(
        (c.servers[0].model_name.as_str(), c.servers[0].server_type),
        ("yaml-model", ServerType::Sglang)
    );
    assert!(c.manager.testing);

    let c = run(&[
        "process",
        "--config",
        path,
        "--env.group_size",
        "3",
        "--openai.model_name",
        "cli-model",
        "--testing",
        "false",
    ])
    .unwrap();
    assert_eq!(c.env.group_size, 3);
    assert_eq!(
        (c.servers[0].model_name.as_str(), c.servers[0].server_type),
        ("cli-model", ServerType::Sglang)
    );
    assert!(!c.manager.testing);
}

#[test]
fn yaml_server_lists() {
    let two = yaml("openai:\n  - model_name: a\n    base_url: http://x:1/v1\n  - model_name: b\n    base_url: http://x:2/v1\n");
    let c = run(&["process", "--config", two.path().to_str().unwrap()]).unwrap();
    let names: Vec<&str> = c.servers.iter().map(|s| s.model_name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    let err = run(&[
        "process",
        "--config",
        two.path().to_str().unwrap(),
        "--openai.model_name",
        "c",
    ])
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot be combined with a YAML openai: list of 2 servers"),
        "{err}"
    );

    let one = yaml("openai:\n  - model_name: only\n");
    let c = run(&[
        "process",
        "--config",
        one.path().to_str().unwrap(),
        "--openai.timeout",
        "5",
    ])
    .unwrap();
    assert_eq!(
        (
            c.servers.len(),
            c.servers[0].model_name.as_str(),
            c.servers[0].timeout
        ),
        (1, "only", 5)
    );
}

#[test]
fn bad_input_is_a_one_line_error() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["process", "--env.group_sise", "3"],
            "a similar argument exists: '--env.group_size'",
        ),
        (
            &["process", "--env.group_size", "many"],
            "invalid value 'many' for '--env.group_size <INT>': expected an integer",
        ),
        (
            &["process", "--env.use_wandb", "maybe"],
            "expected true or false",
        ),
        (
            &["process", "--env.eval_handling", "SOMETIMES"],
            "expected one of STOP_TRAIN, LIMIT_TRAIN, NONE",
        ),
        (&["proces"], "unrecognized subcommand 'proces'"),
        (
            &["process", "--env.group_size", "0"],
            "env.group_size: must be within 1..=4096, got 0",
        ),
        (
            &["process", "--env.reasoning_effort", "extreme"],
            "env.reasoning_effort: expected one of none",
        ),
        (
            &["process", "--config", "/nonexistent/cfg.yaml"],
            "cannot read /nonexistent/cfg.yaml",
        ),
    ];
    for (args, needle) in cases {
        let err = run(args)
            .expect_err(&format!("{args:?} must fail"))
            .to_string();
        assert!(
            !err.contains('\n'),
            "{args:?}: error must be one line: {err:?}"
        );
        assert!(
            err.contains(needle),
            "{args:?}: {err:?} does not mention {needle:?}"
        );
    }
}

#[test]
fn bad_yaml_names_the_file_and_line() {
    let broken = yaml("env:\n  group_size: 3\n   total_steps: 4\n");
    let err = run(&["process", "--config", broken.path().to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 3"), "{err}");
    assert!(!err.contains('\n'));

    let typed = yaml("env:\n  total_steps: 3\n  group_size: lots\n");
    let err = run(&["process", "--config", typed.path().to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 3: env.group_size: expected an integer, got 'lots'"),
        "{err}"
    );

    let unknown = yaml("env:\n  group_sise: 3\nopenia: {}\n");
    let c = run(&["process", "--config", unknown.path().to_str().unwrap()]).unwrap();
    assert!(
        c.warnings[0].contains("unknown key env.group_sise ignored (did you mean 'group_size'?)"),
        "{:?}",
        c.warnings
    );
    assert!(
        c.warnings[1].contains("unknown top-level key 'openia' ignored (did you mean 'openai'?)")
    );
}

#[test]
fn numbers_outside_a_fields_range_are_refused_with_the_range_named() {
    // A negative limit is not "unlimited", an absurd group is not a request to exhaust the
    // host, and a non-finite time is not a time; every numeric flag has a range.
    let cases: &[(&[&str], &str)] = &[
        (
            &["process", "--env.container_memory_mb", "-1"],
            "env.container_memory_mb: must be within 0..=1048576, got -1",
        ),
        (
            &["process", "--env.container_pids_limit", "-1"],
            "env.container_pids_limit: must be within 0..=4194304, got -1",
        ),
        (
            &["process", "--env.group_size", "9223372036854775807"],
            "env.group_size: must be within 1..=4096, got 9223372036854775807",
        ),
        (
            &["process", "--openai.timeout", "0"],
            "openai.timeout: must be within 1..=1000000000, got 0",
        ),
        (
            &["process", "--max_n_completions", "0"],
            "max_n_completions: must be within 1..=65536, got 0",
        ),
    ];
    for (args, needle) in cases {
        let err = run(args)
            .expect_err(&format!("{args:?} must fail"))
            .to_string();
        assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
        assert!(!err.contains('\n'), "one line: {err:?}");
    }
    let infinite = yaml("env:\n  rollout_timeout: .inf\n");
    let err = run(&["process", "--config", infinite.path().to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("env.rollout_timeout"), "{err}");
    let from_yaml = yaml("env:\n  sandbox_create_concurrency: 0\n");
    let err = run(&["process", "--config", from_yaml.path().to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("env.sandbox_create_concurrency: must be within 1..=100000, got 0"),
        "{err}"
    );
    // Every numeric field of every section has a range.
    for (section, fields) in [
        ("env", <HermesEnvConfig as hermes_runtime::config::ConfigSection>::fields()),
        (
            "openai",
            <hermes_runtime::config::ApiServerConfig as hermes_runtime::config::ConfigSection>::fields(),
        ),
    ] {
        for field in fields {
            let numeric = matches!(field.shape.kind, ScalarKind::Int | ScalarKind::Float);
            assert_eq!(
                numeric,
                field.range.is_some(),
                "{section}.{}: a numeric field has a range, others none",
                field.name
            );
        }
    }
}

#[test]
fn deeply_nested_yaml_is_refused_before_it_is_parsed() {
    // The parser needs tens of seconds to refuse this file; the depth check names the line and
    // the limit instead of the parser's recursion error.
    let deep = yaml(&format!(
        "env:\n  group_size: 2\n  x: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    ));
    let err = run(&["process", "--config", deep.path().to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 3: nested 65 levels deep; a config file may nest at most 64 levels"),
        "{err}"
    );
}

#[test]
fn help_lists_every_flag_with_its_default() {
    let desc = descriptor();
    let Ok(Invocation::Print(help)) = parse(
        "my-env",
        &desc,
        &hermes_runtime::commands::definitions(&desc),
        ["my-env", "process", "--help"],
    ) else {
        panic!("--help must print help");
    };
    for field in desc.env_fields() {
        assert!(
            help.contains(&format!("--env.{}", field.name)),
            "missing --env.{}",
            field.name
        );
    }
    for flag in [
        "--openai.base_url",
        "--openai.api_key",
        "--config",
        "--testing",
        "--slurm",
    ] {
        assert!(help.contains(flag), "missing {flag}");
    }
    assert!(
        help.contains("Rollouts per group (one group per item). [default: 8]"),
        "env defaults are shown"
    );
}

#[test]
fn help_shows_the_servers_the_environment_declares() {
    use hermes_runtime::config::DefaultServer;
    let help_of = |desc: &EnvDescriptor| match parse(
        "my-env",
        desc,
        &hermes_runtime::commands::definitions(desc),
        ["my-env", "process", "--help"],
    ) {
        Ok(Invocation::Print(help)) => help,
        _ => panic!("--help must print help"),
    };
    let one = descriptor().with_servers(vec![DefaultServer::openrouter("org/declared-model")]);
    let help = help_of(&one);
    let line = |flag: &str| {
        help.lines()
            .skip_while(|l| !l.contains(flag))
            .take_while(|l| !l.trim_start().starts_with("--") || l.contains(flag))
            .flat_map(str::split_whitespace)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        line("--openai.model_name").contains("[default: org/declared-model]"),
        "{}",
        line("--openai.model_name")
    );
    assert!(
        line("--openai.base_url").contains("[default: https://openrouter.ai/api/v1]"),
        "{}",
        line("--openai.base_url")
    );
    assert!(
        line("--openai.api_key_env").contains("[default: OPENROUTER_API_KEY]"),
        "{}",
        line("--openai.api_key_env")
    );
    assert!(help.contains("Inference server (--openai.*):"), "{help}");

    let two = descriptor().with_servers(vec![
        DefaultServer::openai("http://a:8000/v1", "first-model"),
        DefaultServer::openai("http://b:8000/v1", "second-model"),
    ]);
    let help = help_of(&two);
    assert!(
        help.contains("the first of the environment's declared servers"),
        "{help}"
    );
    assert!(help.contains("[default: first-model]"), "{help}");
}

#[test]
fn serve_testing_keeps_groups_whose_reference_answers_score_alike() {
    let cfg = run(&["serve", "--testing", "true"]).unwrap();
    assert!(!cfg.env.ensure_scores_are_not_same);
    assert!(
        cfg.warnings
            .iter()
            .any(|w| w.contains("--env.ensure_scores_are_not_same true")),
        "{:?}",
        cfg.warnings
    );

    let kept = run(&[
        "serve",
        "--testing",
        "true",
        "--env.ensure_scores_are_not_same",
        "true",
    ])
    .unwrap();
    assert!(kept.env.ensure_scores_are_not_same);
    assert!(
        kept.warnings
            .iter()
            .any(|w| w.contains("every group will be dropped")),
        "{:?}",
        kept.warnings
    );

    let yaml = yaml("env:\n  ensure_scores_are_not_same: true\n");
    let path = yaml.path().to_str().unwrap();
    let from_yaml = run(&["serve", "--testing", "true", "--config", path]).unwrap();
    assert!(from_yaml.env.ensure_scores_are_not_same);

    let real = run(&["serve"]).unwrap();
    assert!(real.env.ensure_scores_are_not_same);
    assert!(real.warnings.is_empty(), "{:?}", real.warnings);
}

/// The utilities that act on a run's configuration take its flags anywhere among their own:
/// `openenv --env.group_size 3 --port 9000` as well as the other way round.
#[test]
fn a_utility_takes_the_runs_flags_in_any_order() {
    use hermes_runtime::config::cli::{given_process_flags, resolve_flags};
    let desc = descriptor();
    let parse_utility = |args: &[&str]| match parse_args(&desc, args) {
        Ok(Invocation::Utility(name, matches)) => (name, matches),
        Ok(_) => panic!("{args:?}: expected a utility subcommand"),
        Err(e) => panic!("{args:?}: {e}"),
    };
    let file = yaml("env:\n  group_size: 5\n  total_steps: 9\n");
    let path = file.path().to_str().unwrap();
    let (name, matches) = parse_utility(&[
        "openenv",
        "--env.total_steps",
        "-1",
        "--port",
        "9000",
        "--config",
        path,
        "--env.use_wandb",
        "--max-sessions",
        "5",
        "--openai.model_name=m-1",
        "--env.total_steps",
        "4",
    ]);
    assert_eq!(name, "openenv");
    assert_eq!(matches.get_one::<u16>("port"), Some(&9000));
    assert_eq!(matches.get_one::<u64>("max-sessions"), Some(&5));
    let cfg = resolve_flags(&desc, Mode::Process, given_process_flags(&desc, &matches)).unwrap();
    assert_eq!(cfg.env.group_size, 5, "from the YAML");
    assert_eq!(cfg.env.total_steps, 4, "the last of a repeated flag");
    assert!(cfg.env.use_wandb, "a bare boolean flag");
    assert_eq!(cfg.servers[0].model_name, "m-1");

    // Nested: `sandbox reap` with its own flag after the run's.
    let (_, matches) = parse_utility(&["sandbox", "reap", "--config", path, "--all"]);
    let (_, reap) = matches.subcommand().expect("reap");
    assert!(reap.get_flag("all"));
    let cfg = resolve_flags(&desc, Mode::Process, given_process_flags(&desc, reap)).unwrap();
    assert_eq!(cfg.env.total_steps, 9);

    // A flag neither knows is refused by the utility, whose help it points to.
    for (args, help) in [
        (
            &["openenv", "--port", "1", "--env.group_sise", "3"][..],
            "openenv",
        ),
        (&["check", "--bogus"][..], "check"),
        (&["sandbox", "reap", "--all", "--bogus"][..], "sandbox reap"),
    ] {
        let err = parse_args(&desc, args)
            .expect_err("an unknown flag")
            .to_string();
        assert!(!err.contains('\n'), "{err:?}");
        assert!(
            err.ends_with(&format!("(see 'my-env {help} --help')")),
            "{err:?}"
        );
    }
}
