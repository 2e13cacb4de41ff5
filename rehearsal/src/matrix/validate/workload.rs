//! The `[workload]` and `[timings]` checks, and a cell's workload override:
//! rates, backlogs and weights within bounds, durations that parse.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use super::{MAX_BACKLOG, MAX_RATE_PER_S, MAX_WEIGHT};
use crate::matrix::diagnostic::{Problems, did_you_mean};
use crate::matrix::duration::Duration;
use crate::matrix::model::{
    Cron, DEFAULT_BUDGET, DEFAULT_SLEEP, JobMode, Timings, Workload, WorkloadOverride,
};
use crate::matrix::raw::{RawMix, RawTimings, RawWorkload, table_head};

/// Parses a required duration key of a section; `min_ms` is the smallest valid length.
pub(super) fn duration_key(
    value: &Option<Spanned<String>>,
    key: &str,
    section: &Range<usize>,
    context: &str,
    sink: &mut Problems<'_>,
) -> Option<Duration> {
    let Some(value) = value else {
        sink.error(
            table_head(section),
            context,
            format!("missing {key} = \"DURATION\""),
        );
        return None;
    };
    match value.get_ref().parse::<Duration>() {
        Ok(d) if d.is_zero() => {
            sink.error(
                Some(value.span()),
                context,
                format!("{key} must be longer than 0s"),
            );
            None
        }
        Ok(d) => Some(d),
        Err(e) => {
            sink.error(Some(value.span()), context, format!("{key}: {e}"));
            None
        }
    }
}

pub(super) fn integer_key(
    value: &Option<Spanned<i64>>,
    key: &str,
    range: (i64, i64),
    section: &Range<usize>,
    context: &str,
    sink: &mut Problems<'_>,
) -> Option<i64> {
    let Some(value) = value else {
        sink.error(
            table_head(section),
            context,
            format!(
                "missing {key} = N (an integer from {} to {})",
                range.0, range.1
            ),
        );
        return None;
    };
    let n = *value.get_ref();
    if !(range.0..=range.1).contains(&n) {
        sink.error(
            Some(value.span()),
            context,
            format!(
                "{key} must be an integer from {} to {}, found {n}",
                range.0, range.1
            ),
        );
        return None;
    }
    Some(n)
}

pub(super) fn validate_workload(
    w: &Spanned<RawWorkload>,
    sink: &mut Problems<'_>,
) -> Option<Workload> {
    let context = "workload";
    let span = w.span();
    let w = w.get_ref();
    let rate = integer_key(
        &w.rate_per_s,
        "rate_per_s",
        (1, MAX_RATE_PER_S),
        &span,
        context,
        sink,
    );
    let backlog = match &w.backlog {
        Some(_) => integer_key(
            &w.backlog,
            "backlog",
            (0, MAX_BACKLOG),
            &span,
            context,
            sink,
        ),
        None => Some(0),
    };
    let mix = match &w.mix {
        Some(mix) => validate_mix(mix, sink),
        None => {
            sink.error(
                table_head(&span),
                context,
                "missing mix = { complete = N, ... } (job mode weights)",
            );
            None
        }
    };
    let cron = cron_of(w, "workload", sink);
    let sleep = match &w.sleep {
        Some(_) => duration_key(&w.sleep, "sleep", &span, context, sink),
        None => Some(DEFAULT_SLEEP),
    };
    Some(Workload {
        rate_per_s: u32::try_from(rate?).ok()?,
        backlog: u64::try_from(backlog?).ok()?,
        mix: mix?,
        cron: cron?,
        sleep: sleep?,
    })
}

/// `cron = { every = "DURATION" }` of a workload (`context`: its table),
/// `Some(None)` when it has none; `None` with the error said.
pub(super) fn cron_of(
    w: &RawWorkload,
    context: &str,
    sink: &mut Problems<'_>,
) -> Option<Option<Cron>> {
    let Some(cron) = &w.cron else {
        return Some(None);
    };
    duration_key(
        &cron.get_ref().every,
        "every",
        &cron.span(),
        &format!("{context}.cron"),
        sink,
    )
    .map(|every| Some(Cron { every }))
}

