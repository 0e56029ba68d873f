//! Replies as a RESP connection reads them: RESP2, or RESP3 after `HELLO 3`, where a
//! command's reply takes the type Redis 7 gives it (a map for HGETALL and CONFIG GET, a set
//! for SMEMBERS, a double for ZSCORE, member-score pairs for WITHSCORES, one null).

use crate::reply::{Reply, Resp3};

/// What shape a command's reply takes in RESP3, beyond the RESP2 one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Plain,
    /// A flat array of pairs, as a map.
    Map,
    /// An array, as a set.
    Set,
    /// A bulk string holding a number, as a double.
    Double,
    /// An array of bulk strings holding numbers (or nils), as doubles.
    Doubles,
    /// A flat array `member, score, ...`, as pairs `[member, double]`.
    ScorePairs,
    /// `[key, member, score]`, the score as a double (BZPOPMIN).
    KeyMemberScore,
    /// `[member, score]`, the score as a double (ZPOPMIN without a count).
    MemberScore,
    /// A flat array `field, value, ...`, as pairs `[field, value]` (HRANDFIELD WITHVALUES).
    Pairs,
    /// An array of `[key, value]` pairs, as a map (XREAD, XREADGROUP).
    KeyedMap,
    /// An array of `[longitude, latitude]` or nil, as doubles (GEOPOS).
    Positions,
    /// XINFO STREAM's flat pairs as a map; with FULL, its `groups` an array of maps and each
    /// group's `consumers` too.
    XinfoStream,
    /// An array of flat pairs, as an array of maps (XINFO GROUPS, XINFO CONSUMERS).
    Maps,
}

/// The RESP3 shape of `args`' reply.
pub fn shape(args: &[Vec<u8>]) -> Shape {
    let Some(name) = args.first() else {
        return Shape::Plain;
    };
    let name = name.to_ascii_lowercase();
    let has = |w: &str| {
        args.iter()
            .skip(1)
            .any(|a| a.eq_ignore_ascii_case(w.as_bytes()))
    };
    match name.as_slice() {
        b"hgetall" => Shape::Map,
        b"config" if args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"get")) => Shape::Map,
        b"smembers" | b"sinter" | b"sunion" | b"sdiff" => Shape::Set,
        b"zscore" | b"zincrby" => Shape::Double,
        b"zadd" if has("incr") => Shape::Double,
        b"zmscore" => Shape::Doubles,
        b"zrange" | b"zrangebyscore" | b"zrevrange" | b"zrevrangebyscore" | b"zrandmember"
        | b"zunion" | b"zinter" | b"zdiff"
            if has("withscores") =>
        {
            Shape::ScorePairs
        }
        b"zpopmin" | b"zpopmax" if args.len() > 2 => Shape::ScorePairs,
        b"zpopmin" | b"zpopmax" => Shape::MemberScore,
        b"hrandfield" if has("withvalues") => Shape::Pairs,
        b"xread" | b"xreadgroup" => Shape::KeyedMap,
        b"spop" if args.len() > 2 => Shape::Set,
        b"geopos" => Shape::Positions,
        b"geodist" => Shape::Double,
        b"bzpopmin" | b"bzpopmax" => Shape::KeyMemberScore,
        b"xinfo" => match args.get(1).map(|a| a.to_ascii_lowercase()).as_deref() {
            Some(b"stream") => Shape::XinfoStream,
            Some(b"groups" | b"consumers") => Shape::Maps,
            _ => Shape::Plain,
        },
        _ => Shape::Plain,
    }
}

