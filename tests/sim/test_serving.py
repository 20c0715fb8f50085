"""Serving engines: the event engine against an iteration-by-iteration reference, KV admission,
the prefix cache, routing, and how the engine count moves a rollout."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from simrollout.run.executors import run_scenario
from simrollout.scenario import Inference, scenario_from_dict
from simrollout.sim.serving import ServingTier

IT = {"base": 0.01, "per_prefill_token": 2e-5, "per_decode": 1e-3, "per_context_token": 1e-7}


def tier(env, kv=1_000_000, engines=1, cache=True, routing="sticky", batch=512, it=IT):
    spec = {"iteration": it, "kv_capacity_tokens": kv, "max_batch_tokens": batch}
    return ServingTier(env, Inference(engines=engines, engine=spec, prefix_cache=cache, routing=routing))


def reference(requests, it=IT, batch=512, kv=1_000_000):
    """Iteration by iteration, one engine, no prefix cache: end time of every request."""
    t, waiting, running, ends = 0.0, [], [], {}
    pending = sorted(requests)
    held = 0
    while pending or waiting or running:
        while pending and pending[0][0] <= t:
            waiting.append(list(pending.pop(0)))
        while waiting and held + waiting[0][2] + waiting[0][3] <= kv:  # FIFO admission
            a, k, c, o = waiting.pop(0)
            held += c + o
            running.append({"k": k, "pre": c, "left": o, "ctx": c, "c": c, "o": o})
        if not running:
            t = pending[0][0]
            continue
        dec = [r for r in running if r["pre"] == 0]
        pre = [r for r in running if r["pre"] > 0]
        budget, p = batch - len(dec), 0
        for r in pre:
            take = min(r["pre"], budget)
            if take <= 0:
                break
            r["pre"] -= take
            budget -= take
            p += take
            r["fresh"] = r["pre"] == 0
        t += (
            it["base"]
            + it["per_prefill_token"] * p
            + it["per_decode"] * len(dec)
            + it["per_context_token"] * sum(r["ctx"] for r in dec)
        )
        for r in dec:
            r["left"] -= 1
            r["ctx"] += 1
        for r in pre:
            if r.pop("fresh", False):
                r["left"] -= 1
                r["ctx"] += 1
        for r in [r for r in running if r["left"] == 0]:
            running.remove(r)
            held -= r["c"] + r["o"]
            ends[r["k"]] = t
    return ends


def simulate(requests, **kw):
    env = simpy.Environment()
    tr = tier(env, cache=False, **{k: v for k, v in kw.items() if k in ("kv", "batch")})
    reqs = {}

    def send(a, k, c, o):
        yield env.timeout(a)
        reqs[k] = tr.request(k, c, o)

    for a, k, c, o in requests:
        env.process(send(a, k, c, o))
    env.run()
    return {k: r.end for k, r in reqs.items()}, tr


def test_one_request_known_answer():
    ends, tr = simulate([(0.0, 0, 1000, 11)])
    prefill = IT["base"] + IT["per_prefill_token"] * 512  # two chunks of the 512-token budget
    second = IT["base"] + IT["per_prefill_token"] * 488
    decode = sum(IT["base"] + IT["per_decode"] + IT["per_context_token"] * (1001 + j) for j in range(10))
    assert ends[0] == pytest.approx(prefill + second + decode, rel=1e-12)
    assert tr.ttft[0] == pytest.approx(prefill + second, rel=1e-12)


def test_prefill_attention_counts_causal_pairs_in_any_chunks():
    """A prompt's attention pairs add up to P^2 / 2 however it is chunked; an append after a
    cached prefix attends to the prefix too."""
    it = {**IT, "per_prefill_attention": 1e-7}
    env = simpy.Environment()
    tr = tier(env, it=it)  # a 512-token budget: 1000 tokens in two chunks
    first = tr.request(0, 1000, 2)
    env.run(first.done)
    want = 2 * it["base"] + it["per_prefill_token"] * 1000 + it["per_prefill_attention"] * 1000 * 1000 / 2
    assert first.first == pytest.approx(want, rel=1e-12)
    # the next turn: 100 tokens appended after the 1,002 cached (prompt, first token, one decode)
    t0 = env.now
    nxt = tr.request(0, 1102, 2, reusable=1002)
    env.run(nxt.done)
    want = it["base"] + it["per_prefill_token"] * 100 + it["per_prefill_attention"] * 100 * (1002 + 50)
    assert nxt.first - t0 == pytest.approx(want, rel=1e-12)


def test_a_cached_prefix_pair_costs_per_cached_attention_when_given():
    """With ``per_cached_attention`` the pairs of an append with its cached prefix cost that, its
    own pairs ``per_prefill_attention``; the fast engine's turn times (``unloaded_turns``) agree."""
    import numpy as np

    from simrollout.scenario import Engine
    from simrollout.sim.workload_draws import unloaded_turns

    it = {**IT, "per_prefill_attention": 1e-7, "per_cached_attention": 2e-5}
    env = simpy.Environment()
    tr = tier(env, it=it)
    env.run(tr.request(0, 1000, 2).done)  # a fresh prompt: no cached pairs
    t0 = env.now
    nxt = tr.request(0, 1102, 2, reusable=1002)
    env.run(nxt.done)
    want = (it["base"] + it["per_prefill_token"] * 100 + it["per_prefill_attention"] * 100 * 50
            + it["per_cached_attention"] * 100 * 1002)  # fmt: skip
    assert nxt.first - t0 == pytest.approx(want, rel=1e-12)
    unset = {**it, "per_cached_attention": None}  # as before: a cached pair costs a new one's
    env = simpy.Environment()
    tr = tier(env, it=unset)
    env.run(tr.request(0, 1000, 2).done)
    t1 = env.now
    old = tr.request(0, 1102, 2, reusable=1002)
    env.run(old.done)
    assert old.first - t1 == pytest.approx(want - 100 * 1002 * (2e-5 - 1e-7), rel=1e-12)
    engine = Engine.model_validate({"iteration": it, "kv_capacity_tokens": 16384, "max_batch_tokens": 512})
    tok = {"prompt": np.array([900]), "step_append": np.array([100, 100]), "step_output": np.array([2, 2])}
    turns = unloaded_turns(tok, np.array([2]), engine, None)
    decode = (
        it["base"] + it["per_decode"] + it["per_context_token"] * 1103
    )  # one decode after the first token
    assert turns[1] == pytest.approx(want + decode, rel=1e-12)


