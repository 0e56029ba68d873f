//! The Lua engine: Redis 7.0's Lua 5.1 (through `mlua`, vendored) with its `redis` table,
//! `cjson` and `bit` libraries, reply conversions, error texts, read-only globals, the script
//! cache, function libraries, and the stop (time limit, SCRIPT KILL) that no `pcall` can catch.
//! Checked against redis-server 7.0 by the scripting tests.
//!
//! The engine knows no command: `redis.call` and `redis.pcall` hand their arguments to the
//! `call` function the caller gives (the command layer's one pipeline, `command::run_checked`),
//! so a command from Lua is checked and run exactly as one from REST. What EVAL and FCALL mean
//! (keys, logging by effects, SCRIPT and FUNCTION) is `command::scripting`'s.

mod libs;
mod packing;

use crate::config::{
    LUA_HOOK_INSTRUCTIONS, LUA_MEMORY_BYTES_MAX, LUA_REPLY_DEPTH_MAX, LUA_REPLY_ELEMENTS_MAX,
    SCRIPT_TIME_LIMIT_MS,
};
use crate::cooling::Coolings;
use crate::reply::{Reply, Resp3};
use crate::state::databases::{DbId, DEFAULT_DB};
use crate::state::Db;
use mlua::{Function, Lua, MultiValue, Table, Value};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `redis.call` runs: a command's arguments and whether the script is read-only, to its
/// reply.
pub type Call<'a> = dyn FnMut(Vec<Vec<u8>>, bool) -> Reply + 'a;

/// Runs `f`, which may take long (Lua: up to the script time limit), with this runtime
/// thread's other tasks handed to another thread meanwhile, so that connections go on being
/// accepted and answered (SCRIPT KILL among them) while the executor is busy.
fn beside_the_runtime<R>(f: impl FnOnce() -> R) -> R {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// What runs in Lua now, and whether it must stop. Shared with the HTTP side, which answers
/// SCRIPT KILL and FUNCTION KILL while the executor is busy running the script.
///
/// Once set, a stop cannot be caught: the instruction hook raises it, and so does every
/// `pcall`/`xpcall` that returns (they are wrapped), so the error climbs out of every
/// protected call to the top, as Redis re-raises a kill on each following line.
#[derive(Default)]
pub struct ScriptControl {
    /// [`IDLE`], [`RUNNING_SCRIPT`], [`RUNNING_FUNCTION`] or [`LOADING_LIBRARY`].
    running: AtomicU8,
    /// [`GO_ON`], [`KILLED`] or [`TIMED_OUT`].
    stop: AtomicU8,
    /// The database whose request runs Lua now: only that database's tokens may stop it.
    db: std::sync::atomic::AtomicU32,
    /// The time limit of the Lua code running now, for the error that stops it.
    limit_ms: std::sync::atomic::AtomicU64,
    /// The Lua code running now has written: SCRIPT KILL and FUNCTION KILL refuse to stop it
    /// (UNKILLABLE), so that no script is left half applied.
    wrote: std::sync::atomic::AtomicBool,
}

/// What a kill command stops: SCRIPT KILL a script, FUNCTION KILL a function (the command
/// table's rows say which command is which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    Script,
    Function,
}

const IDLE: u8 = 0;
const RUNNING_SCRIPT: u8 = 1;
const RUNNING_FUNCTION: u8 = 2;
const LOADING_LIBRARY: u8 = 3;
const GO_ON: u8 = 0;
const KILLED: u8 = 1;
const TIMED_OUT: u8 = 2;

impl ScriptControl {
    /// The running Lua code wrote (see `wrote`).
    pub fn note_write(&self) {
        self.wrote.store(true, Ordering::Release);
    }

    /// SCRIPT KILL or FUNCTION KILL (`what`), arriving while the executor may be busy:
    /// `Some(reply)` when a script or function of database `db` is running (told to stop,
    /// when it is of the kind named), `None` when nothing of it runs (the executor answers
    /// then, as usual).
    pub fn kill(&self, what: Interrupt, db: DbId) -> Option<Reply> {
        let function = what == Interrupt::Function;
        if self.db.load(Ordering::Acquire) != db {
            // Another database's script: this one's request waits its turn like any other.
            return None;
        }
        let running = self.running.load(Ordering::Acquire);
        match (running, function) {
            (RUNNING_SCRIPT, false) | (RUNNING_FUNCTION, true)
                if self.wrote.load(Ordering::Acquire) =>
            {
                Some(Reply::err("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."))
            }
            (RUNNING_SCRIPT, false) | (RUNNING_FUNCTION, true) => {
                self.stop.store(KILLED, Ordering::Release);
                Some(Reply::ok())
            }
            (RUNNING_SCRIPT, true) => {
                Some(Reply::err("NOTBUSY No scripts in execution right now."))
            }
            (RUNNING_FUNCTION, false) => Some(Reply::err(
                "BUSY Redis is busy running a function. You can only call FUNCTION KILL.",
            )),
            _ => None,
        }
    }

    /// The error a stopped script gets, or None while it may go on.
    fn stopped(&self) -> Option<String> {
        match self.stop.load(Ordering::Acquire) {
            GO_ON => None,
            KILLED => Some("Script killed by user with SCRIPT KILL...".into()),
            _ => Some(format!(
                "tidepool stopped the script after {} ms (this database's script time limit)",
                self.limit_ms.load(Ordering::Acquire)
            )),
        }
    }
}

