"""The lognormal's and exponential's moments, CDF and quantiles, and the n-fold law's convolution,
computed without importing scipy.stats (half a second at every start), equal scipy's to the bit."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from scipy.signal import fftconvolve

from simrollout.distributions.nfold import _self_convolved
from simrollout.distributions.parametric import Exponential, Lognormal


def test_the_lognormal_and_exponential_equal_scipy_to_the_bit():
    rng = np.random.default_rng(3)
    for _ in range(300):
        m = float(rng.lognormal(0, 3))
        loc = float(rng.random()) if rng.random() < 0.5 else 0.0
        d = Lognormal(median=m, p99=m * float(1 + rng.lognormal(1, 1)), loc=loc)
        assert d.mean() == float(d.frozen.mean())
        x = np.concatenate([rng.lognormal(np.log(m), 2, 20), [0.0, -1.0, loc, np.inf, np.nan]])
        np.testing.assert_array_equal(d.cdf(x), d.frozen.cdf(x))
        q = np.concatenate([rng.random(20), [0.0, 0.5, 0.999, 1.0]])
        np.testing.assert_array_equal(d.ppf(q), d.frozen.ppf(q))
        assert d.ppf(0.999) == d.frozen.ppf(0.999) and d.cdf(m) == d.frozen.cdf(m)
        e = Exponential(mean=float(rng.lognormal(0, 2)), loc=loc)
        assert e.mean() == float(e.frozen.mean())


def test_the_self_convolution_is_fftconvolves():
    rng = np.random.default_rng(4)
    for n in (1, 2, 7, 64, 1000, 4097):
        p = rng.random(n)
        np.testing.assert_array_equal(_self_convolved(p), fftconvolve(p, p))


def test_reading_the_headline_scenario_imports_no_scipy_stats():
    code = ("import sys; from simrollout.scenario import load_scenario; "
            "load_scenario('scenarios/1m_150step.yaml'); print('scipy.stats' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
