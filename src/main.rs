//! The `loaderlab` command: parse the arguments, run the one command they name, and turn its
//! failure into the documented exit status (0 success, 1 a failure while running, 2 an invalid
//! experiment or argument, 130 interrupted). Everything else lives in the library's `cli`.

use std::process::ExitCode;

use clap::Parser;

use loaderlab::cli::{self, Cli};

fn main() -> ExitCode {
    // SAFETY: the first statement of `main`: no other thread exists yet.
    unsafe { loaderlab::train::keep_freed_memory() };
    // Output piped into a reader that stops early (`loaderlab diagnose t.json | head -1`) ends
    // the process quietly, as for any Unix filter, instead of a panic in `println!`.
    #[cfg(unix)]
    // SAFETY: restoring the default action of SIGPIPE, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match cli::run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.exit(),
    }
}
