//! Why the database could not be opened at start, said once, with the path
//! or the host, and fast.
//!
//! sqlx's own answer is poor for a person at a terminal: a SQLite file in a
//! directory that does not exist is "unable to open database file" (repeated
//! by every layer that wraps it) without the path, and a PostgreSQL or
//! MariaDB server that refuses the connection is retried until the pool's
//! `acquire_timeout` (10 s) and then reported as "pool timed out". So before
//! the pool is opened the obvious causes are checked directly (the SQLite
//! file's directory exists; the server's port accepts a TCP connection), and
//! what the pool still reports is reworded with the target named.
//!
//! The checks run once, at start (`serve`, `migrate`, and the verbs that
//! open the database); a database that goes away later is the worker's and
//! `/readyz`'s business, not this module's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::store::{Dialect, StoreError};

/// How long the reachability probe waits for a TCP connection. A refusal is
/// immediate; this only bounds a host that drops packets.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a database URL points, as a person would name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    SqliteFile(PathBuf),
    SqliteMemory,
    /// `host:port` of a PostgreSQL or MariaDB/MySQL server.
    Server {
        dialect: Dialect,
        host: String,
        port: u16,
    },
    /// A server reached some other way (a Unix socket): not probed.
    Other {
        dialect: Dialect,
    },
}

impl Target {
    pub fn of(url: &str) -> Option<Target> {
        let dialect = Dialect::from_url(url)?;
        if dialect == Dialect::Sqlite {
            let rest = url.split_once(':').map_or("", |(_, r)| r);
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            let path = rest.split('?').next().unwrap_or("");
            if path.is_empty() || path == ":memory:" || url.contains("mode=memory") {
                return Some(Target::SqliteMemory);
            }
            return Some(Target::SqliteFile(PathBuf::from(path)));
        }
        let parsed = url::Url::parse(url).ok()?;
        let host = parsed.host_str().unwrap_or("").trim_matches(['[', ']']).to_owned();
        let socket_param = parsed.query_pairs().any(|(k, v)| k == "host" && v.starts_with('/'))
            || parsed.query_pairs().any(|(k, _)| k == "socket");
        if host.is_empty() || socket_param {
            return Some(Target::Other { dialect });
        }
        let port = parsed.port().unwrap_or(match dialect {
            Dialect::Postgres => 5432,
            _ => 3306,
        });
        Some(Target::Server { dialect, host, port })
    }

    fn describe(&self) -> String {
        match self {
            Target::SqliteFile(p) => format!("the SQLite database {}", p.display()),
            Target::SqliteMemory => "the in-memory SQLite database".to_owned(),
            Target::Server { dialect, host, port } => format!("{} at {host}:{port}", server_name(*dialect)),
            Target::Other { dialect } => format!("the {} server", server_name(*dialect)),
        }
    }
}

fn server_name(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "PostgreSQL",
        Dialect::MySql => "MariaDB/MySQL",
        Dialect::Sqlite => "SQLite",
    }
}

/// A database that cannot be opened, in one sentence naming it and the cause.
#[derive(Debug, thiserror::Error)]
#[error("database_url: cannot open {target}: {cause}")]
pub struct OpenError {
    pub target: String,
    pub cause: String,
}

/// The checks that need no pool: the SQLite file's directory exists; the
/// server's port answers. Fails fast with the cause; passes otherwise.
pub async fn preflight(url: &str) -> Result<(), OpenError> {
    let Some(target) = Target::of(url) else { return Ok(()) };
    let fail = |cause: String| OpenError { target: target.describe(), cause };
    match &target {
        Target::SqliteFile(path) => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
                _ => PathBuf::from("."),
            };
            match std::fs::metadata(&dir) {
                Ok(m) if m.is_dir() => Ok(()),
                Ok(_) => Err(fail(format!("{} is not a directory", dir.display()))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(fail(format!(
                    "the directory {} does not exist (create it, or point database_url at another path)",
                    dir.display()
                ))),
                Err(e) => Err(fail(format!("cannot read the directory {}: {e}", dir.display()))),
            }
        }
        Target::Server { host, port, .. } => {
            let addr = format!("{host}:{port}");
            match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(&addr)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(fail(io_cause(&e))),
                Err(_) => Err(fail(format!(
                    "no answer within {}s (a firewall dropping packets, or the wrong host)",
                    PROBE_TIMEOUT.as_secs()
                ))),
            }
        }
        Target::SqliteMemory | Target::Other { .. } => Ok(()),
    }
}

