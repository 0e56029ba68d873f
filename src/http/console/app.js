// tidepool's web console. Plain module, no dependencies. Every key name and value is put in
// the page as text (textContent or text nodes), never as HTML. The token lives in this tab's
// sessionStorage and travels only in the Authorization header.

const TOKEN_KEY = "tidepool.console.token";
const HISTORY_KEY = "tidepool.console.history";
const PAGE = 100; // items of a collection shown at a time
const STRING_SHOWN_MAX = 65536; // bytes of a string value fetched at most
// A Read Only token may not run the SCAN family (as on the hosted service): a hash or set is
// then read whole, up to this many items.
const WHOLE_READ_MAX = 1000;

const $ = (id) => document.getElementById(id);

/** An element with attributes and children; strings become text nodes. */
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "onclick") e.addEventListener("click", v);
    else if (k === "className") e.className = v;
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  return e;
}

// `travel`: the point being shown ({seq, time}), or null for now.
// `qtoken`: the delivery API's token, when one was given.
const state = { token: null, qtoken: null, atoken: null, session: null, cursor: "0", keys: [], selected: null, travel: null };

/** Whether the edit controls are hidden: a Read Only token, or an ACL user whose rules do not
 * allow the console's edits (the server would refuse them anyway). */
function readOnly() {
  const r = state.session?.redis;
  return r?.access === "read-only" || (r?.access === "user" && r.may_edit === false);
}

function qstashReadOnly() {
  return state.session?.qstash?.access !== "full";
}

