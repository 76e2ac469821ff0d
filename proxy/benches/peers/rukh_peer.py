"""rukh peers in Python, each in its own process, for the relay bench's third-party hop.

    rukh_peer.py server SOCKET OPENING
        The core side: opens each session, then answers every rukh.call with a result as
        long as the call.
    rukh_peer.py client SOCKET OPENING SIZE ITERS WARMUP
        The extension side: takes part in the opening, then makes ITERS + WARMUP calls of
        SIZE bytes, one at a time; prints the round trips after the warm-up, in
        nanoseconds, one line, space-separated.

OPENING is a JSON file holding rukh's opening as the bench took it from the contract's
examples: {"initialize": the core's request, "confirm": the extension's result,
"invoke": the core's request}. Calls may come only after it, so the proxy between the
peers inspects valid traffic.

Plain sockets and json, as a small Python JSON-RPC peer is written: length-prefixed
(4-byte big-endian) compact JSON, the framing of rukh's ipc channel.
"""

import json
import os
import socket
import struct
import sys
import threading
import time

COMPACT = (",", ":")


def padded(make, size):
    """make(fill) as compact JSON bytes, padded with 'x' to SIZE bytes where it can be."""
    base = len(json.dumps(make(""), separators=COMPACT))
    return json.dumps(make("x" * max(0, size - base)), separators=COMPACT).encode()


def read_exact(conn, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(conn):
    head = read_exact(conn, 4)
    if head is None:
        return None
    return read_exact(conn, struct.unpack(">I", head)[0])


def frame(body):
    return struct.pack(">I", len(body)) + body


def send(conn, message):
    conn.sendall(frame(json.dumps(message, separators=COMPACT).encode()))


def serve_one(conn, opening):
    with conn:
        send(conn, opening["initialize"])
        if read_frame(conn) is None:
            return
        send(conn, opening["invoke"])
        while True:
            body = read_frame(conn)
            if body is None:
                return
            call = json.loads(body)
            reply = padded(
                lambda f: {"jsonrpc": "2.0", "id": call["id"], "result": {"output": {"text": f}}},
                len(body),
            )
            conn.sendall(frame(reply))


def server(path, opening):
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_one, args=(conn, opening), daemon=True).start()


def call(n, fill):
    return {
        "jsonrpc": "2.0",
        "id": f"e:{n}",
        "method": "rukh.call",
        "params": {"operation": "fs.read", "version": "1", "input": {"path": fill}, "timeoutMs": 1000},
    }


def client(path, opening, size, iters, warmup):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + 10
    while True:
        try:
            conn.connect(path)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    if read_frame(conn) is None:
        sys.exit("the peer closed before its rukh.initialize")
    send(conn, opening["confirm"])
    if read_frame(conn) is None:
        sys.exit("the peer closed before its rukh.invoke")
    samples = []
    for n in range(1, iters + warmup + 1):
        req = frame(padded(lambda f: call(n, f), size))
        t = time.perf_counter_ns()
        conn.sendall(req)
        if read_frame(conn) is None:
            sys.exit("the peer closed before answering")
        if n > warmup:
            samples.append(time.perf_counter_ns() - t)
    conn.close()
    print(" ".join(map(str, samples)))


def load(path):
    with open(path) as f:
        return json.load(f)


def main(argv):
    if len(argv) == 3 and argv[0] == "server":
        server(argv[1], load(argv[2]))
    elif len(argv) == 6 and argv[0] == "client":
        client(argv[1], load(argv[2]), int(argv[3]), int(argv[4]), int(argv[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
