"""The compiled float32 normals are numpy's, to the bit, and leave the generator where numpy would."""

import numpy as np
import pytest

from simrollout.distributions import Empirical, Lognormal
from simrollout.distributions.base import COMPILED_NORMALS, float32_normals
from simrollout.distributions.normal_f32 import standard_normal_f32

R = 3.6541529  # the ziggurat's r: values beyond it come from its tail's loop


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("seed", [0, 7, 2026])
@pytest.mark.parametrize("n", [1, 2, 3, 1000, 250_001])
@pytest.mark.parametrize("half", [False, True])
def test_same_values_and_state_as_numpy(seed, n, half):
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    if half:  # a 32-bit draw left over in the generator: the next one is its upper half
        a.random(3, dtype=np.float32), b.random(3, dtype=np.float32)
    want, got = a.standard_normal(n, dtype=np.float32), standard_normal_f32(b, n)
    assert got.dtype == np.float32 and got.shape == (n,)
    assert np.array_equal(_bits(want), _bits(got))
    assert a.bit_generator.state == b.bit_generator.state
    assert a.random() == b.random() and np.array_equal(a.standard_normal(5), b.standard_normal(5))


def test_every_path_of_the_ziggurat():
    """4M draws: the fast path, the wedges' rejections (a uniform and an exp) and the tail (two
    uniforms, log1p), each as numpy takes it."""
    a, b = np.random.default_rng(11), np.random.default_rng(11)
    want, got = a.standard_normal(4_000_000, dtype=np.float32), standard_normal_f32(b, 4_000_000)
    assert np.count_nonzero(np.abs(want) > R) > 500  # the tail was reached many times
    assert np.array_equal(_bits(want), _bits(got))
    assert a.bit_generator.state == b.bit_generator.state


def test_scaled_and_shifted_in_float32_as_numpy_in_place():
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    want = a.standard_normal((300, 500), dtype=np.float32)
    want *= 1.34
    want += 5.37
    got = standard_normal_f32(b, (300, 500), 1.34, 5.37)
    assert got.shape == (300, 500) and np.array_equal(_bits(want), _bits(got))


def test_negative_zero_kept():
    """Unscaled, a draw of -0.0 stays -0.0 (the kernel adds -0.0, which changes nothing)."""
    got = standard_normal_f32(np.random.default_rng(5), 1_000_000)
    want = np.random.default_rng(5).standard_normal(1_000_000, dtype=np.float32)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_other_bit_generators_and_small_draws_left_to_numpy():
    a, b = np.random.Generator(np.random.Philox(4)), np.random.Generator(np.random.Philox(4))
    n = COMPILED_NORMALS * 2
    assert np.array_equal(_bits(a.standard_normal(n, dtype=np.float32)), _bits(float32_normals(b, n)))
    a, b = np.random.default_rng(9), np.random.default_rng(9)
    assert np.array_equal(_bits(a.standard_normal(10, dtype=np.float32)), _bits(float32_normals(b, 10)))


@pytest.mark.parametrize("n", [100, COMPILED_NORMALS + 1])
def test_distributions_draw_the_same_numbers(n):
    """A lognormal is exp(mu + sigma z) in float32; an empirical law, its curve of z: numpy's z."""
    law = Lognormal(median=875, p99=92000)
    mu, sigma = law.params
    z = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    z *= sigma
    z += mu
    assert np.array_equal(_bits(law.sample(np.random.default_rng(1), n)), _bits(np.exp(z)))
    emp = Empirical(quantiles={0.5: 0.043, 0.9: 0.47})
    z = np.random.default_rng(2).standard_normal(n, dtype=np.float32)
    assert np.array_equal(emp.sample(np.random.default_rng(2), n), emp._from_z(z))


def test_a_numpy_that_draws_otherwise_is_left_to_draw(monkeypatch):
    """The compiled loop is used only once it was seen to agree with this numpy: if it did not,
    every draw is numpy's own."""
    from simrollout.distributions import normal_f32

    assert normal_f32.agrees_with_numpy()  # the numpy installed draws as the loop does

    def off(rng, size, scale=None, shift=0.0):
        x = standard_normal_f32(rng, size, scale, shift)
        x[::1000] += 1.0  # a numpy of another algorithm
        return x

    normal_f32.agrees_with_numpy.cache_clear()
    monkeypatch.setattr(normal_f32, "standard_normal_f32", off)
    try:
        assert not normal_f32.agrees_with_numpy()
        n = COMPILED_NORMALS * 2
        want = np.random.default_rng(8).standard_normal(n, dtype=np.float32)
        assert np.array_equal(_bits(want), _bits(float32_normals(np.random.default_rng(8), n)))
    finally:
        normal_f32.agrees_with_numpy.cache_clear()