/** Runs one command through the REST API; returns its result or throws its error text. */
async function redis(...args) {
  const r = await fetch("/", {
    method: "POST",
    headers: { Authorization: `Bearer ${state.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(args.map(String)),
  });
  let body;
  try {
    body = await r.json();
  } catch {
    throw new Error(`HTTP ${r.status}`);
  }
  if (body.error !== undefined) throw new Error(body.error);
  return body.result;
}

/** GETs a console route; returns its JSON or throws its error text. */
async function consoleApi(path, params) {
  const q = new URLSearchParams(params).toString();
  const r = await fetch(`/console/api/${path}?${q}`, { headers: { Authorization: `Bearer ${state.token}` } });
  const body = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}

// ---- signing in --------------------------------------------------------------------------

async function sessionOf(token) {
  const r = await fetch("/console/api/session", { headers: { Authorization: `Bearer ${token}` } });
  const body = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}

/** Signs in with one or two tokens: a database's and the delivery API's, in either order. */
async function signIn(tokens) {
  const found = { redis: null, qstash: null };
  for (const t of tokens.filter(Boolean)) {
    const s = await sessionOf(t);
    if (s.redis) found.redis = { token: t, ...s.redis };
    if (s.qstash) found.qstash = { token: t, access: s.qstash };
    if (s.admin) found.admin = { token: t };
  }
  if (!found.redis && !found.qstash && !found.admin) {
    throw new Error("these tokens open nothing");
  }
  state.atoken = found.admin?.token ?? null;
  state.token = found.redis?.token ?? null;
  state.qtoken = found.qstash?.token ?? null;
  state.session = found;
  sessionStorage.setItem(TOKEN_KEY, JSON.stringify(tokens.filter(Boolean)));
  show();
}

function signOut() {
  stopAll();
  stopHealth();
  // The command line's history may hold passwords (ACL SETUSER ... >pw): it goes with the
  // session.
  sessionStorage.removeItem(HISTORY_KEY);
  history.length = 0;
  historyAt = 0;
  $("cli-out").replaceChildren();
  sessionStorage.removeItem(TOKEN_KEY);
  state.travel = null;
  state.qtoken = null;
  state.atoken = null;
  docs = null;
  $("msg-body").replaceChildren();
  $("travel-banner").hidden = true;
  state.token = null;
  state.session = null;
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("tree").replaceChildren();
  $("viewer").replaceChildren(el("p", { className: "hint" }, "Pick a key."));
}

function show() {
  const r = state.session.redis;
  const q = state.session.qstash;
  const parts = [];
  if (r) parts.push(`${r.access === "user" ? `ACL user ${r.user}` : `${r.access} token`}${r.default_database ? " of the default database" : ""}`);
  if (q) parts.push(`QStash ${q.access === "full" ? "token" : "read-only token"}`);
  if (state.atoken) parts.push("admin token");
  $("who").textContent = parts.join(" · ");
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout").hidden = false;
  for (const b of document.querySelectorAll("nav button")) {
    const v = b.dataset.view;
    b.hidden = v === "messages" ? !q : v === "databases" ? !state.atoken : v === "health" ? !state.atoken && !r : !r;
  }
  document.body.classList.toggle("read-only", readOnly());
  for (const e of document.querySelectorAll(".edit")) e.hidden = readOnly();
  if (r) {
    switchView("browser");
    scan(true);
  } else if (q) {
    switchView("messages");
  } else {
    switchView("databases");
  }
}

// ---- the key tree --------------------------------------------------------------------------

async function scan(fresh) {
  if (state.travel) return scanPast();
  if (fresh) {
    state.cursor = "0";
    state.keys = [];
  }
  const args = ["SCAN", state.cursor, "COUNT", "500"];
  const match = $("match").value.trim();
  if (match) args.push("MATCH", match);
  const type = $("type").value;
  if (type) args.push("TYPE", type);
  $("scan-status").textContent = "scanning…";
  try {
    // One SCAN call may find nothing in a sparse part of the keyspace: go on until it finds
    // some keys or the scan ends.
    do {
      args[1] = state.cursor;
      const [next, keys] = await redis(...args);
      state.cursor = next;
      state.keys.push(...keys);
    } while (state.cursor !== "0" && state.keys.length === 0);
    $("scan-status").textContent = `${state.keys.length} keys${state.cursor === "0" ? "" : " so far"}`;
  } catch (e) {
    state.cursor = "0";
    $("scan-status").textContent = e.message.startsWith("NOPERM")
      ? "This token may not list keys (SCAN is refused to it): open a key by its name."
      : e.message;
  }
  $("more").hidden = state.cursor === "0";
  renderTree();
}

/** The keys grouped by `:` namespaces: { children: Map, keys: [] }. */
function treeOf(keys) {
  const root = { children: new Map(), keys: [], count: 0 };
  for (const key of [...new Set(keys)].sort()) {
    const parts = key.split(":");
    let node = root;
    node.count++;
    for (const p of parts.slice(0, -1)) {
      if (!node.children.has(p)) node.children.set(p, { children: new Map(), keys: [], count: 0 });
      node = node.children.get(p);
      node.count++;
    }
    node.keys.push(key);
  }
  return root;
}

function renderNode(node) {
  const items = [];
  for (const [name, child] of node.children) {
    const sub = el("ul", {}, ...renderNode(child));
    const label = el("span", { className: "label" }, `${name}:`, " ", el("span", { className: "count" }, `(${child.count})`));
    label.addEventListener("click", () => (sub.hidden = !sub.hidden));
    items.push(el("li", { className: "ns" }, label, sub));
  }
  for (const key of node.keys) {
    const li = el("li", { className: "key", "data-key": key }, key);
    li.addEventListener("click", () => openKey(key));
    items.push(li);
  }
  return items;
}

function renderTree() {
  $("tree").replaceChildren(...renderNode(treeOf(state.keys)));
}

// ---- time travel -----------------------------------------------------------------------

async function travelTo(point) {
  $("scan-status").textContent = "rebuilding the past…";
  try {
    const params = { point };
    const match = $("match").value.trim();
    if (match) params.match = match;
    const r = await consoleApi("at", params);
    state.travel = r.at;
    state.keys = r.keys;
    state.cursor = "0";
    $("travel-text").textContent = `The database as of record #${r.at.seq} (${r.at.time}), read-only.`;
    $("travel-banner").hidden = false;
    for (const e of document.querySelectorAll(".edit")) e.hidden = true;
    $("scan-status").textContent = `${r.keys.length} keys then${r.more ? " (the first shown)" : ""}`;
    $("more").hidden = true;
    renderTree();
    $("viewer").replaceChildren(el("p", { className: "hint" }, "Pick a key."));
  } catch (e) {
    $("scan-status").textContent = e.message;
  }
}

const SVG = "http://www.w3.org/2000/svg";

/** The log's records per minute as bars; a bar travels to the last record in it. */
async function showTimeline() {
  const box = $("timeline");
  box.hidden = false;
  box.replaceChildren(el("p", { className: "hint" }, "reading the log…"));
  try {
    const t = await consoleApi("timeline", {});
    if (!t.buckets.length) {
      box.replaceChildren(el("p", { className: "hint" }, "The log holds no records of this database."));
      return;
    }
    const width = 800;
    const height = 80;
    const max = Math.max(...t.buckets.map((b) => b.records));
    const first = t.buckets[0].start_ms;
    const span = t.buckets[t.buckets.length - 1].start_ms + t.bucket_ms - first;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String(height));
    svg.setAttribute("id", "timeline-chart");
    for (const b of t.buckets) {
      const r = document.createElementNS(SVG, "rect");
      const x = ((b.start_ms - first) / span) * width;
      const h = Math.max(2, (b.records / max) * (height - 4));
      r.setAttribute("x", String(x));
      r.setAttribute("y", String(height - h));
      r.setAttribute("width", String(Math.max(2, (t.bucket_ms / span) * width - 1)));
      r.setAttribute("height", String(h));
      r.setAttribute("data-seq", String(b.last_seq));
      const title = document.createElementNS(SVG, "title");
      title.textContent = `${when(b.start_ms)}: ${b.records} records (to #${b.last_seq})`;
      r.append(title);
      r.addEventListener("click", () => travelTo(String(b.last_seq)));
      svg.append(r);
    }
    const minutes = t.bucket_ms / 60000;
    box.replaceChildren(
      el("p", { className: "hint" }, `Records of this database per ${minutes === 1 ? "minute" : `${minutes} minutes`}, from ${when(first)}; a bar shows the database as of its last record.`),
      svg);
  } catch (e) {
    box.replaceChildren(el("p", { className: "error" }, e.message));
  }
}

async function scanPast() {
  return travelTo(String(state.travel.seq));
}

function backToNow() {
  state.travel = null;
  $("travel-banner").hidden = true;
  for (const e of document.querySelectorAll(".edit")) e.hidden = readOnly();
  $("viewer").replaceChildren(el("p", { className: "hint" }, "Pick a key."));
  scan(true);
}

async function openPastKey(key) {
  const v = $("viewer");
  try {
    const r = await consoleApi("at", { point: String(state.travel.seq), key });
    v.replaceChildren(
      el("div", { className: "meta" },
        el("strong", { id: "viewer-key" }, key),
        el("span", { id: "viewer-type" }, r.type),
        el("span", {}, `as of record #${r.at.seq}`)),
      el("div", { id: "value" }, el("div", { className: "value", id: "past-value" }, pastText(r.type, r.value))));
  } catch (e) {
    v.replaceChildren(el("p", { className: "error" }, e.message));
  }
}

/** A value of the past as text: a string as it is, anything else as indented JSON. */
function pastText(type, value) {
  if (type === "none") return "(no key)";
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

async function showHistory(key) {
  const box = $("history-box");
  box.replaceChildren(el("p", { className: "hint" }, "reading the log…"));
  try {
    const h = await consoleApi("history", { key });
    const items = h.changes.slice().reverse().map((c) => {
      const go = el("button", { type: "button", className: "travel-here" }, "Browse the database as of this record");
      go.addEventListener("click", () => travelTo(String(c.at.seq)));
      return el("li", { "data-seq": c.at.seq },
        el("div", {}, `#${c.at.seq} ${c.at.time}`),
        ...c.commands.map((cmd) => el("div", { className: "cmd" }, cmd.join(" "))),
        ...(c.more_commands ? [el("div", { className: "hint" }, `and ${c.more_commands} more commands on it in this record`)] : []),
        el("div", { className: "value" }, `→ ${c.type === "none" ? "(no key)" : pastText(c.type, c.value)}`),
        go);
    });
    const notes = [];
    if (h.dropped) notes.push(el("p", { className: "hint" }, `${h.dropped} older changes not shown.`));
    if (h.cut_at) notes.push(el("p", { className: "hint", id: "history-cut" }, `The log is long: replaying it took the time a rebuild may take, so this history ends at record #${h.cut_at.seq} (${h.cut_at.time}); tidepool-log history reads it all.`));
    if (h.from_snapshot) {
      const f = h.from_snapshot;
      notes.push(el("p", { className: "hint", id: "history-from" },
        `The log before record #${f.at.seq} (${f.at.time}) was compacted behind a snapshot: the history begins there, with ${f.type === "none" ? "no such key" : `the ${f.type} ${pastText(f.type, f.value)}`}.`));
    }
    box.replaceChildren(el("h4", {}, `History (${h.changes.length} changes, newest first)`), ...notes, el("ol", { id: "history", reversed: "" }, ...items));
  } catch (e) {
    box.replaceChildren(el("p", { className: "error" }, e.message));
  }
}

// ---- the viewer ---------------------------------------------------------------------------

function ttlText(ttl) {
  if (ttl === -1) return "no TTL";
  if (ttl === -2) return "gone";
  return `expires in ${ttl} s`;
}

async function openKey(key) {
  delete $("viewer").dataset.loaded;
  if (state.travel) return openPastKey(key);
  state.selected = key;
  for (const e of document.querySelectorAll(".key.selected")) e.classList.remove("selected");
  for (const e of document.querySelectorAll(".key")) if (e.dataset.key === key) e.classList.add("selected");
  const v = $("viewer");
  v.replaceChildren(el("p", { className: "hint" }, "loading…"));
  try {
    const [type, ttl] = await Promise.all([redis("TYPE", key), redis("TTL", key)]);
    const body = el("div", { id: "value" });
    const head = el("div", { className: "meta" },
      el("strong", { id: "viewer-key" }, key),
      el("span", { id: "viewer-type" }, type),
      el("span", { id: "viewer-ttl" }, ttlText(ttl)));
    const history = el("button", { type: "button", id: "history-button" }, "History");
    history.addEventListener("click", () => showHistory(key));
    head.append(history);
    v.replaceChildren(head, editControls(key), body, el("div", { id: "history-box" }));
    const viewer = VIEWERS[type];
    if (viewer) await viewer(key, body);
    else body.append(el("p", {}, `no viewer for ${type}`));
    const editor = EDITORS[type];
    if (editor) v.append(editorForm(key, editor));
    // Drawn whole (a test waits for this before it looks inside).
    v.dataset.loaded = key;
  } catch (e) {
    v.replaceChildren(el("p", { className: "error" }, e.message));
  }
}

function editControls(key) {
  const ttl = el("input", { id: "ttl-input", type: "number", min: "1", placeholder: "seconds" });
  const setTtl = el("button", { type: "button", id: "ttl-set" }, "Set TTL");
  setTtl.addEventListener("click", () => act(() => redis("EXPIRE", key, ttl.value), key));
  const persist = el("button", { type: "button", id: "ttl-persist" }, "Remove TTL");
  persist.addEventListener("click", () => act(() => redis("PERSIST", key), key));
  const rename = el("button", { type: "button", id: "rename" }, "Rename…");
  rename.addEventListener("click", () => {
    const to = prompt(`Rename ${key} to:`, key);
    if (to && to !== key) act(() => redis("RENAME", key, to), to, true);
  });
  const del = el("button", { type: "button", id: "delete" }, "Delete…");
  del.addEventListener("click", () => {
    if (confirm(`Delete ${key}?`)) act(() => redis("DEL", key), null, true);
  });
  const box = el("div", { className: "meta edit" }, ttl, setTtl, persist, rename, del);
  box.hidden = readOnly();
  return box;
}

async function act(f, reopen, rescan) {
  try {
    await f();
  } catch (e) {
    alertText(e.message);
    return;
  }
  if (rescan) await scan(true);
  if (reopen) openKey(reopen);
  else $("viewer").replaceChildren(el("p", { className: "hint" }, "Pick a key."));
}

function alertText(text) {
  $("viewer").prepend(el("p", { className: "error" }, text));
}

/** A table of rows of text cells. */
function table(headers, rows) {
  return el("table", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h))),
    ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, String(c))))));
}

