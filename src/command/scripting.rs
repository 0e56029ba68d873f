//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO, SCRIPT and the FUNCTION subcommands
//! that need the Lua engine (`crate::lua`). A script runs inside one command, so it is atomic;
//! its `redis.call`s go through the one pipeline (`Ctx::run_lua`) and it is logged by their
//! effects, as Redis 7 replicates scripts. Replay never runs Lua. The script cache is not
//! logged (Redis does not keep it across restarts either; clients answer NOSCRIPT with EVAL).

use super::args::{int_arg, is, tri};
use super::ctx::Ctx;
use super::functions;
use crate::glob::glob_match;
use crate::lua::Scripts;
use crate::reply::Reply;

/// What a script command says when there is no Lua engine to run it (during replay, which
/// never logs one, and inside a script, where the table refuses them first).
fn no_engine() -> Reply {
    Reply::err("ERR This Redis command is not allowed from script")
}

/// Where the keys of `EVAL/FCALL x numkeys key ... arg ...` end, with Redis's checks of
/// `numkeys` (`bad_count`: the error for a count that is no integer).
fn keys_end(a: &[Vec<u8>], bad_count: Reply) -> Result<usize, Reply> {
    let numkeys = int_arg(&a[2]).map_err(|_| bad_count)?;
    if numkeys > (a.len() - 3) as i64 {
        return Err(Reply::err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    if numkeys < 0 {
        return Err(Reply::err("ERR Number of keys can't be negative"));
    }
    Ok(3 + numkeys as usize)
}

/// `EVAL script numkeys key ... arg ...` and its SHA and read-only forms.
pub fn eval(ctx: &mut Ctx, a: &[Vec<u8>], by_sha: bool, read_only: bool) -> Reply {
    let not_integer = Reply::err(crate::reply::errors::NOT_INTEGER);
    let split = tri!(keys_end(a, not_integer));
    with_engine(ctx, |scripts, ctx| {
        let sha = if by_sha {
            String::from_utf8_lossy(&a[1]).to_ascii_lowercase()
        } else {
            tri!(scripts.load(&a[1]))
        };
        ctx.run_lua(|call| scripts.run(&sha, &a[3..split], &a[split..], read_only, call))
    })
}

/// `FCALL function numkeys key ... arg ...` and FCALL_RO.
pub fn fcall(ctx: &mut Ctx, a: &[Vec<u8>], read_only: bool) -> Reply {
    let split = tri!(keys_end(a, Reply::err("ERR Bad number of keys provided")));
    with_engine(ctx, |scripts, ctx| {
        scripts.sync(ctx.db);
        let function = String::from_utf8_lossy(&a[1]).into_owned();
        ctx.run_lua(|call| {
            scripts.call_function(&function, &a[3..split], &a[split..], read_only, call)
        })
    })
}

/// Runs `f` with the Lua engine, or answers that there is none.
fn with_engine(ctx: &mut Ctx, f: impl FnOnce(&mut Scripts, &mut Ctx) -> Reply) -> Reply {
    let Some(scripts) = ctx.scripts.take() else {
        return no_engine();
    };
    let reply = f(scripts, ctx);
    ctx.scripts = Some(scripts);
    reply
}

pub fn script_load(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    with_engine(ctx, |s, _| match s.load(&a[2]) {
        Ok(sha) => Reply::Bulk(sha.into_bytes()),
        Err(e) => e,
    })
}

pub fn script_exists(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    with_engine(ctx, |s, _| {
        Reply::Array(
            a[2..]
                .iter()
                .map(|sha| Reply::Int(s.exists(sha) as i64))
                .collect(),
        )
    })
}

pub fn script_flush(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    match a.get(2) {
        Some(m) if !is(m, "sync") && !is(m, "async") => {
            Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
        }
        _ => with_engine(ctx, |s, _| {
            s.flush();
            Reply::ok()
        }),
    }
}

/// SCRIPT KILL and FUNCTION KILL that reach the executor: a script runs to its end inside one
/// command, so when one is being answered here none runs (while one runs, the HTTP side
/// answers them through `lua::ScriptControl`).
pub fn kill() -> Reply {
    Reply::err("NOTBUSY No scripts in execution right now.")
}

/// `FUNCTION LOAD`: checked with Lua (the library must load and register functions, none of
/// them another library's), then stored and logged like any write. Replay only stores.
pub fn function_load(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    checked_then(ctx, a, check_function_load, functions::load)
}

/// `FUNCTION RESTORE`: checked as FUNCTION LOAD checks each library, then stored.
pub fn function_restore(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    checked_then(ctx, a, check_function_restore, functions::restore)
}

/// A check of FUNCTION LOAD's or RESTORE's libraries that needs the Lua engine.
type LibraryCheck = fn(&mut Scripts, &mut Ctx, &[Vec<u8>]) -> Result<(), Reply>;

/// Runs `check` with the Lua engine when there is one (not during replay, which only stores),
/// then `store`.
fn checked_then(
    ctx: &mut Ctx,
    a: &[Vec<u8>],
    check: LibraryCheck,
    store: fn(&mut Ctx, &[Vec<u8>]) -> Reply,
) -> Reply {
    if let Some(scripts) = ctx.scripts.take() {
        let checked = check(scripts, ctx, a);
        ctx.scripts = Some(scripts);
        if let Err(e) = checked {
            return e;
        }
    }
    store(ctx, a)
}

fn check_function_load(scripts: &mut Scripts, ctx: &mut Ctx, a: &[Vec<u8>]) -> Result<(), Reply> {
    scripts.sync(ctx.db);
    let (replace, code) = functions::load_args(a)?;
    let (name, _) = crate::lua::library_header(code)?;
    if !replace && ctx.db.functions().contains_key(&name) {
        return Err(Reply::Error(format!("ERR Library '{name}' already exists")));
    }
    let (_, defs) = scripts.check_library(code)?;
    refuse_taken_functions(scripts, defs.iter().map(|(f, _)| f), |lib| lib != name)
}

/// FUNCTION RESTORE's checks, in Redis's order: the payload, each library as FUNCTION LOAD
/// checks it, then joining them to the libraries that stay (names and functions).
fn check_function_restore(
    scripts: &mut Scripts,
    ctx: &mut Ctx,
    a: &[Vec<u8>],
) -> Result<(), Reply> {
    use functions::RestorePolicy;
    scripts.sync(ctx.db);
    let (policy, libs) = functions::restore_args(a)?;
    let mut defined: Vec<String> = Vec::new();
    for (_, code) in &libs {
        let (_, defs) = scripts.check_library(code)?;
        for (fname, _) in defs {
            if defined.contains(&fname) {
                return Err(Reply::Error(format!("ERR Function {fname} already exists")));
            }
            defined.push(fname);
        }
    }
    if policy == RestorePolicy::Flush {
        return Ok(());
    }
    if let Some(e) = functions::append_clash(ctx.db, policy, &libs) {
        return Err(e);
    }
    // Libraries named in the payload are replaced (APPEND refused them above).
    refuse_taken_functions(scripts, defined.iter(), |lib| {
        !libs.iter().any(|(n, _)| n == lib)
    })
}

/// Refuses a function name that a library which stays (`stays(library)`) already owns.
fn refuse_taken_functions<'a>(
    scripts: &Scripts,
    names: impl Iterator<Item = &'a String>,
    stays: impl Fn(&str) -> bool,
) -> Result<(), Reply> {
    for fname in names {
        let taken = scripts
            .libraries
            .iter()
            .any(|(lib, (_, fns))| stays(lib) && fns.contains(fname));
        if taken {
            return Err(Reply::Error(format!("ERR Function {fname} already exists")));
        }
    }
    Ok(())
}

/// `FUNCTION STATS`.
pub fn function_stats(ctx: &mut Ctx) -> Reply {
    with_engine(ctx, |scripts, ctx| {
        scripts.sync(ctx.db);
        let fns: usize = scripts.libraries.values().map(|l| l.1.len()).sum();
        Reply::Array(vec![
            Reply::bulk("running_script"),
            Reply::Nil,
            Reply::bulk("engines"),
            Reply::Array(vec![
                Reply::bulk("LUA"),
                Reply::Array(vec![
                    Reply::bulk("libraries_count"),
                    Reply::Int(scripts.libraries.len() as i64),
                    Reply::bulk("functions_count"),
                    Reply::Int(fns as i64),
                ]),
            ]),
        ])
    })
}

/// `FUNCTION LIST [WITHCODE] [LIBRARYNAME pattern]`.
pub fn function_list(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let mut with_code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < a.len() {
        if is(&a[i], "withcode") {
            with_code = true;
        } else if is(&a[i], "libraryname") {
            let Some(p) = a.get(i + 1) else {
                return Reply::err("ERR library name argument was not given");
            };
            pattern = Some(p);
            i += 1;
        } else {
            return Reply::Error(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(&a[i])
            ));
        }
        i += 1;
    }
    with_engine(ctx, |scripts, ctx| {
        scripts.sync(ctx.db);
        let mut out = Vec::new();
        for (lib, (code, fns)) in &scripts.libraries {
            if pattern.is_some_and(|p| !glob_match(p, lib.as_bytes(), false)) {
                continue;
            }
            let functions = fns
                .iter()
                .filter_map(|f| scripts.function(f).map(|d| (f, d)))
                .map(|(f, d)| {
                    Reply::Array(vec![
                        Reply::bulk("name"),
                        Reply::bulk(f.as_str()),
                        Reply::bulk("description"),
                        d.description
                            .as_ref()
                            .map(|s| Reply::bulk(s.as_str()))
                            .unwrap_or(Reply::Nil),
                        Reply::bulk("flags"),
                        Reply::Array(
                            d.flags
                                .iter()
                                .map(|x| Reply::Status(x.clone().into()))
                                .collect(),
                        ),
                    ])
                })
                .collect();
            let mut entry = vec![
                Reply::bulk("library_name"),
                Reply::bulk(lib.as_str()),
                Reply::bulk("engine"),
                Reply::bulk("LUA"),
                Reply::bulk("functions"),
                Reply::Array(functions),
            ];
            if with_code {
                entry.push(Reply::bulk("library_code"));
                entry.push(Reply::Bulk(code.clone()));
            }
            out.push(Reply::Array(entry));
        }
        Reply::Array(out)
    })
}
