//! The plan stage's tests: the seeded streams, selection, each cell's
//! drawn plan, its text and its replay line.

use std::path::Path;

use super::*;
use crate::matrix::{Step, parse};

const SHIPPED: &str = include_str!("../../../matrix.toml");

/// Artifacts, workload and timings for purpose-built test matrices.
const BASE: &str = r#"
[artifacts.previous]
release = "0.6.2"
[artifacts.current]
build = "workspace"
[workload]
rate_per_s = 10
mix = { complete = 1 }
[timings]
heartbeat = "200ms"
stale_after = "1500ms"
rescue_every = "250ms"
rotate_every = "1s"
deadline = "2s"
drain_timeout = "60s"
"#;

/// Cells built so that kills have many candidates: the seed must matter.
const KILLS: &str = r#"
[[cell]]
name = "many-kills"
about = "eight workers, five kills"
steps = [
  { fleet = "previous", workers = 8, producers = 2 },
  { kill = "worker" },
  { kill = "worker", of = "previous" },
  { kill = "worker", after_started = 7 },
  { kill = "producer" },
  { kill = "leader" },
  { drain = "10s" },
]

[[cell]]
name = "same-steps-other-name"
about = "the same steps under another name"
steps = [
  { fleet = "previous", workers = 8, producers = 2 },
  { kill = "worker" },
  { kill = "worker", of = "previous" },
  { kill = "worker", after_started = 7 },
  { kill = "producer" },
  { kill = "leader" },
  { drain = "10s" },
]

[[cell]]
name = "quiet"
about = "no random choices"
steps = [{ fleet = "current", workers = 1 }, { hold = "1s" }]

[matrix]
smoke = ["quiet", "many-kills"]
full = ["*"]
"#;

fn kills_matrix() -> Matrix {
    parse("test.toml", &format!("{KILLS}{BASE}")).unwrap_or_else(|d| panic!("{d}"))
}

fn shipped() -> Matrix {
    parse("matrix.toml", SHIPPED).unwrap_or_else(|d| panic!("{d}"))
}

fn by_matrix(name: &str) -> Selection {
    Selection {
        matrix: Some(name.to_owned()),
        cells: vec![],
    }
}

fn by_cells(cells: &[&str]) -> Selection {
    Selection {
        matrix: None,
        cells: cells.iter().map(|c| (*c).to_owned()).collect(),
    }
}

fn kills(cell: &CellPlan) -> Vec<&PlannedKill> {
    cell.steps
        .iter()
        .filter_map(|s| if let Step::Kill(k) = s { Some(k) } else { None })
        .collect()
}

fn names(plan: &Plan) -> Vec<&str> {
    plan.cells.iter().map(|c| c.name.as_str()).collect()
}

