"""Shared fixtures: an isolated environment and the registry backends.

The ``store_url`` fixture runs a test once on a local directory and once on
S3 -- a real moto server on a free loopback port, started once per session --
as pyiceberg runs its catalog tests over several backends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

_HOME = tempfile.mkdtemp(prefix="tribunal-tests-")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ["PREFECT_HOME"] = os.path.join(_HOME, "prefect")
os.environ.pop("TRIBUNAL_REGISTRY", None)
os.environ.pop("TRIBUNAL_CONFIG", None)

from registry import Registry  # noqa: E402  (the environment must be set first)
from registry._storage import LocalStorage, S3Storage  # noqa: E402

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on loopback, with the AWS environment pointing at it."""
    port = _free_port()
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
    """Create a fresh bucket on the S3 endpoint and return a registry URL inside it."""
    import s3fs

    bucket = f"tribunal-{uuid.uuid4().hex[:16]}"
    s3fs.S3FileSystem(use_listings_cache=False).mkdir(bucket)
    return f"s3://{bucket}/{prefix}"


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty registry URL on each backend."""
    if request.param == "local":
        return str(tmp_path / "registry")
    request.getfixturevalue("s3_endpoint")
    return new_bucket_url()


class RawAccess:
    """Byte-level access that bypasses the registry's write-once rule (for planting damage)."""

    def __init__(self, registry: Registry) -> None:
        self.storage = registry.storage

    def write(self, key: str, data: bytes) -> None:
        if isinstance(self.storage, LocalStorage):
            (self.storage.root / key).write_bytes(data)
        else:
            assert isinstance(self.storage, S3Storage)
            self.storage.fs.pipe_file(self.storage._path(key), data)

    def delete(self, key: str) -> None:
        if isinstance(self.storage, LocalStorage):
            (self.storage.root / key).unlink()
        else:
            assert isinstance(self.storage, S3Storage)
            self.storage.fs.rm(self.storage._path(key))


@pytest.fixture
def raw() -> type[RawAccess]:
    return RawAccess
