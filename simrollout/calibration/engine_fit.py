"""Fit an engine profile (simrollout.sim.serving's iteration model) to ``probe openai`` records.

- At concurrency 1 (one request at a time) a request's first token comes after ``overhead``
  plus one iteration over its prompt, ``overhead + base + per_prefill_token x P +
  per_prefill_attention x P^2/2`` (the prompt's causal attention), and each later token after
  one decode iteration, ``base + per_decode + per_context_token x C``, a straight line in the
  context.
- How the lone iteration splits into ``base`` and ``per_decode`` shows only under load: the
  decode runs (at each level, that many long-output requests started together) give the time
  per output token as a line in the decodes in flight. With decode runs at two prompt lengths
  (a short prompt, and a long one the server holds), the context cost is read there, in batches
  (the median over the levels), and the lone line keeps only its level. Without decode runs, the
  probe's loaded levels are replayed on the engine model (the same clients, requests and order)
  and ``per_decode`` is the value whose simulated TPOT medians match the measured ones best.
- KV capacity and running requests: from the server where it says (llama.cpp's slots), else
  given.

Goodness of fit: per level and prompt length, the median measured TTFT and TPOT beside those
of the replay on the fitted profile, and their relative errors.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from scipy import optimize

from ..errors import InputError
from ..scenario import Engine

# the probe's requests replayed on an engine model (simrollout.sim.engine_replay.replay): the
# simulator's, passed in by the caller, so that fitting never imports the simulator
Replay = Callable[[list[dict], Engine], list[dict]]

MIN_REQUESTS = 8


def _ok(records: list[dict]) -> list[dict]:
    files = ", ".join(sorted({str(r["_file"]) for r in records})) or "the given files"
    ok = [r for r in records if r.get("ok") and r.get("ttft") is not None and r.get("output_tokens")]
    if len(ok) < MIN_REQUESTS:
        raise InputError(
            f"{files}: {len(ok)} successful generate records (of {len(records)}); at least "
            f"{MIN_REQUESTS} are needed to fit an engine profile. Probe again ('simrollout probe openai')."
        )
    ones = [r for r in ok if r["concurrency"] == 1 and r["mode"] == "plain"]
    if len({_length(r) for r in ones}) < 2:
        raise InputError(
            f"{files}: the prefill fit needs requests at concurrency 1 with at least two prompt "
            "lengths; probe with the default --concurrency (it starts at 1) and --prompts."
        )
    if len({r["concurrency"] for r in ok}) < 2:
        raise InputError(f"{files}: the decode fit needs at least two concurrency levels; probe 1,2,4,8.")
    return ok


def fit_engine(records: list[dict], kv_capacity: int | None = None, max_running: int | None = None,
               cached_attention: bool | None = None, *, replay: Replay) -> dict:  # fmt: skip
    """The ``engine`` mapping of a profile and its goodness of fit. ``cached_attention``: fit
    ``per_cached_attention`` from the resumed requests (True), never (False), or (None, the
    default) where the probe's pairs of several append sizes show where it switches
    (:func:`_cached_split`: the rate then applies below that size alone). One rate for every
    append, read from the probe's short ones, over-priced the held-out long appends of
    many-turns by 38-61%; none at all under-priced long-output's short ones by 66-83%
    (validation/history.csv)."""
    ok = _ok(records)
    plain = [r for r in ok if r["mode"] == "plain"]
    ones = [r for r in plain if r["concurrency"] == 1]
    # concurrency 1, one request at a time: TPOT is a line in the context (Theil-Sen: a few
    # requests slowed by something else on a shared machine do not tilt it) ...
    dec = [r for r in ones if r["tpot"] is not None]
    ctx = [_context(r) for r in dec]
    per_context, lone = _line(ctx, [r["tpot"] for r in dec])
    per_context, lone = max(per_context, 0.0), max(lone, 1e-6)  # lone = base + per_decode
    # the decode runs (long outputs, started together: decodes with nothing else in the batch),
    # per level and prompt length the least disturbed; with two prompt lengths they give a
    # decode's context cost as it is in a batch, and the lone iteration is re-centred on the
    # lone requests with it
    runs = [r for r in ok if r["mode"] == "decode" and r["tpot"] is not None]
    split = len({r["concurrency"] for r in runs}) >= 2  # the runs split the lone iteration (below)
    best = _best_runs(runs)
    batched = _batched_context_cost(best) if split else None
    if batched is not None:
        per_context = batched
        lone = max(float(np.median([r["tpot"] - per_context * c for r, c in zip(dec, ctx)])), 1e-6)
    # ... and TTFT the overhead and base plus the prompt's prefill: a cost per token and one per
    # pair of tokens in its causal attention (P^2 / 2), from the medians per prompt length
    first, per_prefill, per_attention = _prefill(ones, lone)
    slow = _cached_split(ok, first, per_prefill, per_attention) if cached_attention is not False else None
    per_cached, below = None, None
    if slow is not None:
        per_cached, below = _cached_attention(slow[0], first, per_prefill, per_attention), slow[1]["fast_at"]
    elif cached_attention:
        per_cached = _cached_attention(_resumed(ok), first, per_prefill, per_attention)
    slots = next((r.get("slots") for r in ok if r.get("slots")), None)
    slot_ctx = next((r.get("slot_context") for r in ok if r.get("slot_context")), None)
    kv = kv_capacity or (slots * slot_ctx if slots and slot_ctx else None)
    if kv is None:
        raise InputError(
            f"{', '.join(sorted({str(r.get('_file')) for r in ok}))}: the server these records timed did "
            "not say its KV-cache size: give --kv-capacity TOKENS (vLLM logs it at "
            "start as 'GPU KV cache size: N tokens')."
        )

    def engine(per_decode: float) -> dict:
        """The profile for a split of the lone iteration into ``base`` and ``per_decode``; the
        overhead is what the first token's fixed part leaves beyond ``base``."""
        base = max(lone - per_decode, 1e-6)
        it = {"base": base, "per_prefill_token": per_prefill, "per_prefill_attention": per_attention,
              "per_decode": per_decode, "per_context_token": per_context}  # fmt: skip
        if per_cached is not None:
            it["per_cached_attention"] = per_cached
            if below is not None:
                it["cached_attention_below"] = below
        return {
            "iteration": it,
            "kv_capacity_tokens": int(kv),
            "max_running": int(max_running or slots or 256),
            "max_batch_tokens": 2048 if slots else 8192,  # llama.cpp's -b default; vLLM's chunked prefill
            "overhead": max(first - base, 0.0),
        }  # fmt: skip

    # how the lone iteration splits into a fixed part and a per-decode part: from the decode runs
    # ...
    per_decode = 0.0
    if split:
        d = np.array([c for c, _ in best], float)
        ctx_d = d * np.array([_context(r) for r in best.values()])
        slope_d, _ = _line(d, np.array([r["tpot"] for r in best.values()]) - per_context * ctx_d)
        # the slope only: one decode's iteration stays the lone requests' (many more of them)
        per_decode = float(np.clip(slope_d, 0.0, 0.95 * lone))
    else:  # ... or, without them, the loaded levels replayed on the model, TPOT medians matched
        loaded = [r for r in plain if r["concurrency"] > 1 and r["tpot"] is not None]
        if loaded:
            want = _medians(loaded)

            def loss(x: float) -> float:
                got = _medians(replay(loaded, Engine.model_validate(engine(x))))
                return float(sum((np.log(got[k]) - np.log(v)) ** 2 for k, v in want.items()))

            per_decode = float(optimize.minimize_scalar(loss, bounds=(0.0, lone), method="bounded",
                                                        options={"xatol": lone * 1e-4}).x)  # fmt: skip
    fitted = engine(per_decode)
    it = fitted["iteration"]
    fitted["iteration"] = {
        k: v if k == "cached_attention_below" else float(f"{v:.4g}") for k, v in it.items()
    }
    fitted["overhead"] = float(f"{fitted['overhead']:.4g}")
    model = Engine.model_validate(fitted)
    fit = goodness(ok, model, replay)
    if slow is not None:  # where the probe saw the switch
        fit["cached_attention_switch"] = slow[1]
    return {"engine": fitted, "fit": fit}


