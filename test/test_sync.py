"""Camera-set synchroniser: policy, every outcome counted, bounded under floods (no ROS). Every
case runs through both implementations: cameras/sync.py and the hand-off core's (native/sync.cpp,
the node's one synchroniser where the core runs); a differential test feeds both the same random
streams and compares every set, drop and counter."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bevpool_ros.cameras.sync import CONFIRM_SETS, STREAMS, CameraSetSynchronizer

CAMS = ("A", "B", "C")
MS = 1_000_000
IMPLS = ("python", "native")


def make(impl: str, cameras, **kw):
    """A synchroniser of ``impl`` (the core's skipped, with why, where it is not built)."""
    if impl == "python":
        return CameraSetSynchronizer(cameras, **kw)
    from bevpool_ros.handoff.native.core import library, unavailable_reason
    from bevpool_ros.handoff.native.sync import NativeSynchronizer

    if library() is None:
        pytest.skip(f"the hand-off core is not available here: {unavailable_reason()}")
    return NativeSynchronizer(library(), cameras, **kw)


def feed(sync, cam, stamp, now, streams=STREAMS):
    out = []
    for s in streams:
        out += sync.add(cam, s, stamp, (cam, s, stamp), now)
    return out


def full_set(sync, stamp, now, cams=CAMS):
    out = []
    for c in cams:
        out += feed(sync, c, stamp, now)
    return out


@pytest.mark.parametrize("impl", IMPLS)
def test_complete_set_is_emitted_at_once_with_the_newest_stamp(impl):
    s = make(impl, CAMS, slop=0.01)
    out = feed(s, "A", 100 * MS, 0.0) + feed(s, "B", 103 * MS, 0.001)
    assert out == []
    out = feed(s, "C", 105 * MS, 0.002)
    assert len(out) == 1 and out[0].complete and out[0].missing == ()
    assert out[0].stamp_ns == 105 * MS and out[0].camera_stamp_ns("A") == 100 * MS
    assert out[0].frames["B"]["feat"][1] == ("B", "feat", 103 * MS)
    assert s.counts == {"accepted_messages": 6, "sets_complete": 1}


@pytest.mark.parametrize("impl", IMPLS)
def test_stamps_beyond_slop_form_separate_sets(impl):
    s = make(impl, CAMS, slop=0.01, camera_timeout=1.0)
    feed(s, "A", 100 * MS, 0.0)
    feed(s, "B", 120 * MS, 0.0)  # 20 ms away: not the same capture
    assert s.pending_sets == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_a_late_camera_does_not_cost_the_others_their_set(impl):
    """ApproximateTime would discard; here the set waits for the late camera within the timeout."""
    s = make(impl, CAMS, slop=0.01, camera_timeout=0.2)
    full_set(s, 100 * MS, 0.0, cams=("A", "B"))
    feed(s, "A", 150 * MS, 0.05)
    feed(s, "B", 150 * MS, 0.05)           # the next frame starts while C is still late
    out = feed(s, "C", 100 * MS, 0.12)     # C's first frame arrives 120 ms late
    assert [o.stamp_ns for o in out] == [100 * MS] and out[0].complete
    out = feed(s, "C", 150 * MS, 0.13)
    assert [o.stamp_ns for o in out] == [150 * MS]
    assert s.counts["sets_complete"] == 2 and s.counts["incomplete_timeout"] == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_missing_camera_drop_policy_counts_timeout_and_camera(impl):
    s = make(impl, CAMS, slop=0.01, camera_timeout=0.1)
    full_set(s, 100 * MS, 0.0, cams=("A", "B"))
    assert s.poll(0.05) == []
    assert s.poll(0.1) == []
    assert s.counts["incomplete_timeout"] == 1 and s.missing_by_camera == {"C": 1}
    assert feed(s, "C", 100 * MS, 0.2) == [] and s.counts["late"] == 2  # both streams of the straggler


@pytest.mark.parametrize("impl", IMPLS)
def test_missing_camera_zero_fill_policy_and_min_cameras(impl):
    s = make(impl, CAMS, slop=0.01, camera_timeout=0.1, missing_policy="zero_fill", min_cameras=2)
    full_set(s, 100 * MS, 0.0, cams=("A", "B"))
    out = s.poll(0.1)
    assert len(out) == 1 and not out[0].complete and out[0].missing == ("C",) and set(out[0].frames) == {"A", "B"}
    feed(s, "A", 200 * MS, 0.2)
    feed(s, "B", 200 * MS, 0.2, streams=("depth",))  # B half-present counts as missing
    assert s.poll(0.31) == [] and s.counts["incomplete_timeout"] == 1  # only 1 camera < min_cameras
    assert s.counts["sets_partial"] == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_duplicate_out_of_order_and_late_stamps_are_dropped_and_counted(impl):
    s = make(impl, CAMS, slop=0.01, camera_timeout=1.0)
    assert len(full_set(s, 100 * MS, 0.0)) == 1
    assert full_set(s, 100 * MS, 0.01) == []          # the same set again
    assert s.counts["duplicate"] == 6
    feed(s, "A", 300 * MS, 0.02)
    assert feed(s, "A", 250 * MS, 0.03) == []         # older than A's newest
    assert s.counts["out_of_order"] == 2
    full_set(s, 300 * MS, 0.04, cams=("B", "C"))      # completes 300
    assert s.counts["sets_complete"] == 2
    full_set(s, 400 * MS, 0.05, cams=("A", "C"))      # B misses 400 ...
    assert s.poll(1.1) == [] and s.counts["incomplete_timeout"] == 1
    assert feed(s, "B", 350 * MS, 1.2) == []           # ... new on B's stream, older than the last set
    assert s.counts["late"] == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_completing_a_newer_set_resolves_older_ones_first(impl):
    s = make(impl, CAMS, slop=0.01, camera_timeout=1.0)
    full_set(s, 100 * MS, 0.0, cams=("A", "B"))       # C skipped this frame
    out = full_set(s, 200 * MS, 0.05)
    assert [o.stamp_ns for o in out] == [200 * MS]
    assert s.counts["superseded"] == 1 and s.pending_sets == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_flood_keeps_pending_sets_bounded_and_counts_every_message(impl):
    s = make(impl, CAMS, slop=0.001, camera_timeout=10.0, max_pending=4)
    n = 0
    for i in range(5000):
        for stream in STREAMS:  # only camera A: sets never complete
            s.add("A", stream, (i + 1) * 10 * MS, None, 0.0)
            n += 1
        assert s.pending_sets <= 4
    assert s.counts["accepted_messages"] == n
    assert s.counts["evicted"] == 5000 - 4


@pytest.mark.parametrize("impl", IMPLS)
def test_out_of_order_arrival_and_resolution_keep_output_in_stamp_order(impl):
    s = make(impl, CAMS, slop=0.01, camera_timeout=0.1, missing_policy="zero_fill")
    feed(s, "A", 200 * MS, 0.00)
    feed(s, "B", 100 * MS, 0.05)                       # older stamp, opened later
    out = s.poll(0.11)                                 # only the 200 ms set expired ...
    assert [o.stamp_ns for o in out] == [100 * MS, 200 * MS]  # ... but the older leaves first


@pytest.mark.parametrize("impl", IMPLS)
def test_configure_validates(impl):
    s = make(impl, CAMS)
    for bad in [dict(slop=-1), dict(camera_timeout=0), dict(missing_policy="wait"), dict(min_cameras=4),
                dict(max_pending=0)]:
        args = dict(slop=0.01, camera_timeout=0.1, missing_policy="drop", min_cameras=1, max_pending=4) | bad
        with pytest.raises(ValueError):
            s.configure(**args)
    with pytest.raises(ValueError):
        make(impl, ["A", "A"])
    assert s.add("Z", "depth", 1, None, 0.0) == [] and s.counts["unknown_stream"] == 1


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=60, deadline=None)
@given(st.permutations(list(itertools.product(CAMS, STREAMS))), st.lists(st.integers(0, 9), min_size=6, max_size=6))
def test_any_arrival_order_within_slop_yields_one_complete_set(impl, order, jitter_ms):
    s = make(impl, CAMS, slop=0.01, camera_timeout=1.0)
    out = []
    for (cam, stream), j in zip(order, jitter_ms):
        out += s.add(cam, stream, 1000 * MS + j * MS, None, 0.0)
    assert len(out) == 1 and out[0].complete
    assert out[0].stamp_ns == 1000 * MS + max(jitter_ms) * MS


