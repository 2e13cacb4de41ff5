//! awa-harness: what runs awa-runtime without being part of it. The
//! runtime's tests and benches use it as a dev-dependency; `rehearse`
//! uses it to run the runtime.
//!
//! * [`pgtemp`]: a throwaway PostgreSQL cluster, and where PostgreSQL's
//!   server binaries are found.
//! * [`release`]: the frozen release archives of `artifacts/`, verified
//!   against their digests and built.

pub mod pgtemp;
pub mod release;
