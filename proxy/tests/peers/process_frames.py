"""Child processes for the process-endpoint tests (tests/process.rs).

Frames are rukh's: a 4-byte big-endian length, then that many bytes of JSON.

    process_frames.py stdio-echo            echo frames from stdin to stdout until EOF, exit 0
    process_frames.py fd-echo N [CODE]      on fd N: first send {"fds": [...open fds...]},
                                            then echo frames until EOF, exit CODE (default 0)
    process_frames.py rukh-ext N CODE [once]
                                            on fd N: answer each request with a result carrying
                                            the open fds and the request's params; exit CODE at
                                            EOF (with "once": right after the first answer)
    process_frames.py wait-signal           SIGINT -> exit 130, SIGTERM -> default death;
                                            prints "CHILD READY <pid>" once handlers are set,
                                            then sleeps; exits 99 if no signal came in 30 s
"""

import json
import os
import signal
import socket
import struct
import sys
import time

MAX_FRAME = 1 << 20


def open_fds():
    """Descriptors open in this process, without the one listdir itself used."""
    names = os.listdir("/proc/self/fd")
    fds = []
    for name in names:
        fd = int(name)
        try:
            os.fstat(fd)
        except OSError:
            continue  # the directory listdir had open, closed again by now
        fds.append(fd)
    return sorted(fds)


def read_exact(read, n):
    buf = b""
    while len(buf) < n:
        chunk = read(n - len(buf))
        if not chunk:
            if buf:
                raise EOFError(f"EOF inside a frame ({len(buf)} of {n} bytes)")
            return None
        buf += chunk
    return buf


def read_frame(read):
    head = read_exact(read, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes is over the limit")
    body = read_exact(read, n)
    if body is None:
        raise EOFError("EOF after a length prefix")
    return body


def frame(body):
    return struct.pack(">I", len(body)) + body


def stdio_echo():
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    while (body := read_frame(stdin.read)) is not None:
        stdout.write(frame(body))
        stdout.flush()
    return 0


def fd_echo(fd, code):
    sock = socket.socket(fileno=fd)
    sock.sendall(frame(json.dumps({"fds": open_fds()}).encode()))
    while (body := read_frame(sock.recv)) is not None:
        sock.sendall(frame(body))
    sock.close()
    return code


def rukh_ext(fd, code, once):
    sock = socket.socket(fileno=fd)
    fds = open_fds()
    while (body := read_frame(sock.recv)) is not None:
        msg = json.loads(body)
        if "id" in msg and "method" in msg:
            reply = {
                "jsonrpc": "2.0",
                "id": msg["id"],
                "result": {"fds": fds, "params": msg.get("params")},
            }
            sock.sendall(frame(json.dumps(reply).encode()))
            if once:
                break
    sock.close()
    return code


def wait_signal():
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print(f"CHILD READY {os.getpid()}", flush=True)
    time.sleep(30)
    return 99


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "stdio-echo":
        return stdio_echo()
    if mode == "fd-echo":
        return fd_echo(int(argv[2]), int(argv[3]) if len(argv) > 3 else 0)
    if mode == "rukh-ext":
        return rukh_ext(int(argv[2]), int(argv[3]), argv[4:] == ["once"])
    if mode == "wait-signal":
        return wait_signal()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