/// A cell's `workload = { ... }`: each key given is checked as in
/// `[workload]`.
pub(super) fn validate_override(
    w: &Spanned<RawWorkload>,
    label: &str,
    sink: &mut Problems<'_>,
) -> Option<WorkloadOverride> {
    let context = format!("{label}, workload");
    let span = w.span();
    let w = w.get_ref();
    let cron = cron_of(w, &context, sink);
    let rate = match &w.rate_per_s {
        Some(_) => integer_key(
            &w.rate_per_s,
            "rate_per_s",
            (1, MAX_RATE_PER_S),
            &span,
            &context,
            sink,
        )
        .map(|r| Some(u32::try_from(r).unwrap_or(u32::MAX))),
        None => Some(None),
    };
    let backlog = match &w.backlog {
        Some(_) => integer_key(
            &w.backlog,
            "backlog",
            (0, MAX_BACKLOG),
            &span,
            &context,
            sink,
        )
        .map(|b| Some(u64::try_from(b).unwrap_or(0))),
        None => Some(None),
    };
    let mix = match &w.mix {
        Some(mix) => validate_mix(mix, sink).map(Some),
        None => Some(None),
    };
    let sleep = match &w.sleep {
        Some(_) => duration_key(&w.sleep, "sleep", &span, &context, sink).map(Some),
        None => Some(None),
    };
    Some(WorkloadOverride {
        rate_per_s: rate?,
        backlog: backlog?,
        mix: mix?,
        sleep: sleep?,
        cron: cron?,
    })
}

pub(super) fn validate_mix(
    mix: &RawMix,
    sink: &mut Problems<'_>,
) -> Option<BTreeMap<JobMode, u32>> {
    let context = "workload.mix";
    let names: Vec<&str> = JobMode::ALL.iter().map(|m| m.name()).collect();
    let mut weights = BTreeMap::new();
    let mut ok = true;
    let mut entries: Vec<_> = mix.get_ref().iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    for (key, weight) in entries {
        let Some(mode) = JobMode::ALL.into_iter().find(|m| m.name() == key.get_ref()) else {
            sink.error(
                Some(key.span()),
                context,
                format!(
                    "unknown job mode \"{}\"{}; expected one of {}",
                    key.get_ref(),
                    did_you_mean(key.get_ref(), names.iter().copied()),
                    names.join(", ")
                ),
            );
            ok = false;
            continue;
        };
        let n = *weight.get_ref();
        if !(0..=MAX_WEIGHT).contains(&n) {
            sink.error(
                Some(weight.span()),
                context,
                format!(
                    "weight of {} must be an integer from 0 to {MAX_WEIGHT}, found {n}",
                    key.get_ref()
                ),
            );
            ok = false;
            continue;
        }
        weights.insert(mode, n as u32);
    }
    if ok && weights.values().all(|&w| w == 0) {
        sink.error(
            Some(mix.span()),
            context,
            "the weights add up to 0; give at least one job mode a positive weight",
        );
        ok = false;
    }
    ok.then_some(weights)
}

pub(super) fn validate_timings(
    t: &Spanned<RawTimings>,
    sink: &mut Problems<'_>,
) -> Option<Timings> {
    let context = "timings";
    let span = t.span();
    let t = t.get_ref();
    let heartbeat = duration_key(&t.heartbeat, "heartbeat", &span, context, sink);
    let stale_after = duration_key(&t.stale_after, "stale_after", &span, context, sink);
    let rescue_every = duration_key(&t.rescue_every, "rescue_every", &span, context, sink);
    let rotate_every = duration_key(&t.rotate_every, "rotate_every", &span, context, sink);
    let deadline = duration_key(&t.deadline, "deadline", &span, context, sink);
    let drain_timeout = duration_key(&t.drain_timeout, "drain_timeout", &span, context, sink);
    let budget = match &t.budget {
        None => Some(DEFAULT_BUDGET),
        Some(_) => duration_key(&t.budget, "budget", &span, context, sink),
    };
    if let (Some(h), Some(s), Some(raw)) = (heartbeat, stale_after, &t.stale_after)
        && s <= h
    {
        sink.error(
            Some(raw.span()),
            context,
            format!("stale_after ({s}) must be longer than heartbeat ({h}), or every live worker looks stale"),
        );
        return None;
    }
    Some(Timings {
        heartbeat: heartbeat?,
        stale_after: stale_after?,
        rescue_every: rescue_every?,
        rotate_every: rotate_every?,
        deadline: deadline?,
        drain_timeout: drain_timeout?,
        budget: budget?,
    })
}