/// The Lua side: error handler (it finds the user script's line as Redis's does), the `redis`
/// table, and the global-variable protection. `bridge.call` is set per run to the Rust function
/// that executes a command; it answers `ok, reply`.
const PRELUDE: &str = r#"
local bridge = ...
local dbg = debug
-- The prelude's own functions also run while a library loads, when the globals are only the
-- library API: everything they use is a local.
local error, type, tostring, select, pairs, ipairs, xpcall, sfind, sgsub, ssub =
  error, type, tostring, select, pairs, ipairs, xpcall, string.find, string.gsub, string.sub
local function user_frame()
  for level = 2, 50 do
    local i = dbg.getinfo(level, 'Sl')
    if not i then return nil end
    if i.source == '@user_script' or i.source == '@user_function' then return i end
  end
end
bridge.handler = function(err)
  if type(err) == 'userdata' and bridge.last_err then
    -- A failed redis.call: the Rust side left the reply, with the script's line, here.
    err = bridge.last_err
    bridge.last_err = nil
    return err
  end
  local i = user_frame()
  if type(err) == 'userdata' then
    -- An error raised by Rust (the time limit, a kill): its text without mlua's prefix.
    local text = sgsub(tostring(err), '^runtime error: ', '')
    local at = sfind(text, '\nstack traceback:', 1, true)
    if at then text = ssub(text, 1, at - 1) end
    err = {err = 'ERR ' .. text}
  elseif type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  if i then err['source'] = i.source; err['line'] = i.currentline end
  return err
end
bridge.xpcall = xpcall
local redis = {}
bridge.redis = redis
redis.error_reply = function(msg)
  if type(msg) ~= 'string' then error('wrong number or type of arguments', 2) end
  return {err = msg}
end
redis.status_reply = function(msg)
  if type(msg) ~= 'string' then error('wrong number or type of arguments', 2) end
  return {ok = msg}
end
redis.sha1hex = function(s) return bridge.sha1hex(s) end
redis.log = function() end
redis.LOG_DEBUG = 0; redis.LOG_VERBOSE = 1; redis.LOG_NOTICE = 2; redis.LOG_WARNING = 3
do
  -- The protocol redis.call answers in for the rest of this script (2 until set): C's int
  -- cast of the argument, as Redis reads it.
  local select, tonumber, floor, ceil = select, tonumber, math.floor, math.ceil
  redis.setresp = function(...)
    if select('#', ...) ~= 1 then
      error({err = 'ERR redis.setresp() requires one argument.'})
    end
    local v = tonumber((...))
    if v ~= nil then v = v >= 0 and floor(v) or ceil(v) end
    if v ~= 2 and v ~= 3 then error({err = 'ERR RESP version must be 2 or 3.'}) end
    bridge.set_resp(v == 3)
  end
end
redis.replicate_commands = function() return true end
redis.set_repl = function() end
redis.REPL_NONE = 0; redis.REPL_SLAVE = 1; redis.REPL_REPLICA = 1; redis.REPL_AOF = 2; redis.REPL_ALL = 3
redis.breakpoint = function() return false end
redis.debug = function() end
redis.REDIS_VERSION = '7.0.15'
redis.REDIS_VERSION_NUM = 0x07000f
debug = nil
loadfile = nil
dofile = nil
-- Read-only globals and libraries, as Redis 7 makes them: the globals move to a hidden table
-- that _G reads through, so every assignment to a global (new or existing) is refused, and the
-- library tables scripts share are read-only proxies. A script cannot change what the next
-- one finds.
local rawset, pairs, setmetatable, error, tostring = rawset, pairs, setmetatable, error, tostring
-- As metamethods, level 2 of these errors is the script's assignment or read.
local function refuse_write() error('Attempt to modify a readonly table', 2) end
local function strict_index(lookup)
  return function(t, k)
    local v = lookup(k)
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    return v
  end
end
local function readonly(t)
  return setmetatable({}, {__index = t, __newindex = refuse_write, __metatable = false})
