import numpy as np
import pytest
from pydantic import ValidationError

from simrollout.distributions import parse_dist


def test_lognormal_by_median_and_p99_hits_both():
    d = parse_dist({"kind": "lognormal", "median": 0.15, "p99": 0.6})
    assert d.ppf(0.5) == pytest.approx(0.15)
    assert d.ppf(0.99) == pytest.approx(0.6)
    x = d.sample(np.random.default_rng(1), 200_000)
    assert np.median(x) == pytest.approx(0.15, rel=0.01)
    assert x.mean() == pytest.approx(d.mean(), rel=0.01)


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "exponential", "mean": 2.0, "loc": 0.5},
        {"kind": "gamma", "shape": 2.0, "scale": 0.3},
        {"kind": "weibull", "shape": 1.5, "scale": 1.0},
        {"kind": "loglogistic", "c": 3.0, "scale": 1.0},
        {"kind": "empirical", "quantiles": {0.5: 0.44, 0.95: 0.85, 0.99: 0.99}},
        {"kind": "empirical", "samples": [round(0.01 * i**1.5, 4) for i in range(1, 1001)]},
        {
            "kind": "mixture",
            "components": [
                {"weight": 3, "dist": {"kind": "gamma", "shape": 4, "scale": 0.05}},
                {"weight": 1, "dist": {"kind": "exponential", "mean": 4}},
            ],
        },
    ],
)
def test_every_kind_samples_match_its_mean_and_cdf(spec):
    d = parse_dist(spec)
    x = d.sample(np.random.default_rng(7), 400_000)
    assert x.mean() == pytest.approx(d.mean(), rel=0.03)
    q = float(np.quantile(x, 0.7))
    assert float(d.cdf(q)) == pytest.approx(0.7, abs=0.01)
    assert float(d.ppf(0.7)) == pytest.approx(q, rel=0.03)


def test_empirical_quantiles_pass_through_published_points():
    d = parse_dist({"kind": "empirical", "quantiles": {0.5: 0.11, 0.95: 0.28, 0.99: 0.29}})
    assert np.allclose(d.ppf([0.5, 0.95, 0.99]), [0.11, 0.28, 0.29])
    assert float(d.cdf(0.28)) == pytest.approx(0.95)


def test_bare_number_is_a_constant():
    d = parse_dist(0.25)
    assert d.kind == "constant" and np.all(d.sample(np.random.default_rng(0), 3) == 0.25)


@pytest.mark.parametrize(
    "spec,msg",
    [
        ({"kind": "loglogistic", "c": 1.0, "scale": 1.0}, "infinite mean"),
        ({"kind": "empirical", "quantiles": {0.5: 3, 0.9: 2}}, "out of order"),
        ({"kind": "lognormal", "median": 2, "p99": 1}, "greater than median"),
        ({"kind": "lognormal", "median": 2}, "both median and p99"),
        ({"kind": "gamma", "shape": -1, "scale": 1}, "greater than 0"),
    ],
)
def test_invalid_distributions_are_refused(spec, msg):
    with pytest.raises(ValidationError, match=msg):
        parse_dist(spec)
