//! The `bit` and `cjson` libraries Redis gives its Lua scripts (LuaBitOp 1.0.2 and lua-cjson
//! 2.1.0), written in Rust against their C originals' rules. They are Rust (C) functions, as
//! in Redis, so `return cjson.encode(x)` is no Lua tail call and an error can name the
//! script's line.

use crate::state::json::Json;
use mlua::{LightUserData, Lua, MultiValue, Table, Value};

/// lua-cjson's limits: nesting depth and the "excessively sparse array" rule.
use crate::config::LUA_CJSON_DEPTH_MAX as MAX_DEPTH;
const SPARSE_RATIO: usize = 2;
const SPARSE_SAFE: usize = 10;

pub fn install(lua: &Lua, bridge: &Table) -> mlua::Result<()> {
    let bit = lua.create_table()?;
    // Every bit function reads its arguments as luaL_checknumber does, with its error text.
    for (name, op) in [
        ("tobit", (|x| x) as fn(i32) -> i32),
        ("bnot", |x| !x),
        ("bswap", |x: i32| x.swap_bytes()),
    ] {
        let b = bridge.clone();
        bit.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                Ok(op(tobit(check_number(lua, &b, &args, 0, name)?)) as f64)
            })?,
        )?;
    }
    for (name, op) in [
        ("band", (|a, b| a & b) as fn(i32, i32) -> i32),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ] {
        let b = bridge.clone();
        bit.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let mut acc = tobit(check_number(lua, &b, &args, 0, name)?);
                for i in 1..args.len() {
                    acc = op(acc, tobit(check_number(lua, &b, &args, i, name)?));
                }
                Ok(acc as f64)
            })?,
        )?;
    }
    for (name, op) in [
        (
            "lshift",
            (|a: i32, n: u32| ((a as u32) << n) as i32) as fn(i32, u32) -> i32,
        ),
        ("rshift", |a, n| ((a as u32) >> n) as i32),
        ("arshift", |a, n| a >> n),
        ("rol", |a, n| (a as u32).rotate_left(n) as i32),
        ("ror", |a, n| (a as u32).rotate_right(n) as i32),
    ] {
        let b = bridge.clone();
        bit.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let x = check_number(lua, &b, &args, 0, name)?;
                let n = check_number(lua, &b, &args, 1, name)?;
                Ok(op(tobit(x), (tobit(n) & 31) as u32) as f64)
            })?,
        )?;
    }
    let b = bridge.clone();
    bit.set(
        "tohex",
        lua.create_function(move |lua, args: MultiValue| {
            let x = check_number(lua, &b, &args, 0, "tohex")?;
            let n = match args.get(1) {
                None | Some(Value::Nil) => 8,
                Some(_) => tobit(check_number(lua, &b, &args, 1, "tohex")?),
            };
            let (upper, digits) = if n < 0 {
                (true, n.unsigned_abs())
            } else {
                (false, n as u32)
            };
            let digits = digits.min(8) as usize;
            let v = tobit(x) as u32;
            let s = if upper {
                format!("{v:08X}")
            } else {
                format!("{v:08x}")
            };
            Ok(s[8 - digits..].to_string())
        })?,
    )?;
    bridge.set("bit", bit)?;
    let cjson = lua.create_table()?;
    let b = bridge.clone();
    cjson.set(
        "encode",
        lua.create_function(move |lua, v: Value| {
            let mut out = Vec::new();
            match encode(&v, 0, &mut out) {
                Ok(()) => lua.create_string(&out),
                Err(e) => Err(raise(lua, &b, &e)),
            }
        })?,
    )?;
    let b = bridge.clone();
    cjson.set(
        "decode",
        lua.create_function(move |lua, v: Value| {
            let text = match &v {
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Number(_) | Value::Integer(_) => match lua.coerce_string(v.clone())? {
                    Some(s) => s.as_bytes().to_vec(),
                    None => Vec::new(),
                },
                other => {
                    let msg = format!(
                        "bad argument #1 to 'decode' (string expected, got {})",
                        other.type_name()
                    );
                    return Err(raise(lua, &b, &msg));
                }
            };
            let parsed = std::str::from_utf8(&text)
                .map_err(|_| "Expected value but found invalid token at character 1".to_string())
                .and_then(|t| {
                    Json::parse(t).map_err(|e| {
                        let at = e
                            .rsplit("column ")
                            .next()
                            .and_then(|c| c.parse::<usize>().ok())
                            .unwrap_or(1);
                        format!("Expected value but found invalid token at character {at}")
                    })
                });
            match parsed {
                Ok(j) => to_lua(lua, &j),
                Err(e) => Err(raise(lua, &b, &e)),
            }
        })?,
    )?;
    cjson.set(
        "null",
        Value::LightUserData(LightUserData(std::ptr::null_mut())),
    )?;
    bridge.set("cjson", cjson)?;
    Ok(())
}

/// Argument `i` (0-based) of the C function `name` as `luaL_checknumber` reads it: a number,
/// or a string that converts to one; anything else raises Lua's "bad argument" error.
pub(super) fn check_number(
    lua: &Lua,
    bridge: &Table,
    args: &MultiValue,
    i: usize,
    name: &str,
) -> mlua::Result<f64> {
    let v = args.get(i).cloned().unwrap_or(Value::Nil);
    let got = match &v {
        Value::Number(n) => return Ok(*n),
        Value::Integer(n) => return Ok(*n as f64),
        Value::String(_) => match lua.coerce_number(v.clone())? {
            Some(n) => return Ok(n),
            None => "string",
        },
        _ if i >= args.len() => "no value",
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    };
    let msg = format!(
        "bad argument #{} to '{name}' (number expected, got {got})",
        i + 1
    );
    Err(raise(lua, bridge, &msg))
}

