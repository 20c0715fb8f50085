"""The contention curve: monotone, at least 1, finite, and a fitted saturation law that recovers
the law it was sampled from, inside and beyond the measured range."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simrollout.distributions.contention import Curve, law

GRID = [1.0, 1.5, 2, 3, 5, 8, 12, 20, 33, 48, 64, 100, 250, 1000, 10_000]


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.floats(1.01, 500, allow_nan=False),
        st.floats(0.01, 1e4, allow_nan=False),
        min_size=1,
        max_size=10,
    )
)
@pytest.mark.slow
def test_any_measured_points_give_a_monotone_finite_curve_never_below_one(points):
    f = Curve(points)
    ys = [f(n) for n in GRID + sorted(points)]
    xs = GRID + sorted(points)
    order = np.argsort(xs, kind="stable")
    ys = np.array(ys)[order]
    assert np.all(np.isfinite(ys)) and np.all(ys >= 1.0)
    assert np.all(np.diff(ys) >= -1e-9 * ys[1:])


LAWS = [(2.0, 1.0, 2.0), (6.0, 0.8, 4.0), (1.0, 0.6, 1.5), (12.0, 1.0, 6.0)]


@pytest.mark.parametrize("c,b,p", LAWS)
@pytest.mark.parametrize("levels", [(2, 4, 8, 16, 32, 64), (1, 8, 32)])
def test_the_fit_recovers_a_saturation_law_inside_and_beyond_the_measured_range(c, b, p, levels):
    rng = np.random.default_rng(int(c * 10 + b * 100 + p))
    pts = {n: float(law(n, c, b, p)) * math.exp(rng.normal(0, 0.02)) for n in levels if n > 1}
    f = Curve(pts)
    top = max(levels)
    sparse = len(pts) < 4  # calibrate flags it as under-sampled: only its own range is held
    for n in (3, 5, 12, 24, 48, 2 * top, 4 * top):
        if sparse and not min(pts) <= n <= top:
            continue
        truth = float(law(n, c, b, p))
        assert f(n) == pytest.approx(truth, rel=0.10), (n, f(n), truth)


def test_a_sparse_probe_no_longer_draws_a_straight_line_from_one():
    # a daemon serving 4 operations side by side: flat to 4, then linear. The old curve joined
    # (1, 1) to (8, m8) by a straight line, so 2-4 in flight looked slowed.
    truth = lambda n: float(law(n, 4.0, 1.0, 6.0))  # noqa: E731
    f = Curve({8: truth(8), 16: truth(16), 32: truth(32), 64: truth(64)})
    assert f(3) == pytest.approx(truth(3), rel=0.1)
    straight = 1 + (truth(8) - 1) * (3 - 1) / (8 - 1)
    assert abs(f(3) - truth(3)) < abs(straight - truth(3))


def test_a_measured_dip_does_not_make_an_operation_free():
    # the shipped docker-local teardown fell from 14.2x at 24.5 to 8.4x at 36 and extrapolated to 0
    f = Curve({1.984: 1.41, 3.922: 2.34, 7.531: 4.74, 14.25: 10.47, 24.547: 14.19, 35.969: 8.42})
    assert f(53) >= f(36) >= f(24.547) > 1.0
    assert f(1000) >= f(53)


# ---------------------------------------------------------------- where contention lives
def _cold(scope, clients=1, hosts=2, fidelity="step"):
    from simrollout.run.executors import run_scenario
    from simrollout.scenario import scenario_from_dict
    from tests.conftest import make

    cap = {"hosts": hosts, "sandboxes_per_host": 4} if hosts > 1 else {"quota": 8}
    d = make(**{"workload.trajectories": 4, "cluster.concurrency": 4, "cluster.clients": clients,
                "substrates.0.cold_start": 1.0, "substrates.0.capacity": cap,
                "substrates.0.contention": {"create": 1.0, "scope": scope}, "fidelity": fidelity})  # fmt: skip
    res = run_scenario(scenario_from_dict(d), jobs=1, keep_records=True)
    return sorted(next(iter(res.records.values())).cold.tolist())


@pytest.mark.parametrize("fidelity", ["step", "trajectory"])
def test_contention_scope_host_service_and_client(fidelity):
    # 4 creates at once, latency x n (n = creates in flight in the scope, itself included)
    assert _cold("host", fidelity=fidelity) == pytest.approx([1, 1, 2, 2])  # 2 per host
    assert _cold("service", fidelity=fidelity) == pytest.approx([1, 2, 3, 4])  # one control plane
    # a quota'd service probed from one client: its curve applies per rollout client
    assert _cold("client", clients=1, hosts=1, fidelity=fidelity) == pytest.approx([1, 2, 3, 4])
    assert _cold("client", clients=2, hosts=1, fidelity=fidelity) == pytest.approx([1, 1, 2, 2])
    assert _cold("client", clients=4, hosts=1, fidelity=fidelity) == pytest.approx([1, 1, 1, 1])


# ---------------------------------------------------------------- operations weighed by phase
def test_a_weighted_profile_counts_other_phases_at_their_weight():
    import simpy

    from simrollout.scenario import Substrate
    from simrollout.sim.fleet import Fleet

    sub = Substrate(name="d", cold_start=1.0, exec_overhead=0.1, teardown=0.1,
                    contention={"create": 1.0, "exec": 1.0, "weights": {"create": {"exec": 0.25}}})  # fmt: skip
    env = simpy.Environment()
    fleet = Fleet(env, sub, np.random.default_rng(0))
    for _ in range(4):
        fleet.begin(0, "exec")
    assert fleet.load(0) == 4  # failures and the unweighed count: every operation one
    assert fleet.load(0, "exec") == pytest.approx(4.0)
    assert fleet.load(0, "create") == pytest.approx(1.0)  # four execs at 0.25
    proc = env.process(fleet.create(1.0, 1.0))
    env.run(proc)
    assert proc.value[2] == pytest.approx(2.0)  # itself plus 1.0: x (1 + 1.0 (2 - 1)); unweighed 5
    fleet.begin(0, "create")
    assert fleet.load(0, "exec") == pytest.approx(5.0)  # a missing weight is 1


def test_calibrate_recovers_operation_weights_and_keeps_none_where_all_count_one():
    from simrollout.calibration.calibrate import calibrate
    from simrollout.scenario import Substrate
    from tests.synthetic_probe import simulate_probe

    def fitted(weights):
        con = {"create": 0.5, "exec": 0.2, "teardown": 0.2} | ({"weights": weights} if weights else {})
        true = Substrate(name="t", cold_start={"kind": "lognormal", "median": 0.3, "p99": 0.6},
                         exec_overhead={"kind": "lognormal", "median": 0.05, "p99": 0.1}, teardown=0.1,
                         contention=con)  # fmt: skip
        recs = simulate_probe(true, levels=(1, 2, 4, 8, 16, 32), sandboxes=64, commands=5, seed=3)
        for k, r in enumerate(recs):
            r["_file"], r["_line"] = "s", k
        return calibrate(recs, "t", shared=False)[0]["substrate"]["contention"].get("weights")

    got = fitted({"create": {"exec": 0.25, "teardown": 0.25}})
    assert got is not None and got["create"]["exec"] == pytest.approx(0.25, abs=0.25)
    assert fitted(None) is None  # every operation counts one: no weights


# ---------------------------------------------------------------- creates and teardowns shared
def _shared_fleet(**contention):
    import simpy

    from simrollout.scenario import Substrate
    from simrollout.sim.fleet import Fleet

    sub = Substrate(name="d", cold_start=1.0, exec_overhead=0.1, teardown=1.0, contention=contention)
    env = simpy.Environment()
    return env, Fleet(env, sub, np.random.default_rng(0))


def _timed(env, fleet, phase, at, base, out, key):
    yield env.timeout(at)
    t0 = env.now
    yield from fleet.op(0, base, phase)
    out[key] = (t0, env.now)


@pytest.mark.parametrize("shared, a_end, b_end", [(False, 1.0, 2.5), (True, 1.5, 2.0)])
def test_shared_creates_slow_down_when_others_join_and_speed_up_when_they_leave(shared, a_end, b_end):
    # m(n) = n. A starts alone at 0, B at 0.5. At its start A takes 1 s; shared, A runs alone at
    # full rate for 0.5 s, then both at half rate: A ends at 1.5 s, B (0.5 done) alone again at 2.0
    env, fleet = _shared_fleet(create=1.0, teardown=1.0, shared=shared)
    out: dict = {}
    env.process(_timed(env, fleet, "create", 0.0, 1.0, out, "a"))
    env.process(_timed(env, fleet, "teardown", 0.5, 1.0, out, "b"))
    env.run()
    assert out["a"][1] == pytest.approx(a_end) and out["b"][1] == pytest.approx(b_end)
    assert fleet.ops == [0] and all(v == [0] for v in fleet.by_phase.values())


def test_a_shared_create_feels_execs_and_expected_execs_come_and_go():
    env, fleet = _shared_fleet(create=1.0, shared=True)
    out: dict = {}
    env.process(_timed(env, fleet, "create", 0.0, 1.0, out, "a"))

    def execs():
        yield env.timeout(0.25)
        fleet.begin(0, "exec")  # two in flight: half rate from 0.25 to 0.75
        yield env.timeout(0.5)
        fleet.end(0, "exec")
        fleet.add_exec_load(0, 3.0)  # a trajectory engine's bodies: four in all, a quarter rate
        yield env.timeout(0.4)
        fleet.add_exec_load(0, -3.0)

    env.process(execs())
    env.run()
    # 0.25 done by 0.25, 0.25 more by 0.75, 0.1 by 1.15, the last 0.4 alone: ends at 1.55
    assert out["a"][1] == pytest.approx(1.55)
    assert fleet.exec_load == [0.0]


def test_shared_and_at_start_agree_when_operations_never_overlap():
    ends = []
    for shared in (False, True):
        env, fleet = _shared_fleet(create=2.0, teardown=2.0, shared=shared)
        out: dict = {}
        for k in range(4):
            env.process(_timed(env, fleet, "create" if k % 2 else "teardown", 2.0 * k, 1.5, out, k))
        env.run()
        ends.append([out[k][1] for k in range(4)])
    assert ends[0] == pytest.approx([1.5, 3.5, 5.5, 7.5]) and ends[1] == pytest.approx(ends[0])


def test_calibrate_reads_shared_phases_over_each_operations_life():
    from simrollout.calibration.load_curves import in_flight

    # two creates: one 0-2 s, one 1-2 s; an exec 0-1 s. At its start the first saw itself and
    # the exec (2); over its life: itself 2 s, the exec 1 s, the second create 1 s -> 4 / 2 = 2.
    # The second saw itself and the first at its start (2), and both all its life (2).
    recs = [
        {"run_id": "r", "concurrency": 2, "phase": "create", "start": 0.0, "latency": 2.0},
        {"run_id": "r", "concurrency": 2, "phase": "exec", "start": 0.0, "latency": 1.0},
        {"run_id": "r", "concurrency": 2, "phase": "create", "start": 1.0, "latency": 1.0},
    ]
    assert in_flight(recs).tolist() == [2.0, 2.0, 2.0]
    assert in_flight(recs, over_life=True).tolist() == [2.0, 2.0, 2.0]
    recs[1]["latency"] = 0.5  # the exec leaves at 0.5: the first create felt 3.5 / 2
    assert in_flight(recs, over_life=True).tolist() == [1.75, 2.0, 2.0]
    assert in_flight(recs, "create", over_life=True).tolist() == [1.5, 1.0, 2.0]


@pytest.mark.parametrize("creates, ends", [("together", [3.0, 3.0, 3.0]), ("in_order", [1.0, 2.0, 3.0])])
def test_a_bursts_creates_finish_together_or_in_arrival_order_at_the_same_throughput(creates, ends):
    # m(n) = n: the host serves one create a second, however many are in flight. Three arrive
    # together: shared, each progresses at 1/3 and all end at 3 s; in order, the oldest takes the
    # whole capacity (3 x 1/3, then 2 x 1/2, then 1) and they end at 1, 2 and 3 s
    env, fleet = _shared_fleet(create=1.0, shared=True, creates=creates)
    out: dict = {}
    for k in range(3):
        env.process(_timed(env, fleet, "create", 0.0, 1.0, out, k))
    env.run()
    assert [out[k][1] for k in range(3)] == pytest.approx(ends)
    assert fleet.ops == [0]


def test_in_order_creates_leave_teardowns_their_share():
    # m(n) = n, a teardown (base 1) beside two creates (base 1) from 0: three in flight, each
    # share 1/3; in order the first create takes both creates' shares (2/3), the teardown its own.
    # At 1.5 the first create is done (1.5 x 2/3) and the teardown half; then two in flight at 1/2
    # each: the second create (untouched) and the teardown (0.5 left) -> teardown ends at 2.5, the
    # create has 0.5 done and ends alone at 3.0
    env, fleet = _shared_fleet(create=1.0, teardown=1.0, shared=True, creates="in_order")
    out: dict = {}
    env.process(_timed(env, fleet, "create", 0.0, 1.0, out, "a"))
    env.process(_timed(env, fleet, "create", 0.0, 1.0, out, "b"))
    env.process(_timed(env, fleet, "teardown", 0.0, 1.0, out, "t"))
    env.run()
    assert [out[k][1] for k in ("a", "t", "b")] == pytest.approx([1.5, 2.5, 3.0])


def test_in_order_creates_need_the_shared_capacity():
    from simrollout.scenario import Substrate

    with pytest.raises(ValueError, match="in_order"):
        Substrate(
            name="d", cold_start=1.0, exec_overhead=0.1, teardown=1.0, contention={"creates": "in_order"}
        )
