//! `--stress`, as the flag, the plan's replay line and report.json name
//! it: how much load ran beside a run. Starting the busy processes is
//! `stress`' work.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most busy processes `cpu=N` starts.
pub const MAX_PROCESSES: u32 = 256;

/// The most busy processes per core `cpu=Nx` starts: past this the
/// machine is not noisy but unusable, and every cell would starve.
pub const MAX_PER_CORE: u32 = 16;

/// `--stress`: how much load to run beside the cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stress {
    /// `cpu=N`: N busy processes, whatever the cores.
    Processes(u32),
    /// `cpu=Nx`: N busy processes per core.
    PerCore(u32),
}

/// The accepted forms, for every refusal.
const FORMS: &str =
    "cpu=N (N busy processes, 1 to 256) or cpu=Nx (N per core, 1x to 16x), e.g. cpu=2x";

impl FromStr for Stress {
    type Err = String;

    // A String: `--stress`'s value parser hands it to clap, which prints it as it is.
    fn from_str(s: &str) -> Result<Stress, String> {
        let refuse = |why: &str| format!("\"{s}\" {why}; give {FORMS}");
        let Some(value) = s.strip_prefix("cpu=") else {
            return Err(refuse("is not a CPU load"));
        };
        let (digits, per_core) = match value.strip_suffix('x') {
            Some(digits) => (digits, true),
            None => (value, false),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refuse("is not a count nor a multiple of the cores"));
        }
        let n = digits.parse::<u32>().unwrap_or(u32::MAX);
        match per_core {
            true if (1..=MAX_PER_CORE).contains(&n) => Ok(Stress::PerCore(n)),
            true => Err(refuse(&format!("is not 1x to {MAX_PER_CORE}x the cores"))),
            false if (1..=MAX_PROCESSES).contains(&n) => Ok(Stress::Processes(n)),
            false => Err(refuse(&format!("is not 1 to {MAX_PROCESSES} processes"))),
        }
    }
}

impl fmt::Display for Stress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stress::Processes(n) => write!(f, "cpu={n}"),
            Stress::PerCore(n) => write!(f, "cpu={n}x"),
        }
    }
}

/// As the flag's value (`"cpu=2x"`), in report.json.
impl Serialize for Stress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Stress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stress, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Stress {
    /// How many busy processes it means on a machine of `cores`.
    pub fn processes(self, cores: u32) -> u32 {
        match self {
            Stress::Processes(n) => n,
            Stress::PerCore(n) => n * cores.max(1),
        }
    }

    /// What report.json records of it on a machine of `cores`.
    pub fn info(self, cores: u32) -> StressInfo {
        StressInfo {
            spec: self,
            processes: self.processes(cores),
            cores,
        }
    }
}

/// The load a run ran beside, as report.json records it (format 1.15):
/// the verdicts of a stressed run were reached on a deliberately
/// oversubscribed machine, and its replay line repeats the flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StressInfo {
    /// The flag's value (`cpu=2x`).
    pub spec: Stress,
    /// Busy processes it started.
    pub processes: u32,
    /// The machine's cores, as the scheduler counts them.
    pub cores: u32,
}

impl StressInfo {
    /// `4 busy processes (2x the 2 cores)`, for the terminal and the run table.
    pub fn describe(&self) -> String {
        let busy = format!(
            "{} busy process{}",
            self.processes,
            if self.processes == 1 { "" } else { "es" }
        );
        let cores = format!(
            "{} core{}",
            self.cores,
            if self.cores == 1 { "" } else { "s" }
        );
        match self.spec {
            Stress::PerCore(n) => format!("{busy} ({n}x the {cores})"),
            Stress::Processes(_) => format!("{busy} (on {cores})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_takes_a_count_or_a_multiple_of_the_cores() {
        for (text, stress) in [
            ("cpu=1", Stress::Processes(1)),
            ("cpu=4", Stress::Processes(4)),
            ("cpu=256", Stress::Processes(256)),
            ("cpu=04", Stress::Processes(4)),
            ("cpu=1x", Stress::PerCore(1)),
            ("cpu=2x", Stress::PerCore(2)),
            ("cpu=16x", Stress::PerCore(16)),
        ] {
            assert_eq!(text.parse::<Stress>(), Ok(stress), "{text}");
        }
        for text in [
            "",
            "cpu",
            "cpu=",
            "cpu=0",
            "cpu=257",
            "cpu=99999999999",
            "cpu=0x",
            "cpu=17x",
            "cpu=x",
            "cpu=-1",
            "cpu=+2",
            "cpu=1.5",
            "cpu=1.5x",
            "cpu=2xx",
            "cpu=2X",
            "cpu= 2",
            "cpu=2 ",
            "CPU=2",
            "mem=2",
            "io=2x",
            "cpu=2,io=1",
            "2",
            "2x",
        ] {
            let err = text.parse::<Stress>().expect_err(text);
            assert!(
                err.starts_with(&format!("\"{text}\" "))
                    && err.contains("cpu=N")
                    && err.contains("cpu=Nx"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn it_is_written_as_typed_and_counted_on_the_cores() {
        for text in ["cpu=3", "cpu=2x"] {
            let stress: Stress = text.parse().unwrap();
            assert_eq!(stress.to_string(), text);
            let json = serde_json::to_string(&stress).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<Stress>(&json).unwrap(), stress);
        }
        assert!(serde_json::from_str::<Stress>("\"cpu=0\"").is_err());
        assert_eq!(Stress::PerCore(2).processes(2), 4);
        assert_eq!(Stress::PerCore(2).processes(0), 2);
        assert_eq!(Stress::Processes(3).processes(64), 3);
        assert_eq!(
            Stress::PerCore(2).info(2).describe(),
            "4 busy processes (2x the 2 cores)"
        );
        assert_eq!(
            Stress::Processes(1).info(1).describe(),
            "1 busy process (on 1 core)"
        );
    }
}
