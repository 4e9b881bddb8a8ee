//! Statistics on hand-made results folders with known answers, and a snapshot of report.md.

use std::path::Path;

use loaderlab::analysis::{Effect, InputBound, LoaderVerdict, analyse};
use loaderlab::config::{Overrides, load_str};
use loaderlab::plan;
use loaderlab::results::{
    ComputeDevice, ConditionMeta, Environment, RUN_COLUMNS, Raw, RunMeta, STEP_COLUMNS,
};

/// Two conditions, three alternating rounds (positions: A 0,1,0; B 1,0,1).
const EXPERIMENT: &str = r#"
[experiment]
name = "handmade"
seed = 1
[dataset]
kind = "synthetic"
[protocol]
warmup_steps = 1
timed_steps = 4
rounds = 3
profile = false
[report]
charts = false
[matrix]
"loader.workers" = [0, 4]
"#;

/// Write a results folder: per run its img/s and its four steps' (batch_wait, compute) ms.
fn folder(dir: &Path, img_per_s: [f64; 6], steps: impl Fn(usize) -> [(f64, f64); 4]) {
    folder_of(dir, EXPERIMENT, |run| img_per_s[run], steps)
}

/// [`folder`] for any experiment text: per run (by index) its img/s and its steps.
fn folder_of(
    dir: &Path,
    text: &str,
    img_per_s: impl Fn(usize) -> f64,
    steps: impl Fn(usize) -> [(f64, f64); 4],
) {
    let exp = load_str(Path::new("handmade.toml"), text, &Overrides::default()).unwrap();
    let plan = plan::build(&exp);
    std::fs::write(dir.join("plan.json"), serde_json::to_string(&plan).unwrap()).unwrap();
    let meta = RunMeta {
        experiment: "handmade".into(),
        file: "handmade.toml".into(),
        command: "loaderlab handmade.toml".into(),
        started_unix_s: 0,
        finished_unix_s: 0,
        loaderlab_version: "0.1.0".into(),
        build_profile: "release".into(),
        build_opt_level: "3".into(),
        rustc: "rustc".into(),
        conditions: plan
            .conditions
            .iter()
            .map(|c| ConditionMeta {
                name: c.name.clone(),
                device: "cpu (2 threads)".into(),
                compute_device: ComputeDevice::Cpu,
                cpu_threads: 2,
                workers: c.config.loader.workers,
                dataset: "synthetic".into(),
                pin_memory: "not applicable on the CPU".into(),
                trace: None,
                profile_startup_ms: None,
                memory_pool: None,
                model: None,
                engine: Default::default(),
                stages: None,
                headroom: None,
                host: None,
            })
            .collect(),
        warnings: vec![],
        notices: vec![],
        interrupted: false,
        timing_note: "hand-made".into(),
        environment: Environment {
            cpu_model: "test cpu".into(),
            cores: 2,
            memory_gib: 1.0,
            os: "test os".into(),
            devices: vec!["cpu".into()],
            ..Default::default()
        },
        tasks: None,
    };
    std::fs::write(dir.join("run.json"), serde_json::to_string(&meta).unwrap()).unwrap();
    let mut runs = format!("{}\n", RUN_COLUMNS.join(","));
    let mut rows = format!("{}\n", STEP_COLUMNS.join(","));
    for r in &plan.runs {
        let ips = img_per_s(r.index);
        let images = 4 * 256;
        runs.push_str(&format!(
            "{},{},{},{},{},1.0,{:.9},{images},{ips:.6},cpu,false\n",
            r.index,
            loaderlab::results::csv_field(&r.condition),
            r.round,
            r.position,
            plan.conditions[r.condition_index].config.loader.workers,
            images as f64 / ips
        ));
        for (s, (wait, compute)) in steps(r.index).iter().enumerate() {
            rows.push_str(&format!(
                "{},{},{},{},{s},{wait},0.5,{compute},{},2.3,00000000000000{s:02},0,{}\n",
                r.index,
                loaderlab::results::csv_field(&r.condition),
                r.round,
                r.position,
                wait + 0.5 + compute,
                0.5 + compute
            ));
        }
    }
    std::fs::write(dir.join("runs.csv"), runs).unwrap();
    std::fs::write(dir.join("steps.csv"), rows).unwrap();
    std::fs::write(dir.join("config.resolved.toml"), text).unwrap();
}

/// [`EXPERIMENT`] with a 10 ms stand-in step and `matrix` for its matrix.
fn stand_in_matrix(matrix: &str) -> String {
    EXPERIMENT
        .replace("\"loader.workers\" = [0, 4]", matrix)
        .replace(
            "[protocol]",
            "[model]\nkind = \"stand_in\"\nstep_ms = 10\n[protocol]",
        )
}

