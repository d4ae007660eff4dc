#!/usr/bin/env bash
# Upgrade jobrun on a host whose jobs run from cron as
# `jobrun run NAME -- COMMAND` and whose jobrun was installed from a git
# checkout with scripts/install.sh.
#
#   scripts/upgrade.sh [REF]   # a tag, a branch or a commit; default: the
#                              # newest tag by version, or the upstream's
#                              # default branch when there is no tag
#
# Steps, in order:
#   1. print the installed version; git fetch; find REF. When the
#      installed jobrun was built from that very commit (`jobrun
#      --version` names it), stop here: nothing is built, nothing paused.
#   2. git checkout REF (a detached HEAD, said so at the end);
#      scripts/build-release --locked (jobrun and jobrun-pg; cargo build
#      --release --locked for a REF older than that script); the built
#      jobrun must run
#   3. jobrun pause --all --as upgrade       cron keeps firing; passes skip
#   4. jobrun stop-due --all --wait 5m       passes in flight stop, release
#   5. scripts/install.sh --prefix P         the binaries (atomic renames,
#      so a pass cron starts meanwhile never runs a half-written file), man
#      pages and completions; print the new version
#   6. jobrun resume --all --as upgrade      lifts this upgrade's pause only
# Jobs are paused only for steps 4 and 5: the build, the slow part, runs
# while they keep running. A step that fails stops the upgrade with a
# line naming it. A failure after step 3 leaves the pause standing
# (passes keep skipping rather than running beside a half-done upgrade)
# and says how to lift it.
#
# The pause is owned by the tag "upgrade": a pause an operator set before
# (say, "disk maintenance" on one job) is neither lifted nor changed, and
# the job stays paused after the upgrade.
#
# A jobrun installed from the Debian package (dpkg knows it) is not
# upgraded here: build a new package with scripts/package-deb and install
# it with dpkg -i.
#
# Settings, from the environment:
#   UPGRADE_SRC   the git checkout (default: the checkout holding this script)
#   UPGRADE_BIN   the installed jobrun, PREFIX/bin/jobrun (default:
#                 /usr/local/bin/jobrun); man pages and completions go
#                 under PREFIX
#   UPGRADE_WAIT  how long stop-due waits for the releases (default: 5m)
#   JOBRUN_DB     the store, exactly as the cron lines set it
#
# `git checkout` may replace this very file while it runs, and a shell reads
# its script as it goes. So everything is in functions and the last line
# calls main: the shell has read the whole file before any step runs.

set -uo pipefail

say() { printf 'upgrade: %s\n' "$*" >&2; }

# Stop the upgrade, saying which step failed and where it leaves the jobs
# and the checkout.
fail() {
  say "FAILED: $*"
  if [ "${upgrade_paused:-no}" = yes ]; then
    say "jobs stay paused (by upgrade); once jobrun is sound, lift the pause with: ${upgrade_bin:-jobrun} resume --all --as upgrade"
  else
    say "this run paused nothing"
  fi
  checkout_note
  exit 1
}

# Say where the checkout was left, when this run moved it.
checkout_note() {
  [ "${upgrade_moved:-no}" = yes ] || return 0
  local back="it was on a detached HEAD already"
  [ -z "${upgrade_was_on:-}" ] ||
    back="git -C $upgrade_src switch $upgrade_was_on returns it to the branch it was on"
  say "the checkout $upgrade_src is left on a detached HEAD at $upgrade_ref (${upgrade_commit:0:12}); $back"
}

