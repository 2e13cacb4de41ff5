//! The terminal history of a cell: what the exactly-once rules judged,
//! kept beside the report so `rehearse verify` can judge it again without
//! the database (as Jepsen's `analyze` re-checks a recorded history).
//!
//! It is read in reconciliation's own snapshot, right after the audit set
//! is loaded, so it is exactly what the verdict was taken on: the audit
//! set (every accepted, uncertain and cron-fired job, with its mode and
//! `max_attempts`), every execution, every terminal record (ring closure,
//! archive row, dead letter) with the run lease that wrote it, the live
//! rows and open claims left, and the cron fire claims with the windows
//! the driver recorded. Rows stream from the server (memory grows with
//! the columns kept, about 40 bytes a job, not with the rows in flight).
//!
//! On disk it is `history/<cell>.json.gz`: columns rather than rows, and
//! every state, outcome and mode a small index into `words`, so the gzip
//! is small (see [`write`]).

use std::collections::BTreeMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::pin::pin;

use awa_runtime::error::Error as DbError;
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use crate::observe::CronWindow;

/// The folder of a run that holds the histories.
pub const HISTORY_DIR: &str = "history";
/// The history format; a reader refuses another major.
///
/// - 1.0: audit set, executions, terminal records, live rows, open
///   claims, cron claims and windows.
/// - 1.1: `disowned_runs`, the attempts whose own run reported them lost
///   (from the workers' events; empty in 1.0 files).
pub const HISTORY_FORMAT: &str = "1.1";

/// The audit set as reconciliation loaded it (cron fires included).
const AUDIT_SET: &str = "SELECT job_id, mode, max_attempts, uncertain, cron, cancelled FROM pg_temp.audit_jobs ORDER BY job_id";
/// Every execution.
const EXECUTIONS: &str =
    "SELECT job_id, run_lease, attempt, outcome FROM awa.executions ORDER BY job_id, run_lease";
/// Every terminal record, where the job audit and the mismatch check find them.
const TERMINALS: &str = "
SELECT job_id, run_lease, attempt, state, source FROM (
    SELECT job_id, run_lease, attempt, outcome AS state, 'ring' AS source FROM awa.claim_closures WHERE terminal
    UNION ALL SELECT job_id, run_lease, attempt, state, 'archive' FROM awa.terminal_archive
    UNION ALL SELECT job_id, run_lease, attempt, 'failed', 'dead_letter' FROM awa.dead_letters
) t ORDER BY job_id, run_lease";
/// Live rows.
const LIVE: &str = "SELECT job_id, state, attempt FROM awa.jobs ORDER BY job_id";
/// Claim receipts no closure of the same run lease answers.
const OPEN_CLAIMS: &str = "
SELECT r.job_id FROM awa.claim_receipts r
WHERE NOT EXISTS (SELECT 1 FROM awa.claim_closures c WHERE c.job_id = r.job_id AND c.run_lease = r.run_lease)
ORDER BY r.job_id";
/// Every job that claims a cron fire time: its `cron_fires` row, or args
/// naming a schedule and fire time (live rows and dead letters keep them).
const CRON_CLAIMS: &str = "
SELECT name, fire_ms, job_id FROM (
    SELECT f.name, f.fire_ms, f.job_id FROM awa.cron_fires f
    UNION
    SELECT j.args->>'cron', (j.args->>'fire_ms')::bigint, j.job_id FROM awa.jobs j WHERE j.args ? 'cron'
    UNION
    SELECT d.args->>'cron', (d.args->>'fire_ms')::bigint, d.job_id FROM awa.dead_letters d WHERE d.args ? 'cron'
) c WHERE name IS NOT NULL AND fire_ms IS NOT NULL ORDER BY name, fire_ms, job_id";

/// A cell's recorded terminal history (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// [`HISTORY_FORMAT`].
    pub format: String,
    /// The cell it was read for.
    pub cell: String,
    /// Every state, outcome, mode, source and schedule name, once; the
    /// columns hold indexes into it.
    pub words: Vec<String>,
    /// The audit set.
    pub jobs: Jobs,
    /// `awa.executions`.
    pub executions: Executions,
    /// Terminal records.
    pub terminals: Terminals,
    /// `awa.jobs` as it ended.
    pub live: Live,
    /// Job ids of claim receipts left open (one per receipt).
    pub open_claims: Vec<i64>,
    /// The cron windows the driver recorded.
    pub cron_windows: Vec<CronWindow>,
    /// Who claims which fire time.
    pub cron_claims: CronClaims,
    /// Attempts whose own run reported them lost and never its close
    /// recorded (the observations' `disowned_runs`): no terminal record
    /// may name one as its run's result. Added in 1.1.
    #[serde(default)]
    pub disowned_runs: Runs,
}

