//! Typed access to aggregate values (hashes, lists, sets, sorted sets), written once: the
//! WRONGTYPE check, creation of an empty value on first write, and removal of a key whose
//! value a write left empty (Redis never keeps empty aggregates).

use super::ctx::Ctx;
use crate::reply::{errors, Reply};
use crate::state::hash::Hash;
use crate::state::list::List;
use crate::state::scanmap::ScanMap;
use crate::state::stream::Stream;
use crate::state::zset::ZSet;
use crate::state::{Db, Value};

/// A value type that lives inside one `Value` variant.
pub trait Aggregate: Sized {
    fn of(v: &Value) -> Option<&Self>;
    fn of_mut(v: &mut Value) -> Option<&mut Self>;
    fn empty() -> Value;
    fn is_empty(&self) -> bool;
}

macro_rules! aggregate {
    ($t:ty, $variant:ident, $new:expr) => {
        impl Aggregate for $t {
            fn of(v: &Value) -> Option<&Self> {
                match v {
                    Value::$variant(x) => Some(&**x),
                    _ => None,
                }
            }
            fn of_mut(v: &mut Value) -> Option<&mut Self> {
                match v {
                    Value::$variant(x) => Some(&mut **x),
                    _ => None,
                }
            }
            fn empty() -> Value {
                Value::$variant(Box::new($new))
            }
            fn is_empty(&self) -> bool {
                <$t>::is_empty(self)
            }
        }
    };
}

aggregate!(Hash, Hash, Hash::new());
aggregate!(List, List, List::new());
aggregate!(ScanMap<()>, Set, ScanMap::new());
aggregate!(ZSet, ZSet, ZSet::new());

// A stream is not removed when it becomes empty (Redis keeps empty streams), so `is_empty`
// answers false for the drop-if-empty helper.
impl Aggregate for Box<Stream> {
    fn of(v: &Value) -> Option<&Self> {
        match v {
            Value::Stream(x) => Some(x),
            _ => None,
        }
    }
    fn of_mut(v: &mut Value) -> Option<&mut Self> {
        match v {
            Value::Stream(x) => Some(x),
            _ => None,
        }
    }
    fn empty() -> Value {
        Value::Stream(Box::new(Stream::new()))
    }
    fn is_empty(&self) -> bool {
        false
    }
}

/// The value at `key`: None when absent, WRONGTYPE when another type.
pub fn read<'a, T: Aggregate>(db: &'a Db, key: &[u8], now_ms: u64) -> Result<Option<&'a T>, Reply> {
    match db.get(key, now_ms) {
        None => Ok(None),
        Some(e) => T::of(&e.value)
            .map(Some)
            .ok_or_else(|| Reply::err(errors::WRONGTYPE)),
    }
}

/// The value at `key` for writing: None when absent, WRONGTYPE when another type.
pub fn existing<'a, T: Aggregate>(
    ctx: &'a mut Ctx,
    key: &[u8],
) -> Result<Option<&'a mut T>, Reply> {
    match ctx.db.get_mut(key, ctx.now_ms) {
        None => Ok(None),
        Some(e) => T::of_mut(&mut e.value)
            .map(Some)
            .ok_or_else(|| Reply::err(errors::WRONGTYPE)),
    }
}

/// The value at `key` for writing, created empty when absent.
pub fn create<'a, T: Aggregate>(ctx: &'a mut Ctx, key: &[u8]) -> Result<&'a mut T, Reply> {
    let now = ctx.now_ms;
    if existing::<T>(ctx, key)?.is_none() {
        ctx.db.insert(key, T::empty(), None, now);
    }
    match ctx.db.get_mut(key, now) {
        Some(e) => T::of_mut(&mut e.value).ok_or_else(|| Reply::err(errors::WRONGTYPE)),
        None => Err(Reply::err(errors::WRONGTYPE)),
    }
}

/// Removes `key` when a write left its value empty.
pub fn drop_if_empty<T: Aggregate>(ctx: &mut Ctx, key: &[u8]) {
    if let Ok(Some(v)) = read::<T>(ctx.db, key, ctx.now_ms) {
        if v.is_empty() {
            ctx.db.remove(key);
        }
    }
}
