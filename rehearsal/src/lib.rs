//! `rehearse`: prove a release of awa-runtime can be rolled out to a live fleet.
//!
//! The engine of the `rehearse` binary, as a library so every stage has
//! tests of its own. Data flows one way:
//!
//! `matrix` (matrix.toml, validated) -> `plan` (cells with every random
//! choice resolved from a seed) -> `driver` (runs each cell against real
//! processes and PostgreSQL, using `artifacts`, `fleet` and `monitor`,
//! and records `observe::Observations`) -> `reconcile` -> `report`.
//!
//! ```
//! use rehearsal::{matrix, plan};
//!
//! let text = r#"
//! [artifacts.previous]
//! release = "0.6.2"
//! [artifacts.current]
//! build = "workspace"
//!
//! [workload]
//! rate_per_s = 200
//! mix = { complete = 1 }
//!
//! [timings]
//! heartbeat = "200ms"
//! stale_after = "1500ms"
//! rescue_every = "250ms"
//! rotate_every = "1s"
//! deadline = "2s"
//! drain_timeout = "60s"
//!
//! [[cell]]
//! name = "tiny"
//! about = "two workers, one killed"
//! steps = [
//!   { fleet = "previous", workers = 2, producers = 1 },
//!   { kill = "worker" },
//!   { drain = "10s" },
//! ]
//! "#;
//! let matrix = matrix::parse("matrix.toml", text).expect("valid");
//! let selection = plan::Selection { matrix: None, cells: vec!["tiny".into()] };
//! let request = plan::Request { selection, seed: 42, ..plan::Request::default() };
//! let plan = request.expand(&matrix).unwrap();
//! assert_eq!(plan.replay, "rehearse --cell tiny --seed 42");
//! assert_eq!(plan.cells[0].steps.len(), 3);
//! ```

#![warn(missing_docs)]

/// `rehearse --version`: the crate version and the git commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("REHEARSE_GIT_SHA"),
    ")"
);

pub mod artifacts;
pub mod cli;
pub mod commands;
pub mod doctor;
pub mod driver;
mod error;
pub mod evidence;
pub mod exit;
pub mod fleet;
pub mod image;
pub mod matrix;
pub mod merge;
pub mod monitor;
pub mod mutate;
pub mod observe;
pub mod partition;
pub mod pg;
pub mod pipeline;
pub mod plan;
pub mod planfile;
pub mod reconcile;
pub mod repeat;
pub mod report;
pub mod schedule;
pub mod schema;
pub mod selftest;
pub mod servers;
pub mod stamp;
pub mod stream;
pub mod stress;
pub mod verify;
pub mod vocab;

pub use commands::{Environment, execute};
pub use error::Error;
