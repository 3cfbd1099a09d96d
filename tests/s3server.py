"""Start a moto S3 server on a free loopback port (tests and benchmarks)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def moto_endpoint() -> Iterator[str]:
    """Run a moto server and point the AWS environment (and child processes) at it."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)
    saved = {key: os.environ.get(key) for key in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL=endpoint)
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.terminate()
        server.wait(timeout=10)


def new_bucket_url(prefix: str = "registry") -> str:
    """Create a fresh bucket on the current S3 endpoint; return a registry URL inside it."""
    import s3fs

    bucket = f"tribunal-{uuid.uuid4().hex[:16]}"
    s3fs.S3FileSystem(use_listings_cache=False).mkdir(bucket)
    return f"s3://{bucket}/{prefix}"
