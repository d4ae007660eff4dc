//! The `jobrun` binary. Its entry point is the C `main` the C library
//! calls, not Rust's: Rust's start reads `/proc/self/maps` and sets up
//! stack-overflow handlers before the first line of jobrun runs, a cost
//! every pass would pay. `jobrun::c_main` does the part jobrun needs.
#![cfg_attr(not(test), no_main)]

jobrun::entry_point!();
