//! The PostgreSQL servers a run's cells are planned on, found before
//! anything is built or started.
//!
//! Which binaries serve a major is found by
//! [`awa_harness::pgtemp::Search`] (its order is documented there); a
//! requested major that is missing is bad input (exit 2), refused with how
//! to install it. `--database-url` is one server, which takes every cell
//! only when they are planned on its own major or on none.

use std::io::Write;

use awa_harness::pgtemp::Search;

use super::{RunArgs, one_shot_runtime};
use crate::Error;
use crate::driver::database::DatabaseError;
#[cfg(doc)]
use crate::pg::ConnectError;
use crate::servers::{Major, Spec, list};

/// The installation for each key of [`keys`](crate::servers::keys). A
/// missing major is bad input (exit 2) saying how to install it; no
/// server at all when none was asked for is infrastructure (exit 3), as
/// before majors existed.
pub fn locate(search: &Search, keys: &[Option<Major>]) -> Result<Vec<Spec>, Error> {
    keys.iter()
        .map(|&major| {
            let install = match major {
                None => search
                    .find(None)
                    .map_err(|e| Error::Postgres(e.to_string()))?,
                Some(m) => search
                    .find(Some(m.0))
                    .map_err(|e| Error::MissingServer(e.to_string()))?,
            };
            Ok(Spec::Throwaway { major, install })
        })
        .collect()
}

/// `--database-url` is one server: refused (before connecting to it) when
/// the cells are to run on two majors or more, naming both flags.
pub fn one_server(keys: &[Option<Major>]) -> Result<(), Error> {
    let mut asked: Vec<Major> = keys.iter().flatten().copied().collect();
    asked.sort_unstable_by_key(|m| m.0);
    asked.dedup();
    if asked.len() < 2 {
        return Ok(());
    }
    Err(Error::BadFlag {
        flag: "--database-url",
        message: format!(
            "the cells are to run on PostgreSQL {} (--postgres or [postgres] servers), but --database-url \
             (or REHEARSE_DATABASE_URL) gives one server; drop --database-url to run each major on a \
             throwaway cluster, or ask for the server's own major only",
            list(&asked)
        ),
    })
}

