"""A client of proxy/tests/fixtures/beacon.json, written from the contract's text alone.

One JSON-RPC 2.0 message per line: the station's on stdin, its own on stdout. It tunes in
to --band (fm), answers the station's `time` requests with its clock, and ends when the
station ends the channel. A tune the station refuses with NO_BAND ends it at once: it
sends nothing more and exits with the clientExit code the contract names EX_UNAVAILABLE
(B-15). Another refusal of its tune it reports on stderr, going on untuned.

It hears what --hears names (nothing by default): a beat needing a sound its tune left out
(the beat's `needs`) makes it hang up at once, as the client's declaration's `undeclared`
says (B-16).

--break stays: go on after NO_BAND as after any other refusal.
--break any-chime: take any beat, whatever sound it needs.
"""

import argparse
import json
import os
import sys
import time

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "beacon.json")


def contract():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def unheard(c, msg, hears):
    """Whether `msg` is a beat needing a sound outside `hears` (a `needs` entry it holds)."""
    if msg.get("method") != "beat":
        return False
    for need in c["methods"]["beat"].get("needs", []):
        holds = all(pointer(msg, p) == v for p, v in need.get("matches", {}).items()) and all(
            pointer(msg, p) is not None for p in need.get("present", []))
        if holds and any(cap not in hears for cap in need["capabilities"]):
            return True
    return False


def pointer(v, p):
    """The value at JSON pointer `p` in `v`, or None."""
    for part in p.split("/")[1:]:
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--band", default="fm")
    ap.add_argument("--hears", nargs="*", default=[])
    ap.add_argument("--break", dest="brk", choices=["stays", "any-chime"])
    args = ap.parse_args()
    c = contract()
    no_band = next(e["code"] for e in c["errors"] if e.get("name") == "NO_BAND")
    unavailable = next(v["value"] for v in c["codes"]["clientExit"]["values"]
                       if v.get("name") == "EX_UNAVAILABLE")
    send({"jsonrpc": "2.0", "id": 1, "method": "tune", "params": {"band": args.band, "hears": args.hears}})
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if unheard(c, msg, args.hears) and args.brk != "any-chime":
            print(f"beacon_client: rung a sound it never said it hears: {line.strip()}", file=sys.stderr)
            return 0
        if msg.get("method") == "time" and "id" in msg:
            send({"jsonrpc": "2.0", "id": msg["id"], "result": {"unixMs": int(time.time() * 1000)}})
        elif msg.get("id") == 1 and "error" in msg:
            code = msg["error"].get("code") if isinstance(msg["error"], dict) else None
            print(f"beacon_client: tune refused: {msg['error']}", file=sys.stderr)
            if code == no_band and args.brk != "stays":
                return unavailable
    return 0


if __name__ == "__main__":
    sys.exit(main())
