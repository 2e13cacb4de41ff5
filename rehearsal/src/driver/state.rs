//! The cell's state, owned in one place: its seats in the fleet, the
//! faults armed and the processes suspended, the step running, and what
//! it observed and proved so far. What the processes reported is the
//! ledger's ([`super::ledger::FleetView`]); steps read it through
//! `StepCtx::proc` and `StepCtx::view`, which never hold its lock across an
//! await. Plain data: nothing here names the cell or its steps.

use std::collections::{BTreeMap, BTreeSet};

use super::ledger::Role;
use super::migration_hold::MigrationHold;
use crate::fleet::ProcId;
use crate::matrix::{FleetStep, KillTarget, When};
use crate::observe::{FaultRecord, Observations, ProvedFacts, StepFailure};
use crate::plan::PlannedKill;

/// A fault armed for the next migrate or flip.
#[derive(Clone, Debug)]
pub(super) enum ArmedFault {
    Kill(PlannedKill),
    Crash,
    /// Start these runtimes inside the migration (after its preflight).
    Fleet(FleetStep),
}

/// A process a `suspend` step stopped.
#[derive(Clone, Debug)]
pub(super) struct Suspension {
    pub target: KillTarget,
    pub of: Option<String>,
    pub id: ProcId,
    /// When it was stopped (ms since the cell started).
    pub at_ms: u64,
    /// It goes on by itself (`for`); a `resume` step ends only the others.
    pub timed: bool,
}

/// One place in the fleet: a worker or a producer of some artifact.
/// A roll replaces a seat's process; a kill removes the seat.
#[derive(Clone, Debug)]
pub(super) struct Seat {
    pub role: Role,
    pub artifact: String,
    /// The process filling it now (producers only while load is on).
    pub proc: Option<ProcId>,
    /// The last process started for it (also when it refused or died).
    pub last: Option<ProcId>,
    /// Its binary refused on the N-1 schema; re-launched after the next migrate.
    pub parked: bool,
    /// Gone: killed, refused for good, or died; removed after the step.
    pub dead: bool,
    /// An idle worker (see [`super::env::IDLE`]).
    pub idle: bool,
}

/// A flip started ahead of its step and already let go at the start gate:
/// the flip step judges this process instead of starting one.
#[derive(Clone, Debug)]
pub(super) struct GatedFlip {
    pub id: crate::fleet::ProcId,
    /// When the gate opened (ms since the cell started).
    pub opened_ms: u64,
}

/// Everything a cell keeps between its steps.
pub(super) struct CellState {
    /// The fleet's seats, in the order they were added.
    pub seats: Vec<Seat>,
    /// `load = "on"` and not yet off.
    pub load_on: bool,
    /// Faults waiting for the next migrate or flip.
    pub armed: Vec<(When, ArmedFault)>,
    /// Keeps the migration in flight open while runtimes armed for it start.
    pub migration_hold: Option<MigrationHold>,
    /// Processes suspend steps stopped, in order.
    pub suspended: Vec<Suspension>,
    /// Processes started so far per (artifact, role), for their names.
    pub names: BTreeMap<(String, Role), u32>,
    /// Artifacts whose workers auto-flip (the `by` of a `flip = "auto"` step).
    pub auto_flip_by: BTreeSet<String>,
    /// A drain step ran (so the cell needs no final one).
    pub drained: bool,
    /// Processes whose unexpected end was already reported.
    pub reported_exits: BTreeSet<ProcId>,
    /// What the cell observed, for reconciliation.
    pub obs: Observations,
    /// What the cell proved, for the report's sentences.
    pub facts: ProvedFacts,
    /// A flip a `hold` with `until` started ahead and let go (see steps/gate.rs).
    pub gated_flip: Option<GatedFlip>,
    /// The step running (1-based; 0 for setup and the end).
    pub step_index: usize,
    pub step_name: &'static str,
}

impl CellState {
    /// A cell before its setup.
    pub fn new(auto_flip_by: BTreeSet<String>) -> Self {
        CellState {
            seats: Vec::new(),
            load_on: false,
            armed: Vec::new(),
            migration_hold: None,
            suspended: Vec::new(),
            names: BTreeMap::new(),
            auto_flip_by,
            drained: false,
            reported_exits: BTreeSet::new(),
            obs: Observations::default(),
            facts: ProvedFacts::default(),
            gated_flip: None,
            step_index: 0,
            step_name: "setup",
        }
    }

    /// Records a step failure: the product did not do what the plan requires.
    pub fn fail(&mut self, message: impl Into<String>) {
        self.obs.step_failures.push(StepFailure {
            step: self.step_index,
            kind: self.step_name.to_owned(),
            message: message.into(),
        });
    }

    /// Records the evidence of a fault of the step running now.
    pub fn record_fault(
        &mut self,
        fault: impl Into<String>,
        fired: bool,
        evidence: impl Into<String>,
    ) {
        self.obs.faults.push(FaultRecord {
            step: self.step_index,
            fault: fault.into(),
            fired,
            evidence: evidence.into(),
        });
    }

    /// Adds `n` empty seats of `role` for `artifact`; returns their indexes.
    pub fn add_seats(&mut self, role: Role, artifact: &str, n: u32) -> Vec<usize> {
        let first = self.seats.len();
        for _ in 0..n {
            self.seats.push(Seat {
                role,
                artifact: artifact.to_owned(),
                proc: None,
                last: None,
                parked: false,
                dead: false,
                idle: false,
            });
        }
        (first..self.seats.len()).collect()
    }

    /// The seat a process fills.
    pub fn seat_of(&self, id: ProcId) -> Option<usize> {
        self.seats
            .iter()
            .position(|s| s.proc == Some(id) && !s.dead)
    }
}
