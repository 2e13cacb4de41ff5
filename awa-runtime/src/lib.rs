//! awa-runtime: a small Postgres job-queue runtime whose storage keeps
//! ready entries, claims and leases in three slot rings (LIST-partitioned
//! tables rotated by a maintenance leader and pruned by TRUNCATE).
//!
//! It is the runtime that `rehearse` rehearses rolling upgrades of, so it
//! keeps a frozen contract with the orchestrator (see `cli`): the `awa`
//! subcommands, `AWA_*` variables, JSON-lines events on stdout and exit
//! codes (0 clean, 2 refused).
//!
//! ```no_run
//! # async fn demo() -> awa_runtime::error::Result<()> {
//! use awa_runtime::{db, schema, store::enqueue};
//! let mut client = db::connect("postgres://postgres@127.0.0.1:5432/app").await?;
//! schema::migrate(&mut client, &Default::default()).await?;
//! let job = enqueue::NewJob {
//!     kind: "rehearsal".into(), queue: "default".into(),
//!     args: serde_json::json!({"mode": "complete"}), priority: 0,
//!     max_attempts: 3, deadline_ms: None, run_at_ms: None,
//! };
//! let ids = enqueue::enqueue(&client, &[job]).await?;
//! # Ok(()) }
//! ```

pub mod cli;
pub mod db;
pub mod duration;
pub mod error;
pub mod events;
pub mod failpoint;
pub mod gate;
pub mod locks;
pub mod maintenance;
pub mod outcome;
pub mod producer;
pub mod redact;
pub mod schema;
pub mod store;
pub mod timings;
pub mod version;
pub mod worker;
pub mod workload;
