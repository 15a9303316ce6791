//! Every named statement (src/store/queries/*.sql) is valid SQL on its
//! database: each backend migrates a fresh database and asks it to plan
//! every statement its file holds, so a typo in any dialect's text, a
//! column a migration renamed or a placeholder too many fails here rather
//! than at the first call in production.

mod common;

use common::TestDb;
use herald::store::queries::Query;
use herald::store::{Dialect, Store};
use sqlx::Executor;

backend_tests!(every_named_statement_is_planned_by_its_database);

/// `EXPLAIN` (SQLite: `EXPLAIN QUERY PLAN`) of each statement, every bind
/// NULL: the database parses it, resolves every name against the migrated
/// schema and plans it, without running it.
async fn every_named_statement_is_planned_by_its_database(db: &TestDb) {
    let d = db.store.dialect();
    let mut conn = db.store.pool().acquire().await.unwrap();
    for &q in Query::ALL.iter().filter(|q| q.runs_on(d)) {
        let (sql, binds) = (q.sql(d), q.binds(d).len());
        let result = match d {
            // PostgreSQL cannot EXPLAIN a statement with parameters unless
            // it is prepared (its types then come from the statement).
            Dialect::Postgres => {
                let nulls = vec!["NULL"; binds].join(", ");
                let execute = if binds == 0 { String::new() } else { format!("({nulls})") };
                let explain = async {
                    conn.execute(sqlx::raw_sql(&format!("PREPARE herald_explain AS {sql}"))).await?;
                    let plan = conn.execute(sqlx::raw_sql(&format!("EXPLAIN EXECUTE herald_explain{execute}"))).await;
                    conn.execute(sqlx::raw_sql("DEALLOCATE herald_explain")).await?;
                    plan
                };
                explain.await.map(drop)
            }
            _ => {
                let explain = if d == Dialect::Sqlite { "EXPLAIN QUERY PLAN" } else { "EXPLAIN" };
                // MariaDB's `SET STATEMENT … FOR SELECT`: the EXPLAIN goes
                // before the SELECT.
                let text = match sql.split_once(" FOR\n") {
                    Some((set, select)) if sql.starts_with("SET STATEMENT") => format!("{set} FOR {explain} {select}"),
                    _ => format!("{explain} {sql}"),
                };
                let mut query = sqlx::query(&text);
                for _ in 0..binds {
                    query = query.bind(None::<String>);
                }
                query.fetch_all(&mut *conn).await.map(drop)
            }
        };
        if let Err(e) = result {
            panic!("{d}: {} does not plan: {e}\n{sql}", q.name());
        }
    }
}

fn main() -> std::process::ExitCode {
    common::harness::main(backend_trials())
}
