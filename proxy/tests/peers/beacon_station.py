"""A station of proxy/tests/fixtures/beacon.json, written from the contract's text alone.

One JSON-RPC 2.0 message per line on stdin/stdout. It answers echo, beats when the
client has been quiet for beatSeconds (and again each beatSeconds after its own beat),
and exits, ending the channel, once the client has been quiet for idleSeconds. The
numbers are read from the contract file, scaled by CONTRACT_TIME_SCALE like every peer.

It answers the first tune, and refuses each later one with TUNED (B-4); it hangs up on a
tune line over tuneMax. The echo of `chime` makes it beat at once: a chime where the
first tune's `hears` named chime, else a plain beat (B-5); to such a client the echo
itself says `chime: true` (B-17).
It answers each line that is not JSON, or not one JSON-RPC object, with its error, and
hangs up after answering the badLinesMax-th. The echo of `clock` makes it ask the
client's time; it beats no plain beat until the answer comes, then beats at once (B-13).
An answer to an id it never issued is dropped, as its id rule says.

--break early: beat after half of beatSeconds.
--break never: never hang up on a quiet client.
--break uncounted: never hang up on bad lines.
--break answers: refuse an answer to an id it never issued, instead of dropping it.
--break retired: answer the retired rewind as an unknown method, not RETIRED.
--break retune: serve a second tune instead of refusing it with TUNED.
--break uncapped: serve a tune line over tuneMax instead of hanging up.
--break deaf: chime whatever the client hears.
--break loud: answer the echo of `chime` with `chime: true` whatever the client hears (B-17).
--break own-idle: keep the contract's idleSeconds when a tune carries another (B-8).
--break closed-params: refuse an echo carrying a member it does not know (B-6 leaves them open).
--break bell-rate: ring a bell however often it is rung (no bellRate).
--break ring-rate: ring the bells together however often (no ringRate).
--break exit: exit 0 whatever close code ended its WebSocket (no stationExit).
--break unnamed: answer a line lacking `jsonrpc` without naming it in data.missing (B-10).
--break any-band: ring a bell whatever band the ring names (no OFF_BAND, B-12).
--break unheard: tune in whatever sound the tune hears (no UNHEARD, B-16).
--break restless: beat on while its time request awaits the client's answer (B-13).

--ws URL: serve one client over a WebSocket at URL (ws://HOST:PORT/) instead of stdio,
a message per line. A close from the client exits as its code maps to stationExit (B-9);
its own hang-ups close the socket plainly and exit 0.
--token TOKEN (with --ws): take an upgrade only with `Authorization: Bearer TOKEN`, and
answer any other 401 with no session, serving on (B-11).
--break any-token: take an upgrade whatever its token.

A ring is refused with RINGING over its bell's bucket or the station's (B-7): token
buckets, full at the start, read from the contract's limits. A tune may name a band, which
the result repeats; a ring naming another is answered OFF_BAND and the station hangs up
(B-12). A tune hearing a sound the contract does not know is answered UNHEARD (B-16).
"""

import argparse
import json
import os
import select
import sys
import threading
import time

try:
    from websockets.exceptions import ConnectionClosed
except ImportError:  # stdio needs no websockets
    ConnectionClosed = ()

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "beacon.json")


def _capabilities():
    """The sounds the contract knows, and what a tune hearing another gets (B-16)."""
    with open(FIXTURE, encoding="utf-8") as f:
        c = json.load(f)
    return set(c["capabilities"]), c["parties"]["client"]["declares"]["unknown"]["code"]


CAPABILITIES, UNHEARD = _capabilities()


def refused_status():
    """The status an upgrade without the station's token gets (the channel's upgrade.bearer)."""
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)["channels"]["main"]["upgrade"]["bearer"]["refused"]


def limits():
    with open(FIXTURE, encoding="utf-8") as f:
        c = json.load(f)["limits"]
    scale = float(os.environ.get("CONTRACT_TIME_SCALE", "1"))
    return (c["beatSeconds"]["value"] * scale, c["idleSeconds"]["value"] * scale,
            c["lineMax"]["value"] * 1024, c["badLinesMax"]["value"], c["tuneMax"]["value"] * 1024)


class Bucket:
    """A token bucket of a rate limit in the contract: `burst` at once, `value` every `perSeconds`."""

    def __init__(self, name):
        with open(FIXTURE, encoding="utf-8") as f:
            l = json.load(f)["limits"][name]
        scale = float(os.environ.get("CONTRACT_TIME_SCALE", "1"))
        self.burst, self.tokens = l["burst"], l["burst"]
        self.every = l["perSeconds"] * scale / l["value"]
        self.at = time.monotonic()

    def take(self):
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) / self.every)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class Bad(Exception):
    """A line that counts toward badLinesMax (already answered)."""


