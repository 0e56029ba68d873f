//! The RESP3 types of a command's reply: which shape its command gives it (a map for
//! HGETALL and CONFIG GET, a set for SMEMBERS, a double for ZSCORE, member-score pairs for
//! WITHSCORES), and the reply with those types, for a RESP3 connection's writer and for a
//! script after `redis.setresp(3)`.

use super::{Reply, Resp3};

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
    /// `[key, [[member, score], ...]]`, the scores as doubles (ZMPOP, BZMPOP).
    KeyScorePairs,
    /// GEOSEARCH's and GEORADIUS's items: each item's coordinates as doubles (WITHCOORD).
    GeoItems,
    /// A bulk string of text, as a verbatim string (`txt`): INFO.
    Verbatim,
}

/// The RESP3 shape of `args`' reply. An option is looked for only where the command takes
/// options, never among its keys, members or values (a key named `withscores` is a key).
pub fn shape(args: &[Vec<u8>]) -> Shape {
    let Some(name) = args.first() else {
        return Shape::Plain;
    };
    let name = name.to_ascii_lowercase();
    let from = |at: usize, w: &str| {
        args.iter()
            .skip(at)
            .any(|a| a.eq_ignore_ascii_case(w.as_bytes()))
    };
    // ZADD's options come before its first score; a member named INCR is a member.
    let zadd_incr = || {
        args.iter()
            .skip(2)
            .take_while(|a| {
                let a = a.to_ascii_lowercase();
                matches!(
                    a.as_slice(),
                    b"nx" | b"xx" | b"gt" | b"lt" | b"ch" | b"incr"
                )
            })
            .any(|a| a.eq_ignore_ascii_case(b"incr"))
    };
    // ZUNION, ZINTER, ZDIFF: numkeys, the keys, then the options.
    let after_keys = || {
        std::str::from_utf8(args.get(1).map_or(&[][..], |a| a))
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .map_or(usize::MAX, |n| n.saturating_add(2))
    };
    match name.as_slice() {
        b"hgetall" => Shape::Map,
        b"config" if args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"get")) => Shape::Map,
        b"smembers" | b"sinter" | b"sunion" | b"sdiff" => Shape::Set,
        b"zscore" | b"zincrby" => Shape::Double,
        b"zadd" if zadd_incr() => Shape::Double,
        b"zmscore" => Shape::Doubles,
        // key, start and stop (or min and max) first.
        b"zrange" | b"zrangebyscore" | b"zrevrange" | b"zrevrangebyscore"
            if from(4, "withscores") =>
        {
            Shape::ScorePairs
        }
        b"zrandmember" if args.len() == 4 && args[3].eq_ignore_ascii_case(b"withscores") => {
            Shape::ScorePairs
        }
        b"zunion" | b"zinter" | b"zdiff" if from(after_keys(), "withscores") => Shape::ScorePairs,
        b"zpopmin" | b"zpopmax" if args.len() > 2 => Shape::ScorePairs,
        b"zpopmin" | b"zpopmax" => Shape::MemberScore,
        b"hrandfield" if args.len() == 4 && args[3].eq_ignore_ascii_case(b"withvalues") => {
            Shape::Pairs
        }
        b"xread" | b"xreadgroup" => Shape::KeyedMap,
        b"spop" if args.len() > 2 => Shape::Set,
        b"geopos" => Shape::Positions,
        b"bzpopmin" | b"bzpopmax" => Shape::KeyMemberScore,
        b"zmpop" | b"bzmpop" => Shape::KeyScorePairs,
        b"geosearch"
        | b"georadius"
        | b"georadius_ro"
        | b"georadiusbymember"
        | b"georadiusbymember_ro"
            if from(2, "withcoord") =>
        {
            Shape::GeoItems
        }
        // LCS key1 key2 [LEN] [IDX] ...: a map of the matches and the length.
        b"lcs" if from(3, "idx") => Shape::Map,
        b"info" => Shape::Verbatim,
        b"xinfo" => match args.get(1).map(|a| a.to_ascii_lowercase()).as_deref() {
            Some(b"stream") => Shape::XinfoStream,
            Some(b"groups" | b"consumers") => Shape::Maps,
            _ => Shape::Plain,
        },
        _ => Shape::Plain,
    }
}

fn tag(kind: Resp3, resp2: Reply) -> Reply {
    Reply::Typed(Box::new((kind, resp2)))
}

/// A number's bulk string as a double; anything else (a nil) as it is.
fn as_double(r: &Reply) -> Reply {
    match r {
        Reply::Bulk(_) => tag(Resp3::Double, r.clone()),
        other => other.clone(),
    }
}