fn io_cause(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => "connection refused (is the server running and listening on that port?)".to_owned(),
        PermissionDenied => format!("permission denied ({e})"),
        _ if e.to_string().contains("failed to lookup address") || e.to_string().contains("Name or service") => {
            "the host name does not resolve".to_owned()
        }
        _ => e.to_string(),
    }
}

/// What the pool reported, reworded once with the target named. sqlx's
/// messages repeat their source in their own text, so only the innermost
/// cause is kept.
pub fn explain(url: &str, e: &StoreError) -> OpenError {
    let target = Target::of(url).map_or_else(|| "the database".to_owned(), |t| t.describe());
    let cause = match e {
        StoreError::Database { source, .. } => sqlx_cause(source, Target::of(url).as_ref()),
        other => innermost(other),
    };
    OpenError { target, cause }
}

fn sqlx_cause(e: &sqlx::Error, target: Option<&Target>) -> String {
    match e {
        sqlx::Error::Database(db) => {
            let msg = db.message();
            match (db.code().as_deref(), target) {
                // SQLITE_CANTOPEN: the directory exists (preflight said so),
                // so it is permissions or a path that is a directory.
                (Some("14"), Some(Target::SqliteFile(p))) => format!(
                    "{msg} (SQLite error 14: check that {} is writable by this user and is not a directory)",
                    dir_of(p).display()
                ),
                (Some(code), _) => format!("{msg} (error {code})"),
                (None, _) => msg.to_owned(),
            }
        }
        sqlx::Error::PoolTimedOut => {
            "no connection could be opened before database.acquire_timeout ran out (the server did not answer, \
             or refused the login)"
                .to_owned()
        }
        sqlx::Error::Io(io) => io_cause(io),
        sqlx::Error::Tls(t) => format!("TLS failed: {t}"),
        other => innermost(other),
    }
}

fn dir_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// The last error in a source chain: the one that says what happened.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_read_from_every_url_form() {
        assert_eq!(Target::of("sqlite://herald.db"), Some(Target::SqliteFile("herald.db".into())));
        assert_eq!(Target::of("sqlite:///var/lib/h.db?mode=rwc"), Some(Target::SqliteFile("/var/lib/h.db".into())));
        assert_eq!(Target::of("sqlite::memory:"), Some(Target::SqliteMemory));
        assert_eq!(
            Target::of("postgres://u:p@db.internal/x"),
            Some(Target::Server { dialect: Dialect::Postgres, host: "db.internal".into(), port: 5432 })
        );
        assert_eq!(
            Target::of("mariadb://root@127.0.0.1:3307/x"),
            Some(Target::Server { dialect: Dialect::MySql, host: "127.0.0.1".into(), port: 3307 })
        );
        assert_eq!(
            Target::of("postgres:///x?host=/var/run/postgresql"),
            Some(Target::Other { dialect: Dialect::Postgres })
        );
    }

    #[tokio::test]
    async fn a_missing_directory_is_named() {
        let err = preflight("sqlite:///nonexistent-herald/dir/x.db").await.unwrap_err().to_string();
        assert_eq!(
            err,
            "database_url: cannot open the SQLite database /nonexistent-herald/dir/x.db: the directory \
             /nonexistent-herald/dir does not exist (create it, or point database_url at another path)"
        );
    }
}
