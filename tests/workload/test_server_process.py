"""workload/server_process.py: a free port, and the wait for a server subprocess's /health."""

import socket
import subprocess
import sys

import pytest

from tokenmill.workload.server_process import free_port, wait_healthy

HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_free_port_can_be_bound() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_returns_once_health_answers() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", HEALTH_SERVER, str(port)])
    try:
        wait_healthy(port, proc, timeout_s=30)
    finally:
        proc.kill()
        proc.wait()


def test_a_server_that_exits_is_said_at_once() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(SystemExit, match="the server exited before it was ready"):
        wait_healthy(free_port(), proc, timeout_s=30)


def test_a_server_that_never_answers_times_out() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(SystemExit, match="the server did not become ready"):
            wait_healthy(free_port(), proc, timeout_s=0.5)
    finally:
        proc.kill()
        proc.wait()