/** A paged view: `page(from)` answers [rows, next or null]. */
async function paged(body, headers, page) {
  let next = 0;
  const t = table(headers, []);
  const more = el("button", { type: "button", className: "page-more" }, "More");
  async function load() {
    const [rows, n] = await page(next);
    for (const r of rows) t.append(el("tr", {}, ...r.map((c) => el("td", {}, String(c)))));
    next = n;
    more.hidden = n === null;
  }
  more.addEventListener("click", load);
  body.append(t, more);
  await load();
}

/** A collection read whole (a Read Only token, which may not page with the SCAN family). */
async function whole(body, headers, size, read) {
  if (size > WHOLE_READ_MAX) {
    body.append(el("p", { className: "hint" }, `Too large to read whole (more than ${WHOLE_READ_MAX}); a Read Only token may not page through it with the SCAN family.`));
    return;
  }
  body.append(table(headers, await read()));
}

function pairs(flat) {
  const out = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
  return out;
}

const VIEWERS = {
  async string(key, body) {
    const len = await redis("STRLEN", key);
    const text = len > STRING_SHOWN_MAX
      ? await redis("GETRANGE", key, 0, STRING_SHOWN_MAX - 1)
      : await redis("GET", key);
    const shown = el("div", { className: "value", id: "string-value" }, text);
    const modes = el("select", { id: "string-mode" }, el("option", {}, "text"), el("option", {}, "json"), el("option", {}, "hex"));
    modes.addEventListener("change", () => {
      if (modes.value === "json") {
        try {
          shown.textContent = JSON.stringify(JSON.parse(text), null, 2);
        } catch {
          shown.textContent = "(not JSON)";
        }
      } else if (modes.value === "hex") {
        shown.textContent = [...new TextEncoder().encode(text)].map((b) => b.toString(16).padStart(2, "0")).join(" ");
      } else {
        shown.textContent = text;
      }
    });
    body.append(el("div", { className: "meta" }, `${len} bytes${len > STRING_SHOWN_MAX ? `, the first ${STRING_SHOWN_MAX} shown` : ""}`, modes), shown);
    if (text.startsWith("HYLL")) body.append(el("p", {}, `HyperLogLog: about ${await redis("PFCOUNT", key)} distinct items`));
  },
  async hash(key, body) {
    const len = await redis("HLEN", key);
    body.append(el("p", {}, `${len} fields`));
    if (readOnly()) return whole(body, ["field", "value"], len, async () => pairs(await redis("HGETALL", key)));
    let cursor = "0";
    await paged(body, ["field", "value"], async () => {
      const [next, flat] = await redis("HSCAN", key, cursor, "COUNT", PAGE);
      cursor = next;
      return [pairs(flat), next === "0" ? null : next];
    });
  },
  async list(key, body) {
    const len = await redis("LLEN", key);
    body.append(el("p", {}, `${len} items`));
    await paged(body, ["index", "item"], async (from) => {
      const items = await redis("LRANGE", key, from, from + PAGE - 1);
      const next = from + PAGE < len ? from + PAGE : null;
      return [items.map((v, i) => [from + i, v]), next];
    });
  },
  async set(key, body) {
    const card = await redis("SCARD", key);
    body.append(el("p", {}, `${card} members`));
    if (readOnly()) return whole(body, ["member"], card, async () => (await redis("SMEMBERS", key)).map((m) => [m]));
    let cursor = "0";
    await paged(body, ["member"], async () => {
      const [next, members] = await redis("SSCAN", key, cursor, "COUNT", PAGE);
      cursor = next;
      return [members.map((m) => [m]), next === "0" ? null : next];
    });
  },
  async zset(key, body) {
    const card = await redis("ZCARD", key);
    body.append(el("p", {}, `${card} members`));
    await paged(body, ["member", "score"], async (from) => {
      const flat = await redis("ZRANGE", key, from, from + PAGE - 1, "WITHSCORES");
      return [pairs(flat), from + PAGE < card ? from + PAGE : null];
    });
    // A geo set is a sorted set whose scores are geohashes: its members' positions on demand.
    const geo = el("button", { type: "button", id: "geo-positions" }, "Show as geo positions");
    geo.addEventListener("click", async () => {
      const members = (await redis("ZRANGE", key, 0, PAGE - 1));
      const positions = members.length ? await redis("GEOPOS", key, ...members) : [];
      geo.replaceWith(el("h4", {}, "geo positions (longitude, latitude)"),
        table(["member", "longitude", "latitude"], members.map((m, i) => [m, positions[i]?.[0] ?? "", positions[i]?.[1] ?? ""])));
    });
    body.append(geo);
  },
  async stream(key, body) {
    body.append(el("p", {}, `${await redis("XLEN", key)} entries`));
    let start = "-";
    await paged(body, ["id", "fields"], async () => {
      const entries = await redis("XRANGE", key, start, "+", "COUNT", PAGE);
      if (entries.length === PAGE) {
        const [ms, seq] = entries[entries.length - 1][0].split("-");
        start = `${ms}-${BigInt(seq) + 1n}`;
      }
      const rows = entries.map(([id, fields]) => [id, pairs(fields).map(([f, v]) => `${f}=${v}`).join("  ")]);
      return [rows, entries.length === PAGE ? start : null];
    });
    const groups = await redis("XINFO", "GROUPS", key);
    if (groups.length) {
      body.append(el("h4", {}, "consumer groups"), table(["group", "consumers", "pending", "last delivered"],
        groups.map((g) => {
          const m = Object.fromEntries(pairs(g));
          return [m.name, m.consumers, m.pending, m["last-delivered-id"]];
        })));
      for (const g of groups) {
        const name = Object.fromEntries(pairs(g)).name;
        const consumers = await redis("XINFO", "CONSUMERS", key, name);
        const pending = await redis("XPENDING", key, name, "-", "+", PAGE);
        body.append(el("h4", {}, `group ${name}`),
          table(["consumer", "pending", "idle ms"], consumers.map((c) => {
            const m = Object.fromEntries(pairs(c));
            return [m.name, m.pending, m.idle];
          })),
          table(["pending entry", "consumer", "idle ms", "deliveries"], pending));
      }
    }
  },
  async json(key, body) {
    const doc = await redis("JSON.GET", key, "$");
    let text = doc;
    try {
      text = JSON.stringify(JSON.parse(doc)[0], null, 2);
    } catch {
      // shown as it came
    }
    body.append(el("div", { className: "value", id: "json-value" }, text));
  },
};

