//! A container's log stream read as the process backend reads a pipe:
//! stdout and stderr split into lines, each logged with the engine's
//! time of it and sent on; once the container has ended, the log is
//! read once more for the frames a closing stream can lose.

use std::time::SystemTime;

use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptions;
use futures_util::StreamExt;
use tokio::sync::oneshot;

use super::super::process::{Log, report_line};
use super::super::{Report, ReportSender, send_report};
use super::LOG_DRAIN;
use crate::image::Engine;
use crate::stamp::parse_rfc3339;

/// The task that follows a container's log stream, and how it is told
/// the container has ended.
pub(super) struct LogFollower {
    pub(super) task: tokio::task::JoinHandle<()>,
    pub(super) exited: oneshot::Sender<()>,
}

/// Follows the container's log stream, splitting stdout and stderr into
/// lines, each logged with the engine's time of it.
///
/// A followed stream can end before it has carried the container's last
/// output (the engine closes it when the container stops, and on this
/// engine a last line without its newline was lost that way about one
/// run in two). So once the container has ended, the log is read once
/// more, from the second of the last frame seen, and every frame not yet
/// seen is taken: no output is lost to that race.
pub(super) async fn read_logs(
    engine: Engine,
    container: String,
    id: usize,
    sink: ReportSender,
    log: Log,
    exited: oneshot::Receiver<()>,
) {
    let (mut out, mut err) = (EngineLines::default(), EngineLines::default());
    let take = |chunk: LogOutput, out: &mut EngineLines, err: &mut EngineLines| match chunk {
        LogOutput::StdErr { message } => forward(err, &message, true, id, &sink, &log),
        LogOutput::StdOut { message } | LogOutput::Console { message } => {
            forward(out, &message, false, id, &sink, &log);
        }
        LogOutput::StdIn { .. } => {}
    };
    let options = |follow: bool, since: i32| LogsOptions {
        follow,
        stdout: true,
        stderr: true,
        timestamps: true,
        since,
        ..Default::default()
    };
    let mut stream = engine.docker.logs(&container, Some(options(true, 0)));
    while let Some(Ok(chunk)) = stream.next().await {
        take(chunk, &mut out, &mut err);
    }
    drop(stream);
    // Read again only once the container has ended (its output is then
    // all in the engine's log), and only where every frame had a time.
    if tokio::time::timeout(LOG_DRAIN, exited)
        .await
        .is_ok_and(|r| r.is_ok())
        && out.seen.comparable()
        && err.seen.comparable()
    {
        let since = [out.seen.second(), err.seen.second()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(0);
        let (mut out_seen, mut err_seen) = (out.seen.rewound(), err.seen.rewound());
        let mut again = engine.docker.logs(&container, Some(options(false, since)));
        while let Some(Ok(chunk)) = again.next().await {
            let unseen = match &chunk {
                LogOutput::StdErr { message } => err_seen.is_new(message),
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    out_seen.is_new(message)
                }
                LogOutput::StdIn { .. } => false,
            };
            if unseen {
                take(chunk, &mut out, &mut err);
            }
        }
    }
    // A last line without its newline still counts.
    for (lines, is_stderr) in [(&mut out, false), (&mut err, true)] {
        if let Some((time, raw)) = lines.finish() {
            report_line(&raw, is_stderr, id, &sink, &log, time);
        }
    }
    send_report(&sink, id, Report::OutputClosed);
}

/// Sends (and logs) every line one frame of the engine's log stream completes.
fn forward(
    lines: &mut EngineLines,
    frame: &[u8],
    is_stderr: bool,
    id: usize,
    sink: &ReportSender,
    log: &Log,
) {
    for (time, raw) in lines.push(frame) {
        report_line(&raw, is_stderr, id, sink, log, time);
    }
}

/// One output stream of a container (stdout or stderr), from the engine's
/// frames to lines.
///
/// Asked for timestamps, the engine starts every frame with the time it
/// received that output (RFC 3339 to the nanosecond) and a space, then
/// the output itself: one line, or a part of a line longer than the
/// engine's buffer, each part with a time of its own. The time is taken
/// off each frame before its bytes join the line, so a stdout line is
/// read against the event contract exactly as the process wrote it; a
/// line carries the time of the frame that completed it (as the process
/// backend stamps a line when its newline is read). A frame that does
/// not start with a time (an engine that ignores the option) keeps all
/// its bytes, and its lines are stamped when read.
#[derive(Debug, Default)]
struct EngineLines {
    /// Bytes of a line whose newline has not come yet.
    pending: Vec<u8>,
    /// The time of the last frame that added to `pending`.
    time: Option<SystemTime>,
    /// The frames taken so far, by their time.
    seen: Seen,
}

