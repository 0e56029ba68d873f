//! The Redis protocol on the same store: a RESP listener (`--resp-listen`) beside the HTTP
//! one. A connection authenticates with a database's token (or an ACL user's), and its
//! commands go to the one executor as a REST request's do, through the one pipeline, into the
//! one log: a key written over REST is read over RESP at once, and the reverse. What only a
//! connection can carry is kept here and in the executor's `sessions`: MULTI/EXEC with
//! WATCH, the blocking commands, SUBSCRIBE and MONITOR, CLIENT.
//!
//! - `read`: Redis's request grammar, with its limits and error texts.
//! - `write`: replies in RESP2 and RESP3.
//! - `clients`: the open connections, for CLIENT LIST, KILL and UNBLOCK.
//! - `conn`: one connection.

pub mod clients;
pub mod conn;
pub mod read;
pub mod tls;
pub mod write;

pub use conn::{serve, Listener};
pub use read::{split_args, ProtocolError, Reader};