// ---- editing a key's value --------------------------------------------------------------------

/** Per type: the inputs of an addition and of a removal, and their commands. */
const EDITORS = {
  string: { add: ["new value"], addCmd: (k, [v]) => ["SET", k, v, "KEEPTTL"], addLabel: "Set" },
  hash: { add: ["field", "value"], addCmd: (k, [f, v]) => ["HSET", k, f, v], remove: "field", removeCmd: (k, f) => ["HDEL", k, f] },
  list: { add: ["item"], addCmd: (k, [v]) => ["RPUSH", k, v], addLabel: "Append", remove: "item", removeCmd: (k, v) => ["LREM", k, "1", v] },
  set: { add: ["member"], addCmd: (k, [m]) => ["SADD", k, m], remove: "member", removeCmd: (k, m) => ["SREM", k, m] },
  zset: { add: ["score", "member"], addCmd: (k, [sc, m]) => ["ZADD", k, sc, m], remove: "member", removeCmd: (k, m) => ["ZREM", k, m] },
  stream: { add: ["field", "value"], addCmd: (k, [f, v]) => ["XADD", k, "*", f, v], remove: "entry id", removeCmd: (k, id) => ["XDEL", k, id] },
  json: { add: ["path", "JSON value"], addCmd: (k, [p, v]) => ["JSON.SET", k, p, v] },
};

function editorForm(key, e) {
  const inputs = e.add.map((name) => el("input", { placeholder: name, spellcheck: "false", className: "edit-add" }));
  const add = el("button", { type: "button", id: "value-add" }, e.addLabel || "Add");
  add.addEventListener("click", () => act(() => redis(...e.addCmd(key, inputs.map((i) => i.value))), key));
  const box = el("div", { className: "meta edit", id: "value-editor" }, ...inputs, add);
  if (e.remove) {
    const which = el("input", { placeholder: e.remove, spellcheck: "false", id: "value-remove-which" });
    const remove = el("button", { type: "button", id: "value-remove" }, "Remove…");
    remove.addEventListener("click", () => {
      if (confirm(`Remove ${which.value} from ${key}?`)) act(() => redis(...e.removeCmd(key, which.value)), key, true);
    });
    box.append(which, remove);
  }
  box.hidden = readOnly();
  return box;
}

// ---- new keys ------------------------------------------------------------------------------

/** The command that creates a key of each type from a name, a field (or score) and a value. */
const CREATE = {
  string: { field: null, cmd: (k, f, v) => ["SET", k, v] },
  hash: { field: "field", cmd: (k, f, v) => ["HSET", k, f, v] },
  list: { field: null, cmd: (k, f, v) => ["RPUSH", k, v] },
  set: { field: null, cmd: (k, f, v) => ["SADD", k, v] },
  zset: { field: "score", cmd: (k, f, v) => ["ZADD", k, f, v] },
  stream: { field: "field", cmd: (k, f, v) => ["XADD", k, "*", f, v] },
  json: { field: null, cmd: (k, f, v) => ["JSON.SET", k, "$", v] },
};

function newKeyType() {
  const c = CREATE[$("newkey-type").value];
  $("newkey-field").hidden = !c.field;
  $("newkey-field").placeholder = c.field || "";
  $("newkey-value").placeholder = $("newkey-type").value === "json" ? "a JSON document" : "value";
}

async function createKey(ev) {
  ev.preventDefault();
  const name = $("newkey-name").value;
  if (!name) return;
  const c = CREATE[$("newkey-type").value];
  try {
    await redis(...c.cmd(name, $("newkey-field").value, $("newkey-value").value));
  } catch (e) {
    $("scan-status").textContent = e.message;
    return;
  }
  for (const id of ["newkey-name", "newkey-field", "newkey-value"]) $(id).value = "";
  await scan(true);
  openKey(name);
}

// ---- the command line ----------------------------------------------------------------------

/** Splits a typed line as redis-cli does: spaces separate, quotes group, backslash escapes. */
function splitArgs(line) {
  const out = [];
  let i = 0;
  while (i < line.length) {
    while (line[i] === " ") i++;
    if (i >= line.length) break;
    let arg = "";
    const q = line[i] === '"' || line[i] === "'" ? line[i++] : null;
    while (i < line.length && (q ? line[i] !== q : line[i] !== " ")) {
      if (line[i] === "\\" && q === '"' && i + 1 < line.length) {
        const c = line[++i];
        arg += { n: "\n", r: "\r", t: "\t" }[c] ?? c;
      } else {
        arg += line[i];
      }
      i++;
    }
    if (q) {
      if (line[i] !== q) throw new Error("unbalanced quotes");
      i++;
    }
    out.push(arg);
  }
  return out;
}

/** A reply as redis-cli prints it. */
function format(v, indent = "") {
  if (v === null || v === undefined) return "(nil)";
  if (typeof v === "number") return `(integer) ${v}`;
  if (typeof v === "string") return JSON.stringify(v);
  if (Array.isArray(v)) {
    if (v.length === 0) return "(empty array)";
    const w = String(v.length).length;
    return v.map((x, i) => {
      const n = `${String(i + 1).padStart(w)}) `;
      return (i ? indent : "") + n + format(x, indent + " ".repeat(n.length));
    }).join("\n");
  }
  return JSON.stringify(v);
}

// ---- completion and help from COMMAND DOCS -------------------------------------------------

/** name -> its docs (a map), from the server's COMMAND DOCS, once per sign-in. */
let docs = null;

async function loadDocs() {
  if (docs || !state.token) return;
  docs = new Map();
  try {
    const flat = await redis("COMMAND", "DOCS");
    for (const [name, d] of pairs(flat)) docs.set(name.toUpperCase(), Object.fromEntries(pairs(d)));
  } catch {
    // A token that may not run COMMAND DOCS gets no completion.
  }
}

/** An argument as Redis's documentation writes it: [optional], a | b, TOKEN value, x [x ...]. */
function argSyntax(flat) {
  const a = Object.fromEntries(pairs(flat));
  let s;
  if (a.type === "pure-token") s = a.token;
  else if (a.type === "oneof") s = (a.arguments || []).map(argSyntax).join(" | ");
  else if (a.type === "block") s = (a.arguments || []).map(argSyntax).join(" ");
  else s = a.name;
  if (a.token && a.type !== "pure-token") s = `${a.token} ${s}`;
  const flags = a.flags || [];
  if (flags.includes("multiple")) s = `${s} [${s} ...]`;
  if (flags.includes("optional")) s = `[${s}]`;
  return s;
}

function helpFor(line) {
  const help = $("cli-help");
  const name = line.trim().split(/\s+/)[0]?.toUpperCase();
  const d = name && docs?.get(name);
  if (!d) {
    help.replaceChildren();
    return;
  }
  const syntax = [name, ...(d.arguments || []).map(argSyntax)].join(" ");
  help.replaceChildren(el("span", {}, syntax), " ", el("span", { className: "summary" }, `— ${d.summary || ""}`));
}