impl EngineLines {
    /// Takes one frame; returns the lines it completed (newline
    /// included), each with the engine's time of the frame.
    fn push(&mut self, frame: &[u8]) -> Vec<(Option<SystemTime>, Vec<u8>)> {
        let (time, output) = split_engine_time(frame);
        self.seen.note(time);
        self.pending.extend_from_slice(output);
        self.time = time;
        let mut lines = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            lines.push((time, self.pending.drain(..=end).collect()));
        }
        lines
    }

    /// The last line, when the stream ended without its newline.
    fn finish(&mut self) -> Option<(Option<SystemTime>, Vec<u8>)> {
        (!self.pending.is_empty()).then(|| (self.time, std::mem::take(&mut self.pending)))
    }
}

/// Which frames of one output stream were taken, by the engine's time of
/// each: enough to pass only the frames after them when the log is read again.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    /// The time of the latest frame.
    last: Option<SystemTime>,
    /// How many frames carried exactly that time.
    at_last: usize,
    /// Whether a frame came without a time (then frames cannot be matched).
    untimed: bool,
}

impl Seen {
    fn note(&mut self, time: Option<SystemTime>) {
        match time {
            None => self.untimed = true,
            Some(t) if self.last == Some(t) => self.at_last += 1,
            Some(t) => {
                self.last = Some(t);
                self.at_last = 1;
            }
        }
    }

    /// Whether frames read again can be told from these by their time.
    fn comparable(&self) -> bool {
        !self.untimed
    }

    /// The whole second of the latest frame, as the engine's `since` takes it.
    fn second(&self) -> Option<i32> {
        let secs = self
            .last?
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()?
            .as_secs();
        i32::try_from(secs).ok()
    }

    /// A filter over the same stream read again from an earlier point.
    fn rewound(&self) -> Unseen {
        Unseen {
            last: self.last,
            skip: self.at_last,
        }
    }
}

/// Passes the frames of a stream read again that come after those [`Seen`].
#[derive(Debug)]
struct Unseen {
    last: Option<SystemTime>,
    /// Frames at exactly `last` still to pass over.
    skip: usize,
}

impl Unseen {
    fn is_new(&mut self, frame: &[u8]) -> bool {
        let (Some(time), Some(last)) = (split_engine_time(frame).0, self.last) else {
            return true;
        };
        if time < last {
            return false;
        }
        if time == last && self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }
}