#[test]
fn fnv1a64_matches_the_reference_vectors() {
    assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn splitmix64_matches_the_reference_sequence() {
    let mut rng = SplitMix64::new(0);
    assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
    assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    assert_eq!(rng.next_u64(), 0x06c4_5d18_8009_454f);
}

#[test]
fn below_stays_in_range_and_reaches_every_value() {
    let mut rng = SplitMix64::new(7);
    let mut seen = [false; 5];
    for _ in 0..1_000 {
        let v = rng.below(5);
        assert!(v < 5);
        seen[v as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
    assert_eq!(SplitMix64::new(1).below(1), 0);
}

#[test]
fn a_retry_draws_its_choices_again_and_keeps_the_cells_name_and_server() {
    let matrix = kills_matrix();
    let first = &expand(&matrix, &by_cells(&["many-kills"]), 1)
        .unwrap()
        .cells[0];
    let mut copy = first.clone();
    copy.name = "many-kills@pg18".into();
    copy.server = Some(crate::servers::Major::parse("18").expect("a major"));
    let seeds: Vec<u64> = (2..6).map(|attempt| retry_seed(1, attempt)).collect();
    assert_eq!(seeds, (2..6).map(|a| retry_seed(1, a)).collect::<Vec<_>>());
    assert!(seeds.iter().all(|&s| s != 1) && seeds.windows(2).all(|w| w[0] != w[1]));
    let again: Vec<CellPlan> = seeds
        .iter()
        .map(|&seed| replan(&matrix, &copy, seed).expect("the cell is in the matrix"))
        .collect();
    assert!(
        again
            .iter()
            .all(|p| p.name == "many-kills@pg18" && p.server == copy.server)
    );
    // Some try picks another victim than the first.
    assert!(again.iter().any(|p| p.steps != first.steps), "{again:#?}");
    let mut stranger = first.clone();
    stranger.name = "not-in-the-matrix".into();
    assert_eq!(replan(&matrix, &stranger, 7), None);
}

#[test]
fn same_seed_gives_an_identical_plan() {
    let matrix = shipped();
    let a = expand(&matrix, &by_matrix("full"), 1234).unwrap();
    let b = expand(&matrix, &by_matrix("full"), 1234).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let c = expand(&kills_matrix(), &by_matrix("full"), 99).unwrap();
    let d = expand(&kills_matrix(), &by_matrix("full"), 99).unwrap();
    assert_eq!(
        serde_json::to_string(&c).unwrap(),
        serde_json::to_string(&d).unwrap()
    );
}

#[test]
fn different_seeds_choose_different_kills() {
    let matrix = kills_matrix();
    let one = expand(&matrix, &by_cells(&["many-kills"]), 1).unwrap();
    let two = expand(&matrix, &by_cells(&["many-kills"]), 2).unwrap();
    let picks = |p: &Plan| {
        kills(&p.cells[0])
            .iter()
            .map(|k| (k.pick, k.jitter))
            .collect::<Vec<_>>()
    };
    assert_ne!(picks(&one), picks(&two));
    // Over a handful of seeds the first kill hits more than one worker.
    let victims: std::collections::BTreeSet<u32> = (0..16)
        .map(|seed| {
            kills(
                &expand(&matrix, &by_cells(&["many-kills"]), seed)
                    .unwrap()
                    .cells[0],
            )[0]
            .pick
            .unwrap()
            .nth
        })
        .collect();
    assert!(victims.len() > 1, "{victims:?}");
}

#[test]
fn the_plan_for_a_seed_is_pinned() {
    // A replay of an old report must choose the same victims: if this
    // changes, the PRNG or the draw order changed, and old replays break.
    let plan = expand(&kills_matrix(), &by_cells(&["many-kills"]), 42).unwrap();
    let summary: Vec<String> = kills(&plan.cells[0])
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(summary, PINNED_42);
}

/// Cross-checked against an independent Python implementation of splitmix64 and FNV-1a.
const PINNED_42: [&str; 5] = [
    "kill worker #7 of the 8 workers: now, after 28ms jitter",
    "kill worker #7 of the 7 previous workers: now, after 351ms jitter",
    "kill worker #1 of the 6 workers: now, once it has started 7 jobs",
    "kill producer #2 of the 2 producers: now, after 108ms jitter",
    "kill the leader: now, after 493ms jitter",
];

#[test]
fn the_cell_name_seeds_its_own_stream() {
    let matrix = kills_matrix();
    let plan = expand(&matrix, &by_matrix("full"), 42).unwrap();
    let a: Vec<_> = kills(&plan.cells[0])
        .iter()
        .map(|k| (k.pick, k.jitter))
        .collect();
    let b: Vec<_> = kills(&plan.cells[1])
        .iter()
        .map(|k| (k.pick, k.jitter))
        .collect();
    assert_ne!(a, b, "two cells with the same steps drew the same choices");
    // Planning a cell alone or among others gives it the same choices.
    let alone = expand(&matrix, &by_cells(&["many-kills"]), 42).unwrap();
    assert_eq!(alone.cells[0], plan.cells[0]);
}

#[test]
fn kills_resolve_candidates_and_jitter() {
    let plan = expand(&kills_matrix(), &by_cells(&["many-kills"]), 5).unwrap();
    let k = kills(&plan.cells[0]);
    let amongs: Vec<Option<u32>> = k.iter().map(|k| k.pick.map(|p| p.among)).collect();
    // 8 workers; then 7 of previous; then 6; producers 2; the leader has no pick.
    assert_eq!(amongs, [Some(8), Some(7), Some(6), Some(2), None]);
    for kill in &k {
        if let Some(p) = kill.pick {
            assert!((1..=p.among).contains(&p.nth), "{p:?}");
        }
        // Jitter exactly when the kill does not wait for started jobs.
        assert_eq!(kill.jitter.is_some(), kill.after_started == 0);
        assert!(kill.jitter.is_none_or(|j| j.as_millis() <= MAX_JITTER_MS));
    }
    assert_eq!(k[2].after_started, 7);
}

#[test]
fn shipped_kills_count_candidates_through_the_fleet() {
    let plan = expand(&shipped(), &by_cells(&["hard-kill-rescue"]), 3).unwrap();
    let amongs: Vec<Option<u32>> = kills(&plan.cells[0])
        .iter()
        .map(|k| k.pick.map(|p| p.among))
        .collect();
    assert_eq!(amongs, [Some(4), Some(2), Some(4), Some(1), Some(5)]);
}

#[test]
fn selection_by_matrix_name_keeps_its_order() {
    let matrix = shipped();
    let plan = expand(&matrix, &by_matrix("smoke"), 1).unwrap();
    assert_eq!(names(&plan), ["migrate-first", "binary-first", "fence"]);
    assert_eq!(plan.replay, "rehearse --matrix smoke --seed 1");
    let full = expand(&matrix, &by_matrix("full"), 1).unwrap();
    assert_eq!(full.cells.len(), matrix.cells.len());
    let defects = expand(&matrix, &by_matrix("defects"), 1).unwrap();
    assert!(names(&defects).iter().all(|n| n.starts_with("defect-")));
    assert!(defects.cells.len() >= 7, "{:?}", names(&defects));
    let test = expand(&kills_matrix(), &by_matrix("smoke"), 1).unwrap();
    assert_eq!(names(&test), ["quiet", "many-kills"]);
}

#[test]
fn selection_by_cell_uses_file_order() {
    let plan = expand(&shipped(), &by_cells(&["fence", "migrate-first"]), 1).unwrap();
    assert_eq!(names(&plan), ["migrate-first", "fence"]);
    assert_eq!(
        plan.replay,
        "rehearse --cell fence --cell migrate-first --seed 1"
    );
}

#[test]
fn cells_restrict_a_named_matrix() {
    let selection = Selection {
        matrix: Some("smoke".into()),
        cells: vec!["fence".into()],
    };
    let plan = expand(&shipped(), &selection, 1).unwrap();
    assert_eq!(names(&plan), ["fence"]);
    assert_eq!(plan.replay, "rehearse --matrix smoke --cell fence --seed 1");
}

#[test]
fn unknown_names_are_refused_with_the_valid_ones() {
    let matrix = kills_matrix();
    assert_eq!(
        expand(&matrix, &by_matrix("smok"), 1)
            .unwrap_err()
            .to_string(),
        "unknown matrix \"smok\" (did you mean \"smoke\"?); named matrices: full, smoke"
    );
    assert_eq!(
        expand(&matrix, &by_cells(&["quiet", "loud"]), 1)
            .unwrap_err()
            .to_string(),
        "unknown cell \"loud\"; cells: many-kills, same-steps-other-name, quiet"
    );
    let outside = Selection {
        matrix: Some("smoke".into()),
        cells: vec!["same-steps-other-name".into()],
    };
    assert_eq!(
        expand(&matrix, &outside, 1).unwrap_err().to_string(),
        "cell \"same-steps-other-name\" is not in matrix \"smoke\", which has: quiet, many-kills"
    );
    assert_eq!(
        expand(&matrix, &Selection::default(), 1).unwrap_err(),
        SelectError::Nothing {
            matrices: "full, smoke".into()
        }
    );
}

#[test]
fn cell_plans_carry_what_the_driver_needs() {
    let matrix = shipped();
    let plan = expand(
        &matrix,
        &by_cells(&["fresh-install", "defect-flip-skip-reconcile"]),
        8,
    )
    .unwrap();
    let fresh = plan
        .cells
        .iter()
        .find(|c| c.name == "fresh-install")
        .unwrap();
    assert_eq!(
        fresh.database,
        DatabaseSetup {
            fresh_install: true,
            migrated_by: "current".into()
        }
    );
    assert_eq!(
        fresh.artifacts.keys().collect::<Vec<_>>(),
        ["current", "previous"]
    );
    assert_eq!(fresh.workload, matrix.workload);
    assert_eq!(fresh.timings, matrix.timings);
    let defect = plan
        .cells
        .iter()
        .find(|c| c.name == "defect-flip-skip-reconcile")
        .unwrap();
    assert_eq!(defect.database.migrated_by, "previous");
    assert_eq!(
        defect.expect,
        Expectation::Detect(crate::matrix::FindingRule::FlipUnverified)
    );
    assert_eq!(
        defect.artifacts["defective_flip"].failpoint.as_deref(),
        Some("flip_skip_reconcile")
    );
    assert_eq!(
        defect.artifacts.keys().collect::<Vec<_>>(),
        ["defective_flip", "previous"]
    );
}

#[test]
fn a_path_cell_starts_on_its_first_release_and_the_plan_prints_the_path() {
    let matrix = shipped();
    let plan = expand(&matrix, &by_cells(&["path-through-stepping-stone"]), 4).unwrap();
    let cell = &plan.cells[0];
    assert_eq!(cell.database.migrated_by, "pre_guard");
    assert_eq!(
        cell.artifacts.keys().collect::<Vec<_>>(),
        ["current", "pre_guard", "previous"]
    );
    let path = cell.path.as_ref().unwrap();
    let text = render(&plan);
    assert!(
        text.contains(&format!(
            "  path: {path}\n  database: created by pre_guard, the path's first release\n"
        )),
        "{text}"
    );
    assert!(
        path.to_string()
            .starts_with("pre_guard 0.6.1 -> previous 0.6.2 -> current "),
        "{path}"
    );
    // A cell without a path has none in its plan (nor in report.json).
    let plain = expand(&matrix, &by_cells(&["fence"]), 4).unwrap();
    assert_eq!(plain.cells[0].path, None);
    let json = serde_json::to_value(&plain.cells[0]).unwrap();
    assert!(json.get("path").is_none());
}

#[test]
fn cells_that_compare_schemas_carry_the_declared_differences_and_use_current() {
    let text = format!(
        "{BASE}[schema]\nintended = [{{ object = \"index awa.x\", reason = \"kept\" }}]\n\
         [[cell]]\nname = \"s\"\nabout = \"compare\"\nsteps = [{{ fleet = \"previous\", workers = 1 }}, {{ migrate = \"previous\" }}, {{ assert = \"schema_matches_fresh\" }}]\n\
         [[cell]]\nname = \"t\"\nabout = \"no compare\"\nsteps = [{{ fleet = \"previous\", workers = 1 }}]\n"
    );
    let matrix = parse("test.toml", &text).unwrap_or_else(|d| panic!("{d}"));
    let plan = expand(&matrix, &by_cells(&["s", "t"]), 1).unwrap();
    assert_eq!(plan.cells[0].schema_intended, matrix.schema.intended);
    assert_eq!(
        plan.cells[0].artifacts.keys().collect::<Vec<_>>(),
        ["current", "previous"]
    );
    assert!(plan.cells[1].schema_intended.is_empty());
    assert_eq!(
        plan.cells[1].artifacts.keys().collect::<Vec<_>>(),
        ["previous"]
    );
}

#[test]
fn plans_round_trip_through_json() {
    let plan = expand(&shipped(), &by_matrix("full"), 77).unwrap();
    let json = serde_json::to_string(&plan).unwrap();
    let back: Plan = serde_json::from_str(&json).unwrap();
    assert_eq!(back, plan);
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let kill = &value["cells"][7]["steps"][3];
    assert_eq!(value["cells"][7]["name"], "hard-kill-rescue");
    assert_eq!(kill["step"], "kill");
    assert_eq!(kill["target"], "worker");
    assert_eq!(kill["after_started"], 20);
    assert_eq!(kill["pick"]["among"], 4);
}

#[test]
fn render_shows_seed_replay_and_numbered_steps() {
    let plan = expand(&kills_matrix(), &by_cells(&["quiet"]), 3).unwrap();
    assert_eq!(
        render(&plan),
        "plan: 1 cell, seed 3\n\
         replay: rehearse --cell quiet --seed 3\n\
         workload: 10 jobs/s live, backlog 0, mix complete 1\n\
         timings: heartbeat 200ms, stale_after 1500ms, rescue_every 250ms, rotate_every 1s, deadline 2s, drain_timeout 1m, budget 5m\n\
         \n\
         cell quiet: no random choices\n  \
           expect: pass\n  \
           database: N-1 schema, migrated by previous\n  \
           artifacts: current = workspace build; previous = release 0.6.2\n  \
           1. fleet current: 1 worker\n  \
           2. hold 1s\n"
    );
}

#[test]
fn replay_quotes_what_a_shell_would_split() {
    let selection = by_cells(&["fence"]);
    assert_eq!(
        replay_command(&selection, 9, Some(Path::new("/tmp/my matrix.toml"))),
        "rehearse --matrix-file '/tmp/my matrix.toml' --cell fence --seed 9"
    );
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
    assert_eq!(shell_quote(""), "''");
    assert_eq!(
        shell_quote("postgres://u@h:5/db,x=y"),
        "postgres://u@h:5/db,x=y"
    );
    assert_eq!(
        shell_quote("postgres://u:***@h/db"),
        "'postgres://u:***@h/db'"
    );
    assert_eq!(shell_quote("a b;c$d"), "'a b;c$d'");
}
