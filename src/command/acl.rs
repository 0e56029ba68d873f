//! ACL SETUSER, DELUSER, GETUSER, USERS, LIST, WHOAMI, CAT, and Upstash's ACL RESTTOKEN.
//! The users live in `state::acl`; this file parses arguments and shapes replies.

use super::{table, Ctx};
use crate::reply::Reply;

/// Redis's category order (ACL CAT), then `json`, which Redis lists last when RedisJSON is
/// loaded.
const CATEGORIES: [&str; 22] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
    "json",
];

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `ACL SETUSER name [rule ...]`: logged with passwords replaced by their hashes.
pub fn setuser(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let name = s(&args[2]);
    let t = table::global();
    let result = ctx.db.acl.set_user(
        &name,
        &args[3..],
        |cat| CATEGORIES.contains(&cat),
        |cmd| t.get(cmd).is_some(),
    );
    match result {
        Ok(logged) => {
            let mut cmd = vec![b"ACL".to_vec(), b"SETUSER".to_vec(), args[2].clone()];
            cmd.extend(logged);
            ctx.log_as(cmd);
            ctx.dirty = true;
            Reply::ok()
        }
        Err(e) => Reply::Error(e),
    }
}

pub fn deluser(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    if args[2..].iter().any(|a| a.as_slice() == b"default") {
        return Reply::err("ERR The 'default' user cannot be removed");
    }
    let mut n = 0;
    for a in &args[2..] {
        if ctx.db.acl.del_user(&s(a)) {
            n += 1;
        }
    }
    if n > 0 {
        ctx.dirty = true;
    }
    Reply::Int(n)
}

pub fn users(ctx: &mut Ctx) -> Reply {
    Reply::bulks(ctx.db.acl.users.keys().map(|k| k.as_bytes().to_vec()))
}

pub fn list(ctx: &mut Ctx) -> Reply {
    Reply::bulks(
        ctx.db
            .acl
            .users
            .iter()
            .map(|(n, u)| u.describe(n).into_bytes()),
    )
}

pub fn getuser(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let Some(u) = ctx.db.acl.users.get(&s(&args[2])) else {
        return Reply::Nil;
    };
    let flags = u.flags();
    Reply::Array(vec![
        Reply::bulk("flags"),
        Reply::bulks(flags.into_iter().map(|f| f.as_bytes().to_vec())),
        Reply::bulk("passwords"),
        Reply::bulks(u.passwords.iter().map(|p| p.as_bytes().to_vec())),
        Reply::bulk("commands"),
        Reply::bulk(u.rules.join(" ")),
        Reply::bulk("keys"),
        Reply::bulk(u.keys_text().join(" ")),
        Reply::bulk("channels"),
        Reply::bulk(u.channels_text().join(" ")),
        Reply::bulk("selectors"),
        Reply::Array(Vec::new()),
    ])
}

pub fn whoami(ctx: &mut Ctx) -> Reply {
    Reply::bulk(ctx.user().unwrap_or("default"))
}

pub fn cat(args: &[Vec<u8>]) -> Reply {
    match args.get(2) {
        None => Reply::bulks(CATEGORIES.iter().map(|c| c.as_bytes().to_vec())),
        Some(c) => {
            let c = s(c).to_ascii_lowercase();
            if !CATEGORIES.contains(&c.as_str()) {
                return Reply::Error(format!("ERR Unknown category '{c}'"));
            }
            let at = format!("@{c}");
            let mut names: Vec<Vec<u8>> = table::global()
                .all()
                .filter(|i| i.categories.contains(&at))
                .map(|i| i.name.as_bytes().to_vec())
                .collect();
            names.sort();
            Reply::bulks(names)
        }
    }
}

pub fn resttoken(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    match ctx.db.acl.rest_token(&s(&args[2]), &args[3]) {
        Ok(t) => Reply::bulk(t),
        Err(e) => Reply::Error(e),
    }
}