/// Writes `r` in RESP2, or in RESP3 with the shape of its command.
pub fn reply(out: &mut Vec<u8>, r: &Reply, resp3: bool, shape: Shape) {
    if !resp3 {
        r.write_resp2(out);
        return;
    }
    match (shape, r) {
        (_, Reply::Error(_)) => r.write_resp2(out),
        (Shape::Map, Reply::Array(items)) if items.len() % 2 == 0 => {
            head(out, b'%', items.len() / 2);
            for i in items {
                plain3(out, i);
            }
        }
        (Shape::Set, Reply::Array(items)) => {
            head(out, b'~', items.len());
            for i in items {
                plain3(out, i);
            }
        }
        (Shape::Double, r) => number(out, r),
        (Shape::Doubles, Reply::Array(items)) => {
            head(out, b'*', items.len());
            for i in items {
                number(out, i);
            }
        }
        (Shape::ScorePairs | Shape::Pairs, Reply::Array(items)) if items.len() % 2 == 0 => {
            head(out, b'*', items.len() / 2);
            for pair in items.chunks(2) {
                head(out, b'*', 2);
                plain3(out, &pair[0]);
                if shape == Shape::ScorePairs {
                    number(out, &pair[1]);
                } else {
                    plain3(out, &pair[1]);
                }
            }
        }
        (Shape::MemberScore, Reply::Array(items)) if items.len() == 2 => {
            head(out, b'*', 2);
            plain3(out, &items[0]);
            number(out, &items[1]);
        }
        (Shape::KeyedMap, Reply::Array(items))
            if items
                .iter()
                .all(|i| matches!(i, Reply::Array(kv) if kv.len() == 2)) =>
        {
            head(out, b'%', items.len());
            for i in items {
                if let Reply::Array(kv) = i {
                    plain3(out, &kv[0]);
                    plain3(out, &kv[1]);
                }
            }
        }
        (Shape::Positions, Reply::Array(items)) => {
            head(out, b'*', items.len());
            for i in items {
                match i {
                    Reply::Array(ll) => {
                        head(out, b'*', ll.len());
                        for c in ll {
                            number(out, c);
                        }
                    }
                    other => plain3(out, other),
                }
            }
        }
        (Shape::KeyMemberScore, Reply::Array(items)) if items.len() == 3 => {
            head(out, b'*', 3);
            plain3(out, &items[0]);
            plain3(out, &items[1]);
            number(out, &items[2]);
        }
        (Shape::XinfoStream, Reply::Array(items)) if items.len() % 2 == 0 => {
            info_map(out, items, Level::Stream)
        }
        (Shape::Maps, Reply::Array(items)) => info_maps(out, items, Level::Leaf),
        _ => plain3(out, r),
    }
}

/// Where an XINFO map stands: the stream's own (whose `groups` holds maps), a group's in
/// XINFO STREAM FULL (whose `consumers` holds maps), or one whose values are plain. Three
/// fixed levels, so the writing never recurses further whatever the reply holds.
#[derive(Clone, Copy)]
enum Level {
    Stream,
    Group,
    Leaf,
}

/// Flat `name, value` pairs as a RESP3 map.
fn info_map(out: &mut Vec<u8>, items: &[Reply], level: Level) {
    head(out, b'%', items.len() / 2);
    for pair in items.chunks(2) {
        plain3(out, &pair[0]);
        let inner = match (level, &pair[0]) {
            (Level::Stream, Reply::Bulk(k)) if k == b"groups" => Some(Level::Group),
            (Level::Group, Reply::Bulk(k)) if k == b"consumers" => Some(Level::Leaf),
            _ => None,
        };
        match (inner, &pair[1]) {
            (Some(l), Reply::Array(maps)) => info_maps(out, maps, l),
            (_, v) => plain3(out, v),
        }
    }
}

/// An array of flat pairs as an array of RESP3 maps.
fn info_maps(out: &mut Vec<u8>, items: &[Reply], level: Level) {
    head(out, b'*', items.len());
    for i in items {
        match i {
            Reply::Array(pairs) if pairs.len() % 2 == 0 => info_map(out, pairs, level),
            other => plain3(out, other),
        }
    }
}

