"""A depot of proxy/tests/fixtures/depot.json, written from the contract's text alone.

One JSON object per line on stdin/stdout, told apart by `t`. After the courier's hello it
answers each parcel with a receipt naming it by `re`; parcels that came in one read share
one receipt, the first named by `re` and the rest listed in `also`. Lines that are not
JSON, not objects, of an unknown `t`, or parcels off their schema are skipped; a parcel
before hello is skipped too. A line over lineMax UTF-16 code units ends the session (D-3).

A receipt carries the trace of the first parcel it names, when that parcel has one (D-2).
A parcel of a newer form (`v` above 1) is skipped, unanswered (D-4). A parcel handed in
again (the same `no`) within dedupeSeconds of the first is skipped, unanswered (D-5).

--break lost-batch: a receipt for several parcels names only the first.
--break bad-state: a receipt's state is one the contract does not list.
--break new-trace: a receipt carries a trace of its own, not its parcel's.
--break line-bytes: a line's length is counted in bytes, not UTF-16 code units.
--break newer-v: a parcel of a newer form is taken like any other.
--break resend: a parcel handed in again is taken again.
--break uncapped-couriers: with --listen, serve every courier, however many are connected.

--break unclaimed: with --listen, take every hello, whoever holds its courier (no D-7).

--listen PATH: serve couriers on a unix socket at PATH instead of stdin/stdout, each
connection a session of its own (parcel numbers are kept per session, D-5); a connection
beyond couriersMax is closed unread (D-6). One connection per courier (D-7): a hello from
the van that holds it takes it over and closes the old connection; one from another van
is closed unread; the courier is free again once its connection ends.
"""

import argparse
import json
import os
import socket
import sys
import threading
import time

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "depot.json")


def limits():
    """lineMax, dedupeSeconds scaled by CONTRACT_TIME_SCALE like every peer's clock, and couriersMax."""
    with open(FIXTURE, encoding="utf-8") as f:
        c = json.load(f)["limits"]
    scale = float(os.environ.get("CONTRACT_TIME_SCALE", "1"))
    return c["lineMax"]["value"], c["dedupeSeconds"]["value"] * scale, c["couriersMax"]["value"]


def units(b, brk):
    """A line's length as the cap counts it (D-3); invalid UTF-8 counts a unit a byte."""
    if brk == "line-bytes":
        return len(b)
    return len(b.decode("utf-8", "replace").encode("utf-16-le", "surrogatepass")) // 2


def parcel(m, brk):
    """The parcel's number when `m` is a parcel on its schema of a form it knows, else None."""
    keys = set(m) - {"trace", "v"}
    v = m.get("v", 1)
    known = type(v) is int and (1 <= v <= 1 or (v > 1 and brk == "newer-v"))
    ok = (keys == {"t", "no", "weight"} and known and isinstance(m["no"], str) and m["no"]
          and type(m["weight"]) is int and m["weight"] >= 1
          and (isinstance(m.get("trace"), str) and m["trace"] or "trace" not in m))
    return m["no"] if ok else None


def receipt(write, nos, trace, brk):
    r = {"t": "receipt", "re": nos[0], "state": "stored"}
    if trace:
        r["trace"] = "t-depot" if brk == "new-trace" else trace
    if len(nos) > 1 and brk != "lost-batch":
        r["also"] = nos[1:]
    if brk == "bad-state":
        r["state"] = "shredded"
    write(json.dumps(r).encode() + b"\n")


def session(read, write, brk, cap, window, claim=lambda m: True):
    """One courier's session: lines from `read()` (b"" at the end), receipts to `write`;
    a hello `claim` refuses ends it."""
    taken = {}  # parcel number -> when it was first taken in this session (D-5)
    buf = b""
    hello = False
    while True:
        chunk = read()
        if not chunk:
            return
        buf += chunk
        *lines, buf = buf.split(b"\n")
        if units(buf, brk) > cap or any(units(l, brk) > cap for l in lines):
            return
        nos, first_trace = [], None
        for raw in lines:
            try:
                m = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(m, dict):
                continue
            if m.get("t") == "hello" and isinstance(m.get("courier"), str) and m["courier"]:
                if not claim(m):
                    return
                hello = True
            elif m.get("t") == "parcel" and hello and parcel(m, brk) is not None:
                no, now = parcel(m, brk), time.monotonic()
                if no in taken and now - taken[no] < window and brk != "resend":
                    continue
                taken[no] = now
                if not nos:
                    first_trace = m.get("trace")
                nos.append(no)
        if nos:
            receipt(write, nos, first_trace, brk)


def listen(path, brk, cap, window, couriers):
    """Each connection to `path` a session; one beyond `couriers` open is closed unread (D-6)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    count = {"open": 0}
    desk = {}  # courier -> (van, connection) holding it (D-7)
    lock = threading.Lock()

    def claim(conn, m):
        """Whether `conn` may hand over for m's courier; a van taking it over closes the old."""
        courier, van = m["courier"], m.get("van")
        with lock:
            held = desk.get(courier)
            if held and held[1] is not conn and brk != "unclaimed":
                if held[0] != van:
                    return False
                try:
                    held[1].shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            desk[courier] = (van, conn)
        return True

    def serve(conn):
        try:
            session(lambda: conn.recv(65536), conn.sendall, brk, cap, window,
                    lambda m: claim(conn, m))
        except OSError:
            pass
        finally:
            with lock:
                count["open"] -= 1
                for courier in [k for k, (_, c) in desk.items() if c is conn]:
                    del desk[courier]
            conn.close()

    while True:
        conn, _ = server.accept()
        with lock:
            full = count["open"] >= couriers and brk != "uncapped-couriers"
            if not full:
                count["open"] += 1
        if full:
            conn.close()
            continue
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--break", dest="brk", choices=["lost-batch", "bad-state", "new-trace", "line-bytes", "newer-v", "resend", "uncapped-couriers", "unclaimed"])
    ap.add_argument("--listen", metavar="PATH")
    a = ap.parse_args()
    cap, window, couriers = limits()
    if a.listen:
        listen(a.listen, a.brk, cap, window, couriers)
        return

    def write(b):
        sys.stdout.buffer.write(b)
        sys.stdout.buffer.flush()

    fd = sys.stdin.fileno()
    session(lambda: os.read(fd, 65536), write, a.brk, cap, window)


if __name__ == "__main__":
    main()
