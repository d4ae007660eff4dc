//! How the store's rows are written and read: the columns of a lease, a
//! queue row and a history row, each read back by name and aged on the
//! store's clock by the core (`LeaseRow::new`, `WaiterRow::new`).
//!
//! The store is input: whoever can write it may have written any value. A
//! row never names a path or a process by itself being read here; the
//! evidence checks what it names, and text is escaped where it is shown.

use super::sql::{Row, Value};
use crate::policy::lease::{Clock, Holder, LeaseKey, LeaseRow, Proc, Stamps, WaiterRow};
use crate::policy::outcome::{Freed, Outcome, PassRecord};
use crate::policy::pause::{Pause, PauseScope};
use crate::policy::window::WindowRow;

/// The holder's columns, as a lease and a queue row both record them.
pub const HOLDER_COLS: &str = "host, boot_id, pid_ns, wrapper_pid, wrapper_start, child_pid, \
     child_start, time_ns, wrapper_sid";

/// Every column of a lease row.
pub const LEASE_COLS: &str = "job, slot, token, pass_id, host, boot_id, pid_ns, wrapper_pid, \
     wrapper_start, child_pid, child_start, time_ns, wrapper_sid, argv, cwd, slots, lease_ms, max_hold_ms, \
     acquired_ms, renewed_ms, expires_ms, acquired_boot_ms, renewed_boot_ms, containers, \
     max_idle_ms, touched_ms";

/// Every column of a queue row that jobrun reads.
pub const WAITER_COLS: &str = "id, job, pass_id, host, boot_id, pid_ns, wrapper_pid, \
     wrapper_start, child_pid, child_start, time_ns, wrapper_sid, argv, cwd, slots, lease_ms, \
     arrived_ms, renewed_ms, renewed_boot_ms, containers";

/// Every column of a history row that jobrun reads.
pub const PASS_COLS: &str = "job, pass_id, token, slot, host, pid, started_ms, ended_ms, \
     duration_ms, exit_code, signal, outcome, waited_ms, freed_reason, freed_by, freed_evidence, \
     window_key";

/// Every column of a window row.
pub const WINDOW_COLS: &str = "job, window_key, attempts, max_attempts, pass_id, host, \
     claimed_ms, ended_ms, outcome";

/// The pause columns.
pub const PAUSE_COLS: &str = "job, owner, reason, since_ms";

/// The values of `HOLDER_COLS`.
pub fn holder_values(h: &Holder) -> Vec<Value> {
    vec![
        h.host.as_str().into(),
        h.boot_id.as_str().into(),
        h.pid_ns.as_str().into(),
        h.wrapper.pid.into(),
        Value::Int(h.wrapper.start as i64),
        h.child.map(|c| c.pid).into(),
        h.child.map(|c| c.start as i64).into(),
        h.time_ns.as_deref().into(),
        h.session.into(),
    ]
}

fn holder_of(r: &Row) -> Holder {
    let child = match (r.opt_int("child_pid"), r.opt_int("child_start")) {
        (Some(pid), Some(start)) => Some(Proc {
            pid: pid as i32,
            start: start as u64,
        }),
        _ => None,
    };
    Holder {
        host: r.text("host"),
        boot_id: r.text("boot_id"),
        pid_ns: r.text("pid_ns"),
        time_ns: r.opt_text("time_ns"),
        session: r.opt_int("wrapper_sid").and_then(|s| i32::try_from(s).ok()),
        wrapper: Proc {
            pid: r.int("wrapper_pid") as i32,
            start: r.int("wrapper_start") as u64,
        },
        child,
    }
}

pub fn argv_json(argv: &[String]) -> String {
    serde_json::to_string(argv).unwrap_or_else(|_| "[]".into())
}

fn argv_of(r: &Row) -> Vec<String> {
    serde_json::from_str(r.text_ref("argv")).unwrap_or_default()
}

/// A slot count as stored (a writer of the store may have stored anything).
fn slots_of(r: &Row) -> u32 {
    u32::try_from(r.int("slots")).unwrap_or(0)
}

