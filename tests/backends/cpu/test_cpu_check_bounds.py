"""The CPU target's bounds checker (``check_bounds``): which memory is legal for a kernel.

Legal: the arrays passed to the kernel and the memory the runtime itself hands it (the hostcall
buffer printf writes to). Every other address is reported as a LaunchError naming the array, the
index, the kernel and the source location."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.runtime.device import LaunchError

PRINTS = """
kernel show(n: i32, out: ptr<i32>) {
    let i = block_id.x * block_dim.x + thread_id.x;
    printf("thread %d of %d\\n", i, n);
    if i < n {
        out[i] = i * 3;
    }
}
"""


@pytest.mark.parametrize("block", [1, 40])
def test_printf_under_check_bounds(capsys, block):
    """printf's hostcall packets are legal memory: every thread prints its line once and the array
    is written as without the check (was: out-of-bounds atomic at <std>/hostcall.kc)."""
    mod = kc.compile(PRINTS, target="cpu", path="show.kc", check_bounds=True)
    n = block - 3 if block > 3 else block
    out = np.full(block, -1, np.int32)
    mod.show[1, block](n, out)
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == sorted(f"thread {i} of {n}" for i in range(block))
    expect = np.full(block, -1, np.int32)
    expect[:n] = np.arange(n) * 3
    np.testing.assert_array_equal(out, expect)


def test_overrun_of_a_printing_kernel_is_still_reported(capsys):
    """Registering the hostcall buffer leaves every other address illegal: the kernel's overrun of
    its own array is reported with the array, the index and the line."""
    mod = kc.compile(PRINTS, target="cpu", path="show.kc", check_bounds=True)
    out = np.zeros(4, np.int32)
    with pytest.raises(LaunchError, match=r"kernel 'show': out-of-bounds store to 'out'\[4\] \(size 4\) "
                                          r"at show.kc:6:9"):
        mod.show[1, 8](8, out)
    capsys.readouterr()


def test_stray_address_is_not_taken_for_the_hostcall_buffer():
    """A kernel that does not print gets no hostcall buffer in its table: an address far from its
    arrays is reported as such."""
    src = "kernel poke(p: ptr<i32>, far: i64) { p[far] = 1; }"
    mod = kc.compile(src, target="cpu", path="poke.kc", check_bounds=True)
    with pytest.raises(LaunchError, match=r"out-of-bounds store to address 0x[0-9a-f]+ \(4 bytes; not in "
                                          r"any array passed to the kernel\) at poke.kc:1:38"):
        mod.poke[1, 1](np.zeros(4, np.int32), 1 << 28)



ALIAS = """
kernel two_views(a: ptr<i32>, b: ptr<i32>, n: i32, m: i32, off: i32) {
    let i = i32(thread_id.x);
    if i < n {
        a[i] = i + 1;
    }
    if i < m {
        b[off + i] = 100 + i;
    }
}
"""


@pytest.mark.parametrize("how", ["same", "halves", "overlap"])
def test_arguments_sharing_memory_keep_every_write(how):
    """Two arguments over one array's memory (the same array twice, or overlapping views of it) get
    one guarded copy of the span they cover: a copy an argument, each written back in turn, let the
    later argument's copy undo the writes made through the earlier one (seen with std.moe's plans
    passing one array twice). Every write lands, as on a GPU; an access past an argument is still
    reported."""
    mod = kc.compile(ALIAS, target="cpu", path="alias.kc", check_bounds=True)
    n = 8
    arr = np.zeros(2 * n, np.int32)
    want = np.zeros(2 * n, np.int32)
    if how == "same":  # a writes [0, 8), b (a again) [8, 16)
        mod.two_views[1, n](arr, arr, n, n, n)
        want[:n], want[n:] = np.arange(n) + 1, 100 + np.arange(n)
    elif how == "halves":  # views apart: each copied alone
        mod.two_views[1, n](arr[:n], arr[n:], n, n, 0)
        want[:n], want[n:] = np.arange(n) + 1, 100 + np.arange(n)
    else:  # a = arr[4:12] writes 4 .. 11, b = arr[0:8] writes 0 .. 3
        mod.two_views[1, n](arr[4:4 + n], arr[:n], n, 4, 0)
        want[4:4 + n], want[:4] = np.arange(n) + 1, 100 + np.arange(4)
    np.testing.assert_array_equal(arr, want)
    with pytest.raises(LaunchError, match=r"out-of-bounds store to '(a'\[8\]|b'\[12\]) \(size 8\) at alias.kc:8:9"):
        mod.two_views[1, n](arr[4:4 + n], arr[:n], 0, 1, 12)  # past both (b[8 .. 11] is a's memory)