def test_the_cached_rate_applies_only_to_chunks_below_its_size():
    """``cached_attention_below``: an append of fewer new tokens than it pays
    ``per_cached_attention`` per cached pair, a longer one a new pair's, whatever shares its
    iteration; the fast engine's turn times agree with the event engine on both sides."""
    from simrollout.scenario import Engine
    from simrollout.sim.workload_draws import unloaded_turns

    it = {**IT, "per_prefill_attention": 1e-7, "per_cached_attention": 2e-5, "cached_attention_below": 64}
    engine = Engine.model_validate({"iteration": it, "kv_capacity_tokens": 16384, "max_batch_tokens": 512})
    for append in (40, 63, 64, 100):
        env = simpy.Environment()
        tr = tier(env, it=it)
        env.run(tr.request(0, 1000, 2).done)
        t0 = env.now
        nxt = tr.request(0, 1002 + append, 2, reusable=1002)
        env.run(nxt.done)
        rate = it["per_cached_attention"] if append < 64 else it["per_prefill_attention"]
        want = (it["base"] + it["per_prefill_token"] * append + it["per_prefill_attention"] * append * append / 2
                + rate * append * 1002)  # fmt: skip
        assert nxt.first - t0 == pytest.approx(want, rel=1e-12), append
        tok = {
            "prompt": np.array([900]),
            "step_append": np.array([100, append]),
            "step_output": np.array([2, 2]),
        }
        turns = unloaded_turns(tok, np.array([2]), engine, None)
        decode = it["base"] + it["per_decode"] + it["per_context_token"] * (1003 + append)
        assert turns[1] == pytest.approx(want + decode, rel=1e-12), append
    # three 40-token appends at once: the first alone (an idle engine wakes on it), the other two
    # in the next iteration beside its decode, 81 tokens in all: each 40-token chunk still slow
    env = simpy.Environment()
    tr = tier(env, it=it)
    for k in range(3):
        env.run(tr.request(k, 1000, 2).done)
    t0 = env.now
    a, b, c = (tr.request(k, 1042, 2, reusable=1002) for k in range(3))
    env.run(c.done)
    one = it["per_prefill_attention"] * 40 * 20 + it["per_cached_attention"] * 40 * 1002
    first = it["base"] + it["per_prefill_token"] * 40 + one
    assert a.first - t0 == pytest.approx(first, rel=1e-12)
    second = (
        it["base"]
        + it["per_prefill_token"] * 80
        + 2 * one
        + it["per_decode"]
        + it["per_context_token"] * 1043
    )
    assert b.first - t0 == pytest.approx(first + second, rel=1e-12) and c.first == b.first
    iteration = Engine.model_validate({"iteration": it, "kv_capacity_tokens": 16384}).iteration
    assert iteration.cached_pairs(40, 1002) == 40 * 1002 and iteration.cached_pairs(64, 1002) == 0.0