/// img/s by run index for (A rounds 0,1,2; B rounds 0,1,2) in plan order A,B,B,A,A,B.
fn by_plan(a: [f64; 3], b: [f64; 3]) -> [f64; 6] {
    [a[0], b[0], b[1], a[1], a[2], b[2]]
}

#[test]
fn known_speedup_percentiles_and_shares() {
    let dir = tempfile::tempdir().unwrap();
    folder(
        dir.path(),
        by_plan([100.0, 110.0, 90.0], [400.0, 420.0, 380.0]),
        |run| {
            if [0, 3, 4].contains(&run) {
                [(10.0, 5.0), (20.0, 5.0), (30.0, 5.0), (40.0, 5.0)]
            } else {
                [(0.1, 5.0); 4]
            }
        },
    );
    let a = analyse(&Raw::load(dir.path()).unwrap()).unwrap();
    assert_eq!(a.baseline, "workers=0");
    let base = &a.conditions[0];
    assert_eq!(base.img_per_s.point, 100.0);
    assert_eq!((base.img_per_s_min, base.img_per_s_max), (90.0, 110.0));
    // Pooled batch_wait of 3 runs × [10, 20, 30, 40]: median 25, p95 = 40 (linear).
    assert_eq!(base.batch_wait_p50_ms, 25.0);
    assert!((base.batch_wait_p95_ms - 40.0).abs() < 1e-9);
    // Waiting share: 100 ms of (100 + 4 × 0.5 + 20) ms per run.
    assert!((base.wait_share - 100.0 / 122.0).abs() < 1e-9);
    // Device idle: 4 steps × 5.5 ms busy in a window of 1024 images / (100 img/s) = 10.24 s.
    let run0 = a.runs.iter().find(|r| r.run == 0).unwrap();
    assert!((run0.device_idle - (1.0 - 22.0 / 10_240.0)).abs() < 1e-9);
    // The condition's figure is the median over its runs (90, 100, 110 img/s).
    assert!((base.device_idle_median - (1.0 - 22.0 / 10_240.0)).abs() < 1e-9);
    assert_eq!(base.device_clock, "host timers (CPU)");
    let s = a.conditions[1].speedup.as_ref().unwrap();
    assert_eq!(s.ratio.point, 4.0);
    assert!(
        s.ratio.low >= 380.0 / 110.0 - 1e-9 && s.ratio.high <= 420.0 / 90.0 + 1e-9,
        "{s:?}"
    );
    assert!(s.ratio.low <= 4.0 && 4.0 <= s.ratio.high && s.beyond_noise);
    assert_eq!(
        s.paired,
        vec![(0, 4.0), (1, 420.0 / 110.0), (2, 380.0 / 90.0)]
    );
    assert!(a.determinism.identical);
    // The judgement is made in analysis, with its thresholds: 82 % waiting ≥ 50 %.
    assert_eq!(base.judgement.loader, LoaderVerdict::Bottleneck);
    assert_eq!(base.judgement.thresholds.bottleneck_wait_share, 0.5);
    // TensorFlow Profiler's classes, against the [report] thresholds (defaults 20 % and 5 %).
    assert_eq!(base.judgement.input_bound, InputBound::Highly);
    assert_eq!(base.judgement.thresholds.highly_input_bound, 0.2);
    assert_eq!(base.judgement.thresholds.moderately_input_bound, 0.05);
    assert_eq!(a.conditions[1].judgement.loader, LoaderVerdict::KeptUp);
    let verdict = loaderlab::report::verdict(&a, &Raw::load(dir.path()).unwrap().meta);
    assert!(
        verdict.contains("| `workers=4` | 400 | 4.00× (") && verdict.contains("| faster |"),
        "{verdict}"
    );
    assert!(
        verdict.contains(
            "| `workers=0` | 100 | baseline | – | highly (82 % waiting share) | bottleneck |"
        ),
        "{verdict}"
    );
}

