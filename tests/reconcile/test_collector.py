"""The collector is held off inside a pass and runs again after it, however the pass ends."""

from __future__ import annotations

import gc
import threading

import pytest

from kgwe.reconcile.collector import collector_held


def test_the_collector_is_off_inside_and_on_again_after():
    assert gc.isenabled()
    with collector_held():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_failing_pass_turns_it_on_again():
    with pytest.raises(RuntimeError), collector_held():
        raise RuntimeError("pass failed")
    assert gc.isenabled()


def test_it_stays_off_until_the_last_of_overlapping_passes_ends():
    first_in, second_done, release = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_held():
            first_in.set()
            release.wait(10)
            seen.append(gc.isenabled())

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with collector_held():
        pass
    second_done.set()
    seen.append(gc.isenabled())  # the first pass still holds it
    release.set()
    thread.join(10)
    assert seen == [False, False]
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off():
    gc.disable()
    try:
        with collector_held():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
