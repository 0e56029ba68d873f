//! The README and the documents under `docs/` hold to the code (issue 26): the flag table is
//! the parser's own, every flag is described in `docs/operations.md`, every relative link
//! leads to a file, and the shell blocks that call a server are run against one, as written
//! (the test command itself and release builds are not run: CI is that command).

use crate::common::*;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_readme_flag_table_is_the_parsers() {
    let readme = read("README.md");
    let start = readme
        .find("<!-- flags:serve -->\n")
        .expect("the README's flag table marker")
        + "<!-- flags:serve -->\n".len();
    let end = start + readme[start..].find("<!-- /flags -->").expect("end marker");
    let want = tidepool::cli::flag_table();
    assert!(
        readme[start..end] == want,
        "the README's flag table is not the parser's; paste this between the markers:\n{want}"
    );
}

#[test]
fn every_flag_is_described_in_full_in_operations() {
    let ops = read("docs/operations.md");
    let cmd = tidepool::cli::command();
    let serve = cmd.find_subcommand("serve").expect("serve");
    let mut known = Vec::new();
    for a in serve.get_arguments() {
        let (Some(long), Some(env)) = (a.get_long(), a.get_env()) else {
            continue;
        };
        known.push(long.to_string());
        let row = ops
            .lines()
            .find(|l| l.starts_with(&format!("| `--{long}")))
            .unwrap_or_else(|| panic!("docs/operations.md describes no --{long}"));
        assert!(
            row.contains(&*env.to_string_lossy()),
            "--{long}'s row does not name {}: {row}",
            env.to_string_lossy()
        );
    }
    for l in ops.lines().filter(|l| l.starts_with("| `--")) {
        let name = l["| `--".len()..].split([' ', '`']).next().unwrap_or("");
        assert!(
            known.iter().any(|k| k == name),
            "docs/operations.md describes --{name}, which the parser does not know"
        );
    }
}

/// Relative links of a Markdown file: `](path)` and `](path#anchor)`, not URLs.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        if !target.contains("://") && !target.starts_with('#') && !target.starts_with("mailto:") {
            out.push(target.split('#').next().unwrap_or("").to_string());
        }
    }
    out
}

#[test]
fn every_relative_link_leads_to_a_file() {
    let mut files = vec![root().join("README.md"), root().join("log-format.md")];
    for f in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let path = f.expect("entry").path();
        // docs/console/ holds the console's screenshots, not documents.
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read");
        let dir = f.parent().unwrap_or(Path::new("."));
        for link in relative_links(&text) {
            assert!(
                dir.join(&link).exists(),
                "{}: the link {link} leads nowhere",
                f.display()
            );
        }
    }
    let readme = read("README.md");
    assert!(
        readme.lines().count() < 300,
        "the README is for a newcomer's ten minutes: under 300 lines, the rest in docs/"
    );
}

/// The ```sh blocks of the README, each as its lines.
fn shell_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in text.lines() {
        match (&mut current, line) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(b), l) => b.push(l.to_string()),
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn the_readme_shell_blocks_run_as_written() {
    let blocks = shell_blocks(&read("README.md"));
    assert!(blocks.len() >= 4, "{blocks:?}");
    let dir = TempDir::new("readme");
    let server = Server::start_delivery(&dir.path().join("data"));
    let url = format!("http://{}", server.addr);
    let mut ran = 0;
    for block in blocks {
        let text = block.join("\n");
        // The first two commands: the server (a release build) and the tests (what CI runs).
        if text.contains("--release") || text.contains("tools/test.sh") {
            continue;
        }
        let mut script = String::from("set -euo pipefail\n");
        let mut joined = String::new();
        for line in &block {
            // Continuation lines are joined first, so a comment is stripped from the whole.
            joined.push_str(line.trim_end_matches('\\'));
            if line.ends_with('\\') {
                joined.push(' ');
                continue;
            }
            let mut l = std::mem::take(&mut joined);
            if l.trim_start().starts_with('#') || l.trim().is_empty() {
                continue;
            }
            if let Some(i) = l.find("  #") {
                l.truncate(i);
            }
            let l = l
                .replace("http://127.0.0.1:8079", &url)
                .replace("<the printed token>", TOKEN)
                .replace("<the printed QSTASH_TOKEN>", QSTASH_TOKEN)
                .replace("curl ", "curl -sSf ");
            if l.contains("curl -sSf -N") {
                // An event stream: it is open (and answers) for two seconds, then cut.
                script.push_str(&format!(
                    "{{ timeout 2 {l} >/dev/null; rc=$?; [ $rc = 124 ] || [ $rc = 0 ]; }} || exit 1\n"
                ));
            } else {
                script.push_str(&l);
                script.push('\n');
            }
        }
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "a README block failed:\n{script}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 3, "the quickstart blocks ran: {ran}");
    drop(server);
}
