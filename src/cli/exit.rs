//! The one mapping from a command's outcome to the process's exit status.

use std::process::ExitCode;

/// How a command failed, and so with which status the process exits.
#[derive(Debug)]
pub enum Failure {
    /// An experiment or argument that is not valid (exit 2); the message says what to fix.
    Invalid(String),
    /// A failure while running (exit 1).
    Failed(String),
    /// Ctrl-C (exit 130, as shells report 128 + SIGINT).
    Interrupted(String),
    /// The command has already printed why (a list of problems or failed checks); only the
    /// status is left to give.
    Reported(Status),
}

/// The documented exit statuses besides 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Failed = 1,
    Invalid = 2,
    Interrupted = 130,
}

impl Failure {
    pub fn status(&self) -> Status {
        match self {
            Failure::Invalid(_) => Status::Invalid,
            Failure::Failed(_) => Status::Failed,
            Failure::Interrupted(_) => Status::Interrupted,
            Failure::Reported(s) => *s,
        }
    }

    /// Print the message (if any) to stderr and give the exit code.
    pub fn exit(self) -> ExitCode {
        let status = self.status();
        match self {
            Failure::Invalid(m) | Failure::Failed(m) => eprintln!("error: {m}"),
            Failure::Interrupted(m) => eprintln!("{m}"),
            Failure::Reported(_) => {}
        }
        ExitCode::from(status as u8)
    }
}

/// A failure while running, from anything displayable (`{:#}` keeps anyhow's causes).
pub fn failed(e: impl std::fmt::Display) -> Failure {
    Failure::Failed(format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_the_documented_ones() {
        assert_eq!(Failure::Invalid(String::new()).status() as u8, 2);
        assert_eq!(Failure::Failed(String::new()).status() as u8, 1);
        assert_eq!(Failure::Interrupted(String::new()).status() as u8, 130);
        assert_eq!(Failure::Reported(Status::Invalid).status() as u8, 2);
    }
}