/// Attempts by run lease, a column each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runs {
    /// The job.
    pub job: Vec<i64>,
    /// The attempt's run lease.
    pub lease: Vec<i64>,
}

/// The audit set, a column each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jobs {
    /// Job ids, ascending, each once.
    pub id: Vec<i64>,
    /// The mode's word.
    pub mode: Vec<u16>,
    /// `max_attempts`.
    pub max_attempts: Vec<i32>,
    /// Bit 1: uncertain (its commit's fate unknown); bit 2: cron-fired;
    /// bit 4: cancelled by an operator while live.
    pub flags: Vec<u8>,
}

/// Bit of [`Jobs::flags`]: the job was reported uncertain.
pub const UNCERTAIN: u8 = 1;
/// Bit of [`Jobs::flags`]: the job was fired by cron.
pub const CRON: u8 = 2;
/// Bit of [`Jobs::flags`]: an operator cancelled the job while it was
/// live (its designed end is then `cancelled`, judged by its own rule).
pub const CANCELLED: u8 = 4;

/// Executions, a column each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Executions {
    /// The job.
    pub job: Vec<i64>,
    /// Its run lease.
    pub lease: Vec<i64>,
    /// The attempt it ran.
    pub attempt: Vec<i32>,
    /// The outcome's word; `None` for a run never closed.
    pub outcome: Vec<Option<u16>>,
}

/// Terminal records, a column each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terminals {
    /// The job.
    pub job: Vec<i64>,
    /// The run lease that wrote it.
    pub lease: Vec<i64>,
    /// The attempt it records.
    pub attempt: Vec<i32>,
    /// The terminal state's word.
    pub state: Vec<u16>,
    /// Where it lives (`ring`, `archive`, `dead_letter`), as a word.
    pub source: Vec<u16>,
}

/// Live rows, a column each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Live {
    /// The job.
    pub job: Vec<i64>,
    /// Its state's word.
    pub state: Vec<u16>,
    /// Its attempt.
    pub attempt: Vec<i32>,
}

/// Cron fire claims, a column each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronClaims {
    /// The schedule's word.
    pub name: Vec<u16>,
    /// The fire time (Unix ms).
    pub fire_ms: Vec<i64>,
    /// The job claiming it.
    pub job: Vec<i64>,
}

/// Why a history could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be opened, read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a history this build reads.
    #[error("{}: not a terminal history: {why}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// More distinct words than an index holds.
    #[error("more than {} distinct states, outcomes and modes", u16::MAX)]
    TooManyWords,
}

impl History {
    /// An empty history of `cell`.
    pub fn new(cell: &str) -> History {
        History {
            format: HISTORY_FORMAT.to_owned(),
            cell: cell.to_owned(),
            ..History::default()
        }
    }

    /// The index of `word`, added when new.
    pub fn word(&mut self, word: &str) -> Result<u16, HistoryError> {
        if let Some(i) = self.words.iter().position(|w| w == word) {
            return u16::try_from(i).map_err(|_| HistoryError::TooManyWords);
        }
        self.words.push(word.to_owned());
        u16::try_from(self.words.len() - 1).map_err(|_| HistoryError::TooManyWords)
    }

    /// The word at `index` (`?` for an index out of range, which
    /// [`History::problems`] reports).
    pub fn text(&self, index: u16) -> &str {
        self.words
            .get(usize::from(index))
            .map_or("?", String::as_str)
    }

