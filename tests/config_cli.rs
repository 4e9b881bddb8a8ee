//! The experiment file through the real binary: every bad input gives a message naming the
//! file, line and key (or the override that caused it) and a non-zero exit; layering and run
//! order behave as documented.

use std::path::{Path, PathBuf};

mod common;
use common::loaderlab;
use serde_json::Value;

const BASE: &str = r#"
[experiment]
name = "t"

[dataset]
kind = "synthetic"
synthetic_size = 512
"#;

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("exp.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Run `validate` on `text` and return stderr, asserting exit 2 and that it names
/// `file:line:` and `key`.
#[track_caller]
fn rejects(text: &str, line: usize, key: &str, fragment: &str) -> String {
    rejects_with(text, &[], &[], &format!(":{line}:"), key, fragment)
}

#[track_caller]
fn rejects_with(
    text: &str,
    args: &[&str],
    env: &[(&str, &str)],
    place: &str,
    key: &str,
    fragment: &str,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), text);
    let mut cmd = loaderlab();
    cmd.arg("validate").arg(&file).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains(fragment))
        .unwrap_or_else(|| panic!("no line with {fragment:?} in:\n{stderr}"));
    if place.starts_with(':') {
        assert!(
            line.contains(&format!("{}{place}", file.display())),
            "{line} does not name {}{place}",
            file.display()
        );
    } else {
        assert!(line.contains(place), "{line} does not name {place}");
    }
    assert!(line.contains(key), "{line} does not name the key {key}");
    stderr
}

#[test]
fn toml_syntax_error_names_line() {
    rejects(
        &format!("{BASE}\n[loader\nworkers = 1\n"),
        9,
        "",
        "TOML syntax error",
    );
}

#[test]
fn unknown_key_suggests_the_right_one() {
    rejects(
        &format!("{BASE}\n[loader]\nworker = 4\n"),
        10,
        "loader.worker",
        "did you mean `workers`",
    );
}

#[test]
fn unknown_section_suggests_the_right_one() {
    rejects(
        &format!("{BASE}\n[loadr]\nworkers = 4\n"),
        9,
        "loadr",
        "did you mean `loader`",
    );
}

#[test]
fn wrong_type_is_named() {
    rejects(
        &format!("{BASE}\n[loader]\nworkers = \"four\"\n"),
        10,
        "loader.workers",
        "expected an integer ≥ 0, found \"four\"",
    );
}

#[test]
fn negative_workers() {
    rejects(
        &format!("{BASE}\n[loader]\nworkers = -1\n"),
        10,
        "loader.workers",
        "found -1",
    );
}

#[test]
fn zero_batch_size() {
    rejects(
        &format!("{BASE}\n[loader]\nbatch_size = 0\n"),
        10,
        "loader.batch_size",
        "at least 1",
    );
}

#[test]
fn crop_scale_above_one() {
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"random_resized_crop\"\nscale = [0.5, 1.5]\n[[transforms]]\nop = \"to_tensor\"\n"
    );
    rejects(&text, 11, "transforms[0].scale", "0 < low ≤ high ≤ 1");
}

#[test]
fn crop_scale_low_above_high() {
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"random_resized_crop\"\nscale = [0.9, 0.5]\n[[transforms]]\nop = \"to_tensor\"\n"
    );
    rejects(&text, 11, "transforms[0].scale", "found [0.9, 0.5]");
}

#[test]
fn crop_ratio_low_above_high() {
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"random_resized_crop\"\nratio = [2.0, 1.0]\n[[transforms]]\nop = \"to_tensor\"\n"
    );
    rejects(&text, 11, "transforms[0].ratio", "0 < low ≤ high");
}

#[test]
fn negative_rotation() {
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"random_rotation\"\ndegrees = -5\n[[transforms]]\nop = \"to_tensor\"\n"
    );
    rejects(&text, 11, "transforms[0].degrees", "found -5");
}

#[test]
fn unknown_transform_op() {
    let text = format!("{BASE}\n[[transforms]]\nop = \"random_rotate\"\n");
    rejects(
        &text,
        10,
        "transforms[0].op",
        "did you mean \"random_rotation\"",
    );
}

