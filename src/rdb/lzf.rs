//! LZF, as Redis's `lzf_c.c` / `lzf_d.c` (liblzf 3.6 with Redis's settings: HLOG 16,
//! VERY_FAST, offsets in the hash table). The compressor follows the C code step by step, so
//! that a DUMP of a compressible value is the same bytes Redis writes.

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

fn idx(h: u32) -> usize {
    (((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5))) as usize) & (HSIZE - 1)
}

/// Compresses `input` into at most `out_max` bytes; `None` when it does not fit (Redis then
/// stores the string as it is).
pub fn compress(input: &[u8], out_max: usize) -> Option<Vec<u8>> {
    let in_len = input.len();
    if in_len == 0 || out_max == 0 {
        return None;
    }
    // Positions in `input`; 0 stands for "no entry", which the match test refuses anyway
    // (`ref > in_data`).
    let mut htab = vec![0usize; HSIZE];
    let mut out = vec![0u8; out_max];
    let mut ip = 0usize;
    let mut op = 1usize; // start run
    let mut lit = 0usize;
    let frst = |p: usize| ((input[p] as u32) << 8) | input[p + 1] as u32;
    let next = |v: u32, p: usize| (v << 8) | input[p + 2] as u32;
    let mut hval = if in_len >= 2 { frst(0) } else { 0 };
    while in_len >= 3 && ip < in_len - 2 {
        hval = next(hval, ip);
        let slot = idx(hval);
        let r = htab[slot];
        htab[slot] = ip;
        let is_match = r < ip
            && ip - r - 1 < MAX_OFF
            && r > 0
            && input[r + 2] == input[ip + 2]
            && input[r] == input[ip]
            && input[r + 1] == input[ip + 1];
        if is_match {
            let off = ip - r - 1;
            let mut len = 2usize;
            let maxlen = (in_len - ip - len).min(MAX_REF);
            if op + 3 + 1 >= out_max && op - usize::from(lit == 0) + 3 + 1 >= out_max {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1); // stop run
            op -= usize::from(lit == 0); // undo run if length is zero
            'scan: {
                if maxlen > 16 {
                    for _ in 0..16 {
                        len += 1;
                        if input[r + len] != input[ip + len] {
                            break 'scan;
                        }
                    }
                }
                loop {
                    len += 1;
                    if !(len < maxlen && input[r + len] == input[ip + len]) {
                        break;
                    }
                }
            }
            len -= 2;
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 1;
            lit = 0;
            op += 1; // start run
            ip += len + 1;
            if ip >= in_len - 2 {
                break;
            }
            ip -= 2;
            hval = frst(ip);
            hval = next(hval, ip);
            htab[idx(hval)] = ip;
            ip += 1;
            hval = next(hval, ip);
            htab[idx(hval)] = ip;
            ip += 1;
        } else {
            if op >= out_max {
                return None;
            }
            literal(&mut out, &mut op, &mut lit, input[ip]);
            ip += 1;
        }
    }
    if op + 3 > out_max {
        return None;
    }
    while ip < in_len {
        literal(&mut out, &mut op, &mut lit, input[ip]);
        ip += 1;
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1); // end run
    op -= usize::from(lit == 0);
    out.truncate(op);
    Some(out)
}

/// Copies one literal byte; a run that reaches `MAX_LIT` is closed and a new one started.
fn literal(out: &mut [u8], op: &mut usize, lit: &mut usize, b: u8) {
    *lit += 1;
    out[*op] = b;
    *op += 1;
    if *lit == MAX_LIT {
        out[*op - *lit - 1] = (*lit - 1) as u8;
        *lit = 0;
        *op += 1;
    }
}

/// Decompresses `input` to exactly `out_len` bytes; `None` for data that is not valid LZF or
/// does not come out at that length.
pub fn decompress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len);
    let mut ip = 0usize;
    while ip < input.len() {
        let ctrl = input[ip] as usize;
        ip += 1;
        if ctrl < 32 {
            // a literal run of ctrl + 1 bytes
            let n = ctrl + 1;
            let lits = input.get(ip..ip + n)?;
            if out.len() + n > out_len {
                return None;
            }
            out.extend_from_slice(lits);
            ip += n;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += *input.get(ip)? as usize;
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + *input.get(ip)? as usize + 1;
            ip += 1;
            len += 2;
            if back > out.len() || out.len() + len > out_len {
                return None;
            }
            let start = out.len() - back;
            for i in 0..len {
                let b = out[start + i];
                out.push(b);
            }
        }
    }
    (out.len() == out_len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let samples: Vec<Vec<u8>> = vec![
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".to_vec(),
            b"hello hello hello hello hello hello world".to_vec(),
            (0..5000u32).map(|i| (i % 251) as u8).collect(),
            (0..3000u32).map(|i| (i * 7 % 13) as u8).collect(),
        ];
        for s in samples {
            let c = compress(&s, s.len() - 4).expect("compressible");
            assert!(c.len() < s.len());
            assert_eq!(decompress(&c, s.len()).as_deref(), Some(&s[..]));
        }
    }

    #[test]
    fn refuses_what_does_not_shrink() {
        let s: Vec<u8> = (0..64u32).map(|i| (i * 37 % 256) as u8).collect();
        assert_eq!(compress(&s, s.len() - 4), None);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(decompress(&[0xe0, 0x05], 10), None);
        assert_eq!(decompress(&[0x05, b'a'], 6), None);
        assert_eq!(decompress(&[0x00, b'a'], 2), None);
    }
}
