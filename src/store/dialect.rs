//! What differs between SQLite, PostgreSQL and MariaDB/MySQL.

use std::fmt;

/// The SQL dialect of a database URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    Sqlite,
    Postgres,
    MySql,
}

impl Dialect {
    pub fn from_url(url: &str) -> Option<Dialect> {
        let scheme = url.split(':').next()?.to_ascii_lowercase();
        match scheme.as_str() {
            "sqlite" => Some(Dialect::Sqlite),
            "postgres" | "postgresql" => Some(Dialect::Postgres),
            "mysql" | "mariadb" => Some(Dialect::MySql),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
        }
    }

    /// Rewrites `?` placeholders into this dialect's form, for the statements
    /// still built in Rust (the named ones in `queries/` are written in each
    /// dialect's form). PostgreSQL numbers its parameters. Herald's SQL never
    /// holds a literal `?`, so a plain scan is enough.
    pub fn sql(self, q: &str) -> String {
        if self != Dialect::Postgres {
            return q.to_owned();
        }
        let mut out = String::with_capacity(q.len() + 16);
        let mut n = 0;
        for c in q.chars() {
            if c == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(c);
            }
        }
        out
    }

    /// PostgreSQL and SQLite (3.35+) return the rows an `UPDATE` touched;
    /// MariaDB/MySQL do not, so there the claimed batch is read back by its
    /// claim token.
    pub fn has_update_returning(self) -> bool {
        !matches!(self, Dialect::MySql)
    }

    /// How many group-commit flushes (see `batch`) may write at once when
    /// `wanted` would: PostgreSQL and MySQL run transactions side by side;
    /// SQLite has one writer connection, so its writes take turns anyway
    /// and a second flush would only wait for it.
    pub fn concurrent_flushes(self, wanted: usize) -> usize {
        if self == Dialect::Sqlite { 1 } else { wanted }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sqlite_flushes_one_group_at_a_time() {
        assert_eq!(Dialect::Sqlite.concurrent_flushes(3), 1);
        assert_eq!(Dialect::Postgres.concurrent_flushes(3), 3);
        assert_eq!(Dialect::MySql.concurrent_flushes(2), 2);
    }

    #[test]
    fn postgres_numbers_its_placeholders() {
        assert_eq!(Dialect::Postgres.sql("a = ? AND b = ?"), "a = $1 AND b = $2");
        assert_eq!(Dialect::MySql.sql("a = ?"), "a = ?");
    }

    #[test]
    fn dialect_comes_from_the_url_scheme() {
        assert_eq!(Dialect::from_url("sqlite://herald.db"), Some(Dialect::Sqlite));
        assert_eq!(Dialect::from_url("postgresql://x/y"), Some(Dialect::Postgres));
        assert_eq!(Dialect::from_url("mariadb://root@h/db"), Some(Dialect::MySql));
        assert_eq!(Dialect::from_url("redis://x"), None);
    }
}
