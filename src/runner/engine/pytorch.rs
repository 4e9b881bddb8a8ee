//! The pytorch engine's Rust side: one Python child per condition, started on the condition's
//! first run and kept for its others (each run builds a new DataLoader in it, so worker
//! start-up is measured per run, as the native engine's). The child is
//! [`pytorch_driver.py`](DRIVER); they speak one JSON object per line, typed by [`Reply`](super::replies)
//! (`deny_unknown_fields`: a field added on one side only is an error, not a silent default).
//!
//! Invariant: the child writes nothing in the results folder; its rows reach `steps.csv` and
//! `runs.csv` through the same writers as the native engine's.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::super::resources::Used;
use super::super::setup::Setup;
use super::super::timed::{Timed, Window, finish};
use super::super::{INTERRUPTED, Outputs, RunError};
use super::replies::{PROTOCOL, Reply};
use crate::config::{ProtocolSection, PytorchSection, Settings};
use crate::loader::StageTotals;
use crate::plan::PlannedRun;
use crate::results::HeadroomRecord;

/// The child's script: standard library + torch/torchvision.
pub const DRIVER: &str = include_str!("pytorch_driver.py");

/// loaderlab's networks in PyTorch (shared with `bench step`), written beside the driver.
const MODEL: &str = include_str!("../../net/pytorch_model.py");

/// The environment variable that names the interpreter when `[pytorch] python` is empty (not a
/// setting: the `LOADERLAB_*` layer leaves it out).
pub const PYTHON_VAR: &str = "LOADERLAB_PYTHON";

/// What the interpreter has: the versions result.json records.
#[derive(Debug, Clone, PartialEq)]
pub struct Versions {
    pub interpreter: String,
    pub python: String,
    pub torch: String,
    pub torchvision: String,
}

impl Versions {
    /// How the report names the engine.
    pub fn describe(&self) -> String {
        format!(
            "pytorch: torch.utils.data.DataLoader (torch {}, torchvision {}, Python {} at {})",
            self.torch, self.torchvision, self.python, self.interpreter
        )
    }
}

/// The interpreter a condition's child runs under: `[pytorch] python`, else `LOADERLAB_PYTHON`,
/// else `python3` on PATH.
pub fn interpreter(s: &PytorchSection) -> String {
    if !s.python.is_empty() {
        return s.python.clone();
    }
    std::env::var(PYTHON_VAR)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// Check that `python` runs and imports torch and torchvision (once per interpreter and
/// process: the import takes seconds); the error says which interpreter was tried, what it
/// lacked and how to point to another.
pub fn probe(python: &str) -> Result<Versions, String> {
    static SEEN: Mutex<Vec<(String, Result<Versions, String>)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, answer)) = seen.iter().find(|(p, _)| p == python) {
        return answer.clone();
    }
    let answer = ask(python);
    seen.push((python.to_string(), answer.clone()));
    answer
}

fn ask(python: &str) -> Result<Versions, String> {
    let how = format!(
        "set [pytorch] python = \"/path/to/python\" (or {PYTHON_VAR}) to an interpreter with torch \
         and torchvision (pip install torch torchvision)"
    );
    let script = driver_file().map_err(|e| format!("cannot write the pytorch driver: {e}"))?;
    let out = Command::new(python)
        .arg(&script)
        .arg("--versions")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start the Python interpreter {python:?}: {e}; {how}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let reply = text
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<Reply>(l).ok());
    match reply {
        Some(Reply::Ready {
            protocol,
            torch,
            torchvision,
            python: version,
        }) if protocol == PROTOCOL => Ok(Versions {
            interpreter: python.to_string(),
            python: version,
            torch,
            torchvision,
        }),
        Some(Reply::Error { message, .. }) => Err(format!(
            "the Python interpreter {python:?} cannot import torch and torchvision ({message}); \
             {how}"
        )),
        _ => Err(format!(
            "the Python interpreter {python:?} did not answer as the pytorch driver should \
             (exit {}, stderr: {}); {how}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 400)
        )),
    }
}

