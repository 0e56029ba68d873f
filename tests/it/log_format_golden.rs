//! Holds `log-format.md` and the code together: the hex blocks marked `golden` in the document
//! must be exactly what the code writes, and must decode back to the values the document names.

use tidepool::record::Record;
use tidepool::wal::format::{self, FrameRead, SegmentHeader};

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

#[test]
fn delivery_record_frame_matches_the_document() {
    use tidepool::delivery::model::Event;
    let record = Record::Delivery(vec![Event::Cancel {
        ids: vec!["msg_1".to_string()],
    }]);
    let mut payload = Vec::new();
    record.encode_payload(&mut payload);
    let mut frame = Vec::new();
    format::encode_frame(&mut frame, 2, 1_767_225_600_124, record.kind(), &payload);
    let hex: Vec<String> = frame.iter().map(|b| format!("{b:02x}")).collect();
    let doc = golden("delivery-cancel-frame");
    assert_eq!(
        frame,
        doc,
        "the code and log-format.md disagree on the delivery record; the code writes {}",
        hex.join(" ")
    );
    let mut seg = SegmentHeader {
        first_seq: 2,
        created_unix_ms: 0,
    }
    .encode()
    .to_vec();
    seg.extend_from_slice(&doc);
    match format::read_frame(&seg, format::SEGMENT_HEADER_BYTES) {
        FrameRead::Frame(f) => {
            assert_eq!(f.kind, 16);
            assert_eq!(Record::decode(f.kind, f.payload).expect("decodes"), record);
        }
        other => panic!("golden frame does not read back: {other:?}"),
    }
}

/// Every event kind survives the round trip through its MessagePack form.
#[test]
fn every_delivery_event_round_trips() {
    use tidepool::delivery::model::*;
    use tidepool::msgpack::Bin;
    let conf = Conf {
        method: Some("PUT".into()),
        retries: Some(2),
        retry_delay: Some("1000 * retried".into()),
        forward: vec![("X-A".into(), "1".into())],
        callback: Some(Box::new(Hook {
            url: "http://cb".into(),
            conf: Conf::default(),
        })),
        labels: vec!["l".into()],
        redact: vec!["body".into(), "header[Authorization]".into()],
        ..Conf::default()
    };
    let msg = Message {
        id: "msg_1".into(),
        url: "http://x/y".into(),
        method: HttpMethod::PUT,
        body: Bin(vec![0, 255, 1]),
        created_ms: 1,
        not_before_ms: 2,
        max_retries: 2,
        conf: conf.clone(),
        origin: Origin::Publish,
        topic: Some("t".into()),
        endpoint: None,
        queue: Some("q".into()),
        schedule_id: None,
        caller_ip: Some("127.0.0.1".into()),
        dedup_key: Some("id:x".into()),
        source_id: None,
        holds_queue: Some("q".into()),
    };
    let events = vec![
        Event::Put(Box::new(msg.clone())),
        Event::Attempt {
            id: "msg_1".into(),
            retried: 1,
            started_ms: 5,
            response: Response {
                status: 500,
                headers: vec![("A".into(), "b".into())],
                body: Bin(b"no".to_vec()),
                error: Some("e".into()),
            },
            outcome: Outcome::Dead {
                dlq_id: "1-0".into(),
            },
        },
        Event::Attempt {
            id: "msg_1".into(),
            retried: 0,
            started_ms: 5,
            response: Response::default(),
            outcome: Outcome::Retry { next_ms: 9 },
        },
        Event::Cancel {
            ids: vec!["a".into()],
        },
        Event::DlqRemove {
            ids: vec!["1-0".into()],
        },
        Event::Topic(Topic {
            name: "t".into(),
            created_ms: 1,
            updated_ms: 2,
            endpoints: vec![Endpoint {
                name: Some("e".into()),
                url: "http://e".into(),
            }],
            // Not written when empty: the bytes are those of records before default headers.
            headers: vec![],
        }),
        Event::TopicDelete { name: "t".into() },
        Event::Queue(QueueConf {
            name: "q".into(),
            parallelism: 3,
            paused: true,
        }),
        Event::QueueDelete { name: "q".into() },
        Event::Schedule(Box::new(Schedule {
            id: "scd_1".into(),
            cron: "* * * * *".into(),
            destination: "http://x".into(),
            method: "POST".into(),
            body: None,
            conf,
            queue: None,
            caller_ip: None,
            created_ms: 1,
            paused: false,
            next_ms: 60_000,
            last_ms: Some(0),
            last_message_id: Some("msg_0".into()),
        })),
        Event::ScheduleDelete { id: "scd_1".into() },
        Event::SchedulePause {
            id: "scd_1".into(),
            paused: true,
        },
        Event::ScheduleFired {
            id: "scd_1".into(),
            at_ms: 60_000,
            next_ms: 120_000,
            message_id: Some("msg_2".into()),
        },
        Event::Wait(Box::new(Waiter {
            id: "wtr_1".into(),
            event_id: "ev".into(),
            url: "http://w".into(),
            headers: vec![("Upstash-Workflow-Runid".into(), "wfr_1".into())],
            deadline_s: 10,
            timeout_url: None,
            timeout_body: Some(Bin(b"t".to_vec())),
            timeout_headers: vec![],
            step: "{}".into(),
            created_ms: 3,
        })),
        Event::WaitersRemove {
            ids: vec!["wtr_1".into()],
        },
        Event::RunEnd {
            id: "wfr_1".into(),
            state: "RUN_SUCCESS".into(),
            response: Some(Bin(b"\"done\"".to_vec())),
        },
        Event::Notification {
            run_id: "wfr_1".into(),
            event_id: "ev".into(),
            body: Bin(b"data".to_vec()),
        },
        Event::NotificationRemove {
            run_id: "wfr_1".into(),
            event_id: "ev".into(),
        },
        Event::FlowControl {
            key: "k".into(),
            paused: true,
            pin_parallelism: Some(2),
            pin_rate: None,
            pin_period_s: Some(60),
        },
    ];
    let record = Record::Delivery(events);
    let mut payload = Vec::new();
    record.encode_payload(&mut payload);
    assert_eq!(Record::decode(16, &payload).expect("decodes"), record);
}

