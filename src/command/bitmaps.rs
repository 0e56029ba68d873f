//! Bitmap commands on strings: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD(_RO), following
//! Redis 7.0's bitops.c (bit order, BYTE/BIT ranges, overflow arithmetic, error texts).

use super::args::tri;
use super::args::{clamp_range, int_arg, is};
use super::ctx::Ctx;
use super::strings::read_str;
use crate::config::STRING_BYTES_MAX;
use crate::num::parse_i64;
use crate::reply::{errors, Reply};
use crate::state::Value;

const BIT_OFFSET_ERR: &str = "ERR bit offset is not an integer or out of range";

/// `getBitOffsetFromArgument`: a bit offset below 2^32 (512 MB), or `#n` times the field width.
fn bit_offset(arg: &[u8], hash_bits: Option<u32>) -> Result<u64, Reply> {
    let (hash, digits) = match (arg.first(), hash_bits) {
        (Some(b'#'), Some(_)) => (true, &arg[1..]),
        _ => (false, arg),
    };
    let mut v = parse_i64(digits).ok_or_else(|| Reply::err(BIT_OFFSET_ERR))?;
    if hash {
        v = v.saturating_mul(hash_bits.unwrap_or(1) as i64);
    }
    if v < 0 || (v >> 3) as u64 >= STRING_BYTES_MAX as u64 {
        return Err(Reply::err(BIT_OFFSET_ERR));
    }
    Ok(v as u64)
}

fn get_bit(s: &[u8], bit: u64) -> u64 {
    let byte = (bit >> 3) as usize;
    match s.get(byte) {
        Some(b) => ((b >> (7 - (bit & 7))) & 1) as u64,
        None => 0,
    }
}

fn set_bit(s: &mut [u8], bit: u64, on: bool) {
    let byte = (bit >> 3) as usize;
    let mask = 1u8 << (7 - (bit & 7));
    if on {
        s[byte] |= mask;
    } else {
        s[byte] &= !mask;
    }
}

/// The string at `key` for a bit write reaching `max_bit`: created or grown with zeros
/// (`lookupStringForBitCommand`). Returns whether it was created or grown.
fn string_for_bits<'a>(
    ctx: &'a mut Ctx,
    key: &[u8],
    max_bit: u64,
) -> Result<(&'a mut Vec<u8>, bool), Reply> {
    let need = (max_bit >> 3) as usize + 1;
    let now = ctx.now_ms;
    let grew = match ctx.db.get_mut(key, now).map(|e| &mut e.value) {
        Some(Value::Str(s)) => {
            let grew = s.len() < need;
            if grew {
                let s = s.make_mut();
                super::strings::make_room(s, need - s.len());
                s.resize(need, 0);
            }
            grew
        }
        Some(_) => return Err(Reply::err(errors::WRONGTYPE)),
        None => {
            ctx.db
                .insert(key, Value::Str(vec![0u8; need].into()), None, now);
            true
        }
    };
    match ctx.db.get_mut(key, now).map(|e| &mut e.value) {
        Some(Value::Str(s)) => Ok((s.make_mut(), grew)),
        _ => Err(Reply::err(errors::WRONGTYPE)),
    }
}

pub fn setbit(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let off = tri!(bit_offset(&a[2], None));
    let on = match parse_i64(&a[3]) {
        Some(v @ (0 | 1)) => v == 1,
        _ => return Reply::err("ERR bit is not an integer or out of range"),
    };
    let (s, grew) = tri!(string_for_bits(ctx, &a[1], off));
    let old = get_bit(s, off);
    set_bit(s, off, on);
    if grew || old != on as u64 {
        ctx.dirty = true;
    }
    Reply::Int(old as i64)
}

pub fn getbit(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let off = tri!(bit_offset(&a[2], None));
    let s = tri!(read_str(ctx.db, &a[1], ctx.now_ms)).unwrap_or(b"");
    Reply::Int(get_bit(s, off) as i64)
}

/// A resolved range in bits, inclusive; None when empty.
fn bit_range(len_bytes: usize, start: i64, end: i64, in_bits: bool) -> Option<(u64, u64)> {
    let total = if in_bits {
        (len_bytes as i64) << 3
    } else {
        len_bytes as i64
    };
    let (s, e) = clamp_range(total, start, end)?;
    Some(if in_bits {
        (s as u64, e as u64)
    } else {
        ((s as u64) << 3, ((e as u64) << 3) + 7)
    })
}