/// A lease row read by `LEASE_COLS`, aged on `clock`.
pub fn lease_row(r: &Row, clock: &Clock) -> LeaseRow {
    let key = LeaseKey {
        job: r.text("job"),
        slot: u32::try_from(r.int("slot")).unwrap_or(u32::MAX),
        token: r.int("token"),
    };
    let stamps = Stamps {
        acquired_ms: r.int("acquired_ms"),
        renewed_ms: r.int("renewed_ms"),
        acquired_boot_ms: r.opt_int("acquired_boot_ms"),
        renewed_boot_ms: r.opt_int("renewed_boot_ms"),
        lease_ms: r.int("lease_ms"),
        max_hold_ms: r.int("max_hold_ms"),
    };
    let mut row = LeaseRow::new(
        key,
        r.text("pass_id"),
        holder_of(r),
        argv_of(r),
        r.text("cwd"),
        slots_of(r),
        stamps,
        clock,
    );
    row.containers = r.opt_text("containers");
    row.idle = r.opt_int("max_idle_ms").map(|max_idle| {
        let since = r.opt_int("touched_ms").unwrap_or(row.acquired_at_ms);
        (clock.now_ms - since, max_idle)
    });
    row
}

/// A queue row read by `WAITER_COLS`, aged on `clock`.
pub fn waiter_row(r: &Row, clock: &Clock) -> WaiterRow {
    let stamps = Stamps {
        acquired_ms: r.int("arrived_ms"),
        renewed_ms: r.int("renewed_ms"),
        acquired_boot_ms: None,
        renewed_boot_ms: r.opt_int("renewed_boot_ms"),
        lease_ms: r.int("lease_ms"),
        max_hold_ms: i64::MAX,
    };
    let mut row = WaiterRow::new(
        r.int("id"),
        r.text("job"),
        r.text("pass_id"),
        holder_of(r),
        argv_of(r),
        r.text("cwd"),
        slots_of(r),
        stamps,
        clock,
    );
    row.containers = r.opt_text("containers");
    row
}

/// A history row read by `PASS_COLS`. An outcome this jobrun does not know
/// (a newer jobrun's, or a forged one) reads as `failed`.
pub fn pass_record(r: &Row) -> PassRecord {
    PassRecord {
        job: r.text("job"),
        pass_id: r.text("pass_id"),
        token: r.opt_int("token"),
        slot: r.opt_int("slot").map(|s| s as u32),
        host: r.text("host"),
        pid: r.int("pid") as i32,
        started_at_ms: r.int("started_ms"),
        ended_at_ms: r.int("ended_ms"),
        duration_ms: r.int("duration_ms"),
        exit_code: r.opt_int("exit_code").map(|x| x as i32),
        signal: r.opt_int("signal").map(|x| x as i32),
        outcome: Outcome::parse(r.text_ref("outcome")).unwrap_or(Outcome::Failed),
        waited_ms: r.opt_int("waited_ms"),
        freed: r.opt_text("freed_reason").map(|reason| Freed {
            reason,
            by: r.text("freed_by"),
            evidence: r.opt_text("freed_evidence"),
        }),
        window: r.opt_text("window_key"),
    }
}

/// A window row read by `WINDOW_COLS`.
pub fn window_row(r: &Row) -> WindowRow {
    let count = |col: &str| u32::try_from(r.int(col).max(0)).unwrap_or(u32::MAX);
    WindowRow {
        job: r.text("job"),
        key: r.text("window_key"),
        attempts: count("attempts"),
        max_attempts: count("max_attempts"),
        pass_id: r.text("pass_id"),
        host: r.text("host"),
        claimed_ms: r.int("claimed_ms"),
        ended_ms: r.opt_int("ended_ms"),
        outcome: r.opt_text("outcome"),
    }
}

/// A pause row read by `PAUSE_COLS`. The owner column is `''` for a pause
/// without an owner.
pub fn pause_row(r: &Row) -> Pause {
    Pause {
        scope: PauseScope::from_key(r.text_ref("job")),
        owner: Some(r.text("owner")).filter(|o| !o.is_empty()),
        reason: r.opt_text("reason"),
        since_ms: r.int("since_ms"),
    }
}