#[test]
fn identical_conditions_give_a_ci_containing_one() {
    let dir = tempfile::tempdir().unwrap();
    folder(
        dir.path(),
        by_plan([100.0, 110.0, 90.0], [105.0, 95.0, 100.0]),
        |_| [(1.0, 5.0); 4],
    );
    let a = analyse(&Raw::load(dir.path()).unwrap()).unwrap();
    let s = a.conditions[1].speedup.as_ref().unwrap();
    assert!(
        s.ratio.low < 1.0 && s.ratio.high > 1.0 && !s.beyond_noise,
        "{s:?}"
    );
    assert!(
        loaderlab::report::verdict(&a, &Raw::load(dir.path()).unwrap().meta)
            .contains("no difference beyond noise")
    );
    // The headline says so too, with the ratio's CI.
    let headline = loaderlab::report::headline(&a);
    assert!(
        headline.contains("shows no difference beyond noise") && headline.contains("95 % CI"),
        "{headline}"
    );
}

#[test]
fn a_planted_order_effect_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    // workers=0 runs fast in first position (rounds 0 and 2), slow in second (round 1).
    folder(
        dir.path(),
        by_plan([200.0, 150.0, 202.0], [300.0, 301.0, 299.0]),
        |_| [(1.0, 5.0); 4],
    );
    let a = analyse(&Raw::load(dir.path()).unwrap()).unwrap();
    let o = &a.conditions[0].order_effect;
    assert_eq!(o.first_median_img_per_s, Some(201.0));
    assert_eq!(o.later_median_img_per_s, Some(150.0));
    assert!(o.flagged, "{o:?}");
    assert!(!a.conditions[1].order_effect.flagged);
    assert!(
        a.warnings
            .iter()
            .any(|w| w.starts_with("order effect in workers=0")),
        "{:?}",
        a.warnings
    );
}

#[test]
fn differing_fingerprints_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), by_plan([100.0; 3], [100.0; 3]), |_| {
        [(1.0, 5.0); 4]
    });
    let steps = std::fs::read_to_string(dir.path().join("steps.csv")).unwrap();
    // Run 3 (workers=0, round 1) saw a different second batch.
    let tampered: String = steps
        .lines()
        .map(|l| {
            if l.starts_with("3,") && l.contains(",1,") && l.contains("0000000000000001") {
                l.replace("0000000000000001", "00000000000000ff")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.path().join("steps.csv"), tampered + "\n").unwrap();
    let a = analyse(&Raw::load(dir.path()).unwrap()).unwrap();
    assert!(!a.determinism.identical);
    assert_eq!(
        a.determinism.inconsistent_conditions,
        vec!["workers=0".to_string()]
    );
    assert!(a.warnings.iter().any(|w| w.contains("fingerprints differ")));
}

#[test]
fn report_md_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    folder(
        dir.path(),
        by_plan([9798.0, 9650.0, 9900.0], [42921.0, 43010.0, 42500.0]),
        |run| {
            if [0, 3, 4].contains(&run) {
                [(35.9, 1.2), (36.1, 1.1), (35.7, 1.3), (36.0, 1.2)]
            } else {
                [(0.1, 5.8), (0.12, 5.9), (16.6, 5.7), (0.11, 5.8)]
            }
        },
    );
    loaderlab::report::build(dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    insta::assert_snapshot!(md);
    // And the folder verifies.
    let checks = loaderlab::commands::verify::verify(dir.path());
    assert!(checks.iter().all(|c| c.ok), "{checks:?}");
}

/// `[report] framework_step_ms`: a trainer slower than the user's framework is called
/// framework-bound next to the ceiling; one within 20 % stands for it.
#[test]
fn a_framework_step_is_set_beside_ours() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), by_plan([1000.0; 3], [1000.0; 3]), |_| {
        [(1.0, 2.0); 4]
    });
    for (framework_ms, bound) in [(0.5, true), (2.4, false), (0.0, false)] {
        let mut raw = Raw::load(dir.path()).unwrap();
        raw.plan.experiment.report.framework_step_ms = framework_ms;
        let a = analyse(&raw).unwrap();
        let verdict = loaderlab::report::verdict(&a, &raw.meta);
        if framework_ms == 0.0 {
            assert!(a.framework.is_none());
            assert!(!verdict.contains("framework_step_ms"), "{verdict}");
            continue;
        }
        // The device column is h2d + compute = 0.5 + 2.0 ms.
        let f = a.framework.unwrap();
        assert_eq!((f.ours_ms, f.framework_ms), (2.5, framework_ms));
        assert_eq!(f.bound(), bound);
        assert_eq!(
            verdict.contains("framework-bound, 5.00× slower"),
            bound,
            "{verdict}"
        );
        assert_eq!(
            verdict.contains("stand for your job's"),
            !bound,
            "{verdict}"
        );
    }
}

