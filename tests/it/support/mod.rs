//! What the behaviour modules share, and nothing else: the TestEnv (a
//! temporary store and the real binary), an assertion builder for one
//! command, passes to act on, direct access to a store's tables, servers,
//! users and a container engine a test owns. Behaviour modules import from
//! here only, never from each other.

pub mod assert;
pub mod engine;
pub mod env;
pub mod pass;
pub mod pg;
pub mod procfs;
pub mod store;
pub mod user;

pub use assert::{exits, Jobrun};
pub use engine::Podman;
pub use env::{
    alive, held_child, kill, script, wait_until, without_jobrun_env, Kind, TestEnv, BIN,
};
pub use pass::{kill_pass, start_pass, WEB2};
pub use pg::OwnServer;
pub use store::{dump_store, hold_the_line, store_exec};
pub use user::{TempGroup, TempUser};

/// Output bytes as text, for messages and `contains`.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Generate a test per store from one body: `both_stores!(fn_name, ...)`
/// where each `fn_name(env: &TestEnv)` is defined in the same module. The
/// PostgreSQL half is skipped, saying why, when no server was started (a
/// bare `cargo test`).
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(&$crate::support::TestEnv::sqlite()) } )*
        }
        mod postgres {
            $( #[test] fn $name() {
                if let Some(env) = $crate::support::TestEnv::postgres() {
                    super::$name(&env)
                }
            } )*
        }
    };
}
pub(crate) use both_stores;
