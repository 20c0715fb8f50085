"""The probe's requests replayed on an engine model: at each level, that many clients send the
recorded requests in their recorded order, one after another (a closed loop) on one simulated
serving engine. The engine fit matches and reports its goodness against this replay."""

from __future__ import annotations

import itertools

import simpy

from ..scenario import Engine, Inference
from .serving import ServingTier


def replay(records: list[dict], model: Engine) -> list[dict]:
    """The probe's requests on the engine model: at each level, that many clients send the
    recorded requests in their recorded order, one after another (a closed loop)."""
    out: list[dict] = []
    for level in sorted({r["concurrency"] for r in records}):
        at = sorted((r for r in records if r["concurrency"] == level), key=lambda r: r["start"])
        out += _replay_level(at, level, model)
    return out


def _replay_level(queue: list[dict], clients: int, model: Engine) -> list[dict]:
    env = simpy.Environment()
    tier = ServingTier(env, Inference(engines=1, engine=model, prefix_cache=False))
    todo, out, ids = list(reversed(queue)), [], itertools.count()

    def client():
        while todo:
            r = todo.pop()
            t0 = env.now
            yield env.timeout(model.overhead)
            req = tier.request(next(ids), r["prompt_tokens"], r["output_tokens"])
            yield req.done
            o = r["output_tokens"]
            tpot = (req.end - req.first) / (o - 1) if o > 1 else None
            out.append({**r, "ttft": req.first - t0, "tpot": tpot, "latency": req.end - t0})

    for _ in range(clients):
        env.process(client())
    env.run()
    return out
