"""Sums drawn from their m-fold law against exact laws and brute-force sums."""

import numpy as np
import pytest
from scipy import stats

from simrollout.distributions import parse_dist
from simrollout.distributions.nfold import NFold

EXP = {"kind": "exponential", "mean": 1.0}
LOGN = {"kind": "lognormal", "median": 0.053, "p99": 0.2}  # scenarios' docker exec overhead


@pytest.mark.parametrize("j", [0, 3, 7])
def test_tables_lie_within_the_bound_of_the_exact_law(j):
    """A sum of m exponentials is Gamma(m): the table's CDF at every cell sits between the exact
    CDF there and the exact CDF one bound further (the coupling of the module's docstring)."""
    nf = NFold(parse_dist(EXP), tail=1e-12)
    m = 2**j
    first, cdf = nf._table(j)
    k = first + np.arange(len(cdf))
    edge = nf.h * (k + 1)
    lower, upper = stats.gamma(m).cdf(edge), stats.gamma(m).cdf(edge + m * nf.h)
    assert np.all(cdf >= lower - 1e-9) and np.all(cdf <= upper + 1e-9)
    assert float(nf.bound(m)) == pytest.approx(m * nf.h / 2)


@pytest.mark.parametrize("tail", [1e-6, 0.05])
def test_exponential_sums_have_the_gamma_law(tail):
    """One-sample KS against the exact law, with the tail drawn exactly (a large tail share makes
    most sums hold tail draws)."""
    nf = NFold(parse_dist(EXP), tail=tail)
    m = np.random.default_rng(3).integers(1, 200, 200_000)
    s = nf.sample(np.random.default_rng(4), m)
    u = stats.gamma.cdf(s, m)  # each sum's probability integral transform under its own m
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    if tail == 0.05:
        assert nf.tail == pytest.approx(0.05, rel=1e-6)


@pytest.mark.parametrize("m", [1, 3, 150])
def test_lognormal_sums_match_brute_force_sums(m):
    d = parse_dist(LOGN)
    nf = NFold(d)
    n = 200_000
    s = nf.sample(np.random.default_rng(1), np.full(n, m))
    brute = d.sample(np.random.default_rng(2), n * m).reshape(n, m).sum(axis=1)
    assert stats.ks_2samp(s, brute).pvalue > 1e-3
    se = brute.std() / np.sqrt(n)
    assert abs(s.mean() - m * d.mean()) < 4 * se + float(nf.bound(m))
    for q in (0.5, 0.99, 0.999):  # quantiles within the bound plus the sample's own spread
        want = np.quantile(brute, q)
        assert abs(np.quantile(s, q) - want) < float(nf.bound(m)) + 0.02 * want


def test_same_seed_same_sums_and_constants_exact():
    nf = NFold(parse_dist(LOGN))
    m = np.array([0, 1, 2, 150, 151, 1000])
    a = nf.sample(np.random.default_rng(9), m)
    b = nf.sample(np.random.default_rng(9), m)
    assert np.array_equal(a, b) and a[0] == 0.0
    c = NFold(parse_dist(0.25))
    assert np.array_equal(c.sample(np.random.default_rng(0), m), m * 0.25)


# the headline's tool calls: two heavy-tailed categories (TraceLab p50 / p90)
TOOLS = {"kind": "mixture", "components": [
    {"weight": 0.5, "dist": {"kind": "empirical", "quantiles": {0.5: 0.043, 0.9: 0.47}}},
    {"weight": 0.5, "dist": {"kind": "empirical", "quantiles": {0.5: 0.073, 0.9: 1.9}}},
]}  # fmt: skip


def test_a_heavy_tail_splits_lower_so_the_cells_stay_a_thousandth_of_the_mean():
    d = parse_dist(TOOLS)
    nf = NFold(d)
    assert nf.h == pytest.approx(1e-3 * d.mean(), rel=1e-12)  # at 1e-6 a cell would be 0.14 s
    assert 1e-6 < nf.tail <= 1e-2 and nf.split == pytest.approx(float(d.ppf(1 - nf.tail)))
    assert NFold(d, tail=1e-6).h > 100 * nf.h


