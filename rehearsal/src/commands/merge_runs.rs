//! `rehearse merge DIR...`: the folders of a partitioned run (or of a
//! partitioned `rehearse mutate`) checked to be one run, then joined.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Environment;
use crate::Error;
use crate::cli::Cli;
use crate::exit::RunOutcome;
use crate::report;

/// `rehearse merge DIR... [--out DIR]`: the shares' folders checked to be
/// one run, then joined and rendered; exits as a run over the whole selection.
pub(super) fn merge_command(
    cli: &Cli,
    env: &Environment,
    dirs: &[PathBuf],
    to: Option<&Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    let bad = |e: crate::merge::MergeError| Error::BadFlag {
        flag: "DIR",
        message: e.0,
    };
    let dirs: Vec<PathBuf> = dirs.iter().map(|d| env.cwd.join(d)).collect();
    if dirs
        .iter()
        .any(|d| d.join(crate::mutate::report::MUTATE_JSON).is_file())
    {
        return merge_mutate(cli, env, &dirs, to, out, err);
    }
    let partials = crate::merge::read(&dirs).map_err(bad)?;
    let dir = merged_dir(env, to, &partials);
    if dirs.contains(&dir) {
        return Err(Error::BadFlag {
            flag: "--out",
            message: format!(
                "{} is one of the partial folders; name a new folder",
                dir.display()
            ),
        });
    }
    check_merge_out(&dir)?;
    let run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let crate::merge::Merged {
        report: merged,
        plan,
    } = crate::merge::merge(&partials, &run_id).map_err(bad)?;
    let harness = |e: report::ReportError| Error::Harness(awa_runtime::error::chain(&e));
    report::write_all(&dir, &merged).map_err(harness)?;
    std::fs::write(dir.join(crate::planfile::PLAN_JSON), plan.to_json()).map_err(Error::Output)?;
    crate::merge::copy_files(&partials, &dir).map_err(Error::Output)?;
    let color = report::terminal::use_color(cli.global.color.into());
    let summary = if cli.global.quiet {
        report::terminal::quiet_summary(&merged, color)
    } else {
        report::terminal::summary_table(&merged, color)
    };
    out.write_all(summary.as_bytes())?;
    if !cli.global.quiet {
        writeln!(
            err,
            "merged {} into {}",
            report::text::plural(partials.len(), "partial run"),
            dir.display()
        )?;
    }
    Ok(merged.outcome())
}

/// Where the merged run goes: `--out`, or a new `<stamp>-merged` folder
/// under the reports folder (as a run's), named after the shares' commit.
fn merged_dir(env: &Environment, to: Option<&Path>, partials: &[crate::merge::Partial]) -> PathBuf {
    let stamp = report::utc(std::time::SystemTime::now());
    match to {
        Some(dir) => env.cwd.join(dir),
        None => {
            let root = std::env::var_os(crate::driver::run::REPORTS_DIR_ENV)
                .filter(|v| !v.is_empty())
                .map(|v| env.cwd.join(v))
                .or_else(|| {
                    crate::artifacts::Repo::find(&[&env.cwd])
                        .ok()
                        .map(|r| r.reports())
                })
                .unwrap_or_else(|| env.cwd.join("reports"));
            let sha = partials
                .first()
                .map(|p| {
                    p.report
                        .run
                        .header
                        .git_commit
                        .chars()
                        .take(7)
                        .collect::<String>()
                })
                .unwrap_or_default();
            report::report_dir(&root, &format!("{}-merged", stamp.compact), &sha)
        }
    }
}

/// `rehearse merge` of the shares of a `rehearse mutate --partition` run:
/// one mutate report whose score (and exit code) covers every share.
fn merge_mutate(
    cli: &Cli,
    env: &Environment,
    dirs: &[PathBuf],
    to: Option<&Path>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<RunOutcome, Error> {
    use crate::mutate::report as mreport;
    let bad = |message: String| Error::BadFlag {
        flag: "DIR",
        message,
    };
    let mut partials = Vec::new();
    for d in dirs {
        let file = d.join(mreport::MUTATE_JSON);
        if !file.is_file() {
            return Err(bad(format!(
                "{} has no {}: mutate shares merge only with mutate shares",
                d.display(),
                mreport::MUTATE_JSON
            )));
        }
        partials.push(mreport::read(&file).map_err(bad)?);
    }
    let merged = mreport::merge(partials).map_err(bad)?;
    let dir = match to {
        Some(dir) => env.cwd.join(dir),
        None => {
            let root = crate::artifacts::Repo::find(&[&env.cwd])
                .map(|r| r.reports())
                .unwrap_or_else(|_| env.cwd.join("reports"));
            let stamp = report::utc(std::time::SystemTime::now());
            root.join(format!("{}-mutate-merged", stamp.compact))
        }
    };
    if dirs.contains(&dir) {
        return Err(Error::BadFlag {
            flag: "--out",
            message: format!(
                "{} is one of the partial folders; name a new folder",
                dir.display()
            ),
        });
    }
    check_merge_out(&dir)?;
    std::fs::create_dir_all(&dir).map_err(Error::Output)?;
    mreport::write_all(&dir, &merged).map_err(Error::Output)?;
    writeln!(out, "{}", merged.headline())?;
    if !cli.global.quiet {
        writeln!(
            err,
            "merged {} into {}",
            report::text::plural(dirs.len(), "mutate share"),
            dir.display()
        )?;
    }
    // A share that was interrupted leaves mutants out: inconclusive (exit 3), whatever the score.
    Ok(merged.outcome())
}

/// The merged run's folder must be new or empty: evidence already there
/// (another run's report, plan or logs) is never overwritten.
fn check_merge_out(dir: &Path) -> Result<(), Error> {
    let refuse = |why: String| Error::BadFlag {
        flag: "--out",
        message: format!("{} {why}; name a new folder", dir.display()),
    };
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        return Err(refuse("is a file, not a folder".into()));
    }
    let held: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| refuse(format!("cannot be read ({e})")))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    let run = [
        report::REPORT_JSON,
        crate::planfile::PLAN_JSON,
        report::REPORT_MD,
        report::EVENTS_JSONL,
    ];
    let what = if held.iter().any(|f| run.contains(&f.as_str())) {
        "already holds a run"
    } else {
        "is not empty"
    };
    Err(refuse(format!(
        "{what} ({}), which merge will not overwrite",
        held.join(", ")
    )))
}
