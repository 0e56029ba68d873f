//! Holds `log-format.md` and the code together: the hex blocks marked `golden` in the document
//! must be exactly what the code writes, and must decode back to the values the document names.

use tidepool::wal::format::{self, FrameRead, SegmentHeader};
use tidepool::wal::record::Record;

fn golden(name: &str) -> Vec<u8> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/log-format.md"))
        .expect("log-format.md");
    let marker = format!("```golden {name}\n");
    let start = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("log-format.md has no golden block {name}"))
        + marker.len();
    let end = start + doc[start..].find("```").expect("unterminated block");
    doc[start..end]
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {h} in {name}")))
        .collect()
}

#[test]
fn segment_header_matches_the_document() {
    let h = SegmentHeader {
        first_seq: 1,
        created_unix_ms: 1_767_225_600_000,
    };
    let doc = golden("segment-header");
    assert_eq!(
        h.encode().to_vec(),
        doc,
        "the code and log-format.md disagree on the segment header"
    );
    assert_eq!(SegmentHeader::decode(&doc), Ok(h));
}

#[test]
fn kv_record_frame_matches_the_document() {
    let record = Record::KvCommands(vec![vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]]);
    let mut payload = Vec::new();
    record.encode_payload(&mut payload);
    let mut frame = Vec::new();
    format::encode_frame(&mut frame, 1, 1_767_225_600_123, record.kind(), &payload);
    let doc = golden("kv-set-frame");
    assert_eq!(
        frame, doc,
        "the code and log-format.md disagree on the record frame"
    );

    // And the document's bytes read back to the same record.
    let mut seg = SegmentHeader {
        first_seq: 1,
        created_unix_ms: 0,
    }
    .encode()
    .to_vec();
    seg.extend_from_slice(&doc);
    match format::read_frame(&seg, format::SEGMENT_HEADER_BYTES) {
        FrameRead::Frame(f) => {
            assert_eq!(
                (f.seq, f.timestamp_unix_ms, f.kind),
                (1, 1_767_225_600_123, 1)
            );
            assert_eq!(Record::decode(f.kind, f.payload).expect("decodes"), record);
        }
        other => panic!("golden frame does not read back: {other:?}"),
    }
}

#[test]
fn documented_sizes_match_the_constants() {
    assert_eq!(format::SEGMENT_HEADER_BYTES, 32);
    assert_eq!(format::FRAME_HEADER_BYTES, 25);
    assert_eq!(format::FORMAT_VERSION, 1);
    assert_eq!(&format::SEGMENT_MAGIC, b"TIDEPOOL");
}