@pytest.mark.parametrize("impl", IMPLS)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(CAMS), st.sampled_from(STREAMS), st.integers(0, 50),
                          st.floats(0, 0.05)), max_size=120))
def test_every_message_has_exactly_one_outcome(impl, events):
    s = make(impl, CAMS, slop=0.005, camera_timeout=0.02, max_pending=3)
    now, emitted = 0.0, []
    for cam, stream, stamp10ms, dt in events:
        now += dt
        emitted += s.add(cam, stream, stamp10ms * 10 * MS, None, now)
    emitted += s.poll(now + 1.0)
    c = s.counts
    assert c["accepted_messages"] + c["duplicate"] + c["out_of_order"] + c["late"] == len(events)
    stamps = [e.stamp_ns for e in emitted]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert s.pending_sets == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_clock_jumping_back_restarts_once_confirmed_instead_of_dropping_forever(impl):
    s = make(impl, CAMS, slop=0.01, camera_timeout=1.0)
    assert len(full_set(s, 100_000 * MS, 0.0)) == 1
    feed(s, "A", 100_100 * MS, 0.1)                    # pending when the clock jumps
    out = full_set(s, 5 * MS, 0.2) + full_set(s, 105 * MS, 0.3)  # bag looped back to t = 5 ms
    assert out == [] and s.counts["clock_reset"] == 0  # not yet believed
    out = full_set(s, 205 * MS, 0.4)                     # CONFIRM_SETS consistent sets: a real reset
    assert [o.stamp_ns for o in out] == [5 * MS, 105 * MS, 205 * MS]  # held messages used: none lost
    assert s.counts["clock_reset"] == 1 and s.counts["discarded_on_reset"] == 1 and s.epoch == 1
    assert {o.epoch for o in out} == {1}
    assert s.counts["out_of_order"] == 0 and s.counts["late"] == 0 and s.counts["stray_stamp"] == 0
    assert len(full_set(s, 305 * MS, 0.5)) == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_a_reset_just_over_the_threshold_is_confirmed_too(impl):
    s = make(impl, CAMS, slop=0.01, camera_timeout=1.0)
    assert len(full_set(s, 10_000 * MS, 0.0)) == 1
    out = []
    for k in range(CONFIRM_SETS):  # 2.1 s back; the third set is within 2 s of the old newest
        out += full_set(s, (7_900 + 100 * k) * MS, 0.1 * (k + 1))
    assert [o.stamp_ns for o in out] == [7_900 * MS, 8_000 * MS, 8_100 * MS]
    assert s.counts["clock_reset"] == 1 and s.counts["out_of_order"] == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_a_second_producer_seconds_behind_never_makes_the_output_go_back(impl):
    """Every camera also delivered by a producer 3 s behind: its messages are strays, the sets
    of the live timeline leave in stamp order and the clock is never reset."""
    s = make(impl, CAMS, slop=0.01, camera_timeout=1.0)
    emitted = []
    for k in range(30):
        now = 0.1 * k
        live = (100_000 + 100 * k) * MS
        emitted += full_set(s, live, now)
        emitted += full_set(s, live - 3_000 * MS, now + 0.05)
    stamps = [e.stamp_ns for e in emitted]
    assert len(stamps) == 30 and stamps == sorted(stamps) and {e.epoch for e in emitted} == {0}
    assert s.counts["clock_reset"] == 0 and s.counts["stray_stamp"] >= 29 * 6
    assert s.held_messages <= 6  # bounded: at most the newest stray per stream waits