/// A matrix over both engines: the headline says what switching to loaderlab's loader would
/// buy, with its CI, and the fewest native workers that keep up with the DataLoader's best.
#[test]
fn a_two_engine_matrix_says_what_switching_would_buy() {
    let text = stand_in_matrix(
        "\"loader.engine\" = [\"pytorch\", \"native\"]\n\"loader.workers\" = [0, 2]",
    );
    let exp = load_str(Path::new("handmade.toml"), &text, &Overrides::default()).unwrap();
    let plan = plan::build(&exp);
    let dir = tempfile::tempdir().unwrap();
    // The DataLoader: 3,000 img/s at 0 workers, 6,000 at 2; ours 25,000 at either, with a
    // little spread by round.
    let ips = |run: usize| {
        let r = &plan.runs[run];
        let base = match r.condition.as_str() {
            "engine=pytorch,workers=0" => 3000.0,
            "engine=pytorch,workers=2" => 6000.0,
            _ => 25_000.0,
        };
        base * (1.0 + 0.01 * r.round as f64)
    };
    folder_of(dir.path(), &text, ips, |_| [(1.0, 5.0); 4]);
    let a = analyse(&Raw::load(dir.path()).unwrap()).unwrap();
    let s = a
        .engine_switch
        .as_ref()
        .expect("both engines in the matrix");
    assert_eq!(s.pytorch_best, "engine=pytorch,workers=2");
    assert_eq!(
        s.native_same_workers.as_deref(),
        Some("engine=native,workers=2")
    );
    let r = s.speedup_same_workers.unwrap();
    assert!((r.point - 25.0 / 6.0).abs() < 1e-9, "{r:?}");
    assert!(r.low <= r.point && r.point <= r.high);
    assert_eq!(s.fewest_native_workers, Some(0));
    let headline = loaderlab::report::headline(&a);
    assert!(
        headline.contains(
            "Switching to loaderlab's loader: at the same 2 workers, engine=native,workers=2 \
             trains 4.17× as fast as the PyTorch DataLoader's best, engine=pytorch,workers=2 at \
             6,060 img/s (95 % CI"
        ),
        "{headline}"
    );
    assert!(
        headline.contains("0 native workers already keep up with it"),
        "{headline}"
    );
    // The baseline is the DataLoader (the first condition) and ours is faster beyond noise:
    // the change as code, at the fewest native workers that keep up.
    let code = s.adopt.as_ref().expect("the change as code");
    assert_eq!(code.yours, "engine=pytorch,workers=0");
    assert_eq!(code.native, "engine=native,workers=0");
    assert!(
        code.dataloader
            .contains("batch_size=256, shuffle=True, num_workers=0,"),
        "{}",
        code.dataloader
    );
    assert!(code.loader.contains("workers=0,"), "{}", code.loader);
    let from_experiment =
        r#"loaderlab.Loader.from_experiment("handmade.toml", "engine=native,workers=0")"#;
    assert!(code.from_experiment.ends_with(from_experiment));
    assert!(
        headline.contains(&format!(
            "In code: replace your DataLoader with {from_experiment}"
        )),
        "{headline}"
    );
    // One engine: no such line.
    let one = tempfile::tempdir().unwrap();
    folder(
        one.path(),
        by_plan([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]),
        |_| [(1.0, 5.0); 4],
    );
    let a = analyse(&Raw::load(one.path()).unwrap()).unwrap();
    assert!(a.engine_switch.is_none());
    assert!(!loaderlab::report::headline(&a).contains("Switching"));
}