def _context(r: dict) -> float:
    """The tokens a request's decodes attend to, on average: its prompt and half its output."""
    return r["prompt_tokens"] + r["output_tokens"] / 2


def _best_runs(runs: list[dict]) -> dict[tuple[int, int], dict]:
    """Per level and prompt length of the decode runs, the least disturbed request (noise on a
    shared machine only adds time)."""
    best: dict[tuple[int, int], dict] = {}
    for r in runs:
        key = (r["concurrency"], _length(r))
        if key not in best or r["tpot"] < best[key]["tpot"]:
            best[key] = r
    return dict(sorted(best.items()))


def _batched_context_cost(best: dict[tuple[int, int], dict]) -> float | None:
    """Seconds per context token of a decode in a batch: at each level with decode runs at two
    prompt lengths or more, the time per output token's rise from the shortest to the longest
    over the context added to the batch; the median over the levels (None: one length only)."""
    slopes = []
    for c in sorted({c for c, _ in best}):
        at = [r for (cc, _), r in best.items() if cc == c]
        if len(at) >= 2:
            lo, hi = min(at, key=_context), max(at, key=_context)
            if _context(hi) > _context(lo):
                slopes.append((hi["tpot"] - lo["tpot"]) / (c * (_context(hi) - _context(lo))))
    return max(float(np.median(slopes)), 0.0) if slopes else None


