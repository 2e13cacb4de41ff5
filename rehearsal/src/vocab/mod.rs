//! The words every stage shares, at the bottom of the pipeline.
//!
//! A type lives here when stages at different heights name it: the
//! choices a command line makes (which backend, whether to colour), a flag's value a stage cannot use, how a run turned out, the images a run names, PostgreSQL majors, the kinds of schema object, the share of a partitioned run, the load a run ran beside (`--stress`), how CPU time was counted, how a defect was caught,
//! and the facts a run carries from the stage that finds them to the
//! ones that record them. Nothing here imports another module of the
//! crate, so any stage may use it without looking up the pipeline;
//! `tests/shape.rs` keeps it that way. Parsing stays with its stage
//! (`cli` derives the flags and maps them onto these with `From`).

pub mod choice;
pub mod cpu;
pub mod detection;
pub mod flag;
pub mod image;
pub mod major;
pub mod outcome;
pub mod partition;
pub mod release;
pub mod schema;
pub mod stress;

pub use choice::{Backend, Color, Format};
pub use outcome::RunOutcome;