/// A step × workers matrix (a stand-in of 10 and of 40 ms, 0, 1 and 2 workers): two groups,
/// each compared against its own baseline, never across; a 0.05 % gain is "no practical
/// difference"; the Verdict is tables and short bullets; every figure has at most three
/// significant figures; and the folder verifies.
#[test]
fn a_step_by_workers_matrix_is_compared_within_each_step() {
    let text = stand_in_matrix("\"model.step_ms\" = [10, 40]\n\"loader.workers\" = [0, 1, 2]")
        .replace(
            "charts = false",
            "charts = false\nbaseline = \"step_ms=10,workers=1\"",
        );
    let exp = load_str(Path::new("handmade.toml"), &text, &Overrides::default()).unwrap();
    let plan = plan::build(&exp);
    let dir = tempfile::tempdir().unwrap();
    // At 10 ms: 1 worker doubles the rate of 0, 2 add 0.05 %. At 40 ms: the step hides the
    // loader.
    let ips = |run: usize| {
        let r = &plan.runs[run];
        let base = match r.condition.as_str() {
            "step_ms=10,workers=0" => 12_000.0,
            "step_ms=10,workers=1" => 24_000.0,
            "step_ms=10,workers=2" => 24_012.0,
            _ => 6_000.0,
        };
        base * (1.0 + 0.001 * r.round as f64)
    };
    folder_of(dir.path(), &text, ips, |run| {
        if plan.runs[run].condition == "step_ms=10,workers=0" {
            [(10.0, 10.0); 4]
        } else {
            [(0.01, 10.0); 4]
        }
    });
    loaderlab::report::build(dir.path()).unwrap();
    let a = analyse(&Raw::load(dir.path()).unwrap()).unwrap();
    assert_eq!(a.groups.len(), 2, "{:?}", a.groups);
    for (g, step) in a.groups.iter().zip(["10", "40"]) {
        assert_eq!(g.label, format!("step_ms={step}"));
        // The [report] baseline's loader settings (1 worker) pick each group's baseline.
        assert_eq!(g.baseline, format!("step_ms={step},workers=1"));
        for name in &g.conditions {
            let c = a.summary(name).unwrap();
            match &c.speedup {
                Some(s) => assert_eq!(s.against, g.baseline, "{name}"),
                None => assert_eq!(name, &g.baseline),
            }
        }
    }
    let effect = |name: &str| a.summary(name).unwrap().speedup.as_ref().unwrap().effect;
    assert_eq!(effect("step_ms=10,workers=0"), Effect::Slower);
    assert_eq!(
        effect("step_ms=40,workers=0"),
        Effect::NoPracticalDifference
    );
    // 1.0005 in every round, the rounds 0.1 % apart: the whole CI within 2 % of 1.
    assert_eq!(
        effect("step_ms=10,workers=2"),
        Effect::NoPracticalDifference
    );
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    // No ratio across groups anywhere: every step_ms=40 row is against step_ms=40's baseline.
    for line in md.lines().filter(|l| l.starts_with("| `step_ms=40")) {
        assert!(!line.contains("step_ms=10"), "{line}");
    }
    assert!(!md.contains("slower than"), "no cross-group 'slower'");
    let verdict = section(&md, "## Verdict");
    assert!(
        verdict.contains("| condition | img/s (median) |"),
        "{verdict}"
    );
    assert!(
        verdict.contains(
            "| `step_ms=10,workers=2` | 24,036 | 1.00× (0.999×–1.00×) | no practical difference |"
        ),
        "{verdict}"
    );
    for paragraph in verdict.split("\n").filter(|l| !l.starts_with('|')) {
        let words = paragraph.split_whitespace().count();
        assert!(words <= 80, "{words} words: {paragraph}");
    }
    // The headline: one clause per group.
    let headline = loaderlab::report::headline(&a);
    assert!(
        headline.starts_with("At step_ms=10: step_ms=10,workers=1 is ")
            && headline.contains(". At step_ms=40: step_ms=40,workers=1 is "),
        "{headline}"
    );
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    for (name, text) in [("report.md", &md), ("report.html", &html)] {
        let wide = too_precise(text);
        assert!(wide.is_empty(), "{name}: {wide:?}");
    }
    let checks = loaderlab::commands::verify::verify(dir.path());
    assert!(checks.iter().all(|c| c.ok), "{checks:?}");
}

/// The markdown section opened by `heading`, up to the next `## `.
fn section<'a>(md: &'a str, heading: &str) -> &'a str {
    let start = md.find(heading).expect("the section");
    let rest = &md[start + heading.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// Decimal figures with more than three significant figures, outside code spans, tags and
/// the Reproduce section (versions, commands). Whole numbers (img/s to the unit, counts) may
/// be as wide as they are.
fn too_precise(text: &str) -> Vec<String> {
    let body = text.split("Reproduce").next().unwrap_or(text);
    let mut plain = String::new();
    let (mut in_code, mut in_tag) = (false, false);
    for ch in body.chars() {
        match ch {
            '`' => in_code = !in_code,
            '<' => {
                in_tag = true;
                plain.push(' ');
            }
            '>' if in_tag => in_tag = false,
            _ if in_code || in_tag => {}
            c => plain.push(c),
        }
    }
    plain
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == ',' || c == '_'))
        .map(|t| t.trim_end_matches(['.', ',']))
        .filter(|t| t.starts_with(|c: char| c.is_ascii_digit()))
        .filter(|t| {
            t.chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == ',')
        })
        .filter(|t| t.matches('.').count() == 1)
        .filter(|t| {
            let digits: String = t.chars().filter(|c| c.is_ascii_digit()).collect();
            digits.trim_start_matches('0').len() > 3
        })
        .map(str::to_string)
        .collect()
}