/// The driver, written once per process to a file Python can run (tracebacks then name it).
fn driver_file() -> std::io::Result<PathBuf> {
    static FILE: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut file = FILE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = file.as_ref().filter(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let dir = std::env::temp_dir().join(format!("loaderlab-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("pytorch_driver.py");
    std::fs::write(&path, DRIVER)?;
    std::fs::write(dir.join("pytorch_model.py"), MODEL)?;
    *file = Some(path.clone());
    Ok(path)
}

/// The end of `text`, at most `n` bytes (on a character boundary).
fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].trim()
}

/// A condition's child and what it has said.
pub struct Engine {
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<Option<String>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Where the raw images it reads were written (removed with the engine).
    data_dir: PathBuf,
    interrupted_sent: bool,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // A child that has already ended (Ctrl-C reached it between commands) is not written to:
        // a write to its closed pipe would end this process with SIGPIPE.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = writeln!(self.stdin, "{{\"cmd\": \"quit\"}}");
            let _ = self.stdin.flush();
        }
        // A child that does not leave within a moment is stopped.
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Engine {
    /// Start the child for `setup`'s condition and have it build the dataset.
    /// `experiment` is the experiment file (the `[pytorch]` references are relative to it).
    pub fn start(setup: &Setup, condition: &str, experiment: &Path) -> Result<Engine, RunError> {
        let python = interpreter(&setup.settings().pytorch);
        let failed = |message: String| RunError::Engine {
            condition: condition.to_string(),
            message,
        };
        let script = driver_file().map_err(|e| failed(format!("cannot write the driver: {e}")))?;
        let data_dir = script
            .parent()
            .unwrap_or(Path::new("."))
            .join(format!("data-{}", sanitize(condition)));
        let mut child = Command::new(&python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed(format!("cannot start {python:?}: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(failed("the child's pipes could not be opened".into()));
        };
        let (tx, replies) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(Some(line)).is_err() {
                    return;
                }
            }
            let _ = tx.send(None);
        });
        let kept = Arc::new(Mutex::new(VecDeque::new()));
        let sink = Arc::clone(&kept);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut k = sink.lock().unwrap_or_else(|e| e.into_inner());
                k.push_back(line);
                if k.len() > 20 {
                    k.pop_front();
                }
            }
        });
        let mut engine = Engine {
            child,
            stdin,
            replies,
            stderr: kept,
            data_dir,
            interrupted_sent: false,
        };
        match engine.next(condition)? {
            Reply::Ready { protocol, .. } if protocol == PROTOCOL => {}
            other => return Err(engine.unexpected(condition, "ready", other)),
        }
        let spec = super::handover::spec(setup, &engine.data_dir, experiment)?;
        engine.send(condition, &spec)?;
        match engine.next(condition)? {
            // Both engines read the same images: the same count, or the declared dataset is
            // not what the child found.
            // The user's own Dataset is theirs to size.
            Reply::Prepared { .. }
                if super::super::setup::users_dataset(setup.settings()).is_some() =>
            {
                Ok(engine)
            }
            Reply::Prepared { len } if len == setup.data.dataset.len() as u64 => Ok(engine),
            Reply::Prepared { len } => Err(RunError::Engine {
                condition: condition.to_string(),
                message: format!(
                    "torchvision's dataset holds {len} images where loaderlab's reader finds {} \
                     in {}",
                    setup.data.dataset.len(),
                    setup.settings().dataset.root
                ),
            }),
            other => Err(engine.unexpected(condition, "prepared", other)),
        }
    }

    fn send(&mut self, condition: &str, value: &serde_json::Value) -> Result<(), RunError> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Err(RunError::Engine {
                condition: condition.to_string(),
                message: format!("the Python child ended ({status}){}", self.stderr_tail()),
            });
        }
        writeln!(self.stdin, "{value}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| RunError::Engine {
                condition: condition.to_string(),
                message: format!("the child stopped reading: {e}{}", self.stderr_tail()),
            })
    }

    /// The child's next reply; Ctrl-C is passed on to it once (it then ends the window and
    /// sends the rows so far).
    fn next(&mut self, condition: &str) -> Result<Reply, RunError> {
        loop {
            if INTERRUPTED.load(Ordering::SeqCst) && !self.interrupted_sent {
                self.interrupted_sent = true;
                // SAFETY: kill(2) with the child's own pid and a valid signal number; it reads
                // no memory of ours.
                unsafe {
                    libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
                }
            }
            match self.replies.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(line)) => {
                    return serde_json::from_str(&line).map_err(|e| RunError::Engine {
                        condition: condition.to_string(),
                        message: format!("the child said {line:?}, which is not a reply: {e}"),
                    });
                }
                Ok(None) | Err(RecvTimeoutError::Disconnected) => {
                    let status = self
                        .child
                        .wait()
                        .map_or("unknown".into(), |s| s.to_string());
                    return Err(RunError::Engine {
                        condition: condition.to_string(),
                        message: format!("the Python child ended ({status}){}", self.stderr_tail()),
                    });
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn stderr_tail(&self) -> String {
        let k = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if k.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = k.iter().map(String::as_str).collect();
            format!("; its stderr ended with:\n{}", lines.join("\n"))
        }
    }

    fn unexpected(&self, condition: &str, wanted: &str, got: Reply) -> RunError {
        let message = match got {
            Reply::Error {
                at,
                message,
                traceback,
            } => format!("{at}: {message}\n{}", tail(&traceback, 1500)),
            other => format!("expected {wanted}, the child said {other:?}"),
        };
        RunError::Engine {
            condition: condition.to_string(),
            message,
        }
    }

    /// The profiled run in the child: `steps` steps under torch.profiler after `warmup`, its
    /// Chrome trace written to `trace`; the time to its first batch, and at 0 workers the
    /// loader's build time per batch on one thread as stage totals (the whole build, no stage
    /// split).
    pub(in crate::runner) fn profile(
        &mut self,
        condition: &str,
        warmup: u64,
        steps: u64,
        trace: &Path,
    ) -> Result<(f64, Option<StageTotals>), RunError> {
        self.send(
            condition,
            &serde_json::json!({"cmd": "profile", "warmup": warmup, "steps": steps, "trace": trace}),
        )?;
        match self.next(condition)? {
            Reply::Profiled(p) => Ok(p.totals()),
            other => Err(self.unexpected(condition, "profiled", other)),
        }
    }

    /// A headroom run in the child (the native engine's rule: the step on batches built once,
    /// replayed with no loader running); None when interrupted.
    pub(in crate::runner) fn headroom(
        &mut self,
        condition: &str,
        steps: u64,
    ) -> Result<Option<HeadroomRecord>, RunError> {
        self.send(
            condition,
            &serde_json::json!({"cmd": "headroom", "steps": steps}),
        )?;
        match self.next(condition)? {
            Reply::Headroom(record) => Ok((!INTERRUPTED.load(Ordering::SeqCst)).then_some(record)),
            other => Err(self.unexpected(condition, "headroom", other)),
        }
    }

    /// One timed run in the child: a new DataLoader, its start-up, the warm-up, the timed
    /// steps (written as they arrive) and the window's totals.
    pub(in crate::runner) fn timed(
        &mut self,
        planned: &PlannedRun,
        total_runs: usize,
        p: &ProtocolSection,
        setup: &Setup,
        out: &mut Outputs,
    ) -> Result<Timed, RunError> {
        let condition = planned.condition.as_str();
        let bar = out.reporter.progress(p.warmup_steps + p.timed_steps);
        bar.set_message(format!(
            "run {}/{total_runs} {condition} (round {}, pytorch engine)",
            planned.index + 1,
            planned.round
        ));
        self.send(
            condition,
            &serde_json::json!({"cmd": "run", "warmup": p.warmup_steps, "timed": p.timed_steps}),
        )?;
        // Ctrl-C may end the child before it answers (it was importing torch, say): the run
        // then ends interrupted, with the rows it sent.
        let stopped = |out: &mut Outputs| {
            let window = Window {
                startup_ms: f64::NAN,
                elapsed_s: 0.0,
                images: 0,
                interrupted: true,
                used: Used::NONE,
                resident: f64::NAN,
            };
            finish(planned, setup, window, out)
        };
        let startup_ms = match self.next(condition) {
            Ok(Reply::Started { startup_ms }) => startup_ms,
            Err(_) if INTERRUPTED.load(Ordering::SeqCst) => return stopped(out),
            Ok(other) => return Err(self.unexpected(condition, "started", other)),
            Err(e) => return Err(e),
        };
        loop {
            let reply = match self.next(condition) {
                Err(_) if INTERRUPTED.load(Ordering::SeqCst) => return stopped(out),
                reply => reply?,
            };
            match reply {
                Reply::Step(step) => {
                    out.step(&step.row(planned)?)?;
                    bar.inc(1);
                }
                Reply::Done {
                    elapsed_s,
                    images,
                    process_cpu_s,
                    workers_cpu_s,
                    training_cpu_s,
                    peak_rss_mib,
                    interrupted,
                } => {
                    bar.finish_and_clear();
                    let window = Window {
                        startup_ms,
                        elapsed_s,
                        images,
                        interrupted: interrupted || INTERRUPTED.load(Ordering::SeqCst),
                        used: Used {
                            process_cpu_s,
                            workers_cpu_s,
                            training_cpu_s,
                            peak_rss_mib,
                        },
                        resident: f64::NAN,
                    };
                    return finish(planned, setup, window, out);
                }
                // Ctrl-C can cut the child's answer short: what follows then ends the run.
                _ if INTERRUPTED.load(Ordering::SeqCst) => return stopped(out),
                other => return Err(self.unexpected(condition, "a step or done", other)),
            }
        }
    }
}

/// A condition name as a folder name.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Whether a condition's batches come from the pytorch engine.
pub fn runs(s: &Settings) -> bool {
    s.loader.engine == crate::config::Engine::Pytorch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_is_the_setting_then_the_variable_then_python3() {
        let set = PytorchSection {
            python: "/opt/py/bin/python".into(),
            ..Default::default()
        };
        assert_eq!(interpreter(&set), "/opt/py/bin/python");
    }

    /// An op says it has a twin exactly where the child's `twin()` maps it: validate's
    /// refusal and the child's mapping cannot drift apart.
    #[test]
    fn the_ops_with_a_twin_are_the_ones_the_child_maps() {
        for t in crate::config::TransformSpec::all() {
            let name = t.op_name();
            let mapped = DRIVER.contains(&format!("if op == \"{name}\":"));
            assert_eq!(t.op().pytorch_twin(), mapped, "{name}");
        }
    }

    #[test]
    fn a_missing_interpreter_is_named_with_the_way_out() {
        let e = probe("/no/such/python3").unwrap_err();
        assert!(e.contains("\"/no/such/python3\""), "{e}");
        assert!(e.contains("[pytorch] python"), "{e}");
    }
}