# Whether dpkg knows a jobrun package here, or owns the installed binary.
packaged() {
  command -v dpkg-query >/dev/null || return 1
  local status
  status=$(dpkg-query -W -f='${Status}' jobrun 2>/dev/null) || status=""
  case $status in
    "" | *" not-installed" | *" config-files") ;;
    *) return 0 ;;
  esac
  dpkg-query -S "$(readlink -f "$1" 2>/dev/null || echo "$1")" >/dev/null 2>&1
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
  local ref=${1:-} here wait commit prefix installed built
  upgrade_bin=${UPGRADE_BIN:-/usr/local/bin/jobrun}
  upgrade_paused=no
  upgrade_moved=no
  wait=${UPGRADE_WAIT:-5m}
  trap 'fail "interrupted"' INT TERM HUP

  [ "$#" -le 1 ] || fail "usage: upgrade.sh [TAG|BRANCH|COMMIT]"
  if packaged "$upgrade_bin"; then
    say "jobrun here came from the Debian package (dpkg knows it): build a new one with scripts/package-deb and install it with dpkg -i, not with upgrade.sh"
    exit 1
  fi
  here=$(dirname "${BASH_SOURCE[0]}") || fail "cannot locate this script"
  upgrade_src=${UPGRADE_SRC:-$here/..}
  [ -x "$upgrade_bin" ] || fail "no jobrun at $upgrade_bin (set UPGRADE_BIN)"
  prefix=${upgrade_bin%/bin/jobrun}
  if [ -z "$prefix" ] || [ "$prefix/bin/jobrun" != "$upgrade_bin" ]; then
    fail "UPGRADE_BIN must name PREFIX/bin/jobrun (the man pages and completions go under PREFIX), not $upgrade_bin"
  fi
  installed=$("$upgrade_bin" --version) || fail "the installed $upgrade_bin does not run"
  say "installed: $installed"
  cd "$upgrade_src" || fail "cannot enter the checkout $upgrade_src (set UPGRADE_SRC)"
  upgrade_src=$(pwd)
  git rev-parse --git-dir >/dev/null || fail "$upgrade_src is not a git checkout"

  # Find what to upgrade to before disturbing any job.
  if [ -n "$(git remote)" ]; then
    say "fetching"
    git fetch --quiet --tags || fail "git fetch --tags"
  else
    say "no git remote: upgrading to a commit this checkout has"
  fi
  if [ -z "$ref" ]; then
    ref=$(default_ref) || fail "no REF given, and $upgrade_src has no tag and no default branch"
  fi
  commit=$(commit_of "$ref") || fail "no tag, branch or commit $ref in $upgrade_src"
  upgrade_ref=$ref
  upgrade_commit=$commit
  local rev
  rev=$(printf '%s\n' "$installed" | sed -n 's/.*(git \([0-9a-f]\{7,\}\)).*/\1/p')
  if [ -n "$rev" ] && [ "${commit:0:${#rev}}" = "$rev" ]; then
    say "already at $ref (${commit:0:12}): nothing to build, nothing paused"
    trap - INT TERM HUP
    return 0
  fi
  say "upgrading to $ref (${commit:0:12})"

  # Build while the jobs keep running: only installing needs them stopped.
  upgrade_was_on=$(git symbolic-ref --quiet --short HEAD) || upgrade_was_on=""
  say "checking out $ref"
  git -c advice.detachedHead=false checkout --quiet --detach "$commit" ||
    fail "git checkout $ref (local changes in $upgrade_src?)"
  upgrade_moved=yes
  say "building $ref"
  # Nothing of an earlier build beside what this one builds.
  rm -f target/release/jobrun-pg
  if [ -x scripts/build-release ]; then
    scripts/build-release --locked || fail "scripts/build-release --locked"
  else
    cargo build --release --locked || fail "cargo build --release --locked"
  fi
  built=$(target/release/jobrun --version) || fail "the built target/release/jobrun does not run"
  say "built: $built"

  say "pausing every job (as upgrade)"
  "$upgrade_bin" pause --all --as upgrade --reason upgrade || fail "jobrun pause --all --as upgrade"
  upgrade_paused=yes

  say "stopping the passes in flight; waiting up to $wait for their releases"
  "$upgrade_bin" stop-due --all --wait "$wait" ||
    fail "jobrun stop-due --all --wait $wait: passes still hold their locks (listed above)"

  say "installing under $prefix"
  scripts/install.sh --prefix "$prefix" --bin target/release/jobrun ||
    fail "scripts/install.sh --prefix $prefix --bin target/release/jobrun"
  local now
  now=$("$upgrade_bin" --version) || fail "the installed $upgrade_bin does not run"
  say "installed: $now"

  "$upgrade_bin" resume --all --as upgrade || fail "jobrun resume --all --as upgrade"
  upgrade_paused=no
  trap - INT TERM HUP
  say "upgraded to $ref; lifted the upgrade's pause (pauses set by others stand)"
  checkout_note
}

main "$@"
