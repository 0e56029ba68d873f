"""One request to a running redis-server and its reply, read as RESP2: what the generators
(gen-key-specs.py, gen-command-docs.py) ask redis-server 7.0 for its command table."""
import socket


def request(port, *args, status=lambda text: text):
    """Sends `args` to redis-server on 127.0.0.1:`port`; its reply as Python values: a bulk
    string a str, an integer an int, an array a list, nil None, a status reply `status(text)`.
    An error reply ends the program with its text."""
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    s.sendall(out)

    def read():
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return status(rest.decode())
        if kind == b"-":
            raise SystemExit(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else f.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [read() for _ in range(n)]
        raise SystemExit(f"unexpected reply line {line!r}")

    return read()
