//! `--partition`: every cell of the shipped full matrix lands in exactly
//! one share, for every strategy and N = 1..8, through the library API
//! (no PostgreSQL); and two real shares merged equal one run, with one
//! plan.json that replays any of their cells.

pub mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use common::matrix::current_only;
use common::rehearse::{checkout, in_checkout, rehearse as command};
use common::scratch::{Scratch, only_report_dir};

use rehearsal::matrix::Matrix;
use rehearsal::partition::{self, Partition, Strategy};
use rehearsal::plan::{Durations, Plan, Request, Selection};
use rehearsal::planfile::{PLAN_JSON, PlanFile};
use rehearsal::servers::Major;

const MATRIX: &str = include_str!("../../matrix.toml");

fn shipped() -> Matrix {
    rehearsal::matrix::parse("matrix.toml", MATRIX).expect("the shipped matrix")
}

/// The shipped full matrix on `majors`, seed 7, whole.
fn request(majors: &[Major]) -> Request {
    Request {
        selection: Selection {
            matrix: Some("full".into()),
            cells: Vec::new(),
        },
        seed: 7,
        postgres: majors.to_vec(),
        ..Request::default()
    }
}

fn full(majors: &[Major]) -> Plan {
    request(majors).expand(&shipped()).unwrap()
}

/// Durations for two cells in three, the rest unknown (placed by hash).
fn some_durations(plan: &Plan) -> BTreeMap<String, u64> {
    plan.cells
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 2)
        .map(|(i, c)| (c.name.clone(), 1_000 + 3_700 * (i as u64 % 11)))
        .collect()
}

#[test]
fn every_cell_of_the_full_matrix_lands_in_exactly_one_share() {
    let matrix = shipped();
    for majors in [vec![], vec![Major(15), Major(18)]] {
        let whole = full(&majors);
        let ids: Vec<String> = whole.cells.iter().map(|c| c.name.clone()).collect();
        assert!(ids.len() >= 10, "the full matrix has {} cells", ids.len());
        if !majors.is_empty() {
            assert!(ids.iter().all(|id| id.contains("@pg")), "{ids:?}");
        }
        let durations = some_durations(&whole);
        for strategy in [Strategy::Hash, Strategy::Slice, Strategy::Duration] {
            for count in 1..=8 {
                let mut seen: BTreeMap<String, u32> = BTreeMap::new();
                for index in 1..=count {
                    let p = Partition {
                        strategy,
                        index,
                        count,
                    };
                    let share = Request {
                        partition: Some(p),
                        durations: Some(Durations {
                            file: "durations.json".into(),
                            cells: durations.clone(),
                        }),
                        ..request(&majors)
                    }
                    .expand(&matrix)
                    .unwrap();
                    let info = share.partition.as_ref().unwrap();
                    assert_eq!(info.cells, ids, "{p}: the whole selection is recorded");
                    assert_eq!((info.index, info.count), (index, count));
                    for cell in &share.cells {
                        // Each share's cells keep the plan they had in the whole run.
                        let planned = whole.cells.iter().find(|c| c.name == cell.name).unwrap();
                        assert_eq!(cell, planned, "{p}");
                        *seen.entry(cell.name.clone()).or_default() += 1;
                    }
                }
                let once: Vec<&String> = seen
                    .iter()
                    .filter(|(_, n)| **n == 1)
                    .map(|(c, _)| c)
                    .collect();
                assert_eq!(once.len(), ids.len(), "{strategy:?} N={count}: {seen:?}");
            }
        }
    }
}

#[test]
fn shares_are_the_same_for_the_same_inputs_and_duration_balances() {
    let whole = full(&[]);
    let ids: Vec<String> = whole.cells.iter().map(|c| c.name.clone()).collect();
    let durations: BTreeMap<String, u64> = ids
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), 1_000 * (i as u64 * 7 % 13 + 1)))
        .collect();
    for strategy in [Strategy::Hash, Strategy::Slice, Strategy::Duration] {
        assert_eq!(
            partition::shares(&ids, strategy, 4, &durations),
            partition::shares(&ids, strategy, 4, &durations.clone())
        );
    }
    // Longest-first packing: no share is heavier than the lightest by more than the longest cell.
    let loads: Vec<u64> = partition::shares(&ids, Strategy::Duration, 4, &durations)
        .iter()
        .map(|s| s.iter().map(|&i| durations[&ids[i]]).sum())
        .collect();
    let longest = durations.values().max().unwrap();
    let (min, max) = (loads.iter().min().unwrap(), loads.iter().max().unwrap());
    assert!(max - min <= *longest, "{loads:?}");
    // Slices keep matrix order.
    let slices = partition::shares(&ids, Strategy::Slice, 3, &BTreeMap::new());
    assert_eq!(slices.concat(), (0..ids.len()).collect::<Vec<_>>());
}

