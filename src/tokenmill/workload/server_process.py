"""A local server started as a subprocess, for the scripts that bench one: a free port to give it,
and a wait until its ``/health`` answers (or it exits, which is said at once, not after a timeout)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    """Return once ``http://127.0.0.1:port/health`` answers 200; ``SystemExit`` if ``proc`` exits
    first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the server exited before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("the server did not become ready")
