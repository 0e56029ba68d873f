//! ACL SETUSER, DELUSER, GETUSER, USERS, LIST, WHOAMI, CAT, GENPASS, and Upstash's ACL
//! RESTTOKEN and GENTOKEN.
//! The users live in `state::acl`; this file parses arguments and shapes replies.

use super::ctx::Ctx;
use super::info::CommandTable;
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

/// `ACL GENPASS [bits]`: random hex, one digit per four bits (256 bits by default).
pub fn genpass(args: &[Vec<u8>]) -> Reply {
    if args.len() > 3 {
        return Reply::Error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
            s(&args[1])
        ));
    }
    let bits = match args.get(2) {
        None => 256,
        Some(b) => match super::args::int_arg(b) {
            Ok(n) if (1..=4096).contains(&n) => n as usize,
            Ok(_) => {
                return Reply::err(
                    "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
                )
            }
            Err(e) => return e,
        },
    };
    let bytes = match crate::secret::random_bytes::<512>() {
        Ok(b) => b,
        Err(e) => return Reply::Error(format!("ERR {e}")),
    };
    let hex = crate::secret::hex(&bytes);
    Reply::bulk(&hex[..bits.div_ceil(4)])
}

/// The shortest password ACL GENTOKEN wraps, and the fewest different characters it needs:
/// a cheap floor on its entropy (the hosted service checks entropy with a rule of its own).
const GENTOKEN_PASSWORD_BYTES_MIN: usize = 16;
const GENTOKEN_PASSWORD_DISTINCT_MIN: usize = 8;

/// `ACL GENTOKEN user [password]` (Upstash's extension): a token to give the user as its
/// password (`ACL SETUSER user on >token ...`) and then to use as its REST token. Without a
/// password a strong one is generated; a given one must not be weak. Creates nothing.
pub fn gentoken(ctx: &mut Ctx, args: &[Vec<u8>]) -> Reply {
    let password = match args.get(3) {
        Some(p) => {
            let distinct = p.iter().collect::<std::collections::BTreeSet<_>>().len();
            if p.len() < GENTOKEN_PASSWORD_BYTES_MIN || distinct < GENTOKEN_PASSWORD_DISTINCT_MIN {
                return Reply::Error(format!(
                    "ERR password is too weak: use at least {GENTOKEN_PASSWORD_BYTES_MIN} characters, {GENTOKEN_PASSWORD_DISTINCT_MIN} of them different, or leave it out to have a strong one generated"
                ));
            }
            p.clone()
        }
        None => match crate::secret::random_bytes::<32>() {
            Ok(b) => crate::secret::hex(&b).into_bytes(),
            Err(e) => return Reply::Error(format!("ERR {e}")),
        },
    };
    Reply::bulk(ctx.db.acl.gen_token(&s(&args[2]), &password))
}

/// `ACL SETUSER name [rule ...]`: logged with passwords replaced by their hashes.
pub fn setuser(ctx: &mut Ctx, args: &[Vec<u8>], t: &CommandTable) -> Reply {
    let name = s(&args[2]);
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

pub fn cat(args: &[Vec<u8>], t: &CommandTable) -> Reply {
    match args.get(2) {
        None => Reply::bulks(CATEGORIES.iter().map(|c| c.as_bytes().to_vec())),
        Some(c) => {
            let c = s(c).to_ascii_lowercase();
            if !CATEGORIES.contains(&c.as_str()) {
                return Reply::Error(format!("ERR Unknown category '{c}'"));
            }
            let at = format!("@{c}");
            let mut names: Vec<Vec<u8>> = t
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
