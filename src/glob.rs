//! Redis's glob patterns (`stringmatchlen`), used by KEYS and SCAN, ACL key and channel
//! rules, PUBSUB and FUNCTION LIST. A leaf.

/// Redis's glob matcher (`stringmatchlen`): `*`, `?`, `[...]` with `^` and ranges, `\\`
/// escapes. Iterative, backtracking only to the last `*`, so it is O(len(pattern) *
/// len(string)) where the recursive form is exponential on patterns like `*a*a*a*b`.
pub fn glob_match(pattern: &[u8], s: &[u8], nocase: bool) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None; // (pattern index after '*', string index)
    while i < s.len() {
        let step = if p < pattern.len() {
            glob_token(pattern, p, s[i], nocase)
        } else {
            None
        };
        match step {
            Some(Token::Star) => {
                star = Some((p + 1, i));
                p += 1;
            }
            Some(Token::Matched(next)) => {
                p = next;
                i += 1;
            }
            Some(Token::Failed) | None => match star {
                Some((sp, si)) => {
                    p = sp;
                    i = si + 1;
                    star = Some((sp, si + 1));
                }
                None => return false,
            },
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

enum Token {
    Star,
    /// The token at the pattern index matched the character; the next token starts here.
    Matched(usize),
    Failed,
}

/// Matches one pattern token at `p` against the character `c`.
fn glob_token(pat: &[u8], p: usize, c: u8, nocase: bool) -> Option<Token> {
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    Some(match pat[p] {
        b'*' => Token::Star,
        b'?' => Token::Matched(p + 1),
        b'\\' if p + 1 < pat.len() => {
            if eq(pat[p + 1], c) {
                Token::Matched(p + 2)
            } else {
                Token::Failed
            }
        }
        b'[' => {
            let mut q = p + 1;
            let not = pat.get(q) == Some(&b'^');
            if not {
                q += 1;
            }
            let mut matched = false;
            loop {
                if q >= pat.len() {
                    // Unterminated class: Redis treats the end of the pattern as its end.
                    q = pat.len() - 1;
                    break;
                }
                if pat[q] == b'\\' && q + 1 < pat.len() {
                    q += 1;
                    if eq(pat[q], c) {
                        matched = true;
                    }
                } else if pat[q] == b']' {
                    break;
                } else if q + 2 < pat.len() && pat[q + 1] == b'-' {
                    let (mut lo, mut hi, mut ch) = (pat[q], pat[q + 2], c);
                    if lo > hi {
                        std::mem::swap(&mut lo, &mut hi);
                    }
                    if nocase {
                        lo = lo.to_ascii_lowercase();
                        hi = hi.to_ascii_lowercase();
                        ch = ch.to_ascii_lowercase();
                    }
                    q += 2;
                    if ch >= lo && ch <= hi {
                        matched = true;
                    }
                } else if eq(pat[q], c) {
                    matched = true;
                }
                q += 1;
            }
            if matched != not {
                Token::Matched(q + 1)
            } else {
                Token::Failed
            }
        }
        other => {
            if eq(other, c) {
                Token::Matched(p + 1)
            } else {
                Token::Failed
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn glob_cases() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes(), false);
        assert!(m("*", "") && m("*", "abc") && m("a*c", "abbbc") && m("a?c", "abc"));
        assert!(!m("a?c", "ac") && !m("a*d", "abc"));
        assert!(m("h[ae]llo", "hello") && m("h[^e]llo", "hallo") && !m("h[^e]llo", "hello"));
        assert!(
            m("h[a-b]llo", "hbllo")
                && m("h[b-a]llo", "hallo")
                && m("\\*x", "*x")
                && !m("\\*x", "ax")
        );
        assert!(
            !m("k[", "k[") && m("k[ab", "ka"),
            "an unterminated class ends at the pattern end"
        );
        // Linear time on the pattern that makes the recursive form exponential.
        let long = "a".repeat(5000);
        assert!(!glob_match(
            b"*a*a*a*a*a*a*a*a*a*a*b",
            long.as_bytes(),
            false
        ));
    }
}
