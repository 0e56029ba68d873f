"""redis-py with `ssl=True` against tidepool's RESP listener with TLS (`--resp-tls-cert`,
`--resp-tls-key`), with a self-signed certificate made here by openssl."""

import os
import subprocess
import tempfile

import redis

TOKEN = "redis-py-tls-token"
CERTS = tempfile.mkdtemp(prefix="tidepool-tls-")
CERT = os.path.join(CERTS, "cert.pem")
KEY = os.path.join(CERTS, "key.pem")
subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-keyout", KEY, "-out", CERT], check=True, capture_output=True)
TIDEPOOL_FLAGS = ["--token", TOKEN, "--resp-listen", "127.0.0.1:0",
                  "--resp-tls-cert", CERT, "--resp-tls-key", KEY]
RESP_PORT = None  # set by the fixture


def test_redis_py_over_tls(server):
    c = redis.Redis(host="127.0.0.1", port=RESP_PORT, password=TOKEN, ssl=True,
                    ssl_ca_certs=CERT, decode_responses=True)
    assert c.set("tls", "yes") is True
    assert c.get("tls") == "yes"
    with c.pipeline() as p:
        p.watch("tls")
        p.multi()
        p.set("tls", "again")
        assert p.execute() == [True]
    c.close()
