//! The `cmsgpack` and `struct` libraries Redis gives its Lua scripts (lua-cmsgpack 0.4.0 and
//! Roberto Ierusalimschy's struct library, as Redis 7.0 vendors them), written in Rust against
//! their C originals' rules: the same bytes out, the same values back, the same error texts.
//! What C leaves undefined (a double cast to an integer it does not fit) follows what x86-64
//! does, which is what Redis's builds do.

use super::libs::{check_number, raise};
use crate::config::{LUA_CMSGPACK_DECODE_DEPTH_MAX, LUA_CMSGPACK_NESTING_MAX};
use mlua::{Lua, MultiValue, Table, Value};

pub fn install(lua: &Lua, bridge: &Table) -> mlua::Result<()> {
    let m = lua.create_table()?;
    let b = bridge.clone();
    m.set(
        "pack",
        lua.create_function(move |lua, args: MultiValue| {
            if args.is_empty() {
                return Err(raise(
                    lua,
                    &b,
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                ));
            }
            let mut out = Vec::new();
            for v in args.iter() {
                encode(v, 0, &mut out)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    for (name, kind) in [("unpack", 0u8), ("unpack_one", 1), ("unpack_limit", 2)] {
        let b = bridge.clone();
        m.set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                let data = check_string(lua, &b, &args, 0, name)?;
                let (limit, offset) = match kind {
                    0 => (0, 0),
                    1 => (1, opt_integer(lua, &b, &args, 1, name, 0)?),
                    _ => (
                        check_integer(lua, &b, &args, 1, name)?,
                        opt_integer(lua, &b, &args, 2, name, 0)?,
                    ),
                };
                unpack(lua, &b, &data, limit, offset)
            })?,
        )?;
    }
    m.set("_NAME", "cmsgpack")?;
    m.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    m.set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    m.set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    bridge.set("cmsgpack", m)?;

    let s = lua.create_table()?;
    let b = bridge.clone();
    s.set(
        "pack",
        lua.create_function(move |lua, args: MultiValue| struct_pack(lua, &b, &args))?,
    )?;
    let b = bridge.clone();
    s.set(
        "unpack",
        lua.create_function(move |lua, args: MultiValue| struct_unpack(lua, &b, &args))?,
    )?;
    let b = bridge.clone();
    s.set(
        "size",
        lua.create_function(move |lua, args: MultiValue| struct_size(lua, &b, &args))?,
    )?;
    bridge.set("struct", s)?;
    Ok(())
}

/// The name `luaL_typename` gives a value (arguments past the last are "no value").
fn type_name(args: &MultiValue, i: usize) -> &'static str {
    match args.get(i) {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Number(_) | Value::Integer(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

fn bad_argument(lua: &Lua, bridge: &Table, i: usize, name: &str, what: &str) -> mlua::Error {
    raise(
        lua,
        bridge,
        &format!("bad argument #{} to '{name}' ({what})", i + 1),
    )
}

/// `luaL_checklstring`: a string, or a number as its text.
fn check_string(
    lua: &Lua,
    bridge: &Table,
    args: &MultiValue,
    i: usize,
    name: &str,
) -> mlua::Result<Vec<u8>> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(v @ (Value::Number(_) | Value::Integer(_))) => Ok(lua
            .coerce_string(v.clone())?
            .map(|s| s.as_bytes().to_vec())
            .unwrap_or_default()),
        _ => {
            let what = format!("string expected, got {}", type_name(args, i));
            Err(bad_argument(lua, bridge, i, name, &what))
        }
    }
}

/// `luaL_checkinteger`: the number, cut toward zero to an integer as `(ptrdiff_t)d` is.
fn check_integer(
    lua: &Lua,
    bridge: &Table,
    args: &MultiValue,
    i: usize,
    name: &str,
) -> mlua::Result<i64> {
    check_number(lua, bridge, args, i, name).map(c_i64)
}

/// `luaL_optinteger`: `default` when the argument is absent or nil.
fn opt_integer(
    lua: &Lua,
    bridge: &Table,
    args: &MultiValue,
    i: usize,
    name: &str,
    default: i64,
) -> mlua::Result<i64> {
    match args.get(i) {
        None | Some(Value::Nil) => Ok(default),
        Some(_) => check_integer(lua, bridge, args, i, name),
    }
}

/// C's `(int64_t)d` on x86-64: toward zero, and INT64_MIN for NaN and what does not fit.
fn c_i64(d: f64) -> i64 {
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&d) {
        i64::MIN
    } else {
        d as i64
    }
}

