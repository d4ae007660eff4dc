//! One module per subcommand, each with one entry point returning the exit
//! code.

pub mod check;
pub mod clear_locks;
pub mod forget;
pub mod generate;
pub mod history;
pub mod metrics;
pub mod pause;
pub mod run;
pub mod status;
pub mod stop_due;
pub mod timeline;
pub mod touch;
pub mod watch;

use crate::evidence::{Evidence, Verdict};
use crate::files::Holders;
use crate::policy::lease::LeaseRow;
use crate::process::Identity;
use crate::report::escape;
use crate::say;
use crate::settings::StoreChoice;
use crate::store::{Store, StoreSpec};

/// What judging holders of this store needs: who we are, how far the store
/// reaches, where its holders keep their kernel locks.
pub fn evidence(spec: &StoreSpec) -> Evidence {
    let holders = spec.lock_dir().map(|d| Holders::new(d, spec.modes().0));
    Evidence::new(Identity::current(), spec.reach(), holders)
}

/// `evidence`, knowing which store it judges for: a PostgreSQL store's
/// stamp, which the commands of its passes carry (`Evidence::store_id`).
pub fn evidence_of(spec: &StoreSpec, store: &mut dyn Store) -> anyhow::Result<Evidence> {
    let mut evidence = evidence(spec);
    evidence.store_id = store
        .identity()?
        .map(|id| crate::store::stamp_of(&id).to_string());
    Ok(evidence)
}

/// Judge the holder of a lease: its processes and, when its pass declared
/// a container engine, its containers, the two combined by
/// `policy::containers::combine`. Every judge of a lease (a pass
/// reconciling, a waiter promoting, status, clear-locks, stop-due) comes
/// here, outside any store transaction: the probes read /proc and run the
/// engine. (A queued pass needs no engine: its command is held before exec
/// until the promotion that removes its queue row.)
pub fn judge_lease(evidence: &Evidence, l: &LeaseRow) -> Verdict {
    let v = evidence.judge(&l.holder, &l.pass_id);
    match &l.containers {
        Some(engine) => evidence.with_containers(&l.holder, &l.pass_id, engine, v),
        None => v,
    }
}

/// Judge every lease, probing outside any store transaction.
pub fn judged(leases: Vec<LeaseRow>, evidence: &Evidence) -> Vec<(LeaseRow, Verdict)> {
    leases
        .into_iter()
        .map(|l| {
            let v = judge_lease(evidence, &l);
            (l, v)
        })
        .collect()
}

/// `host:pid` of a holder, as every command shows it (the host is text from
/// the store: escaped).
pub fn holder_name(l: &LeaseRow) -> String {
    format!("{}:{}", escape(&l.holder.host), l.holder.wrapper.pid)
}

/// A queue row with its verdict, as every command shows it:
/// `queued pass ID of host:pid (verdict)`.
pub fn queued_pass(w: &crate::policy::lease::WaiterRow, v: &Verdict) -> String {
    format!(
        "queued pass {} of {}:{} ({})",
        escape(&w.pass_id),
        escape(&w.holder.host),
        w.holder.wrapper.pid,
        escape(&v.to_string())
    )
}

/// Open the store to write in it (`run`, `pause`), creating it if it does
/// not exist yet, and saying so once: a new store is a new lock domain, so
/// a typo in `--db` must be heard (cron mails the line). An explicit
/// `--db` never gets missing directories made for it; only this user's
/// default location does.
pub fn open_to_write(choice: &StoreChoice) -> anyhow::Result<Box<dyn Store>> {
    let StoreSpec::Sqlite(path, _) = &choice.spec else {
        return Ok(choice.spec.open()?);
    };
    if choice.explicit {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        if std::fs::symlink_metadata(dir).is_err() {
            anyhow::bail!(
                "no directory {} for the store {}: jobrun makes the directories of its default \
                 store only, never those of --db or JOBRUN_DB (a typo there would start a new \
                 lock domain); create it first, or correct the path",
                dir.display(),
                path.display()
            );
        }
    }
    let existed = std::fs::symlink_metadata(path).is_ok();
    let store = choice.spec.open()?;
    if !existed {
        say!(notice, "created a new store at {}", path.display());
    }
    Ok(store)
}

/// Open the store to read it (`status`, `history`): `None` when it is this
/// user's default store and does not exist yet (a fresh install: nothing
/// has run), after saying so; a named store that does not exist stays an
/// error.
pub fn open_to_read(choice: &StoreChoice) -> anyhow::Result<Option<Box<dyn Store>>> {
    match choice.spec.open_existing() {
        Ok(store) => Ok(Some(store)),
        Err(crate::store::StoreError::Missing(at)) if !choice.explicit => {
            say!(info, "no jobs yet (no store at {at})");
            let root_dir = std::path::Path::new(crate::settings::DEFAULT_ROOT_DB)
                .parent()
                .unwrap_or(std::path::Path::new("/"));
            if !nix::unistd::geteuid().is_root() && root_dir.is_dir() {
                say!(
                    info,
                    "root's jobs are in {}; pass --db to read a store you can read",
                    root_dir.display()
                );
            }
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The known name `typed` most likely meant: the closest by edit distance
/// (case and transpositions count as one edit), within a third of its
/// length (at least one, at most three edits).
pub fn closest<'a>(typed: &str, known: &'a [String]) -> Option<&'a str> {
    let limit = (typed.chars().count() / 3).clamp(1, 3);
    known
        .iter()
        .map(|k| {
            let d = strsim::damerau_levenshtein(&typed.to_lowercase(), &k.to_lowercase())
                + usize::from(typed.to_lowercase() == k.to_lowercase() && typed != k);
            (d, k)
        })
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, k)| (*d, k.len()))
        .map(|(_, k)| k.as_str())
}

/// Say, for each of `names` the store does not know, that it does not (a
/// name the store has never seen is a typo until the operator says
/// otherwise), with the known name it most likely meant, and `hint` after
/// it when given. Whether every name was known.
pub fn all_known(
    store: &mut dyn Store,
    names: &[String],
    spec: &StoreSpec,
    hint: &str,
) -> anyhow::Result<bool> {
    if names.is_empty() {
        return Ok(true);
    }
    let known: Vec<String> = store.jobs(&[])?.into_iter().map(|j| j.name).collect();
    let mut all = true;
    for n in names.iter().filter(|n| !known.contains(n)) {
        all = false;
        let meant = closest(n, &known)
            .map(|k| format!("; did you mean `{}`?", escape(k)))
            .unwrap_or_default();
        say!(
            error,
            "{}: store {} does not know this job{meant}{hint}",
            escape(n),
            spec.display()
        );
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_suggests_the_name_it_most_likely_meant() {
        let known: Vec<String> = ["crashy", "feeds.poll", "feeds.push", "digest"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let table = [
            ("crashyy", Some("crashy")),
            ("crahsy", Some("crashy")),
            ("Crashy", Some("crashy")),
            ("feeds.pol", Some("feeds.poll")),
            ("feeds.psh", Some("feeds.push")),
            ("digset", Some("digest")),
            ("backup", None),
            ("x", None),
        ];
        for (typed, want) in table {
            assert_eq!(closest(typed, &known), want, "{typed}");
        }
    }
}
