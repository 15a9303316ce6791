use std::collections::HashMap;

use super::*;

const DIALECTS: [Dialect; 3] = [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql];

fn blocks(d: Dialect) -> Vec<Block> {
    dialect_blocks(d).unwrap_or_else(|e| panic!("{e}"))
}

/// Each statement the code names is in every file whose dialect runs it,
/// exactly once, and no file holds a statement the code does not name.
#[test]
fn every_name_is_in_each_file_once_and_every_block_is_used() {
    for d in DIALECTS {
        let blocks = blocks(d);
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for b in &blocks {
            *seen.entry(b.name).or_default() += 1;
        }
        for q in Query::ALL {
            let want = usize::from(q.runs_on(d));
            assert_eq!(seen.remove(q.name()).unwrap_or(0), want, "{}/: {}", file_stem(d), q.name());
        }
        assert!(seen.is_empty(), "{}/ holds statements no code runs: {:?}", file_stem(d), seen.keys());
        for b in &blocks {
            assert!(!b.doc.is_empty(), "{}/: {} says what it is for", file_stem(d), b.name);
            assert!(!b.sql.is_empty() && !b.sql.contains(';'), "{}/: {} is one statement", file_stem(d), b.name);
        }
    }
}

/// The Rust binds one list for a name, so every dialect takes the same.
#[test]
fn every_dialect_takes_the_same_binds() {
    let all: Vec<HashMap<&str, Vec<&str>>> =
        DIALECTS.map(|d| blocks(d).into_iter().map(|b| (b.name, b.binds)).collect()).into();
    for q in Query::ALL {
        let lists: Vec<(Dialect, &Vec<&str>)> =
            DIALECTS.iter().zip(&all).filter_map(|(&d, m)| Some((d, m.get(q.name())?))).collect();
        for (d, binds) in &lists {
            assert_eq!(*binds, lists[0].1, "{}: {} and {} disagree", q.name(), d, lists[0].0);
        }
    }
}

/// The placeholders in a statement's text are exactly its binds: `?` once
/// per bind, or each of `$1..$n` (`?1..?n`) used.
#[test]
fn placeholders_match_the_binds() {
    for d in DIALECTS {
        for b in blocks(d) {
            let (plain, numbered) = placeholders(b.sql, if d == Dialect::Postgres { '$' } else { '?' });
            let n = b.binds.len();
            let ok = match (plain, numbered.is_empty()) {
                (0, _) => (1..=n).all(|i| numbered.contains(&i)) && numbered.iter().all(|&i| (1..=n).contains(&i)),
                (k, true) => k == n,
                _ => false,
            };
            assert!(
                ok,
                "{}/: {} binds {n} ({:?}), text has {plain} plain and {numbered:?}",
                file_stem(d),
                b.name,
                b.binds
            );
        }
    }
}

/// How many bare `mark`s `sql` holds, and the numbers of `markN`s.
fn placeholders(sql: &str, mark: char) -> (usize, Vec<usize>) {
    let mut plain = 0;
    let mut numbered = Vec::new();
    for (i, c) in sql.char_indices() {
        if c != mark {
            continue;
        }
        let digits: String = sql[i + 1..].chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            // `$` outside PostgreSQL's placeholders (a JSON path) is not one.
            plain += usize::from(mark == '?');
        } else {
            numbered.push(digits.parse().unwrap());
        }
    }
    (plain, numbered)
}

#[test]
fn a_block_is_its_comments_and_one_statement() {
    let text = "-- name: a\n-- Does a.\n-- binds: x, y\nSELECT ?\n  FROM t WHERE y = ?;\n\n-- name: b\n-- B.\n-- binds:\nSELECT 1;\n";
    let blocks = parse(text).unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        blocks[0],
        Block { name: "a", doc: vec!["Does a."], binds: vec!["x", "y"], sql: "SELECT ?\n  FROM t WHERE y = ?" }
    );
    assert_eq!((blocks[1].binds.len(), blocks[1].sql), (0, "SELECT 1"));
    assert!(parse("-- name: a\n-- binds:\n").is_err(), "no statement");
    assert!(parse("-- name: a\n-- no binds line\nSELECT 1;").is_err());
    assert!(parse("-- name: a\n-- binds:\nSELECT 1").is_err(), "no closing semicolon");
    assert!(parse("SELECT 1;").is_err(), "text outside a block");
}

#[test]
fn every_statement_has_its_text_in_each_dialect_that_runs_it() {
    for q in Query::ALL {
        for d in DIALECTS.into_iter().filter(|&d| q.runs_on(d)) {
            assert!(!q.sql(d).is_empty());
        }
    }
}

/// Each file stays one area a reader can scroll through, like the source
/// files (800 lines at most).
#[test]
fn no_file_is_longer_than_800_lines() {
    for d in DIALECTS {
        for (dir, list) in [(file_stem(d), files(d)), ("shared", shared_files(d))] {
            for &(area, text) in list {
                assert!(text.lines().count() <= 800, "{dir}/{area}.sql has {} lines", text.lines().count());
            }
        }
    }
}

/// A statement SQLite and MariaDB would run in the same text is written once,
/// in `shared/`: two equal copies drift apart at the first fix made to one.
#[test]
fn no_statement_is_written_twice_for_sqlite_and_mariadb() {
    let own = |d: Dialect| -> HashMap<&str, &str> {
        files(d).iter().flat_map(|&(_, text)| parse(text).unwrap()).map(|b| (b.name, b.sql)).collect()
    };
    let (sqlite, mariadb) = (own(Dialect::Sqlite), own(Dialect::MySql));
    let twice: Vec<&str> = sqlite.iter().filter(|(n, sql)| mariadb.get(*n) == Some(sql)).map(|(n, _)| *n).collect();
    assert!(twice.is_empty(), "the same text in sqlite/ and mariadb/, to move to shared/: {twice:?}");
}
