//! What a fleet on PostgreSQL needs beyond the contract: TLS with libpq's
//! sslmodes against a server with its own CA, libpq's environment and
//! password file, passwords never shown, and waiters on another host woken
//! by a release at once.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;
use std::time::{Duration, Instant};

use jobrun::model::Outcome;

use crate::support::{held_child, script, wait_until, OwnServer, TestEnv};

const PASSWORD: &str = "Hunter2-secret-pw";

fn port_of(url: &str) -> String {
    url.rsplit(':').next().unwrap().to_string()
}

fn db_of(env: &TestEnv) -> String {
    env.db.rsplit('/').next().unwrap().to_string()
}

fn all_output(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `jobrun run j -- true` against `db` with `vars` set.
fn pass(env: &TestEnv, db: &str, vars: &[(&str, &str)]) -> Output {
    let mut c = env.cmd(&["run", "j", "--", "true"]);
    c.env("JOBRUN_DB", db);
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn succeeds(env: &TestEnv, db: &str, vars: &[(&str, &str)]) {
    let out = pass(env, db, vars);
    assert_eq!(out.status.code(), Some(0), "{db}: {}", all_output(&out));
    assert!(!all_output(&out).contains(PASSWORD));
}

/// Fails with one line that says `says`, never quoting the password.
fn fails(env: &TestEnv, db: &str, vars: &[(&str, &str)], says: &str) {
    let out = pass(env, db, vars);
    let text = all_output(&out);
    assert_ne!(out.status.code(), Some(0), "{db}: {text}");
    assert_eq!(text.lines().count(), 1, "{db}: not one line: {text}");
    assert!(text.contains(says), "{db}: {says:?} missing from {text}");
    assert!(!text.contains(PASSWORD), "{db}: {text}");
}

fn admin(server: &OwnServer, sql: &str) {
    let mut c = postgres::Client::connect(&format!("{}/postgres", server.url), postgres::NoTls)
        .expect("connect as admin");
    c.batch_execute(sql).expect(sql);
}

/// Whether a pass on `url` (with `application_name` `app`) is on TLS,
/// as the server sees its renewer's connection.
fn pass_uses_tls(env: &TestEnv, server: &str, url: &str, app: &str) -> bool {
    let child = held_child(env, app, "");
    env.start_with(
        app,
        &["run", app, "--lease", "3s", "--", &child],
        &[("JOBRUN_DB", url)],
    );
    let mut admin = postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
        .expect("connect as admin");
    let mut found = None;
    let seen = wait_until(Duration::from_secs(10), || {
        let row = admin
            .query_opt(
                "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.application_name = $1 LIMIT 1",
                &[&app],
            )
            .unwrap();
        found = row.map(|r| r.get::<_, bool>(0));
        found.is_some()
    });
    fs::write(env.path(&format!("{app}.done")), "").unwrap();
    assert!(seen, "no connection of {app}: {}", env.stderr_of(app));
    found.unwrap()
}

#[test]
fn tls_sslmodes_on_a_server_with_its_own_ca() {
    let Some(server) = OwnServer::start_with(&["--tls"]) else {
        return;
    };
    admin(&server, "CREATE ROLE jobrun_cert LOGIN SUPERUSER");
    let env = TestEnv::postgres_on(&server.url);
    let (port, db) = (port_of(&server.url), db_of(&env));
    let tls = format!("{}/tls", server.dir);
    let (ca, other) = (format!("{tls}/ca.crt"), format!("{tls}/other-ca.crt"));
    let by_name =
        |q: &str| format!("postgres://postgres@localhost:{port}/{db}?hostaddr=127.0.0.1&{q}");
    let by_ip = |q: &str| format!("postgresql://postgres@127.0.0.1:{port}/{db}?{q}");

    succeeds(
        &env,
        &by_name(&format!("sslmode=verify-full&sslrootcert={ca}")),
        &[],
    );
    fails(
        &env,
        &by_ip(&format!("sslmode=verify-full&sslrootcert={ca}")),
        &[],
        "not valid for host 127.0.0.1",
    );
    fails(
        &env,
        &by_name(&format!("sslmode=verify-full&sslrootcert={other}")),
        &[],
        "not signed by a CA in",
    );
    succeeds(
        &env,
        &by_ip(&format!("sslmode=verify-ca&sslrootcert={ca}")),
        &[],
    );
    fails(
        &env,
        &by_ip(&format!("sslmode=verify-ca&sslrootcert={other}")),
        &[],
        "not signed by a CA in",
    );
    // libpq: require with a root certificate checks the chain.
    succeeds(&env, &by_ip("sslmode=require"), &[]);
    fails(
        &env,
        &by_ip(&format!("sslmode=require&sslrootcert={other}")),
        &[],
        "not signed by a CA in",
    );
    succeeds(&env, &by_ip("sslmode=prefer"), &[]);
    succeeds(&env, &by_ip("sslmode=disable"), &[]);
    // PGSSLMODE and PGSSLROOTCERT fill what the string leaves out.
    succeeds(
        &env,
        &by_name(""),
        &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &ca)],
    );
    fails(
        &env,
        &by_ip(""),
        &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &ca)],
        "not valid for host",
    );

    // The connections really are encrypted, or not.
    for (mode, want) in [("require", true), ("prefer", true), ("disable", false)] {
        let app = format!("probe_{mode}");
        let url = by_ip(&format!("sslmode={mode}&application_name={app}"));
        assert_eq!(
            pass_uses_tls(&env, &server.url, &url, &app),
            want,
            "sslmode={mode}"
        );
    }

    // Client certificates, as a key=value string.
    let key = env.path("client.key");
    fs::copy(format!("{tls}/client.key"), &key).unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let with_cert = format!(
        "host=localhost hostaddr=127.0.0.1 port={port} dbname={db} user=jobrun_cert \
         sslmode=verify-full sslrootcert={ca} sslcert={tls}/client.crt sslkey={}",
        key.display()
    );
    succeeds(&env, &with_cert, &[]);
    fails(
        &env,
        &format!(
            "host=localhost hostaddr=127.0.0.1 port={port} dbname={db} user=jobrun_cert \
             sslmode=verify-full sslrootcert={ca}"
        ),
        &[],
        "certificate",
    );
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    fails(&env, &with_cert, &[], "must be 0600 or less");
}

