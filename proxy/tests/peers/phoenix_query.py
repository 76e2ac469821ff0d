"""Phoenix helper for phoenix_e2e.sh: wait for readiness, then read spans back.

  phoenix_query.py wait BASE_URL GRPC_PORT DEADLINE_S PID
      until GET BASE_URL/healthz answers 200 and GRPC_PORT accepts connections
      (fails early if process PID is gone).
  phoenix_query.py spans BASE_URL PROJECT MIN_COUNT DEADLINE_S
      polls GET BASE_URL/v1/projects/PROJECT/spans (all pages) until at least
      MIN_COUNT spans are stored (Phoenix ingests in the background), then
      prints them as one JSON list.
"""
import json
import os
import socket
import sys
import time
import urllib.request


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def wait(base, grpc_port, deadline_s, pid):
    end = time.monotonic() + float(deadline_s)
    while time.monotonic() < end:
        try:
            os.kill(int(pid), 0)
        except OSError:
            print("phoenix exited", file=sys.stderr)
            return 1
        try:
            status, _ = get(base + "/healthz", timeout=2)
            if status == 200:
                with socket.create_connection(("127.0.0.1", int(grpc_port)), timeout=2):
                    return 0
        except OSError:
            pass
        time.sleep(1)
    print("phoenix not ready within %ss" % deadline_s, file=sys.stderr)
    return 1


def all_spans(base, project):
    out, cursor = [], None
    for _ in range(100):
        url = "%s/v1/projects/%s/spans?limit=1000" % (base, project)
        if cursor:
            url += "&cursor=" + urllib.request.quote(cursor)
        _, body = get(url)
        page = json.loads(body)
        out.extend(page.get("data") or [])
        cursor = page.get("next_cursor")
        if not cursor:
            break
    return out


def spans(base, project, min_count, deadline_s):
    end = time.monotonic() + float(deadline_s)
    got = []
    while time.monotonic() < end:
        try:
            got = all_spans(base, project)
        except OSError as e:
            print("query failed: %s" % e, file=sys.stderr)
        if len(got) >= int(min_count):
            json.dump(got, sys.stdout)
            return 0
        time.sleep(1)
    print("only %d of %s spans reached Phoenix within %ss" % (len(got), min_count, deadline_s), file=sys.stderr)
    json.dump(got, sys.stdout)
    return 1


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    sys.exit(wait(*args) if cmd == "wait" else spans(*args))
