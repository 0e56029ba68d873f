//! Command arguments' buffers, kept for reuse on the thread that let them go.
//!
//! A pipeline of 100 SETs is read into about 400 small buffers (each argument, each command's
//! vector), and all of them live until the request's record is written. Let go together, they
//! overflow the allocator's cache of freed chunks (glibc keeps 7 of a size a thread), and
//! reading the next pipeline took the allocator's slow path for nearly every one of them:
//! about a third of a pipeline's instructions went to `malloc` and `free`. The executor gives
//! a written record's arguments back here; the request readers take from here first. What is
//! kept is bounded (`ARG_SPARE_*` in `config`), per thread, and only what the executor's own
//! thread let go is found by the readers on that thread. It serves a client's pipelines one
//! after another; when many connections' pipelines are read before the executor runs them,
//! most of their buffers are allocated as before.

use crate::config::{
    ARG_SPARE_BUFFERS_MAX, ARG_SPARE_BUFFER_BYTES_MAX, ARG_SPARE_VECTORS_MAX,
    ARG_SPARE_VECTOR_ARGS_MAX,
};
use std::cell::RefCell;

thread_local! {
    static BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static VECTORS: RefCell<Vec<Vec<Vec<u8>>>> = const { RefCell::new(Vec::new()) };
}

/// A copy of `bytes`, in a kept buffer when there is one and it is small enough for one.
pub fn bytes(bytes: &[u8]) -> Vec<u8> {
    if bytes.len() > ARG_SPARE_BUFFER_BYTES_MAX {
        return bytes.to_vec();
    }
    let kept = BUFFERS.with(|b| b.try_borrow_mut().ok().and_then(|mut b| b.pop()));
    match kept {
        Some(mut v) => {
            v.extend_from_slice(bytes);
            v
        }
        None => bytes.to_vec(),
    }
}

/// An empty vector for one command's arguments, a kept one when there is one.
pub fn args() -> Vec<Vec<u8>> {
    VECTORS
        .with(|v| v.try_borrow_mut().ok().and_then(|mut v| v.pop()))
        .unwrap_or_else(|| Vec::with_capacity(4))
}

/// Takes the commands out of `cmds` and keeps their buffers, as far as the bounds allow; the
/// rest is freed. `cmds` is left empty, with its own room.
pub fn give_back(cmds: &mut Vec<Vec<Vec<u8>>>) {
    BUFFERS.with(|b| {
        VECTORS.with(|v| {
            let (Ok(mut b), Ok(mut v)) = (b.try_borrow_mut(), v.try_borrow_mut()) else {
                cmds.clear();
                return;
            };
            for mut cmd in cmds.drain(..) {
                for mut a in cmd.drain(..) {
                    if b.len() < ARG_SPARE_BUFFERS_MAX
                        && (1..=ARG_SPARE_BUFFER_BYTES_MAX).contains(&a.capacity())
                    {
                        a.clear();
                        b.push(a);
                    }
                }
                if v.len() < ARG_SPARE_VECTORS_MAX
                    && (1..=ARG_SPARE_VECTOR_ARGS_MAX).contains(&cmd.capacity())
                {
                    v.push(cmd);
                }
            }
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards what is kept for reuse: small buffers and vectors, emptied, up to the bounds;
    /// a large buffer or vector is freed, and what is handed out holds only what was asked.
    #[test]
    fn small_buffers_are_kept_emptied_and_bounded() {
        // This thread may have run other tests before.
        BUFFERS.with(|b| b.borrow_mut().clear());
        VECTORS.with(|v| v.borrow_mut().clear());
        let big = vec![0u8; ARG_SPARE_BUFFER_BYTES_MAX + 1];
        let mut wide = Vec::with_capacity(ARG_SPARE_VECTOR_ARGS_MAX + 1);
        wide.push(b"x".to_vec());
        let mut cmds = vec![
            vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()],
            vec![big],
            wide,
        ];
        give_back(&mut cmds);
        assert!(cmds.is_empty());
        let (kept, vectors) = (
            BUFFERS.with(|b| b.borrow().clone()),
            VECTORS.with(|v| v.borrow().len()),
        );
        // SET, k, v and x; not the large one. Two vectors: not the wide one.
        assert_eq!(kept.len(), 4);
        assert!(kept
            .iter()
            .all(|b| b.is_empty() && b.capacity() <= ARG_SPARE_BUFFER_BYTES_MAX));
        assert_eq!(vectors, 2);
        assert_eq!(bytes(b"value"), b"value");
        let a = args();
        assert!(a.is_empty());
        // The bounds hold however much is given back.
        let mut many: Vec<Vec<Vec<u8>>> = (0..ARG_SPARE_BUFFERS_MAX)
            .map(|_| vec![b"a".to_vec(), b"b".to_vec()])
            .collect();
        give_back(&mut many);
        assert_eq!(BUFFERS.with(|b| b.borrow().len()), ARG_SPARE_BUFFERS_MAX);
        assert_eq!(VECTORS.with(|v| v.borrow().len()), ARG_SPARE_VECTORS_MAX);
    }
}