#[test]
fn a_server_without_tls_is_refused_unless_tls_is_only_preferred() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let server = env.server();
    let db = db_of(&env);
    for mode in ["require", "verify-ca", "verify-full"] {
        fails(
            &env,
            &format!("{server}/{db}?sslmode={mode}"),
            &[],
            &format!("the server does not offer TLS, and sslmode={mode} requires it"),
        );
    }
    succeeds(&env, &format!("{server}/{db}?sslmode=prefer"), &[]);
}

#[test]
fn passwords_come_from_libpq_places_and_are_never_shown() {
    let Some(server) = OwnServer::start_with(&["--tls"]) else {
        return;
    };
    admin(
        &server,
        &format!("CREATE ROLE jobrun_pw LOGIN SUPERUSER PASSWORD '{PASSWORD}'"),
    );
    let env = TestEnv::postgres_on(&server.url);
    let (port, db) = (port_of(&server.url), db_of(&env));
    let home = env.path("home");
    fs::create_dir(&home).unwrap();
    let home_s = home.to_string_lossy().into_owned();
    let h = [("HOME", home_s.as_str())];
    let kv = format!("host=127.0.0.1 port={port} dbname={db} user=jobrun_pw");

    // No password anywhere: refused by the server.
    fails(
        &env,
        &kv,
        &h,
        "the server asks for a password and none was given",
    );
    // PGPASSWORD, with a key=value string.
    succeeds(&env, &kv, &[h[0], ("PGPASSWORD", PASSWORD)]);
    // Everything from the environment.
    succeeds(
        &env,
        "postgres://",
        &[
            h[0],
            ("PGHOST", "127.0.0.1"),
            ("PGPORT", &port),
            ("PGUSER", "jobrun_pw"),
            ("PGDATABASE", &db),
            ("PGPASSWORD", PASSWORD),
        ],
    );
    // ~/.pgpass, private.
    let pgpass = home.join(".pgpass");
    fs::write(
        &pgpass,
        format!("# fleet\n127.0.0.1:{port}:*:jobrun_pw:{PASSWORD}\n"),
    )
    .unwrap();
    fs::set_permissions(&pgpass, fs::Permissions::from_mode(0o600)).unwrap();
    succeeds(&env, &kv, &h);
    // PGPASSFILE names another one.
    let other = env.path("passfile");
    fs::copy(&pgpass, &other).unwrap();
    fs::set_permissions(&other, fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(&pgpass).unwrap();
    let other_s = other.to_string_lossy().into_owned();
    succeeds(&env, &kv, &[h[0], ("PGPASSFILE", &other_s)]);
    // Readable by others: not used, and said so.
    fs::set_permissions(&other, fs::Permissions::from_mode(0o644)).unwrap();
    let out = pass(&env, &kv, &[h[0], ("PGPASSFILE", &other_s)]);
    let text = all_output(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("has group or world access (mode 0644)"),
        "{text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
    // A Unix-socket host, as a URL and as a key=value string.
    let sock = &server.dir;
    succeeds(
        &env,
        &format!("postgres:///{db}?host={sock}&port={port}&user=postgres"),
        &h,
    );
    succeeds(
        &env,
        &format!("host={sock} port={port} dbname={db} user=jobrun_pw"),
        &[h[0], ("PGPASSWORD", PASSWORD)],
    );
    // Wrong passwords, wherever they sit, are never shown.
    let wrong = "Wrong-secret-pw";
    for db_str in [
        format!("postgres://jobrun_pw:{wrong}@127.0.0.1:{port}/{db}"),
        format!("postgres://jobrun_pw@127.0.0.1:{port}/{db}?password={wrong}"),
        format!("{kv} password={wrong}"),
        format!("{kv} password='{wrong}'"),
    ] {
        let out = pass(&env, &db_str, &h);
        let text = all_output(&out);
        assert_ne!(out.status.code(), Some(0), "{text}");
        assert!(!text.contains(wrong), "{text}");
        assert!(text.contains("password authentication failed"), "{text}");
    }
    // Nor by the operator commands of a store reached with a password.
    for args in [&["status"][..], &["history"], &["status", "--json"]] {
        let out = env
            .cmd(args)
            .env(
                "JOBRUN_DB",
                format!("postgres://jobrun_pw:{PASSWORD}@127.0.0.1:{port}/{db}"),
            )
            .env("HOME", &home)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
        assert!(!all_output(&out).contains(PASSWORD));
    }
}

#[test]
fn a_release_wakes_a_waiter_on_another_host_at_once() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let child = held_child(&env, "holder", "");
    env.start("holder", &["run", "j", "--lease", "3s", "--", &child]);
    assert!(env.wait_for_file("holder.ready", Duration::from_secs(10)));
    // Another host: its own identity, and no wake file shared with the
    // holder's, so only the store can wake it.
    let tmp = env.path("host-b-tmp");
    fs::create_dir(&tmp).unwrap();
    let started = env.path("started");
    let waiter = script(
        &env,
        "waiter.sh",
        &format!("date +%s%N > {}", started.display()),
    );
    env.start_with(
        "waiter",
        &["run", "j", "--wait", "60s", "--lease", "3s", "--", &waiter],
        &[
            ("JOBRUN_HOST", "host-b"),
            ("JOBRUN_BOOT_ID", "boot-b"),
            ("TMPDIR", &tmp.to_string_lossy()),
            ("XDG_RUNTIME_DIR", ""),
        ],
    );
    assert!(wait_until(Duration::from_secs(10), || env
        .find_job("j")
        .is_some_and(|j| j.queue.length == 1)));
    // Not synchronisation: ten seconds of queueing stretch the waiter's
    // fallback poll to its longest, 5 s.
    std::thread::sleep(Duration::from_secs(10));
    let released = Instant::now();
    fs::write(env.path("holder.done"), "").unwrap();
    assert!(wait_until(Duration::from_secs(15), || started.exists()));
    let took = released.elapsed();
    // Woken by the release: the holder's exit, the notification and the
    // waiter's start, a few hundred ms (a second or so on a loaded
    // machine); a waiter left to its 5 s poll would start 2.5 s later on
    // average.
    assert!(
        took < Duration::from_secs(2),
        "the waiter on another host started {took:?} after the release"
    );
}

#[test]
fn passes_queues_and_renewals_work_through_pgbouncer_in_transaction_mode() {
    let Some(server) = OwnServer::start() else {
        return;
    };
    // A pool of two server connections, so that transactions of different
    // passes share them.
    let bouncer = server.bouncer(2);
    let env = TestEnv::postgres_on(&bouncer);
    // Passes, one after another and several at once on a pool of two.
    for _ in 0..3 {
        let out = env.run(&["run", "solo", "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    }
    let pids: Vec<u32> = (0..6)
        .map(|i| {
            env.start(
                &format!("many{i}"),
                &["run", &format!("many{i}"), "--", "true"],
            )
        })
        .collect();
    for (i, pid) in pids.into_iter().enumerate() {
        assert_eq!(
            env.wait_exit(pid, Duration::from_secs(30)),
            Some(0),
            "{}",
            env.stderr_of(&format!("many{i}"))
        );
    }

    // A queue hand-off.
    let child = held_child(&env, "first", "");
    env.start("first", &["run", "q", "--lease", "3s", "--", &child]);
    assert!(env.wait_for_file("first.ready", Duration::from_secs(10)));
    let second = env.start(
        "second",
        &[
            "run",
            "q",
            "--wait",
            "60s",
            "--lease",
            "3s",
            "--",
            "touch",
            "second.ran",
        ],
    );
    assert!(wait_until(Duration::from_secs(10), || env
        .find_job("q")
        .is_some_and(|j| j.queue.length == 1)));

    // A renewal through a PgBouncer restart: the holder keeps its lease,
    // renewed after the restart, a whole window later.
    let token = env.slot("q").token;
    server.restart_bouncer();
    let restarted = Instant::now();
    let renewed_since = |since: Instant| {
        // A renewal before `since` is older, when status reads it, than
        // the time since `since` as the read began.
        let before = since.elapsed().as_millis() as i64;
        env.find_slot("q")
            .is_some_and(|s| s.token == token && s.renewed_ago_ms + 5 < before)
    };
    assert!(
        wait_until(Duration::from_secs(10), || renewed_since(restarted)),
        "not renewed through the restart: {:?}",
        env.find_slot("q")
    );
    let window = Instant::now() + Duration::from_secs(3);
    assert!(
        wait_until(Duration::from_secs(15), || Instant::now() > window
            && renewed_since(window)),
        "not renewed a window after the restart: {:?}",
        env.find_slot("q")
    );

    fs::write(env.path("first.done"), "").unwrap();
    assert_eq!(
        env.wait_exit(second, Duration::from_secs(30)),
        Some(0),
        "{}",
        env.stderr_of("second")
    );
    assert!(env.path("second.ran").exists());
    assert!(
        !env.stderr_of("first").contains("lease lost"),
        "{}",
        env.stderr_of("first")
    );
    let outcomes: Vec<_> = env.history("q").iter().map(|p| p.outcome).collect();
    assert_eq!(outcomes, [Outcome::Ok, Outcome::Ok]);
}

/// How many server connections jobrun processes named `app` hold now.
fn connections(admin: &mut postgres::Client, app: &str) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap()
        .get(0)
}

#[test]
fn long_leases_hold_no_connection_between_renewals() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    let server = env.server();
    let mut admin = postgres::Client::connect(&format!("{server}/postgres"), postgres::NoTls)
        .expect("connect as admin");
    let url = |app: &str| format!("{}?application_name={app}", env.db);
    // A 30 s lease renews every 10 s: connect, renew, disconnect.
    let child = held_child(&env, "long", "");
    env.start_with(
        "long",
        &["run", "long", "--lease", "30s", "--", &child],
        &[("JOBRUN_DB", &url("econ_long"))],
    );
    assert!(env.wait_for_file("long.ready", Duration::from_secs(10)));
    // Past the first renewal (at 10 s; the next is at 20 s), its
    // connection closes and none is open meanwhile.
    assert!(wait_until(Duration::from_secs(20), || env
        .find_slot("long")
        .is_some_and(|s| s.renewed_ago_ms < 5000 && s.held_ms > 9000)));
    assert!(
        wait_until(Duration::from_secs(5), || connections(
            &mut admin,
            "econ_long"
        ) == 0),
        "the renewal's connection stayed open"
    );
    let closed: Vec<i64> = (0..10)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            connections(&mut admin, "econ_long")
        })
        .collect();
    assert_eq!(closed, [0; 10], "a connection between renewals");
    // A waiter behind it holds one connection, the one it hears releases on.
    env.start_with(
        "waiter",
        &[
            "run", "long", "--lease", "30s", "--wait", "60s", "--", "true",
        ],
        &[("JOBRUN_DB", &url("econ_wait"))],
    );
    // Queued, it polls on a second connection at first, then (its polls a
    // second apart) only while it polls.
    let mut polled_on_two = false;
    assert!(
        wait_until(Duration::from_secs(15), || {
            let n = connections(&mut admin, "econ_wait");
            polled_on_two |= n == 2;
            polled_on_two && n == 1
        }),
        "the waiter never kept to one connection: {}",
        env.stderr_of("waiter")
    );
    let samples: Vec<i64> = (0..10)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            connections(&mut admin, "econ_wait")
        })
        .collect();
    assert!(
        samples.iter().filter(|n| **n == 1).count() >= 8 && samples.iter().all(|n| *n <= 2),
        "{samples:?}: {}",
        env.stderr_of("waiter")
    );
    fs::write(env.path("long.done"), "").unwrap();
    // The short-lease renewer keeps its connection (checked by the TLS
    // probes above); and the lease was renewed all along.
    assert_eq!(
        env.wait_exit(
            env.start("after", &["run", "after", "--", "true"]),
            Duration::from_secs(20)
        ),
        Some(0)
    );
    assert!(!env.stderr_of("long").contains("lease lost"));
}

