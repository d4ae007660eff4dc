#!/usr/bin/env bash
# Install jobrun: the binary, its man pages, shell completions where
# bash-completion, zsh and fish load them on demand, and the examples.
#
#   scripts/install.sh [--prefix P] [--destdir D] [--bin FILE]
#
#   --prefix P    where it is installed (default /usr/local; ~/.local for
#                 one user)
#   --destdir D   stage the tree under D instead of / (for packaging)
#   --bin FILE    install this built jobrun instead of building one with
#                 `cargo build --release --locked`
#
# Lands in:
#   P/bin/jobrun
#   P/share/man/man1/jobrun.1, jobrun-*.1
#   P/share/bash-completion/completions/jobrun
#   P/share/zsh/site-functions/_jobrun   (for P=/usr on Debian, where zsh
#                                        reads packages' completions from
#                                        share/zsh/vendor-completions)
#   P/share/fish/vendor_completions.d/jobrun.fish
#   P/share/doc/jobrun/examples/
set -euo pipefail

say() { printf 'install: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

main() {
  local prefix=/usr/local destdir="" bin="" root
  while [ "$#" -gt 0 ]; do
    case $1 in
      --prefix) [ "$#" -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
      --prefix=*) prefix=${1#*=}; shift ;;
      --destdir) [ "$#" -ge 2 ] || die "--destdir needs a directory"; destdir=$2; shift 2 ;;
      --destdir=*) destdir=${1#*=}; shift ;;
      --bin) [ "$#" -ge 2 ] || die "--bin needs a file"; bin=$2; shift 2 ;;
      --bin=*) bin=${1#*=}; shift ;;
      -h|--help) sed -n '2,/^set /p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument $1 (see --help)" ;;
    esac
  done
  case $prefix in /*) ;; *) die "--prefix must be an absolute path, not $prefix" ;; esac
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ -z "$bin" ]; then
    say "building jobrun (cargo build --release --locked)"
    (cd "$root" && cargo build --release --locked) || die "cargo build failed"
    bin=$root/target/release/jobrun
  fi
  [ -x "$bin" ] || die "no executable jobrun at $bin"

  umask 022
  local to=$destdir$prefix
  local share=$to/share zsh_dir=zsh/site-functions
  if [ "$prefix" = /usr ] && [ -e /etc/debian_version ]; then
    zsh_dir=zsh/vendor-completions
  fi
  install -d "$to/bin" "$share/man/man1" "$share/bash-completion/completions" \
    "$share/$zsh_dir" "$share/fish/vendor_completions.d" \
    "$share/doc/jobrun/examples"
  # An atomic rename: a pass started meanwhile never runs a half-written file.
  install -m 0755 "$bin" "$to/bin/.jobrun.new"
  mv -f "$to/bin/.jobrun.new" "$to/bin/jobrun"
  install -m 0644 "$root"/man/*.1 "$share/man/man1/"
  install -m 0644 "$root/completions/jobrun.bash" "$share/bash-completion/completions/jobrun"
  install -m 0644 "$root/completions/_jobrun" "$share/$zsh_dir/_jobrun"
  install -m 0644 "$root/completions/jobrun.fish" "$share/fish/vendor_completions.d/jobrun.fish"
  install -m 0644 "$root"/scripts/examples/* "$share/doc/jobrun/examples/"
  say "installed $("$to/bin/jobrun" --version) under $to"
  [ -n "$destdir" ] || hints "$prefix" "$prefix/share/$zsh_dir"
}

# Say what a shell needs to find what was installed where it does not look
# by itself (asking the shells that are installed, assuming the worst of
# those that are not).
hints() {
  local prefix=$1 zsh_dir=$2 fish_dir=$1/share/fish/vendor_completions.d
  case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) say "put $prefix/bin on PATH (man and bash-completion then find the rest)" ;;
  esac
  if ! { command -v zsh >/dev/null &&
    zsh -fc "(( \${fpath[(Ie)$zsh_dir]} ))" 2>/dev/null; }; then
    say "zsh: add fpath+=($zsh_dir) before compinit in ~/.zshrc"
  fi
  if ! { command -v fish >/dev/null &&
    fish -c "contains -- '$fish_dir' \$fish_complete_path" 2>/dev/null; }; then
    say "fish: add set -p fish_complete_path $fish_dir to ~/.config/fish/config.fish"
  fi
}

main "$@"
