#!/usr/bin/env bash
# Upgrade jobrun on a host whose jobs run from cron as
# `jobrun run NAME -- COMMAND` and whose jobrun is built with cargo from a
# git checkout.
#
#   scripts/upgrade.sh [TAG]      # default: the newest tag, by version
#
# Steps, in order:
#   1. git fetch --tags; find TAG (before any job is disturbed)
#   2. jobrun pause --all --reason upgrade   cron keeps firing; passes skip
#   3. jobrun stop-due --all --wait 5m       passes in flight stop, release
#   4. git checkout TAG; cargo build --release; install the binary (an
#      atomic rename, so a pass cron starts meanwhile never runs a
#      half-written file)
#   5. jobrun resume --all
# A step that fails stops the upgrade with a line naming it. A failure
# after step 2 leaves the pause standing (passes keep skipping rather than
# running beside a half-done upgrade) and says how to lift it.
#
# Settings, from the environment:
#   UPGRADE_SRC   the git checkout (default: the checkout holding this script)
#   UPGRADE_BIN   the installed jobrun (default: /usr/local/bin/jobrun)
#   UPGRADE_WAIT  how long stop-due waits for the releases (default: 5m)
#   JOBRUN_DB     the store, exactly as the cron lines set it
#
# `resume --all` lifts every pause, including one an operator set on a job
# before the upgrade began: pause such a job again afterwards.
#
# `git checkout` may replace this very file while it runs, and a shell reads
# its script as it goes. So everything is in functions and the last line
# calls main: the shell has read the whole file before any step runs.

set -uo pipefail

say() { printf 'upgrade: %s\n' "$*" >&2; }

# Stop the upgrade, saying which step failed and where it leaves the jobs.
fail() {
  say "FAILED: $*"
  if [ "${upgrade_paused:-no}" = yes ]; then
    say "jobs stay paused (reason: upgrade); once jobrun is sound, lift the pause with: ${upgrade_bin:-jobrun} resume --all"
  else
    say "this run paused nothing"
  fi
  exit 1
}

main() {
  local tag=${1:-} here src wait
  upgrade_bin=${UPGRADE_BIN:-/usr/local/bin/jobrun}
  upgrade_paused=no
  wait=${UPGRADE_WAIT:-5m}
  trap 'fail "interrupted"' INT TERM HUP

  [ "$#" -le 1 ] || fail "usage: upgrade.sh [TAG]"
  here=$(dirname "${BASH_SOURCE[0]}") || fail "cannot locate this script"
  src=${UPGRADE_SRC:-$here/..}
  [ -x "$upgrade_bin" ] || fail "no jobrun at $upgrade_bin (set UPGRADE_BIN)"
  cd "$src" || fail "cannot enter the checkout $src (set UPGRADE_SRC)"
  git rev-parse --git-dir >/dev/null || fail "$src is not a git checkout"

  # Find what to upgrade to before disturbing any job.
  say "fetching tags"
  git fetch --quiet --tags || fail "git fetch --tags"
  if [ -z "$tag" ]; then
    tag=$(git for-each-ref --count=1 --sort=-version:refname \
      --format='%(refname:short)' refs/tags) || fail "git for-each-ref refs/tags"
    [ -n "$tag" ] || fail "no tag given and none found"
  fi
  git rev-parse --quiet --verify "refs/tags/$tag^{commit}" >/dev/null ||
    fail "no tag $tag in $src"

  say "pausing every job"
  "$upgrade_bin" pause --all --reason upgrade || fail "jobrun pause --all"
  upgrade_paused=yes

  say "stopping the passes in flight; waiting up to $wait for their releases"
  "$upgrade_bin" stop-due --all --wait "$wait" ||
    fail "jobrun stop-due --all --wait $wait: passes still hold their locks (listed above)"

  say "checking out $tag"
  git -c advice.detachedHead=false checkout --quiet "refs/tags/$tag" ||
    fail "git checkout $tag (local changes in $src?)"

  say "building $tag"
  cargo build --release --locked || fail "cargo build --release --locked"

  say "installing $upgrade_bin"
  install -m 0755 target/release/jobrun "$upgrade_bin.new" ||
    fail "install target/release/jobrun as $upgrade_bin.new"
  mv -f "$upgrade_bin.new" "$upgrade_bin" || fail "mv $upgrade_bin.new $upgrade_bin"
  "$upgrade_bin" --version >/dev/null || fail "the installed $upgrade_bin does not run"

  "$upgrade_bin" resume --all || fail "jobrun resume --all"
  upgrade_paused=no
  trap - INT TERM HUP
  say "upgraded to $tag; jobs resumed"
}

main "$@"
