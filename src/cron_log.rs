//! `--syslog`: each pass's outcome line, also sent to syslog with facility
//! cron, for hosts without a journal. The protocol is the `syslog` crate's
//! (RFC 3164 over the local socket); this module only says what to send.
//!
//! A syslog that cannot be reached costs one warning and nothing else: the
//! pass, its exit code and its record never depend on it.

use crate::policy::outcome::{Outcome, PassRecord};
use crate::report::{escape, human_ms, Level};
use crate::say;

/// A test seam: the unix socket to send to instead of the system's
/// (`/dev/log`, `/var/run/syslog`).
pub const SOCKET_ENV: &str = "JOBRUN_SYSLOG_SOCKET";

/// The level of a pass's outcome line: an error when the pass ended badly,
/// info when it ended ok, a notice otherwise (skipped, coalesced, stopped,
/// a wait that ran out).
pub fn level(outcome: Outcome) -> Level {
    if outcome.ended_badly() {
        Level::Error
    } else if outcome == Outcome::Ok {
        Level::Info
    } else {
        Level::Notice
    }
}

/// The outcome line of a pass: `feeds.poll: pass 1a2b3c4d5e6f ok (exit 0,
/// ran 4.2s, token 7)`.
pub fn outcome_line(pass: &PassRecord) -> String {
    let mut facts = Vec::new();
    if let Some(code) = pass.exit_code {
        facts.push(format!("exit {code}"));
    }
    if let Some(sig) = pass.signal {
        facts.push(format!("signal {sig}"));
    }
    if pass.outcome.ran_command() || pass.outcome == Outcome::SpawnFailed {
        facts.push(format!("ran {}", human_ms(pass.duration_ms)));
    } else {
        facts.push("the command did not run".into());
    }
    if let Some(t) = pass.token {
        facts.push(format!("token {t}"));
    }
    format!(
        "{}: pass {} {} ({})",
        escape(&pass.job),
        escape(&pass.pass_id),
        pass.outcome.as_str(),
        facts.join(", ")
    )
}

/// Send the pass's outcome line to syslog (facility cron).
pub fn send(pass: &PassRecord) {
    let formatter = syslog::Formatter3164 {
        facility: syslog::Facility::LOG_CRON,
        hostname: None,
        process: "jobrun".into(),
        pid: std::process::id(),
    };
    let logger = match std::env::var_os(SOCKET_ENV) {
        Some(path) => syslog::unix_custom(formatter, path),
        None => syslog::unix(formatter),
    };
    let line = outcome_line(pass);
    let sent = logger.and_then(|mut l| match level(pass.outcome) {
        Level::Error => l.err(&line),
        Level::Warning => l.warning(&line),
        Level::Notice => l.notice(&line),
        Level::Info => l.info(&line),
    });
    if let Err(e) = sent {
        say!(
            warning,
            "{}: --syslog: cannot send to syslog: {e}",
            escape(&pass.job)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(outcome: Outcome, code: Option<i32>) -> PassRecord {
        PassRecord {
            job: "feeds.poll".into(),
            pass_id: "1a2b3c4d5e6f".into(),
            token: Some(7),
            slot: Some(0),
            host: "h".into(),
            pid: 1,
            started_at_ms: 0,
            ended_at_ms: 4200,
            duration_ms: 4200,
            waited_ms: Some(0),
            exit_code: code,
            signal: None,
            outcome,
            freed: None,
            window: None,
        }
    }

    #[test]
    fn outcome_lines_say_how_the_pass_ended() {
        assert_eq!(
            outcome_line(&pass(Outcome::Ok, Some(0))),
            "feeds.poll: pass 1a2b3c4d5e6f ok (exit 0, ran 4.2s, token 7)"
        );
        let mut skipped = pass(Outcome::Skipped, None);
        skipped.token = None;
        assert_eq!(
            outcome_line(&skipped),
            "feeds.poll: pass 1a2b3c4d5e6f skipped (the command did not run)"
        );
        assert_eq!(level(Outcome::Failed), Level::Error);
        assert_eq!(level(Outcome::Ok), Level::Info);
        assert_eq!(level(Outcome::Skipped), Level::Notice);
        assert_eq!(level(Outcome::Stopped), Level::Notice);
    }
}
