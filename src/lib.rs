//! loaderlab: declarative experiments that answer "is my GPU waiting for data?".
//!
//! Data flows one way: [`config`] (file → validated settings per condition) → [`plan`] (runs in
//! order) → [`runner`] (writes a results folder through [`results`]) → [`analysis`] (reads it) →
//! [`report`]; [`cli`] sits on top and `main` only parses and exits.

// In the data's order: a module imports only from modules listed above it (each stands apart
// so that rustfmt keeps this order).

// Helpers with no dependencies: seeds and fingerprints.
pub mod hash;

// Quoting for printed commands and generated scripts.
pub mod shell;

// How figures are printed: at least four significant digits.
pub mod format;

// CPU feature tokens: AVX2 code is reachable only through a value proving it was detected.
pub mod simd;

// Channels × height × width of an image, and its planar layout.
pub mod shape;

// The networks as data: layers, parameters, shapes.
pub mod net;

// The names of the trace spans.
pub mod spans;

// The CPU transforms: each op's spec, checks, geometry and compiled form; the kernels; the
// pipeline.
pub mod transforms;

// Datasets: each kind in a file of its own behind one trait, and the `[dataset]` section.
pub mod data;

// The experiment file: schema, layering, matrix expansion, checks.
pub mod config;

// The runs in order.
pub mod plan;

// Batches from worker threads.
pub mod loader;

// The model, optimizer, device and step.
pub mod train;

// The results folder: the contract between writers and readers.
pub mod results;

// Chrome traces: recording and reading.
pub mod trace;

// Executes a plan into a results folder.
pub mod runner;

// Raw rows → figures and judgements.
pub mod analysis;

// Figures → report.md, charts and result.json.
pub mod report;

// What the subcommands do, each over the layers above: run → report → promote, verify,
// tune, compare, merge, diagnose, slurm, bench, selftest, preview.
pub mod commands;

// The command line.
pub mod cli;