/// The snapshot header, and a keys chunk of two keys (a string with an expiry, a hash with a
/// field TTL) and an end chunk, as `log-format.md` ("Snapshots") shows them.
#[test]
fn snapshot_bytes_match_the_document() {
    use tidepool::snapshot::format::{self as sf, SnapshotHeader};
    use tidepool::snapshot::keys;
    use tidepool::state::{hash::Hash, Entry, Value};
    let h = SnapshotHeader {
        seq: 5,
        record_unix_ms: 1_767_225_600_123,
        created_unix_ms: 1_767_225_600_200,
    };
    let doc = golden("snapshot-header");
    assert_eq!(h.encode().to_vec(), doc, "snapshot header");
    assert_eq!(SnapshotHeader::decode(&doc), Ok(h));

    let mut hash = Hash::new();
    hash.insert(b"f", b"x".to_vec());
    hash.set_ttl(b"f", 1_767_225_700_000);
    let mut body = Vec::new();
    sf::put_uint(&mut body, 2);
    for (key, entry) in [
        (
            &b"k"[..],
            Entry::new(
                Value::Str(b"v"[..].into()),
                Some(1_767_225_700_000),
                1_767_225_600_123,
            ),
        ),
        (
            &b"h"[..],
            Entry::new(Value::Hash(Box::new(hash)), None, 1_767_225_600_123),
        ),
    ] {
        keys::put_entry(&mut body, key, &entry).expect("entry");
    }
    let mut chunk = Vec::new();
    sf::encode_chunk(&mut chunk, sf::CHUNK_KEYS, &body);
    let doc = golden("snapshot-keys-chunk");
    if chunk != doc {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        panic!("snapshot keys chunk: the code writes\n{}", hex.join(" "));
    }
    let read = sf::read_chunk(&doc, 0).expect("reads back");
    let mut c = sf::Cursor::new(read.payload);
    assert_eq!(c.count(), Ok(2));
    let (k, e) = keys::read_entry(&mut c).expect("entry");
    assert_eq!(
        (k.as_slice(), e.expire_at_ms()),
        (&b"k"[..], Some(1_767_225_700_000))
    );

    let mut end = Vec::new();
    sf::put_u64(&mut end, 2);
    sf::put_u64(&mut end, 4);
    let mut chunk = Vec::new();
    sf::encode_chunk(&mut chunk, sf::CHUNK_END, &end);
    let doc = golden("snapshot-end-chunk");
    if chunk != doc {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        panic!("snapshot end chunk: the code writes\n{}", hex.join(" "));
    }
    assert_eq!(sf::SNAPSHOT_HEADER_BYTES, 40);
    assert_eq!(sf::CHUNK_HEADER_BYTES, 9);
    assert_eq!(&sf::SNAPSHOT_MAGIC, b"TIDESNAP");
}

