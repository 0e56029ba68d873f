//! The command line: bad flags, unusable directories and ports fail with one clear line and a
//! non-zero exit, never a panic; SIGTERM stops cleanly with exit 0.

use crate::common::*;
use std::process::Command;

fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tidepool"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run tidepool");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_one_clear_line(code: i32, err: &str, needle: &str) {
    assert_ne!(code, 0);
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert!(err.lines().next().unwrap_or("").contains(needle), "{err}");
}

#[test]
fn bad_flags_fail_clearly() {
    let (code, err) = run(&["serve", "--bogus"], &[]);
    // The argument parser's own wording since issue 26, with the near miss suggested.
    assert_one_clear_line(code, &err, "unexpected argument '--bogus'");
    let (code, err) = run(&["serve", "--lisen", "x"], &[]);
    assert_one_clear_line(code, &err, "unexpected argument '--lisen'");
    assert!(
        err.contains("a similar argument exists: '--listen'"),
        "{err}"
    );
    let (code, err) = run(&["serve", "--fsync", "sometimes"], &[]);
    assert_one_clear_line(
        code,
        &err,
        "--fsync 'sometimes' must be always, everysec or never",
    );
    let (code, err) = run(&["serve", "--listen", "nowhere"], &[]);
    assert_one_clear_line(code, &err, "is not an address");
    let (code, err) = run(&["serve"], &[("TIDEPOOL_FSYNC", "maybe")]);
    assert_one_clear_line(code, &err, "must be always, everysec or never");
    let (code, err) = run(&["frobnicate"], &[]);
    assert_one_clear_line(code, &err, "unrecognized subcommand 'frobnicate'");
    // The issue 17 flags.
    let (code, err) = run(&["serve", "--dev", "--listen", "0.0.0.0:0"], &[]);
    assert_one_clear_line(code, &err, "--dev uses public, well-known credentials");
    let (code, err) = run(&["serve", "--dev", "--token", "x"], &[]);
    assert_one_clear_line(code, &err, "--dev sets the credentials itself");
    let (code, err) = run(&["serve", "--start-path", "v2"], &[]);
    assert_one_clear_line(code, &err, "--start-path 'v2' must be off or a path");
    let (code, err) = run(&["serve", "--scratch-ttl", "10GiB"], &[]);
    assert_one_clear_line(code, &err, "--scratch-ttl '10GiB' must be a duration");
    let (code, err) = run(&["serve", "--max-value-bytes", "0"], &[]);
    assert_one_clear_line(
        code,
        &err,
        "--max-value-bytes '0' must be a positive number",
    );
    let (code, err) = run(&["serve", "--max-requests-per-day", "many"], &[]);
    assert_one_clear_line(code, &err, "--max-requests-per-day 'many'");
    let (code, err) = run(&["serve", "--log-level", "tidepool=[["], &[]);
    assert_one_clear_line(code, &err, "--log-level");
}

#[test]
fn unusable_data_directory_and_port_in_use_fail_clearly() {
    let dir = TempDir::new("cli");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let (code, err) = run(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert_one_clear_line(code, &err, "data directory");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (code, err) = run(
        &[
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data",
            dir.path().join("d").to_str().unwrap(),
        ],
        &[],
    );
    assert_one_clear_line(code, &err, "cannot listen on");

    // A second server on the same directory is refused.
    let data = dir.path().join("shared");
    let _first = Server::start(&data, &[]);
    let (code, err) = run(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data",
            data.to_str().unwrap(),
        ],
        &[],
    );
    assert_one_clear_line(code, &err, "in use by another tidepool");
}

#[test]
fn tokens_are_generated_once_and_kept() {
    let dir = TempDir::new("tokens");
    let data = dir.path().join("d");
    let start = || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tidepool"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data",
                data.to_str().unwrap(),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut out = String::new();
        let mut r = std::io::BufReader::new(child.stdout.take().unwrap());
        for _ in 0..5 {
            std::io::BufRead::read_line(&mut r, &mut out).unwrap();
        }
        let _ = child.kill();
        let _ = child.wait();
        let token = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("UPSTASH_REDIS_REST_TOKEN="))
            .unwrap()
            .to_string();
        let ro = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("read-only token: "))
            .unwrap()
            .to_string();
        (token, ro)
    };
    let (t1, r1) = start();
    let (t2, r2) = start();
    assert!(t1.len() >= 32 && r1.len() >= 32 && t1 != r1);
    assert_eq!((t1, r1), (t2, r2));
}

