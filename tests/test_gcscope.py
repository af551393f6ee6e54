"""kcompiler.gcscope: the collector's threshold during a compile, and put back after it."""
import gc
import threading

import pytest

from kcompiler.gcscope import COMPILE_GC_THRESHOLDS, fewer_collections

RAISED = tuple(max(a, b) for a, b in zip((700, 10, 10), COMPILE_GC_THRESHOLDS))


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_raised_inside_and_put_back_after(thresholds):
    with fewer_collections():
        assert gc.get_threshold() == RAISED != (700, 10, 10)
        with fewer_collections():  # nested: one change
            assert gc.get_threshold() == RAISED
        assert gc.get_threshold() == RAISED
    assert gc.get_threshold() == (700, 10, 10)


def test_put_back_after_an_error(thresholds):
    @fewer_collections()
    def compile_that_fails():
        assert gc.get_threshold() == RAISED
        raise ValueError("bad program")

    with pytest.raises(ValueError):
        compile_that_fails()
    assert gc.get_threshold() == (700, 10, 10)


def test_collector_off_or_tuned_higher_is_left_alone(thresholds):
    for t in ((0, 10, 10), (50_000, 20, 1000)):
        gc.set_threshold(*t)
        with fewer_collections():
            assert gc.get_threshold() == t
        assert gc.get_threshold() == t


def test_application_change_during_a_compile_is_kept(thresholds):
    with fewer_collections():
        gc.set_threshold(2000, 10, 10)
    assert gc.get_threshold() == (2000, 10, 10)


def test_threads_share_one_change(thresholds):
    inside, release = threading.Barrier(3), threading.Event()

    def compile_in_thread():
        with fewer_collections():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=compile_in_thread) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()  # both compiles are running
    assert gc.get_threshold() == RAISED
    release.set()
    for t in threads:
        t.join()
    assert gc.get_threshold() == (700, 10, 10)
