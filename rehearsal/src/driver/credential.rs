//! The password a cell hands the runtimes of the release under test, and
//! the shapes of DSN it hands it in, so that everything they print can be
//! held to the runtime's promise that a secret is never written.
//!
//! The harness's clusters trust loopback connections: a password in a
//! DSN is never asked for and never checked, so it costs nothing to give
//! one and it is there only to be kept. Each process of the release under
//! test gets the cell's database with the password in one of the three
//! places an operator may write it ([`DsnShape`]), in turn (long-running
//! runtimes and one-shot commands each on a turn of their own, so the
//! first three runtimes of a cell carry all three), and every shape meets
//! the cell's faults: a PostgreSQL crash makes a reconnecting runtime
//! print its target. The password has the characters that need escaping
//! in each shape (a space, both quotes, a backslash, `@`, `:`, `/`, `%`)
//! between two random words: a masking that stops early or starts late
//! leaves one of them in view.
//!
//! The fleet watches every line a process prints for either word
//! ([`CellPassword::words`], handed to it as the process's `watch`): a
//! line that holds one printed the password, whole or in part
//! (`secret_printed`), and goes on with the words hidden, as every line
//! of the process's log does. Nothing is registered with the redaction
//! of rehearse's own process: a run of many cells would make it look for
//! every cell's password in every line.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::fleet::{Target, Watch};

/// Where a DSN carries its password.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DsnShape {
    /// `postgres://user:PASSWORD@host:port/db` (percent-encoded).
    Userinfo,
    /// `postgres://user@host:port/db?password=PASSWORD` (percent-encoded).
    Query,
    /// `host=... port=... user=... dbname=... password='PASSWORD'` (quoted,
    /// with backslash escapes).
    KeyValue,
}

impl DsnShape {
    const ALL: [DsnShape; 3] = [DsnShape::Userinfo, DsnShape::Query, DsnShape::KeyValue];

    /// The shape of a cell's `n`th process (the shapes in turn).
    pub fn nth(n: usize) -> DsnShape {
        Self::ALL[n % Self::ALL.len()]
    }
}

/// The characters that make each shape's escaping matter.
const HARD_PART: &str = " q'd\"b\\s@c:s/p%";

/// A password no correct runtime ever prints: two random words around
/// the characters that make each shape's escaping matter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellPassword {
    text: String,
    words: [String; 2],
}