fn range_unit(arg: Option<&Vec<u8>>) -> Result<bool, Reply> {
    match arg {
        None => Ok(false),
        Some(u) if is(u, "bit") => Ok(true),
        Some(u) if is(u, "byte") => Ok(false),
        Some(_) => Err(Reply::err(errors::SYNTAX)),
    }
}

pub fn bitcount(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let Some(s) = tri!(read_str(ctx.db, &a[1], ctx.now_ms)) else {
        return Reply::Int(0);
    };
    let range = match a.len() {
        2 => bit_range(s.len(), 0, -1, false),
        4 | 5 => {
            let start = tri!(int_arg(&a[2]));
            let end = tri!(int_arg(&a[3]));
            // Redis answers an inverted negative range before it looks at the unit.
            if start < 0 && end < 0 && start > end {
                return Reply::Int(0);
            }
            let in_bits = tri!(range_unit(a.get(4)));
            bit_range(s.len(), start, end, in_bits)
        }
        _ => return Reply::err(errors::SYNTAX),
    };
    let Some((bs, be)) = range else {
        return Reply::Int(0);
    };
    let (first, last) = ((bs >> 3) as usize, (be >> 3) as usize);
    let mut n: u64 = s[first..=last].iter().map(|b| b.count_ones() as u64).sum();
    // Take back the bits of the edge bytes that lie outside the range.
    for bit in ((first as u64) << 3)..bs {
        n -= get_bit(s, bit);
    }
    for bit in (be + 1)..(((last as u64) << 3) + 8) {
        n -= get_bit(s, bit);
    }
    Reply::Int(n as i64)
}

pub fn bitpos(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let bit = match tri!(int_arg(&a[2])) {
        b @ (0 | 1) => b as u64,
        _ => return Reply::err("ERR The bit argument must be 1 or 0."),
    };
    let Some(s) = tri!(read_str(ctx.db, &a[1], ctx.now_ms)) else {
        return Reply::Int(if bit == 1 { -1 } else { 0 });
    };
    let (range, end_given) = match a.len() {
        3 => (bit_range(s.len(), 0, -1, false), false),
        4..=6 => {
            let start = tri!(int_arg(&a[3]));
            let in_bits = if a.len() == 6 {
                tri!(range_unit(a.get(5)))
            } else {
                false
            };
            let end = if a.len() >= 5 {
                tri!(int_arg(&a[4]))
            } else {
                s.len() as i64 - 1
            };
            (bit_range(s.len(), start, end, in_bits), a.len() >= 5)
        }
        _ => return Reply::err(errors::SYNTAX),
    };
    let Some((bs, be)) = range else {
        return Reply::Int(-1);
    };
    // Whole bytes that cannot hold the bit are skipped eight bits at a time.
    let skip = if bit == 1 { 0x00 } else { 0xff };
    let mut b = bs;
    while b <= be {
        if b & 7 == 0 && b + 7 <= be && s.get((b >> 3) as usize) == Some(&skip) {
            b += 8;
            continue;
        }
        if get_bit(s, b) == bit {
            return Reply::Int(b as i64);
        }
        b += 1;
    }
    // Not found: a clear bit is found just past the string (zero padding) unless an explicit
    // end bounded the search.
    if bit == 0 && !end_given {
        Reply::Int(be as i64 + 1)
    } else {
        Reply::Int(-1)
    }
}

