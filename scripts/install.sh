#!/usr/bin/env bash
# Install jobrun: the binary, its man pages, shell completions where
# bash-completion, zsh and fish load them on demand, the examples and the
# licences; or remove exactly what an earlier install put under a prefix.
#
#   scripts/install.sh [--prefix P] [--destdir D] [--bin FILE]
#   scripts/install.sh --uninstall [--prefix P]
#
#   --prefix P    where it is installed (default /usr/local; ~/.local for
#                 one user)
#   --destdir D   stage the tree under D instead of / (for packaging; no
#                 record of the install is kept there)
#   --bin FILE    install this built jobrun instead of building one with
#                 `scripts/build-release --locked`; a jobrun-pg beside
#                 FILE (the PostgreSQL store's half of the same build)
#                 is installed with it, and must be there when FILE was
#                 built without that store (its --version says so)
#   --uninstall   remove every file the installs under P put there, and
#                 every directory they created once it is empty; files
#                 that were there before, or were added since, stay
#
# Lands in:
#   P/bin/jobrun
#   P/bin/jobrun-pg                      when built (see scripts/build-release)
#   P/share/man/man1/jobrun.1, jobrun-*.1
#   P/share/bash-completion/completions/jobrun
#   P/share/zsh/site-functions/_jobrun   (for P=/usr on Debian, where zsh
#                                        reads packages' completions from
#                                        share/zsh/vendor-completions)
#   P/share/fish/vendor_completions.d/jobrun.fish
#   P/share/doc/jobrun/examples/, LICENSE-MIT, LICENSE-APACHE
#   P/share/jobrun/installed-files        what this install put there and
#                                        the directories it created, read
#                                        by --uninstall
#
# Then it says what each installed shell still needs to find the
# completions (nothing, for the usual prefixes).
set -euo pipefail