/// RESP3 with no shape of its own: RESP2's, with one null, and the types a reply carries
/// (a script's).
fn plain3(out: &mut Vec<u8>, r: &Reply) {
    match r {
        Reply::Nil | Reply::NilArray => out.extend_from_slice(b"_\r\n"),
        Reply::Array(items) => {
            head(out, b'*', items.len());
            for i in items {
                plain3(out, i);
            }
        }
        Reply::Typed(t) => match (&t.0, &t.1) {
            (Resp3::Map, Reply::Array(items)) if items.len() % 2 == 0 => {
                head(out, b'%', items.len() / 2);
                for i in items {
                    plain3(out, i);
                }
            }
            (Resp3::Set, Reply::Array(items)) => {
                head(out, b'~', items.len());
                for i in items {
                    plain3(out, i);
                }
            }
            (Resp3::Double, Reply::Bulk(b)) => double(out, b),
            (Resp3::BigNumber, Reply::Bulk(b)) => {
                out.push(b'(');
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            (Resp3::Verbatim(format), Reply::Bulk(b)) => {
                head(out, b'=', b.len() + 4);
                out.extend_from_slice(format);
                out.push(b':');
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            (_, inner) => plain3(out, inner),
        },
        other => other.write_resp2(out),
    }
}

fn head(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A number's bulk string as a RESP3 double; anything else (a nil) as it is.
fn number(out: &mut Vec<u8>, r: &Reply) {
    match r {
        Reply::Bulk(b) => double(out, b),
        other => plain3(out, other),
    }
}

/// A RESP3 double from a score's text (`inf`, `-inf` as RESP3 spells them).
fn double(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b',');
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

/// A map reply written in RESP2 as a flat array, in RESP3 as a map (HELLO's).
pub fn map(out: &mut Vec<u8>, pairs: &[(&str, Reply)], resp3: bool) {
    head(
        out,
        if resp3 { b'%' } else { b'*' },
        pairs.len() * if resp3 { 1 } else { 2 },
    );
    for (k, v) in pairs {
        Reply::bulk(k.as_bytes()).write_resp2(out);
        if resp3 {
            plain3(out, v);
        } else {
            v.write_resp2(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(r: &Reply, resp3: bool, args: &[&str]) -> String {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let mut out = Vec::new();
        reply(&mut out, r, resp3, shape(&args));
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn resp3_gives_each_reply_its_type() {
        let pairs = Reply::bulks(["f", "v"]);
        assert_eq!(
            w(&pairs, false, &["HGETALL", "h"]),
            "*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        );
        assert_eq!(
            w(&pairs, true, &["HGETALL", "h"]),
            "%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
        );
        assert_eq!(w(&Reply::Nil, true, &["GET", "k"]), "_\r\n");
        assert_eq!(w(&Reply::NilArray, true, &["BLPOP", "k", "1"]), "_\r\n");
        assert_eq!(
            w(&Reply::bulk("1.5"), true, &["ZSCORE", "z", "m"]),
            ",1.5\r\n"
        );
        assert_eq!(
            w(
                &Reply::bulks(["a", "1"]),
                true,
                &["ZRANGE", "z", "0", "-1", "WITHSCORES"]
            ),
            "*1\r\n*2\r\n$1\r\na\r\n,1\r\n"
        );
        assert_eq!(
            w(&Reply::bulks(["a"]), true, &["SMEMBERS", "s"]),
            "~1\r\n$1\r\na\r\n"
        );
        assert_eq!(
            w(&Reply::err("ERR x"), true, &["HGETALL", "h"]),
            "-ERR x\r\n"
        );
        assert_eq!(
            w(&Reply::bulks(["b", "2"]), true, &["ZPOPMIN", "z"]),
            "*2\r\n$1\r\nb\r\n,2\r\n"
        );
        assert_eq!(
            w(
                &Reply::bulks(["f", "v"]),
                true,
                &["HRANDFIELD", "h", "1", "WITHVALUES"]
            ),
            "*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        );
        let read = Reply::Array(vec![Reply::Array(vec![
            Reply::bulk("s"),
            Reply::Array(vec![]),
        ])]);
        assert_eq!(
            w(&read, true, &["XREAD", "STREAMS", "s", "0"]),
            "%1\r\n$1\r\ns\r\n*0\r\n"
        );
        assert_eq!(
            w(&Reply::NilArray, true, &["XREAD", "STREAMS", "s", "0"]),
            "_\r\n"
        );
    }
}
