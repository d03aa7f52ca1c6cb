"""Fleet: pins, outboxes, owed requests and failover of one gateway's sessions (no I/O)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.remote.fleet import Fleet
from engine.remote.messages import Tick
from engine.types import (
    SAMPLE_RATE,
    DecodeOptions,
    InferenceRequest,
    InferenceResult,
    RequestKind,
    Transcript,
)

FINAL, PARTIAL = RequestKind.FINAL, RequestKind.PARTIAL
EARLY, BACKGROUND = RequestKind.EARLY, RequestKind.BACKGROUND


def request(session: str, request_id: int, kind: RequestKind = FINAL) -> InferenceRequest:
    audio = np.full(160 * (request_id + 1), request_id, np.float32)
    return InferenceRequest(
        session, request_id // 2, kind, audio, DecodeOptions(), 0.0, request_id=request_id
    )


def sized(session: str, request_id: int, kind: RequestKind, samples: int) -> InferenceRequest:
    """A request of `samples` samples of audio."""
    audio = np.zeros(samples, np.float32)
    return InferenceRequest(
        session, request_id, kind, audio, DecodeOptions(), 0.0, request_id=request_id
    )


def answer(req: InferenceRequest, text: str = "") -> InferenceResult:
    text = text or f"{req.session_id}:{req.request_id}"
    return InferenceResult(req.ref, Transcript(text, "en", "NEUTRAL", "Speech", True, text))


def keys(tick: Tick) -> list[tuple[str, int, RequestKind]]:
    return [(r.session_id, r.request_id, r.kind) for r in tick.requests]


def fleet_with(*replicas: str, sessions: tuple[str, ...] = ()) -> Fleet:
    fleet = Fleet("gw")
    for replica in replicas:
        fleet.add(replica)
    for session in sessions:
        fleet.open(session)
    return fleet


# ---- pinning ----------------------------------------------------------------------


def test_a_session_is_pinned_to_the_replica_with_fewest_sessions() -> None:
    fleet = fleet_with("a", sessions=("s1", "s2", "s3", "s4", "s5"))
    assert fleet.submit(request("s1", 0)) == "a"
    assert fleet.submit(request("s2", 0, PARTIAL)) == "a"
    fleet.add("b")  # a holds two sessions, b none
    assert fleet.submit(request("s3", 0)) == "b"
    assert fleet.submit(request("s4", 0, PARTIAL)) == "b"
    assert fleet.submit(request("s5", 0)) in {"a", "b"}  # two each: either will do
    counts = {r: [fleet.pinned_to(s) for s in ("s1", "s2", "s3", "s4")].count(r) for r in "ab"}
    assert counts == {"a": 2, "b": 2}
    assert fleet.replicas == ("a", "b")


def test_a_session_stays_pinned_while_others_are_less_loaded() -> None:
    fleet = fleet_with("a", sessions=("s",))
    fleet.submit(request("s", 0, PARTIAL))
    fleet.add("b")
    fleet.add("c")
    for i, kind in enumerate((FINAL, EARLY, PARTIAL, BACKGROUND), start=1):
        assert fleet.submit(request("s", i, kind)) == "a"
    assert fleet.pinned_to("s") == "a"
    assert keys(fleet.take("a")) == [
        ("s", 0, PARTIAL),
        ("s", 1, FINAL),
        ("s", 2, EARLY),
        ("s", 3, PARTIAL),
        ("s", 4, BACKGROUND),
    ]
    assert not fleet.take("b") and not fleet.take("c")


def test_adding_a_known_replica_again_changes_nothing() -> None:
    fleet = fleet_with("a", sessions=("s",))
    fleet.submit(request("s", 0))
    assert fleet.add("a") == set()
    assert fleet.replicas == ("a",)
    assert keys(fleet.take("a")) == [("s", 0, FINAL)]


# ---- take -------------------------------------------------------------------------


def test_take_returns_everything_queued_since_the_last_take_as_one_tick() -> None:
    fleet = fleet_with("a", "b", sessions=("s1", "s2", "s3", "gone"))
    fleet.submit(request("s1", 0, PARTIAL))  # a
    fleet.submit(request("s2", 0))  # b
    fleet.submit(request("s3", 0))  # a
    fleet.submit(request("gone", 0, PARTIAL))  # b
    fleet.submit(request("s1", 1))  # a, pinned
    fleet.cancel("gone")

    tick = fleet.take("a")
    assert tick.gateway == "gw"
    assert keys(tick) == [("s1", 0, PARTIAL), ("s3", 0, FINAL), ("s1", 1, FINAL)]
    assert tick.cancels == ()
    tick_b = fleet.take("b")
    assert keys(tick_b) == [("s2", 0, FINAL)] and tick_b.cancels == ("gone",)

    # Emptied: the next take has only what came since.
    assert not fleet.take("a") and fleet.take("a") == Tick("gw")
    fleet.submit(request("s3", 1, PARTIAL))
    assert keys(fleet.take("a")) == [("s3", 1, PARTIAL)]
    assert not fleet.take("a")


def test_take_for_an_unknown_replica_is_an_empty_tick() -> None:
    fleet = fleet_with("a", sessions=("s",))
    fleet.submit(request("s", 0))
    assert fleet.take("nobody") == Tick("gw")
    assert keys(fleet.take("a")) == [("s", 0, FINAL)]


def test_the_requests_travel_whole() -> None:
    fleet = fleet_with("a", sessions=("s",))
    sent = request("s", 3, EARLY)
    fleet.submit(sent)
    (got,) = fleet.take("a").requests
    assert got is sent  # the same request, audio and all


# ---- cancel -----------------------------------------------------------------------


def test_cancel_drops_queued_requests_and_owed_entries_and_tells_the_pinned_replica() -> None:
    fleet = fleet_with("a", sessions=("s", "other"))
    sent = request("s", 0)
    fleet.submit(sent)
    fleet.submit(request("other", 0))
    fleet.take("a")  # both finals in flight
    fleet.submit(request("s", 1, PARTIAL))
    fleet.submit(request("s", 2, EARLY))
    fleet.submit(request("other", 1, PARTIAL))
    assert fleet.owed == 3

    _, replica = fleet.cancel("s")

    assert replica == "a"
    assert fleet.owed == 1  # only other's final
    assert fleet.pinned_to("s") is None
    tick = fleet.take("a")
    assert keys(tick) == [("other", 1, PARTIAL)]
    assert tick.cancels == ("s",)
    # An answer still on its way for the cancelled session is not delivered.
    assert fleet.accept("a", (answer(sent),)) == []
    with pytest.raises(ValueError, match="not open"):
        fleet.submit(request("s", 3))


def test_cancel_of_a_session_waiting_for_a_replica_leaves_nothing_to_send() -> None:
    fleet = fleet_with(sessions=("s", "t"))
    assert fleet.submit(request("s", 0)) is None
    assert fleet.submit(request("t", 0)) is None
    _, replica = fleet.cancel("s")
    assert replica is None
    assert fleet.owed == 1
    assert fleet.add("a") == {"a"}
    tick = fleet.take("a")
    assert keys(tick) == [("t", 0, FINAL)] and tick.cancels == ()


def test_cancel_of_a_session_with_nothing_sent_tells_no_replica() -> None:
    fleet = fleet_with("a", sessions=("s",))
    assert fleet.cancel("s") == (0, None)
    assert fleet.cancel("never-opened") == (0, None)
    assert not fleet.take("a")


def test_a_cancelled_session_id_may_be_opened_again() -> None:
    fleet = fleet_with("a", sessions=("s",))
    with pytest.raises(ValueError, match="already open"):
        fleet.open("s")
    fleet.cancel("s")
    fleet.open("s")
    assert fleet.submit(request("s", 0)) == "a"


def test_cancel_counts_each_dropped_request_once() -> None:
    fleet = fleet_with("a", sessions=("s", "homeless"))
    fleet.submit(request("s", 0))
    fleet.take("a")  # in flight: its answer is no longer wanted
    fleet.submit(request("s", 1, PARTIAL))
    fleet.submit(request("s", 2))  # queued here
    assert fleet.cancel("s") == (3, "a")

    lone = fleet_with(sessions=("s",))
    lone.submit(request("s", 0))  # waits for a replica
    assert lone.cancel("s") == (1, None)


# ---- accept -----------------------------------------------------------------------


def test_an_owed_answer_is_delivered_once_whichever_replica_sends_it() -> None:
    fleet = fleet_with("a", "b", sessions=("s",))
    final, early, background = request("s", 0), request("s", 1, EARLY), request("s", 2, BACKGROUND)
    for req in (final, early, background):
        fleet.submit(req)
    assert fleet.pinned_to("s") == "a" and fleet.owed == 3

    first = answer(final)
    assert fleet.accept("a", (first,)) == [first]
    assert fleet.accept("a", (first,)) == []  # a second copy
    assert fleet.accept("b", (answer(final, "other copy"),)) == []
    assert fleet.owed == 2

    # An owed answer counts from any replica (the one asked first may answer first).
    from_b = answer(early)
    assert fleet.accept("b", (from_b, answer(background), from_b)) == [
        from_b,
        answer(background),
    ]
    assert fleet.owed == 0


def test_an_error_answer_settles_its_request_too() -> None:
    fleet = fleet_with("a", sessions=("s",))
    final = request("s", 0)
    fleet.submit(final)
    failed = InferenceResult(final.ref, None, "out_of_memory", "does not fit")
    assert fleet.accept("a", (failed,)) == [failed]
    assert fleet.owed == 0
    assert fleet.accept("a", (answer(final),)) == []


def test_partials_are_taken_only_from_the_replica_the_session_is_pinned_to() -> None:
    fleet = fleet_with("a", "b", sessions=("s", "t"))
    partial_s, partial_t = request("s", 0, PARTIAL), request("t", 0, PARTIAL)
    fleet.submit(partial_s)  # a
    fleet.submit(partial_t)  # b
    assert fleet.owed == 0  # a partial is never owed

    assert fleet.accept("b", (answer(partial_s), answer(partial_t))) == [answer(partial_t)]
    assert fleet.accept("a", (answer(partial_s), answer(partial_t))) == [answer(partial_s)]


def test_nothing_is_delivered_for_sessions_not_open() -> None:
    fleet = fleet_with("a", sessions=("s",))
    final, partial = request("s", 0), request("s", 1, PARTIAL)
    fleet.submit(final)
    fleet.submit(partial)
    fleet.cancel("s")
    assert fleet.accept("a", (answer(final), answer(partial))) == []
    assert fleet.accept("a", (answer(request("stranger", 0)),)) == []


# ---- lose -------------------------------------------------------------------------


def test_a_lost_replicas_sessions_move_with_their_owed_requests_in_order() -> None:
    fleet = fleet_with("a", sessions=("s1", "s2", "s3"))
    fleet.submit(request("s1", 4))  # final
    fleet.submit(request("s1", 1, EARLY))
    fleet.submit(request("s1", 2, PARTIAL))
    fleet.submit(request("s2", 0, BACKGROUND))
    fleet.add("b")
    fleet.submit(request("s3", 0))  # b: a has two sessions
    fleet.take("a")
    fleet.take("b")  # everything is in flight
    fleet.submit(request("s1", 5, PARTIAL))  # not yet sent
    fleet.submit(request("s2", 1, PARTIAL))
    fleet.accept("a", (answer(request("s1", 1, EARLY)),))  # answered: no longer owed

    assert fleet.lose("a") == {"b"}

    assert fleet.replicas == ("b",)
    assert fleet.pinned_to("s1") == fleet.pinned_to("s2") == fleet.pinned_to("s3") == "b"
    assert keys(fleet.take("b")) == [
        ("s1", 4, FINAL),
        ("s2", 0, BACKGROUND),
        ("s1", 5, PARTIAL),  # unsent partials go too; the one in flight is superseded
        ("s2", 1, PARTIAL),
    ]
    assert fleet.resent == 2
    assert fleet.owed == 3  # s1's final, s2's background, s3's final


def test_owed_requests_of_a_session_are_resent_in_request_id_order() -> None:
    fleet = fleet_with("a", sessions=("s",))
    for rid, kind in ((3, BACKGROUND), (0, FINAL), (2, EARLY), (1, FINAL)):
        fleet.submit(request("s", rid, kind))
    fleet.take("a")
    fleet.add("b")
    fleet.lose("a")
    assert keys(fleet.take("b")) == [
        ("s", 0, FINAL),
        ("s", 1, FINAL),
        ("s", 2, EARLY),
        ("s", 3, BACKGROUND),
    ]
    assert fleet.resent == 4


def test_moved_sessions_spread_over_the_live_replicas() -> None:
    fleet = fleet_with("a", sessions=("s1", "s2", "s3"))
    fleet.submit(request("s1", 0))
    fleet.submit(request("s2", 0))
    fleet.add("b")
    fleet.add("c")
    fleet.submit(request("s3", 0))  # b
    for replica in ("a", "b", "c"):
        fleet.take(replica)

    woken = fleet.lose("a")

    moved = {fleet.pinned_to("s1"), fleet.pinned_to("s2")}
    assert moved == {"b", "c"} == woken
    assert fleet.pinned_to("s3") == "b"
    for session in ("s1", "s2"):
        target = fleet.pinned_to(session)
        assert target is not None
        assert keys(fleet.take(target)) == [(session, 0, FINAL)]


def test_an_owed_request_not_yet_sent_moves_once() -> None:
    fleet = fleet_with("a", "b", sessions=("s",))
    fleet.submit(request("s", 0))  # queued for a, never sent
    fleet.lose("a")
    assert keys(fleet.take("b")) == [("s", 0, FINAL)]
    assert fleet.owed == 1


def test_when_the_last_replica_is_lost_owed_requests_wait_for_the_next() -> None:
    fleet = fleet_with("a", sessions=("s",))
    fleet.submit(request("s", 0))
    fleet.submit(request("s", 1, PARTIAL))
    fleet.take("a")
    assert fleet.lose("a") == set()
    assert fleet.replicas == () and fleet.pinned_to("s") is None
    assert fleet.resent == 1 and fleet.owed == 1
    assert fleet.add("b") == {"b"}
    assert keys(fleet.take("b")) == [("s", 0, FINAL)]
    assert fleet.pinned_to("s") == "b"


def test_losing_an_unknown_replica_changes_nothing() -> None:
    fleet = fleet_with("a", sessions=("s",))
    fleet.submit(request("s", 0))
    fleet.take("a")
    assert fleet.lose("nobody") == set()
    assert fleet.resent == 0 and fleet.pinned_to("s") == "a"
    fleet.lose("a")  # now the final waits for a replica
    assert fleet.lose("a") == set() and fleet.resent == 1


def test_answers_after_a_move_are_delivered_once() -> None:
    fleet = fleet_with("a", "b", sessions=("s",))
    final = request("s", 0)
    fleet.submit(final)
    fleet.take("a")
    fleet.lose("a")
    fleet.take("b")
    assert fleet.accept("b", (answer(final),)) == [answer(final)]
    assert fleet.accept("a", (answer(final),)) == []  # a late copy from the lost one
    assert fleet.owed == 0


# ---- no replica yet ---------------------------------------------------------------


def test_requests_wait_for_a_replica_and_go_to_the_first_one_added() -> None:
    fleet = fleet_with(sessions=("s1", "s2"))
    assert fleet.submit(request("s1", 0)) is None
    assert fleet.submit(request("s2", 0, PARTIAL)) is None
    assert fleet.submit(request("s1", 1, PARTIAL)) is None
    assert fleet.owed == 1 and fleet.pinned_to("s1") is None

    assert fleet.add("a") == {"a"}
    assert fleet.pinned_to("s1") == fleet.pinned_to("s2") == "a"
    assert keys(fleet.take("a")) == [("s1", 0, FINAL), ("s2", 0, PARTIAL), ("s1", 1, PARTIAL)]
    assert fleet.add("b") == set()  # nothing waits any more
    assert not fleet.take("b")


def test_submit_to_a_session_not_open_raises() -> None:
    fleet = fleet_with("a")
    with pytest.raises(ValueError, match="not open"):
        fleet.submit(request("s", 0))
    assert fleet.owed == 0 and not fleet.take("a")


# ---- no replica: the bound on what waits -------------------------------------------


def bounded(samples: int, *replicas: str, sessions: tuple[str, ...] = ()) -> Fleet:
    """A fleet where at most `samples` samples of audio may wait for a replica."""
    fleet = Fleet("gw", homeless_audio_s=samples / SAMPLE_RATE)
    for replica in replicas:
        fleet.add(replica)
    for session in sessions:
        fleet.open(session)
    return fleet


def test_a_fleet_given_no_bound_keeps_ten_minutes_of_audio_waiting() -> None:
    # What a gateway gets (server/engines/attach.py names no bound).
    fleet = fleet_with(sessions=("s",))
    fleet.submit(sized("s", 0, FINAL, 600 * SAMPLE_RATE))  # zeros: not written, hardly held
    fleet.submit(sized("s", 1, FINAL, 1))  # one sample past the bound
    fleet.add("a")
    assert keys(fleet.take("a")) == [("s", 0, FINAL)]
    assert [r.ref.request_id for r in fleet.take_failed()] == [1]


def test_a_waiting_partial_is_replaced_by_its_sessions_next_one() -> None:
    fleet = fleet_with(sessions=("s", "t"))
    fleet.submit(request("s", 0, PARTIAL))
    fleet.submit(request("t", 0, PARTIAL))
    fleet.submit(request("s", 1))
    fleet.submit(request("s", 2, PARTIAL))  # s's partial 0 is stale now
    fleet.add("a")
    assert keys(fleet.take("a")) == [("t", 0, PARTIAL), ("s", 1, FINAL), ("s", 2, PARTIAL)]
    assert fleet.partials_dropped == 1


def test_past_the_bound_waiting_partials_make_room_for_owed_requests_oldest_first() -> None:
    fleet = bounded(1000, sessions=("s", "t", "u"))
    fleet.submit(sized("s", 0, PARTIAL, 400))
    fleet.submit(sized("t", 0, PARTIAL, 300))
    fleet.submit(sized("s", 1, FINAL, 200))  # 900 wait
    fleet.submit(sized("u", 0, EARLY, 300))  # 200 over: s's partial, the oldest, goes

    assert fleet.take_failed() == []
    assert fleet.partials_dropped == 1 and fleet.owed == 2
    fleet.add("a")
    assert keys(fleet.take("a")) == [("t", 0, PARTIAL), ("s", 1, FINAL), ("u", 0, EARLY)]


def test_a_partial_that_does_not_fit_is_dropped_and_the_owed_requests_stay() -> None:
    fleet = bounded(1000, sessions=("s", "t", "u"))
    fleet.submit(sized("s", 0, FINAL, 600))
    fleet.submit(sized("t", 0, BACKGROUND, 300))
    fleet.submit(sized("u", 0, PARTIAL, 200))

    assert fleet.take_failed() == [] and fleet.partials_dropped == 1
    fleet.add("a")
    assert keys(fleet.take("a")) == [("s", 0, FINAL), ("t", 0, BACKGROUND)]


def test_owed_requests_past_the_bound_fail_with_the_no_replica_code() -> None:
    fleet = bounded(1000, sessions=("s", "t", "u"))
    fleet.submit(sized("s", 0, FINAL, 500))
    fleet.submit(sized("t", 0, PARTIAL, 200))
    refused = sized("u", 0, BACKGROUND, 600)  # 300 over, and partials hold only 200
    fleet.submit(refused)
    fleet.submit(sized("u", 1, FINAL, 300))  # still fits: the refused one took no room

    (failed,) = fleet.take_failed()
    assert failed.ref == refused.ref and not failed.ok
    assert failed.error_code == "no_replica"  # NoReplicaError's code
    assert failed.error_message is not None and "no engine replica" in failed.error_message
    assert fleet.take_failed() == []  # handed over once
    assert fleet.owed == 2 and fleet.partials_dropped == 0  # no partial dropped in vain

    fleet.add("a")
    assert keys(fleet.take("a")) == [("s", 0, FINAL), ("t", 0, PARTIAL), ("u", 1, FINAL)]
    # A late answer for the failed request is not delivered: it is settled.
    assert fleet.accept("a", (answer(refused),)) == []


def test_when_the_last_replica_is_lost_owed_requests_past_the_bound_fail() -> None:
    fleet = bounded(1000, "a", sessions=("s", "t"))
    for req in (sized("s", 0, FINAL, 600), sized("t", 0, FINAL, 300), sized("s", 1, EARLY, 300)):
        fleet.submit(req)
    fleet.take("a")

    assert fleet.lose("a") == set()

    # Sent again in (session, request id) order: s's two fit, t's does not.
    assert [r.ref.session_id for r in fleet.take_failed()] == ["t"]
    assert fleet.owed == 2
    fleet.add("b")
    assert keys(fleet.take("b")) == [("s", 0, FINAL), ("s", 1, EARLY)]


def test_cancelling_a_waiting_session_makes_room() -> None:
    fleet = bounded(1000, sessions=("s", "t"))
    fleet.submit(sized("s", 0, FINAL, 800))
    fleet.cancel("s")
    fleet.submit(sized("t", 0, FINAL, 800))
    assert fleet.take_failed() == []
    fleet.add("a")
    assert keys(fleet.take("a")) == [("t", 0, FINAL)]


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="homeless_audio_s"):
        Fleet("gw", homeless_audio_s=-1.0)