@pytest.mark.parametrize("impl", IMPLS)
def test_one_stream_jumping_back_does_not_reset_the_others(impl):
    dropped = []
    s = make(impl, CAMS, slop=0.01, camera_timeout=1.0, on_drop=lambda r, d: dropped.append(r))
    assert len(full_set(s, 100_000 * MS, 0.0)) == 1
    feed(s, "A", 100_100 * MS, 0.1)
    feed(s, "B", 100_100 * MS, 0.1)                    # a pending set of two cameras
    feed(s, "C", 0, 0.15, streams=("depth",))           # one producer sends stamp 0
    assert s.counts["clock_reset"] == 0 and s.pending_sets == 1 and s.held_messages == 1
    out = feed(s, "C", 100_100 * MS, 0.2)               # C goes on normally and completes the set
    assert [o.stamp_ns for o in out] == [100_100 * MS]
    assert s.counts["stray_stamp"] == 1 and s.held_messages == 0 and "stray_stamp" in dropped


@pytest.mark.parametrize("impl", IMPLS)
def test_every_drop_is_reported_with_its_reason(impl):
    dropped = []
    s = make(impl, CAMS, slop=0.01, camera_timeout=0.5, on_drop=lambda r, d: dropped.append((r, d)))
    full_set(s, 100 * MS, 0.0)
    full_set(s, 100 * MS, 0.01)                          # duplicates
    feed(s, "A", 300 * MS, 0.02)
    feed(s, "A", 250 * MS, 0.03)                         # out of order
    s.poll(1.0)                                          # 300 times out without B and C
    feed(s, "B", 290 * MS, 1.1)                          # late
    reasons = {r for r, _ in dropped}
    assert reasons == {"duplicate", "out_of_order", "incomplete_timeout", "late"}
    assert sum(1 for r, _ in dropped if r != "incomplete_timeout") == sum(
        s.counts[k] for k in ("duplicate", "out_of_order", "late"))
    assert all("stamp" in d or "without" in d for _, d in dropped)


