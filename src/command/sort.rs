//! SORT and SORT_RO, following Redis 7's `sortCommandGeneric`: option parsing, BY and GET
//! patterns (`*` substitution, `->field` hash lookups, `#`), LIMIT arithmetic, numeric and
//! ALPHA comparison, and STORE into a list.

use super::args::tri;
use super::args::{int_arg, is};
use super::ctx::Ctx;
use crate::reply::{errors, Reply};
use crate::state::{Db, Value};
use std::cmp::Ordering;
use std::collections::VecDeque;

/// What a BY or GET pattern finds for one element, as Redis's `lookupKeyByPattern`.
fn lookup(db: &Db, now: u64, pattern: &[u8], elem: &[u8]) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(elem.to_vec());
    }
    let star = pattern.iter().position(|&b| b == b'*')?;
    let after = &pattern[star + 1..];
    let (post, field) = match after.windows(2).position(|w| w == b"->") {
        Some(i) if i + 2 < after.len() => (&after[..i], Some(&after[i + 2..])),
        _ => (after, None),
    };
    let mut key = pattern[..star].to_vec();
    key.extend_from_slice(elem);
    key.extend_from_slice(post);
    match (&db.get(&key, now)?.value, field) {
        // A field whose time has passed is gone, even before the expiry cycle removes it.
        (Value::Hash(h), Some(f)) if h.ttl(f).is_none_or(|t| t > now) => {
            h.get(f).map(<[u8]>::to_vec)
        }
        (Value::Str(s), None) => Some(crate::state::Str::into_vec(s.clone())),
        _ => None,
    }
}

/// `strtod` as SORT uses it: leading spaces allowed, the whole rest must be a number, an empty
/// string is 0, NaN is an error.
fn sort_score(b: &[u8]) -> Option<f64> {
    // strtod reads a C string: a NUL byte ends it.
    let b = match b.iter().position(|&c| c == 0) {
        Some(i) => &b[..i],
        None => b,
    };
    let s = std::str::from_utf8(b).ok()?;
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    if t.is_empty() {
        return Some(0.0);
    }
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if body.starts_with("nan") {
        return None;
    }
    let v = if let Some(hex) = body.strip_prefix("0x") {
        let n = u64::from_str_radix(hex, 16).ok()? as f64;
        if lower.starts_with('-') {
            -n
        } else {
            n
        }
    } else {
        lower.parse::<f64>().ok()?
    };
    if v.is_infinite() && !body.starts_with("inf") {
        return None; // ERANGE
    }
    Some(v)
}

struct Item {
    elem: Vec<u8>,
    score: f64,
    cmp: Option<Vec<u8>>,
}