def _prefill(ones: list[dict], lone: float) -> tuple[float, float, float]:
    """The first token's fixed seconds (overhead + base), and seconds per prompt token and per
    pair of prompt tokens in causal attention, from the median TTFT of each prompt length at
    concurrency 1 (non-negative least squares). Three lengths or more determine all three; with
    two, the fixed part is taken as one lone decode iteration's."""
    groups: dict[int, list[dict]] = {}
    for r in ones:
        groups.setdefault(_length(r), []).append(r)
    p = np.array([np.median([r["prompt_tokens"] for r in g]) for g in groups.values()], float)
    med = np.array([np.median([r["ttft"] for r in g]) for g in groups.values()])
    if len(p) >= 3:
        cols = np.column_stack([np.ones_like(p), p, p * p / 2])
        (first, per_token, per_pair), _ = optimize.nnls(cols, med)
    else:
        first = lone
        (per_token, per_pair), _ = optimize.nnls(np.column_stack([p, p * p / 2]), med - lone)
    return float(first), float(per_token), float(per_pair)


MIN_CACHED = 64  # a resumed request: at least this many prompt tokens served from the cache


def _resumed(records: list[dict]) -> list[dict]:
    """Requests at concurrency 1 (alone on the server) that resumed after a cached prefix: the
    decode runs on a held prompt and the second of each shared-prefix pair."""
    return [
        r
        for r in records
        if r["concurrency"] == 1
        and (r.get("cached_tokens") or 0) >= MIN_CACHED
        and r["prompt_tokens"] > r["cached_tokens"]
    ]


SLOW = 0.25  # an append size whose resumed first tokens take this much more than the model's is slow


def _cached_split(ok: list[dict], first: float, per_prefill: float, per_attention: float):
    """The resumed pairs of the append sizes that run slow, and where they stop:
    ``(records, switch)`` where the probe's pairs of several append sizes split into slow ones
    (the median first token more than :data:`SLOW` above the model's without a cached rate) and,
    every one larger, others that are not; None otherwise (one size, none slow, all slow, or no
    clean split). ``switch`` holds the largest slow size and the smallest fast one, which is
    where the rate stops (``cached_attention_below``): a kernel's switch on a tile of a power of
    two tokens falls there when the sizes probed are powers of two (llama.cpp's CPU flash attention tiles
    a sequence's chunk from ``GGML_FA_TILE_Q`` = 64 query tokens on). The probe says nothing of
    the sizes between the two (a probe of 32 and 128 priced the 65-token appends of an agent
    loop at the slow rate: TTFT +131%): ``calibrate`` warns when they are more than a doubling
    apart."""
    groups: dict[int, list[dict]] = {}
    for r in _resumed(ok):
        if r["mode"] == "shared_prefix":
            groups.setdefault(_length(r), []).append(r)
    sizes, slow = [], []  # per append size asked for: the new tokens and whether it ran slow
    for _, rs in sorted(groups.items()):
        cached = np.array([r["cached_tokens"] for r in rs], float)
        new = np.array([r["prompt_tokens"] for r in rs], float) - cached
        pred = _fresh(new, first, per_prefill, per_attention) + per_attention * new * cached
        sizes.append(int(np.median(new)))
        slow.append(float(np.median([r["ttft"] for r in rs])) > (1 + SLOW) * float(np.median(pred)))
    flips = [k for k in range(1, len(slow)) if slow[k] != slow[k - 1]]
    if len(flips) != 1 or not slow[0]:  # one size, all alike, or not slow below and fast above
        return None
    k = flips[0]
    rows = [r for _, rs in sorted(groups.items())[:k] for r in rs]
    return rows, {"slow_at": sizes[k - 1], "fast_at": sizes[k]}


