//! Scaffolding the integration tests share: a scratch tree, small test
//! matrices, databases on the 0.6 schema, running the
//! real `rehearse` binary, waiting for it, reading what it wrote.
//!
//! A test includes it as `pub mod common;`: public items of a public
//! module are not dead code, so a test that uses only some of them
//! compiles without warnings.

pub mod database;
pub mod matrix;
pub mod rehearse;
pub mod report;
pub mod scratch;
