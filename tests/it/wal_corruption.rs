//! Every bit of a record's frame flipped, at the start, middle and end of a closed segment and
//! of the newest one: recovery either cuts a true torn tail (losing only the damaged last
//! record, which a torn write never acknowledged) or refuses with file and offset. None may
//! lose a record that a valid one follows (issue 14, defect 5: a damaged length in the middle
//! of the newest segment was taken for a torn tail and 150 acknowledged records were cut).

use std::path::{Path, PathBuf};
use tidepool::record::{self, Record};
use tidepool::wal::format::{self, SegmentHeader, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use tidepool::wal::reader::{self, Action};

/// Segments are preallocated with zeros; these are small ones.
const SEGMENT_FILE_BYTES: usize = 64 * 1024;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "tidepool-walcorrupt-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A segment holding records `first..first + n`, each a SET of a few bytes, and the offsets
/// at which each frame starts.
fn segment(first: u64, n: u64) -> (Vec<u8>, Vec<usize>) {
    let mut out = SegmentHeader {
        first_seq: first,
        created_unix_ms: 1_767_225_600_000,
    }
    .encode()
    .to_vec();
    let mut offsets = Vec::new();
    for seq in first..first + n {
        let cmd = vec![
            b"SET".to_vec(),
            format!("key:{seq}").into_bytes(),
            format!("value-{seq}").into_bytes(),
        ];
        let mut payload = Vec::new();
        record::encode_kv_commands(&mut payload, &[cmd]);
        offsets.push(out.len());
        let rec = Record::KvCommands(Vec::new());
        format::encode_frame(&mut out, seq, 1_767_225_600_000 + seq, rec.kind(), &payload);
    }
    assert!(out.len() < SEGMENT_FILE_BYTES);
    out.resize(SEGMENT_FILE_BYTES, 0);
    (out, offsets)
}

fn write_segment(dir: &Path, first: u64, bytes: &[u8]) -> PathBuf {
    let p = dir.join(format::segment_file_name(first));
    std::fs::write(&p, bytes).expect("write segment");
    p
}

/// Scans `dir`: the records delivered and the decision, if the scan stopped on damage.
fn scan(dir: &Path) -> (u64, Option<reader::Damage>) {
    let s = reader::scan(dir, |_, _, _| Ok(())).expect("scan");
    (s.records, s.damage)
}

/// Flips each bit of the frame of record `index` (its 25-byte header and the first bytes of
/// its payload) in segment `which` (0: closed, 1: newest), and checks the verdict each time.
fn flip_every_bit(which: usize, index: usize) {
    let per_segment = 100u64;
    let (a, a_off) = segment(1, per_segment);
    let (b, b_off) = segment(1 + per_segment, per_segment);
    let (clean, offsets) = if which == 0 {
        (&a, &a_off)
    } else {
        (&b, &b_off)
    };
    let start = offsets[index];
    let end = offsets.get(index + 1).copied().unwrap_or_else(|| {
        clean
            .iter()
            .rposition(|&x| x != 0)
            .map_or(start + FRAME_HEADER_BYTES, |i| i + 1)
    });
    let damaged_seq = if which == 0 { 1 } else { 1 + per_segment } + index as u64;
    let last_seq = 2 * per_segment;
    let dir = TempDir::new(&format!("s{which}r{index}"));
    for byte in start..end {
        for bit in 0..8 {
            let mut bytes = clean.clone();
            bytes[byte] ^= 1 << bit;
            let (pa, pb) = if which == 0 {
                (&bytes, &b)
            } else {
                (&a, &bytes)
            };
            let fa = write_segment(&dir.0, 1, pa);
            let fb = write_segment(&dir.0, 1 + per_segment, pb);
            let (records, damage) = scan(&dir.0);
            let what = format!(
                "segment {which}, record {index}, byte {} (frame offset {}), bit {bit}",
                byte,
                byte - start
            );
            let Some(d) = damage else {
                panic!("{what}: a flipped bit went unnoticed");
            };
            let file = if which == 0 { &fa } else { &fb };
            assert_eq!(&d.path, file, "{what}: damage named in the wrong file");
            assert_eq!(
                d.offset as usize, start,
                "{what}: damage at the wrong offset"
            );
            assert_eq!(
                records,
                damaged_seq - 1,
                "{what}: records before the damage"
            );
            match d.action {
                Action::Refuse => {}
                Action::CutTail => assert!(
                    which == 1 && damaged_seq == last_seq,
                    "{what}: cut as a torn tail, losing {} records that follow it",
                    last_seq - damaged_seq + 1
                ),
            }
        }
    }
}

#[test]
fn every_bit_of_the_first_record_of_a_closed_segment() {
    flip_every_bit(0, 0);
}

#[test]
fn every_bit_of_a_middle_record_of_a_closed_segment() {
    flip_every_bit(0, 50);
}

#[test]
fn every_bit_of_the_last_record_of_a_closed_segment() {
    flip_every_bit(0, 99);
}

#[test]
fn every_bit_of_the_first_record_of_the_newest_segment() {
    flip_every_bit(1, 0);
}

#[test]
fn every_bit_of_a_middle_record_of_the_newest_segment() {
    flip_every_bit(1, 50);
}

#[test]
fn every_bit_of_the_last_record_of_the_newest_segment() {
    flip_every_bit(1, 99);
}

/// The reproduction: 300 records in one segment, bit 4 of the length of record 151
/// flipped. Start-up used to cut the file there and lose 150 acknowledged records.
#[test]
fn damaged_length_in_the_middle_of_the_newest_segment_is_refused_not_cut() {
    let (mut bytes, offsets) = segment(1, 300);
    bytes[offsets[150]] ^= 1 << 4;
    let dir = TempDir::new("len151");
    write_segment(&dir.0, 1, &bytes);
    let (records, damage) = scan(&dir.0);
    let d = damage.expect("damage found");
    assert_eq!(records, 150);
    assert_eq!(d.action, Action::Refuse, "{d}");
    assert_eq!(d.offset as usize, offsets[150]);
    // Every one of the 32 length bits: never a cut while records follow.
    for bit in 0..32 {
        let (mut bytes, offsets) = segment(1, 300);
        bytes[offsets[150] + bit / 8] ^= 1 << (bit % 8);
        write_segment(&dir.0, 1, &bytes);
        let (_, damage) = scan(&dir.0);
        assert_eq!(
            damage.map(|d| d.action),
            Some(Action::Refuse),
            "length bit {bit}"
        );
    }
}

/// A damaged length on the very last record, claiming more than was written: the checksum
/// matches under the record's true length, so it is damage, not a torn write.
#[test]
fn damaged_length_on_a_whole_last_record_is_refused() {
    let (mut bytes, offsets) = segment(1, 10);
    bytes[offsets[9] + 1] ^= 1; // +256 bytes
    let dir = TempDir::new("lastlen");
    write_segment(&dir.0, 1, &bytes);
    let (records, damage) = scan(&dir.0);
    assert_eq!(records, 9);
    assert_eq!(damage.map(|d| d.action), Some(Action::Refuse));
}

/// Issue 25, defect 9: a last frame whose length field holds random bytes (an impossible
/// length) with zeros after it is a torn write and is cut, as a torn tail is; it used to be
/// refused as "impossible length". With a valid frame after it, or written bytes after its
/// length, it is still refused.
#[test]
fn a_torn_impossible_length_at_the_end_is_cut_not_refused() {
    let (bytes, offsets) = segment(1, 10);
    let last = offsets[9];
    let dir = TempDir::new("tornlen");
    for garbage in [
        [0xff, 0xff, 0xff, 0xff],
        [0x9c, 0x3e, 0x51, 0xd7],
        [0x01, 0x00, 0x00, 0x80],
    ] {
        let mut b = bytes.clone();
        for x in &mut b[last..] {
            *x = 0;
        }
        b[last..last + 4].copy_from_slice(&garbage);
        write_segment(&dir.0, 1, &b);
        let (records, damage) = scan(&dir.0);
        assert_eq!(records, 9, "{garbage:?}");
        assert_eq!(
            damage.map(|d| d.action),
            Some(Action::CutTail),
            "{garbage:?}"
        );
    }
    // Written bytes after the impossible length: damage, refused.
    let mut b = bytes.clone();
    b[last..last + 4].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    write_segment(&dir.0, 1, &b);
    assert_eq!(scan(&dir.0).1.map(|d| d.action), Some(Action::Refuse));
    // In the middle, with records after it: refused.
    let mut b = bytes.clone();
    b[offsets[5]..offsets[5] + 4].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    write_segment(&dir.0, 1, &b);
    assert_eq!(scan(&dir.0).1.map(|d| d.action), Some(Action::Refuse));
}

/// A true torn write (the last frame's first bytes only, zeros after) is still cut.
#[test]
fn a_true_torn_tail_is_still_cut() {
    let (mut bytes, offsets) = segment(1, 10);
    let last = offsets[9];
    let end = bytes.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    for b in &mut bytes[last + FRAME_HEADER_BYTES + 3..end] {
        *b = 0;
    }
    let dir = TempDir::new("torn");
    write_segment(&dir.0, 1, &bytes);
    let (records, damage) = scan(&dir.0);
    assert_eq!(records, 9);
    assert_eq!(damage.map(|d| d.action), Some(Action::CutTail));
    // And a segment cut short inside the frame's header.
    let mut short = bytes[..last + 10].to_vec();
    short.truncate(last + 10);
    write_segment(&dir.0, 1, &short);
    let (records, damage) = scan(&dir.0);
    assert_eq!(records, 9);
    assert_eq!(damage.map(|d| d.action), Some(Action::CutTail));
    assert!(SEGMENT_HEADER_BYTES < last);
}