impl CellPassword {
    /// A fresh password (random per call: std's randomly keyed hasher over
    /// the time and a counter; nothing here needs more than "unguessable by
    /// a runtime that has not been given it").
    pub fn fresh() -> CellPassword {
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let word = || {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
            if let Ok(since) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
                h.write_u128(since.as_nanos());
            }
            format!("{:016x}", h.finish())
        };
        CellPassword::from_words(format!("rh{}", word()), format!("{}pw", word()))
    }

    fn from_words(first: String, last: String) -> CellPassword {
        CellPassword {
            text: format!("{first}{HARD_PART}{last}"),
            words: [first, last],
        }
    }

    /// The two random words: a line that holds either printed (part of)
    /// the password.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// `url` with this password in `shape` ([`CellPassword::dsn`]), and
    /// what the output of the process it is handed to is held to: the
    /// password's words, and the DSN as a redaction that hides the
    /// password and nothing else prints it.
    pub fn hand(&self, url: &str, shape: DsnShape) -> (String, Watch) {
        let dsn = self.dsn(url, shape);
        let target = self.target(url, &dsn, shape);
        let watch = Watch {
            words: self.words.to_vec(),
            target,
        };
        (dsn, watch)
    }

    /// The handed `dsn` as printed with its password alone masked (the
    /// runtime's promise: `postgres://app:***@db:5432/jobs`, a quoted
    /// key=value password as `password=***`), and the part of it that names
    /// the server and database, by which a line is known to print it.
    fn target(&self, url: &str, dsn: &str, shape: DsnShape) -> Option<Target> {
        if dsn == url {
            return None;
        }
        let spelled = match shape {
            DsnShape::Userinfo | DsnShape::Query => percent_encoded(&self.text),
            DsnShape::KeyValue => quoted(&self.text),
        };
        let at = dsn.rfind(&spelled)?;
        let mask = awa_runtime::redact::MASK;
        let expected = format!("{}{mask}{}", &dsn[..at], &dsn[at + spelled.len()..]);
        let parsed = url::Url::parse(url).ok()?;
        let marker = match shape {
            DsnShape::Userinfo | DsnShape::Query => {
                let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
                format!("{}{port}{}", parsed.host_str()?, parsed.path())
            }
            DsnShape::KeyValue => {
                let db = percent_decoded(parsed.path().trim_start_matches('/'))?;
                format!("dbname={}", quoted(&db))
            }
        };
        Some(Target { marker, expected })
    }

    /// `url` (the cell's database, no password in it) with this password in
    /// `shape`. A URL that does not parse, or carries a password of its own,
    /// is given back as it is.
    pub fn dsn(&self, url: &str, shape: DsnShape) -> String {
        let Ok(mut parsed) = url::Url::parse(url) else {
            return url.to_owned();
        };
        if parsed.password().is_some() {
            return url.to_owned();
        }
        let encoded = percent_encoded(&self.text);
        match shape {
            DsnShape::Userinfo => {
                // Already escaped whole: url escapes no `%`, so nothing twice.
                if parsed.set_password(Some(&encoded)).is_err() {
                    return url.to_owned();
                }
                parsed.into()
            }
            DsnShape::Query => {
                let query = match parsed.query() {
                    Some(q) if !q.is_empty() => format!("{q}&password={encoded}"),
                    _ => format!("password={encoded}"),
                };
                parsed.set_query(Some(&query));
                parsed.into()
            }
            DsnShape::KeyValue => key_value(&parsed, &self.text).unwrap_or_else(|| url.to_owned()),
        }
    }
}

/// Bytes a URL must escape in a password: all but letters, digits and
/// `-._~` (RFC 3986's unreserved characters).
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn percent_encoded(text: &str) -> String {
    utf8_percent_encode(text, ESCAPED).to_string()
}

