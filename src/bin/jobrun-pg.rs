//! `jobrun-pg`: jobrun itself, built with the PostgreSQL store. A `jobrun`
//! built without it (`scripts/build-release`) hands every command on a
//! PostgreSQL store to the `jobrun-pg` beside it (`store::elsewhere`).
#![cfg_attr(not(test), no_main)]

jobrun::entry_point!();
