//! Engines: whose loader feeds the step. `native` is loaderlab's own (the loader, transforms
//! and datasets of this crate, driven by `runner::timed`); `pytorch` is a real
//! `torch.utils.data.DataLoader` in a Python child ([`pytorch`]), speaking the same results
//! contract: its rows go through the same writers, so analysis, report, verify, compare and
//! tune stay engine-blind but for a label.

mod handover;
pub mod pytorch;
mod replies;