/// `--database-url` for the keys of [`keys`](crate::servers::keys): the
/// one server takes every cell, so at most one major may be asked for,
/// and it must be the server's own (`server_major`, read from the server; `None` when it was
/// not needed because no major was asked for).
pub fn external(
    url: &str,
    keys: &[Option<Major>],
    server_major: Option<u32>,
) -> Result<Vec<Spec>, Error> {
    let asked: Vec<Major> = keys.iter().flatten().copied().collect();
    let fits = match (asked.as_slice(), server_major) {
        ([], _) => true,
        ([one], Some(major)) => one.0 == major,
        _ => false,
    };
    if !fits {
        let server = server_major.map_or_else(|| "unknown".to_owned(), |m| m.to_string());
        return Err(Error::BadFlag {
            flag: "--database-url",
            message: format!(
                "the server is PostgreSQL {server}, but the cells are to run on {}; \
                 --database-url gives one server: drop --postgres (or [postgres] servers) to \
                 use it, or drop --database-url to run each major on a throwaway cluster",
                asked
                    .iter()
                    .map(|m| m.0.to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        });
    }
    Ok(keys
        .iter()
        .map(|&major| Spec::External {
            major,
            url: url.to_owned(),
        })
        .collect())
}

/// The PostgreSQL server of each major the cells are planned on, found
/// (or `--database-url` checked against them) before anything is built
/// or started: a missing major is bad input that says how to install it.
pub(super) fn for_run(args: &RunArgs, err: &mut dyn Write) -> Result<Vec<Spec>, Error> {
    let keys = crate::servers::keys(&args.plan);
    let specs = match &args.database_url {
        Some(url) => {
            // Before any build: flags first, then the server itself (its
            // credentials, its database, its major).
            one_server(&keys)?;
            let major = one_shot_runtime()?
                .block_on(crate::driver::database::server_major(url))
                .map_err(database_refused)?;
            external(url, &keys, Some(major))?
        }
        None => {
            let mut search = Search::from_env();
            search.env_dirs = args.pg_bindirs.clone();
            locate(&search, &keys)?
        }
    };
    if !args.quiet {
        for spec in &specs {
            if let Spec::Throwaway { major, install } = spec {
                let on = major.map_or_else(String::new, |m| format!("{m}: "));
                writeln!(
                    err,
                    "postgres {on}{} in {} (from {})",
                    install.version,
                    install.bindir.display(),
                    install.origin
                )?;
            }
        }
    }
    Ok(specs)
}

/// A `--database-url` the server refused: its credentials or its database
/// (SQLSTATE class 28, or 3D000: [`ConnectError::refused_login`]) are bad
/// input, anything else (no answer, a server that went away) is the
/// infrastructure.
fn database_refused(error: DatabaseError) -> Error {
    let message = error.to_string();
    if matches!(&error, DatabaseError::Connect(e) if e.refused_login()) {
        Error::BadFlag {
            flag: "--database-url",
            message: format!(
                "{message}; check the user, password and database of --database-url (or REHEARSE_DATABASE_URL)"
            ),
        }
    } else {
        Error::Postgres(format!("{message}; check --database-url"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_takes_at_most_its_own_major() {
        let url = "postgres://u@h/db";
        let keys = |list: &[u32]| list.iter().map(|&m| Some(Major(m))).collect::<Vec<_>>();
        assert_eq!(external(url, &[None], None).unwrap()[0].key(), None);
        assert_eq!(
            external(url, &keys(&[16]), Some(16)).unwrap()[0].key(),
            Some(Major(16))
        );
        for asked in [keys(&[18]), keys(&[16, 18])] {
            let err = external(url, &asked, Some(16)).unwrap_err();
            assert!(
                err.to_string().contains("the server is PostgreSQL 16"),
                "{err}"
            );
            assert_eq!(crate::exit::for_error(&err), crate::exit::BAD_INPUT);
        }
    }

    #[test]
    fn one_database_server_refuses_two_majors_before_connecting() {
        let keys = |list: &[u32]| list.iter().map(|&m| Some(Major(m))).collect::<Vec<_>>();
        assert!(one_server(&[None, None]).is_ok());
        assert!(
            one_server(&keys(&[18, 18])).is_ok(),
            "one major, twice the cells"
        );
        let err = one_server(&keys(&[15, 18])).unwrap_err();
        assert!(err.to_string().contains("PostgreSQL 15,18"), "{err}");
        assert!(err.to_string().contains("--database-url"), "{err}");
        assert_eq!(crate::exit::for_error(&err), crate::exit::BAD_INPUT);
    }

    #[test]
    fn a_server_refusing_the_credentials_or_database_is_bad_input_else_infrastructure() {
        let code = |m: &str, sqlstate: Option<&str>| {
            let refused = DatabaseError::Connect(crate::pg::ConnectError::new(m, sqlstate));
            crate::exit::for_error(&database_refused(refused))
        };
        assert_eq!(
            code(
                "password authentication failed for user \"u\" (SQLSTATE 28P01)",
                Some("28P01")
            ),
            crate::exit::BAD_INPUT
        );
        assert_eq!(
            code(
                "database \"nope\" does not exist (SQLSTATE 3D000)",
                Some("3D000")
            ),
            crate::exit::BAD_INPUT
        );
        assert_eq!(
            code(
                "could not connect to postgres://u:***@h:1/db: Connection refused (os error 111)",
                None
            ),
            crate::exit::INCONCLUSIVE
        );
        assert_eq!(
            code(
                "the database system is starting up (SQLSTATE 57P03)",
                Some("57P03")
            ),
            crate::exit::INCONCLUSIVE
        );
    }
}
