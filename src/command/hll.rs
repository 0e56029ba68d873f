//! HyperLogLog, as Redis computes it (hyperloglog.c): MurmurHash64A with Redis's seed, 16384
//! six-bit registers, the Ertl estimator, and the `HYLL` string header, so PFADD, PFCOUNT and
//! PFMERGE answer what Redis answers.
//!
//! The stored string is Redis's too, byte for byte: a new HLL is sparse (XZERO runs), PFADD edits
//! the sparse opcodes in place the way `hllSparseSet` does (split, then merge neighbours) and
//! promotes to dense past 3000 bytes or a run of 33; PFCOUNT keeps the cached cardinality in the
//! header and PFADD and PFMERGE mark it stale. So GET, STRLEN and GETRANGE on an HLL key answer
//! what Redis answers, and a small HLL costs tens of bytes, not 12 KB.

use super::args::tri;
use super::ctx::Ctx;
use crate::reply::{errors, Reply};
use crate::state::Value;

const P: u32 = 14;
const REGISTERS: usize = 1 << P;
const Q: u32 = 64 - P;
const BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << BITS) - 1;
const HDR: usize = 16;
const DENSE_SIZE: usize = HDR + (REGISTERS * BITS).div_ceil(8);
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;
const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const INVALID_HLL: &str = "INVALIDOBJ Corrupted HLL object detected";

fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let chunks = key.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate().rev() {
            h ^= (b as u64) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// `hllPatLen`: the register an element goes to and its run length.
fn pattern(elem: &[u8]) -> (usize, u8) {
    let mut hash = murmur64a(elem, 0xadc8_3b19);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    hash >>= P;
    hash |= 1u64 << Q;
    let mut count = 1u8;
    let mut bit = 1u64;
    while hash & bit == 0 {
        count += 1;
        bit <<= 1;
    }
    (index, count)
}

/// Registers of a valid HLL string (dense or sparse), or None when it is not one.
fn registers(s: &[u8]) -> Option<Vec<u8>> {
    if s.len() < HDR || &s[0..4] != b"HYLL" || s[4] > 1 {
        return None;
    }
    let mut regs = vec![0u8; REGISTERS];
    if s[4] == 0 {
        if s.len() != DENSE_SIZE {
            return None;
        }
        let d = &s[HDR..];
        for (r, reg) in regs.iter_mut().enumerate() {
            let byte = r * BITS / 8;
            let fb = (r * BITS) & 7;
            let b0 = d[byte] as u16;
            let b1 = d.get(byte + 1).copied().unwrap_or(0) as u16;
            *reg = (((b0 >> fb) | (b1 << (8 - fb))) & REGISTER_MAX as u16) as u8;
        }
        return Some(regs);
    }
    // Sparse: ZERO 00xxxxxx, XZERO 01xxxxxx yyyyyyyy, VAL 1vvvvvxx.
    let mut i = HDR;
    let mut idx = 0usize;
    while i < s.len() {
        let op = s[i];
        if op & 0xc0 == 0 {
            idx += (op & 0x3f) as usize + 1;
            i += 1;
        } else if op & 0xc0 == 0x40 {
            let len = ((((op & 0x3f) as usize) << 8) | *s.get(i + 1)? as usize) + 1;
            idx += len;
            i += 2;
        } else {
            let val = ((op >> 2) & 0x1f) + 1;
            let len = (op & 0x3) as usize + 1;
            for r in regs.get_mut(idx..idx + len)? {
                *r = val;
            }
            idx += len;
            i += 1;
        }
        if idx > REGISTERS {
            return None;
        }
    }
    (idx == REGISTERS).then_some(regs)
}

/// Dense register bytes for `regs` (without the header).
fn dense_registers(regs: &[u8]) -> Vec<u8> {
    let mut d = vec![0u8; DENSE_SIZE - HDR];
    for (r, &v) in regs.iter().enumerate() {
        dense_put(&mut d, r, v);
    }
    d
}

fn dense_get(d: &[u8], r: usize) -> u8 {
    let byte = r * BITS / 8;
    let fb = (r * BITS) & 7;
    let b0 = d[byte] as u16;
    let b1 = d.get(byte + 1).copied().unwrap_or(0) as u16;
    (((b0 >> fb) | (b1 << (8 - fb))) & REGISTER_MAX as u16) as u8
}

fn dense_put(d: &mut [u8], r: usize, v: u8) {
    let byte = r * BITS / 8;
    let fb = (r * BITS) & 7;
    let v = v as u16;
    d[byte] &= !((REGISTER_MAX as u16) << fb) as u8;
    d[byte] |= (v << fb) as u8;
    if byte + 1 < d.len() {
        d[byte + 1] &= !((REGISTER_MAX as u16) >> (8 - fb)) as u8;
        d[byte + 1] |= (v >> (8 - fb)) as u8;
    }
}

/// Sparse opcodes: ZERO `00xxxxxx` (1-64 zeros), XZERO `01xxxxxx yyyyyyyy` (1-16384 zeros),
/// VAL `1vvvvvxx` (value 1-32, run 1-4).
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
/// `hll-sparse-max-bytes`: past this a sparse HLL becomes dense.
const SPARSE_MAX_BYTES: usize = 3000;

fn is_zero(op: u8) -> bool {
    op & 0xc0 == 0
}
fn is_xzero(op: u8) -> bool {
    op & 0xc0 == 0x40
}
fn val_value(op: u8) -> u8 {
    ((op >> 2) & 0x1f) + 1
}
fn val_len(op: u8) -> usize {
    (op & 0x3) as usize + 1
}
fn val(value: u8, len: usize) -> u8 {
    (((value - 1) << 2) | (len as u8 - 1)) | 0x80
}
fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        seq.push((l >> 8) as u8 | 0x40);
        seq.push((l & 0xff) as u8);
    } else {
        seq.push(len as u8 - 1);
    }
}

