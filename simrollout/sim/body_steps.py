"""The body at ``step`` fidelity, the reference engine: every LLM call (a request to the
inference tier, in tokens on serving engines) and every tool call (exec overhead on the host,
then the tool's time) as events, with the training loop's hooks (a gate on generation,
cancellation, a per-task duration factor)."""

from __future__ import annotations

import math

from .records import CANCELLED, LOST, OK, TIMEOUT, BodyResult
from .serving import ServingTier
from .waits import await_event, until
from .workload_draws import CHUNK, Work


class StepBody:
    """The step engine of a :class:`simrollout.sim.model.Cell` (a part of it)."""

    def _body_steps(self, i: int, host: int, deadline: float, fail_call: int, t_begin: float):
        out = yield from self._steps(i, host, deadline, fail_call)
        if isinstance(self.tier, ServingTier):
            self.tier.close(i)
        status, llm, steps, over = out
        return BodyResult(status, llm, steps, self.env.now - t_begin, over)

    def _steps(self, i: int, host: int, deadline: float, fail_call: int):
        """Every step of trajectory ``i``: ``(status, generation, steps done, exec overhead)``."""
        w, env, fleet = self.work, self.env, self.fleet
        st = self.chunks[i // CHUNK]
        overhead = st.draws.call_overhead
        first_call = int(w.call_off[st.lo])  # calls are numbered from the chunk's first
        f_e = fleet.factor["exec"]
        llm, steps, over_all = 0.0, 0, 0.0  # over_all: exec overhead spent
        x = 1.0 if self.task_scale is None else float(self.task_scale[i])
        gate, cancelled, on_gen = self.llm_gate, self.cancelled, self.on_generate
        if w.setup[i] and not (yield from until(env, w.setup[i], deadline)):
            return TIMEOUT, llm, steps, over_all
        call = int(w.call_off[i])
        k = 0  # calls made so far
        ctx = 0  # tokens of context before this turn's append (token workload)
        for s in range(int(w.step_off[i]), int(w.step_off[i + 1])):
            if gate is not None:
                closed = gate()
                if closed is not None:  # the engines train: generation waits for the new weights
                    yield closed
            if i in cancelled:
                return CANCELLED, llm, steps, over_all
            if on_gen is not None:
                on_gen(i)
            t0 = env.now
            ok, ctx = yield from self._generate(i, s, ctx, x, deadline)
            llm += env.now - t0
            if not ok:
                return TIMEOUT, llm, steps, over_all
            for _ in range(int(w.step_calls[s])):
                k += 1
                if k == fail_call:
                    return LOST, llm, steps, over_all
                if i in cancelled:
                    return CANCELLED, llm, steps, over_all
                fleet.begin(host, "exec")
                # a float, not the draw's float32: the clock would take its type (NumPy's scalar rules)
                over = float(overhead[call - first_call]) * f_e(fleet.load(host, "exec"))
                t_over = env.now
                ok = yield from until(env, over, deadline)
                over_all += env.now - t_over
                fleet.end(host, "exec")
                if not ok or not (yield from until(env, w.call_tool[call] * x, deadline)):
                    return TIMEOUT, llm, steps, over_all
                call += 1
            steps += 1
        if w.reward[i] and not (yield from until(env, w.reward[i], deadline)):
            return TIMEOUT, llm, steps, over_all
        return OK, llm, steps, over_all

    def _generate(self, i: int, s: int, ctx: int, x: float, deadline: float):
        """Step ``s``'s generation: ``(completed before the deadline, context after it)``."""
        w, env, tier = self.work, self.env, self.tier
        if w.step_output is None:
            ok = yield from self._generate_seconds(i, float(w.step_llm[s]) * x, deadline)
            return ok, ctx
        t0 = env.now
        ctx, fresh, reusable, out = self._turn(ctx, w, i, s, x)
        ok = yield from until(env, self._overhead, deadline)
        c, o = ctx, out
        while ok:
            req = tier.request(i, c, o, reusable, fresh)
            abort = self.llm_abort() if self.llm_abort is not None else None
            ok = yield from await_event(env, req.done if abort is None else req.done | abort, deadline)
            if ok and not req.done.triggered:  # a weight sync interrupts it (at_sync)
                tier.abort(req)
                ok = yield from await_event(env, req.done, deadline)
            if not ok:
                tier.cancel(req)
                break
            if not req.aborted or req.generated >= o:
                if self.turn_log is not None:
                    self.turn_log.append((i, self.bodies, env.now - t0, float(w.step_llm[s])))
                break
            # resumed under the new weights: the context and the tokens so far prefilled again
            c, o, reusable, fresh = c + req.generated, o - req.generated, c + req.generated, False
            yield from self._resume(i)
        return ok, ctx + out

    def _generate_seconds(self, i: int, base: float, deadline: float):
        """A turn in seconds on the tier; interrupted at a weight sync, the rest of it resumes
        after the sync (the share done is kept)."""
        env, tier = self.env, self.tier
        while True:
            engine, dur = tier.duration(base)
            abort = self.llm_abort() if self.llm_abort is not None else None
            if abort is None:
                ok = yield from until(env, dur, deadline)
                tier.done(engine)
                return ok
            t0, left = env.now, deadline - env.now
            yield env.timeout(min(dur, max(left, 0.0))) | abort
            tier.done(engine)
            spent = env.now - t0
            if spent >= min(dur, left) - 1e-12 or not abort.triggered:
                return dur <= left
            base *= 1.0 - spent / dur
            yield from self._resume(i)

    def _resume(self, i: int):
        """An interrupted turn waits for the new weights, then resumes under them."""
        closed = self.llm_gate() if self.llm_gate is not None else None
        while closed is not None:
            yield closed
            closed = self.llm_gate()
        if self.on_resume is not None:
            self.on_resume(i)

    def _turn(self, ctx: int, w: Work, i: int, s: int, x: float) -> tuple[int, bool, int, int]:
        """Step ``s``'s request in tokens: ``(context, fresh, reusable, output)``. The context
        grows by the appended tokens; past ``max_context`` the harness compacts it to the prompt
        and this turn's append (nothing cached serves it: ``fresh``)."""
        append = int(w.step_append[s])
        out = max(int(round(int(w.step_output[s]) * x)), 1)
        cap = self.scn.workload.tokens.max_tokens
        out = min(out, cap) if cap else out
        # a context that would not fit one engine's KV cache is compacted too
        top = min(self.scn.workload.tokens.max_context or math.inf, self._kv - out)
        if ctx == 0:  # the first turn: the prompt
            return int(min(w.prompt[i] + append, top)), False, 0, out
        if ctx + append > top:
            return int(min(w.prompt[i] + append, top)), True, 0, out
        return ctx + append, False, ctx, out
