"""The order configurations take turns in: as given in even rounds, reversed in odd ones,
so drift in this shared machine's speed (other tenants, heat) falls on all of them alike."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def in_turn(items: Sequence[T], round_no: int) -> list[T]:
    """`items` in the order round `round_no` runs them."""
    return list(items) if round_no % 2 == 0 else list(reversed(items))


def alternate(items: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """(round, item) for every round, in the order run."""
    for round_no in range(rounds):
        for item in in_turn(items, round_no):
            yield round_no, item