/// A new, empty HLL as Redis creates it: sparse, one XZERO covering every register.
fn create() -> Vec<u8> {
    let mut s = vec![0u8; HDR];
    s[0..4].copy_from_slice(b"HYLL");
    s[4] = 1;
    let mut left = REGISTERS;
    while left > 0 {
        let n = left.min(XZERO_MAX_LEN);
        push_zeros(&mut s, n);
        left -= n;
    }
    s
}

fn invalidate_cache(s: &mut [u8]) {
    s[15] |= 0x80;
}

/// `hllSparseToDense`: the same header (cache included), dense registers.
fn to_dense(s: &mut Vec<u8>) -> Result<(), ()> {
    if s[4] == 0 {
        return Ok(());
    }
    let regs = registers(s).ok_or(())?;
    let mut d = s[..HDR].to_vec();
    d[4] = 0;
    d.extend(dense_registers(&regs));
    *s = d;
    Ok(())
}

/// Raises register `index` to `count` if it is lower: `hllDenseSet` / `hllSparseSet`, with the
/// sparse edit done exactly as Redis does it. Returns whether a register changed.
fn set(s: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, ()> {
    if s[4] == 0 {
        let d = &mut s[HDR..];
        if dense_get(d, index) < count {
            dense_put(d, index, count);
            return Ok(true);
        }
        return Ok(false);
    }
    if count > VAL_MAX_VALUE {
        to_dense(s)?;
        return set(s, index, count);
    }
    // Step 1: the opcode that covers `index`.
    let mut p = HDR;
    let mut first = 0usize;
    let mut prev: Option<usize> = None;
    let mut span = 0usize;
    while p < s.len() {
        let op = s[p];
        let oplen;
        if is_zero(op) {
            span = (op & 0x3f) as usize + 1;
            oplen = 1;
        } else if is_xzero(op) {
            span = ((((op & 0x3f) as usize) << 8) | *s.get(p + 1).ok_or(())? as usize) + 1;
            oplen = 2;
        } else {
            span = val_len(op);
            oplen = 1;
        }
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += oplen;
        first += span;
    }
    if span == 0 || p >= s.len() {
        return Err(());
    }
    let op = s[p];
    let (zero, xzero) = (is_zero(op), is_xzero(op));
    let runlen = span;
    // Step 2: the cases that need no new opcodes.
    let mut updated_in_place = false;
    if !zero && !xzero {
        if val_value(op) >= count {
            return Ok(false);
        }
        if runlen == 1 {
            s[p] = val(count, 1);
            updated_in_place = true;
        }
    }
    if !updated_in_place && zero && runlen == 1 {
        s[p] = val(count, 1);
        updated_in_place = true;
    }
    if !updated_in_place {
        // Step 3: replace the opcode with up to three.
        let last = first + span - 1;
        let mut seq = Vec::with_capacity(5);
        if zero || xzero {
            if index != first {
                push_zeros(&mut seq, index - first);
            }
            seq.push(val(count, 1));
            if index != last {
                push_zeros(&mut seq, last - index);
            }
        } else {
            let cur = val_value(op);
            if index != first {
                seq.push(val(cur, index - first));
            }
            seq.push(val(count, 1));
            if index != last {
                seq.push(val(cur, last - index));
            }
        }
        let oldlen = if xzero { 2 } else { 1 };
        if seq.len() > oldlen && s.len() + seq.len() - oldlen > SPARSE_MAX_BYTES {
            to_dense(s)?;
            return set(s, index, count);
        }
        s.splice(p..p + oldlen, seq);
    }
    // Step 4: merge neighbouring VAL opcodes of one value, up to five opcodes from `prev`.
    let mut p = prev.unwrap_or(HDR);
    let mut scan = 5;
    while p < s.len() && scan > 0 {
        scan -= 1;
        let op = s[p];
        if is_xzero(op) {
            p += 2;
            continue;
        }
        if is_zero(op) {
            p += 1;
            continue;
        }
        if p + 1 < s.len() && s[p + 1] & 0x80 != 0 {
            let next = s[p + 1];
            if val_value(op) == val_value(next) {
                let len = val_len(op) + val_len(next);
                if len <= VAL_MAX_LEN {
                    s[p + 1] = val(val_value(op), len);
                    s.remove(p);
                    continue;
                }
            }
        }
        p += 1;
    }
    invalidate_cache(s);
    Ok(true)
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let prev = z;
        z += x * y;
        y += y;
        if prev == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let prev = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if prev == z {
            return z / 3.0;
        }
    }
}

