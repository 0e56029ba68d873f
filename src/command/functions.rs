//! FUNCTION LOAD, DELETE and FLUSH as state changes: what replay applies. Checking a library
//! (running its code to see what it registers) needs Lua and happens in the executor before a
//! load is applied and logged; here a library is stored under the name its first line gives.

use super::args::is;
use super::ctx::Ctx;
use crate::lua::library_header;
use crate::reply::Reply;
use crate::state::Db;

/// `FUNCTION LOAD [REPLACE] code`: the REPLACE flag and the code.
pub fn load_args(a: &[Vec<u8>]) -> Result<(bool, &[u8]), Reply> {
    let mut replace = false;
    for opt in &a[2..a.len() - 1] {
        if is(opt, "replace") {
            replace = true;
        } else {
            return Err(Reply::Error(format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    Ok((replace, &a[a.len() - 1]))
}

/// Stores a library (checked by the executor already when live).
pub fn load(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (replace, code) = match load_args(a) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let (name, _) = match library_header(code) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if !replace && ctx.db.functions().contains_key(&name) {
        return Reply::Error(format!("ERR Library '{name}' already exists"));
    }
    ctx.db.set_function_library(&name, code.to_vec());
    ctx.dirty = true;
    Reply::Bulk(name.into_bytes())
}

pub fn delete(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let name = String::from_utf8_lossy(&a[2]);
    if !ctx.db.functions().contains_key(name.as_ref()) {
        return Reply::err("ERR Library not found");
    }
    ctx.db.delete_function_library(&name);
    ctx.dirty = true;
    Reply::ok()
}

pub fn flush(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() > 3 || a.get(2).is_some_and(|m| !is(m, "sync") && !is(m, "async")) {
        return Reply::err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
    }
    ctx.db.flush_function_libraries();
    ctx.dirty = true;
    Reply::ok()
}

/// `FUNCTION DUMP`: every library's code in Redis's payload format.
pub fn dump(ctx: &mut Ctx) -> Reply {
    Reply::Bulk(crate::rdb::dump_functions(
        ctx.db.functions().values().map(Vec::as_slice),
    ))
}

/// A library's name and code.
pub type Library = (String, Vec<u8>);

/// How FUNCTION RESTORE joins the payload's libraries to the existing ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePolicy {
    Append,
    Replace,
    Flush,
}

/// `FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]`: the policy and each library's name and
/// code, with Redis's errors for the arguments, the payload and library names (what needs
/// Lua, the executor checks).
pub fn restore_args(a: &[Vec<u8>]) -> Result<(RestorePolicy, Vec<Library>), Reply> {
    if a.len() > 4 {
        // Redis names the subcommand as it was sent.
        return Err(Reply::Error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
            String::from_utf8_lossy(&a[1])
        )));
    }
    let policy =
        match a.get(3) {
            None => RestorePolicy::Append,
            Some(p) if is(p, "append") => RestorePolicy::Append,
            Some(p) if is(p, "replace") => RestorePolicy::Replace,
            Some(p) if is(p, "flush") => RestorePolicy::Flush,
            Some(_) => return Err(Reply::err(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            )),
        };
    let codes = crate::rdb::restore_functions(&a[2]).map_err(Reply::err)?;
    let mut libs: Vec<Library> = Vec::with_capacity(codes.len());
    for code in codes {
        let (name, _) = library_header(&code)?;
        if libs.iter().any(|(n, _)| *n == name) {
            return Err(Reply::Error(format!("ERR Library '{name}' already exists")));
        }
        libs.push((name, code));
    }
    Ok((policy, libs))
}

/// APPEND refuses a library that exists already (this text of Redis's has no quotes).
pub fn append_clash(db: &Db, policy: RestorePolicy, libs: &[Library]) -> Option<Reply> {
    if policy != RestorePolicy::Append {
        return None;
    }
    let (name, _) = libs.iter().find(|(n, _)| db.functions().contains_key(n))?;
    Some(Reply::Error(format!("ERR Library {name} already exists")))
}

/// Applies FUNCTION RESTORE (checked by the executor already) and logs it as FUNCTION FLUSH and
/// FUNCTION LOAD [REPLACE] commands, which replay without the payload format.
pub fn restore(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let (policy, libs) = match restore_args(a) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if let Some(e) = append_clash(ctx.db, policy, &libs) {
        return e;
    }
    if policy == RestorePolicy::Flush {
        ctx.db.flush_function_libraries();
        ctx.log_as(vec![b"FUNCTION".to_vec(), b"FLUSH".to_vec()]);
    }
    for (name, code) in libs {
        let mut cmd = vec![b"FUNCTION".to_vec(), b"LOAD".to_vec()];
        if policy == RestorePolicy::Replace {
            cmd.push(b"REPLACE".to_vec());
        }
        cmd.push(code.clone());
        ctx.log_as(cmd);
        ctx.db.set_function_library(&name, code);
    }
    ctx.dirty = true;
    Reply::ok()
}
