//! Who and where this process is, as far as evidence goes: host name, boot
//! id and PID namespace.
//!
//! A pid means something only on the boot and in the PID namespace that
//! recorded it; these three values are what a holder row records beside
//! its pids, and what a judge compares before it looks at any pid.

use std::fs;

/// Who and where this process is, as far as evidence goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub host: String,
    pub boot_id: String,
    pub pid_ns: String,
}

/// Environment variables that override the recorded host identity. They
/// exist for containers whose host name is not stable and for tests that
/// need a second machine; they change the inputs, never the rules.
pub const HOST_ENV: &str = "JOBRUN_HOST";
pub const BOOT_ID_ENV: &str = "JOBRUN_BOOT_ID";
/// The pass id jobrun gives the command, which all it starts inherit.
pub const PASS_ENV: &str = "JOBRUN_PASS";

impl Identity {
    /// This machine's boot id (or `JOBRUN_BOOT_ID`).
    pub fn boot_id() -> String {
        std::env::var(BOOT_ID_ENV)
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| {
                fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default()
            })
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
        }
    }
}
