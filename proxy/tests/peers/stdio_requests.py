"""What the hand-made MCP test servers share: the requests that arrive on stdin, one JSON
line each (anything else is skipped, as those servers answer only requests), and a line
written back."""
import json
import sys
from typing import Iterator


def requests() -> Iterator[dict]:
    """Each JSON-RPC request read from stdin."""
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict) and "id" in msg and "method" in msg:
            yield msg


def send(msg: dict) -> None:
    """One message on stdout, flushed."""
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()
