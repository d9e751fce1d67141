"""Deterministic weights without side effects on the caller's RNG."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch


def seeded(factory: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``factory`` with torch's RNG seeded to 0 and restore the caller's RNG state afterwards."""

    @functools.wraps(factory)
    def wrapper() -> Any:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return factory()

    return wrapper