/// Three cells named as the matrix `small`.
const SMALL_CELLS: &str = r#"
[[cell]]
name = "one"
about = "a worker and a producer"
fresh_install = true
steps = [
  { fleet = "current", workers = 1, producers = 1, leader = true },
  { load = "on" },
  { hold = "500ms" },
  { load = "off" },
  { drain = "30s" },
]

[[cell]]
name = "two"
about = "two workers and a producer"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "500ms" },
  { load = "off" },
  { drain = "30s" },
]

[[cell]]
name = "three"
about = "a worker killed"
fresh_install = true
steps = [
  { fleet = "current", workers = 2, producers = 1, leader = true },
  { load = "on" },
  { hold = "500ms" },
  { kill = "worker" },
  { load = "off" },
  { drain = "30s" },
]

[matrix]
small = ["one", "two", "three"]
"#;

/// `rehearse ARGS` inside the checkout; the flags say the rest.
fn rehearse(args: &[&str]) -> Output {
    command()
        .args(args)
        .current_dir(checkout())
        .output()
        .expect("run rehearse")
}

#[test]
fn two_shares_run_and_merged_equal_one_run_and_bad_merges_are_refused() {
    use rehearsal::report::{self, REPORT_JSON};
    let workload = "rate_per_s = 100
backlog = 50
mix = { complete = 9, retry_once = 1 }";
    let scratch = Scratch::with_matrix("partition", "merge", &current_only(workload, SMALL_CELLS));
    let m = scratch.matrix().display().to_string();
    // The small matrix, seed 11, on processes, into `reports`, plus `extra`.
    let small = |reports: &Path, extra: &[&str]| {
        let r = reports.display().to_string();
        let mut args = vec![
            "--matrix-file",
            &m,
            "--matrix",
            "small",
            "--seed",
            "11",
            "-q",
            "--backend",
            "process",
            "--reports-dir",
            &r,
        ];
        args.extend(extra);
        rehearse(&args)
    };
    let mut folders = Vec::new();
    for (tag, extra) in [
        ("whole", &[][..]),
        ("p1", &["--partition", "hash:1/2"][..]),
        ("p2", &["--partition", "hash:2/2"][..]),
    ] {
        let reports = scratch.path().join(tag);
        let output = small(&reports, extra);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        assert_eq!(output.status.code(), Some(0), "{tag}: {stdout}\n{stderr}");
        folders.push(only_report_dir(&reports));
    }
    let whole = report::read_json(&folders[0].join(REPORT_JSON)).unwrap();
    // A copy of the whole run with its cells taken out of report.json is
    // not rendered as a verdict; one with a digest taken out of plan.json
    // is not replayed.
    let gutted = scratch.path().join("gutted");
    std::fs::create_dir_all(&gutted).unwrap();
    for name in [REPORT_JSON, PLAN_JSON] {
        std::fs::copy(folders[0].join(name), gutted.join(name)).unwrap();
    }
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(gutted.join(REPORT_JSON)).unwrap()).unwrap();
    value["cells"] = serde_json::json!([]);
    std::fs::write(gutted.join(REPORT_JSON), value.to_string()).unwrap();
    let output = rehearse(&["report", &gutted.display().to_string()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("3 of the 3 planned cells have no report"),
        "{stderr}"
    );
    assert!(!gutted.join("report.md").exists(), "nothing rendered");
    let plan_text = std::fs::read_to_string(gutted.join(PLAN_JSON)).unwrap();
    let digest = &PlanFile::read(&folders[0].join(PLAN_JSON))
        .unwrap()
        .artifacts[0]
        .digest;
    std::fs::write(
        gutted.join(PLAN_JSON),
        plan_text.replacen(digest.as_str(), "", 1),
    )
    .unwrap();
    let output = rehearse(&["replay", &gutted.join(PLAN_JSON).display().to_string()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not a plan.json"), "{stderr}");
    let (p1, p2) = (
        folders[1].display().to_string(),
        folders[2].display().to_string(),
    );
    let merged_dir = scratch.path().join("merged");
    let out = merged_dir.display().to_string();
    let output = rehearse(&["merge", &p1, &p2, "--out", &out]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let merged = report::read_json(&merged_dir.join(REPORT_JSON)).unwrap();
    // Merging again into the folder that now holds a run overwrites nothing.
    let before = std::fs::read(merged_dir.join(REPORT_JSON)).unwrap();
    let again = rehearse(&["merge", &p1, &p2, "--out", &out]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("already holds a run"), "{stderr}");
    assert_eq!(std::fs::read(merged_dir.join(REPORT_JSON)).unwrap(), before);
    let view = |r: &report::RunReport| -> Vec<(String, rehearsal::observe::Verdict)> {
        r.cells
            .iter()
            .map(|c| (c.name.clone(), c.verdict))
            .collect()
    };
    assert_eq!(
        view(&merged),
        view(&whole),
        "same cells, same verdicts, same order"
    );
    for cell in &merged.cells {
        let single = whole.cells.iter().find(|c| c.name == cell.name).unwrap();
        assert_eq!(
            cell.plan, single.plan,
            "{}: the share ran the whole run's plan",
            cell.name
        );
    }
    assert_eq!(merged.run.merged_from.len(), 2);
    assert!(merged.run.header.partition.is_none());
    assert_eq!(
        merged.run.header.matrix_checksum,
        whole.run.header.matrix_checksum
    );
    for name in ["report.md", "junit.xml", "report.html"] {
        assert!(merged_dir.join(name).is_file(), "{name}");
    }
    assert!(merged_dir.join("logs").is_dir());
    let junit = std::fs::read_to_string(merged_dir.join("junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase ").count(), 3, "{junit}");

    // One plan.json for the whole run: every share's cells, as they ran.
    let merged_plan = PlanFile::read(&merged_dir.join(PLAN_JSON)).expect("the merged plan.json");
    let planned: Vec<&str> = merged_plan
        .plan
        .cells
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(planned, ["one", "two", "three"]);
    for cell in &merged_plan.plan.cells {
        let single = whole.cells.iter().find(|c| c.name == cell.name).unwrap();
        assert_eq!(cell, &single.plan, "{}", cell.name);
    }
    assert_eq!(merged_plan.plan.seed, 11);
    assert!(merged_plan.plan.partition.is_none());
    let current = |artifacts: &[rehearsal::planfile::PinnedArtifact]| {
        artifacts
            .iter()
            .find(|a| a.name == "current")
            .map(|a| a.digest.clone())
    };
    let share_plan = PlanFile::read(&folders[2].join(PLAN_JSON)).unwrap();
    assert_eq!(
        current(&merged_plan.artifacts),
        current(&share_plan.artifacts)
    );
    // ... and it replays any cell of the whole run.
    let replayed_reports = scratch.path().join("replayed");
    let plan_arg = merged_dir.join(PLAN_JSON).display().to_string();
    let output = in_checkout(
        &replayed_reports,
        &["replay", &plan_arg, "--cell", "two", "-q"],
    )
    .output()
    .expect("run rehearse");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "replay: {stderr}");
    let replayed =
        report::read_json(&only_report_dir(&replayed_reports).join(REPORT_JSON)).unwrap();
    assert_eq!(replayed.cells.len(), 1);
    assert_eq!(replayed.cells[0].name, "two");
    let single = whole.cells.iter().find(|c| c.name == "two").unwrap();
    assert_eq!(replayed.cells[0].plan, single.plan);

    // A share of a duration partition starts its cells longest first by
    // the times that split it, not by whatever its reports folder holds.
    let durations = folders[0].join(REPORT_JSON).display().to_string();
    let timed_reports = scratch.path().join("timed");
    let output = small(
        &timed_reports,
        &["--partition", "duration:1/1", "--durations", &durations],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "duration:1/1: {stderr}");
    let timed = report::read_json(&only_report_dir(&timed_reports).join(REPORT_JSON)).unwrap();
    let whole_id = folders[0].file_name().unwrap().to_string_lossy();
    assert!(
        timed.run.header.schedule.contains(&format!(
            "longest first: 3 of 3 cells by their time in run {whole_id}"
        )),
        "{}",
        timed.run.header.schedule
    );

    // A gap: one share alone.
    let refused = |args: &[&str], needles: &[&str]| {
        let output = rehearse(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "{needle} missing from:\n{stderr}");
        }
    };
    let nowhere = scratch.path().join("never").display().to_string();
    // fnv1a64 puts all three cells in share 2 of 2: share 1 is an empty run that passed.
    let empty = report::read_json(&folders[1].join(REPORT_JSON)).unwrap();
    assert!(empty.cells.is_empty() && empty.run.header.partition.is_some());
    // A gap: the empty share alone.
    refused(
        &["merge", &p1, "--out", &nowhere],
        &[
            "missing 3 cells of the selection: one, two, three",
            &p1,
            "no folder of share 2 of 2",
        ],
    );
    // A duplicate: the same share twice.
    refused(
        &["merge", &p1, &p1, &p2, "--out", &nowhere],
        &["are both share hash:1/2"],
    );
    // A share of another commit, and of another matrix file.
    for (field, value, says) in [
        (
            "git_commit",
            "0000000000000000000000000000000000000000",
            "different git commits",
        ),
        ("matrix_checksum", "ffff", "different matrix files"),
    ] {
        let copy = scratch.path().join(format!("copy-{field}"));
        std::fs::create_dir_all(&copy).unwrap();
        let mut value_json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(folders[2].join(REPORT_JSON)).unwrap())
                .unwrap();
        value_json["run"][field] = value.into();
        std::fs::write(copy.join(REPORT_JSON), value_json.to_string()).unwrap();
        let c = copy.display().to_string();
        refused(&["merge", &p1, &c, "--out", &nowhere], &[says, &p1, &c]);
    }
    // A share whose plan.json disagrees with its own report.json on the
    // seed, and one whose plan.json pins another build than its report ran.
    let zeros = "0".repeat(64);
    let pins = "artifact current ran sha256 ".to_owned();
    let pinned = format!(" by report.json, {zeros} by plan.json");
    for (what, says, names_p1) in [
        ("seed", "report.json has seed 11, plan.json 12", false),
        ("digest", pins.as_str(), false),
    ] {
        let copy = scratch.path().join(format!("copy-plan-{what}"));
        std::fs::create_dir_all(&copy).unwrap();
        std::fs::copy(folders[2].join(REPORT_JSON), copy.join(REPORT_JSON)).unwrap();
        let mut plan = PlanFile::read(&folders[2].join(PLAN_JSON)).unwrap();
        match what {
            "seed" => plan.plan.seed += 1,
            _ => {
                for a in &mut plan.artifacts {
                    a.digest.clone_from(&zeros);
                }
            }
        }
        std::fs::write(copy.join(PLAN_JSON), plan.to_json()).unwrap();
        let c = copy.display().to_string();
        let mut needles = vec![says, c.as_str()];
        if what == "digest" {
            needles.push(&pinned);
        }
        if names_p1 {
            needles.push(&p1);
        }
        refused(&["merge", &p1, &c, "--out", &nowhere], &needles);
    }
    // A share without its plan.json.
    let bare = scratch.path().join("copy-no-plan");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::copy(folders[2].join(REPORT_JSON), bare.join(REPORT_JSON)).unwrap();
    let b = bare.display().to_string();
    refused(
        &["merge", &p1, &b, "--out", &nowhere],
        &[&format!("{b} has no plan.json")],
    );
    // A plain run is not a share.
    let w = folders[0].display().to_string();
    refused(
        &["merge", &w, &p2, "--out", &nowhere],
        &["is not a share of a partitioned run"],
    );
    assert!(
        !Path::new(&nowhere).exists(),
        "a refused merge wrote a folder"
    );
}
