//! What each subcommand does, over the layers above it (config → plan → runner → analysis →
//! report); `cli` parses the arguments and calls one of these. Within this room, too, a module
//! imports only from the modules listed above it.

// Run → report → promote: an experiment to a finished results folder.
pub mod execute;

// Every figure recomputed and checked.
pub mod verify;

// The search for the cheapest setting within noise of the best.
pub mod tune;

// Two results folders side by side, with regression gates.
pub mod compare;

// Task folders → one results folder.
pub mod merge;

// A user's torch.profiler trace, read in the report's terms.
pub mod diagnose;

// The plan as a Slurm job array.
pub mod slurm;

// Speed claims, measured.
pub mod bench;

/// Every model kind and optimizer on a device against a reference (`loaderlab selftest`).
pub mod selftest;

// What the transforms do, as files.
pub mod preview;

// A user's own training loop, watched: its steps as a results folder.
pub mod watch;