end
local env = _G
local G = {}
for k, v in pairs(env) do G[k] = v end
for k in pairs(G) do rawset(env, k, nil) end
G.redis = readonly(redis)
G.string = readonly(G.string)
G.math = readonly(G.math)
G.table = readonly(G.table)
-- Redis's bundled cjson, bit, cmsgpack and struct libraries (src/lua/libs.rs, packing.rs).
G.cjson = readonly(bridge.cjson)
G.bit = readonly(bridge.bit)
G.cmsgpack = readonly(bridge.cmsgpack)
G.struct = readonly(bridge.struct)
-- A stop (time limit, SCRIPT KILL) is raised again by every protected call that returns, so
-- pcall cannot swallow it: it climbs to the top.
local rawpcall, rawxpcall, recheck = G.pcall, G.xpcall, bridge.recheck
G.pcall = function(...) return recheck(rawpcall(...)) end
G.xpcall = function(...) return recheck(rawxpcall(...)) end
bridge.G = G
-- Function libraries: while one loads, the globals are only this API (as in Redis 7), and
-- register_function collects into bridge.pending.
local FUNCTION_FLAGS = {
  ['no-writes'] = true, ['allow-oom'] = true, ['allow-stale'] = true, ['no-cluster'] = true,
  ['allow-cross-slot-keys'] = true,
}
local function reg_error(msg) error({err = msg}, 0) end
local libapi = {}
libapi.register_function = function(...)
  local n = select('#', ...)
  local name, cb, flags, desc
  if n == 1 and type((...)) == 'table' then
    for k, v in pairs((...)) do
      if k == 'function_name' then name = v
      elseif k == 'callback' then cb = v
      elseif k == 'flags' then flags = v
      elseif k == 'description' then desc = v
      else reg_error('ERR unknown argument given to redis.register_function') end
    end
    if name == nil then reg_error('ERR redis.register_function must get a function name argument') end
    if cb == nil then reg_error('ERR redis.register_function must get a callback argument') end
  elseif n == 2 then
    name, cb = ...
  else
    reg_error('ERR wrong number of arguments to redis.register_function')
  end
  if type(name) ~= 'string' or not sfind(name, '^[%w_]+$') then
    reg_error('ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
  end
  if type(cb) ~= 'function' then
    reg_error('ERR second argument to redis.register_function must be a function')
  end
  local fl = {}
  if flags ~= nil then
    if type(flags) ~= 'table' then reg_error('ERR unknown flag given') end
    for _, f in ipairs(flags) do
      if not FUNCTION_FLAGS[f] then reg_error('ERR unknown flag given') end
      fl[#fl + 1] = f
    end
  end
  if bridge.pending[name] then reg_error('ERR Function already exists in the library') end
  bridge.pending[name] = {cb = cb, flags = fl, description = desc}
end
libapi.log = function() end
libapi.LOG_DEBUG = 0; libapi.LOG_VERBOSE = 1; libapi.LOG_NOTICE = 2; libapi.LOG_WARNING = 3
libapi.REDIS_VERSION = '7.0.15'
libapi.REDIS_VERSION_NUM = 0x07000f
-- While loading, reading what the library API lacks (redis.call) fails as a missing global.
local LOADG = {redis = setmetatable({}, {
  __index = strict_index(function(k) return libapi[k] end),
  __newindex = refuse_write,
  __metatable = false,
})}
local current = G
bridge.load_mode = function(on) if on then current = LOADG else current = G end end
bridge.invoke = function(f, keys, args)
  return xpcall(function() return f(keys, args) end, bridge.handler)
end
setmetatable(env, {
  __index = strict_index(function(k) return current[k] end),
  __newindex = refuse_write,
  __metatable = false,
})
"#;

pub struct Scripts {
    lua: Lua,
    bridge: Table,
    control: Arc<ScriptControl>,
    /// Compiled scripts by database and SHA-1 (lowercase hex): each database has its own
    /// script cache.
    compiled: HashMap<(DbId, String), Compiled>,
    /// The database whose request runs now (see [`Scripts::enter`]).
    db: DbId,
    /// Its script time limit: for all the Lua code one request runs together (a pipeline of
    /// scripts shares it, and so do the library loads a call needs).
    limit_ms: u64,
    /// When the request began (see `enter`).
    job_started: Instant,
    /// Databases whose scripts ran past their time limit lately, and until when their
    /// scripts are refused.
    cooling: RefCell<Coolings<DbId, ()>>,
    /// When the Lua code running now started.
    run_started: std::cell::Cell<Instant>,
    /// Library functions by name, loaded from the libraries in the database.
    functions: HashMap<String, FnDef>,
    /// Library name to its code and its functions' names, in registration order.
    pub libraries: BTreeMap<String, (Vec<u8>, Vec<String>)>,
    /// The database and its `functions_version` these were loaded from.
    loaded_version: Option<(DbId, u64)>,
}

/// A function a library registered.
pub struct FnDef {
    function: Function,
    pub flags: Vec<String>,
    pub description: Option<String>,
}

struct Compiled {
    function: Function,
    /// Redis 7 script flags from a `#!lua flags=...` first line (None: no shebang).
    flags: Option<Vec<String>>,
}

/// The shebang flags tidepool accepts: Redis 7.0's, and `allow-key-locking` (Redis 8), which
/// @upstash/ratelimit sends and the hosted service accepts. They change nothing here but
/// `no-writes` (a single executor has no OOM, staleness, cluster or key locks to relax).
const SHEBANG_FLAGS: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
    "allow-key-locking",
];

/// A `#!lua [flags=a,b]` first line: its flags and where the script proper starts (at the
/// line feed, so line numbers stay the user's).
fn shebang(body: &[u8]) -> Result<Option<(Vec<String>, usize)>, Reply> {
    if !body.starts_with(b"#!") {
        return Ok(None);
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err(Reply::err("ERR Invalid script shebang"));
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if engine != "#!lua" {
        return Err(Reply::Error(format!(
            "ERR Unexpected engine in script shebang: {engine}"
        )));
    }
    let mut flags = Vec::new();
    for p in parts {
        let Some(list) = p.strip_prefix("flags=") else {
            return Err(Reply::Error(format!("ERR Unknown lua shebang option: {p}")));
        };
        for f in list.split(',').filter(|f| !f.is_empty()) {
            if !SHEBANG_FLAGS.contains(&f) {
                return Err(Reply::Error(format!(
                    "ERR Unexpected flag in script shebang: {f}"
                )));
            }
            flags.push(f.to_string());
        }
    }
    Ok(Some((flags, end)))
}

/// `#!lua name=<library>` on the first line: the library's name and where its code starts (at
/// the line feed, so line numbers stay the user's).
pub fn library_header(code: &[u8]) -> Result<(String, usize), Reply> {
    if !code.starts_with(b"#!") {
        return Err(Reply::err("ERR Missing library metadata"));
    }
    let end = code.iter().position(|&b| b == b'\n').unwrap_or(code.len());
    let line = String::from_utf8_lossy(&code[2..end]);
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if engine != "lua" {
        return Err(Reply::Error(format!("ERR Engine '{engine}' not found")));
    }
    let mut name = None;
    for p in parts {
        match p.strip_prefix("name=") {
            Some(n) => name = Some(n.to_string()),
            None => {
                return Err(Reply::Error(format!(
                    "ERR Invalid metadata value given: {p}"
                )))
            }
        }
    }
    let Some(name) = name else {
        return Err(Reply::err("ERR Library name was not given"));
    };
    if !valid_name(&name) {
        return Err(Reply::err(
            "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
        ));
    }
    Ok((name, end))
}

/// Library and function names: letters, digits and `_`, at least one.
pub fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub fn sha1hex(body: &[u8]) -> String {
    sha1_smol::Sha1::from(body).digest().to_string()
}

impl Scripts {
    pub fn new(control: Arc<ScriptControl>) -> Result<Scripts, String> {
        let fail = |e: mlua::Error| format!("cannot start Lua: {e}");
        // With the debug library, for the prelude's error handler, which removes it.
        let lua = crate::sys::lua_with_debug();
        let bridge = lua.create_table().map_err(fail)?;
        let sha = lua
            .create_function(|lua, s: mlua::LuaString| lua.create_string(sha1hex(&s.as_bytes())))
            .map_err(fail)?;
        bridge.set("sha1hex", sha).map_err(fail)?;
        libs::install(&lua, &bridge).map_err(fail)?;
        packing::install(&lua, &bridge).map_err(fail)?;
        let watch = control.clone();
        let recheck = lua
            .create_function(move |_, results: MultiValue| match watch.stopped() {
                Some(why) => Err(mlua::Error::RuntimeError(why)),
                None => Ok(results),
            })
            .map_err(fail)?;
        bridge.set("recheck", recheck).map_err(fail)?;
        lua.load(PRELUDE)
            .set_name("=prelude")
            .call::<()>(bridge.clone())
            .map_err(fail)?;
        // Lua's own memory is bounded: `string.rep('x', 2^30)` fails with "not enough memory"
        // instead of taking the machine's.
        lua.set_memory_limit(LUA_MEMORY_BYTES_MAX).map_err(fail)?;
        Ok(Scripts {
            lua,
            bridge,
            control,
            compiled: HashMap::new(),
            db: DEFAULT_DB,
            limit_ms: SCRIPT_TIME_LIMIT_MS,
            job_started: Instant::now(),
            cooling: RefCell::new(Coolings::default()),
            run_started: std::cell::Cell::new(Instant::now()),
            functions: HashMap::new(),
            libraries: BTreeMap::new(),
            loaded_version: None,
        })
    }

    /// Starts the stop watch for Lua code of kind `running`: the instruction hook stops it
    /// past the time limit or when it is killed.
    fn arm(&self, running: u8) -> mlua::Result<()> {
        self.control.stop.store(GO_ON, Ordering::Release);
        self.control.wrote.store(false, Ordering::Release);
        self.control.running.store(running, Ordering::Release);
        let started = Instant::now();
        self.run_started.set(started);
        // What is left of the request's budget: one request's Lua code together runs at most
        // the database's limit, however many scripts it sends.
        let limit = Duration::from_millis(self.limit_ms).saturating_sub(self.job_started.elapsed());
        self.control
            .limit_ms
            .store(self.limit_ms, Ordering::Release);
        let control = self.control.clone();
        self.lua.set_hook(
            mlua::HookTriggers::new().every_nth_instruction(LUA_HOOK_INSTRUCTIONS),
            move |_, _| {
                if control.stop.load(Ordering::Acquire) == GO_ON && started.elapsed() > limit {
                    control.stop.store(TIMED_OUT, Ordering::Release);
                }
                match control.stopped() {
                    Some(why) => Err(mlua::Error::RuntimeError(why)),
                    None => Ok(mlua::VmState::Continue),
                }
            },
        )
    }

    /// Stops the stop watch, and gives back memory when a run left much of it in use. A run
    /// that went past the time limit puts the database's scripts in a cooling period.
    fn disarm(&self) {
        self.lua.remove_hook();
        if self.control.stop.load(Ordering::Acquire) == TIMED_OUT {
            self.timed_out();
        }
        self.control.running.store(IDLE, Ordering::Release);
        self.control.stop.store(GO_ON, Ordering::Release);
        if self.lua.used_memory() > LUA_MEMORY_BYTES_MAX / 2 {
            self.lua.gc_collect().ok();
        }
    }

    /// Scripts and functions from now on are those of database `db`, each call held to
    /// `limit_ms`.
    pub fn enter(&mut self, db: DbId, limit_ms: u64) {
        self.db = db;
        self.limit_ms = limit_ms;
        self.job_started = Instant::now();
        self.control.db.store(db, Ordering::Release);
    }

    /// A run of this database's Lua code went past its time limit: its scripts are refused
    /// for SCRIPT_COOLING_MS, doubled for each such run in a row, up to SCRIPT_COOLING_MAX_MS.
    fn timed_out(&self) {
        self.cooling.borrow_mut().cool(self.db, Instant::now(), ());
    }

    /// The refusal of a script or function while this database cools down, or None.
    pub fn cooling_refusal(&self) -> Option<Reply> {
        let cooling = self.cooling.borrow();
        let (c, left) = cooling.left(self.db)?;
        let why = format!("a script ran past its time limit of {} ms", self.limit_ms);
        Some(Reply::Error(format!(
            "ERR this database's scripts are refused for {} ms more: {why} ({} time{} in a row)",
            left.as_millis().max(1),
            c.hits,
            if c.hits == 1 { "" } else { "s" }
        )))
    }

    /// Whether this database's scripts are refused now (cooling down).
    pub fn cooling(&self) -> bool {
        self.cooling_refusal().is_some()
    }

    /// Forgets a deleted database's scripts.
    pub fn forget(&mut self, db: DbId) {
        self.compiled.retain(|(d, _), _| *d != db);
        if self.loaded_version.is_some_and(|(d, _)| d == db) {
            self.loaded_version = None;
        }
    }

    /// Compiles and caches `body`; its SHA-1, or Redis's compile error.
    pub fn load(&mut self, body: &[u8]) -> Result<String, Reply> {
        let sha = sha1hex(body);
        if self.compiled.contains_key(&(self.db, sha.clone())) {
            return Ok(sha);
        }
        let (flags, start) = match shebang(body)? {
            Some((flags, start)) => (Some(flags), start),
            None => (None, 0),
        };
        match self
            .lua
            .load(&body[start..])
            .set_name("@user_script")
            .into_function()
        {
            Ok(function) => {
                self.compiled
                    .insert((self.db, sha.clone()), Compiled { function, flags });
                Ok(sha)
            }
            Err(e) => Err(Reply::Error(format!(
                "ERR Error compiling script (new function): {}",
                lua_message(&e)
            ))),
        }
    }

    /// Runs a library's code (FUNCTION LOAD) with only the library API as globals: its name
    /// and the functions it registers, or Redis's error.
    pub fn check_library(&self, code: &[u8]) -> Result<(String, Vec<(String, FnDef)>), Reply> {
        if let Some(refusal) = self.cooling_refusal() {
            return Err(refusal);
        }
        beside_the_runtime(|| self.check_library_here(code))
    }

    fn check_library_here(&self, code: &[u8]) -> Result<(String, Vec<(String, FnDef)>), Reply> {
        let (name, start) = library_header(code)?;
        let chunk = self
            .lua
            .load(&code[start..])
            .set_name("@user_function")
            .into_function()
            .map_err(|e| {
                Reply::Error(format!("ERR Error compiling function: {}", lua_message(&e)))
            })?;
        let run = || -> mlua::Result<(bool, Value)> {
            self.bridge.set("pending", self.lua.create_table()?)?;
            let load_mode: Function = self.bridge.get("load_mode")?;
            load_mode.call::<()>(true)?;
            let xpcall: Function = self.bridge.get("xpcall")?;
            let handler: Function = self.bridge.get("handler")?;
            // Loading runs the library's top level: it is held to the same limits as a script.
            self.arm(LOADING_LIBRARY)?;
            let out = xpcall.call::<(bool, Value)>((chunk, handler));
            self.disarm();
            load_mode.call::<()>(false)?;
            out
        };
        let fail = |m: String| Reply::Error(format!("ERR Error registering functions: {m}"));
        match run() {
            Ok((true, _)) => {}
            Ok((false, v)) => return Err(fail(error_text(v, None))),
            Err(e) => return Err(fail(format!("ERR {}", lua_message(&e)))),
        }
        let pending: Table = self
            .bridge
            .get("pending")
            .map_err(|e| fail(format!("ERR {e}")))?;
        let mut defs = Vec::new();
        for pair in pending.pairs::<String, Table>() {
            let (fname, t) = pair.map_err(|e| fail(format!("ERR {e}")))?;
            let function: Function = t.get("cb").map_err(|e| fail(format!("ERR {e}")))?;
            let flags: Vec<String> = t.get("flags").unwrap_or_default();
            let description: Option<String> = t.get("description").ok().flatten();
            defs.push((
                fname,
                FnDef {
                    function,
                    flags,
                    description,
                },
            ));
        }
        if defs.is_empty() {
            return Err(Reply::err("ERR No functions registered"));
        }
        defs.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((name, defs))
    }

    /// Loads the database's libraries again when they changed (FUNCTION LOAD, DELETE, FLUSH,
    /// or replay at start-up).
    pub fn sync(&mut self, db: &Db) {
        if self.loaded_version == Some((self.db, db.functions_version())) {
            return;
        }

        // All libraries in one hand-over of the runtime thread, not one each.
        let loaded: Vec<_> = beside_the_runtime(|| {
            db.functions()
                .iter()
                // Checked when it was loaded; a library that no longer loads is left out.
                .filter_map(|(lib, code)| Some((lib, code, self.check_library_here(code).ok()?.1)))
                .collect()
        });
        self.functions.clear();
        self.libraries.clear();
        for (lib, code, defs) in loaded {
            let names = defs.iter().map(|(n, _)| n.clone()).collect();
            self.functions.extend(defs);
            self.libraries.insert(lib.clone(), (code.clone(), names));
        }
        self.loaded_version = Some((self.db, db.functions_version()));
    }

    pub fn function(&self, name: &str) -> Option<&FnDef> {
        self.functions.get(name)
    }

    pub fn exists(&self, sha: &[u8]) -> bool {
        self.compiled
            .contains_key(&(self.db, String::from_utf8_lossy(sha).to_ascii_lowercase()))
    }

    pub fn flush(&mut self) {
        let db = self.db;
        self.compiled.retain(|(d, _), _| *d != db);
        self.lua.gc_collect().ok();
    }
}

/// The message of a Lua error, without mlua's traceback decoration.
fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        other => other.to_string(),
    }
}