def test_an_idle_engine_starts_on_the_first_request_and_the_rest_join_next():
    """Requests of one instant at an idle engine: the first is prefilled alone, the others join
    at the next iteration boundary (a real server wakes on the first)."""
    env = simpy.Environment()
    tr = tier(env)
    reqs = [tr.request(k, 100, 5) for k in range(3)]
    env.run()
    alone = IT["base"] + IT["per_prefill_token"] * 100
    assert reqs[0].first == pytest.approx(alone, rel=1e-12)
    # the next iteration: the first's decode and both other prompts
    both = IT["base"] + IT["per_prefill_token"] * 200 + IT["per_decode"] + IT["per_context_token"] * 101
    assert reqs[1].first == reqs[2].first == pytest.approx(alone + both, rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_closed_form_batches_equal_the_iteration_by_iteration_reference(seed):
    rng = np.random.default_rng(seed)
    n = 40
    arrivals = np.cumsum(rng.exponential(0.05, n))
    reqs = [
        (float(a), k, int(rng.integers(10, 3000)), int(rng.integers(1, 200))) for k, a in enumerate(arrivals)
    ]
    kv = None if seed % 2 else 12_000  # every other seed: KV capacity binds and requests queue
    kw = {"kv": kv} if kv else {}
    got, tr = simulate(reqs, **kw)
    want = reference(reqs, **kw)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-9), k
    if kv:
        assert tr.queued > 0


def test_kv_capacity_binds_and_requests_queue():
    reqs = [(0.001 * k, k, 4000, 100) for k in range(8)]
    _, small = simulate(reqs, kv=9000)  # two at a time
    _, large = simulate(reqs)
    assert small.queued == 6 and large.queued == 0
    assert max(small.kv_wait) > 0.5


def prefix_run(tool_gap: float, kv: int):
    """Two trajectories on one engine: A's turn, then B's turn while A waits for its tool, then
    A's second turn."""
    env = simpy.Environment()
    tr = tier(env, kv=kv)
    out = {}

    def a():
        r = tr.request(0, 5000, 50)
        yield r.done
        yield env.timeout(tool_gap)
        r2 = tr.request(0, 5000 + 50 + 300, 50, reusable=5050)
        yield r2.done
        out["a2"] = r2

    def b():
        yield env.timeout(1.0)  # A is done (0.77 s) and waits for its tool
        r = tr.request(1, 6000, 50)
        yield r.done

    env.process(a())
    env.process(b())
    env.run()
    return tr, out["a2"]