#[test]
fn unknown_transform_parameter() {
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"random_rotation\"\ndegree = 5\n[[transforms]]\nop = \"to_tensor\"\n"
    );
    rejects(&text, 11, "transforms[0].degree", "did you mean `degrees`");
}

#[test]
fn prefetch_zero_with_workers() {
    rejects(
        &format!("{BASE}\n[loader]\nworkers = 2\nprefetch_factor = 0\n"),
        11,
        "loader.prefetch_factor",
        "when workers > 0",
    );
}

#[test]
fn zero_timed_steps() {
    rejects(
        &format!("{BASE}\n[protocol]\ntimed_steps = 0\n"),
        10,
        "protocol.timed_steps",
        "at least 1",
    );
}

#[test]
fn zero_rounds() {
    rejects(
        &format!("{BASE}\n[protocol]\nrounds = 0\n"),
        10,
        "protocol.rounds",
        "at least 1 round",
    );
}

#[test]
fn zero_profile_steps_with_profile_on() {
    rejects(
        &format!("{BASE}\n[protocol]\nprofile_steps = 0\n"),
        10,
        "protocol.profile_steps",
        "profile = true",
    );
    // With profiling off, 0 is fine.
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        &format!("{BASE}\n[protocol]\nprofile = false\nprofile_steps = 0\n"),
    );
    loaderlab().arg("validate").arg(file).assert().success();
}

#[test]
fn unknown_enum_word() {
    rejects(
        &format!("{BASE}\n[device]\nkind = \"gpu\"\n"),
        10,
        "device.kind",
        "one of \"auto\", \"cpu\", \"cuda\"",
    );
}

#[test]
fn pair_of_wrong_length() {
    rejects(
        &format!("{BASE}\n[optimizer]\nbetas = [0.9, 0.99, 0.1]\n"),
        10,
        "optimizer.betas",
        "a pair [low, high]",
    );
}

#[test]
fn matrix_key_naming_no_setting() {
    rejects(
        &format!("{BASE}\n[matrix]\n\"loader.wrokers\" = [0, 1]\n"),
        10,
        "matrix.\"loader.wrokers\"",
        "did you mean `workers`",
    );
}

#[test]
fn matrix_value_of_wrong_type() {
    rejects(
        &format!("{BASE}\n[matrix]\n\"loader.workers\" = [0, \"two\"]\n"),
        10,
        "matrix.\"loader.workers\"[1]",
        "expected an integer ≥ 0, found \"two\"",
    );
}

#[test]
fn matrix_value_out_of_range_points_at_the_matrix() {
    rejects(
        &format!("{BASE}\n[matrix]\n\"loader.batch_size\" = [32, 0]\n"),
        10,
        "matrix.\"loader.batch_size\"[1]",
        "at least 1",
    );
}

#[test]
fn empty_matrix_list() {
    rejects(
        &format!("{BASE}\n[matrix]\n\"loader.workers\" = []\n"),
        10,
        "matrix.\"loader.workers\"",
        "empty list",
    );
}

#[test]
fn matrix_over_an_experiment_wide_setting() {
    rejects(
        &format!("{BASE}\n[matrix]\n\"protocol.rounds\" = [1, 2]\n"),
        10,
        "matrix.\"protocol.rounds\"",
        "cannot vary between conditions",
    );
}

#[test]
fn duplicate_condition_names() {
    let text = format!(
        "{BASE}\n[[conditions]]\nname = \"a\"\nloader.workers = 0\n\n[[conditions]]\nname = \"a\"\nloader.workers = 2\n"
    );
    rejects(
        &text,
        14,
        "conditions[1].name",
        "duplicate condition name \"a\"",
    );
}

#[test]
fn condition_override_of_wrong_type() {
    let text = format!("{BASE}\n[[conditions]]\nname = \"a\"\nloader.workers = true\n");
    rejects(&text, 11, "conditions[0].loader.workers", "found true");
}

