//! `jobrun touch`: a pass's command says it made progress. It finds its
//! pass through the variables its wrapper gave it, and records the touch
//! only while that pass holds its slot with that fencing token: a stale
//! token is refused, so a pass that lost its slot never looks alive.

use anyhow::{bail, Result};

use crate::process::identity::PASS_ENV;
use crate::report::escape;
use crate::say;
use crate::settings::StoreChoice;
use crate::spawn::{JOB_ENV, TOKEN_ENV};
use crate::store::Touch;

fn var(name: &str) -> Result<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => bail!(
            "{name} is not set: jobrun touch runs inside a pass (the command of jobrun run, or \
             what it starts), which gets {JOB_ENV}, {PASS_ENV} and {TOKEN_ENV}"
        ),
    }
}

pub fn run(choice: &StoreChoice) -> Result<i32> {
    let (job, pass, token) = (var(JOB_ENV)?, var(PASS_ENV)?, var(TOKEN_ENV)?);
    let Ok(token) = token.trim().parse::<i64>() else {
        bail!("{TOKEN_ENV}={}: not a fencing token", escape(&token));
    };
    let mut store = choice.spec.open_existing()?;
    match store.touch(&job, &pass, token)? {
        Touch::Touched => Ok(crate::exit::OK),
        Touch::StaleToken(current) => {
            say!(
                error,
                "{}: refusing the touch: token {token} is not the current holder's (pass {} now \
                 holds its slot with token {current}); the pass lost its lease",
                escape(&job),
                escape(&pass)
            );
            Ok(crate::exit::INCOMPLETE)
        }
        Touch::NotHeld => {
            say!(
                error,
                "{}: refusing the touch: pass {} holds no slot of the job (it ended, or lost its \
                 lease)",
                escape(&job),
                escape(&pass)
            );
            Ok(crate::exit::INCOMPLETE)
        }
    }
}
