//! Direct access to a store's tables, beside jobrun: to fake evidence, and
//! to compare the whole store before and after a command.

use std::time::Duration;

use super::env::{wait_until, Kind, TestEnv};

/// Run SQL statements (literal values only) against the store's tables.
pub fn store_exec(env: &TestEnv, sql: &str) {
    match env.kind {
        Kind::Sqlite => {
            let c = rusqlite::Connection::open(&env.db).expect("open the SQLite store");
            c.busy_timeout(Duration::from_secs(5)).unwrap();
            c.execute_batch(sql)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        Kind::Postgres => {
            let mut c = ::postgres::Client::connect(&env.db, ::postgres::NoTls)
                .expect("connect to the test database");
            c.batch_execute(sql)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}

/// Every row of every table of the store, as text, in a stable order.
pub fn dump_store(env: &TestEnv) -> Vec<String> {
    let mut out = vec![];
    match env.kind {
        Kind::Sqlite => {
            let c = rusqlite::Connection::open(&env.db).expect("open the SQLite store");
            c.busy_timeout(Duration::from_secs(5)).unwrap();
            let version: i64 = c
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .unwrap();
            out.push(format!("user_version {version}"));
            let mut tables = c
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .unwrap();
            let names: Vec<String> = tables
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            for t in names {
                let mut q = c.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
                let n = q.column_count();
                let mut rows: Vec<String> = q
                    .query_map([], |r| {
                        Ok((0..n)
                            .map(|i| sqlite_text(r.get_ref(i).unwrap()))
                            .collect::<Vec<_>>()
                            .join("|"))
                    })
                    .unwrap()
                    .map(|r| format!("{t}: {}", r.unwrap()))
                    .collect();
                rows.sort();
                out.push(format!("table {t}: {} rows", rows.len()));
                out.extend(rows);
            }
        }
        Kind::Postgres => {
            let mut c = ::postgres::Client::connect(&env.db, ::postgres::NoTls)
                .expect("connect to the test database");
            let names: Vec<String> = c
                .query(
                    "SELECT table_name::text FROM information_schema.tables \
                     WHERE table_schema = 'public' ORDER BY 1",
                    &[],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            for t in names {
                let rows: Vec<String> = c
                    .query(
                        &format!("SELECT row_to_json(t)::text FROM \"{t}\" t ORDER BY 1"),
                        &[],
                    )
                    .unwrap()
                    .iter()
                    .map(|r| format!("{t}: {}", r.get::<_, String>(0)))
                    .collect();
                out.push(format!("table {t}: {} rows", rows.len()));
                out.extend(rows);
            }
        }
    }
    assert!(
        out.iter().any(|l| l.starts_with("table leases")),
        "no leases table in {out:?}"
    );
    out
}

fn sqlite_text(v: rusqlite::types::ValueRef) -> String {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) => format!("{:?}", String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => format!(
            "x'{}'",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
    }
}

/// A process holding the writers' line (`<store>-writers`) in its place:
/// started in a group of its own, holding the lock (`flock(1)`) until
/// killed; ready once it said so.
pub fn hold_the_line(env: &TestEnv, name: &str) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let ready = env.path(&format!("{name}.ready"));
    let child = std::process::Command::new("flock")
        .arg(format!("{}-writers", env.db))
        .args(["-c", &format!("touch {}; exec sleep 60", ready.display())])
        .process_group(0)
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || ready.exists()),
        "flock never held the line"
    );
    child
}