#[test]
fn environment_configures_the_server_and_sigterm_exits_zero() {
    let dir = TempDir::new("env");
    let data = dir.path().join("d");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .arg("serve")
        .env("TIDEPOOL_LISTEN", "127.0.0.1:0")
        .env("TIDEPOOL_DATA", &data)
        .env("TIDEPOOL_TOKEN", "env-token")
        .env("TIDEPOOL_READ_ONLY_TOKEN", "env-ro")
        .env("TIDEPOOL_FSYNC", "everysec")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line.split("http://").nth(1).unwrap().trim().to_string();
    let mut c = Http::connect(&addr, "env-token");
    assert_eq!(c.cmd_str(&["SET", "a", "1"]), Canon::s("OK"));
    let info = c.cmd_str(&["INFO", "persistence"]);
    let Canon::Str(info) = info else { panic!() };
    assert!(String::from_utf8_lossy(&info).contains("tidepool_fsync:everysec"));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// Regression: the start-up banner was printed with println!, which panics on EPIPE, so a
/// server whose stdout was closed after the first line died.
#[test]
fn a_closed_stdout_does_not_stop_the_server() {
    let dir = TempDir::new("epipe");
    for _ in 0..5 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tidepool"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--token",
                "t",
                "--read-only-token",
                "r",
                "--data",
            ])
            .arg(dir.path().join("d"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        {
            let mut r = std::io::BufReader::new(child.stdout.take().unwrap());
            std::io::BufRead::read_line(&mut r, &mut line).unwrap();
        } // stdout closed here, before the rest of the banner may have been written
        let addr = line.split("http://").nth(1).unwrap().trim().to_string();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut c = Http::connect(&addr, "t");
        assert_eq!(c.cmd_str(&["PING"]), Canon::s("PONG"));
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }
}

/// Every binary answers `--help` and `--version` at once, with nothing started or written
/// (`tidepool-bench --help` used to run the whole benchmark); `tidepool --version` names the
/// log format it writes.
#[test]
fn every_binary_answers_help_and_version_at_once() {
    for bin in [
        env!("CARGO_BIN_EXE_tidepool"),
        env!("CARGO_BIN_EXE_tidepool-log"),
        env!("CARGO_BIN_EXE_tidepool-bench"),
    ] {
        for flag in ["--help", "--version"] {
            // Its working and temporary directory: a benchmark that started would make its
            // directory there (and a server its data directory).
            let dir = TempDir::new("cli-help");
            let out = Command::new(bin)
                .arg(flag)
                .current_dir(dir.path())
                .env("TMPDIR", dir.path())
                .output()
                .expect("run");
            assert_eq!(out.status.code(), Some(0), "{bin} {flag}");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                if flag == "--help" {
                    text.to_lowercase().contains("usage")
                } else {
                    text.contains(env!("CARGO_PKG_VERSION"))
                },
                "{bin} {flag}: {text}"
            );
            assert_eq!(
                std::fs::read_dir(dir.path()).expect("ls").count(),
                0,
                "{bin} {flag} wrote into its directory"
            );
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tidepool"))
        .arg("--version")
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&out.stdout).contains("log format 1"));
}

/// Issue 26 (found by the arbitrary-records property): the SIGTERM handler was installed
/// only when the listener's loop first ran, after the banner; a SIGTERM sent as soon as the
/// banner was read killed the server instead of stopping it cleanly.
#[test]
fn a_sigterm_right_after_the_banner_stops_the_server_cleanly() {
    for i in 0..5 {
        let dir = TempDir::new(&format!("early-term-{i}"));
        let server = Server::start(dir.path(), &[]);
        assert_eq!(server.terminate(), Some(0), "attempt {i}");
    }
}