function complete(input) {
  const typed = input.value;
  if (!docs || /\s/.test(typed.trimStart())) return;
  const prefix = typed.trim().toUpperCase();
  const names = [...docs.keys()].filter((n) => n.startsWith(prefix)).sort();
  if (!names.length) return;
  // The longest prefix the candidates share; the whole name (and a space) when only one.
  let common = names[0];
  for (const n of names) while (!n.startsWith(common)) common = common.slice(0, -1);
  input.value = names.length === 1 ? `${names[0]} ` : common;
  helpFor(input.value);
}

const history = JSON.parse(sessionStorage.getItem(HISTORY_KEY) || "[]");
let historyAt = history.length;

async function runLine(ev) {
  ev.preventDefault();
  const input = $("cli-in");
  const line = input.value.trim();
  if (!line) return;
  history.push(line);
  sessionStorage.setItem(HISTORY_KEY, JSON.stringify(history.slice(-200)));
  historyAt = history.length;
  input.value = "";
  helpFor("");
  const out = $("cli-out");
  out.append(`> ${line}\n`);
  let text;
  try {
    text = format(await redis(...splitArgs(line)));
  } catch (e) {
    text = `(error) ${e.message}`;
  }
  out.append(`${text}\n`);
  out.scrollTop = out.scrollHeight;
}

function historyKeys(ev) {
  if (ev.key === "Tab") {
    ev.preventDefault();
    complete($("cli-in"));
    return;
  }
  if (ev.key !== "ArrowUp" && ev.key !== "ArrowDown") return;
  ev.preventDefault();
  historyAt = Math.max(0, Math.min(history.length, historyAt + (ev.key === "ArrowUp" ? -1 : 1)));
  $("cli-in").value = history[historyAt] ?? "";
}

// ---- messages (the delivery API) ------------------------------------------------------------

/** Calls the delivery API with the QStash token; returns its JSON (or text) or throws. */
async function qstash(method, path, { body, headers } = {}) {
  const r = await fetch(`/v2/${path}`, {
    method,
    headers: { Authorization: `Bearer ${state.qtoken}`, ...(headers || {}) },
    body,
  });
  const text = await r.text();
  let value = text;
  try {
    value = text ? JSON.parse(text) : null;
  } catch {
    // a plain text answer
  }
  if (!r.ok) throw new Error(value?.error || `HTTP ${r.status}`);
  return value;
}

const when = (ms) => (ms ? new Date(ms).toISOString() : "");

/** A button that runs `f` and shows the part again, or the error. */
function action(label, f, { confirmText, id } = {}) {
  const b = el("button", { type: "button", className: "qedit", id });
  b.append(label);
  b.hidden = qstashReadOnly();
  b.addEventListener("click", async () => {
    if (confirmText && !confirm(confirmText)) return;
    try {
      await f();
      await showPart(state.part);
    } catch (e) {
      $("msg-body").prepend(el("p", { className: "error" }, e.message));
    }
  });
  return b;
}

