#!/usr/bin/env bash
# Upgrade jobrun on a host whose jobs run from cron as
# `jobrun run NAME -- COMMAND` and whose jobrun is built with cargo from a
# git checkout.
#
#   scripts/upgrade.sh [REF]   # a tag, a branch or a commit; default: the
#                              # newest tag by version, or the upstream's
#                              # default branch when there is no tag
#
# Steps, in order:
#   1. print the installed version; git fetch; find REF (before any job is
#      disturbed)
#   2. jobrun pause --all --as upgrade       cron keeps firing; passes skip
#   3. jobrun stop-due --all --wait 5m       passes in flight stop, release
#   4. git checkout REF; cargo build --release; install the binary (an
#      atomic rename, so a pass cron starts meanwhile never runs a
#      half-written file); print the new version
#   5. jobrun resume --all --as upgrade      lifts this upgrade's pause only
# A step that fails stops the upgrade with a line naming it. A failure
# after step 2 leaves the pause standing (passes keep skipping rather than
# running beside a half-done upgrade) and says how to lift it.
#
# The pause is owned by the tag "upgrade": a pause an operator set before
# (say, "disk maintenance" on one job) is neither lifted nor changed, and
# the job stays paused after the upgrade.
#
# Settings, from the environment:
#   UPGRADE_SRC   the git checkout (default: the checkout holding this script)
#   UPGRADE_BIN   the installed jobrun (default: /usr/local/bin/jobrun)
#   UPGRADE_WAIT  how long stop-due waits for the releases (default: 5m)
#   JOBRUN_DB     the store, exactly as the cron lines set it
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
    say "jobs stay paused (by upgrade); once jobrun is sound, lift the pause with: ${upgrade_bin:-jobrun} resume --all --as upgrade"
  else
    say "this run paused nothing"
  fi
  exit 1
}

# What to upgrade to when no REF is given: the newest tag by version, else
# the upstream's default branch.
default_ref() {
  local ref
  ref=$(git for-each-ref --count=1 --sort=-version:refname \
    --format='%(refname:short)' refs/tags) || return 1
  if [ -z "$ref" ]; then
    ref=$(git symbolic-ref --quiet --short refs/remotes/origin/HEAD) || return 1
    ref=${ref#origin/}
  fi
  echo "$ref"
}

# The commit REF names: a tag, a branch of the upstream, a local branch or
# a commit, in that order.
commit_of() {
  git rev-parse --quiet --verify "refs/tags/$1^{commit}" ||
    git rev-parse --quiet --verify "refs/remotes/origin/$1^{commit}" ||
    git rev-parse --quiet --verify "refs/heads/$1^{commit}" ||
    git rev-parse --quiet --verify "$1^{commit}"
}

main() {
  local ref=${1:-} here src wait commit
  upgrade_bin=${UPGRADE_BIN:-/usr/local/bin/jobrun}
  upgrade_paused=no
  wait=${UPGRADE_WAIT:-5m}
  trap 'fail "interrupted"' INT TERM HUP

  [ "$#" -le 1 ] || fail "usage: upgrade.sh [TAG|BRANCH|COMMIT]"
  here=$(dirname "${BASH_SOURCE[0]}") || fail "cannot locate this script"
  src=${UPGRADE_SRC:-$here/..}
  [ -x "$upgrade_bin" ] || fail "no jobrun at $upgrade_bin (set UPGRADE_BIN)"
  say "installed: $("$upgrade_bin" --version)"
  cd "$src" || fail "cannot enter the checkout $src (set UPGRADE_SRC)"
  git rev-parse --git-dir >/dev/null || fail "$src is not a git checkout"

  # Find what to upgrade to before disturbing any job.
  say "fetching"
  git fetch --quiet --tags || fail "git fetch --tags"
  if [ -z "$ref" ]; then
    ref=$(default_ref) || fail "no REF given, and $src has no tag and no default branch"
  fi
  commit=$(commit_of "$ref") || fail "no tag, branch or commit $ref in $src"
  say "upgrading to $ref (${commit:0:12})"

  say "pausing every job (as upgrade)"
  "$upgrade_bin" pause --all --as upgrade --reason upgrade || fail "jobrun pause --all --as upgrade"
  upgrade_paused=yes

  say "stopping the passes in flight; waiting up to $wait for their releases"
  "$upgrade_bin" stop-due --all --wait "$wait" ||
    fail "jobrun stop-due --all --wait $wait: passes still hold their locks (listed above)"

  say "checking out $ref"
  git -c advice.detachedHead=false checkout --quiet --detach "$commit" ||
    fail "git checkout $ref (local changes in $src?)"

  say "building $ref"
  cargo build --release --locked || fail "cargo build --release --locked"

  say "installing $upgrade_bin"
  install -m 0755 target/release/jobrun "$upgrade_bin.new" ||
    fail "install target/release/jobrun as $upgrade_bin.new"
  mv -f "$upgrade_bin.new" "$upgrade_bin" || fail "mv $upgrade_bin.new $upgrade_bin"
  local now
  now=$("$upgrade_bin" --version) || fail "the installed $upgrade_bin does not run"
  say "installed: $now"

  "$upgrade_bin" resume --all --as upgrade || fail "jobrun resume --all --as upgrade"
  upgrade_paused=no
  trap - INT TERM HUP
  say "upgraded to $ref; lifted the upgrade's pause (pauses set by others stand)"
}

main "$@"