    /// What makes this history unreadable: columns of unequal length,
    /// word indexes out of range, another format.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.format.split('.').next() != HISTORY_FORMAT.split('.').next() {
            out.push(format!(
                "format {:?}, this build reads {HISTORY_FORMAT}",
                self.format
            ));
        }
        let mut lengths = |what: &str, lens: &[usize]| {
            if lens.iter().any(|&n| n != lens[0]) {
                out.push(format!("the {what} columns differ in length: {lens:?}"));
            }
        };
        let j = &self.jobs;
        lengths(
            "jobs",
            &[
                j.id.len(),
                j.mode.len(),
                j.max_attempts.len(),
                j.flags.len(),
            ],
        );
        let e = &self.executions;
        lengths(
            "executions",
            &[e.job.len(), e.lease.len(), e.attempt.len(), e.outcome.len()],
        );
        let t = &self.terminals;
        lengths(
            "terminals",
            &[
                t.job.len(),
                t.lease.len(),
                t.attempt.len(),
                t.state.len(),
                t.source.len(),
            ],
        );
        let l = &self.live;
        lengths("live", &[l.job.len(), l.state.len(), l.attempt.len()]);
        let c = &self.cron_claims;
        lengths("cron", &[c.name.len(), c.fire_ms.len(), c.job.len()]);
        let d = &self.disowned_runs;
        lengths("disowned runs", &[d.job.len(), d.lease.len()]);
        let n = self.words.len();
        let words = (j.mode.iter())
            .chain(e.outcome.iter().flatten())
            .chain(&t.state)
            .chain(&t.source)
            .chain(&l.state)
            .chain(&c.name);
        if let Some(bad) = words.copied().find(|&w| usize::from(w) >= n) {
            out.push(format!("word index {bad} past the {n} words"));
        }
        if j.id.windows(2).any(|w| w[0] >= w[1]) {
            out.push("the audit set's job ids are not ascending and distinct".to_owned());
        }
        out
    }
}

/// The file of `cell`'s history in the run folder `dir`.
pub fn path(dir: &Path, cell: &str) -> PathBuf {
    dir.join(HISTORY_DIR).join(format!("{cell}.json.gz"))
}

/// Write `history` to `path` (its folder made): gzipped JSON, about 120 kB
/// per 10,000 jobs that ran once or twice each.
pub fn write(path: &Path, history: &History) -> Result<(), HistoryError> {
    let io = |source| HistoryError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let file = std::fs::File::create(path).map_err(io)?;
    let mut gz = flate2::write::GzEncoder::new(BufWriter::new(file), flate2::Compression::best());
    serde_json::to_writer(&mut gz, history).map_err(|e| io(e.into()))?;
    let mut inner = gz.finish().map_err(io)?;
    inner.flush().map_err(io)
}