class OffBand(Exception):
    """A ring on another band than the session's (answered OFF_BAND): the station hangs up."""


class Stdio:
    """The station's stdin and stdout: a line per message."""

    def __init__(self, cap):
        self.buf, self.cap, self.fd = b"", cap, sys.stdin.fileno()
        self.over = False

    def send(self, data):
        sys.stdout.buffer.write(data + b"\n")
        sys.stdout.buffer.flush()

    def recv(self, timeout):
        """The lines that came within `timeout`; None at the end, or after a partial line
        grew over the cap."""
        if self.over:
            return None
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        chunk = os.read(self.fd, 65536)
        if not chunk:
            return None
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        self.over = len(self.buf) > self.cap
        return lines

    def hang_up(self):
        return 0


class Ws:
    """One client's WebSocket (B-9): a text message per line."""

    def __init__(self, conn, broken):
        self.conn, self.broken = conn, broken

    def send(self, data):
        try:
            self.conn.send(data.decode())
        except ConnectionClosed as e:  # the next recv ends the session
            self.closed = e.rcvd.code if e.rcvd else None

    def recv(self, timeout):
        try:
            m = self.conn.recv(timeout=timeout)
        except TimeoutError:
            return []
        except ConnectionClosed as e:
            self.closed = e.rcvd.code if e.rcvd else None
            return None
        return [m.encode() if isinstance(m, str) else m]

    def hang_up(self):
        """The exit owed: a client's close code maps to stationExit; the station's own 0."""
        code = getattr(self, "closed", None)
        if code is None:
            self.conn.close()
            return 0
        if self.broken == "exit":
            return 0
        with open(FIXTURE, encoding="utf-8") as f:
            table = json.load(f)["codes"]["closeCodes"]["values"]
        return next((v["maps"]["stationExit"] for v in table
                     if v["value"] == code and "stationExit" in v.get("maps", {})), 0)


CHANNEL = None


def send(obj):
    CHANNEL.send(json.dumps(obj).encode())


def error(id_, code, message, data=None):
    body = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    send({"jsonrpc": "2.0", "id": id_, "error": body})


class Session:
    """What one client's session has done."""

    def __init__(self):
        self.tuned = False
        self.hears = []
        # The band the first tune named (B-12), which every ring names again.
        self.band = None
        # The idleSeconds a tune carried (B-8): real seconds, never scaled again.
        self.idle = None
        self.beats = 0
        # The id of the time request awaiting the client's answer (B-13), if any.
        self.asking = None
        self.asked = 0
        self.bells = {}
        self.rings = Bucket("ringRate")

    def may_ring(self, bell, broken):
        """Whether `bell` may ring now (B-7): its own bucket first, then the station's."""
        own = self.bells.setdefault(bell, Bucket("bellRate"))
        if broken != "bell-rate" and not own.take():
            return False
        return broken == "ring-rate" or self.rings.take()

    def ask(self):
        """Ask the client's time (B-2, B-13)."""
        self.asked += 1
        self.asking = f"s:{self.asked}"
        send({"jsonrpc": "2.0", "id": self.asking, "method": "time", "params": {}})

    def beat(self, kind=None):
        self.beats += 1
        params = {"n": self.beats}
        if kind:
            params["kind"] = kind
        send({"jsonrpc": "2.0", "method": "beat", "params": params})