/// BITOP: AND, OR, XOR and NOT, and Redis 8.2's DIFF (bits of the first source in none of the
/// others), DIFF1 (bits of the others not in the first), ANDOR (bits of the first in one of the
/// others at least) and ONE (bits in exactly one source). Sources shorter than the longest read
/// as zeros past their end; the result is as long as the longest, and an empty one deletes
/// the destination (bitops.c).
pub fn bitop(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    #[derive(PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
        Diff,
        Diff1,
        AndOr,
        One,
    }
    let op = match a[1].to_ascii_lowercase().as_slice() {
        b"and" => Op::And,
        b"or" => Op::Or,
        b"xor" => Op::Xor,
        b"not" => Op::Not,
        b"diff" => Op::Diff,
        b"diff1" => Op::Diff1,
        b"andor" => Op::AndOr,
        b"one" => Op::One,
        _ => return Reply::err(errors::SYNTAX),
    };
    if op == Op::Not && a.len() != 4 {
        return Reply::err("ERR BITOP NOT must be called with a single source key.");
    }
    if matches!(op, Op::Diff | Op::Diff1 | Op::AndOr) && a.len() < 5 {
        return Reply::err(format!(
            "ERR BITOP {} must be called with at least two source keys.",
            String::from_utf8_lossy(&a[1]).to_uppercase()
        ));
    }
    let now = ctx.now_ms;
    let mut srcs: Vec<Vec<u8>> = Vec::with_capacity(a.len() - 3);
    for k in &a[3..] {
        srcs.push(
            tri!(read_str(ctx.db, k, now))
                .map(|s| s.to_vec())
                .unwrap_or_default(),
        );
    }
    let maxlen = srcs.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![0u8; maxlen];
    let (first, rest) = srcs
        .split_first()
        .map_or((&[][..], &[][..]), |(f, r)| (&f[..], r));
    for (i, o) in out.iter_mut().enumerate() {
        let byte = |s: &[u8]| s.get(i).copied().unwrap_or(0);
        // The others' disjunction, for DIFF, DIFF1 and ANDOR.
        let others = || rest.iter().fold(0u8, |acc, s| acc | byte(s));
        *o = match op {
            Op::Not => !byte(first),
            Op::And => srcs.iter().fold(0xff, |acc, s| acc & byte(s)),
            Op::Or => srcs.iter().fold(0, |acc, s| acc | byte(s)),
            Op::Xor => srcs.iter().fold(0, |acc, s| acc ^ byte(s)),
            Op::Diff => byte(first) & !others(),
            Op::Diff1 => !byte(first) & others(),
            Op::AndOr => byte(first) & others(),
            Op::One => {
                // Bits seen once so far, and bits seen more than once.
                let (mut once, mut more) = (0u8, 0u8);
                for s in &srcs {
                    more |= once & byte(s);
                    once ^= byte(s);
                }
                once & !more
            }
        };
    }
    ctx.store_or_delete(
        &a[2],
        (maxlen > 0).then_some(Value::Str(crate::state::Str::from(out))),
    );
    Reply::Int(maxlen as i64)
}

#[derive(Clone, Copy, PartialEq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq)]
enum FieldOp {
    Get,
    Set,
    Incrby,
}

struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    value: i64,
    overflow: Overflow,
}

fn field_type(arg: &[u8]) -> Result<(bool, u32), Reply> {
    let err = || {
        Reply::err("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.")
    };
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(err()),
    };
    match parse_i64(&arg[1..]) {
        Some(b) if b >= 1 && ((signed && b <= 64) || (!signed && b <= 63)) => {
            Ok((signed, b as u32))
        }
        _ => Err(err()),
    }
}

fn get_unsigned(s: &[u8], offset: u64, bits: u32) -> u64 {
    (0..bits as u64).fold(0u64, |v, j| (v << 1) | get_bit(s, offset + j))
}

fn get_signed(s: &[u8], offset: u64, bits: u32) -> i64 {
    let mut v = get_unsigned(s, offset, bits);
    if bits < 64 && v & (1u64 << (bits - 1)) != 0 {
        v |= u64::MAX << bits;
    }
    v as i64
}

fn set_field(s: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..bits as u64 {
        let on = value & (1u64 << (bits as u64 - 1 - j)) != 0;
        set_bit(s, offset + j, on);
    }
}

/// `checkUnsignedBitfieldOverflow`: Some(value to store) or None for FAIL; `overflowed`.
fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: Overflow) -> (bool, u64) {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = (value as i64).wrapping_neg();
    let wrap = || {
        let mask = if bits == 64 { 0 } else { u64::MAX << bits };
        value.wrapping_add(incr as u64) & !mask
    };
    if value > max || (incr > 0 && incr > maxincr) {
        (true, if ow == Overflow::Wrap { wrap() } else { max })
    } else if incr < 0 && incr < minincr {
        (true, if ow == Overflow::Wrap { wrap() } else { 0 })
    } else {
        (false, value.wrapping_add(incr as u64))
    }
}

/// `checkSignedBitfieldOverflow`.
fn signed_overflow(value: i64, incr: i64, bits: u32, ow: Overflow) -> (bool, i64) {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let maxincr = (max as u64).wrapping_sub(value as u64) as i64;
    let minincr = min.wrapping_sub(value);
    let wrap = || {
        let msb = 1u64 << (bits - 1);
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & msb != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    if value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr) {
        (true, if ow == Overflow::Wrap { wrap() } else { max })
    } else if value < min
        || (bits != 64 && incr < minincr)
        || (value < 0 && incr < 0 && incr < minincr)
    {
        (true, if ow == Overflow::Wrap { wrap() } else { min })
    } else {
        (false, value.wrapping_add(incr))
    }
}