pub fn sort(ctx: &mut Ctx, a: &[Vec<u8>], readonly: bool) -> Reply {
    let (mut desc, mut alpha) = (false, false);
    let (mut limit_start, mut limit_count) = (0i64, -1i64);
    let mut store: Option<Vec<u8>> = None;
    let mut by: Option<Vec<u8>> = None;
    let mut dontsort = false;
    let mut gets: Vec<Vec<u8>> = Vec::new();
    // BY and GET patterns name keys no key check sees: as in Redis, only a user who may read
    // every key may use them.
    let full_key_access = match ctx.user() {
        None => true,
        Some(name) => ctx
            .db
            .acl
            .users
            .get(name)
            .is_some_and(|u| u.key_allowed(b"*", true, false)),
    };
    let mut j = 2;
    while j < a.len() {
        let left = a.len() - j - 1;
        if is(&a[j], "asc") {
            desc = false;
        } else if is(&a[j], "desc") {
            desc = true;
        } else if is(&a[j], "alpha") {
            alpha = true;
        } else if is(&a[j], "limit") && left >= 2 {
            limit_start = tri!(int_arg(&a[j + 1]));
            limit_count = tri!(int_arg(&a[j + 2]));
            j += 2;
        } else if !readonly && is(&a[j], "store") && left >= 1 {
            store = Some(a[j + 1].clone());
            j += 1;
        } else if is(&a[j], "by") && left >= 1 {
            dontsort = !a[j + 1].contains(&b'*');
            if !dontsort && !full_key_access {
                return Reply::err(
                    "ERR BY option of SORT denied due to insufficient ACL permissions.",
                );
            }
            by = Some(a[j + 1].clone());
            j += 1;
        } else if is(&a[j], "get") && left >= 1 {
            if !full_key_access {
                return Reply::err(
                    "ERR GET option of SORT denied due to insufficient ACL permissions.",
                );
            }
            gets.push(a[j + 1].clone());
            j += 1;
        } else {
            return Reply::err(errors::SYNTAX);
        }
        j += 1;
    }
    let now = ctx.now_ms;
    let (elems, is_set): (Vec<Vec<u8>>, bool) = match ctx.db.get(&a[1], now).map(|e| &e.value) {
        None => (Vec::new(), false),
        // Unsorted, a list keeps its own order, walked from the tail under DESC (as Redis).
        Some(Value::List(l)) if dontsort && desc => {
            (l.iter().rev().map(|v| v.to_vec()).collect(), false)
        }
        Some(Value::List(l)) => (l.iter().map(|v| v.to_vec()).collect(), false),
        // A sorted set's own order is by score; DESC walks it from the top.
        Some(Value::ZSet(z)) if dontsort && desc => {
            (z.iter().rev().map(|(m, _)| m.to_vec()).collect(), false)
        }
        Some(Value::ZSet(z)) => (z.iter().map(|(m, _)| m.to_vec()).collect(), false),
        Some(Value::Set(s)) => (s.keys().map(<[u8]>::to_vec).collect(), true),
        Some(_) => return Reply::err(errors::WRONGTYPE),
    };
    if dontsort && is_set && store.is_some() {
        // A set has no order of its own: a stored result is sorted so that it replicates the same.
        dontsort = false;
        alpha = true;
        by = None;
    }
    let len = elems.len() as i64;
    let mut start = limit_start.max(0);
    let mut end = if limit_count < 0 {
        len - 1
    } else {
        start.saturating_add(limit_count) - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    let mut items: Vec<Item> = elems
        .into_iter()
        .map(|elem| Item {
            elem,
            score: 0.0,
            cmp: None,
        })
        .collect();
    let mut conversion_error = false;
    if !dontsort {
        for it in items.iter_mut() {
            let byval = match &by {
                Some(p) => match lookup(ctx.db, now, p, &it.elem) {
                    Some(v) => v,
                    None => continue,
                },
                None => it.elem.clone(),
            };
            if alpha {
                if by.is_some() {
                    it.cmp = Some(byval);
                }
            } else {
                match sort_score(&byval) {
                    Some(s) => it.score = s,
                    None => conversion_error = true,
                }
            }
        }
        let by_pattern = by.is_some();
        items.sort_by(|x, y| {
            let c = if !alpha {
                x.score
                    .partial_cmp(&y.score)
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| x.elem.cmp(&y.elem))
            } else if by_pattern {
                match (&x.cmp, &y.cmp) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(p), Some(q)) => cstr(p).cmp(cstr(q)),
                }
            } else {
                x.elem.cmp(&y.elem)
            };
            if desc {
                c.reverse()
            } else {
                c
            }
        });
    }
    if conversion_error {
        return Reply::err("ERR One or more scores can't be converted into double");
    }
    let selected: &[Item] = if start <= end && start >= 0 {
        &items[start as usize..=end as usize]
    } else {
        &[]
    };
    let mut out: Vec<Option<Vec<u8>>> = Vec::new();
    for it in selected {
        if gets.is_empty() {
            out.push(Some(it.elem.clone()));
        }
        for g in &gets {
            out.push(lookup(ctx.db, now, g, &it.elem));
        }
    }
    match store {
        None => Reply::Array(
            out.into_iter()
                .map(|v| v.map(Reply::Bulk).unwrap_or(Reply::Nil))
                .collect(),
        ),
        Some(dst) => {
            let n = out.len();
            let list: VecDeque<Vec<u8>> = out.into_iter().map(Option::unwrap_or_default).collect();
            ctx.store_or_delete(&dst, (n > 0).then_some(Value::List(list.into())));
            Reply::Int(n as i64)
        }
    }
}

/// `strcoll` in the C locale compares up to the first NUL byte.
fn cstr(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => &b[..i],
        None => b,
    }
}

/// SORT's own key finding (Redis's `sortGetKeys`): the key, and the last STORE's destination,
/// as SORT uses it.
pub fn sort_keys(args: &[Vec<u8>]) -> Vec<(usize, &'static [&'static str])> {
    keys_of(args, true)
}

/// SORT_RO's: the key alone (it takes no STORE).
pub fn sort_ro_keys(args: &[Vec<u8>]) -> Vec<(usize, &'static [&'static str])> {
    keys_of(args, false)
}

fn keys_of(args: &[Vec<u8>], stores: bool) -> Vec<(usize, &'static [&'static str])> {
    if args.len() < 2 {
        return Vec::new();
    }
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let a = args[i].to_ascii_lowercase();
        match a.as_slice() {
            b"limit" => i += 2,
            b"get" | b"by" => i += 1,
            b"store" if stores && i + 1 < args.len() => store = Some(i + 1),
            _ => {}
        }
        i += 1;
    }
    let mut out: Vec<(usize, &'static [&'static str])> = vec![(1, &["RO", "access"])];
    out.extend(store.map(|i| (i, &["OW", "update"][..])));
    out
}
