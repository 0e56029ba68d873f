//! RESTORE payloads: redis-server's own DUMP of every type, then truncated, with a wrong
//! version, a wrong checksum, and bytes changed under a recomputed checksum. Each is refused
//! with Redis's error, or (for a change that still decodes) restored as a value that every
//! read then handles.

use super::*;

const SOURCES: &[&[&str]] = &[
    &["SET", "src", "a string value"],
    &["SET", "src", "12345"],
    &["RPUSH", "src", "a", "b", "c"],
    &["HSET", "src", "f", "v", "g", "w"],
    &["SADD", "src", "1", "2", "3"],
    &["SADD", "src", "x", "y"],
    &["ZADD", "src", "1", "a", "2.5", "b"],
    &["XADD", "src", "1-1", "f", "v"],
    &["PFADD", "src", "a", "b", "c"],
];

/// What is done to each source's payload.
const DAMAGE: &[&str] = &[
    "truncate-half",
    "truncate-crc",
    "empty-body",
    "version",
    "checksum",
    "flip-type",
    "flip-length",
    "flip-middle",
];

pub const CASES_LEN: usize = SOURCES.len() * DAMAGE.len() + 3;

/// Redis's CRC-64 (Jones) over a payload's body, as the last 8 bytes.
fn fix_crc(p: &mut [u8]) {
    let body = p.len() - 8;
    let crc = tidepool::rdb::crc64(&p[..body]);
    p[body..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn damaged_restore_payloads_are_refused_or_restored_safely() {
    let Some(mut both) = Both::start("bad-restore", &[]) else {
        return;
    };
    let Both {
        t: c, r, server, ..
    } = &mut both;
    for (i, src) in SOURCES.iter().enumerate() {
        r.cmd_str(&["DEL", "src"]);
        r.cmd(
            &src.iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        );
        let Canon::Str(payload) = r.cmd_str(&["DUMP", "src"]) else {
            panic!("DUMP {src:?}")
        };
        for damage in DAMAGE {
            let mut p = payload.clone();
            let n = p.len();
            match *damage {
                "truncate-half" => p.truncate(n / 2),
                "truncate-crc" => p.truncate(n - 3),
                "empty-body" => p = p[n - 10..].to_vec(),
                "version" => {
                    p[n - 10] = 0xff;
                    fix_crc(&mut p);
                }
                "checksum" => p[n - 1] ^= 0x5a,
                "flip-type" => {
                    p[0] ^= 0x7f;
                    fix_crc(&mut p);
                }
                "flip-length" => {
                    p[1] ^= 0xc0;
                    fix_crc(&mut p);
                }
                _ => {
                    p[n / 3] ^= 0xff;
                    fix_crc(&mut p);
                }
            }
            let key = format!("k{i}-{damage}");
            let args = vec![
                b"RESTORE".to_vec(),
                key.as_bytes().to_vec(),
                b"0".to_vec(),
                p.clone(),
            ];
            let want = r.cmd(&args);
            let got = c.cmd(&args);
            match (&got, &want) {
                (Canon::Err(g), Canon::Err(w)) if g == w => {}
                // Redis refuses it (or keeps it unchecked); tidepool refuses it with a clear
                // error of the same kind.
                (Canon::Err(g), _) => assert!(g.starts_with("ERR"), "{src:?} {damage}: {g}"),
                (ok, _) => {
                    assert_eq!(ok, &Canon::s("OK"), "{src:?} {damage}");
                    // A value that decoded: every generic read of it works.
                    for cmd in [
                        vec!["TYPE", key.as_str()],
                        vec!["DUMP", key.as_str()],
                        vec!["OBJECT", "ENCODING", key.as_str()],
                        vec!["MEMORY", "USAGE", key.as_str()],
                        vec!["SORT", key.as_str(), "ALPHA"],
                    ] {
                        c.cmd_str(&cmd);
                    }
                }
            }
            still_answers(server);
        }
    }
    // Plain garbage, an empty payload, and a payload for a type tidepool does not know.
    for p in [b"garbage".to_vec(), Vec::new(), vec![200; 40]] {
        let got = c.cmd(&[b"RESTORE".to_vec(), b"g".to_vec(), b"0".to_vec(), p]);
        assert!(got.is_err(), "{got:?}");
        still_answers(server);
    }
}
