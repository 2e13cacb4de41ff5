//! What a run records about itself when it starts (`run_started`): the
//! header (seed, replay line, servers, migrations, git, schedule), the
//! artifacts and the cells.

use std::collections::BTreeMap;

use super::RunRequest;
use crate::artifacts::Resolution;
use crate::observe::ArtifactInfo;
use crate::servers::ServerInfo;
use crate::stream::{RunHeader, RunStart};

/// `server_version` of the run's servers, for the one-line record:
/// `15.18`, or `15.18 (pg15), 18.6 (pg18)` for several.
fn versions_line(infos: &[ServerInfo]) -> String {
    match infos {
        [one] => one.version.clone(),
        _ => infos
            .iter()
            .map(|i| match i.major {
                Some(m) => format!("{} ({m})", i.version),
                None => i.version.clone(),
            })
            .collect::<Vec<_>>()
            .join(", "),
    }
}

pub(super) fn run_start(req: &RunRequest, servers: Vec<ServerInfo>) -> RunStart {
    RunStart {
        header: RunHeader {
            run_id: req.run_id.clone(),
            started_at: req.started_at.clone(),
            seed: req.plan.seed,
            command_line: req.command_line.clone(),
            matrix: req.plan.selection.matrix.clone(),
            replay: req.plan.replay.clone(),
            backend: req.backend.clone(),
            backend_reason: req.backend_reason.clone(),
            engine: req.engine.clone(),
            postgres_version: versions_line(&servers),
            servers,
            migration_checksums: migration_checksums(),
            git_commit: req.resolution.git.commit.clone(),
            git_dirty: req.resolution.git.dirty,
            cores: req.schedule.cores,
            jobs: req.schedule.jobs,
            schedule: req.schedule.describe.clone(),
            matrix_checksum: req.plan.matrix_checksum.clone(),
            partition: req.plan.partition.clone(),
            stress: req.stress,
            checklist: req.plan.checklist.clone(),
        },
        report_dir: req.report_dir.clone(),
        artifacts: artifact_infos(&req.resolution),
        cells: req.plan.cells.iter().map(|c| c.name.clone()).collect(),
        selftest: req.selftest,
    }
}

fn artifact_infos(resolution: &Resolution) -> Vec<ArtifactInfo> {
    resolution
        .artifacts
        .values()
        .map(|a| ArtifactInfo {
            name: a.name.clone(),
            version: a.version.clone(),
            source: a.source.clone(),
            digest: a.digest.clone(),
            obtained: a.obtained.clone(),
            binary: crate::fleet::Runnable::of(a).to_string(),
            failpoint: a.failpoint.clone(),
            image: a.image.clone(),
        })
        .collect()
}

/// sha256 of each migration the current build embeds, by `v{version}`.
pub fn migration_checksums() -> BTreeMap<String, String> {
    awa_runtime::schema::MIGRATIONS
        .iter()
        .map(|m| {
            let hex = awa_harness::release::sha256_hex(m.sql.as_bytes());
            (format!("v{}", m.version), hex)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_checksums_cover_every_embedded_migration() {
        let sums = migration_checksums();
        assert_eq!(sums.len(), awa_runtime::schema::MIGRATIONS.len());
        assert!(sums.contains_key("v1"));
        assert!(
            sums.values()
                .all(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        );
    }
}
