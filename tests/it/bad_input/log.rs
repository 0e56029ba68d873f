//! The log reader and the inspection tool on random and damaged directories: a clear verdict
//! (exit 1 with file and offset, or a torn tail), never a panic; a server refuses to start on
//! damage with the same words and leaves the files as they were.

use super::*;
use tidepool::wal::format::{self, SegmentHeader};

pub const CASES_LEN: usize = 24;

/// A data directory whose one segment holds `bytes` after a valid header, or `bytes` alone.
fn directory(tag: &str, with_header: bool, bytes: &[u8]) -> TempDir {
    let dir = TempDir::new(tag);
    let wal = dir.path().join("wal");
    std::fs::create_dir_all(&wal).expect("wal dir");
    let mut seg = if with_header {
        SegmentHeader {
            first_seq: 1,
            created_unix_ms: 1,
        }
        .encode()
        .to_vec()
    } else {
        Vec::new()
    };
    seg.extend_from_slice(bytes);
    std::fs::write(wal.join(format::segment_file_name(1)), &seg).expect("write");
    dir
}

#[test]
fn random_and_damaged_logs_get_a_clear_verdict() {
    let mut rng = TestRng(0x10_6a11);
    let mut cases: Vec<(bool, Vec<u8>)> = Vec::new();
    for len in [1usize, 7, 24, 25, 26, 100, 1000, 5000] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        cases.push((true, bytes.clone()));
        cases.push((false, bytes));
    }
    // Frames whose lengths claim too much, too little, or the largest allowed.
    for claim in [0u32, 1, 24, 1 << 20, (1 << 30) + 1, u32::MAX, 30, 1 << 30] {
        let mut f = claim.to_le_bytes().to_vec();
        f.extend((0..40).map(|_| rng.next() as u8));
        cases.push((true, f));
    }
    assert_eq!(cases.len(), CASES_LEN);
    for (i, (header, bytes)) in cases.iter().enumerate() {
        let dir = directory(&format!("badlog{i}"), *header, bytes);
        let data = dir.path().to_str().expect("utf8 path");
        let (code, out) = log_tool(&["verify", data]);
        assert!(
            code == 0 || code == 1,
            "case {i}: verify exited {code}: {out}"
        );
        assert!(!out.contains("panicked"), "case {i}: {out}");
        let (code, out) = log_tool(&["dump", data]);
        assert!(
            code == 0 || code == 1,
            "case {i}: dump exited {code}: {out}"
        );
        assert!(!out.contains("panicked"), "case {i}: {out}");
        let before = std::fs::read(dir.path().join("wal").join(format::segment_file_name(1)))
            .expect("segment");
        match Server::try_start(dir.path(), &[]) {
            // A torn tail: cut, and the server answers.
            Ok(server) => still_answers(&server),
            // Damage: refused with the file, the offset and the repair command; the segment
            // is left as it was.
            Err(e) => {
                assert!(
                    e.contains("offset") && e.contains("tidepool-log") && !e.contains("panicked"),
                    "case {i}: {e}"
                );
                let after =
                    std::fs::read(dir.path().join("wal").join(format::segment_file_name(1)))
                        .expect("segment");
                assert_eq!(before, after, "case {i}: a refused log was changed");
            }
        }
    }
}