/// A record of another database's commands (kind 2) and a record of the set of databases
/// (kind 3), as `log-format.md` shows them.
#[test]
fn database_record_frames_match_the_document() {
    use tidepool::state::databases::DbEvent;
    let hex = |b: &[u8]| {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (name, seq, record) in [
        (
            "kv-in-frame",
            3,
            Record::KvCommandsIn {
                db: 7,
                cmds: vec![vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]],
            },
        ),
        (
            "databases-frame",
            4,
            Record::Databases(vec![DbEvent::Create {
                id: 7,
                name: "app".into(),
                expires_ms: None,
                scratch: false,
                script_ms: None,
                max_data_bytes: None,
                created_by: None,
            }]),
        ),
    ] {
        let mut payload = Vec::new();
        record.encode_payload(&mut payload);
        let mut frame = Vec::new();
        format::encode_frame(&mut frame, seq, 1_767_225_600_125, record.kind(), &payload);
        let doc = golden(name);
        if frame != doc {
            panic!("{name}: the code writes\n{}", hex(&frame));
        }
        assert_eq!(
            Record::decode(record.kind(), &payload).expect("decodes"),
            record
        );
    }
}

/// The version rows of the two header tables and the first version line say what the code
/// writes (issue 26: the segment header's row said `2` while the code and the golden bytes
/// said 1, and no test read the prose).
#[test]
fn documented_versions_match_the_code() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/log-format.md"))
        .expect("log-format.md");
    let version_after = |magic: &str| -> u16 {
        let at = doc
            .find(&format!("| 0 | 8 | magic | ASCII `{magic}` |"))
            .unwrap_or_else(|| panic!("no header table for {magic}"));
        let row = doc[at..].lines().nth(1).expect("the row after the magic");
        assert!(row.starts_with("| 8 | 2 | version | `"), "{row}");
        row["| 8 | 2 | version | `".len()..]
            .split('`')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no version in {row}"))
    };
    assert_eq!(
        version_after("TIDEPOOL"),
        tidepool::wal::format::FORMAT_VERSION
    );
    assert_eq!(
        version_after("TIDESNAP"),
        tidepool::snapshot::format::SNAPSHOT_VERSION
    );
    let title = doc.lines().next().expect("title");
    assert_eq!(
        title,
        format!(
            "# tidepool log format, version {}",
            tidepool::wal::format::FORMAT_VERSION
        )
    );
}

/// The cluster's log (issue 30): its header, an entry holding the batch of one `SET k v`
/// record (the frame above), the vote and the purged entry's id, as log-format.md shows them.
#[test]
fn the_cluster_log_matches_the_document() {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
    use tidepool::cluster::log_store as ls;
    use tidepool::cluster::Batch;
    let record = Record::KvCommands(vec![vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]]);
    let mut payload = Vec::new();
    record.encode_payload(&mut payload);
    let mut frames = Vec::new();
    format::encode_frame(&mut frames, 1, 1_767_225_600_123, record.kind(), &payload);
    assert_eq!(ls::log_header().to_vec(), golden("cluster-log-header"));
    let entry = Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), 2),
        payload: EntryPayload::Normal(Batch {
            frames: frames.into(),
        }),
    };
    let mut out = Vec::new();
    ls::encode_entry(&mut out, &entry).expect("encode");
    let doc = golden("cluster-entry");
    assert_eq!(
        out, doc,
        "the code and log-format.md disagree on a cluster entry"
    );
    let (back, len) = ls::decode_entry(&doc, 0)
        .expect("decodes")
        .expect("an entry");
    assert_eq!(len, doc.len());
    assert_eq!(back.log_id, entry.log_id);
    assert!(matches!(back.payload, EntryPayload::Normal(b) if b.frames == golden("kv-set-frame")));
    let vote = Vote::new_committed(3, 2);
    assert_eq!(ls::encode_vote(&vote).to_vec(), golden("cluster-vote"));
    assert_eq!(ls::decode_vote(&golden("cluster-vote")), Ok(vote));
    let purged = LogId::new(CommittedLeaderId::new(1, 1), 2);
    assert_eq!(
        ls::encode_purged(&purged).to_vec(),
        golden("cluster-purged")
    );
    assert_eq!(ls::decode_purged(&golden("cluster-purged")), Ok(purged));
    assert_eq!(ls::encode_node_id(2).to_vec(), golden("cluster-node-id"));
    assert_eq!(ls::decode_node_id(&golden("cluster-node-id")), Ok(2));
}