say() { printf 'install: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

main() {
  local prefix=/usr/local destdir="" bin="" uninstall=no root
  while [ "$#" -gt 0 ]; do
    case $1 in
      --prefix) [ "$#" -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
      --prefix=*) prefix=${1#*=}; shift ;;
      --destdir) [ "$#" -ge 2 ] || die "--destdir needs a directory"; destdir=$2; shift 2 ;;
      --destdir=*) destdir=${1#*=}; shift ;;
      --bin) [ "$#" -ge 2 ] || die "--bin needs a file"; bin=$2; shift 2 ;;
      --bin=*) bin=${1#*=}; shift ;;
      --uninstall) uninstall=yes; shift ;;
      -h|--help) sed -n '2,/^set /p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument $1 (see --help)" ;;
    esac
  done
  case $prefix in /*) ;; *) die "--prefix must be an absolute path, not $prefix" ;; esac
  prefix=${prefix%/}
  [ -n "$prefix" ] || die "--prefix / is not a prefix (/usr is)"
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ "$uninstall" = yes ]; then
    if [ -n "$destdir" ] || [ -n "$bin" ]; then
      die "--uninstall takes only --prefix"
    fi
    uninstall "$prefix"
    return
  fi
  if [ -z "$bin" ]; then
    command -v cargo >/dev/null ||
      die "no cargo: install Rust $(rust_version "$root") or newer, or pass --bin FILE"
    say "building jobrun (scripts/build-release --locked)"
    "$root/scripts/build-release" --locked || die "scripts/build-release failed"
    bin=$root/target/release/jobrun
  fi
  [ -x "$bin" ] || die "no executable jobrun at $bin"
  # The PostgreSQL store's half, when jobrun was built without it (its
  # --version says so): of the same build, or nothing is installed.
  local pg shown lean="; PostgreSQL stores by jobrun-pg"
  pg=$(dirname "$bin")/jobrun-pg
  shown=$("$bin" --version) || die "$bin does not run"
  if [ -x "$pg" ]; then
    [ "$("$pg" --version)" = "${shown%"$lean"}" ] ||
      die "$pg ($("$pg" --version)) is not of the build of $bin ($shown): build the two with scripts/build-release"
  elif [ "${shown%"$lean"}" != "$shown" ]; then
    die "$bin hands PostgreSQL stores to a jobrun-pg beside it, and there is none: build the two with scripts/build-release"
  fi

  umask 022
  local to=$destdir$prefix
  local share=$to/share zsh_dir=zsh/site-functions
  if [ "$prefix" = /usr ] && [ -e /etc/debian_version ]; then
    zsh_dir=zsh/vendor-completions
  fi
  local dirs=("$to/bin" "$share/man/man1" "$share/bash-completion/completions"
    "$share/$zsh_dir" "$share/fish/vendor_completions.d"
    "$share/doc/jobrun/examples")
  [ -n "$destdir" ] || dirs+=("$share/jobrun")
  # The directories this install creates, noted before it creates them.
  local created=() d
  for d in "${dirs[@]}"; do
    while [ ! -e "$d" ]; do
      created+=("$d")
      d=$(dirname "$d")
    done
  done
  install -d "${dirs[@]}"

  # Each file as source, then target; jobrun-pg before jobrun, so that a
  # new jobrun never hands over to an old one.
  local files=() f
  [ -x "$pg" ] && files+=("$pg" "$to/bin/jobrun-pg")
  files+=("$bin" "$to/bin/jobrun")
  for f in "$root"/man/*.1; do
    files+=("$f" "$share/man/man1/${f##*/}")
  done
  files+=("$root/completions/jobrun.bash" "$share/bash-completion/completions/jobrun"
    "$root/completions/_jobrun" "$share/$zsh_dir/_jobrun"
    "$root/completions/jobrun.fish" "$share/fish/vendor_completions.d/jobrun.fish"
    "$root/LICENSE-MIT" "$share/doc/jobrun/LICENSE-MIT"
    "$root/LICENSE-APACHE" "$share/doc/jobrun/LICENSE-APACHE")
  for f in "$root"/scripts/examples/*; do
    files+=("$f" "$share/doc/jobrun/examples/${f##*/}")
  done
  local i targets=()
  for ((i = 0; i < ${#files[@]}; i += 2)); do
    targets+=("${files[i + 1]}")
    if [ "${files[i + 1]%/*}" = "$to/bin" ]; then
      # An atomic rename: a pass started meanwhile never runs a
      # half-written file.
      f=${files[i + 1]##*/}
      install -m 0755 "${files[i]}" "$to/bin/.$f.new"
      mv -f "$to/bin/.$f.new" "$to/bin/$f"
    else
      install -m 0644 "${files[i]}" "${files[i + 1]}"
    fi
  done
  [ -n "$destdir" ] || record "$prefix" "${#targets[@]}" "${targets[@]}" "${created[@]}"
  say "installed $("$to/bin/jobrun" --version) under $to"
  [ -n "$destdir" ] || hints "$prefix" "$prefix/share/$zsh_dir"
}

# The rust-version Cargo.toml declares.
rust_version() {
  sed -n 's/^rust-version = "\(.*\)"$/\1/p' "$1/Cargo.toml" | head -n 1
}

# Where the record of an install under prefix $1 is kept.
manifest_of() { printf '%s/share/jobrun/installed-files\n' "$1"; }

# Write the record of this install: `f PATH` for each file it put there,
# `d PATH` for each directory an install under this prefix created (this
# one, or an earlier one whose directory still stands). A file an earlier
# install put there that this one no longer installs is removed now, so
# the record stays exact.
#   record PREFIX N FILE... DIR...
record() {
  local prefix=$1 n=$2 manifest old=() line path
  shift 2
  local files=("${@:1:n}") dirs=("${@:n+1}")
  manifest=$(manifest_of "$prefix")
  if [ -f "$manifest" ]; then
    while IFS= read -r line; do
      path=${line#? }
      case $line in
        "d "*) may_create "$prefix" "$path" && [ -d "$path" ] && dirs+=("$path") ;;
        "f "*) under "$prefix" "$path" && old+=("$path") ;;
      esac
    done <"$manifest"
  fi
  for path in "${old[@]}"; do
    if ! listed "$path" "${files[@]}" && [ -f "$path" ]; then
      rm -f -- "$path"
      say "removed $path (installed before, no longer part of jobrun)"
    fi
  done
  {
    printf '# Written by jobrun'"'"'s scripts/install.sh; read by scripts/install.sh --uninstall --prefix %s\n' "$prefix"
    printf 'f %s\n' "${files[@]}" "$manifest"
    if [ "${#dirs[@]}" -gt 0 ]; then
      printf 'd %s\n' "${dirs[@]}" | sort -u
    fi
  } >"$manifest.new"
  mv -f "$manifest.new" "$manifest"
}

# Whether path $1 is one of the paths after it. (Not `printf | grep -q`:
# under pipefail, grep leaving at its first match can end printf by
# SIGPIPE, and the pipeline's failure read as "not listed" removed the
# binary just installed.)
listed() {
  local path=$1 f
  shift
  for f; do
    [ "$f" = "$path" ] && return 0
  done
  return 1
}

# Whether path $2 lies strictly under prefix $1, with no `..` step.
under() {
  case $2 in
    */../* | */..) return 1 ;;
    "$1"/?*) return 0 ;;
    *) return 1 ;;
  esac
}