/// `r` with the RESP3 types of its command's shape, for a RESP3 connection and for a script
/// after `redis.setresp(3)`. A reply whose form does not fit the shape (an error, a nil)
/// stays as it is.
pub fn typed(r: &Reply, shape: Shape) -> std::borrow::Cow<'_, Reply> {
    use std::borrow::Cow;
    let pairs = |items: &[Reply], second: fn(&Reply) -> Reply| -> Reply {
        Reply::Array(
            items
                .chunks(2)
                .map(|p| Reply::Array(vec![p[0].clone(), second(&p[1])]))
                .collect(),
        )
    };
    Cow::Owned(match (shape, r) {
        (Shape::Plain, _) | (_, Reply::Error(_)) => return Cow::Borrowed(r),
        (Shape::Map, Reply::Array(items)) if items.len() % 2 == 0 => tag(Resp3::Map, r.clone()),
        (Shape::Set, Reply::Array(_)) => tag(Resp3::Set, r.clone()),
        (Shape::Double, r) => as_double(r),
        (Shape::Doubles, Reply::Array(items)) => {
            Reply::Array(items.iter().map(as_double).collect())
        }
        (Shape::ScorePairs, Reply::Array(items)) if items.len() % 2 == 0 => pairs(items, as_double),
        (Shape::Pairs, Reply::Array(items)) if items.len() % 2 == 0 => pairs(items, Reply::clone),
        (Shape::MemberScore, Reply::Array(items)) if items.len() == 2 => {
            Reply::Array(vec![items[0].clone(), as_double(&items[1])])
        }
        (Shape::KeyMemberScore, Reply::Array(items)) if items.len() == 3 => Reply::Array(vec![
            items[0].clone(),
            items[1].clone(),
            as_double(&items[2]),
        ]),
        (Shape::KeyedMap, Reply::Array(items))
            if items
                .iter()
                .all(|i| matches!(i, Reply::Array(kv) if kv.len() == 2)) =>
        {
            let flat = items
                .iter()
                .flat_map(|i| match i {
                    Reply::Array(kv) => kv.clone(),
                    other => vec![other.clone()],
                })
                .collect();
            tag(Resp3::Map, Reply::Array(flat))
        }
        (Shape::Positions, Reply::Array(items)) => Reply::Array(
            items
                .iter()
                .map(|i| match i {
                    Reply::Array(ll) => Reply::Array(ll.iter().map(as_double).collect()),
                    other => other.clone(),
                })
                .collect(),
        ),
        (Shape::XinfoStream, Reply::Array(items)) if items.len() % 2 == 0 => {
            info_map(items, Level::Stream)
        }
        (Shape::Maps, Reply::Array(items)) => info_maps(items, Level::Leaf),
        (Shape::KeyScorePairs, Reply::Array(items)) if items.len() == 2 => match &items[1] {
            Reply::Array(pairs) => Reply::Array(vec![
                items[0].clone(),
                Reply::Array(
                    pairs
                        .iter()
                        .map(|p| match p {
                            Reply::Array(ms) if ms.len() == 2 => {
                                Reply::Array(vec![ms[0].clone(), as_double(&ms[1])])
                            }
                            other => other.clone(),
                        })
                        .collect(),
                ),
            ]),
            _ => return Cow::Borrowed(r),
        },
        (Shape::GeoItems, Reply::Array(items)) => Reply::Array(
            items
                .iter()
                .map(|i| match i {
                    Reply::Array(parts) => Reply::Array(
                        parts
                            .iter()
                            .map(|p| match p {
                                Reply::Array(ll) if ll.len() == 2 => {
                                    Reply::Array(ll.iter().map(as_double).collect())
                                }
                                other => other.clone(),
                            })
                            .collect(),
                    ),
                    other => other.clone(),
                })
                .collect(),
        ),
        (Shape::Verbatim, Reply::Bulk(_)) => tag(Resp3::Verbatim(*b"txt"), r.clone()),
        _ => return Cow::Borrowed(r),
    })
}

/// Where an XINFO map stands: the stream's own (whose `groups` holds maps), a group's in
/// XINFO STREAM FULL (whose `consumers` holds maps), or one whose values are plain. Three
/// fixed levels, so the conversion never recurses further whatever the reply holds.
#[derive(Clone, Copy)]
enum Level {
    Stream,
    Group,
    Leaf,
}

/// Flat `name, value` pairs as a map.
fn info_map(items: &[Reply], level: Level) -> Reply {
    let mut flat = Vec::with_capacity(items.len());
    for pair in items.chunks(2) {
        flat.push(pair[0].clone());
        let inner = match (level, &pair[0]) {
            (Level::Stream, Reply::Bulk(k)) if k == b"groups" => Some(Level::Group),
            (Level::Group, Reply::Bulk(k)) if k == b"consumers" => Some(Level::Leaf),
            _ => None,
        };
        flat.push(match (inner, pair.get(1)) {
            (Some(l), Some(Reply::Array(maps))) => info_maps(maps, l),
            (_, v) => v.cloned().unwrap_or(Reply::Nil),
        });
    }
    tag(Resp3::Map, Reply::Array(flat))
}

/// An array of flat pairs as an array of maps.
fn info_maps(items: &[Reply], level: Level) -> Reply {
    Reply::Array(
        items
            .iter()
            .map(|i| match i {
                Reply::Array(pairs) if pairs.len() % 2 == 0 => info_map(pairs, level),
                other => other.clone(),
            })
            .collect(),
    )
}
