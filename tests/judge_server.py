"""A scripted OpenAI-compatible chat-completions server on loopback, recording every request body.

Each test sets ``server.script`` to how the next replies behave: a verdict,
a status code, a raw body, a delay, a wrong model, a huge body or a redirect.
Every request is recorded, POST or GET (what a followed redirect sends).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Script:
    passed: Any = True
    status: int = 200
    model: str | None = None
    """Model named in the reply; None echoes the requested one."""
    body: bytes | None = None
    """Raw reply body instead of a chat completion."""
    delay_s: float = 0.0
    extra_bytes: int = 0
    location: str | None = None
    """A ``Location`` header (a redirect target) sent with the reply."""


@dataclass
class JudgeServer:
    url: str
    script: Script = field(default_factory=Script)
    requests: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


@contextmanager
def judge_server() -> Iterator[JudgeServer]:
    """Serve chat completions on 127.0.0.1 (a free port) until the block ends."""
    state = JudgeServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append(b"GET " + self.path.encode())
            state.headers.append(dict(self.headers))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.requests.append(body)
            state.headers.append(dict(self.headers))
            script = state.script
            time.sleep(script.delay_s)
            if script.body is not None:
                reply = script.body
            else:
                content = json.dumps({"passed": script.passed, "why": "scripted", "pad": "x" * script.extra_bytes})
                reply = json.dumps({"model": script.model or json.loads(body)["model"],
                                    "choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
            self.send_response(script.status)
            self.send_header("Content-Type", "application/json")
            if script.location is not None:
                self.send_header("Location", script.location)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
