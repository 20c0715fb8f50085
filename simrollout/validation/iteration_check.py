"""Check an engine profile's iteration costs against the real server, one kind of batch at a time.

The agent-loop validation (``validate_engine``) says whether a whole loop holds; this says where
a miss sits: in what one iteration costs, or in how the loop's requests meet in batches.

- A decode batch: ``d`` requests whose prompts the server already holds (each prompt is sent
  once with one output token first, so the prefix cache has it), started together with a few
  new tokens each. Every token after the first is one iteration of ``d`` decodes over their
  contexts: the median time per output token.
- A resumed turn: one request alone with ``new`` tokens after a prompt the server holds; its
  time to first token is the profile's overhead and one prefill iteration.
- A mixed batch: ``d - 1`` such decodes running, then one request with ``new`` tokens after a
  cached prefix. The decodes' longest gap between tokens while it prefills is one iteration
  holding both (the median over the decodes).

Each is the median of a few rounds (their range beside it), next to the profile's iteration
for the same batch (``IterationTime``: tokens and contexts as the server counted them).
"""

from __future__ import annotations

import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..calibration.engine_probe import Lanes, Server, text
from ..errors import InputError
from ..scenario import Engine

SUFFIX = 8  # new tokens after each decode's cached prompt


@dataclass
class IterationPlan:
    decodes: tuple[int, ...] = (1, 2, 4, 8)  # requests decoding together
    contexts: tuple[int, ...] = (16, 512, 1024)  # cached prompt tokens of each decode
    new: tuple[int, ...] = (96, 384)  # prefill tokens of the mixed batches
    mixed_context: int = 512  # cached prefix of every request in the mixed batches
    output: int = 48  # output tokens of a decode batch's requests
    rounds: int = 3
    pin_slots: bool = False  # request k of a batch on slot k (llama.cpp's ``id_slot``; ``Lanes``)
    seed: int = 0


def _slots(extra: dict, n: int, pin: bool) -> list[dict]:
    """The request fields of a batch's ``n`` requests: request ``k`` on slot ``k`` if pinning."""
    lanes = Lanes(pin)
    return [lanes.extra(extra, k) for k in range(n)]


def _warm(server: Server, prompts: list[str], extras: list[dict]) -> None:
    """Each prompt once, all at once, one output token: the server's prefix cache holds them."""
    _together(server, prompts, 1, extras)


def _together(server: Server, prompts: list[str], output: int, extras: list[dict], times=None) -> list[dict]:
    with ThreadPoolExecutor(len(prompts)) as pool:
        futures = [pool.submit(server.complete, p, output, extras[k], None if times is None else times[k])
                   for k, p in enumerate(prompts)]  # fmt: skip
        return [f.result() for f in futures]


def _streamed(res: dict) -> bool:
    """Every token came as it was made (no text held back), so its time is readable."""
    return res["chunks"] >= res["output_tokens"] > 1


def decode_round(server: Server, prompts: list[str], output: int, extras: list[dict], rng) -> dict | None:
    """One round of a decode batch: the median time per output token and mean context."""
    res = _together(server, [p + text(SUFFIX, rng) for p in prompts], output, extras)
    if not all(_streamed(r) for r in res):
        return None
    return {
        "seconds": float(np.median([(r["end"] - r["ttft"]) / (r["output_tokens"] - 1) for r in res])),
        "context": float(np.mean([r["prompt_tokens"] + r["output_tokens"] / 2 for r in res])),
        "cached": min(r["cached_tokens"] or 0 for r in res),
    }


def mixed_round(
    server: Server, prompts: list[str], new: int, output: int, extras: list[dict], rng
) -> dict | None:
    """One round of a mixed batch: ``prompts[:-1]`` decode; once each has made a few tokens,
    ``prompts[-1]`` comes with ``new`` tokens more. The decodes' longest gap until its first
    token (median over the decodes), their context then, and the prefill's new tokens."""
    decoders = prompts[:-1]
    times: list[list[float]] = [[] for _ in decoders]
    with ThreadPoolExecutor(len(decoders) + 1) as pool:
        running = [pool.submit(server.complete, p + text(SUFFIX, rng), output, extras[k], times[k])
                   for k, p in enumerate(decoders)]  # fmt: skip
        deadline = time.perf_counter() + 60
        while min(len(t) for t in times) < 4 and time.perf_counter() < deadline:
            time.sleep(0.005)
        sent = time.perf_counter()
        pre = server.complete(prompts[-1] + text(new, rng), 2, extras[-1])
        first = sent + pre["ttft"]
        done = [f.result() for f in running]
    if not all(_streamed(r) for r in done) or not all(t[-1] > first for t in times):
        return None  # held-back text, or a decode finished before the prefill did
    gaps, ctx = [], []
    for r, t in zip(done, times):
        at = np.array(t)
        # the gaps that end after the prefill was sent and by its first token (with a little slack
        # for the streams' order within one iteration)
        ends = (at[1:] > sent) & (at[1:] <= first + 0.005)
        if ends.any():
            gaps.append(float(np.diff(at)[ends].max()))
        ctx.append(r["prompt_tokens"] + int((at <= first).sum()))
    if not gaps:
        return None
    prefix = pre["cached_tokens"] or 0
    return {"seconds": float(np.median(gaps)), "context": float(np.sum(ctx)), "decodes": len(decoders),
            "new": pre["prompt_tokens"] - prefix, "prefix": prefix}  # fmt: skip