def test_a_prefix_evicted_during_a_long_tool_call_is_prefilled_again():
    tr, a2 = prefix_run(tool_gap=5.0, kv=10_000)  # B's turn needs A's cached tokens (and back)
    assert tr.evicted == 2 and a2.reuse == 0 and a2.prefill_left == 0
    assert tr.reprefilled_tokens == 5050 and tr.prefill_tokens == 5000 + 6000 + 5350
    kept, b2 = prefix_run(tool_gap=5.0, kv=40_000)  # room for both: only the append is prefilled
    assert kept.evicted == 0 and b2.reuse == 5050 and kept.reprefilled_tokens == 0
    assert kept.prefill_tokens == 5000 + 6000 + 300
    assert b2.end - b2.arrival < a2.end - a2.arrival


def test_sticky_routing_keeps_prefixes_that_least_loaded_routing_loses():
    def run(routing):
        env = simpy.Environment()
        tr = tier(env, engines=4, routing=routing)

        def traj(k):
            ctx = 2000
            yield env.timeout(0.01 * k)
            for _ in range(5):
                r = tr.request(k, ctx, 40, reusable=ctx - 200 if ctx > 2000 else 0)
                yield r.done
                yield env.timeout(0.2 + 0.05 * k)
                ctx += 240

        for k in range(8):
            env.process(traj(k))
        env.run()
        return tr

    sticky, spread = run("sticky"), run("least_loaded")
    assert sticky.reused_tokens == sticky.reusable_tokens > 0
    assert spread.reused_tokens < spread.reusable_tokens


def scenario(engines: int, kv: int = 400_000, concurrency: int = 32, **tokens) -> dict:
    return {
        "version": 1,
        "seed": 3,
        "workload": {
            "trajectories": 48,
            "steps": 8,
            "tokens": {
                "prompt": 3000,
                "appended": {"kind": "lognormal", "median": 800, "p99": 8000},
                "output": {"kind": "lognormal", "median": 200, "p99": 2000},
                **tokens,
            },  # fmt: skip
            "tools": {"t": {"weight": 1, "latency": {"kind": "lognormal", "median": 0.5, "p99": 20}}},
        },
        "substrates": [{"name": "s", "cold_start": 1.0, "exec_overhead": 0.05, "teardown": 0.2}],
        "cluster": {
            "concurrency": concurrency,
            "inference": {
                "engines": engines,
                "price_per_hour": 2.0,
                "engine": {"iteration": IT, "kv_capacity_tokens": kv},
            },  # fmt: skip
        },
    }


def summary(d: dict) -> dict:
    return run_scenario(scenario_from_dict(d)).summary.iloc[0].to_dict()


def test_more_engines_never_slower_and_cost_follows_the_engines():
    rows = {e: summary(scenario(e)) for e in (1, 2, 4, 8)}
    spans = [rows[e]["makespan_hours"] for e in (1, 2, 4, 8)]
    assert all(b <= a * 1.001 for a, b in zip(spans, spans[1:])), spans
    assert spans[0] > 1.5 * spans[-1]  # one engine is the bottleneck here
    assert rows[1]["engine_busy_fraction"] > rows[8]["engine_busy_fraction"]
    for e, r in rows.items():
        assert r["gpu_hours"] == pytest.approx(e * r["makespan_hours"])
        assert r["ttft_p50"] > 0 and r["tpot_p50"] >= IT["base"]


def test_a_slow_substrate_shows_in_the_prefix_cache():
    """With KV pressure, longer tool waits (a slow sandbox) lose more prefixes to eviction.
    The pressure is partial (about a quarter of the prefixes survive): where nearly every
    prefix is lost either way, the difference is the draws' noise."""
    fast, slow = scenario(2, kv=100_000), scenario(2, kv=100_000)
    slow["substrates"][0]["exec_overhead"] = 3.0
    a, b = summary(fast), summary(slow)
    assert b["reprefilled_tokens"] > a["reprefilled_tokens"]
    assert b["prefix_hit_rate"] < a["prefix_hit_rate"]


def test_same_seed_same_numbers():
    a, b = summary(scenario(2, kv=60_000)), summary(scenario(2, kv=60_000))
    for k, v in a.items():
        if isinstance(v, float) and not math.isnan(v):
            assert b[k] == v, k