const PARTS = {
  async logs(body) {
    const pendingOnly = el("input", { type: "checkbox", id: "logs-pending" });
    pendingOnly.checked = Boolean(state.pendingOnly);
    pendingOnly.addEventListener("change", () => {
      state.pendingOnly = pendingOnly.checked;
      showPart("logs");
    });
    body.append(el("div", { className: "meta" }, el("label", {}, pendingOnly, " only messages still waiting (pending, delayed, retrying)")));
    const { events } = await qstash("GET", "logs");
    const byMessage = new Map();
    for (const e of events) {
      if (!byMessage.has(e.messageId)) byMessage.set(e.messageId, []);
      byMessage.get(e.messageId).push(e);
    }
    if (!byMessage.size) body.append(el("p", { className: "hint" }, "No messages yet."));
    for (const [id, evs] of byMessage) {
      evs.sort((a, b) => a.time - b.time);
      const last = evs[evs.length - 1];
      if (state.pendingOnly && !["CREATED", "ACTIVE", "RETRY"].includes(last.state)) continue;
      const head = el("div", { className: "meta" }, el("strong", {}, id), el("span", {}, last.url || ""), el("span", { className: "state" }, last.state));
      if (["CREATED", "ACTIVE", "RETRY"].includes(last.state)) {
        head.append(action("Cancel", () => qstash("DELETE", `messages/${encodeURIComponent(id)}`), { confirmText: `Cancel ${id}?` }));
      }
      body.append(el("div", { className: "message", "data-message": id }, head,
        table(["time", "state", "status", "response or error"],
          evs.map((e) => [when(e.time), e.state, e.responseStatus ?? "", e.error ?? e.responseBody ?? ""]))));
    }
  },
  async dlq(body) {
    const f = state.dlqFilter || {};
    const url = el("input", { id: "dlq-url", placeholder: "url", spellcheck: "false", value: f.url || "" });
    const status = el("input", { id: "dlq-status", placeholder: "response status", spellcheck: "false", value: f.responseStatus || "" });
    const apply = el("button", { type: "button", id: "dlq-filter" }, "Filter");
    apply.addEventListener("click", () => {
      state.dlqFilter = { url: url.value.trim(), responseStatus: status.value.trim() };
      showPart("dlq");
    });
    body.append(el("div", { className: "meta" }, url, status, apply));
    const query = new URLSearchParams(Object.entries(f).filter(([, v]) => v)).toString();
    const { messages } = await qstash("GET", `dlq${query ? `?${query}` : ""}`);
    if (!messages.length) body.append(el("p", { className: "hint" }, "The dead-letter queue is empty."));
    const t = table(["", "dlq id", "message", "url", "status", "created", ""], []);
    const picked = () => [...t.querySelectorAll("input.pick:checked")].map((c) => c.dataset.dlq);
    for (const m of messages) {
      const pick = el("input", { type: "checkbox", className: "pick qedit", "data-dlq": m.dlqId });
      pick.hidden = qstashReadOnly();
      const retry = action("Retry", () => qstash("POST", `dlq/retry/${encodeURIComponent(m.dlqId)}`));
      const del = action("Delete", () => qstash("DELETE", `dlq/${encodeURIComponent(m.dlqId)}`), { confirmText: `Delete ${m.dlqId} from the dead-letter queue?` });
      t.append(el("tr", { "data-dlq": m.dlqId }, el("td", {}, pick), ...[m.dlqId, m.messageId, m.url, m.responseStatus, when(m.createdAt)].map((c) => el("td", {}, String(c ?? ""))), el("td", {}, retry, del)));
    }
    const json = { "Content-Type": "application/json" };
    const retryAll = action("Retry selected", () => qstash("POST", "dlq/retry", { body: JSON.stringify({ dlqIds: picked() }), headers: json }), { id: "dlq-retry-selected" });
    const deleteAll = action("Delete selected", () => qstash("DELETE", "dlq", { body: JSON.stringify({ dlqIds: picked() }), headers: json }),
      { confirmText: "Delete the selected entries from the dead-letter queue?", id: "dlq-delete-selected" });
    body.append(t, el("div", { className: "meta" }, retryAll, deleteAll));
  },
  async schedules(body) {
    const list = await qstash("GET", "schedules");
    const t = table(["schedule", "cron", "destination", "state", "next run", ""], []);
    for (const s of list) {
      const toggle = s.isPaused
        ? action("Resume", () => qstash("POST", `schedules/${encodeURIComponent(s.scheduleId)}/resume`))
        : action("Pause", () => qstash("POST", `schedules/${encodeURIComponent(s.scheduleId)}/pause`));
      const del = action("Delete", () => qstash("DELETE", `schedules/${encodeURIComponent(s.scheduleId)}`), { confirmText: `Delete schedule ${s.scheduleId}?` });
      t.append(el("tr", { "data-schedule": s.scheduleId }, ...[s.scheduleId, s.cron, s.destination, s.isPaused ? "paused" : "active", when(s.nextScheduleTime)].map((c) => el("td", {}, String(c ?? ""))), el("td", {}, toggle, del)));
    }
    const dest = el("input", { id: "schedule-destination", placeholder: "destination URL", spellcheck: "false" });
    const cron = el("input", { id: "schedule-cron", placeholder: "cron, e.g. */5 * * * *", spellcheck: "false" });
    const create = action("Create schedule", () => qstash("POST", `schedules/${dest.value}`, { headers: { "Upstash-Cron": cron.value } }), { id: "schedule-create" });
    const next = el("p", { id: "cron-next", className: "hint" });
    let typing = null;
    cron.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => cronHelp(cron, next), 400);
    });
    const form = el("div", { className: "meta qedit" }, dest, cron, create);
    form.hidden = qstashReadOnly();
    body.append(t, form, next);
  },
  async groups(body) {
    const groups = await qstash("GET", "topics");
    if (!groups.length) body.append(el("p", { className: "hint" }, "No URL groups."));
    const json = { "Content-Type": "application/json" };
    const endpoints = (name, urls) => ({ body: JSON.stringify({ endpoints: urls.map((url) => ({ url })) }), headers: json });
    const t = table(["URL group", "endpoint", ""], []);
    for (const g of groups) {
      for (const e of g.endpoints || []) {
        const remove = action("Remove", () => qstash("DELETE", `topics/${encodeURIComponent(g.name)}/endpoints`, endpoints(g.name, [e.url])),
          { confirmText: `Remove ${e.url} from ${g.name}?${g.endpoints.length === 1 ? " It is the last: the group goes with it." : ""}` });
        t.append(el("tr", { "data-group": g.name }, el("td", {}, g.name), el("td", {}, e.url), el("td", {}, remove)));
      }
    }
    const name = el("input", { id: "group-name", placeholder: "URL group", spellcheck: "false" });
    const url = el("input", { id: "group-url", placeholder: "endpoint URL", spellcheck: "false" });
    const add = action("Add endpoint", () => qstash("POST", `topics/${encodeURIComponent(name.value)}/endpoints`, endpoints(name.value, [url.value])), { id: "group-add" });
    const form = el("div", { className: "meta qedit" }, name, url, add);
    form.hidden = qstashReadOnly();
    body.append(t, form);
  },
  async queues(body) {
    const queues = await qstash("GET", "queues");
    if (!queues.length) body.append(el("p", { className: "hint" }, "No queues."));
    const upsert = (queueName, parallelism) => qstash("POST", "queues", {
      body: JSON.stringify({ queueName, parallelism: Number(parallelism) }),
      headers: { "Content-Type": "application/json" },
    });
    const t = table(["queue", "parallelism", "lag", "state", ""], []);
    for (const q of queues) {
      const toggle = q.paused
        ? action("Resume", () => qstash("POST", `queues/${encodeURIComponent(q.name)}/resume`))
        : action("Pause", () => qstash("POST", `queues/${encodeURIComponent(q.name)}/pause`));
      const parallelism = el("input", { type: "number", min: "1", className: "qedit queue-parallelism", value: String(q.parallelism ?? 1) });
      parallelism.hidden = qstashReadOnly();
      const set = action("Set parallelism", () => upsert(q.name, parallelism.value));
      const del = action("Delete", () => qstash("DELETE", `queues/${encodeURIComponent(q.name)}`), { confirmText: `Delete the queue ${q.name}?` });
      t.append(el("tr", { "data-queue": q.name }, ...[q.name, q.parallelism, q.lag, q.paused ? "paused" : "active"].map((c) => el("td", {}, String(c ?? ""))),
        el("td", {}, toggle, parallelism, set, del)));
    }
    const name = el("input", { id: "queue-name", placeholder: "queue", spellcheck: "false" });
    const par = el("input", { id: "queue-parallelism", type: "number", min: "1", value: "1" });
    const create = action("Create queue", () => upsert(name.value, par.value), { id: "queue-create" });
    const form = el("div", { className: "meta qedit" }, name, par, create);
    form.hidden = qstashReadOnly();
    body.append(t, form);
  },
  async runs(body) {
    const { runs } = await qstash("GET", "workflows/logs");
    if (!runs.length) body.append(el("p", { className: "hint" }, "No workflow runs."));
    for (const run of runs) {
      const steps = [];
      for (const group of run.steps || []) {
        for (const st of group.steps || []) {
          steps.push([st.stepId ?? "", st.stepName ?? "", st.stepType ?? "", st.state ?? "", st.out ?? st.errorBody ?? ""]);
        }
      }
      const head = el("div", { className: "meta" }, el("strong", {}, run.workflowRunId), el("span", {}, run.workflowUrl || ""),
        el("span", { className: "state" }, run.workflowState), el("span", {}, when(run.workflowRunCreatedAt)));
      if (run.workflowState === "RUN_STARTED") {
        head.append(action("Cancel", () => qstash("DELETE", `workflows/runs/${encodeURIComponent(run.workflowRunId)}`),
          { confirmText: `Cancel the workflow run ${run.workflowRunId}?` }));
      }
      body.append(el("div", { className: "run", "data-run": run.workflowRunId }, head, table(["step", "name", "type", "state", "output"], steps)));
    }
  },
  async keys(body) {
    const k = await qstash("GET", "keys");
    body.append(table(["key", "value"], [["current", k.current], ["next", k.next]]));
    body.append(el("p", { className: "hint" }, "Rotating makes the next key the current one and makes a new next key: receivers that check both keep verifying deliveries."));
    body.append(action("Rotate the signing keys", () => qstash("POST", "keys/rotate"),
      { confirmText: "Rotate the signing keys? Receivers that know only the current key stop verifying deliveries.", id: "rotate-keys" }));
  },
  async waits(body) {
    const event = el("input", { id: "wait-event", placeholder: "event id", spellcheck: "false", value: state.waitEvent || "" });
    const look = el("button", { type: "button", id: "wait-look" }, "Show waiters");
    look.addEventListener("click", () => {
      state.waitEvent = event.value;
      showPart("waits");
    });
    body.append(el("div", { className: "meta" }, event, look));
    if (!state.waitEvent) return;
    const waiters = await qstash("GET", `waiters/${encodeURIComponent(state.waitEvent)}`);
    body.append(table(["url", "deadline", "headers"], waiters.map((w) => [w.url, when(w.deadline * 1000), JSON.stringify(w.headers || {})])));
    const data = el("input", { id: "notify-body", placeholder: "event data (the notify body)", spellcheck: "false" });
    const notify = action("Notify", async () => {
      const woken = await qstash("POST", `notify/${encodeURIComponent(state.waitEvent)}`, { body: data.value });
      state.notified = Array.isArray(woken) ? woken.length : 0;
    }, { id: "notify" });
    body.append(el("div", { className: "meta" }, data, notify));
    if (state.notified !== undefined) body.append(el("p", { id: "notified" }, `Notified: ${state.notified} waiter(s) woken.`));
  },
};