def resume_round(server: Server, prompt: str, new: int, extra: dict, rng) -> dict | None:
    """One request alone with ``new`` tokens after its cached ``prompt``: its time to first token."""
    res = server.complete(prompt + text(new, rng), 2, extra)
    if not _streamed(res):
        return None
    prefix = res["cached_tokens"] or 0
    return {"seconds": res["ttft"], "context": 0.0, "decodes": 0, "new": res["prompt_tokens"] - prefix,
            "prefix": prefix}  # fmt: skip


def _mixed_cost(it, r: dict) -> float:
    """The profile's iteration for a measured batch: a prefill's new tokens after their cached
    prefix, beside the decodes (if any) and their contexts."""
    return it(
        r["new"], r["decodes"], r["context"], r["new"] * (r["prefix"] + r["new"] / 2), r["new"] * r["prefix"]
    )


def _row(kind: str, d: int, rounds: list[dict], predict) -> dict | None:
    ok = [r for r in rounds if r is not None]
    if not ok:
        return None
    secs = [r["seconds"] for r in ok]
    real, sim = float(np.median(secs)), float(np.median([predict(r) for r in ok]))
    return {"concurrency": d, "metric": kind, "real": real, "simulated": sim,
            "diff_pct": 100 * (sim / real - 1), "target_pct": None, "real_min": min(secs),
            "real_max": max(secs), "runs": len(ok)}  # fmt: skip


def iteration_check(server: Server, engine: Engine, plan: IterationPlan, extra: dict) -> pd.DataFrame:
    """Decode batches, resumed turns and mixed batches timed on ``server`` beside ``engine``'s
    iterations for them. A request the server fails stops the check with a clear error (nothing
    is recorded: a partial table would hide which batches were never timed)."""
    server.check()
    over = [d for d in plan.decodes if d > engine.max_running]
    if over:
        raise InputError(
            f"iteration check: the profile's engine runs at most {engine.max_running} requests at "
            f"once; decode batches of {over} would queue. Use smaller batches."
        )
    try:
        return _check(server, engine, plan, extra)
    except Exception as exc:  # the server's error, said once, without a traceback
        raise InputError(
            f"iteration check: the server at {server.base_url} failed a request mid-check "
            f"({type(exc).__name__}: {str(exc)[:200]}); nothing was recorded. Check the server's "
            "log and run the check again."
        ) from None


def _check(server: Server, engine: Engine, plan: IterationPlan, extra: dict) -> pd.DataFrame:
    it, rng, rows = engine.iteration, random.Random(plan.seed), []
    for context in plan.contexts:
        for d in plan.decodes:
            prompts, extras = [text(context, rng) for _ in range(d)], _slots(extra, d, plan.pin_slots)
            _warm(server, prompts, extras)
            rounds = [decode_round(server, prompts, plan.output, extras, rng) for _ in range(plan.rounds)]
            row = _row(f"decode, {context} cached", d, rounds, lambda r, d=d: it(0, d, d * r["context"]))
            if row:
                row["cached_min"] = min(r["cached"] for r in rounds if r)
                if row["cached_min"] < context:  # the server put a request on another slot
                    row["metric"] += " (not all cached)"
                rows.append(row)
    for context in plan.contexts[1:]:  # a turn resuming its cached context, alone
        prompt, extras = text(context, rng), _slots(extra, 1, plan.pin_slots)
        _warm(server, [prompt], extras)
        for new in plan.new:
            rounds = [resume_round(server, prompt, new, extras[0], rng) for _ in range(plan.rounds)]
            row = _row(f"first token, +{new} after {context}", 1, rounds,
                       lambda r: engine.overhead + _mixed_cost(it, r))  # fmt: skip
            if row:
                row["cached_min"] = min(r["prefix"] for r in rounds if r)
                rows.append(row)
    d = max(plan.decodes)
    if d > 1:
        lone = it(0, d - 1, (d - 1) * plan.mixed_context)
        for new in plan.new:
            if new + d > engine.max_batch_tokens:
                continue  # the prefill would span iterations
            longest = it(
                new,
                d - 1,
                (d - 1) * plan.mixed_context,
                new * (plan.mixed_context + new / 2),
                new * plan.mixed_context,
            )
            output = 24 + math.ceil(3 * longest / lone)  # the decodes outlast the prefill
            rounds, extras = [], _slots(extra, d, plan.pin_slots)
            for _ in range(plan.rounds):
                prompts = [text(plan.mixed_context, rng) for _ in range(d)]
                _warm(server, prompts, extras)
                rounds.append(mixed_round(server, prompts, new, output, extras, rng))
            row = _row(f"mixed, +{new} after {plan.mixed_context}", d, rounds, lambda r: _mixed_cost(it, r))
            if row:
                row["cached_min"] = min(r["prefix"] for r in rounds if r)
                rows.append(row)
    return pd.DataFrame(rows)