/// The engine's time at the start of a log frame, and the output after
/// it; `(None, frame)` when the frame does not start with a time and a space.
fn split_engine_time(frame: &[u8]) -> (Option<SystemTime>, &[u8]) {
    // `2026-12-04T15:31:22.123456789+14:00`: 35 bytes at most.
    let head = &frame[..frame.len().min(40)];
    let time = head.iter().position(|&b| b == b' ').and_then(|space| {
        let text = std::str::from_utf8(&frame[..space]).ok()?;
        Some((parse_rfc3339(text)?, space))
    });
    match time {
        Some((time, space)) => (Some(time), &frame[space + 1..]),
        None => (None, frame),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use tokio::sync::mpsc;

    use crate::fleet::process::open_log;
    use crate::fleet::{Event, Parsed};

    const T1: &str = "2026-12-04T15:31:22.123456789Z";
    const T2: &str = "2026-12-04T15:31:22.200000001Z";

    #[test]
    fn the_engines_time_is_taken_off_each_frame_and_a_line_has_the_time_that_completed_it() {
        type Line = (Option<&'static str>, &'static str);
        let t1 = format!("{T1} ");
        let t2 = format!("{T2} ");
        let cases: Vec<(&str, Vec<String>, Vec<Line>)> = vec![
            (
                "an event, as the engine frames it",
                vec![format!("{t1}{{\"event\":\"ready\"}}\n")],
                vec![(Some(T1), "{\"event\":\"ready\"}\n")],
            ),
            (
                "a frame without a time keeps its bytes",
                vec!["plain output\n".into()],
                vec![(None, "plain output\n")],
            ),
            (
                "a line longer than the engine's buffer, in two timed parts",
                vec![format!("{t1}{{\"event\":"), format!("{t2}\"ready\"}}\n")],
                vec![(Some(T2), "{\"event\":\"ready\"}\n")],
            ),
            (
                "the process's own time stays in its line",
                vec![format!("{t1}2026-01-01T00:00:00Z INFO awa: started\n")],
                vec![(Some(T1), "2026-01-01T00:00:00Z INFO awa: started\n")],
            ),
            (
                "an empty line",
                vec![format!("{t1}\n")],
                vec![(Some(T1), "\n")],
            ),
            (
                "two lines in one frame share its time",
                vec![format!("{t1}a\nb\n")],
                vec![(Some(T1), "a\n"), (Some(T1), "b\n")],
            ),
            (
                "a last line without its newline, at the end of the stream",
                vec![format!("{t1}done\n"), format!("{t2}tail")],
                vec![(Some(T1), "done\n"), (Some(T2), "tail")],
            ),
            (
                "a time not followed by a space is output",
                vec![format!("{T1}\n")],
                vec![(None, "2026-12-04T15:31:22.123456789Z\n")],
            ),
            (
                "a word that is no time is output",
                vec!["stderr: 2026-12-04T15:31:22Z boom\n".into()],
                vec![(None, "stderr: 2026-12-04T15:31:22Z boom\n")],
            ),
        ];
        for (what, frames, want) in cases {
            let mut lines = EngineLines::default();
            let mut got: Vec<(Option<SystemTime>, Vec<u8>)> = Vec::new();
            for frame in &frames {
                got.extend(lines.push(frame.as_bytes()));
            }
            got.extend(lines.finish());
            let want: Vec<(Option<SystemTime>, Vec<u8>)> = want
                .iter()
                .map(|(time, text)| {
                    (
                        time.map(|t| parse_rfc3339(t).unwrap()),
                        text.as_bytes().to_vec(),
                    )
                })
                .collect();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_log_read_again_passes_only_the_frames_after_those_seen() {
        let frame = |t: &str, text: &str| format!("{t} {text}").into_bytes();
        let t0 = "2026-12-04T15:31:21.900000000Z";
        // Seen: one frame at T0, two at T1 (the engine's time to the ns can repeat).
        let mut lines = EngineLines::default();
        for f in [frame(t0, "a\n"), frame(T1, "b\n"), frame(T1, "c\n")] {
            lines.push(&f);
        }
        assert!(lines.seen.comparable());
        let second = lines.seen.second().unwrap();
        let t1 = parse_rfc3339(T1).unwrap();
        assert_eq!(
            i64::from(second),
            t1.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
        );
        // Read again from that second: T0 and both T1 frames were taken; a
        // third T1 frame and a later one were not.
        let mut unseen = lines.seen.rewound();
        let again = [
            frame(t0, "a\n"),
            frame(T1, "b\n"),
            frame(T1, "c\n"),
            frame(T1, "d\n"),
            frame(T2, "tail"),
        ];
        let passed: Vec<bool> = again.iter().map(|f| unseen.is_new(f)).collect();
        assert_eq!(passed, [false, false, false, true, true]);
        // A stream that saw nothing passes everything; one untimed frame
        // makes the stream unmatched.
        let mut empty = Seen::default().rewound();
        assert!(empty.is_new(&frame(t0, "x\n")));
        let mut untimed = EngineLines::default();
        untimed.push(b"plain\n");
        assert!(!untimed.seen.comparable());
        assert_eq!(Seen::default().second(), None);
    }

    #[test]
    fn docker_lines_are_logged_with_the_engines_time_and_parsed_without_it() {
        let dir =
            std::env::temp_dir().join(format!("rehearse-docker-lines-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = open_log(&dir.join("w.log"), &Default::default()).unwrap();
        let (sink, mut reports) = mpsc::unbounded_channel();
        let (mut out, mut err) = (EngineLines::default(), EngineLines::default());
        forward(
            &mut err,
            format!("{T1} oops\n").as_bytes(),
            true,
            4,
            &sink,
            &log,
        );
        let event = r#"{"event":"refused","reason":"fenced"}"#;
        forward(
            &mut out,
            format!("{T2} {event}\n").as_bytes(),
            false,
            4,
            &sink,
            &log,
        );
        forward(&mut out, b"untimed\n", false, 4, &sink, &log);
        let text = std::fs::read_to_string(dir.join("w.log")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "2026-12-04T15:31:22.123456Z stderr| oops");
        assert_eq!(lines[1], format!("2026-12-04T15:31:22.200000Z {event}"));
        // Stamped when read: now, to the microsecond.
        let (time, rest) = crate::fleet::process::parse_log_line(lines[2]).unwrap();
        assert_eq!(rest, "untimed");
        assert!(
            time.elapsed().unwrap() < Duration::from_secs(60),
            "{}",
            lines[2]
        );
        let got: Vec<Report> = std::iter::from_fn(|| reports.try_recv().ok())
            .map(|m| m.report)
            .collect();
        assert!(
            matches!(&got[0], Report::Stderr(l) if l == "oops"),
            "{got:?}"
        );
        assert!(
            matches!(&got[1], Report::Line(Parsed::Event(Event::Refused(r))) if r.reason == "fenced"),
            "{got:?}"
        );
        assert!(
            matches!(&got[2], Report::Line(Parsed::Garbled { line }) if line == "untimed"),
            "{got:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