/// C's `(int)d` on x86-64: toward zero, and INT_MIN for NaN and what does not fit.
fn c_i32(d: f64) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&d) {
        i32::MIN
    } else {
        d as i32
    }
}

// ---------------------------------------------------------------------------------------
// cmsgpack

/// `mp_encode_lua_type`: one value. Tables nested LUA_CMSGPACK_NESTING_MAX deep encode as nil
/// (so a table that holds itself ends); functions, userdata and threads encode as nil.
fn encode(v: &Value, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::String(s) => encode_bytes(&s.as_bytes(), out),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Number(n) => encode_number(*n, out),
        Value::Integer(n) => encode_int(*n, out),
        Value::Table(t) if level < LUA_CMSGPACK_NESTING_MAX => {
            if table_is_an_array(t)? {
                let len = t.raw_len();
                encode_header(len as u64, 0x90, 0xdc, 0xdd, out);
                for j in 1..=len {
                    let item: Value = t.get(j as f64)?;
                    encode(&item, level + 1, out)?;
                }
            } else {
                let pairs: Vec<(Value, Value)> = t
                    .clone()
                    .pairs::<Value, Value>()
                    .collect::<mlua::Result<_>>()?;
                encode_header(pairs.len() as u64, 0x80, 0xde, 0xdf, out);
                for (k, v) in &pairs {
                    encode(k, level + 1, out)?;
                    encode(v, level + 1, out)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

/// Only positive whole-number keys (as `int`), and as many of them as the largest: 1..n.
fn table_is_an_array(t: &Table) -> mlua::Result<bool> {
    let (mut count, mut max) = (0i64, 0i64);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Number(n) => n,
            Value::Integer(n) => n as f64,
            _ => return Ok(false),
        };
        if n <= 0.0 || f64::from(c_i32(n)) != n {
            return Ok(false);
        }
        // `max = (n > max ? n : max)`, stored in an int.
        if n > max as f64 {
            max = i64::from(c_i32(n));
        }
        count += 1;
    }
    Ok(max == count)
}

fn encode_header(n: u64, fix: u8, b16: u8, b32: u8, out: &mut Vec<u8>) {
    if n <= 15 {
        out.push(fix | (n as u8 & 0xf));
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn encode_bytes(s: &[u8], out: &mut Vec<u8>) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// A whole number that fits in 64 bits is an integer; anything else a float (32 bits when it
/// loses nothing) or a double.
fn encode_number(n: f64, out: &mut Vec<u8>) {
    if n.is_finite() && c_i64(n) as f64 == n {
        encode_int(c_i64(n), out);
    } else if f64::from(n as f32) == n {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn encode_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Why a decode stopped: the input ended early, or holds a byte that starts no known type
/// (or nests deeper than LUA_CMSGPACK_DECODE_DEPTH_MAX).
enum Stop {
    Eof,
    BadFormat,
    TooDeep,
}

/// `mp_unpack_full`: decodes up to `limit` values from `offset` (0 and 0: all of them). With
/// a limit or an offset, the first value returned is the next offset (-1 at the end).
fn unpack(
    lua: &Lua,
    bridge: &Table,
    data: &[u8],
    limit: i64,
    offset: i64,
) -> mlua::Result<MultiValue> {
    let decode_all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        // (The C library prints the input's length where it means the limit.)
        return Err(raise(
            lua,
            bridge,
            &format!(
                "Invalid request to unpack with offset of {offset} and limit of {}.",
                data.len()
            ),
        ));
    }
    if offset as u64 > data.len() as u64 {
        return Err(raise(
            lua,
            bridge,
            &format!(
                "Start offset {offset} greater than input length {}.",
                data.len()
            ),
        ));
    }
    let limit = if decode_all { i64::MAX } else { limit };
    let mut at = offset as usize;
    let mut values = Vec::new();
    while at < data.len() && (values.len() as i64) < limit {
        if values.len() >= crate::config::LUA_CMSGPACK_RESULTS_MAX {
            return Err(raise(
                lua,
                bridge,
                "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)",
            ));
        }
        match decode(lua, data, &mut at, 0) {
            Ok(v) => values.push(v),
            Err(Ok(Stop::Eof)) => return Err(raise(lua, bridge, "Missing bytes in input.")),
            Err(Ok(Stop::BadFormat)) => {
                return Err(raise(lua, bridge, "Bad data format in input."))
            }
            Err(Ok(Stop::TooDeep)) => {
                return Err(raise(
                    lua,
                    bridge,
                    "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)",
                ))
            }
            Err(Err(e)) => return Err(e),
        }
    }
    let mut out = Vec::with_capacity(values.len() + 1);
    if !decode_all {
        let next = if at >= data.len() { -1.0 } else { at as f64 };
        out.push(Value::Number(next));
    }
    out.extend(values);
    Ok(MultiValue::from_iter(out))
}

type Decoded = Result<Value, Result<Stop, mlua::Error>>;

fn take<'a>(
    data: &'a [u8],
    at: &mut usize,
    n: usize,
) -> Result<&'a [u8], Result<Stop, mlua::Error>> {
    let end = at
        .checked_add(n)
        .filter(|&e| e <= data.len())
        .ok_or(Ok(Stop::Eof))?;
    let s = &data[*at..end];
    *at = end;
    Ok(s)
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

/// `mp_decode_to_lua_type`: one value at `*at`. Integers come back as Lua numbers, a uint 64
/// past 2^63 as the negative number C's cast makes of it.
fn decode(lua: &Lua, data: &[u8], at: &mut usize, depth: usize) -> Decoded {
    let lua_err = |e: mlua::Error| Err(e);
    let first = take(data, at, 1)?[0];
    let num = |n: f64| Ok(Value::Number(n));
    let string = |s: &[u8]| lua.create_string(s).map(Value::String).map_err(lua_err);
    match first {
        0xcc => num(f64::from(take(data, at, 1)?[0])),
        0xd0 => num(f64::from(take(data, at, 1)?[0] as i8)),
        0xcd => num(be(take(data, at, 2)?) as f64),
        0xd1 => num(f64::from(be(take(data, at, 2)?) as u16 as i16)),
        0xce => num(be(take(data, at, 4)?) as f64),
        0xd2 => num(f64::from(be(take(data, at, 4)?) as u32 as i32)),
        0xcf => num(be(take(data, at, 8)?) as i64 as f64),
        0xd3 => num(be(take(data, at, 8)?) as i64 as f64),
        0xc0 => Ok(Value::Nil),
        0xc3 => Ok(Value::Boolean(true)),
        0xc2 => Ok(Value::Boolean(false)),
        0xca => num(f64::from(f32::from_bits(be(take(data, at, 4)?) as u32))),
        0xcb => num(f64::from_bits(be(take(data, at, 8)?))),
        0xd9 => {
            let l = be(take(data, at, 1)?) as usize;
            string(take(data, at, l)?)
        }
        0xda => {
            let l = be(take(data, at, 2)?) as usize;
            string(take(data, at, l)?)
        }
        0xdb => {
            let l = be(take(data, at, 4)?) as usize;
            string(take(data, at, l)?)
        }
        0xdc => {
            let l = be(take(data, at, 2)?) as usize;
            decode_array(lua, data, at, l, depth)
        }
        0xdd => {
            let l = be(take(data, at, 4)?) as usize;
            decode_array(lua, data, at, l, depth)
        }
        0xde => {
            let l = be(take(data, at, 2)?) as usize;
            decode_map(lua, data, at, l, depth)
        }
        0xdf => {
            let l = be(take(data, at, 4)?) as usize;
            decode_map(lua, data, at, l, depth)
        }
        b if b & 0x80 == 0 => num(f64::from(b)),
        b if b & 0xe0 == 0xe0 => num(f64::from(b as i8)),
        b if b & 0xe0 == 0xa0 => string(take(data, at, usize::from(b & 0x1f))?),
        b if b & 0xf0 == 0x90 => decode_array(lua, data, at, usize::from(b & 0xf), depth),
        b if b & 0xf0 == 0x80 => decode_map(lua, data, at, usize::from(b & 0xf), depth),
        _ => Err(Ok(Stop::BadFormat)),
    }
}

fn decode_array(lua: &Lua, data: &[u8], at: &mut usize, len: usize, depth: usize) -> Decoded {
    if depth >= LUA_CMSGPACK_DECODE_DEPTH_MAX {
        return Err(Ok(Stop::TooDeep));
    }
    let t = lua.create_table().map_err(Err)?;
    for i in 0..len {
        let v = decode(lua, data, at, depth + 1)?;
        t.set((i + 1) as f64, v).map_err(Err)?;
    }
    Ok(Value::Table(t))
}

fn decode_map(lua: &Lua, data: &[u8], at: &mut usize, len: usize, depth: usize) -> Decoded {
    if depth >= LUA_CMSGPACK_DECODE_DEPTH_MAX {
        return Err(Ok(Stop::TooDeep));
    }
    let t = lua.create_table().map_err(Err)?;
    for _ in 0..len {
        let k = decode(lua, data, at, depth + 1)?;
        let v = decode(lua, data, at, depth + 1)?;
        // `lua_settable` with a nil (or NaN) key raises in C; the decoder never meets one it
        // made itself, and a crafted one is refused as bad data rather than crashing.
        match &k {
            Value::Nil => return Err(Ok(Stop::BadFormat)),
            Value::Number(n) if n.is_nan() => return Err(Ok(Stop::BadFormat)),
            _ => {}
        }
        t.set(k, v).map_err(Err)?;
    }
    Ok(Value::Table(t))
}

// ---------------------------------------------------------------------------------------
// struct

/// The largest integral size `i`/`I` take, and the most a `!` alignment defaults to on
/// x86-64 (a double's).
const MAXINTSIZE: usize = 32;
const MAXALIGN: usize = 8;

#[derive(Clone, Copy)]
struct Header {
    little: bool,
    align: usize,
}

/// `getnum`: the digits at `fmt[*i..]`, or `default` when there are none.
fn getnum(fmt: &[u8], i: &mut usize, default: usize) -> usize {
    if !fmt.get(*i).is_some_and(u8::is_ascii_digit) {
        return default;
    }
    let mut a: usize = 0;
    while let Some(d) = fmt.get(*i).filter(|c| c.is_ascii_digit()) {
        a = a.wrapping_mul(10).wrapping_add(usize::from(d - b'0'));
        *i += 1;
    }
    a
}

/// `optsize`: the option's size in bytes (0 for the control options).
fn optsize(lua: &Lua, bridge: &Table, opt: u8, fmt: &[u8], i: &mut usize) -> mlua::Result<usize> {
    Ok(match opt {
        b'B' | b'b' | b'x' => 1,
        b'H' | b'h' => 2,
        b'L' | b'l' | b'T' | b'd' => 8,
        b'f' => 4,
        b'c' => getnum(fmt, i, 1),
        b'i' | b'I' => {
            let sz = getnum(fmt, i, 4);
            if sz > MAXINTSIZE {
                return Err(raise(
                    lua,
                    bridge,
                    &format!("integral size {sz} is larger than limit of {MAXINTSIZE}"),
                ));
            }
            sz
        }
        _ => 0,
    })
}

/// `gettoalign`: padding before an element of `size` at `len`.
fn gettoalign(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    (size.wrapping_sub(len & (size - 1))) & (size - 1)
}

/// `controloptions`: endianness, alignment, spaces; anything else is an invalid option.
fn controloptions(
    lua: &Lua,
    bridge: &Table,
    opt: u8,
    fmt: &[u8],
    i: &mut usize,
    h: &mut Header,
    name: &str,
) -> mlua::Result<()> {
    match opt {
        b' ' => {}
        b'>' => h.little = false,
        b'<' => h.little = true,
        b'!' => {
            let a = getnum(fmt, i, MAXALIGN);
            if !a.is_power_of_two() {
                return Err(raise(
                    lua,
                    bridge,
                    &format!("alignment {a} is not a power of 2"),
                ));
            }
            h.align = a;
        }
        _ => {
            let what = format!("invalid format option '{}'", opt as char);
            return Err(bad_argument(lua, bridge, 0, name, &what));
        }
    }
    Ok(())
}

fn struct_pack(lua: &Lua, bridge: &Table, args: &MultiValue) -> mlua::Result<mlua::LuaString> {
    let fmt = check_string(lua, bridge, args, 0, "pack")?;
    let mut h = Header {
        little: true,
        align: 1,
    };
    let mut arg = 1;
    let mut out: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let mut size = optsize(lua, bridge, opt, &fmt, &mut i)?;
        let toalign = gettoalign(out.len(), &h, opt, size);
        out.resize(out.len() + toalign, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = check_number(lua, bridge, args, arg, "pack")?;
                arg += 1;
                let value: u64 = if n < 0.0 {
                    c_i64(n) as u64
                } else if n < 18_446_744_073_709_551_616.0 {
                    n as u64
                } else {
                    0
                };
                let mut bytes = [0u8; MAXINTSIZE];
                let mut v = value;
                for b in bytes.iter_mut().take(size) {
                    *b = (v & 0xff) as u8;
                    v = v.checked_shr(8).unwrap_or(0);
                }
                let bytes = &mut bytes[..size];
                if !h.little {
                    bytes.reverse();
                }
                out.extend_from_slice(bytes);
            }
            b'x' => out.push(0),
            b'f' => {
                let f = check_number(lua, bridge, args, arg, "pack")? as f32;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    f.to_le_bytes()
                } else {
                    f.to_be_bytes()
                });
            }
            b'd' => {
                let d = check_number(lua, bridge, args, arg, "pack")?;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    d.to_le_bytes()
                } else {
                    d.to_be_bytes()
                });
            }
            b'c' | b's' => {
                let s = check_string(lua, bridge, args, arg, "pack")?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // (The C library names the argument after the string's.)
                    return Err(bad_argument(lua, bridge, arg, "pack", "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            _ => controloptions(lua, bridge, opt, &fmt, &mut i, &mut h, "pack")?,
        }
    }
    lua.create_string(&out)
}

fn struct_unpack(lua: &Lua, bridge: &Table, args: &MultiValue) -> mlua::Result<MultiValue> {
    let fmt = check_string(lua, bridge, args, 0, "unpack")?;
    let data = check_string(lua, bridge, args, 1, "unpack")?;
    let ld = data.len();
    // `luaL_optinteger(L, 3, 1) - 1`, kept in a size_t.
    let mut pos = (opt_integer(lua, bridge, args, 2, "unpack", 1)? as usize).wrapping_sub(1);
    let mut h = Header {
        little: true,
        align: 1,
    };
    let mut out: Vec<Value> = Vec::new();
    let mut i = 0;
    let short = |lua: &Lua| bad_argument(lua, bridge, 1, "unpack", "data string too short");
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let mut size = optsize(lua, bridge, opt, &fmt, &mut i)?;
        pos = pos.wrapping_add(gettoalign(pos, &h, opt, size));
        if pos.checked_add(size).is_none_or(|end| end > ld) {
            return Err(short(lua));
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let bytes = &data[pos..pos + size];
                let mut l: u64 = 0;
                let ordered: Vec<u8> = if h.little {
                    bytes.iter().rev().copied().collect()
                } else {
                    bytes.to_vec()
                };
                for b in ordered {
                    l = l.checked_shl(8).unwrap_or(0) | u64::from(b);
                }
                let n = if opt.is_ascii_lowercase() {
                    // x86 masks a shift count to its low six bits.
                    let mask = (!0u64).wrapping_shl((size * 8).wrapping_sub(1) as u32);
                    if l & mask != 0 {
                        l |= mask;
                    }
                    l as i64 as f64
                } else {
                    l as f64
                };
                out.push(Value::Number(n));
            }
            b'x' => {}
            b'f' => {
                let mut b = [0u8; 4];
                b.copy_from_slice(&data[pos..pos + 4]);
                let f = if h.little {
                    f32::from_le_bytes(b)
                } else {
                    f32::from_be_bytes(b)
                };
                out.push(Value::Number(f64::from(f)));
            }
            b'd' => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&data[pos..pos + 8]);
                let d = if h.little {
                    f64::from_le_bytes(b)
                } else {
                    f64::from_be_bytes(b)
                };
                out.push(Value::Number(d));
            }
            b'c' => {
                if size == 0 {
                    // The previous value read (or, with none, the data string) is the length.
                    let prev = out
                        .pop()
                        .unwrap_or(Value::String(lua.create_string(&data)?));
                    let n = match &prev {
                        Value::Number(n) => Some(*n),
                        v @ Value::String(_) => lua.coerce_number(v.clone())?,
                        _ => None,
                    };
                    let Some(n) = n else {
                        return Err(raise(lua, bridge, "format 'c0' needs a previous size"));
                    };
                    size = c_i64(n) as usize;
                    if pos.checked_add(size).is_none_or(|end| end > ld) {
                        return Err(short(lua));
                    }
                }
                out.push(Value::String(lua.create_string(&data[pos..pos + size])?));
            }
            b's' => {
                let Some(z) = data[pos..].iter().position(|&c| c == 0) else {
                    return Err(raise(lua, bridge, "unfinished string in data"));
                };
                size = z + 1;
                out.push(Value::String(lua.create_string(&data[pos..pos + z])?));
            }
            _ => controloptions(lua, bridge, opt, &fmt, &mut i, &mut h, "unpack")?,
        }
        pos = pos.wrapping_add(size);
    }
    out.push(Value::Number(pos.wrapping_add(1) as f64));
    Ok(MultiValue::from_iter(out))
}

fn struct_size(lua: &Lua, bridge: &Table, args: &MultiValue) -> mlua::Result<f64> {
    let fmt = check_string(lua, bridge, args, 0, "size")?;
    let mut h = Header {
        little: true,
        align: 1,
    };
    let mut pos: usize = 0;
    let mut i = 0;
    while i < fmt.len() {
        let opt = fmt[i];
        i += 1;
        let size = optsize(lua, bridge, opt, &fmt, &mut i)?;
        pos = pos.wrapping_add(gettoalign(pos, &h, opt, size));
        if opt == b's' {
            return Err(bad_argument(
                lua,
                bridge,
                0,
                "size",
                "option 's' has no fixed size",
            ));
        } else if opt == b'c' && size == 0 {
            return Err(bad_argument(
                lua,
                bridge,
                0,
                "size",
                "option 'c0' has no fixed size",
            ));
        }
        if !opt.is_ascii_alphanumeric() {
            controloptions(lua, bridge, opt, &fmt, &mut i, &mut h, "size")?;
        }
        pos = pos.wrapping_add(size);
    }
    Ok(pos as f64)
}