/// `hllCount` with the Ertl estimator.
fn count(regs: &[u8]) -> u64 {
    let m = REGISTERS as f64;
    let mut histo = [0u32; 64];
    for &r in regs {
        histo[r as usize] += 1;
    }
    let mut z = m * tau((m - histo[Q as usize + 1] as f64) / m);
    for j in (1..=Q as usize).rev() {
        z += histo[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(histo[0] as f64 / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// Redis's `isHLLObjectOrReply`: the header, and a dense string's exact size. (A sparse body
/// is checked when it is read: INVALIDOBJ.)
fn header_ok(s: &[u8]) -> bool {
    s.len() >= HDR && &s[0..4] == b"HYLL" && s[4] <= 1 && (s[4] == 1 || s.len() == DENSE_SIZE)
}

/// Whether `key` holds an HLL: false when absent, an error when it holds something else.
fn exists(ctx: &Ctx, key: &[u8]) -> Result<bool, Reply> {
    match ctx.db.get(key, ctx.now_ms).map(|e| &e.value) {
        None => Ok(false),
        Some(Value::Str(s)) if header_ok(s) => Ok(true),
        Some(Value::Str(_)) => Err(Reply::err(NOT_HLL)),
        Some(_) => Err(Reply::err(errors::WRONGTYPE)),
    }
}

/// The registers at `key`: None when absent, an error when it is not an HLL.
fn read(ctx: &Ctx, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    if !exists(ctx, key)? {
        return Ok(None);
    }
    match ctx.db.get(key, ctx.now_ms).map(|e| &e.value) {
        Some(Value::Str(s)) => registers(s)
            .map(Some)
            .ok_or_else(|| Reply::err(INVALID_HLL)),
        _ => Ok(None),
    }
}

/// The HLL string at `key` to edit in place (None when absent).
fn string_mut<'a>(ctx: &'a mut Ctx, key: &[u8]) -> Option<&'a mut Vec<u8>> {
    match ctx.db.get_mut(key, ctx.now_ms).map(|e| &mut e.value) {
        Some(Value::Str(s)) => Some(crate::state::Str::make_mut(s)),
        _ => None,
    }
}

pub fn pfadd(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    // Validates the value (and the type) before anything changes.
    let created = !tri!(exists(ctx, &a[1]));
    if created {
        let now = ctx.now_ms;
        ctx.db.insert(
            &a[1],
            Value::Str(crate::state::Str::from(create())),
            None,
            now,
        );
    }
    let Some(s) = string_mut(ctx, &a[1]) else {
        return Reply::err(NOT_HLL);
    };
    let mut changed = created;
    for e in &a[2..] {
        let (i, c) = pattern(e);
        match set(s, i, c) {
            Ok(true) => changed = true,
            Ok(false) => {}
            Err(()) => return Reply::err(INVALID_HLL),
        }
    }
    if changed {
        invalidate_cache(s);
        ctx.dirty = true;
    }
    Reply::Int(changed as i64)
}

/// The cached cardinality in the header, when it is valid.
fn cached(s: &[u8]) -> Option<u64> {
    (s[15] & 0x80 == 0)
        .then(|| u64::from_le_bytes([s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15]]))
}

pub fn pfcount(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    if a.len() == 2 {
        // One key: Redis answers from the cached cardinality, or computes it and stores it in
        // the header (a change to the string, logged like any other).
        // The cache first: a valid one answers without decoding 16,384 registers.
        if !tri!(exists(ctx, &a[1])) {
            return Reply::Int(0);
        }
        if let Some(Value::Str(s)) = ctx.db.get(&a[1], ctx.now_ms).map(|e| &e.value) {
            if let Some(card) = cached(s) {
                return Reply::Int(card as i64);
            }
        }
        let Some(regs) = tri!(read(ctx, &a[1])) else {
            return Reply::Int(0);
        };
        let Some(s) = string_mut(ctx, &a[1]) else {
            return Reply::Int(0);
        };
        let card = count(&regs);
        s[8..16].copy_from_slice(&card.to_le_bytes());
        ctx.dirty = true;
        return Reply::Int(card as i64);
    }
    let mut union = vec![0u8; REGISTERS];
    for k in &a[1..] {
        if let Some(regs) = tri!(read(ctx, k)) {
            for (u, r) in union.iter_mut().zip(regs) {
                *u = (*u).max(r);
            }
        }
    }
    Reply::Int(count(&union) as i64)
}

pub fn pfmerge(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let mut union = vec![0u8; REGISTERS];
    let mut any_dense = false;
    for k in &a[1..] {
        if let Some(regs) = tri!(read(ctx, k)) {
            if let Some(Value::Str(s)) = ctx.db.get(k, ctx.now_ms).map(|e| &e.value) {
                any_dense |= s[4] == 0;
            }
            for (u, r) in union.iter_mut().zip(regs) {
                *u = (*u).max(r);
            }
        }
    }
    if ctx.db.get(&a[1], ctx.now_ms).is_none() {
        let now = ctx.now_ms;
        ctx.db.insert(
            &a[1],
            Value::Str(crate::state::Str::from(create())),
            None,
            now,
        );
    }
    let Some(s) = string_mut(ctx, &a[1]) else {
        return Reply::err(NOT_HLL);
    };
    // Like Redis: dense at once when any input is dense, else register by register (which
    // may promote on the way).
    if any_dense && to_dense(s).is_err() {
        return Reply::err(INVALID_HLL);
    }
    for (i, &m) in union.iter().enumerate() {
        if m != 0 && set(s, i, m).is_err() {
            return Reply::err(INVALID_HLL);
        }
    }
    invalidate_cache(s);
    ctx.dirty = true;
    Reply::ok()
}