@pytest.mark.parametrize("m", [1, 20, pytest.param(150, marks=pytest.mark.slow)])
def test_tool_mixture_sums_match_brute_force_sums(m):
    """Sums of the mixture (its tail drawn per component, above the split) against sums of its
    calls drawn one by one."""
    d = parse_dist(TOOLS)
    nf = NFold(d)
    n = 200_000
    s = nf.sample(np.random.default_rng(5), np.full(n, m))
    brute = d.sample(np.random.default_rng(6), n * m).reshape(n, m).sum(axis=1)
    if m > 1:  # one call's cells (h = 1 ms) are seen by KS at this size: the bound holds instead
        assert stats.ks_2samp(s, brute).pvalue > 1e-3
    b = float(nf.bound(m))
    for q in (0.1, 0.5, 0.9, 0.99):  # each brute-force quantile, in probability, within the bound
        want, tol = np.quantile(brute, q), 5 * np.sqrt(2 * q * (1 - q) / n)
        assert (s <= want - b).mean() <= q + tol and (s <= want + b).mean() >= q - tol


def test_a_mixtures_conditional_tail_is_its_law_above_the_split():
    d = parse_dist(TOOLS)
    x = float(d.ppf(0.99))
    got = d.sample_above(np.random.default_rng(7), 50_000, x)
    assert got.min() >= x
    u = (d.cdf(got) - 0.99) / 0.01  # uniform on (0, 1) under the law above x
    assert stats.kstest(u, "uniform").pvalue > 1e-3


def test_a_mixtures_quantile_is_the_least_value_reaching_it():
    d = parse_dist({"kind": "mixture", "components": [
        {"weight": 1, "dist": 1.0}, {"weight": 1, "dist": {"kind": "lognormal", "median": 2, "p99": 10}}]})  # fmt: skip
    q = np.array([0.0, 0.1, 0.25, 0.5, 0.75, 0.999])
    x = d.ppf(q)
    assert x[0] == 0.0 and np.all(np.diff(x) >= -1e-9)
    assert np.all(d.cdf(x) >= q - 1e-12) and np.all(d.cdf(x * (1 - 1e-9)) < q + 1e-12)
    assert x[2] == pytest.approx(1.0, abs=1e-9)  # the constant's jump holds the quartile
    assert float(d.ppf(0.75)) == pytest.approx(float(d.components[1].dist.ppf(0.5)), rel=1e-9)


@pytest.mark.parametrize("spec", [{"kind": "exponential", "mean": 1.0},
                                  {"kind": "lognormal", "median": 0.05, "p99": 0.4},
                                  {"kind": "empirical", "quantiles": {0.5: 0.043, 0.9: 0.47}}])  # fmt: skip
def test_the_guided_search_finds_the_cells_a_binary_search_finds(spec):
    """Each table's draw starts from its guide; the cells must be searchsorted's, to the bit."""
    from simrollout.distributions.nfold import _add_index

    nf = NFold(parse_dist(spec))
    rng = np.random.default_rng(11)
    body = rng.integers(0, 512, 50_000)
    for j in range(9):
        off, cdf = nf._table(j)
        u = np.concatenate([rng.random(body.size - 3), [0.0, np.nextafter(1.0, 0.0), cdf[cdf.size // 2]]])
        got = np.zeros(body.size, dtype=np.int64)
        _add_index(got, body, j, u, off, cdf, nf.guides[j])
        on = np.flatnonzero((body >> j) & 1)
        want = np.zeros(body.size, dtype=np.int64)
        want[on] = off + np.searchsorted(cdf, u[on], side="left")
        assert np.array_equal(got, want)


def test_threads_drawing_at_once_build_each_law_once():
    """A streamed cell draws its chunks in threads that share the process's laws: built at once,
    each 2^j-fold law is built once (two threads once appended one law twice, every sum through
    the later laws wrong after)."""
    import threading

    from simrollout.distributions import Lognormal

    dist = Lognormal(median=0.3, p99=40.0)
    ref = NFold(dist)
    ref.sample(np.random.default_rng(0), np.array([1 << 12]))

    def draw(shared: NFold, start: threading.Barrier, k: int) -> None:
        start.wait()
        shared.sample(np.random.default_rng(k), np.array([1 << 12]))

    for _ in range(5):
        shared, start = NFold(dist), threading.Barrier(8)
        threads = [threading.Thread(target=draw, args=(shared, start, k)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(shared.tables) == len(ref.tables) == len(shared.guides)
        for (o1, c1), (o2, c2) in zip(shared.tables, ref.tables):
            assert o1 == o2 and np.array_equal(c1, c2)