const RO_WITH_WRITE_FLAG: &str = "ERR Can not execute a script with write flag using *_ro command.";

/// Whether code with declared `flags` runs read-only when called as `read_only` (the `_RO`
/// forms): `no-writes` makes it so; code that may write refuses the `_RO` forms.
fn declared_read_only(flags: &[String], read_only: bool) -> Result<bool, Reply> {
    if flags.iter().any(|f| f == "no-writes") {
        Ok(true)
    } else if read_only {
        Err(Reply::err(RO_WITH_WRITE_FLAG))
    } else {
        Ok(false)
    }
}

/// The text of an error the handler returned: its `err`, and for a script or function (`label`)
/// Redis's " script: <label>, on <source>:<line>." when the line is known.
fn error_text(v: Value, label: Option<&str>) -> String {
    let t = match v {
        Value::Table(t) => t,
        // Lua hands a memory error to no handler: its message comes as a string.
        Value::String(s) => return format!("ERR {}", s.to_string_lossy()),
        other => return format!("ERR {other:?}"),
    };
    let msg: String = t
        .raw_get::<Option<String>>("err")
        .ok()
        .flatten()
        .unwrap_or_else(|| "ERR unknown error".into());
    let source: Option<String> = t.raw_get("source").ok().flatten();
    let line: Option<i64> = t.raw_get("line").ok().flatten();
    match (label, source, line) {
        (Some(label), Some(s), Some(l)) => format!("{msg} script: {label}, on {s}:{l}."),
        _ => msg,
    }
}

