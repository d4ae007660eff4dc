# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_jobrun_global_optspecs
    string join \n db= db-mode= h/help V/version
end

function __fish_jobrun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_jobrun_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_jobrun_using_subcommand
    set -l cmd (__fish_jobrun_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c jobrun -n "__fish_jobrun_needs_command" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_needs_command" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_needs_command" -s V -l version -d 'Print version'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "run" -d 'Take a slot of NAME and run COMMAND under a renewed lease'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "status" -d 'Show every job: state, holder, evidence, queue, last outcome'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "clear-locks" -d 'Clear locks whose holder is dead or whose lease lapsed unseen'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "stop-due" -d 'Stop in-flight passes (for upgrade scripts) so they release at once'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "pause" -d 'Hold new passes (and queue promotion) of jobs'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "resume" -d 'Lift a pause: your own (no --as) or the one a tag owns (--as TAG)'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "history" -d 'Show recorded passes and a duration summary per job'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "forget" -d 'Remove free jobs and their history from the store'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "check" -d 'A monitoring plugin: are jobs late, failing, stuck? (Nagios, Icinga)'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "touch" -d 'Record progress of the pass this command runs in (for --max-idle)'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "metrics" -d 'Print every job\'s figures for Prometheus (text exposition format)'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "generate" -d 'Write the man pages and shell completions (for maintainers)'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l lease -d 'The lease window, renewed every third of it (at least 3s)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l max-hold -d 'Backstop for a pass that is alive but hung: past it renewals stop and the lease lapses (at least the lease)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l max-idle -d 'A pass that has not run `jobrun touch` for this long is hung: past it renewals stop and the lease lapses, as at --max-hold counted from the last touch, so a later pass may take over (at least the lease; without it, only --max-hold bounds the pass)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l kill-after -d 'After forwarding TERM or INT, wait this long before sending KILL' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l on-lost -d 'What happens to the child when the lease is lost' -r -f -a "continue\t'Keep running: single-flight is a convenience; the fencing token is the bound'
term\t'Stop the child as if the wrapper had received TERM'"
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -s E -l conflict-exit-code -d 'Exit code when the job is held or paused (like flock -E)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l slots -d 'How many passes of the job may run at once; the smallest among the live holders and waiters binds' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -s w -l wait -d 'Queue for a slot for up to this long instead of skipping (0: do not wait)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l coalesced-exit-code -d 'Exit code of a pass that coalesced into a queued one' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l containers -d 'The command hands its work to this container engine: the pass gets JOBRUN_LABEL to label its containers with, and whoever judges or stops the pass asks the engine about that label. The pass lives while its processes or its containers run' -r -f -a "docker\t'Docker (and docker compose): asks `docker` from the judge\'s PATH'
podman\t'Podman: asks `podman` from the judge\'s PATH'"
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l every -d 'The job is meant to run this often (e.g. 5m, 1d): `check` calls it late when no pass started for that long plus its grace. Stored with the job; the latest declaration wins. Without one, check learns the job\'s cadence from its history' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l schedule -d 'The job runs on this cron schedule (five crontab fields, e.g. \'*/5 * * * *\'), in --tz or the host\'s zone, correct across DST: `check` calls it late when no pass started since a firing plus its grace. Stored with the job; the latest declaration wins' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l tz -d 'The time zone of --schedule, by its name in the system\'s zoneinfo (e.g. Europe/Berlin); default: the host\'s' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l keep-history -d 'How many passes of history to keep per job' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -s q -l quiet -d 'Do not print the line naming the holder when the job is held. JOBRUN_QUIET takes 1/0, true/false, yes/no or on/off'
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l coalesce -d 'Join an identical queued pass (same job, argv and working directory) instead of queueing another'
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -l json -d 'Machine-readable output (its fields: JSON OUTPUT in jobrun(1))'
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -l wide -d 'Show every text in full instead of fitting 100 columns (long verdicts, reasons, hosts and names are otherwise wrapped or cut)'
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l all -d 'Act on every job'
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l dry-run -d 'Print what would be done and change nothing'
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l force -d 'Also clear locks whose holder is believed alive (logged)'
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l wait -d 'Wait until the signalled passes released their locks' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l kill-after -d 'With --wait: KILL the command of a pass still holding this long after the TERM (its wrapper then reaps it and releases)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l all -d 'Act on every job'
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l dry-run -d 'Print what would be signalled and signal nothing'
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l reason -d 'Why, shown by status and by every skipped pass' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l as -d 'Pause on behalf of TAG (e.g. upgrade): only resume --as TAG lifts it, and it lifts no other pause' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l all -d 'Act on every job'
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l new -d 'Also pause NAMEs the store does not know yet, before their first pass (without it, a name the store has never seen is refused as a typo)'
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand resume" -l as -d 'Lift only the pauses TAG owns (without it: only pauses without an owner; the others are named and stay)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand resume" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand resume" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand resume" -l all -d 'Act on every job'
complete -c jobrun -n "__fish_jobrun_using_subcommand resume" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l limit -d 'How many passes to show (the newest that match). The summary below them covers every kept pass that matches --since and --outcome, not only these' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l since -d 'Only passes that started at most this long ago (e.g. 2h, 7d)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l outcome -d 'Only passes with this outcome' -r -f -a "ok\t''
failed\t''
skipped\t''
lost-lease\t''
spawn-failed\t''
killed\t''
stopped\t''
coalesced\t''
timed-out\t''
abandoned\t''"
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l reverse -d 'Oldest first (the default is newest first, by start time)'
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l json -d 'Machine-readable output (its fields: JSON OUTPUT in jobrun(1))'
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand forget" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand forget" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand forget" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l every -d 'Judge lateness on this interval instead of the job\'s own' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l schedule -d 'Judge lateness on this cron schedule instead of the job\'s own' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l tz -d 'The time zone of --schedule (default: the host\'s)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l grace -d 'How late a pass may start before the job is late (default: half the interval; half the typical gap when learned)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -s w -l warning -d 'WARNING once late by more than this past the expected start: a duration (10m) or a multiple of the interval (1.5x). Default: the grace' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -s c -l critical -d 'CRITICAL once late by more than this past the expected start: a duration or a multiple of the interval. Default: the grace and one further interval' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l failures -d 'Failing once this many passes in a row ended badly' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l recover -d 'Failing until this many passes in a row ended well' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l max-running -d 'Stuck when a pass holds its slot longer than this (replaces the 3x p95 rule)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l max-wait -d 'Long queue when the first waiter has waited longer than this' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l max-paused -d 'Old pause when a pause has stood longer than this' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l all -d 'Check every job (the default)'
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -l json -d 'Machine-readable output (its fields: JSON OUTPUT in jobrun(1))'
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -s v -l verbose -d 'Also say, for every job, what its lateness is judged on (declared, learned, or why there is no lateness verdict)'
complete -c jobrun -n "__fish_jobrun_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand touch" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand touch" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand touch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand metrics" -l textfile -d 'Write to PATH (replaced whole, atomically) instead of standard output: node_exporter\'s textfile collector reads *.prom files' -r -F
complete -c jobrun -n "__fish_jobrun_using_subcommand metrics" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand metrics" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand metrics" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -l man -d 'Directory for the man pages' -r -F
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -l completions -d 'Directory for the shell completions' -r -F
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -s h -l help -d 'Print help'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "run" -d 'Take a slot of NAME and run COMMAND under a renewed lease'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "status" -d 'Show every job: state, holder, evidence, queue, last outcome'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "clear-locks" -d 'Clear locks whose holder is dead or whose lease lapsed unseen'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "stop-due" -d 'Stop in-flight passes (for upgrade scripts) so they release at once'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "pause" -d 'Hold new passes (and queue promotion) of jobs'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "resume" -d 'Lift a pause: your own (no --as) or the one a tag owns (--as TAG)'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "history" -d 'Show recorded passes and a duration summary per job'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "forget" -d 'Remove free jobs and their history from the store'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "check" -d 'A monitoring plugin: are jobs late, failing, stuck? (Nagios, Icinga)'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "touch" -d 'Record progress of the pass this command runs in (for --max-idle)'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "metrics" -d 'Print every job\'s figures for Prometheus (text exposition format)'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "generate" -d 'Write the man pages and shell completions (for maintainers)'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget check touch metrics generate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
