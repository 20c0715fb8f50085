"""Counts as a workload draws them, and a token workload's turns: token counts drawn per turn
and turned into seconds alone on an engine (:mod:`.turn_seconds`), per turn (the step engine's
detail) or summed per trajectory in the same pass where nothing reads the turns one by one."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..distributions import Constant


def _counts(d, rng, n, lo: int) -> np.ndarray:
    if isinstance(d, Constant):  # draws nothing: the same numbers without 3 passes over n
        return np.full(n, constant_count(d, lo), dtype=np.int64)
    return np.maximum(np.rint(d.sample(rng, n)).astype(np.int64), lo)


def constant_count(d, lo: int) -> int | None:
    """A constant count's value as :func:`_counts` rounds it (None: not a constant)."""
    return max(int(np.rint(d.value)), lo) if isinstance(d, Constant) else None


def _tokens(tok, rng: np.random.Generator, m: int, n_steps: int) -> dict[str, np.ndarray]:
    """Token counts: the prompt per trajectory, appended and output tokens per step (the output
    capped at ``max_tokens``)."""
    prompt, append = _counts(tok.prompt, rng, m, 0), _counts(tok.appended, rng, n_steps, 0)
    out = _counts(tok.output, rng, n_steps, 1)  # drawn in this order: same seed, same numbers
    return {
        "prompt": prompt,
        "step_append": append,
        "step_output": np.minimum(out, tok.max_tokens) if tok.max_tokens else out,
    }


def _drawn(d, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` draws of a count as drawn, before ``_counts`` rounds them (a constant: its one value)."""
    x = np.array([d.value]) if isinstance(d, Constant) else np.asarray(d.sample(rng, n))
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


def drawn_turn_sums(
    tok, rng: np.random.Generator, steps: np.ndarray, n_steps: int, engine
) -> tuple[np.ndarray, Callable[[np.ndarray], list[np.ndarray]]]:
    """Each trajectory's sum of :func:`unloaded_turns` of :func:`_tokens`' counts (the same
    draws, in its order, rounded as they are used), in one compiled pass that never stores the
    turns: the sums ``_sum_by`` gives of them, to the bit; and a function giving the turns of some
    trajectories (each its own array), computed again from the same draws."""
    from .turn_seconds import turn_seconds_drawn, turn_sums_drawn

    prompt = _counts(tok.prompt, rng, len(steps), 0)
    append, output = _drawn(tok.appended, rng, n_steps), _drawn(tok.output, rng, n_steps)
    args = (tok.max_tokens, engine, tok.max_context)
    sums = turn_sums_drawn(steps, prompt, append, output, n_steps, *args)

    def turns(which: np.ndarray) -> list[np.ndarray]:
        own = steps[which]
        start = (np.cumsum(steps) - steps)[which]
        at = np.repeat(start - (np.cumsum(own) - own), own) + np.arange(int(own.sum()))
        a, o = (x[at] if x.size == n_steps else x for x in (append, output))
        each = turn_seconds_drawn(own, prompt[which], a, o, at.size, *args)
        return np.split(each, np.cumsum(own)[:-1])

    return sums, turns


def unloaded_turns(
    tok: dict[str, np.ndarray], steps: np.ndarray, engine, max_context: int | None
) -> np.ndarray:
    """Seconds of every turn alone on an engine with its prefix cached: the per-request
    overhead, the prefill of what was appended (of the whole context on the first turn and after
    a compaction) in chunks of ``max_batch_tokens``, and the decodes at the growing context. The
    context evolves as in the step engine (``Cell._turn``); compiled in :mod:`.turn_seconds`."""
    from .turn_seconds import turn_seconds

    return turn_seconds(steps, tok["prompt"], tok["step_append"], tok["step_output"], engine, max_context)