fn err_table(lua: &Lua, msg: &str) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.set("err", msg)?;
    Ok(Value::Table(t))
}

/// A command reply as Redis hands it to Lua (RESP2 rules).
fn reply_to_lua(lua: &Lua, r: Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Int(n) => Value::Integer(n),
        Reply::Bulk(b) => Value::String(lua.create_string(&b)?),
        Reply::Nil | Reply::NilArray => Value::Boolean(false),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", s)?;
            Value::Table(t)
        }
        Reply::Error(e) => err_table(lua, &e)?,
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, reply_to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Typed(t) => reply_to_lua(lua, t.1)?,
    })
}

/// Redis's `(long long)` cast of a Lua number, as x86-64 does it: toward zero, and the
/// "integer indefinite" (i64::MIN) for NaN and for what does not fit (Rust's `as` would
/// saturate instead). Lua 5.1 numbers are doubles, so i64::MAX itself comes back out of range.
fn c_long_long(f: f64) -> i64 {
    // NaN fails the range test too.
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

/// A script's return value as a reply (Redis's Lua-to-RESP conversion; after
/// `redis.setresp(3)` a boolean is RESP3's, `:1`/`:0` in RESP2, as Redis converts it). Tables
/// nested past [`LUA_REPLY_DEPTH_MAX`] end in Redis's "reached lua stack limit" error at that
/// depth, as Redis ends them at its Lua stack's limit, instead of recursing without bound; and
/// a reply of more than [`LUA_REPLY_ELEMENTS_MAX`] elements (a table reached twice counts
/// twice: one that holds itself in two places doubles at each level) is refused whole, so the
/// conversion, which runs after the script's time limit, ends.
fn lua_to_reply(v: Value, resp3: bool) -> Reply {
    let mut conv = Conv {
        left: LUA_REPLY_ELEMENTS_MAX + 1,
        resp3,
    };
    let r = conv.reply(v, 0);
    if conv.left == 0 {
        return Reply::Error(format!(
            "ERR the script's reply has more than {LUA_REPLY_ELEMENTS_MAX} elements"
        ));
    }
    r
}

/// One conversion's state: elements it may still make, and the script's protocol.
struct Conv {
    left: usize,
    resp3: bool,
}

impl Conv {
    fn reply(&mut self, v: Value, depth: usize) -> Reply {
        if self.left == 0 {
            return Reply::Nil;
        }
        self.left -= 1;
        match v {
            Value::Nil => Reply::Nil,
            Value::Boolean(b) if self.resp3 => typed(Resp3::Bool, Reply::Int(i64::from(b))),
            Value::Boolean(true) => Reply::Int(1),
            Value::Boolean(false) => Reply::Nil,
            Value::Integer(n) => Reply::Int(n),
            Value::Number(f) => Reply::Int(c_long_long(f)),
            Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
            Value::Table(_) if depth >= LUA_REPLY_DEPTH_MAX => {
                Reply::err("ERR reached lua stack limit")
            }
            Value::Table(t) => self.table(t, depth),
            _ => Reply::Nil,
        }
    }

    fn table(&mut self, t: Table, depth: usize) -> Reply {
        // The texts of one-line replies lose their CRs and LFs, as Redis maps them to spaces.
        let one_line = |b: &[u8]| -> Vec<u8> {
            b.iter()
                .map(|c| if matches!(c, b'\r' | b'\n') { b' ' } else { *c })
                .collect()
        };
        if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
            return Reply::Error(String::from_utf8_lossy(&one_line(&e.as_bytes())).into_owned());
        }
        if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
            return Reply::Status(
                String::from_utf8_lossy(&one_line(&s.as_bytes()))
                    .into_owned()
                    .into(),
            );
        }
        // The RESP3 types a script may return, tried in Redis's order; a field of the wrong
        // Lua type is passed over, as Redis passes it over.
        if let Ok(Value::Integer(n)) = t.raw_get::<Value>("double") {
            return typed(
                Resp3::Double,
                Reply::Bulk(double_text(n as f64).into_bytes()),
            );
        }
        if let Ok(Value::Number(f)) = t.raw_get::<Value>("double") {
            return typed(Resp3::Double, Reply::Bulk(double_text(f).into_bytes()));
        }
        if let Ok(Value::String(n)) = t.raw_get::<Value>("big_number") {
            return typed(Resp3::BigNumber, Reply::Bulk(one_line(&n.as_bytes())));
        }
        if let Ok(Value::Table(v)) = t.raw_get::<Value>("verbatim_string") {
            if let (Ok(Value::String(format)), Ok(Value::String(text))) =
                (v.raw_get::<Value>("format"), v.raw_get::<Value>("string"))
            {
                // RESP3 carries the format's first three bytes (a shorter one padded with
                // spaces, as Redis pads it).
                let mut f = [b' '; 3];
                for (d, s) in f.iter_mut().zip(format.as_bytes().iter()) {
                    *d = *s;
                }
                return typed(Resp3::Verbatim(f), Reply::Bulk(text.as_bytes().to_vec()));
            }
        }
        if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
            let mut flat = Vec::new();
            for pair in m.pairs::<Value, Value>() {
                let Ok((k, v)) = pair else { break };
                flat.push(self.reply(k, depth + 1));
                flat.push(self.reply(v, depth + 1));
                if self.left == 0 {
                    break;
                }
            }
            return typed(Resp3::Map, Reply::Array(flat));
        }
        if let Ok(Value::Table(m)) = t.raw_get::<Value>("set") {
            let mut members = Vec::new();
            for pair in m.pairs::<Value, Value>() {
                let Ok((k, _)) = pair else { break };
                members.push(self.reply(k, depth + 1));
                if self.left == 0 {
                    break;
                }
            }
            return typed(Resp3::Set, Reply::Array(members));
        }
        let mut out = Vec::new();
        for i in 1.. {
            match t.raw_get::<Value>(i) {
                Ok(Value::Nil) | Err(_) => break,
                Ok(v) => out.push(self.reply(v, depth + 1)),
            }
            if self.left == 0 {
                break;
            }
        }
        Reply::Array(out)
    }
}

