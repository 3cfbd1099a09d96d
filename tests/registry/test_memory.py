"""Allocator tuning for long runs (registry/_memory.py): Arrow moves to the system allocator."""

from __future__ import annotations

import pyarrow as pa

from registry import tune_allocators


def test_arrow_uses_the_system_allocator_after_tuning() -> None:
    tune_allocators()
    assert pa.default_memory_pool().backend_name == "system"
    assert pa.array(range(1000)).sum().as_py() == 499500  # and still allocates
