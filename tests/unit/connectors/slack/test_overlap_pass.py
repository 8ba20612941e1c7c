"""The Slack overlap re-read's pass (what a checkpoint token holds): it survives its
token exactly, a token it did not write starts a fresh pass, and its note says where
the re-read stands and what to set when it cannot get further."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from memsync.connectors import Cursor
from memsync.connectors.slack.connector import OverlapPass

DAY = 86_400 * 1_000_000
T0 = 1_700_000_000 * 1_000_000
micros = st.integers(min_value=T0, max_value=T0 + 30 * DAY)


@given(
    began=micros,
    oldest=st.none() | micros,
    since=st.none() | micros,
    after=st.none() | micros,
    read=st.integers(0, 10**7),
    runs=st.integers(0, 1000),
    stalled=st.integers(0, 1000),
    current=st.booleans(),
    floor=st.none() | micros,
)
def test_a_pass_survives_its_token_exactly(
    began: int,
    oldest: int | None,
    since: int | None,
    after: int | None,
    read: int,
    runs: int,
    stalled: int,
    current: bool,
    floor: int | None,
) -> None:
    walk = OverlapPass(began, oldest, since, after, read, runs, stalled, current, 200, floor)
    assert OverlapPass.from_token(walk.token()) == walk


def test_a_token_it_did_not_write_starts_a_fresh_pass() -> None:
    for token in (None, "", "not json", '{"other": 1}', '{"overlap_pass": {"began": "x"}}'):
        assert OverlapPass.from_token(token) is None


def test_a_new_pass_hands_out_what_changed_since_the_previous_one_began() -> None:
    """An edit made while a long pass read on, behind it, is found by the next pass."""
    previous = OverlapPass(began=T0, oldest=T0 - 7 * DAY, since=None, current=False)
    start = at(T0) + timedelta(hours=5)
    walk = OverlapPass.begin(
        began=start + timedelta(hours=1),
        oldest=start - timedelta(days=7),
        since=start,
        previous=previous,
        overlap=timedelta(minutes=1),
        page_size=200,
        checkpoint=Cursor(start),
    )
    assert walk.since == T0 - 60 * 1_000_000


def test_a_pass_taken_up_goes_on_from_the_checkpoint_it_moved_inside_a_window() -> None:
    walk = OverlapPass(
        began=T0, oldest=T0 - 7 * DAY, since=T0 - DAY, after=T0 - 3 * DAY, floor=T0 - DAY
    )
    assert walk.next_run(Cursor(at(T0 - DAY // 2))).resume_micros == T0 - DAY // 2
    # A checkpoint the pass did not move (from before it) says nothing of the walk.
    assert walk.next_run(Cursor(at(T0 - DAY))).resume_micros == T0 - 3 * DAY + 1


def test_the_note_says_how_far_the_re_read_got_and_where_it_resumes() -> None:
    walk = OverlapPass(began=T0, oldest=T0, since=T0, after=T0 + DAY, read=2_880, runs=3)
    assert walk.note(T0 + 7 * DAY) == (
        "overlap re-read 2,880/≈20,160 messages in 3 runs, resumes at ts "
        "1700086400.000001 (2023-11-15T22:13:20Z)"
    )
    done = OverlapPass(began=T0, oldest=T0, since=T0, read=20_160, runs=7, current=False)
    assert done.note(T0 + 7 * DAY).startswith(
        "overlap re-read complete: 20,160 messages in 7 runs;"
    )


def test_a_pass_that_got_nowhere_says_what_to_set() -> None:
    walk = OverlapPass(began=T0, oldest=T0, since=T0, after=T0, page_size=200).made_no_progress()
    note = walk.note(T0 + DAY)
    assert note.startswith("overlap re-read made no progress in 1 run: ")
    assert "set a smaller page_size (now 200) or retry caps" in note
    assert not walk.progress(at(T0 + DAY)).advanced


def at(moment: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=moment)


def test_a_pass_stopped_inside_a_thread_goes_on_at_its_parent_after_its_last_reply_read() -> None:
    walk = OverlapPass(began=T0, oldest=T0 - 7 * DAY, since=T0 - DAY, after=T0 - 3 * DAY)
    inside = walk.thread_read("1699900000.000000", "1699990000.000100")
    assert OverlapPass.from_token(inside.token()) == inside
    assert inside.resume_micros == 1_699_900_000 * 1_000_000
    assert (inside.thread, inside.thread_after) == ("1699900000.000000", "1699990000.000100")
    # The window read to its end: the thread is behind it.
    done = inside.window_read(T0 - 2 * DAY, 20)
    assert (done.thread, done.thread_after) == (None, None)