/// Raises `msg` as `luaL_error` does from C: prefixed with the calling script's position
/// (`user_script:3: ...`). The error reply goes where the prelude's handler takes a failed
/// redis.call's reply from, with the line for the "on @user_script:N." suffix.
pub(super) fn raise(lua: &Lua, bridge: &Table, msg: &str) -> mlua::Error {
    let (source, short, line) = lua
        .inspect_stack(1, |d| {
            let s = d.source();
            (
                s.source.map(|x| x.into_owned()),
                s.short_src.map(|x| x.into_owned()),
                d.current_line(),
            )
        })
        .unwrap_or((None, None, None));
    let text = match (&short, line) {
        (Some(s), Some(l)) => format!("ERR {s}:{l}: {msg}"),
        _ => format!("ERR {msg}"),
    };
    let reply = lua.create_table().and_then(|t| {
        t.set("err", text)?;
        if let (Some(src), Some(l)) = (source, line) {
            t.set("source", src)?;
            t.set("line", l)?;
        }
        bridge.set("last_err", t)
    });
    match reply {
        Ok(()) => mlua::Error::RuntimeError(msg.into()),
        Err(e) => e,
    }
}

/// LuaBitOp's argument normalisation: the number rounded to an integer (as the FPU rounds)
/// and cut to its low 32 bits.
fn tobit(x: f64) -> i32 {
    (x + 6_755_399_441_055_744.0).to_bits() as u32 as i32
}

/// C's `%.14g`, lua-cjson's number format.
fn g14(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{f:.13e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..14).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mant), exp.unsigned_abs())
    } else {
        trim(&format!("{:.*}", (13 - exp) as usize, f))
    }
}

fn encode_str(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            c if c < 0x20 || c == 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

fn encode(v: &Value, depth: usize, out: &mut Vec<u8>) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        // Lua 5.1 has only doubles; mlua reports the integral ones as Integer.
        Value::Integer(i) => out.extend_from_slice(g14(*i as f64).as_bytes()),
        Value::Number(f) => {
            if !f.is_finite() {
                return Err("Cannot serialise number: must not be NaN or Inf".into());
            }
            out.extend_from_slice(g14(*f).as_bytes());
        }
        Value::String(s) => encode_str(&s.as_bytes(), out),
        Value::Table(t) => {
            let depth = depth + 1;
            if depth > MAX_DEPTH {
                return Err(format!("Cannot serialise, excessive nesting ({depth})"));
            }
            let mut max = 0usize;
            let mut items = 0usize;
            let mut array = true;
            for pair in t.pairs::<Value, Value>() {
                let (k, _) = pair.map_err(|e| e.to_string())?;
                match k {
                    Value::Number(n) if n >= 1.0 && n.fract() == 0.0 && n < 1e15 => {
                        max = max.max(n as usize);
                        items += 1;
                    }
                    Value::Integer(n) if n >= 1 => {
                        max = max.max(n as usize);
                        items += 1;
                    }
                    _ => {
                        array = false;
                        break;
                    }
                }
            }
            if array && max > SPARSE_SAFE && max > items * SPARSE_RATIO {
                return Err("Cannot serialise table: excessively sparse array".into());
            }
            if array && max > 0 {
                out.push(b'[');
                for i in 1..=max {
                    if i > 1 {
                        out.push(b',');
                    }
                    let item: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                    encode(&item, depth, out)?;
                }
                out.push(b']');
            } else {
                out.push(b'{');
                let mut first = true;
                for pair in t.pairs::<Value, Value>() {
                    let (k, item) = pair.map_err(|e| e.to_string())?;
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    match k {
                        Value::String(s) => encode_str(&s.as_bytes(), out),
                        Value::Number(n) => encode_str(g14(n).as_bytes(), out),
                        Value::Integer(n) => encode_str(g14(n as f64).as_bytes(), out),
                        _ => {
                            return Err(
                                "Cannot serialise table: table key must be a number or string"
                                    .into(),
                            )
                        }
                    }
                    out.push(b':');
                    encode(&item, depth, out)?;
                }
                out.push(b'}');
            }
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            ))
        }
    }
    Ok(())
}

fn to_lua(lua: &Lua, j: &Json) -> mlua::Result<Value> {
    Ok(match j {
        Json::Null => Value::LightUserData(LightUserData(std::ptr::null_mut())),
        Json::Bool(b) => Value::Boolean(*b),
        Json::Int(_) | Json::UInt(_) | Json::Float(_) => Value::Number(j.as_f64().unwrap_or(0.0)),
        Json::Str(s) => Value::String(lua.create_string(s)?),
        Json::Arr(a) => {
            let t = lua.create_table_with_capacity(a.len(), 0)?;
            for (i, v) in a.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, v)?)?;
            }
            Value::Table(t)
        }
        Json::Obj(o) => {
            let t = lua.create_table_with_capacity(0, o.len())?;
            for (k, v) in o {
                t.raw_set(k.as_str(), to_lua(lua, v)?)?;
            }
            Value::Table(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_14g() {
        for (x, t) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (1e20, "1e+20"),
            (123456789012345.0, "1.2345678901234e+14"),
            (12345678901234.0, "12345678901234"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1.234567890123456, "1.2345678901235"),
        ] {
            assert_eq!(g14(x), t, "{x}");
        }
    }

    #[test]
    fn tobit_wraps_like_luabitop() {
        assert_eq!(tobit(4294967295.0), -1);
        assert_eq!(tobit(2147483648.0), i32::MIN);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(2.5), 2);
        assert_eq!(tobit(3.5), 4);
    }
}
