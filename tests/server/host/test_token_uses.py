"""The host-wide count of each client secret's sessions: bounded, and forgotten at expiry."""

from __future__ import annotations

from server.host.token_uses import TokenUses


def test_a_token_opens_at_most_its_limit() -> None:
    uses = TokenUses()
    assert [uses.use("a", 2, 100.0, 1.0) for _ in range(3)] == [True, True, False]
    assert uses.use("b", 1, 100.0, 1.0)  # each token has its own count
    assert not uses.use("b", 1, 100.0, 2.0)


def test_a_peek_counts_nothing() -> None:
    uses = TokenUses()
    assert uses.use("a", 1, 100.0, 1.0, peek=True) and len(uses) == 0
    assert uses.use("a", 1, 100.0, 1.0)
    assert not uses.use("a", 1, 100.0, 1.0, peek=True)


def test_a_session_given_back_frees_its_count_and_never_goes_below_none() -> None:
    uses = TokenUses()
    assert uses.use("a", 1, 100.0, 1.0)
    uses.give_back("a")  # it was a resume: no session of its own
    assert uses.use("a", 1, 100.0, 1.0)
    assert not uses.use("a", 1, 100.0, 1.0)
    uses.give_back("b")  # never counted: nothing to give back
    uses.give_back("a")
    uses.give_back("a")
    assert [uses.use("a", 1, 100.0, 1.0) for _ in range(2)] == [True, False]


def test_an_expired_tokens_count_is_dropped() -> None:
    uses = TokenUses()
    assert uses.use("a", 1, 10.0, 1.0)
    assert uses.use("b", 1, 20.0, 1.0)
    assert len(uses) == 2
    assert uses.use("c", 1, 30.0, 15.0)
    assert len(uses) == 2  # "a" expired at 10: nothing keeps it
    assert not uses.use("b", 1, 20.0, 15.0)
