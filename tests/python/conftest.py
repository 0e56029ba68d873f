"""The one tidepool fixture of the Python SDK tests: the real binary on a free port in a
temporary directory, started once per test module with that module's `TIDEPOOL_FLAGS` (and
`TIDEPOOL_ENV`), stopped cleanly after it.

The server binary comes from TIDEPOOL_BIN (default: target/debug/tidepool)."""

import os
import re
import shutil
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("TIDEPOOL_BIN", os.path.join(ROOT, "target", "debug", "tidepool"))


@pytest.fixture(scope="module")
def server(request):
    """The base URL of a tidepool started for this module."""
    flags = getattr(request.module, "TIDEPOOL_FLAGS", [])
    env = dict(os.environ, **getattr(request.module, "TIDEPOOL_ENV", {}))
    data = tempfile.mkdtemp(prefix="tidepool-py-")
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
        request.module.RESP_PORT = int(r.group(2))
    yield m.group(1)
    proc.terminate()
    assert proc.wait(timeout=20) == 0
    shutil.rmtree(data, ignore_errors=True)
