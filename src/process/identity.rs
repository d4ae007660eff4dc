//! Who and where this process is, as far as evidence goes: host name, boot
//! id, PID and time namespaces, and its session.
//!
//! A pid means something only on the boot and in the PID namespace that
//! recorded it, and a start time or a boot-clock stamp only in the time
//! namespace that read it (a time namespace offsets the boot clock, and
//! `/proc` start times with it); these values are what a holder row
//! records beside its pids, and what a judge compares before it looks at
//! any pid. The session is the wrapper's: its command's process group
//! lives inside it, and whatever leaves it left the pass.

use std::fs;
use std::sync::OnceLock;

/// Who and where this process is, as far as evidence goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub host: String,
    pub boot_id: String,
    pub pid_ns: String,
    /// `/proc/self/ns/time` (`time:[N]`); empty where the kernel has no
    /// time namespaces.
    pub time_ns: String,
    /// This process's session id.
    pub session: i32,
}

/// Environment variables that override the recorded host identity. They
/// exist for containers whose host name is not stable and for tests that
/// need a second machine; they change the inputs, never the rules.
pub const HOST_ENV: &str = "JOBRUN_HOST";
pub const BOOT_ID_ENV: &str = "JOBRUN_BOOT_ID";
/// The pass id jobrun gives the command, which all it starts inherit.
pub const PASS_ENV: &str = "JOBRUN_PASS";
/// The stamp of the PostgreSQL store a pass holds its slot in, which jobrun
/// gives the command: a row of another store naming this pass is not this
/// pass's.
pub const STORE_ENV: &str = "JOBRUN_STORE_ID";

impl Identity {
    /// This machine's boot id (or `JOBRUN_BOOT_ID`).
    pub fn boot_id() -> String {
        // Read once: a process's boot does not change (a pass asks for it
        // when it opens the store and again for its evidence).
        static BOOT_ID: OnceLock<String> = OnceLock::new();
        BOOT_ID
            .get_or_init(|| {
                std::env::var(BOOT_ID_ENV)
                    .ok()
                    .filter(|b| !b.is_empty())
                    .unwrap_or_else(|| {
                        super::read_small("/proc/sys/kernel/random/boot_id")
                            .map(|s| s.trim().to_string())
                            .unwrap_or_default()
                    })
            })
            .clone()
    }

    /// This process's time namespace (`time:[N]`), empty where the kernel
    /// has none.
    pub fn time_ns() -> String {
        // Read once, as the boot id: jobrun never changes namespaces.
        static TIME_NS: OnceLock<String> = OnceLock::new();
        TIME_NS
            .get_or_init(|| {
                fs::read_link("/proc/self/ns/time")
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .clone()
    }

    pub fn current() -> Identity {
        let host = std::env::var(HOST_ENV)
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| {
                nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
                    .unwrap_or_else(|| "unknown-host".into())
            });
        let boot_id = Identity::boot_id();
        let pid_ns = fs::read_link("/proc/self/ns/pid")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        Identity {
            host,
            boot_id,
            pid_ns,
            time_ns: Identity::time_ns(),
            session: nix::unistd::getsid(None).map_or(0, |s| s.as_raw()),
        }
    }
}
