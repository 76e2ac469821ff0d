"""A sender of proxy/tests/fixtures/pipes.json, written from the contract's text alone.

It dials the sink's two unix sockets (ctl: one JSON note per line; bulk: binary frames of a
little-endian length, the pipe, a sequence number, the payload), opens pipe 3 with a
pipe.open note, and sends --bytes bytes on it, never more than the sink granted (a fresh
pipe has startCredit, nothing), in frames of at most bulkMax after the length. It shuts the
pipe when all is sent, or when the sink shuts it, and ends after --linger seconds without a
grant it could use.

--break overrun: send everything at once, whatever was granted.
"""

import argparse
import json
import os
import select
import socket
import struct
import time

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "pipes.json")
PIPE = 3


def limits():
    with open(FIXTURE, encoding="utf-8") as f:
        c = json.load(f)["limits"]
    units = {"bytes": 1, "KiB": 1024}
    size = lambda name: c[name]["value"] * units[c[name]["unit"]]
    return size("bulkMax"), size("startCredit")


def dial(endpoint):
    path = endpoint.removeprefix("unix:")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


class Sender:
    def __init__(self, ctl, bulk, total, brk):
        self.ctl, self.bulk, self.total, self.brk = ctl, bulk, total, brk
        self.frame_max, self.credit = limits()
        self.sent, self.seq, self.n, self.buf, self.shut = 0, 0, 0, b"", False

    def note(self, op, body):
        self.n += 1
        m = {"k": "note", "op": op, "n": f"s-{self.n}", "ver": 1, "at": time.time(), "body": body}
        self.ctl.sendall(json.dumps(m).encode() + b"\n")

    def frame(self, payload):
        rest = struct.pack("<HI", PIPE, self.seq) + payload
        self.bulk.sendall(struct.pack("<I", len(rest)) + rest)
        self.seq += 1
        self.sent += len(payload)

    def pump(self):
        """Send what the credit allows (everything, with --break overrun)."""
        room = self.frame_max - 6
        while self.sent < self.total:
            allowed = self.total - self.sent if self.brk == "overrun" else self.credit
            n = min(room, allowed, self.total - self.sent)
            if n <= 0:
                return
            self.frame(os.urandom(n))
            self.credit -= n

    def read_notes(self, wait):
        """Take the sink's notes for up to `wait` seconds; False once ctl ended."""
        r, _, _ = select.select([self.ctl], [], [], wait)
        if not r:
            return True
        chunk = self.ctl.recv(65536)
        if not chunk:
            return False
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            try:
                m = json.loads(line)
            except ValueError:
                continue
            body = m.get("body") if isinstance(m, dict) else None
            if not isinstance(body, dict) or body.get("pipe") != PIPE:
                continue
            if m.get("op") == "pipe.grant" and isinstance(body.get("bytes"), int):
                self.credit += body["bytes"]
            elif m.get("op") == "pipe.shut":
                self.shut = True
        return True

    def run(self, linger):
        self.note("pipe.open", {"pipe": PIPE})
        idle_since = time.monotonic()
        while not self.shut and self.sent < self.total:
            before = self.sent
            self.pump()
            if self.sent != before:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > linger:
                break
            if not self.read_notes(0.05):
                return
        if not self.shut:
            self.note("pipe.shut", {"pipe": PIPE})
        # Stay until the sink ends the session, as a sender with nothing more to send.
        while self.read_notes(linger):
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", required=True)
    ap.add_argument("--bulk", required=True)
    ap.add_argument("--bytes", type=int, default=20000)
    ap.add_argument("--linger", type=float, default=10.0)
    ap.add_argument("--break", dest="brk", choices=["overrun"])
    a = ap.parse_args()
    Sender(dial(a.ctl), dial(a.bulk), a.bytes, a.brk).run(a.linger)


if __name__ == "__main__":
    main()
