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

complete -c jobrun -n "__fish_jobrun_needs_command" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_needs_command" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_needs_command" -s V -l version -d 'Print version'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "run" -d 'Take a slot of NAME and run COMMAND under a renewed lease'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "status" -d 'Show every job: state, holder, evidence, queue, last outcome'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "clear-locks" -d 'Clear locks whose holder is dead or whose lease lapsed unseen'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "stop-due" -d 'Stop in-flight passes (for upgrade scripts) so they release at once'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "pause" -d 'Hold new passes (and queue promotion) of jobs'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "resume" -d 'Lift a pause: your own (no --as) or the one a tag owns (--as TAG)'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "history" -d 'Show recorded passes and a duration summary per job'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "forget" -d 'Remove free jobs, their history and its kept output from the store'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "timeline" -d 'Draw when passes ran: one row per job, time across the width'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "generate" -d 'Write the man pages and shell completions (for maintainers)'
complete -c jobrun -n "__fish_jobrun_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l lease -d 'The lease window, renewed every third of it (at least 3s)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l max-hold -d 'Backstop for a pass that is alive but hung: past it renewals stop and the lease lapses (at least the lease). The command runs on: to end a pass that takes too long, use --timeout' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l timeout -d 'Stop the command this long after it started: its whole process group gets TERM, then KILL after --kill-after; the pass exits 124 (as timeout(1)) with the outcome timeout, and releases its slot once the group is gone. Unlike --max-hold, which only lets the lease lapse and leaves a hung command running, --timeout ends the command: use it for the longest a pass may take, and keep --max-hold as the backstop for a wrapper that cannot stop its command (0: no timeout)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l jitter -d 'Wait a random time in [0, DURATION), drawn afresh each pass, before trying for a slot (systemd\'s RandomizedDelaySec=). The wait counts in neither the pass\'s wait nor its duration; a TERM during it ends the pass at once (143) with nothing taken or recorded' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l spread -d 'Wait a stable offset in [0, DURATION), derived from the host identity and the job name, before trying for a slot (systemd\'s FixedRandomDelay=): a fleet whose crontabs all fire at the same minute arrives spread out, each host in its own place. Adds to --jitter' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l kill-after -d 'After forwarding TERM or INT, wait this long before sending KILL' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l on-lost -d 'What happens to the child when the lease is lost' -r -f -a "continue\t'Keep running: single-flight is a convenience; the fencing token is the bound'
term\t'Stop the child as if the wrapper had received TERM'"
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -s E -l conflict-exit-code -d 'Exit code when the job is held or paused (like flock -E)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l slots -d 'How many passes of the job may run at once; the smallest among the live holders and waiters binds' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -s w -l wait -d 'Queue for a slot for up to this long instead of skipping (0: do not wait)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l coalesced-exit-code -d 'Exit code of a pass that coalesced into a queued one' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l containers -d 'The command hands its work to this container engine: the pass gets JOBRUN_LABEL to label its containers with, and whoever judges or stops the pass asks the engine about that label. The pass lives while its processes or its containers run' -r -f -a "docker\t'Docker (and docker compose): asks `docker` from the judge\'s PATH'
podman\t'Podman: asks `podman` from the judge\'s PATH'"
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l once-per -d 'Run the job once per window of DURATION (whole seconds), windows aligned to the Unix epoch on the store\'s clock (the server\'s on PostgreSQL, never a host\'s): the first pass of a window claims it with its slot; later passes in a window done skip as `done`, on every host. The command gets the window\'s start in JOBRUN_WINDOW' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l window -d 'Run the job once per window KEY (validated like a job name), e.g. --window "$(date +\\%F)" for a calendar day in local time: as --once-per, with the window the operator names. The command gets KEY in JOBRUN_WINDOW' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l window-attempts -d 'Claims a window allows when its claimers did not end ok (failed, killed, abandoned...): any host may claim it again until then; after that the window is given up' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l on-start -d 'A shell line run (by /bin/sh -c) when the command starts, beside it, never delaying it; it sees JOBRUN_JOB, JOBRUN_PASS, JOBRUN_TOKEN and JOBRUN_SLOT' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l on-success -d 'A shell line run after a pass that ended ok, once its slot is released; it also sees JOBRUN_OUTCOME, JOBRUN_EXIT_CODE and JOBRUN_DURATION_MS' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l on-failure -d 'A shell line run after a pass that ended badly (failed, killed, lost-lease, spawn-failed, timeout), once its slot is released; never after a pass whose command did not run, nor one stopped by the operator. With --output quiet-unless-failed it also gets the captured output\'s path in JOBRUN_OUTPUT_FILE' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l hook-timeout -d 'How long a hook may run: past it its process group is killed (and logged); a hook never changes the pass\'s exit code or outcome' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l keep-history -d 'How many passes of history to keep per job' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l output -d 'Where the command\'s stdout and stderr go: inherit (jobrun\'s own), or quiet-unless-failed (like chronic: both into a private spool, in the order written, printed to jobrun\'s stdout only when the pass did not end ok, so cron mails only failures)' -r -f -a "inherit\t'The command writes to jobrun\'s own stdout and stderr'
quiet-unless-failed\t'Spool the output; print it only when the pass did not end ok'"
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l output-limit -d 'With --output quiet-unless-failed: the most output a spool keeps (at least 1KiB); past it the head and the tail stay and a line marks the cut' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l keep-output -d 'With --output quiet-unless-failed: keep the last SIZE of the output of a pass that ended badly with its history row, for history --show (0: keep none)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l keep-output-total -d 'The most kept output the whole store holds; past it the oldest is dropped first' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -s q -l quiet -d 'Do not print the line naming the holder when the job is held. JOBRUN_QUIET takes 1/0, true/false, yes/no or on/off'
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l coalesce -d 'Join an identical queued pass (same job, argv and working directory) instead of queueing another'
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -l syslog -d 'Also send each pass\'s outcome line to syslog, facility cron (for hosts without a journal): an error when the pass ended badly. JOBRUN_SYSLOG takes 1/0, true/false, yes/no or on/off'
complete -c jobrun -n "__fish_jobrun_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -l json -d 'Machine-readable output (its fields: JSON OUTPUT in jobrun(1))'
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -l wide -d 'Show every text in full instead of fitting 100 columns (long verdicts, reasons, hosts and names are otherwise wrapped or cut)'
complete -c jobrun -n "__fish_jobrun_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l all -d 'Act on every job'
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l dry-run -d 'Print what would be done and change nothing'
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -l force -d 'Also clear locks whose holder is believed alive (logged)'
complete -c jobrun -n "__fish_jobrun_using_subcommand clear-locks" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l wait -d 'Wait until the signalled passes released their locks' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l kill-after -d 'With --wait: KILL the command of a pass still holding this long after the TERM (its wrapper then reaps it and releases)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l all -d 'Act on every job'
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -l dry-run -d 'Print what would be signalled and signal nothing'
complete -c jobrun -n "__fish_jobrun_using_subcommand stop-due" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l reason -d 'Why, shown by status and by every skipped pass' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l as -d 'Pause on behalf of TAG (e.g. upgrade): only resume --as TAG lifts it, and it lifts no other pause' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l all -d 'Act on every job'
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -l new -d 'Also pause NAMEs the store does not know yet, before their first pass (without it, a name the store has never seen is refused as a typo)'
complete -c jobrun -n "__fish_jobrun_using_subcommand pause" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand resume" -l as -d 'Lift only the pauses TAG owns (without it: only pauses without an owner; the others are named and stay)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand resume" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand resume" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
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
wait-expired\t''
timeout\t''
done\t''
abandoned\t''"
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l show -d 'Print the output kept for pass PASS (a pass id, as history shows it), with control characters other than newline and tab escaped' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l reverse -d 'Oldest first (the default is newest first, by start time)'
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -l json -d 'Machine-readable output (its fields: JSON OUTPUT in jobrun(1))'
complete -c jobrun -n "__fish_jobrun_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand forget" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand forget" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand forget" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand timeline" -l since -d 'How far back the picture starts (e.g. 6h, 7d); passes that started before it are not drawn' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand timeline" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand timeline" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand timeline" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -l man -d 'Directory for the man pages' -r -F
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -l completions -d 'Directory for the shell completions' -r -F
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -l db -d 'The store: a SQLite file path, or a PostgreSQL connection string as libpq takes it (postgres://user@host/db?sslmode=verify-full, or host=... dbname=... key=value pairs; PG* variables and ~/.pgpass fill what it leaves out). Default: /var/lib/jobrun/jobrun.db for root, $XDG_STATE_HOME/jobrun/jobrun.db (or ~/.local/state/jobrun/jobrun.db) otherwise. A password written here shows in ps to every user for the whole pass: use ~/.pgpass, PGPASSFILE or a client certificate. A JOBRUN_DB that holds a password is removed from the command\'s environment (a jobrun inside it then needs ~/.pgpass or its own --db)' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -l db-mode -d 'Octal mode of the files jobrun creates for a SQLite store (the store, holder locks, wake files), e.g. 0660 for a group-shared store; a mode that lets others write is refused. Default: 0600 for a new store; a store that exists is used with the mode of its file (only its owner can change it), and the files made beside a group-shared one get its group' -r
complete -c jobrun -n "__fish_jobrun_using_subcommand generate" -s h -l help -d 'Print help'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "run" -d 'Take a slot of NAME and run COMMAND under a renewed lease'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "status" -d 'Show every job: state, holder, evidence, queue, last outcome'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "clear-locks" -d 'Clear locks whose holder is dead or whose lease lapsed unseen'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "stop-due" -d 'Stop in-flight passes (for upgrade scripts) so they release at once'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "pause" -d 'Hold new passes (and queue promotion) of jobs'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "resume" -d 'Lift a pause: your own (no --as) or the one a tag owns (--as TAG)'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "history" -d 'Show recorded passes and a duration summary per job'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "forget" -d 'Remove free jobs, their history and its kept output from the store'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "timeline" -d 'Draw when passes ran: one row per job, time across the width'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "generate" -d 'Write the man pages and shell completions (for maintainers)'
complete -c jobrun -n "__fish_jobrun_using_subcommand help; and not __fish_seen_subcommand_from run status clear-locks stop-due pause resume history forget timeline generate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
