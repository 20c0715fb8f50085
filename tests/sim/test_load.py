"""The engines' busy time folded as the bodies start and end, against the integral over all."""

from __future__ import annotations

import numpy as np

from simrollout.sim.load import BusyFold, busy_integral


def _bodies(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of ``n`` bodies, each in time order, with ties (times on a grid)."""
    start = np.round(rng.uniform(0, 500, n), 1)
    end = start + np.round(rng.exponential(20, n), 1)
    return np.sort(start), np.sort(end)


def _folded(on, off, cuts, block: int = 1 << 22) -> BusyFold:
    fold = BusyFold(busy_at, block)
    a = c = 0
    for t in [*cuts, np.inf]:  # every start and end before t, as the loop hands them over
        b, d = np.searchsorted(on, t, side="left"), np.searchsorted(off, t, side="left")
        fold.add(on[a:b], off[c:d])
        a, c = b, d
    return fold


busy_at = [0.0, 0.7, 1.3, 1.8, 2.2, 2.5]  # engines busy at each count of bodies (the last: more)


def test_folded_in_time_order_it_is_the_integral_to_the_bit():
    on, off = _bodies(np.random.default_rng(1), 5000)
    whole = busy_integral(on, off, busy_at)
    assert whole > 0
    for cuts in ([], [0.0, 100.0, 100.0, 250.3, 400.0], np.round(np.linspace(1, 520, 97), 1)):
        assert _folded(on, off, cuts).value() == whole  # ties at a cut stay for the next fold


def test_past_a_block_the_blocks_sums_are_added_in_order():
    on, off = _bodies(np.random.default_rng(2), 5000)
    whole = busy_integral(on, off, busy_at)
    small = _folded(on, off, np.linspace(0, 520, 13), block=1000)  # 10,000 terms: ten blocks
    assert small.value() != 0.0 and abs(small.value() / whole - 1) < 1e-12
    assert BusyFold(busy_at).value() == busy_integral([], [], busy_at) == 0.0
