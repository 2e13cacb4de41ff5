//! Which runtimes belong to this workspace's release line: the versions
//! that know the ledger authority. `runtimes`, `rules` and the fence's
//! reach (`reach`) all ask, so it sits below them; the answer is the
//! vocabulary's, which the driver asks too.

/// Whether `version` belongs to this workspace's release line or later
/// (the binaries that know the ledger authority).
pub(super) fn flip_aware(version: &str) -> bool {
    crate::vocab::release::of_this_line(version)
}