# Whether directory $2 is one an install under prefix $1 may have created:
# one under it, the prefix itself, or one of its parents.
may_create() {
  under "$1" "$2" && return 0
  case $2 in
    */../* | */.. | */) return 1 ;;
    "$1" | /?*) case $1/ in "$2"/*) return 0 ;; esac ;;
  esac
  return 1
}

# Remove what the installs under prefix $1 put there: their files, then
# the directories they created, deepest first, each only once it is empty.
uninstall() {
  local prefix=$1 manifest line path files=() dirs=() kept=0
  manifest=$(manifest_of "$prefix")
  [ -f "$manifest" ] ||
    die "no record of an install under $prefix ($manifest): nothing removed (an install by an older install.sh kept none: install again with this one, then --uninstall)"
  while IFS= read -r line; do
    path=${line#? }
    case $line in
      "#"*) continue ;;
    esac
    case $line in
      "f "*) under "$prefix" "$path" ;;
      *) may_create "$prefix" "$path" ;;
    esac || die "$manifest names $path, outside $prefix: nothing removed"
    case $line in
      "f "*) files+=("$path") ;;
      "d "*) dirs+=("$path") ;;
      *) die "$manifest: unreadable line: $line" ;;
    esac
  done <"$manifest"
  for path in "${files[@]}"; do
    if [ -f "$path" ] || [ -L "$path" ]; then
      rm -f -- "$path"
    fi
  done
  # Deepest first: a directory's own directories go before it.
  while IFS= read -r path; do
    [ -d "$path" ] || continue
    if ! rmdir -- "$path" 2>/dev/null; then
      say "kept $path: it holds files no install of jobrun put there"
      kept=$((kept + 1))
    fi
  done < <(printf '%s\n' "${dirs[@]}" | awk '{ print gsub("/", "/"), $0 }' | sort -rn | cut -d' ' -f2-)
  say "removed jobrun from $prefix (${#files[@]} files$([ "$kept" = 0 ] || echo ", $kept directories kept"))"
}

# Say what each installed shell needs to find the completions, asking the
# shell itself; a shell that is not installed gets no hint.
hints() {
  local prefix=$1 zsh_dir=$2 fish_dir=$1/share/fish/vendor_completions.d
  local loader=/usr/share/bash-completion/bash_completion
  case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) say "put $prefix/bin on PATH (man then finds the pages)" ;;
  esac
  if command -v bash >/dev/null; then
    if [ ! -r "$loader" ]; then
      say "bash: completions need Debian's bash-completion package"
    elif ! PATH="$prefix/bin:$PATH" bash --norc --noprofile -c '
        . "$1" >/dev/null 2>&1
        if declare -F _comp_load >/dev/null; then _comp_load jobrun; else __load_completion jobrun; fi
        complete -p jobrun' _ "$loader" >/dev/null 2>&1; then
      # bash-completion looks in ~/.local/share, /usr/local/share and
      # /usr/share (XDG_DATA_DIRS), not under other prefixes.
      say "bash: add this line to ~/.bash_completion: . $prefix/share/bash-completion/completions/jobrun"
    fi
  fi
  if command -v zsh >/dev/null &&
    ! zsh -fc "(( \${fpath[(Ie)$zsh_dir]} ))" 2>/dev/null; then
    say "zsh: add fpath+=($zsh_dir) before compinit in ~/.zshrc"
  fi
  if command -v fish >/dev/null &&
    ! fish -c "contains -- '$fish_dir' \$fish_complete_path" 2>/dev/null; then
    say "fish: add set -p fish_complete_path $fish_dir to ~/.config/fish/config.fish"
  fi
}

main "$@"