fn typed(kind: Resp3, resp2: Reply) -> Reply {
    Reply::Typed(Box::new((kind, resp2)))
}

/// A Lua number as Redis's `addReplyDouble` writes it: `%.17g`, `inf`, and printf's `nan`
/// or `-nan` by the sign bit.
fn double_text(f: f64) -> String {
    if f.is_nan() {
        return if f.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    crate::num::fmt_g17(f)
}

/// `redis.call` / `redis.pcall`: converts the arguments as Redis does and runs them through
/// `call`. `(true, reply)`, or `(false, {err = text})`.
fn script_call(
    call: &mut Call,
    read_only: bool,
    resp3: bool,
    lua: &Lua,
    args: MultiValue,
) -> mlua::Result<(bool, Value)> {
    let fail = |msg: &str| -> mlua::Result<(bool, Value)> { Ok((false, err_table(lua, msg)?)) };
    if args.is_empty() {
        return fail("ERR Please specify at least one argument for this redis lib call");
    }
    let mut argv: Vec<Vec<u8>> = Vec::with_capacity(args.len());
    for a in args {
        match a {
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            Value::Integer(_) | Value::Number(_) => match lua.coerce_string(a)? {
                Some(s) => argv.push(s.as_bytes().to_vec()),
                None => {
                    return fail("ERR Lua redis lib command arguments must be strings or integers")
                }
            },
            _ => return fail("ERR Lua redis lib command arguments must be strings or integers"),
        }
    }
    let shape = crate::reply::resp3::shape(&argv);
    match call(argv, read_only) {
        Reply::Error(e) => fail(&e),
        r if resp3 => Ok((
            true,
            reply3_to_lua(lua, &crate::reply::resp3::typed(&r, shape))?,
        )),
        r => Ok((true, reply_to_lua(lua, r)?)),
    }
}

/// A reply as Redis converts RESP3 for a script after `redis.setresp(3)`: a null is nil, a
/// double `{double=n}`, a map `{map={k=v}}`, a set `{set={m=true}}`, a big number
/// `{big_number=s}`; the rest as in RESP2.
fn reply3_to_lua(lua: &Lua, r: &Reply) -> mlua::Result<Value> {
    let wrap = |field: &str, v: Value| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(field, v)?;
        Ok(Value::Table(t))
    };
    Ok(match r {
        Reply::Nil | Reply::NilArray => Value::Nil,
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, reply3_to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Typed(t) => match (&t.0, &t.1) {
            (Resp3::Map, Reply::Array(items)) => {
                let m = lua.create_table()?;
                for pair in items.chunks(2) {
                    if let [k, v] = pair {
                        m.raw_set(reply3_to_lua(lua, k)?, reply3_to_lua(lua, v)?)?;
                    }
                }
                wrap("map", Value::Table(m))?
            }
            (Resp3::Set, Reply::Array(items)) => {
                let m = lua.create_table()?;
                for k in items {
                    m.raw_set(reply3_to_lua(lua, k)?, true)?;
                }
                wrap("set", Value::Table(m))?
            }
            (Resp3::Double, Reply::Bulk(b)) => {
                let n = crate::num::parse_f64(b).unwrap_or(f64::NAN);
                wrap("double", Value::Number(n))?
            }
            (Resp3::BigNumber, Reply::Bulk(b)) => {
                wrap("big_number", Value::String(lua.create_string(b)?))?
            }
            (_, inner) => reply3_to_lua(lua, inner)?,
        },
        other => reply_to_lua(lua, other.clone())?,
    })
}

