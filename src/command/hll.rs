//! HyperLogLog, as Redis computes it (hyperloglog.c): MurmurHash64A with Redis's seed, 16384
//! six-bit registers, the Ertl estimator, and the `HYLL` string header, so PFADD, PFCOUNT and
//! PFMERGE answer what Redis answers. tidepool writes the dense encoding (a valid Redis HLL
//! string) and reads Redis's sparse one too; Redis would write small HLLs sparse, so GET's bytes
//! differ from Redis's for those.

use super::strings::tri;
use super::Ctx;
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

/// The dense HLL string for `regs`, with the cached cardinality marked invalid.
fn dense(regs: &[u8]) -> Vec<u8> {
    let mut s = vec![0u8; DENSE_SIZE];
    s[0..4].copy_from_slice(b"HYLL");
    s[15] |= 0x80;
    let d = &mut s[HDR..];
    for (r, &v) in regs.iter().enumerate() {
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
    s
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

/// The registers at `key`: None when absent, an error when it is not an HLL.
fn read(ctx: &Ctx, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    match ctx.db.get(key, ctx.now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Str(s)) => registers(s).map(Some).ok_or_else(|| Reply::err(NOT_HLL)),
        Some(_) => Err(Reply::err(errors::WRONGTYPE)),
    }
}

fn write(ctx: &mut Ctx, key: &[u8], regs: &[u8]) {
    let now = ctx.now_ms;
    let value = Value::Str(dense(regs));
    match ctx.db.get_mut(key, now) {
        Some(e) => e.value = value,
        None => ctx.db.insert(key, value, None, now),
    }
    ctx.dirty = true;
}

pub fn pfadd(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
    let existing = tri!(read(ctx, &a[1]));
    let created = existing.is_none();
    let mut regs = existing.unwrap_or_else(|| vec![0u8; REGISTERS]);
    let mut changed = created;
    for e in &a[2..] {
        let (i, c) = pattern(e);
        if regs[i] < c {
            regs[i] = c;
            changed = true;
        }
    }
    if changed {
        write(ctx, &a[1], &regs);
    }
    Reply::Int(changed as i64)
}

pub fn pfcount(ctx: &mut Ctx, a: &[Vec<u8>]) -> Reply {
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
    for k in &a[1..] {
        if let Some(regs) = tri!(read(ctx, k)) {
            for (u, r) in union.iter_mut().zip(regs) {
                *u = (*u).max(r);
            }
        }
    }
    write(ctx, &a[1], &union);
    Reply::ok()
}