def handle(line, broken, session):
    """Answer one line; whether it was a message (it restarts the clocks). A line that
    counts toward badLinesMax raises :class:`Bad` once answered."""
    try:
        m = json.loads(line)
    except ValueError:
        error(None, -32700, "parse error")
        raise Bad
    if not isinstance(m, dict) or m.get("jsonrpc") != "2.0":
        lacks = ["jsonrpc"] if isinstance(m, dict) and "jsonrpc" not in m else []
        named = lacks and broken != "unnamed"
        error(None, -32600, "invalid request", {"missing": lacks} if named else None)
        raise Bad
    method, id_ = m.get("method"), m.get("id")
    if not isinstance(method, str) and id_ is not None and id_ == session.asking:
        session.asking = None
        session.beat()
        return True
    if not isinstance(method, str):
        if "result" not in m and "error" not in m:
            error(id_, -32600, "invalid request")
            raise Bad
        if broken == "answers":
            error(id_, -32600, "no such request")
        return True
    if "id" not in m:
        return True  # a notification: none is known, each is ignored
    if method == "rewind" and broken != "retired":
        error(id_, -32001, "retired")
        return True
    if method == "tune":
        if session.tuned and broken != "retune":
            error(id_, -32002, "tuned already")
        else:
            params = m.get("params")
            hears = params.get("hears") if isinstance(params, dict) else None
            unknown = [h for h in hears or [] if h not in CAPABILITIES] if isinstance(hears, list) else []
            if unknown and broken != "unheard":
                error(id_, UNHEARD, f"unheard: {unknown[0]}")
                return True
            if isinstance(hears, list):
                session.hears = hears
            patience = params.get("idleSeconds") if isinstance(params, dict) else None
            if isinstance(patience, (int, float)) and broken != "own-idle":
                session.idle = patience
            band = params.get("band") if isinstance(params, dict) else None
            session.band = band if isinstance(band, str) else None
            session.tuned = True
            send({"jsonrpc": "2.0", "id": id_, "result": {"band": band} if session.band else {}})
        return True
    if method == "ring":
        params = m.get("params")
        bell = params.get("bell") if isinstance(params, dict) else None
        band = params.get("band") if isinstance(params, dict) else None
        if not isinstance(bell, str) or not bell:
            error(id_, -32602, "invalid params")
        elif session.band and band is not None and band != session.band and broken != "any-band":
            error(id_, -32004, f"off band: tuned to {session.band}, rung on {band}")
            raise OffBand
        elif session.may_ring(bell, broken):
            send({"jsonrpc": "2.0", "id": id_, "result": {}})
        else:
            error(id_, -32003, "ringing")
        return True
    if method != "echo":
        error(id_, -32601, "method not found")
        return True
    params = m.get("params")
    closed = broken == "closed-params" and isinstance(params, dict) and set(params) != {"text"}
    if not isinstance(params, dict) or not isinstance(params.get("text"), str) or closed:
        error(id_, -32602, "invalid params")
        return True
    result = {"text": params["text"]}
    if params["text"] == "chime" and ("chime" in session.hears or broken == "loud"):
        result["chime"] = True
    send({"jsonrpc": "2.0", "id": id_, "result": result})
    if params["text"] == "chime":
        session.beat("chime" if "chime" in session.hears or broken == "deaf" else None)
    if params["text"] == "clock":
        session.ask()
    return True


def is_tune(line):
    """Whether `line` is a tune request (its cap is tuneMax)."""
    try:
        m = json.loads(line)
    except ValueError:
        return False
    return isinstance(m, dict) and m.get("method") == "tune"


def serve(channel, a):
    """Serve one client on `channel` until one side ends; the exit code owed."""
    global CHANNEL
    CHANNEL = channel
    beat, idle, cap, bad_max, tune_cap = limits()
    bad = 0
    session = Session()
    if a.broken == "early":
        beat /= 2
    heard = last_beat = time.monotonic()
    while True:
        now = time.monotonic()
        if a.broken != "never" and now - heard >= (session.idle or idle):
            return channel.hang_up()
        due = max(heard, last_beat) + beat
        if now >= due and (session.asking is None or a.broken == "restless"):
            session.beat()
            last_beat = now
            continue
        lines = channel.recv(min(due - now, 0.05) if now < due else 0.05)
        if lines is None:
            return channel.hang_up()
        for line in lines:
            if len(line) > cap or (len(line) > tune_cap and a.broken != "uncapped" and is_tune(line)):
                return channel.hang_up()
            try:
                if handle(line, a.broken, session):
                    heard = time.monotonic()
            except OffBand:
                return channel.hang_up()
            except Bad:
                bad += 1
                if bad >= bad_max and a.broken != "uncounted":
                    return channel.hang_up()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--break", dest="broken", choices=["early", "never", "uncounted", "answers", "retired", "retune", "uncapped", "deaf", "closed-params", "bell-rate", "ring-rate", "own-idle", "exit", "unnamed", "any-token", "any-band", "restless", "unheard", "loud"])
    ap.add_argument("--ws", metavar="URL", help="serve one client over a WebSocket at URL")
    ap.add_argument("--token", help="with --ws: the Bearer token an upgrade must carry")
    a = ap.parse_args()
    if not a.ws:
        return serve(Stdio(limits()[2]), a)
    from urllib.parse import urlsplit
    from websockets.sync.server import serve as ws_serve
    url = urlsplit(a.ws)
    done = []
    ended = threading.Event()

    def one(conn):
        done.append(serve(Ws(conn, a.broken), a))
        ended.set()

    def admit(conn, request):
        want = f"Bearer {a.token}"
        if a.token is None or a.broken == "any-token" or request.headers.get("Authorization") == want:
            return None
        return conn.respond(refused_status(), "no session without the station's token\n")

    # Served on a thread of its own: a handler cannot shut down the server it runs in.
    with ws_serve(one, url.hostname, url.port, max_size=None, process_request=admit) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        ended.wait()
    return done[0]


if __name__ == "__main__":
    sys.exit(main())