impl Scripts {
    /// Runs the compiled script `sha` with KEYS and ARGV.
    /// `read_only`: run as EVAL_RO (a shebang's `no-writes` makes it so too). Every
    /// `redis.call` goes through `call`.
    pub fn run(
        &self,
        sha: &str,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        read_only: bool,
        call: &mut Call,
    ) -> Reply {
        if let Some(refusal) = self.cooling_refusal() {
            return refusal;
        }
        let Some(compiled) = self.compiled.get(&(self.db, sha.to_string())) else {
            return Reply::err("NOSCRIPT No matching script. Please use EVAL.");
        };
        // A script with a shebang declares whether it writes; without one it may (Redis 7).
        let read_only = match &compiled.flags {
            Some(flags) => match declared_read_only(flags, read_only) {
                Ok(r) => r,
                Err(e) => return e,
            },
            None => read_only,
        };
        beside_the_runtime(|| {
            self.invoke(&compiled.function, sha, false, keys, argv, read_only, call)
        })
    }

    /// Runs the library function `name` as FCALL does: `callback(keys, args)`.
    pub fn call_function(
        &self,
        name: &str,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        read_only: bool,
        call: &mut Call,
    ) -> Reply {
        if let Some(refusal) = self.cooling_refusal() {
            return refusal;
        }
        let Some(def) = self.functions.get(name) else {
            return Reply::err("ERR Function not found");
        };
        // FCALL_RO decides by what the function does, as the hosted service does: one
        // without the `no-writes` flag runs read-only and is refused at its first write
        // ("Write commands are not allowed from read-only scripts."), where Redis refuses
        // to start it at all.
        let read_only = read_only || def.flags.iter().any(|f| f == "no-writes");
        beside_the_runtime(|| self.invoke(&def.function, name, true, keys, argv, read_only, call))
    }

