//! The experiment file: schema, layered loading and validation.
//!
//! `load` is the only way in: it returns a fully validated [`Experiment`] (one resolved
//! [`Settings`] per condition) or every problem found, each naming where it came from.

mod choice;
mod distributed;
mod engines;
mod layers;
mod load;
mod locate;
mod matrix;
mod model;
mod problem;
mod pytorch;
mod raw;
mod resolved;
mod schema;
mod validate;

pub use crate::transforms::ops::{chain_output, op_output, resize_output, sets_size};
pub use choice::{Choice, choices};
pub use distributed::MAX_RANKS;
pub use load::{Condition, ConfigError, ENV_PREFIX, Experiment, Overrides, load, load_str};
pub use problem::{KeyPath, Location, Problem, Seg};
pub use pytorch::reference_file;
pub use resolved::resolved_toml;
pub use schema::*;
pub use validate::{check_settings, dataset_len, dataset_shape};
