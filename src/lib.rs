//! loaderlab: declarative experiments that answer "is my GPU waiting for data?".
//!
//! Data flows one way: [`config`] (file → validated settings per condition) → [`plan`] (runs in
//! order) → runner → analysis → report.

pub mod analysis;
pub mod bench;
pub mod config;
pub mod data;
pub mod environment;
pub mod hash;
pub mod loader;
pub mod merge;
pub mod plan;
pub mod preview;
pub mod report;
pub mod runner;
pub mod slurm;
pub mod trace;
pub mod train;
pub mod transforms;
pub mod verify;