/** The next runs of the expression typed in `input`, once it has its five fields. */
async function cronHelp(input, out) {
  const expr = input.value;
  const fields = expr.trim().replace(/^CRON_TZ=\S+\s+/, "").split(/\s+/).filter(Boolean).length;
  if (fields < 5) {
    out.replaceChildren(fields ? "minute hour day-of-month month day-of-week" : "");
    return;
  }
  const r = await fetch(`/console/api/cron?${new URLSearchParams({ expr })}`, { headers: { Authorization: `Bearer ${state.qtoken}` } });
  const body = await r.json().catch(() => ({}));
  if (input.value !== expr) return; // typed on meanwhile
  out.replaceChildren(r.ok ? `Next runs: ${body.next.map((n) => n.time).join(", ")}` : body.error || `HTTP ${r.status}`);
}

async function showPart(name) {
  state.part = name;
  for (const b of document.querySelectorAll("#msg-nav button")) b.classList.toggle("active", b.dataset.part === name);
  const body = el("div", { id: `part-${name}` });
  $("msg-body").replaceChildren(body);
  try {
    await PARTS[name](body);
  } catch (e) {
    body.append(el("p", { className: "error" }, e.message));
  }
  // Drawn whole (a test waits for this before it looks inside).
  body.dataset.loaded = "1";
}

// ---- live: the monitor and pub/sub -----------------------------------------------------------

const STREAM_LINES_MAX = 1000; // lines a live view keeps
const streams = {}; // name -> AbortController

/** Reads the server-sent events of `path` with the token in the header (EventSource cannot
 * send one), each event's data appended to `out` as a line, until `stop(name)`. */
async function follow(name, path, out) {
  stop(name);
  const ctl = new AbortController();
  streams[name] = ctl;
  try {
    const r = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` }, signal: ctl.signal });
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      throw new Error(body.error || `HTTP ${r.status}`);
    }
    const reader = r.body.getReader();
    const text = new TextDecoder();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += text.decode(value, { stream: true });
      let end;
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        const event = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const data = event.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        out.append(`${data}\n`);
        while (out.childNodes.length > STREAM_LINES_MAX) out.firstChild.remove();
        out.scrollTop = out.scrollHeight;
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") out.append(`(error) ${e.message}\n`);
  } finally {
    if (streams[name] === ctl) delete streams[name];
  }
}

function stop(name) {
  streams[name]?.abort();
  delete streams[name];
}

function stopAll() {
  for (const name of Object.keys(streams)) stop(name);
  $("monitor-toggle").textContent = "Start the monitor";
}

function toggleMonitor() {
  if (streams.monitor) {
    stop("monitor");
    $("monitor-toggle").textContent = "Start the monitor";
  } else {
    $("monitor-toggle").textContent = "Stop the monitor";
    follow("monitor", "/monitor", $("monitor-out"));
  }
}

function subscribe(ev) {
  ev.preventDefault();
  const channel = $("subscribe-channel").value;
  if (!channel) return;
  const route = $("subscribe-pattern").checked ? "psubscribe" : "subscribe";
  follow("subscribe", `/${route}/${encodeURIComponent(channel)}`, $("subscribe-out"));
}

async function publish(ev) {
  ev.preventDefault();
  try {
    await redis("PUBLISH", $("publish-channel").value, $("publish-message").value);
    $("publish-message").value = "";
  } catch (e) {
    $("subscribe-out").append(`(error) ${e.message}\n`);
  }
}

// ---- health: the server's own metrics ----------------------------------------------------

const HEALTH_EVERY_MS = 2000;
const HEALTH_POINTS = 60; // two minutes of samples
let healthTimer = null;
const healthSeries = new Map(); // chart title -> [values]
let lastScrape = null;

/** The samples of an OpenMetrics text: [{name, labels, value}]. */
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)/);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of (m[3] || "").matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

function sum(samples, name, pred = () => true) {
  return samples.filter((s) => s.name === name && pred(s.labels)).reduce((a, s) => a + s.value, 0);
}

/** A quantile of the requests between two scrapes, from a histogram's cumulative buckets
 * summed over its label sets. */
function quantile(prev, now, name, q) {
  const at = (samples) => {
    const by = new Map();
    for (const s of samples) if (s.name === `${name}_bucket`) by.set(s.labels.le, (by.get(s.labels.le) || 0) + s.value);
    return by;
  };
  const a = at(prev);
  const b = at(now);
  const bounds = [...b.keys()].sort((x, y) => (x === "+Inf" ? 1 : y === "+Inf" ? -1 : Number(x) - Number(y)));
  const total = (b.get("+Inf") || 0) - (a.get("+Inf") || 0);
  if (total <= 0) return null;
  for (const le of bounds) if ((b.get(le) || 0) - (a.get(le) || 0) >= q * total) return le === "+Inf" ? Infinity : Number(le);
  return null;
}

function sparkline(values) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("width", "240");
  svg.setAttribute("height", "50");
  const nums = values.filter((v) => Number.isFinite(v));
  const max = Math.max(1e-9, ...nums);
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", values.map((v, i) => `${(i / (HEALTH_POINTS - 1)) * 240},${48 - ((Number.isFinite(v) ? v : 0) / max) * 46}`).join(" "));
  svg.append(line);
  return svg;
}

function fmt(v, unit) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  if (unit === "ms") return `${(v * 1000).toFixed(2)} ms`;
  if (unit === "bytes") return v >= 1 << 20 ? `${(v / (1 << 20)).toFixed(1)} MiB` : `${Math.round(v)} B`;
  if (unit === "/s") return `${v.toFixed(1)} /s`;
  return String(Math.round(v));
}

/** A database token's health: its own database's usage (no server-wide metrics). */
async function scrapeUsage() {
  const box = $("health-body");
  let u;
  try {
    u = await consoleApi("usage", {});
  } catch (e) {
    box.replaceChildren(el("p", { className: "error" }, e.message));
    return;
  }
  const now = { at: Date.now(), u };
  const prev = lastScrape?.u ? lastScrape : null;
  lastScrape = now;
  const perSecond = (field) => (prev ? Math.max(0, (u[field] - prev.u[field]) / ((now.at - prev.at) / 1000)) : null);
  const charts = [
    ["commands", perSecond("commands_today"), "/s"],
    ["requests", perSecond("requests_today"), "/s"],
    ["keys", u.keys, ""],
    ["data", u.data_bytes, "bytes"],
    ["commands today", u.commands_today, ""],
    ["data limit", u.max_data_bytes ?? null, "bytes"],
  ];
  box.replaceChildren(el("p", { className: "hint" }, `The database ${u.name}: its own usage (the server's metrics need the admin token).`),
    el("div", { className: "charts" }, ...charts.map(([title, value, unit]) => card(title, value, unit))));
}

function card(title, value, unit) {
  const series = healthSeries.get(title) || [];
  series.push(value ?? NaN);
  while (series.length > HEALTH_POINTS) series.shift();
  healthSeries.set(title, series);
  return el("div", { className: "chart", "data-chart": title }, el("div", {}, title), el("div", { className: "now" }, fmt(value, unit)), sparkline(series));
}

async function scrapeHealth() {
  if (!state.atoken) return scrapeUsage();
  const box = $("health-body");
  let text;
  try {
    const r = await fetch("/metrics", { headers: { Authorization: `Bearer ${state.atoken}` } });
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error || `HTTP ${r.status}`);
    text = await r.text();
  } catch (e) {
    box.replaceChildren(el("p", { className: "error" }, e.message));
    return;
  }
  const now = { at: Date.now(), samples: parseMetrics(text) };
  const prev = lastScrape;
  lastScrape = now;
  const s = now.samples;
  const rate = (name, pred) => (prev ? (sum(s, name, pred) - sum(prev.samples, name, pred)) / ((now.at - prev.at) / 1000) : null);
  const charts = [
    ["HTTP requests", rate("tidepool_http_requests_total"), "/s"],
    ["RESP commands", rate("tidepool_resp_commands_total"), "/s"],
    ["command latency p50", prev ? quantile(prev.samples, s, "tidepool_command_duration_seconds", 0.5) : null, "ms"],
    ["command latency p99", prev ? quantile(prev.samples, s, "tidepool_command_duration_seconds", 0.99) : null, "ms"],
    ["deliveries", rate("tidepool_delivery_attempts_total", (l) => l.outcome === "delivered"), "/s"],
    ["delivery failures", rate("tidepool_delivery_attempts_total", (l) => l.outcome !== "delivered"), "/s"],
    ["messages pending", sum(s, "tidepool_delivery_messages_pending"), ""],
    ["DLQ entries", sum(s, "tidepool_delivery_dlq_entries"), ""],
    ["log size", sum(s, "tidepool_log_size_bytes"), "bytes"],
    ["log fsync p99", prev ? quantile(prev.samples, s, "tidepool_log_fsync_duration_seconds", 0.99) : null, "ms"],
    ["snapshot age", s.some((x) => x.name === "tidepool_snapshot_age_seconds") ? sum(s, "tidepool_snapshot_age_seconds") : null, ""],
    ["snapshot duration", s.some((x) => x.name === "tidepool_snapshot_duration_seconds") ? sum(s, "tidepool_snapshot_duration_seconds") : null, "ms"],
    ["snapshots", sum(s, "tidepool_snapshots_total"), ""],
    ["keys", sum(s, "tidepool_keys"), ""],
  ];
  box.replaceChildren(el("div", { className: "charts" }, ...charts.map(([title, value, unit]) => card(title, value, unit))));
}

