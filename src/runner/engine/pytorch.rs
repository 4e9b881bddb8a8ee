//! The pytorch engine's Rust side: one Python child per condition, started when the condition
//! opens and kept for its runs (each run builds a new DataLoader in it, so worker start-up is
//! measured per run, as the native engine's). The child ([`super::child`]) and this side speak
//! one JSON object per line, typed on both sides ([`super::child::protocol`]).
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

use super::super::outcome::{Profiled, Timed, Window, finish};
use super::super::resources::Used;
use super::super::setup::Setup;
use super::super::timed::prepare_page_cache;
use super::super::{INTERRUPTED, Outputs, RunError};
use super::child::protocol::{ConditionSpec, PROTOCOL, Reply, Request};
use super::child::{driver_file, interpreter, tail};
use super::{Engine, Opening};
use crate::config::ProtocolSection;
use crate::plan::PlannedRun;
use crate::results::{HeadroomRecord, TRACES_DIR, trace_file_name};

/// A condition's child and what it has said.
pub(crate) struct Pytorch<'a> {
    setup: &'a Setup,
    condition: String,
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<Option<String>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Where the raw images it reads were written (removed with the engine).
    data_dir: PathBuf,
    interrupted_sent: bool,
}

impl Drop for Pytorch<'_> {
    fn drop(&mut self) {
        // A child that has already ended (Ctrl-C reached it between commands) is not written to:
        // a write to its closed pipe would end this process with SIGPIPE.
        if matches!(self.child.try_wait(), Ok(None)) {
            if let Ok(line) = serde_json::to_string(&Request::Quit) {
                let _ = writeln!(self.stdin, "{line}");
            }
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

impl<'a> Pytorch<'a> {
    /// Start the child for the condition and have it build the dataset.
    pub(crate) fn open(o: Opening<'a>) -> Result<Self, RunError> {
        let (setup, condition, experiment) = (o.setup, o.condition, o.experiment);
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
        let mut engine = Pytorch {
            setup,
            condition: condition.to_string(),
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
        let spec: ConditionSpec = super::handover::spec(setup, &engine.data_dir, experiment)?;
        engine.send(condition, &spec)?;
        match engine.next(condition)? {
            // Both engines read the same images: the same count, or the declared dataset is
            // not what the child found.
            // The user's own Dataset is theirs to size.
            Reply::Prepared { .. } if setup.settings().users_dataset().is_some() => Ok(engine),
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

    fn send(&mut self, condition: &str, value: &impl serde::Serialize) -> Result<(), RunError> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Err(RunError::Engine {
                condition: condition.to_string(),
                message: format!("the Python child ended ({status}){}", self.stderr_tail()),
            });
        }
        let line = serde_json::to_string(value).map_err(|e| RunError::Engine {
            condition: condition.to_string(),
            message: format!("cannot encode the request: {e}"),
        })?;
        writeln!(self.stdin, "{line}")
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
}

impl Engine for Pytorch<'_> {
    /// One timed run in the child: a new DataLoader, its start-up, the warm-up, the timed
    /// steps (written as they arrive) and the window's totals. The page cache under the
    /// declared dataset's files is set first, as the native engine sets it
    /// (`dataset.page_cache`), and its resident share recorded.
    fn timed(
        &mut self,
        planned: &PlannedRun,
        total_runs: usize,
        p: &ProtocolSection,
        out: &mut Outputs,
    ) -> Result<Timed, RunError> {
        let setup = self.setup;
        let condition = planned.condition.as_str();
        let bar = out.reporter.progress(p.warmup_steps + p.timed_steps);
        bar.set_message(format!(
            "run {}/{total_runs} {condition} (round {}, pytorch engine)",
            planned.index + 1,
            planned.round
        ));
        let resident = prepare_page_cache(setup);
        self.send(
            condition,
            &Request::Run {
                warmup: p.warmup_steps,
                timed: p.timed_steps,
            },
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
                resident,
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
                    let row = step.row(planned).map_err(|message| RunError::Engine {
                        condition: condition.to_string(),
                        message,
                    })?;
                    out.step(&row)?;
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
                        resident,
                    };
                    return finish(planned, setup, window, out);
                }
                // Ctrl-C can cut the child's answer short: what follows then ends the run.
                _ if INTERRUPTED.load(Ordering::SeqCst) => return stopped(out),
                other => return Err(self.unexpected(condition, "a step or done", other)),
            }
        }
    }

    /// A headroom run in the child (the native engine's rule: the step on batches built once,
    /// replayed with no loader running); None when interrupted.
    fn headroom(&mut self, steps: u64) -> Result<Option<HeadroomRecord>, RunError> {
        let condition = self.condition.clone();
        self.send(&condition, &Request::Headroom { steps })?;
        match self.next(&condition)? {
            Reply::Headroom(record) => Ok((!INTERRUPTED.load(Ordering::SeqCst)).then_some(record)),
            other => Err(self.unexpected(&condition, "headroom", other)),
        }
    }

    /// The profiled run in the child: the steps under torch.profiler after the warm-up, its
    /// Chrome trace (with the same step spans) written where the native engine's would be; the
    /// time to its first batch, and the child's stage clocks as stage totals.
    fn profiled(&mut self, p: &ProtocolSection, out: &Outputs) -> Result<Profiled, RunError> {
        let condition = self.condition.clone();
        let file = format!("{TRACES_DIR}/{}", trace_file_name(&condition));
        let trace = out.partial.join(&file);
        if let Some(dir) = trace.parent() {
            std::fs::create_dir_all(dir).map_err(|source| RunError::Output {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        self.send(
            &condition,
            &Request::Profile {
                warmup: p.warmup_steps,
                steps: p.profile_steps,
                trace,
            },
        )?;
        match self.next(&condition)? {
            Reply::Profiled(reply) => {
                let (startup_ms, stages) = reply.totals();
                Ok(Profiled {
                    trace: file,
                    startup_ms,
                    stages,
                })
            }
            other => Err(self.unexpected(&condition, "profiled", other)),
        }
    }
}

/// A condition name as a folder name.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::child::probe;
    use super::*;
    use crate::config::PytorchSection;

    #[test]
    fn the_interpreter_is_the_setting_then_the_variable_then_python3() {
        let set = PytorchSection {
            python: "/opt/py/bin/python".into(),
            ..Default::default()
        };
        assert_eq!(interpreter(&set), "/opt/py/bin/python");
    }

    #[test]
    fn a_missing_interpreter_is_named_with_the_way_out() {
        let e = probe("/no/such/python3").unwrap_err();
        assert!(e.contains("\"/no/such/python3\""), "{e}");
        assert!(e.contains("[pytorch] python"), "{e}");
    }
}