pub fn bitfield(ctx: &mut Ctx, a: &[Vec<u8>], readonly_cmd: bool) -> Reply {
    let mut ops: Vec<Field> = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut readonly = true;
    let mut highest: u64 = 0;
    let mut j = 2;
    while j < a.len() {
        let rem = a.len() - j - 1;
        let op = if is(&a[j], "get") && rem >= 2 {
            FieldOp::Get
        } else if is(&a[j], "set") && rem >= 3 {
            FieldOp::Set
        } else if is(&a[j], "incrby") && rem >= 3 {
            FieldOp::Incrby
        } else if is(&a[j], "overflow") && rem >= 1 {
            overflow = if is(&a[j + 1], "wrap") {
                Overflow::Wrap
            } else if is(&a[j + 1], "sat") {
                Overflow::Sat
            } else if is(&a[j + 1], "fail") {
                Overflow::Fail
            } else {
                return Reply::err("ERR Invalid OVERFLOW type specified");
            };
            j += 2;
            continue;
        } else {
            return Reply::err(errors::SYNTAX);
        };
        let (signed, bits) = tri!(field_type(&a[j + 1]));
        let offset = tri!(bit_offset(&a[j + 2], Some(bits)));
        let mut value = 0;
        if op != FieldOp::Get {
            readonly = false;
            highest = highest.max(offset + bits as u64 - 1);
            value = tri!(int_arg(&a[j + 3]));
        }
        ops.push(Field {
            op,
            signed,
            bits,
            offset,
            value,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    let now = ctx.now_ms;
    if readonly {
        let s = tri!(read_str(ctx.db, &a[1], now)).unwrap_or(b"");
        return Reply::Array(
            ops.iter()
                .map(|f| {
                    if f.signed {
                        Reply::Int(get_signed(s, f.offset, f.bits))
                    } else {
                        Reply::Int(get_unsigned(s, f.offset, f.bits) as i64)
                    }
                })
                .collect(),
        );
    }
    if readonly_cmd {
        return Reply::err("ERR BITFIELD_RO only supports the GET subcommand");
    }
    let (s, grew) = tri!(string_for_bits(ctx, &a[1], highest));
    let mut changed = grew;
    let mut out = Vec::with_capacity(ops.len());
    for f in &ops {
        match f.op {
            FieldOp::Get => {
                out.push(if f.signed {
                    Reply::Int(get_signed(s, f.offset, f.bits))
                } else {
                    Reply::Int(get_unsigned(s, f.offset, f.bits) as i64)
                });
            }
            FieldOp::Set | FieldOp::Incrby => {
                let (ovf, newval, retval) = if f.signed {
                    let old = get_signed(s, f.offset, f.bits);
                    if f.op == FieldOp::Incrby {
                        let (o, n) = signed_overflow(old, f.value, f.bits, f.overflow);
                        (o, n as u64, n)
                    } else {
                        let (o, n) = signed_overflow(f.value, 0, f.bits, f.overflow);
                        (o, n as u64, old)
                    }
                } else {
                    let old = get_unsigned(s, f.offset, f.bits);
                    if f.op == FieldOp::Incrby {
                        let (o, n) = unsigned_overflow(old, f.value, f.bits, f.overflow);
                        (o, n, n as i64)
                    } else {
                        let (o, n) = unsigned_overflow(f.value as u64, 0, f.bits, f.overflow);
                        (o, n, old as i64)
                    }
                };
                if ovf && f.overflow == Overflow::Fail {
                    out.push(Reply::Nil);
                } else {
                    out.push(Reply::Int(retval));
                    set_field(s, f.offset, f.bits, newval);
                    changed = true;
                }
            }
        }
    }
    if changed {
        ctx.dirty = true;
    }
    Reply::Array(out)
}

/// BITFIELD's own key finding (Redis's `bitfieldGetKeys`): only SET and INCRBY make it a write.
pub fn bitfield_keys(args: &[Vec<u8>]) -> Vec<(usize, &'static [&'static str])> {
    if args.len() < 2 {
        return Vec::new();
    }
    let mut read_only = true;
    let mut i = 2;
    while i < args.len() {
        let op = args[i].to_ascii_lowercase();
        match op.as_slice() {
            b"get" => i += 3,
            b"set" | b"incrby" => {
                read_only = false;
                i += 4;
            }
            b"overflow" => i += 2,
            _ => i += 1,
        }
    }
    let flags: &'static [&'static str] = if read_only {
        &["RO", "access"]
    } else {
        &["RW", "access", "update"]
    };
    vec![(1, flags)]
}