def _cached_attention(res: list[dict], first: float, per_prefill: float, per_attention: float):
    """Seconds per pair of a new prompt token and a cached token it attends to: what a resumed
    request's first token takes beyond a fresh prompt of its new tokens, over its new x cached
    pairs (the median over the resumed requests ``res``; None without any)."""
    if not res:
        return None
    per = []
    for r in res:
        new, cached = r["prompt_tokens"] - r["cached_tokens"], r["cached_tokens"]
        fresh = _fresh(new, first, per_prefill, per_attention)
        per.append((r["ttft"] - fresh) / (new * cached))
    return max(float(np.median(per)), 0.0)


def _fresh(new, first: float, per_prefill: float, per_attention: float):
    """The first token of a fresh prompt of ``new`` tokens, as the prefill fit reads it."""
    return first + per_prefill * new + per_attention * new * new / 2


def _line(x, y) -> tuple[float, float]:
    """Slope and intercept of a Theil-Sen line (robust to a few outliers)."""
    from scipy import stats

    res = stats.theilslopes(np.asarray(y, float), np.asarray(x, float))
    return float(res.slope), float(res.intercept)


def _length(r: dict) -> int:
    """The prompt length a request asked for (older records: as the server counted it)."""
    return r.get("prompt_length") or r["prompt_tokens"]


def _medians(records: list[dict]) -> dict[tuple[int, int], float]:
    groups: dict[tuple[int, int], list[float]] = {}
    for r in records:
        groups.setdefault((r["concurrency"], _length(r)), []).append(r["tpot"])
    return {k: float(np.median(v)) for k, v in groups.items()}


def goodness(ok: list[dict], model: Engine, replay: Replay) -> dict:
    """Per level and prompt length, the measured medians of TTFT and TPOT beside the profile's
    (the probe's requests replayed on it), and their relative errors."""
    plain = [r for r in ok if r["mode"] == "plain"]
    sim = replay(plain, model)
    out: dict = {}
    for c in sorted({r["concurrency"] for r in plain}):
        for p in sorted({_length(r) for r in plain if r["concurrency"] == c}):
            real = [r for r in plain if r["concurrency"] == c and _length(r) == p]
            pred = [r for r in sim if r["concurrency"] == c and _length(r) == p]
            row: dict = {"n": len(real)}
            for m in ("ttft", "tpot"):
                a = [r[m] for r in real if r[m] is not None]
                b = [r[m] for r in pred if r[m] is not None]
                if a and b:
                    row[f"{m}_median"] = round(float(np.median(a)), 6)
                    row[f"{m}_predicted"] = round(float(np.median(b)), 6)
                    row[f"{m}_rel_error"] = round(row[f"{m}_predicted"] / row[f"{m}_median"] - 1, 4)
            out[f"c{c}_p{p}"] = row
    runs = [r for r in ok if r["mode"] == "decode" and r["tpot"] is not None]
    for (c, p), r in _best_runs(runs).items():  # decode runs: the best round against one iteration
        pred = model.iteration(0, c, c * _context(r))
        out[f"decode_c{c}_p{p}"] = {
            "n": sum(x["concurrency"] == c and _length(x) == p for x in runs),
            "tpot_best": round(r["tpot"], 6),  # the least disturbed round, as the fit reads them
            "tpot_predicted": round(pred, 6),
            "tpot_rel_error": round(pred / r["tpot"] - 1, 4),
        }
    resumed = _resumed(ok)
    if resumed:  # resumed alone: the first token after a cached prefix, against one iteration
        row = _resumed_row(resumed, model)
        out["resumed_c1"] = {k: row[k] for k in ("n", "ttft_median", "ttft_predicted", "ttft_rel_error")}
    seconds = [r for r in resumed if r["mode"] == "shared_prefix"]
    if len({_length(r) for r in seconds}) > 1:  # pairs of several append sizes: each apart
        for length in sorted({_length(r) for r in seconds}):
            out[f"resumed_c1_p{length}"] = _resumed_row([r for r in seconds if _length(r) == length], model)
    shared = [r for r in ok if r["mode"] == "shared_prefix"]
    if shared:  # pairs: the second of each found the prefix cached (if the server caches)
        first, second = shared[0::2], shared[1::2]
        out["shared_prefix"] = {
            "first_ttft_median": float(np.median([r["ttft"] for r in first])),
            "second_ttft_median": float(np.median([r["ttft"] for r in second])) if second else None,
            "second_cached_tokens": [r.get("cached_tokens") for r in second],
        }
    return out


