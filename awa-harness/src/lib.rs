//! awa-harness: what runs awa-runtime without being part of it. The
//! runtime's tests and benches use it as a dev-dependency; `rehearse`
//! uses it to run the runtime.
//!
//! * [`pgtemp`]: a throwaway PostgreSQL cluster, and where PostgreSQL's
//!   server binaries are found.
//! * [`release`]: the frozen release archives of `artifacts/`, verified
//!   against their digests and built.
//! * [`shape`]: which top-level module each file of a crate names, and
//!   the import cycles among the sub-modules of any module; both crates'
//!   `tests/shape.rs` rank their modules and refuse such cycles with it.

pub mod pgtemp;
pub mod release;
pub mod shape;
