//! jobrun's integration tests: one binary driving the real `jobrun` against
//! real stores. Behavioural tests run against SQLite and PostgreSQL from one
//! body (`both_stores!`).

mod env;
mod generated;
mod pg;
mod run;