/// A start that finds the server full keeps trying (within its budget)
/// instead of failing, and runs its command once a connection frees.
#[test]
fn a_start_rides_out_a_full_server() {
    let Some(server) = OwnServer::start_with_env(&[("PG_MAX_CONNECTIONS", "6")]) else {
        return;
    };
    let env = TestEnv::postgres_on(&server.url);
    // Fill every slot.
    let mut hogs = vec![];
    while let Ok(c) =
        postgres::Client::connect(&format!("{}/postgres", server.url), postgres::NoTls)
    {
        hogs.push(c);
        assert!(
            hogs.len() < 20,
            "the server took more clients than it allows"
        );
    }
    // The server logs each connection it turns away (the last one above
    // too): the pass has been turned away twice once two more are logged.
    let refused = || server.log().matches("too many clients").count();
    let before = refused();
    assert!(
        before >= 1,
        "the server logged no refusal: {}",
        server.log()
    );
    let ran = env.path("ran");
    let pid = env.start("full", &["run", "j", "--", "touch", &ran.to_string_lossy()]);
    assert!(
        wait_until(Duration::from_secs(5), || refused() >= before + 2),
        "the pass was not turned away twice: {}{}",
        server.log(),
        env.stderr_of("full")
    );
    // Still waiting: it has neither failed nor started its command.
    assert_eq!(
        env.wait_exit(pid, Duration::ZERO),
        None,
        "the pass gave up on a full server: {}",
        env.stderr_of("full")
    );
    assert!(!ran.exists(), "the command ran without a connection");
    drop(hogs);
    assert_eq!(
        env.wait_exit(pid, Duration::from_secs(20)),
        Some(0),
        "{}",
        env.stderr_of("full")
    );
    assert!(ran.exists(), "the command never ran");
    assert_eq!(env.stderr_of("full"), "");
}

#[test]
fn ages_on_postgres_are_judged_on_the_server_clock() {
    let Some(env) = TestEnv::postgres() else {
        return;
    };
    // A host an hour fast records a pass; status on a host with a right
    // clock shows it ended moments ago, not in an hour.
    let out = env
        .cmd(&["run", "j", "--", "true"])
        .env("JOBRUN_CLOCK_SKEW", "1h")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", all_output(&out));
    let last = env.job("j").last.unwrap();
    let ago = last.ended_ago_ms.unwrap();
    assert!((0..60_000).contains(&ago), "{last:?}");
    let pass = &env.history("j")[0];
    let ended = pass.ended_at_ms;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!((now - ended).abs() < 60_000, "{pass:?}");
}
