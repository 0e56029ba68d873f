//! FUNCTION LOAD, DELETE and FLUSH as state changes: what replay applies. Checking a library
//! (running its code to see what it registers) needs Lua and happens in the executor before a
//! load is applied and logged; here a library is stored under the name its first line gives.

use super::args::is;
use super::Ctx;
use crate::reply::Reply;

/// `#!lua name=<library>` on the first line: the library's name and where its code starts (at
/// the line feed, so line numbers stay the user's).
pub fn library_header(code: &[u8]) -> Result<(String, usize), Reply> {
    if !code.starts_with(b"#!") {
        return Err(Reply::err("ERR Missing library metadata"));
    }
    let end = code.iter().position(|&b| b == b'\n').unwrap_or(code.len());
    let line = String::from_utf8_lossy(&code[2..end]);
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if engine != "lua" {
        return Err(Reply::Error(format!("ERR Engine '{engine}' not found")));
    }
    let mut name = None;
    for p in parts {
        match p.strip_prefix("name=") {
            Some(n) => name = Some(n.to_string()),
            None => {
                return Err(Reply::Error(format!(
                    "ERR Invalid metadata value given: {p}"
                )))
            }
        }
    }
    let Some(name) = name else {
        return Err(Reply::err("ERR Library name was not given"));
    };
    if !valid_name(&name) {
        return Err(Reply::err(
            "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
        ));
    }
    Ok((name, end))
}

/// Library and function names: letters, digits and `_`, at least one.
pub fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

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
