//! `jobrun-pg`: jobrun itself, built with the PostgreSQL store. A `jobrun`
//! built without it (`scripts/build-release`) hands every command on a
//! PostgreSQL store to the `jobrun-pg` beside it (`store::elsewhere`).
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    jobrun::c_main()
}