def _resumed_row(resumed: list[dict], model) -> dict:
    """Resumed requests of one append size against the model: the first token real and predicted,
    and the cost per pair of a new and a cached token the real ones imply beyond the model's."""
    it = model.iteration
    pairs = [(r["prompt_tokens"] - r["cached_tokens"], r["cached_tokens"]) for r in resumed]
    pred = np.array([model.overhead + it(n, 0, 0, n * (c + n / 2), it.cached_pairs(n, c)) for n, c in pairs])
    real = np.array([r["ttft"] for r in resumed])
    new, cached = np.median([n for n, _ in pairs]), np.median([c for _, c in pairs])
    return {
        "n": len(resumed),
        "new_tokens": int(new),
        "cached_tokens": int(cached),
        "ttft_median": round(float(np.median(real)), 6),
        "ttft_predicted": round(float(np.median(pred)), 6),
        "ttft_rel_error": round(float(np.median(pred)) / float(np.median(real)) - 1, 4),
        "per_pair_beyond_model": float(f"{np.median((real - pred) / [n * c for n, c in pairs]):.4g}"),
    }


def engine_profile(
    records: list[dict],
    name: str,
    kv_capacity: int | None = None,
    max_running: int | None = None,
    bootstrap: int | None = None,
    seed: int = 0,
    drift: dict | None = None,
    *,
    replay: Replay,
) -> dict:
    """Records -> a profile under calibration/engines/ (with provenance and goodness of fit).
    Reference-block requests (``reference: true``) are left out of the fit; they give the
    engine's drift during the probe (time to first token and per output token) under
    ``uncertainty.drift``, which the ``bootstrap`` refits (default
    :data:`.engine_bootstrap.DEFAULT_ENGINE_BOOTSTRAP`) carry; ``drift``, one read elsewhere (the
    validation suite's probe blocks), stands in where the records have no reference blocks."""
    from .drift import reference_drift, split_reference
    from .engine_bootstrap import DEFAULT_ENGINE_BOOTSTRAP, engine_uncertainty

    reference, records = split_reference(records)
    fitted = fit_engine(records, kv_capacity, max_running, replay=replay)
    first = records[0]
    drift = reference_drift(reference, {"ttft": "ttft", "tpot": "tpot"}) if reference else drift
    refits = DEFAULT_ENGINE_BOOTSTRAP if bootstrap is None else bootstrap
    if refits < 0:
        raise InputError(f"--bootstrap: expected 0 or more refits, got {refits}.")
    ok = [r for r in records if r.get("ok") and r.get("ttft") is not None and r.get("output_tokens")]
    return {
        "version": 1,
        "name": name,
        "provenance": {
            "method": "probe fit (simrollout probe openai; simrollout.calibration.engine_fit)",
            "server": first["host"],
            "model": first["image"],
            "engine_version": first.get("engine_version", ""),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            "probe_files": sorted({Path(r["_file"]).name for r in records}),
            "runs": sorted({r["run_id"] for r in records}),
            "requests": len(records),
            "failed": sum(not r.get("ok") for r in records),
            "pinned_slots": any(r.get("slot") is not None for r in records),
        },
        "engine": fitted["engine"],
        "fit": fitted["fit"],
        "uncertainty": engine_uncertainty(
            ok,
            fitted["engine"],
            drift,
            refits,
            seed,
            kv_capacity,
            max_running,
            strict=bootstrap is not None,
            fit_engine=partial(fit_engine, replay=replay),
        ),
    }