def test_max_context_compacts_and_the_compacted_turn_is_prefilled_whole():
    free, capped = summary(scenario(1)), summary(scenario(1, max_context=6000))
    assert free["compactions"] == 0 and capped["compactions"] > 0
    assert capped["completed"] == 48
    # nothing cached serves a compacted context: it is prefilled whole, more than the appends
    assert capped["prefill_tokens"] > free["prefill_tokens"]
    assert capped["output_tokens"] == free["output_tokens"]


def test_the_training_loop_runs_on_serving_engines():
    d = scenario(2, concurrency=16)
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 4, "samples_per_prompt": 4, "steps": 3, "mode": "async",
                     "max_staleness": 1, "train_time": 20, "placement": "disaggregated", "trainer": {"gpus": 2}}  # fmt: skip
    r = summary(d)
    assert r["training_steps_done"] == 3 and r["llm_requests"] >= 3 * 16 * 8 * 0.5
    assert 0 < r["engine_busy_fraction"] <= 1 and r["ttft_p50"] > 0


def test_train_time_in_tokens_prices_each_trained_sequence():
    """``train_time: {kind: linear, per_token}``: each step trains for its samples' tokens, the
    prompt plus the appended and output tokens of every turn they generated."""
    from simrollout.sim.model import Cell
    from simrollout.sim.workload_draws import draw_work

    d = scenario(2, concurrency=16)
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 2, "samples_per_prompt": 4, "steps": 3,
                     "train_time": {"kind": "linear", "intercept": 5, "per_token": 1e-3}}  # fmt: skip
    scn = scenario_from_dict(d)
    cell = Cell(scn, scn.substrates[0], 16, 0, draw_work(scn, 0, detail=True), "step", keep=True)
    cell.run()
    loop, w = cell.loop, cell.work
    assert len(loop.steps) == 3 and len(loop.trained_members) == 3 * 8
    tokens = 0
    for i in loop.trained_members:  # sync: every trained sample ran all its turns
        assert loop.steps_done[i] == w.steps[i]
        a, b = int(w.step_off[i]), int(w.step_off[i + 1])
        tokens += int(w.prompt[i]) + int(w.step_append[a:b].sum()) + int(w.step_output[a:b].sum())
    assert sum(x.train for x in loop.steps) == pytest.approx(3 * 5 + 1e-3 * tokens)
    # seconds-based workloads have no tokens to price
    d2 = {**d, "training": {**d["training"], "train_time": {"kind": "linear", "per_token": 1e-3}}}
    d2["workload"] = {k: v for k, v in d["workload"].items() if k != "tokens"} | {"llm_time": 1}
    d2["cluster"] = {**d["cluster"], "inference": {"engines": 1}}
    with pytest.raises(Exception, match="per_token prices the tokens trained on"):
        scenario_from_dict(d2)


def test_training_engine_idle_is_unused_kv_not_no_request():
    """With serving engines, the loop's engine idle is the KV cache its running requests leave
    unused while the engines could generate, not the time with no request at all."""
    from simrollout.sim.model import Cell
    from simrollout.sim.workload_draws import draw_work

    d = scenario(2, concurrency=16)
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 2, "samples_per_prompt": 4, "steps": 3, "train_time": 20}
    scn = scenario_from_dict(d)
    cell = Cell(scn, scn.substrates[0], 16, 0, draw_work(scn, 0, detail=True), "step", keep=True)
    cell.run()
    tier, loop = cell.tier, cell.loop
    out = loop.summary(len(tier.engines), tier.utilised_seconds)
    # colocated: the engines could generate outside training and syncing
    avail = len(tier.engines) * (loop._run_end() - loop._trainer_busy())
    cap = scn.cluster.inference.engine.kv_capacity_tokens
    held = sum(e.area_held for e in tier.engines)
    assert out["inference_idle_fraction"] == pytest.approx(1 - held / cap / avail)
    busy_idle = 1 - tier.busy_seconds / avail  # engines without a request
    assert 0 <= busy_idle < out["inference_idle_fraction"] < 1