    /// Runs `f` under the time limit with `redis.call`/`pcall` bound to `env`. A script gets
    /// KEYS and ARGV as globals; a library function gets them as its two arguments. `label`
    /// names it in error texts (the SHA-1, or the function's name).
    #[allow(clippy::too_many_arguments)]
    fn invoke(
        &self,
        f: &Function,
        label: &str,
        as_function: bool,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        read_only: bool,
        call: &mut Call,
    ) -> Reply {
        let env = std::cell::RefCell::new(call);
        // Each script starts in RESP2, whatever the one before set.
        let resp3 = std::cell::Cell::new(false);
        let result = self.lua.scope(|scope| {
            // redis.call and redis.pcall are Rust (C) functions, as in Redis: `return
            // redis.call(...)` is then no Lua tail call, and the script's frame (its line, for
            // the error text) is still there when a command fails.
            let bridge = self.bridge.clone();
            let env_call = &env;
            let resp3_call = &resp3;
            let call = scope.create_function(move |lua, args: MultiValue| {
                let (ok, v) = script_call(
                    &mut **env_call.borrow_mut(),
                    read_only,
                    resp3_call.get(),
                    lua,
                    args,
                )?;
                if ok {
                    return Ok(v);
                }
                if let Value::Table(t) = &v {
                    let at = lua
                        .inspect_stack(1, |d| {
                            (d.source().source.map(|s| s.into_owned()), d.current_line())
                        })
                        .unwrap_or((None, None));
                    if let (Some(src), Some(l)) = at {
                        t.set("source", src)?;
                        t.set("line", l)?;
                    }
                }
                bridge.set("last_err", v)?;
                Err(mlua::Error::RuntimeError("redis.call failed".into()))
            })?;
            let env_pcall = &env;
            let resp3_pcall = &resp3;
            let pcall = scope.create_function(move |lua, args: MultiValue| {
                Ok(script_call(
                    &mut **env_pcall.borrow_mut(),
                    read_only,
                    resp3_pcall.get(),
                    lua,
                    args,
                )?
                .1)
            })?;
            let resp3_set = &resp3;
            let set_resp = scope.create_function(move |_, three: bool| {
                resp3_set.set(three);
                Ok(())
            })?;
            self.bridge.raw_set("set_resp", set_resp)?;
            let redis: Table = self.bridge.get("redis")?;
            redis.raw_set("call", call)?;
            redis.raw_set("pcall", pcall)?;
            let list = |items: &[Vec<u8>]| -> mlua::Result<Table> {
                let t = self.lua.create_table_with_capacity(items.len(), 0)?;
                for (i, v) in items.iter().enumerate() {
                    t.raw_set(i + 1, self.lua.create_string(v)?)?;
                }
                Ok(t)
            };
            self.arm(if as_function {
                RUNNING_FUNCTION
            } else {
                RUNNING_SCRIPT
            })?;
            let out: (bool, Value) = if as_function {
                let invoke: Function = self.bridge.get("invoke")?;
                invoke.call((f.clone(), list(keys)?, list(argv)?))?
            } else {
                // KEYS and ARGV live among the read-only globals: a script may change their
                // contents, not rebind them.
                let g: Table = self.bridge.get("G")?;
                g.raw_set("KEYS", list(keys)?)?;
                g.raw_set("ARGV", list(argv)?)?;
                let xpcall: Function = self.bridge.get("xpcall")?;
                let handler: Function = self.bridge.get("handler")?;
                xpcall.call((f.clone(), handler))?
            };
            self.disarm();
            redis.raw_set("call", Value::Nil)?;
            redis.raw_set("pcall", Value::Nil)?;
            self.bridge.raw_set("set_resp", Value::Nil)?;
            self.bridge.set("last_err", Value::Nil)?;
            Ok(out)
        });
        match result {
            Ok((true, v)) => lua_to_reply(v, resp3.get()),
            Ok((false, v)) => Reply::Error(error_text(v, Some(label))),
            Err(e) => {
                self.disarm();
                Reply::Error(format!("ERR {}", lua_message(&e)))
            }
        }
    }
}
