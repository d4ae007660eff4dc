//! jobrun's integration tests: one binary driving the real `jobrun` against
//! real stores. Behavioural tests run against SQLite and PostgreSQL from one
//! body (`both_stores!`). What the modules share is in `support`.

mod abandoned;
mod badinput;
mod compat;
mod containers;
mod escapes;
mod evidence;
mod faults;
mod figures;
mod fleet;
mod fleetcron;
mod forged;
mod frontpage;
mod generated;
mod groupstore;
mod handover;
mod hardening;
mod hooks;
mod input;
mod install;
mod jobs;
mod lease;
mod monitoring;
mod operator;
mod output;
mod package;
mod pg;
mod queue;
mod run;
mod security;
mod status;
mod store;
mod storeopen;
mod support;
mod timeline;
mod tokens;
mod truth;
mod wake;
