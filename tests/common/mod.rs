//! Shared by the integration tests that drive the binary.

use assert_cmd::Command;

/// The built `loaderlab`, with no `LOADERLAB_*` override leaking in from the environment.
pub fn loaderlab() -> Command {
    let mut cmd = Command::cargo_bin("loaderlab").unwrap();
    for (k, _) in std::env::vars() {
        if k.starts_with("LOADERLAB_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Say that a test could not run here and why; under `CI=true` (where `.ci/run` installs what
/// every test needs) a skip is a failure, so no test passes by being absent. Not every test
/// binary uses it.
#[allow(dead_code)]
pub fn skip(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true, and this test cannot run: {why}"
    );
    eprintln!("SKIPPED: {why}");
}

/// Wait until `csv` holds at least `rows` data rows (failing after `limit`), then send the child
/// SIGINT, as Ctrl-C in a terminal does. Not every test binary uses it.
#[allow(dead_code)]
pub fn interrupt_after_rows(
    child: &std::process::Child,
    csv: &std::path::Path,
    rows: usize,
    limit: std::time::Duration,
) {
    let started = std::time::Instant::now();
    let data_rows =
        || std::fs::read_to_string(csv).map_or(0, |t| t.lines().count().saturating_sub(1));
    while data_rows() < rows {
        assert!(
            started.elapsed() < limit,
            "{} never reached {rows} rows",
            csv.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = std::process::Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Write `text` to `<dir>/<name>.toml`, run it into `<dir>/<name>` quietly, and return that
/// folder; a failed run fails the test with its stderr.
#[allow(dead_code)]
pub fn run_experiment(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    let out = dir.join(name);
    run_file(&file, &out, |_| {});
    out
}

/// Run the experiment `file` into `out` quietly, `with` adding to the command (a working
/// folder, the environment); a failed run fails the test with its stderr.
#[allow(dead_code)]
pub fn run_file(file: &std::path::Path, out: &std::path::Path, with: impl FnOnce(&mut Command)) {
    let mut cmd = loaderlab();
    with(&mut cmd);
    let output = cmd
        .arg(file)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One CSV line's fields (a quoted field may hold commas).
#[allow(dead_code)]
pub fn split_csv(line: &str) -> Vec<String> {
    let (mut fields, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}
