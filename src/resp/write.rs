//! Replies as a RESP connection reads them: RESP2, or RESP3 after `HELLO 3`, where a
//! command's reply takes the type Redis 7 gives it (a map for HGETALL and CONFIG GET, a set
//! for SMEMBERS, a double for ZSCORE, member-score pairs for WITHSCORES, one null).

use crate::reply::resp3::typed;
pub use crate::reply::resp3::{shape, Shape};
use crate::reply::{Reply, Resp3};

/// Writes `r` in RESP2, or in RESP3 with the shape of its command.
pub fn reply(out: &mut Vec<u8>, r: &Reply, resp3: bool, shape: Shape) {
    if resp3 {
        plain3(out, &typed(r, shape));
    } else {
        r.write_resp2(out);
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
            (Resp3::Bool, Reply::Int(n)) => {
                out.extend_from_slice(if *n != 0 { b"#t\r\n" } else { b"#f\r\n" })
            }
            (Resp3::BigNumber, Reply::Bulk(b)) => crate::reply::line(out, b'(', b),
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
