//! Which runtimes belong to this workspace's release line: the versions
//! that know the ledger authority. `runtimes`, `rules` and the fence's
//! reach (`reach`) all ask, so it sits below them.

use awa_runtime::store::authority::parse_version;

/// Whether `version` belongs to this workspace's release line or later
/// (the binaries that know the ledger authority).
pub(super) fn flip_aware(version: &str) -> bool {
    let own =
        parse_version(awa_runtime::version::VERSION).map(|(major, minor, _)| (major, minor, 0));
    match (parse_version(version), own) {
        (Some(v), Some(floor)) => v >= floor,
        _ => false,
    }
}
