"""The one tidepool fixture of the Python SDK tests: the real binary on a free port in a
temporary directory, started once per test module with that module's `TIDEPOOL_FLAGS` (and
`TIDEPOOL_ENV`), stopped cleanly after it.

With TIDEPOOL_CLUSTER=follower the fixture starts a cluster of three nodes instead (each
with the module's flags, on loopback) and gives the tests a follower's URL: every request
goes through a node that forwards writes to the leader and answers reads itself.

The server binary comes from TIDEPOOL_BIN (default: target/debug/tidepool)."""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("TIDEPOOL_BIN", os.path.join(ROOT, "target", "debug", "tidepool"))
CLUSTER = os.environ.get("TIDEPOOL_CLUSTER") == "follower"
CLUSTER_ADMIN = "sdk-cluster-admin-token"


def _start(data, flags, env, module):
    """One `tidepool serve`; its process and base URL."""
    proc = subprocess.Popen(
        [BIN, "serve", "--listen", "127.0.0.1:0", "--data", data, *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    m = re.search(r"(http://\S+)", line)
    assert m, f"no start line: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
    if "--resp-listen" in flags:
        # The RESP listener's line follows: "  RESP (Redis protocol) on 127.0.0.1:PORT: ..."
        r = re.search(r"on ([0-9.]+):(\d+):", proc.stdout.readline())
        assert r, "no RESP line"
        module.RESP_PORT = int(r.group(2))
    return proc, m.group(1)


_NEXT_PORT = [0]


def _free_port():
    """A loopback port nobody listens on, from below the kernel's ephemeral range: a port
    from bind(0) may be handed to the next outgoing connection before the node binds it."""
    low, high = 20000, 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = min(high, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        pass
    span = high - low
    if span >= 1000:
        base = (os.getpid() * 7919) % span
        for _ in range(span):
            port = low + (base + _NEXT_PORT[0]) % span
            _NEXT_PORT[0] += 1
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _admin(url, method, path, token):
    req = urllib.request.Request(url + path, method=method, data=b"" if method == "POST" else None,
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def _cluster(flags, env, module):
    """Three nodes made one cluster; their processes and directories, and a follower's URL."""
    if "--admin-token" in flags:
        admin = flags[flags.index("--admin-token") + 1]
    else:
        admin = CLUSTER_ADMIN
        flags = [*flags, "--admin-token", admin]
    ports = [_free_port() for _ in range(3)]
    dirs = [tempfile.mkdtemp(prefix=f"tidepool-py-n{i + 1}-") for i in range(3)]
    procs, urls, resp_ports = [], [], []
    for i in range(3):
        peers = ",".join(f"{j + 1}=127.0.0.1:{ports[j]}" for j in range(3) if j != i)
        node = ["--node-id", str(i + 1), "--cluster-listen", f"127.0.0.1:{ports[i]}",
                "--peers", peers, "--cluster-secret", "the SDK suites' cluster secret"]
        if i > 0:
            # The tokens of databases derive from the credentials: the same on every node.
            shutil.copy(os.path.join(dirs[0], "credentials.json"), dirs[i])
        proc, url = _start(dirs[i], [*flags, *node], env, module)
        procs.append(proc)
        urls.append(url)
        resp_ports.append(getattr(module, "RESP_PORT", None))
    _admin(urls[0], "POST", "/_admin/cluster/init", admin)
    deadline = time.time() + 20
    while True:
        status = [_admin(u, "GET", "/_admin/cluster/status", admin) for u in urls]
        if any(s["takes_writes"] for s in status):
            i = next(i for i, s in enumerate(status) if not s["takes_writes"] and s["leader"])
            if "--resp-listen" in flags:
                # The RESP clients connect to the same follower.
                module.RESP_PORT = resp_ports[i]
            return procs, dirs, urls[i]
        assert time.time() < deadline, f"no leader within 20 s: {status}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server(request):
    """The base URL of a tidepool started for this module (a follower's, in cluster mode)."""
    flags = getattr(request.module, "TIDEPOOL_FLAGS", [])
    env = dict(os.environ, **getattr(request.module, "TIDEPOOL_ENV", {}))
    if CLUSTER:
        procs, dirs, url = _cluster(flags, env, request.module)
    else:
        data = tempfile.mkdtemp(prefix="tidepool-py-")
        proc, url = _start(data, flags, env, request.module)
        procs, dirs = [proc], [data]
    yield url
    for proc in procs:
        proc.terminate()
    for proc in procs:
        assert proc.wait(timeout=20) == 0
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
