"""A sender of proxy/tests/fixtures/pipes.json, written from the contract's text alone.

It dials the sink's two unix sockets (ctl: one JSON note per line; bulk: binary frames of a
little-endian length, the pipe, a sequence number, the payload), opens pipe 3 with a
pipe.open note, and sends --bytes bytes on it, never more than the sink granted (a fresh
pipe has startCredit, nothing), in frames of at most bulkMax after the length. It shuts the
pipe when all is sent, or when the sink shuts it, and ends after --linger seconds without a
grant it could use. Each connection first attaches its station (--station) with this
process's boot id and its try, 0 on the first dial. When the sink's connections break with
bytes left, it dials both again within redialSeconds, attaches with the next try and reopens
the pipe (P-2).

--break overrun: send everything at once, whatever was granted.
--break new-boot: come back after a break with a fresh boot id, as another process would.
"""

import argparse
import json
import os
import select
import socket
import struct
import time
import uuid

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "pipes.json")
PIPE = 3


def limits():
    with open(FIXTURE, encoding="utf-8") as f:
        c = json.load(f)["limits"]
    units = {"bytes": 1, "KiB": 1024}
    size = lambda name: c[name]["value"] * units[c[name]["unit"]]
    return size("bulkMax"), size("startCredit")


def redial_seconds():
    with open(FIXTURE, encoding="utf-8") as f:
        c = json.load(f)["limits"]
    return c["redialSeconds"]["value"]


def dial(endpoint):
    path = endpoint.removeprefix("unix:")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


class Sender:
    def __init__(self, total, brk):
        self.ctl = self.bulk = None
        self.total, self.brk = total, brk
        self.frame_max, self.credit = limits()
        self.sent, self.seq, self.n, self.buf, self.shut = 0, 0, 0, b"", False

    def connect(self, ctl, bulk):
        """A fresh pair of connections: the pipe starts again with startCredit."""
        self.ctl, self.bulk = ctl, bulk
        self.credit, self.buf = limits()[1], b""

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
        """Serve one pair of connections; False when they broke with bytes left."""
        self.note("pipe.open", {"pipe": PIPE})
        idle_since = time.monotonic()
        while not self.shut and self.sent < self.total:
            before = self.sent
            self.pump()
            if self.sent != before:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > linger:
                break
            try:
                if not self.read_notes(0.05):
                    return False
            except OSError:
                return False
        try:
            if not self.shut:
                self.note("pipe.shut", {"pipe": PIPE})
            # Stay until the sink ends the session, as a sender with nothing more to send.
            while self.read_notes(linger):
                pass
        except OSError:
            pass
        return True


def redial(a, give_up):
    """Both connections again, or None once redialSeconds is over."""
    while time.monotonic() < give_up:
        try:
            return dial(a.ctl), dial(a.bulk)
        except OSError:
            time.sleep(0.2)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", required=True)
    ap.add_argument("--bulk", required=True)
    ap.add_argument("--bytes", type=int, default=20000)
    ap.add_argument("--linger", type=float, default=10.0)
    ap.add_argument("--break", dest="brk", choices=["overrun", "new-boot"])
    ap.add_argument("--station", default="north")
    a = ap.parse_args()
    s, boot, attempt = Sender(a.bytes, a.brk), f"b-{uuid.uuid4().hex[:8]}", 0
    pair = (dial(a.ctl), dial(a.bulk))
    while pair is not None:
        s.connect(*pair)
        try:
            s.note("pipe.attach", {"station": a.station, "boot": boot, "try": attempt})
            done = s.run(a.linger)
        except OSError:
            done = False
        if done:
            return
        attempt += 1
        if a.brk == "new-boot":
            boot = f"b-{uuid.uuid4().hex[:8]}"
        pair = redial(a, time.monotonic() + redial_seconds())


if __name__ == "__main__":
    main()