#[test]
fn matrix_and_conditions_together() {
    let text = format!(
        "{BASE}\n[matrix]\n\"loader.workers\" = [0, 2]\n\n[[conditions]]\nname = \"a\"\nloader.workers = 0\n"
    );
    rejects(&text, 9, "matrix", "not both");
}

#[test]
fn baseline_naming_no_condition() {
    rejects(
        &format!(
            "{BASE}\n[matrix]\n\"loader.workers\" = [0, 2]\n[report]\nbaseline = \"workers=4\"\n"
        ),
        12,
        "report.baseline",
        "\"workers=0\", \"workers=2\"",
    );
}

#[test]
fn bad_set_key_is_named_as_set() {
    rejects_with(
        BASE,
        &["--set", "loader.wrkers=2"],
        &[],
        "--set loader.wrkers=2",
        "loader.wrkers",
        "did you mean `workers`",
    );
}

#[test]
fn bad_set_value_is_named_as_set() {
    rejects_with(
        BASE,
        &["--set", "loader.batch_size=0"],
        &[],
        "--set loader.batch_size=0",
        "loader.batch_size",
        "at least 1",
    );
    rejects_with(
        BASE,
        &["--set", "loader.shuffle=maybe"],
        &[],
        "--set loader.shuffle=maybe",
        "loader.shuffle",
        "true or false",
    );
}

#[test]
fn set_without_equals() {
    rejects_with(
        BASE,
        &["--set", "loader.workers"],
        &[],
        "--set loader.workers",
        "",
        "expected key.path=value",
    );
}

#[test]
fn bad_env_value_is_named_as_env() {
    rejects_with(
        BASE,
        &[],
        &[("LOADERLAB_LOADER__WORKERS", "many")],
        "environment variable LOADERLAB_LOADER__WORKERS",
        "loader.workers",
        "found \"many\"",
    );
    rejects_with(
        BASE,
        &[],
        &[("LOADERLAB_LOADR__WORKERS", "2")],
        "environment variable LOADERLAB_LOADR__WORKERS",
        "loadr",
        "did you mean `loader`",
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = format!(
        "{BASE}\n[loader]\nworker = 4\nbatch_size = \"big\"\n[protocol]\nrounds = 0\ntimed_step = 3\n"
    );
    let stderr = rejects(&text, 10, "loader.worker", "did you mean");
    for needle in ["loader.batch_size", "protocol.timed_step"] {
        assert!(stderr.contains(needle), "{needle} missing from:\n{stderr}");
    }
    assert!(stderr.contains("problems"), "{stderr}");
}

#[test]
fn missing_file_is_a_clear_error() {
    let out = loaderlab()
        .args(["validate", "no/such/file.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read experiment file no/such/file.toml"),
        "{stderr}"
    );
}

#[test]
fn run_with_invalid_file_fails_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), &format!("{BASE}\n[loader]\nworkers = -3\n"));
    let out = loaderlab().arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(":10:"));
}

