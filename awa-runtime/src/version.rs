//! Version facts a binary is built with. Frozen releases carry their own
//! copy of this file, which is how an old binary "knows" only its schema.

/// The binary's own version (`awa --version`, `runtime_instances.version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The highest schema version this binary's embedded migrations create.
pub const SCHEMA_VERSION: i32 = 3;

/// The schema version of the 0.7 expand migration (see
/// `artifacts/manifest.toml`). Decided while cutting the 0.6 line so that
/// 0.6.2 can recognise it: 0.6.2 runs on that schema while
/// `awa.ring_cursor_authority.authority` is `columns`, and refuses
/// otherwise.
pub const EXPAND_MIGRATION_VERSION: i32 = 3;