function startHealth() {
  stopHealth();
  lastScrape = null;
  healthSeries.clear();
  scrapeHealth();
  healthTimer = setInterval(scrapeHealth, HEALTH_EVERY_MS);
}

function stopHealth() {
  if (healthTimer) clearInterval(healthTimer);
  healthTimer = null;
}

// ---- databases (the admin token) ----------------------------------------------------------

async function admin(method, path, body) {
  const r = await fetch(`/_admin/${path}`, {
    method,
    headers: { Authorization: `Bearer ${state.atoken}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const value = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) throw new Error(value.error || `HTTP ${r.status}`);
  return value;
}

function adminAction(label, f, confirmText) {
  const b = el("button", { type: "button" }, label);
  b.addEventListener("click", async () => {
    if (confirmText && !confirm(confirmText)) return;
    try {
      await f();
      await showDatabases();
    } catch (e) {
      $("db-body").prepend(el("p", { className: "error" }, e.message));
    }
  });
  return b;
}

/** Opens database `name` in this tab with its Standard token. */
async function openDatabase(name) {
  const db = await admin("GET", `databases/${encodeURIComponent(name)}`);
  stopAll();
  state.token = db.token;
  state.session.redis = { token: db.token, access: "standard", default_database: name === "default", name };
  docs = null;
  const saved = JSON.parse(sessionStorage.getItem(TOKEN_KEY) || "[]").filter((t) => t !== db.token);
  sessionStorage.setItem(TOKEN_KEY, JSON.stringify([...saved, db.token]));
  show();
}

async function showDatabases() {
  const body = $("db-body");
  try {
    const { databases } = await admin("GET", "databases");
    const t = table(["database", "keys", "data bytes", "commands today", "created", ""], []);
    for (const db of databases) {
      const open = adminAction("Open", () => openDatabase(db.name));
      const reset = adminAction("Reset tokens", () => admin("POST", `databases/${encodeURIComponent(db.name)}/reset`),
        `Reset the tokens of ${db.name}? Every client using them loses access.`);
      const cells = [db.name, db.keys, db.data_bytes, db.commands_today, db.created_at ? when(db.created_at) : ""];
      const actions = el("td", {}, open, reset);
      if (db.name !== "default") {
        actions.append(adminAction("Delete", () => admin("DELETE", `databases/${encodeURIComponent(db.name)}`),
          `Delete the database ${db.name} and all its keys?`));
      }
      t.append(el("tr", { "data-database": db.name }, ...cells.map((c) => el("td", {}, String(c ?? ""))), actions));
    }
    body.replaceChildren(t);
  } catch (e) {
    body.replaceChildren(el("p", { className: "error" }, e.message));
  }
}

async function createDatabase(ev) {
  ev.preventDefault();
  const name = $("db-name").value.trim();
  try {
    await admin("POST", "databases", name ? { name } : {});
    $("db-name").value = "";
  } catch (e) {
    $("db-body").prepend(el("p", { className: "error" }, e.message));
    return;
  }
  await showDatabases();
}

// ---- wiring --------------------------------------------------------------------------------

function switchView(name) {
  for (const b of document.querySelectorAll("nav button")) b.classList.toggle("active", b.dataset.view === name);
  $("browser").hidden = name !== "browser";
  $("cli").hidden = name !== "cli";
  $("messages").hidden = name !== "messages";
  $("databases").hidden = name !== "databases";
  $("live").hidden = name !== "live";
  $("health").hidden = name !== "health";
  if (name === "health") startHealth();
  else stopHealth();
  if (name === "databases") showDatabases();
  if (name === "cli") {
    $("cli-in").focus();
    loadDocs();
  }
  if (name === "messages" && !$("msg-body").childElementCount) showPart("logs");
}

function start() {
  $("signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("signin-error").textContent = "";
    try {
      await signIn([$("token").value.trim(), $("token2").value.trim()]);
      $("token").value = "";
      $("token2").value = "";
    } catch (e) {
      $("signin-error").textContent = e.message;
    }
  });
  $("signout").addEventListener("click", signOut);
  $("filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    scan(true);
  });
  $("more").addEventListener("click", () => scan(false));
  $("travel").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const point = $("travel-point").value.trim();
    if (point) travelTo(point);
  });
  $("travel-back").addEventListener("click", backToNow);
  $("timeline-button").addEventListener("click", showTimeline);
  $("open").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = $("open-key").value;
    if (key) openKey(key);
  });
  $("newkey").addEventListener("submit", createKey);
  $("newkey-type").addEventListener("change", newKeyType);
  $("db-create").addEventListener("submit", createDatabase);
  $("monitor-toggle").addEventListener("click", toggleMonitor);
  $("subscribe").addEventListener("submit", subscribe);
  $("publish").addEventListener("submit", publish);
  $("cli-form").addEventListener("submit", runLine);
  $("cli-in").addEventListener("keydown", historyKeys);
  $("cli-in").addEventListener("input", () => helpFor($("cli-in").value));
  for (const b of document.querySelectorAll("nav button")) b.addEventListener("click", () => switchView(b.dataset.view));
  for (const b of document.querySelectorAll("#msg-nav button")) b.addEventListener("click", () => showPart(b.dataset.part));
  let saved = null;
  try {
    saved = JSON.parse(sessionStorage.getItem(TOKEN_KEY) || "null");
  } catch {
    saved = null;
  }
  if (Array.isArray(saved)) signIn(saved).catch(() => signOut());
  // The page's controls work from here on (a test waits for this before it clicks).
  document.body.dataset.ready = "1";
}

start();