/// Read the history at `path`, checked ([`History::problems`]).
pub fn read_file(path: &Path) -> Result<History, HistoryError> {
    let file = std::fs::File::open(path).map_err(|source| HistoryError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(BufReader::new(file))
        .read_to_end(&mut text)
        .map_err(|e| HistoryError::Malformed {
            path: path.to_owned(),
            why: format!("not gzip: {e}"),
        })?;
    let history: History = serde_json::from_slice(&text).map_err(|e| HistoryError::Malformed {
        path: path.to_owned(),
        why: e.to_string(),
    })?;
    let problems = history.problems();
    if !problems.is_empty() {
        return Err(HistoryError::Malformed {
            path: path.to_owned(),
            why: problems.join("; "),
        });
    }
    Ok(history)
}

/// The words of a history being read, each with its index: words are few,
/// and a map spares the linear search per row.
#[derive(Default)]
struct Words(BTreeMap<String, u16>);

impl Words {
    /// The index of `w` in `h`'s words, added the first time it is seen.
    fn of(&mut self, h: &mut History, w: &str) -> Result<u16, DbError> {
        if let Some(&i) = self.0.get(w) {
            return Ok(i);
        }
        let i = h.word(w).map_err(|e| DbError::Db {
            context: "recording the terminal history".to_owned(),
            detail: e.to_string(),
            transient: false,
            sqlstate: None,
        })?;
        self.0.insert(w.to_owned(), i);
        Ok(i)
    }
}

/// Read the history of `cell` in the snapshot that holds the loaded audit
/// set (`pg_temp.audit_jobs`).
pub(super) async fn read(
    client: &Client,
    cell: &str,
    windows: &[CronWindow],
) -> Result<History, DbError> {
    let mut h = History::new(cell);
    h.cron_windows = windows.to_vec();
    let mut words = Words::default();
    for_each_row(client, AUDIT_SET, "the audit set", |row| {
        let mode: String = row.get(1);
        h.jobs.id.push(row.get(0));
        let w = words.of(&mut h, &mode)?;
        h.jobs.mode.push(w);
        h.jobs.max_attempts.push(row.get(2));
        let (uncertain, cron, cancelled): (bool, bool, bool) = (row.get(3), row.get(4), row.get(5));
        h.jobs.flags.push(
            (u8::from(uncertain) * UNCERTAIN)
                | (u8::from(cron) * CRON)
                | (u8::from(cancelled) * CANCELLED),
        );
        Ok(())
    })
    .await?;
    for_each_row(client, EXECUTIONS, "executions", |row| {
        let outcome: Option<String> = row.get(3);
        let outcome = match outcome {
            Some(o) => Some(words.of(&mut h, &o)?),
            None => None,
        };
        h.executions.job.push(row.get(0));
        h.executions.lease.push(row.get(1));
        h.executions.attempt.push(row.get(2));
        h.executions.outcome.push(outcome);
        Ok(())
    })
    .await?;
    for_each_row(client, TERMINALS, "terminal records", |row| {
        let (state, source): (String, String) = (row.get(3), row.get(4));
        h.terminals.job.push(row.get(0));
        h.terminals.lease.push(row.get(1));
        h.terminals.attempt.push(row.get(2));
        let (state, source) = (words.of(&mut h, &state)?, words.of(&mut h, &source)?);
        h.terminals.state.push(state);
        h.terminals.source.push(source);
        Ok(())
    })
    .await?;
    for_each_row(client, LIVE, "live rows", |row| {
        let state: String = row.get(1);
        h.live.job.push(row.get(0));
        let w = words.of(&mut h, &state)?;
        h.live.state.push(w);
        h.live.attempt.push(row.get(2));
        Ok(())
    })
    .await?;
    for_each_row(client, OPEN_CLAIMS, "open claims", |row| {
        h.open_claims.push(row.get(0));
        Ok(())
    })
    .await?;
    for_each_row(client, CRON_CLAIMS, "cron fire claims", |row| {
        let name: String = row.get(0);
        let w = words.of(&mut h, &name)?;
        h.cron_claims.name.push(w);
        h.cron_claims.fire_ms.push(row.get(1));
        h.cron_claims.job.push(row.get(2));
        Ok(())
    })
    .await?;
    Ok(h)
}

/// Stream the rows of `sql` into `each`.
async fn for_each_row(
    client: &Client,
    sql: &str,
    what: &str,
    mut each: impl FnMut(&tokio_postgres::Row) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let context = format!("recording the terminal history: {what}");
    let rows = client
        .query_raw(sql, std::iter::empty::<i64>())
        .await
        .map_err(|e| DbError::db(&context, e))?;
    let mut rows = pin!(rows);
    while let Some(row) = rows
        .try_next()
        .await
        .map_err(|e| DbError::db(&context, e))?
    {
        each(&row)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_survives_the_file() {
        let mut h = History::new("cell");
        let complete = h.word("complete").unwrap();
        let completed = h.word("completed").unwrap();
        let ring = h.word("ring").unwrap();
        h.jobs = Jobs {
            id: vec![1, 2],
            mode: vec![complete; 2],
            max_attempts: vec![3; 2],
            flags: vec![0, UNCERTAIN],
        };
        h.terminals = Terminals {
            job: vec![1],
            lease: vec![1],
            attempt: vec![1],
            state: vec![completed],
            source: vec![ring],
        };
        let dir = std::env::temp_dir().join(format!("history-{}", std::process::id()));
        let file = path(&dir, "cell");
        write(&file, &h).unwrap();
        assert_eq!(read_file(&file).unwrap(), h);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_broken_history_is_named() {
        let mut h = History::new("cell");
        h.jobs.id = vec![2, 1];
        h.jobs.mode = vec![0, 7];
        h.jobs.max_attempts = vec![3, 3];
        h.jobs.flags = vec![0];
        h.format = "2.0".into();
        let problems = h.problems().join("; ");
        for why in ["format", "jobs columns", "word index 0", "not ascending"] {
            assert!(problems.contains(why), "{why}: {problems}");
        }
    }
}
