"""Reserved per-trajectory arrays: zeros until written, their finished rows' pages handed back."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from simrollout.sim import reserved


def test_small_arrays_are_plain_numpy_zeros():
    a = reserved.zeros((10, 3))
    assert a.shape == (10, 3) and not a.any() and a.base is None
    reserved.release(a, 0, 10)  # nothing to hand back: untouched
    a[:] = 1.0
    reserved.release(a, 0, 10)
    assert (a == 1.0).all()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise: Linux")
def test_released_rows_read_as_zeros_and_the_rest_stay():
    n = 1_000_000
    a = reserved.zeros((n, 3))
    assert not a[::997].any()
    a[:] = 2.0
    reserved.release(a, 0, n // 2)
    assert not a[: n // 2 - 4096].any()  # whole pages before the cut are handed back
    assert (a[n // 2 :] == 2.0).all()  # the page the cut falls in, and everything after it, stay
    rows = reserved.zeros(n, np.dtype([("x", np.float64), ("y", np.float64)]))
    rows.view(np.float64).reshape(n, 2)[:] = 3.0
    reserved.release(rows, 10, 600_000)
    assert rows["x"][0] == 0.0 and rows["y"][600_000] == 3.0