fn plan_json(text: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), text);
    let mut cmd = loaderlab();
    cmd.arg("plan")
        .arg(&file)
        .args(["--format", "json"])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn precedence_default_file_env_set() {
    let batch = |v: &Value| {
        v["conditions"][0]["config"]["loader"]["batch_size"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(batch(&plan_json(BASE, &[], &[])), 256, "built-in default");
    let file = format!("{BASE}\n[loader]\nbatch_size = 64\n");
    assert_eq!(batch(&plan_json(&file, &[], &[])), 64, "file over default");
    let env = [("LOADERLAB_LOADER__BATCH_SIZE", "32")];
    assert_eq!(batch(&plan_json(&file, &[], &env)), 32, "env over file");
    let set = ["--set", "loader.batch_size=16"];
    assert_eq!(batch(&plan_json(&file, &set, &env)), 16, "--set over env");
    // Later --set wins over earlier.
    let two = [
        "--set",
        "loader.batch_size=16",
        "--set",
        "loader.batch_size=8",
    ];
    assert_eq!(batch(&plan_json(&file, &two, &env)), 8);
}

#[test]
fn set_can_replace_a_matrix_axis() {
    let text = format!("{BASE}\n[matrix]\n\"loader.workers\" = [0, 4]\n");
    let plan = plan_json(&text, &["--set", "matrix.loader.workers=[0,1,2]"], &[]);
    let names: Vec<&str> = plan["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["workers=0", "workers=1", "workers=2"]);
}

fn run_order(order: &str) -> Vec<(u64, u64, String)> {
    let text = format!(
        "{BASE}\n[protocol]\nrounds = 3\norder = \"{order}\"\n[matrix]\n\"loader.workers\" = [0, 4]\n\"loader.batch_size\" = [64, 128]\n"
    );
    let plan = plan_json(&text, &[], &[]);
    plan["runs"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            assert_eq!(r["index"].as_u64().unwrap(), i as u64);
            (
                r["round"].as_u64().unwrap(),
                r["position"].as_u64().unwrap(),
                r["condition"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn order_fixed_alternate_shuffled() {
    let names = [
        "workers=0,batch_size=64",
        "workers=0,batch_size=128",
        "workers=4,batch_size=64",
        "workers=4,batch_size=128",
    ];
    let fixed = run_order("fixed");
    assert_eq!(fixed.len(), 12);
    for (i, (round, position, name)) in fixed.iter().enumerate() {
        assert_eq!(*round, (i / 4) as u64);
        assert_eq!(*position, (i % 4) as u64);
        assert_eq!(name, names[i % 4]);
    }
    let alternate = run_order("alternate");
    for (i, (round, _, name)) in alternate.iter().enumerate() {
        let expected = if *round == 1 {
            names[3 - i % 4]
        } else {
            names[i % 4]
        };
        assert_eq!(name, expected);
    }
    let shuffled = run_order("shuffled");
    assert_eq!(
        shuffled,
        run_order("shuffled"),
        "reproducible from the seed"
    );
    for round in 0..3 {
        let mut in_round: Vec<&str> = shuffled
            .iter()
            .filter(|r| r.0 == round)
            .map(|r| r.2.as_str())
            .collect();
        in_round.sort();
        let mut all = names.to_vec();
        all.sort();
        assert_eq!(in_round, all, "each round runs every condition once");
    }
    assert_ne!(
        shuffled.iter().map(|r| &r.2).collect::<Vec<_>>(),
        fixed.iter().map(|r| &r.2).collect::<Vec<_>>()
    );
}

#[test]
fn plan_json_has_the_documented_shape() {
    let plan = plan_json(
        &format!("{BASE}\n[matrix]\n\"loader.workers\" = [0, 4]\n"),
        &[],
        &[],
    );
    assert_eq!(plan["experiment"]["name"], "t");
    assert_eq!(plan["experiment"]["seed"], 42);
    let c = &plan["conditions"][1];
    assert_eq!(c["name"], "workers=4");
    assert_eq!(c["overrides"]["loader.workers"], 4);
    assert_eq!(c["config"]["loader"]["workers"], 4);
    assert_eq!(c["config"]["transforms"][0]["op"], "random_resized_crop");
    assert_eq!(plan["runs"][1]["condition"], "workers=4");
}

#[test]
fn every_shipped_experiment_is_valid() {
    let mut files: Vec<PathBuf> = std::fs::read_dir("experiments")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2);
    loaderlab().arg("validate").args(&files).assert().success();
}

#[test]
fn seed_experiment_plans_the_seed_protocol() {
    let out = loaderlab()
        .args([
            "plan",
            "experiments/dataloader_workers.toml",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs: Vec<&str> = plan["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["condition"].as_str().unwrap())
        .collect();
    assert_eq!(
        runs,
        [
            "workers=0",
            "workers=4",
            "workers=4",
            "workers=0",
            "workers=0",
            "workers=4"
        ]
    );
    let c = &plan["conditions"][0]["config"];
    assert_eq!(c["loader"]["batch_size"], 256);
    // The protocol is the experiment's, once; no condition carries a copy.
    let p = &plan["experiment"]["protocol"];
    assert_eq!(p["warmup_steps"], 40);
    assert_eq!(p["timed_steps"], 100);
    assert_eq!(p["profile_steps"], 20);
    assert!(
        c.get("protocol").is_none() && c.get("report").is_none(),
        "{c}"
    );
    assert_eq!(c["transforms"][0]["scale"], serde_json::json!([0.75, 1.0]));
    assert_eq!(c["transforms"][1]["degrees"], 15.0);
}

/// `bench FILE` measures every figure it names: the chain, the loader at 0, 1 and 2 workers,
/// the speed-up, and the machine's two ceilings beside it, each a finite positive median of the
/// requested repetitions. (Timing itself is not checked here: this machine's speed drifts.)
#[test]
fn bench_reports_the_chain_the_loader_and_the_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        &format!("{BASE}\n[loader]\nbatch_size = 128\nworkers = 4\n"),
    );
    let out = loaderlab()
        .arg("bench")
        .arg(&file)
        .args(["--repeat", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "transform chain, 1 thread",
        "loader, workers = 0 (no training)",
        "loader, workers = 1 (no training)",
        "loader, workers = 2 (no training)",
        "loader speed-up, workers = 2 / workers = 0",
        "same batches, 2 threads / 1, no hand-off",
        "loader speed-up / that ceiling",
        "same batches, 1 thread, no hand-off",
        "same batches, 2 threads, no hand-off",
        "same, waking a consumer each batch (least hand-off)",
        "loader speed-up / that ",
        "arithmetic only, 2 threads / 1 (the cores)",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name:?} line in:\n{stdout}"));
        assert!(line.ends_with("n = 2)"), "{line}");
        // The median is the last number before "(min".
        let head = line.split(" (min").next().unwrap();
        let median = head
            .split_whitespace()
            .rev()
            .find_map(|t| t.parse::<f64>().ok())
            .unwrap();
        assert!(median.is_finite() && median > 0.0, "{line}");
    }
}

#[test]
fn a_number_too_large_for_any_setting_names_its_key() {
    // BASE is lines 1–8; [loader] is line 9, the value line 10.
    let text = format!("{BASE}\n[loader]\nworkers = 99999999999999999999\n");
    rejects(&text, 10, "loader.workers", "too large");
}

#[test]
fn range_problems_come_with_type_and_unknown_key_problems_of_the_same_file() {
    // One type problem, one unknown key, two range problems: all four in one pass.
    let text = format!(
        "{BASE}\n[loader]\nworkers = \"four\"\nbatch_size = 0\nprefetch = 2\n\n[protocol]\nrounds = 0\n"
    );
    let stderr = rejects(&text, 10, "loader.workers", "expected an integer");
    for (line, key) in [
        (":11:", "loader.batch_size"),
        (":12:", "loader.prefetch"),
        (":15:", "protocol.rounds"),
    ] {
        assert!(
            stderr.lines().any(|l| l.contains(line) && l.contains(key)),
            "{key} at {line} missing from:\n{stderr}"
        );
    }
    assert!(stderr.contains("(4 problems)"), "{stderr}");
}

#[test]
fn normalize_needs_one_value_per_channel_of_the_data() {
    let text = format!(
        "{BASE}channels = 3\n\n[[transforms]]\nop = \"to_tensor\"\n[[transforms]]\nop = \"normalize\"\nmean = [0.5]\nstd = [0.5, 0.5, 0.5]\n"
    );
    rejects(&text, 14, "transforms[1].mean", "(3 channels), found 1");
}

#[test]
fn normalize_without_mean_and_std_names_the_op_in_the_file() {
    // Line 11 is the normalize op's `[[transforms]]`; the values it lacks are named, with an
    // example of the right length.
    let text =
        format!("{BASE}\n[[transforms]]\nop = \"to_tensor\"\n[[transforms]]\nop = \"normalize\"\n");
    let stderr = rejects(
        &text,
        11,
        "transforms[1].mean",
        "missing: normalize needs `mean`",
    );
    assert!(stderr.contains("mean = [0.5]"), "{stderr}");
    assert!(
        stderr.contains(":11:1: transforms[1].std: missing"),
        "{stderr}"
    );
    assert!(!stderr.contains("built-in default"), "{stderr}");
}

#[test]
fn random_crop_larger_than_the_image_is_refused() {
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"random_crop\"\nsize = 40\n[[transforms]]\nop = \"to_tensor\"\n"
    );
    rejects(&text, 11, "transforms[0].size", "larger than the image");
}

#[test]
fn padding_mode_suggests_the_word() {
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"random_crop\"\npadding_mode = \"reflekt\"\n[[transforms]]\nop = \"to_tensor\"\n"
    );
    rejects(
        &text,
        11,
        "transforms[0].padding_mode",
        "did you mean \"reflect\"",
    );
}

#[test]
fn size_is_a_number_or_height_and_width() {
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"center_crop\"\nsize = \"big\"\n[[transforms]]\nop = \"to_tensor\"\n"
    );
    rejects(
        &text,
        11,
        "transforms[0].size",
        "a number of pixels or [height, width]",
    );
    // Both forms, and padding as one number, as torchvision takes them.
    let dir = tempfile::tempdir().unwrap();
    let ok = format!(
        "{BASE}size = [36, 30]\nchannels = 3\n\n[[transforms]]\nop = \"random_crop\"\nsize = [24, 20]\npadding = 4\n\
         [[transforms]]\nop = \"resize\"\nsize = 16\nmax_size = 30\n[[transforms]]\nop = \"color_jitter\"\n\
         brightness = 0.4\nhue = 0.1\n[[transforms]]\nop = \"random_grayscale\"\n[[transforms]]\n\
         op = \"to_tensor\"\n"
    );
    let file = write(dir.path(), &ok);
    loaderlab().arg("validate").arg(&file).assert().success();
}

#[test]
fn image_folder_chain_must_reach_one_size() {
    let text = "[dataset]\nkind = \"image_folder\"\nroot = \"imgs\"\n\n[[transforms]]\nop = \"random_horizontal_flip\"\n[[transforms]]\nop = \"to_tensor\"\n";
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), text);
    let out = loaderlab().arg("validate").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("differ in size") && stderr.contains("random_horizontal_flip → to_tensor"),
        "{stderr}"
    );
}

#[test]
fn not_a_number_is_refused_where_a_range_is_checked() {
    // TOML writes NaN as `nan`; a comparison with it is false, so each check must fail on it.
    for (op, key) in [
        ("random_rotation", "degrees"),
        ("color_jitter", "brightness"),
    ] {
        let text = format!(
            "{BASE}\n[[transforms]]\nop = \"{op}\"\n{key} = nan\n[[transforms]]\nop = \"to_tensor\"\n"
        );
        rejects(&text, 11, &format!("transforms[0].{key}"), "expected");
    }
    let text = format!(
        "{BASE}\n[[transforms]]\nop = \"to_tensor\"\n[[transforms]]\nop = \"normalize\"\nmean = [nan]\nstd = [nan]\n"
    );
    rejects(&text, 14, "transforms[1].std", "expected finite values > 0");
}

/// `check-transforms` runs torchvision's side in Python: an interpreter without loaderlab and
/// torchvision is named, with what to install; a bad condition is the file's problem (exit 2).
#[test]
fn check_transforms_names_the_interpreter_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), BASE);
    let out = loaderlab()
        .args(["check-transforms"])
        .arg(&file)
        .env("LOADERLAB_PYTHON", "/bin/false")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/bin/false cannot import loaderlab and torchvision")
            && stderr.contains("pip install loaderlab torchvision"),
        "{stderr}"
    );
    let out = loaderlab()
        .args(["check-transforms", "--condition", "nope"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--condition"));
}

/// `loaderlab watch` runs in Python: without loaderlab in the interpreter it names it and the
/// way out; without --out or a command it says what it needs.
#[test]
fn watch_names_the_interpreter_it_needs() {
    let out = loaderlab()
        .args(["watch", "--out", "runs/x", "--", "python3", "train.py"])
        .env("LOADERLAB_PYTHON", "/bin/false")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/bin/false cannot import loaderlab") && stderr.contains("pip install"),
        "{stderr}"
    );
    let out = loaderlab()
        .args(["watch", "--", "python3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--out DIR"));
    let out = loaderlab().args(["watch", "--out", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the command after --"));
}