/// `%XX` sequences decoded; `None` when the result is not UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// A libpq key=value value: quoted, `\` and `'` escaped.
fn quoted(value: &str) -> String {
    let mut out = String::from("'");
    for c in value.chars() {
        if c == '\\' || c == '\'' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// The key=value form of a `postgres://` URL, with `password`.
fn key_value(url: &url::Url, password: &str) -> Option<String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(host) = url.host_str() {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        pairs.push(("host".into(), host.to_owned()));
    }
    if let Some(port) = url.port() {
        pairs.push(("port".into(), port.to_string()));
    }
    if !url.username().is_empty() {
        pairs.push(("user".into(), percent_decoded(url.username())?));
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() {
        pairs.push(("dbname".into(), percent_decoded(db)?));
    }
    for param in url
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = param.split_once('=')?;
        pairs.push((percent_decoded(key)?, percent_decoded(value)?));
    }
    pairs.push(("password".into(), password.to_owned()));
    Some(
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", quoted(v)))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn password() -> CellPassword {
        CellPassword::from_words("rh0123".into(), "4567pw".into())
    }

    #[test]
    fn each_shape_carries_the_password_as_postgres_reads_it() {
        let pw = password();
        let url = "postgres://postgres@127.0.0.1:5433/cell_a";
        for shape in DsnShape::ALL {
            let dsn = pw.dsn(url, shape);
            let config: tokio_postgres::Config =
                dsn.parse().unwrap_or_else(|e| panic!("{dsn}: {e}"));
            assert_eq!(
                config.get_password(),
                Some(pw.text.as_bytes()),
                "{shape:?}: {dsn}"
            );
            assert_eq!(config.get_user(), Some("postgres"), "{dsn}");
            assert_eq!(config.get_dbname(), Some("cell_a"), "{dsn}");
            assert_eq!(config.get_ports(), &[5433], "{dsn}");
            assert!(
                !dsn.contains(&pw.text),
                "{shape:?} must escape the password: {dsn}"
            );
        }
    }

    #[test]
    fn each_shapes_target_masks_the_password_and_nothing_else() {
        let pw = password();
        let url = "postgres://app@127.0.0.1:5433/cell_a";
        let target = |shape| pw.hand(url, shape).1.target.expect("a target");
        let userinfo = target(DsnShape::Userinfo);
        assert_eq!(
            userinfo.expected,
            "postgres://app:***@127.0.0.1:5433/cell_a"
        );
        assert_eq!(userinfo.marker, "127.0.0.1:5433/cell_a");
        let query = target(DsnShape::Query);
        assert_eq!(
            query.expected,
            "postgres://app@127.0.0.1:5433/cell_a?password=***"
        );
        assert_eq!(query.marker, "127.0.0.1:5433/cell_a");
        let kv = target(DsnShape::KeyValue);
        assert_eq!(
            kv.expected,
            "host='127.0.0.1' port='5433' user='app' dbname='cell_a' password=***"
        );
        assert_eq!(kv.marker, "dbname='cell_a'");
        // Over-masking is seen: the user's last letter and the colon hidden.
        let over = "cannot connect to postgres://ap***@127.0.0.1:5433/cell_a";
        assert!(over.contains(&userinfo.marker) && !over.contains(&userinfo.expected));
        // A URL handed as it is (its own password) is held to nothing.
        let (_, watch) = pw.hand("postgres://u:given@h:5432/db", DsnShape::Userinfo);
        assert_eq!(watch.target, None);
    }

    #[test]
    fn the_shapes_come_in_turn_and_a_url_with_its_own_password_is_left_alone() {
        assert_eq!(
            (0..4).map(DsnShape::nth).collect::<Vec<_>>(),
            [
                DsnShape::Userinfo,
                DsnShape::Query,
                DsnShape::KeyValue,
                DsnShape::Userinfo
            ]
        );
        let pw = password();
        let own = "postgres://u:given@h:5432/db";
        assert_eq!(pw.dsn(own, DsnShape::KeyValue), own);
        assert_eq!(pw.dsn("not a url", DsnShape::Query), "not a url");
        let with_query = pw.dsn("postgres://u@h/db?sslmode=disable", DsnShape::Query);
        assert!(with_query.starts_with("postgres://u@h/db?sslmode=disable&password=rh0123%20"));
        let kv = pw.dsn("postgres://u@h/db?sslmode=disable", DsnShape::KeyValue);
        assert!(
            kv.starts_with(
                "host='h' user='u' dbname='db' sslmode='disable' password='rh0123 q\\'d\""
            ),
            "{kv}"
        );
    }

    #[test]
    fn the_runtimes_redaction_hides_both_words_in_every_shape_it_may_print() {
        assert_ne!(CellPassword::fresh(), CellPassword::fresh());
        let url = "postgres://postgres@127.0.0.1:5433/cell_a";
        for shape in DsnShape::ALL {
            // A password of its own per shape: registering one shape's DSN
            // must not hide the next shape's password from its scanner check.
            let pw = CellPassword::fresh();
            let dsn = pw.dsn(url, shape);
            // What the runtime prints when it cannot reach its server.
            let message = format!(
                "awa: claiming failed, retrying after reconnecting: cannot connect to the \
                 database ({dsn}): connection refused"
            );
            // Its scanner alone, and after it registered its DSN, as it does at start.
            let scanned = awa_runtime::redact::redact(&message);
            awa_runtime::redact::register_dsn(&dsn);
            let registered = awa_runtime::redact::redact(&message);
            let (handed, watch) = pw.hand(url, shape);
            assert_eq!(handed, dsn);
            let target = watch.target.expect("a handed DSN has a target");
            for shown in [scanned, registered] {
                for word in pw.words() {
                    assert!(!shown.contains(word.as_str()), "{shape:?}: {shown}");
                }
                assert!(shown.contains("127.0.0.1"), "{shape:?}: {shown}");
                // The printed target is the DSN with the password alone
                // masked: the check on it never fires on a correct runtime.
                assert!(
                    shown.contains(&target.marker) && shown.contains(&target.expected),
                    "{shape:?}: {shown} against {target:?}"
                );
            }
        }
    }
}