# --- the two implementations against each other ------------------------------------------------
def both(**kw):
    drops = {"python": [], "native": []}
    syncs = {impl: make(impl, CAMS, on_drop=lambda r, d, impl=impl: drops[impl].append((r, d)), **kw)
             for impl in IMPLS}
    return syncs, drops


def shown(sets) -> list:
    return [(s.stamp_ns, s.frames, s.missing, s.first_arrival, s.last_arrival, s.complete, s.epoch) for s in sets]


EVENTS = st.lists(st.tuples(st.sampled_from(CAMS), st.sampled_from(STREAMS + ("other",)),
                            st.one_of(st.integers(0, 60), st.integers(-400, -250), st.just(0)),
                            st.floats(0, 0.05), st.booleans()), max_size=150)


@settings(max_examples=150, deadline=None)
@given(EVENTS, st.sampled_from(["drop", "zero_fill"]), st.integers(1, 3), st.integers(1, 4),
       st.sampled_from([0.0, 0.005, 0.012]))
def test_the_core_emits_drops_and_counts_exactly_what_python_does(events, policy, min_cameras, max_pending, slop):
    """Random streams (stamps that jump back 2.5-4 s for clock resets and strays, duplicates, an unknown
    stream, polls between messages) through both: every set with its payloads, every drop with its text,
    every counter, the pending and held messages, the epoch."""
    syncs, drops = both(slop=slop, camera_timeout=0.02, missing_policy=policy, min_cameras=min_cameras,
                        max_pending=max_pending)
    now, out = 0.0, {impl: [] for impl in IMPLS}
    base = 100_000
    for i, (cam, stream, step, dt, poll) in enumerate(events):
        now += dt
        base += max(step, 0) // 10
        stamp = (base + step) * 10 * MS
        for impl, s in syncs.items():
            out[impl] += s.poll(now) if poll else s.add(cam, stream, stamp, (i, cam, stream), now)
    for impl, s in syncs.items():
        out[impl] += s.poll(now + 1.0)
    assert shown(out["native"]) == shown(out["python"])
    assert drops["native"] == drops["python"]
    p, n = syncs["python"], syncs["native"]
    assert +n.counts == +p.counts and +n.missing_by_camera == +p.missing_by_camera
    assert (n.pending_sets, n.held_messages, n.epoch) == (p.pending_sets, p.held_messages, p.epoch)
    # every payload left with its set or was let go, but those held for an unconfirmed clock reset
    assert n.pending_sets == 0 and len(n._payloads) == n.held_messages


@pytest.mark.parametrize("bad", [dict(slop=-1.5), dict(slop=20.0), dict(slop=1e-7 - 1), dict(camera_timeout=0.0),
                                 dict(camera_timeout=61.25), dict(missing_policy="wait"), dict(min_cameras=4),
                                 dict(min_cameras=0), dict(max_pending=0)])
def test_the_core_refuses_a_configuration_in_pythons_words(bad):
    args = dict(slop=0.01, camera_timeout=0.1, missing_policy="drop", min_cameras=1, max_pending=4) | bad
    said = {}
    for impl in IMPLS:
        s = make(impl, CAMS)
        with pytest.raises(ValueError) as e:
            s.configure(**args)
        said[impl] = str(e.value)
    assert said["native"] == said["python"]
