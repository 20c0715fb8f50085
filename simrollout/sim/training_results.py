"""The training loop's results: its metrics, step table, length bias and GPU figures (a mixin of
:class:`simrollout.sim.training.TrainingLoop`; docs/model.md, "The training loop")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

CAUSES = ("over_sampling", "filter", "staleness", "failures", "weight_update", "end")


@dataclass
class Group:
    """The ``G`` samples of one prompt: a group is ready when every member is done."""

    g: int
    members: list[int]
    left: int
    retries: dict[int, int] = field(default_factory=dict)  # member slot -> retries used
    masked: list[int] = field(default_factory=list)  # failed or timed out: zero-advantage samples
    state: str = "running"  # running -> ready -> trained, or discarded
    cause: str = ""
    cost: np.ndarray = field(default_factory=lambda: np.zeros(4))  # worker, sandbox, llm s; samples
    ready_at: float = 0.0  # when its last member ended


@dataclass
class StepRecord:
    start: float  # the trainer began waiting for this step's groups
    ready: float  # B useful groups gathered
    mean_end: float  # mean end of the trained samples
    train: float
    sync: float
    end: float  # weights synced
    samples: int
    masked: int
    rollout: float  # the trainer waited to gather groups (the step table's rollout_s also counts the
    # wait of a sync held for the batch in generation: see ``LoopResults.step_table``)
    stale: int  # trained samples started under an older version
    partial: int  # trained samples whose generation crossed a weight sync
    engine_busy: float  # the engines' busy seconds so far (step fidelity; else NaN)


class LoopResults:
    """What a finished loop reports; needs the loop's ``cell``, ``tr``, ``steps``, ``discard``,
    ``staleness``, ``trained_members``, ``started``, ``steps_done``, ``groups`` and ``finished``."""

    def tokens_trained(self, idx: np.ndarray) -> np.ndarray:
        """Tokens of each sample's sequence as trained: its prompt plus the appended and output
        tokens of the turns it generated (a token workload)."""
        w = self.cell.work
        if self._token_cum is None:
            self._token_cum = np.concatenate([[0], np.cumsum(w.step_append + w.step_output, dtype=np.int64)])
        off = w.step_off[idx].astype(np.int64)
        return w.prompt[idx] + self._token_cum[off + self.steps_done[idx]] - self._token_cum[off]

    def truncated(self, idx: np.ndarray) -> int:
        """Samples among ``idx`` with a turn cut at ``workload.tokens.max_tokens`` (a response at
        the cap counts, as verl's clip ratio counts it)."""
        tok, w = self.cell.scn.workload.tokens, self.cell.work
        if tok is None or not tok.max_tokens or not idx.size:
            return 0
        n = self.steps_done[idx]
        first = np.repeat(w.step_off[idx].astype(np.int64), n)
        turn = first + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        x = np.repeat(self.cell.task_scale[idx], n)
        cut = np.rint(w.step_output[turn] * x) >= tok.max_tokens
        return int(np.unique(np.repeat(idx, n)[cut]).size)

    def _trainer_busy(self) -> float:
        """Seconds the trainer spent training and syncing weights."""
        return float(sum(x.train + x.sync for x in self.steps))

    def _engine_busy(self) -> float:
        """Engine seconds generating: the tier's at step fidelity, else the cell's estimate."""
        return self.cell.tier.busy_seconds if self.cell.exact_tier else self.cell.gpu_busy_seconds()

    def _engines(self) -> int:
        inf = self.cell.scn.cluster.inference
        return inf.engines if inf is not None else 0

    def _run_end(self) -> float:
        """When the last trajectory ended (cancelled ones tear down after the last step) or the
        last weights were synced, whichever is later."""
        return max(self.cell.acc.end, self.finished if self.steps else 0.0)

    def summary(self, engines: int, gen_used_seconds: float) -> dict[str, float]:
        """Training metrics of the cell (docs/model.md); ``gen_used_seconds``: the engines'
        seconds in use (their tier's ``utilised_seconds``)."""
        tr, nan = self.tr, math.nan
        if not self.cell.exact_tier:  # the engines' busy time as estimated at trajectory fidelity
            gen_used_seconds = self._engine_busy()
        rows = self.step_table()
        done = len(rows)
        T = self.finished if done else nan

        def col(k):
            return np.array([r[k] for r in rows])

        step_s, train, sync = col("step_s"), col("train_s"), col("sync_s")
        stale = np.array(self.staleness) if self.staleness else np.array([nan])
        busy_train = self._trainer_busy()
        colocated = tr.placement == "colocated"
        # engines could generate until the last trajectory ended, except while colocated ones train
        end = self._run_end() if done else nan
        avail = engines * (end - (busy_train if colocated else 0.0))
        samples, masked = int(col("samples").sum()), int(col("masked").sum())
        generated = self.gen_steps.sum()
        out = {
            "training_steps": tr.steps,
            "training_steps_done": done,
            "training_hours": T / 3600,
            "training_steps_per_day": done / T * 86400 if done else nan,
            "step_seconds_mean": float(step_s.mean()) if done else nan,
            "step_seconds_p50": float(np.percentile(step_s, 50)) if done else nan,
            "step_seconds_p99": float(np.percentile(step_s, 99)) if done else nan,
            "step_generation_seconds": float(col("generation_s").mean()) if done else nan,
            "step_last_group_seconds": float(col("last_group_s").mean()) if done else nan,
            "step_rollout_seconds": float(col("rollout_s").mean()) if done else nan,
            "step_train_seconds": float(train.mean()) if done else nan,
            "step_sync_seconds": float(sync.mean()) if done else nan,
            "trainer_idle_fraction": 1.0 - busy_train / T if done else nan,
            "inference_idle_fraction": 1.0 - gen_used_seconds / avail if done and avail > 0 else nan,
            "staleness_p50": float(np.percentile(stale, 50)),
            "staleness_p99": float(np.percentile(stale, 99)),
            "staleness_max": float(stale.max()),
            "trained_samples": samples,
            "stale_samples_trained": int(col("stale_samples").sum()) if done else 0,
            "partial_samples_trained": int(col("partial_samples").sum()) if done else 0,
            "resumed_samples_trained": int(self.resumed[np.asarray(self.trained_members, dtype=int)].sum()),
            "interrupted_requests": self.interrupts,
            "truncated_samples": self.truncated(np.asarray(self.trained_members, dtype=np.int64)),
            "masked_samples": masked,
            "useful_trajectories_per_hour": (samples - masked) / T * 3600 if done else nan,
            "steps_under_newer_version": self.gen_steps[1] / generated if generated else 0.0,
            "trainer_gpus": 0 if colocated else tr.trainer.gpus,
        }
        for c in CAUSES:
            out[f"discarded_{c}"] = int(self.discard[c][3])
        tot = sum(self.discard.values())
        out["discarded_samples"] = int(tot[3])
        out["discarded_worker_hours"] = tot[0] / 3600
        out["discarded_sandbox_hours"] = tot[1] / 3600
        out["discarded_generation_hours"] = tot[2] / 3600
        out.update(self.length_bias())
        return out

    def length_bias(self) -> dict[str, float]:
        """What the loop does to the data: mean turns and body seconds of the trained samples, of
        the started samples discarded for staleness, and of every started sample, and the trained
        over the started as the bias (below 1: training sees shorter rollouts than it starts).

        A sample's length is its own, as drawn (turns, and unloaded LLM plus tool seconds times
        its prompt's factor), so a sample cancelled half-way counts at the length it would have
        had, not at the part it ran."""
        w, x = self.cell.work, self.cell.task_scale
        stale = [i for grp in self.groups.values() if grp.cause == "staleness" for i in grp.members]
        sets = {
            "trained": np.asarray(self.trained_members, dtype=np.int64),
            "stale": np.asarray(stale, dtype=np.int64),
            "started": np.flatnonzero(self.started),
        }
        out = {}
        for name, idx in sets.items():
            idx = idx[self.started[idx]]
            turns = w.steps[idx].astype(float)
            body = (w.llm[idx] + w.tool[idx]) * x[idx]
            out[f"{name}_mean_turns"] = float(turns.mean()) if idx.size else math.nan
            out[f"{name}_mean_body_seconds"] = float(body.mean()) if idx.size else math.nan
        for what in ("turns", "body_seconds"):
            started = out[f"started_mean_{what}"]
            out[f"length_bias_{what}"] = out[f"trained_mean_{what}"] / started if started > 0 else math.nan
        return out

    def adjust(self, out: dict, inference) -> None:
        """The cell's GPU and cost figures with the trainer in: GPUs billed until the last step
        (and the last cancelled teardown), a colocated engine counted busy while it trains."""
        tr = self.tr
        engines = inference.engines if inference else 0
        price = inference.price_per_hour if inference else 0.0
        trainer = 0 if tr.placement == "colocated" else tr.trainer.gpus
        end = self._run_end()
        gpu_s = (engines + trainer) * end
        busy = self._engine_busy() + self._trainer_busy() * (trainer or engines)
        gpu_cost = engines * end / 3600 * price
        trainer_cost = trainer * end / 3600 * tr.trainer.price_per_hour if trainer else 0.0
        gpu_cost += trainer_cost
        out.update(
            makespan_hours=end / 3600,
            gpu_hours=gpu_s / 3600,
            gpu_idle_fraction=1.0 - min(busy / gpu_s, 1.0) if gpu_s else math.nan,
            gpu_cost_usd=gpu_cost,  # the trainer's GPUs included
            trainer_cost_usd=trainer_cost,
            cost_usd=out["sandbox_cost_usd"] + gpu_cost,
            trajectories_per_hour=out["completed"] / end * 3600 if end else math.nan,
        )

    def report(self, store, out: dict) -> None:
        """The loop's metrics in the cell's summary (a :class:`~.metrics.MetricsStore` part): the
        GPU and cost figures with the trainer in, the training metrics (its step table:
        :meth:`step_table`)."""
        inf = store.scn.cluster.inference
        self.adjust(out, inf)
        out.update(self.summary(inf.engines if inf else 0, self.cell.tier.utilised_seconds))

    def step_table(self) -> list[dict]:
        """One row per trained step: its time and its breakdown, and what the frameworks report
        per step: the rollout phase ``rollout_s`` (the seconds of the step's critical path spent
        waiting for rollouts, in every mode the step's time not training or syncing: gathering its
        groups, and in one_step_off without partial rollouts the sync held until the batch in
        generation is gathered; verl's ``timing_s/gen``), the trainer's busy and idle
        seconds, the engines' idle share (step fidelity; colocated: of the time they do not
        train), the stale samples trained and the partial ones (generation crossed a sync)."""
        rows, prev, busy0 = [], 0.0, 0.0
        engines, colocated = self._engines(), self.tr.placement == "colocated"
        for k, x in enumerate(self.steps):
            step = x.end - prev
            wait = step - x.train - x.sync
            last = min(max(x.ready - min(max(x.mean_end, x.start), x.ready), 0.0), max(wait, 0.0))
            avail = engines * (step - (x.train + x.sync if colocated else 0.0))
            idle = 1.0 - (x.engine_busy - busy0) / avail if avail > 0 and self.cell.step else math.nan
            rows.append({"step": k, "end_s": x.end, "step_s": step, "generation_s": wait - last,
                         "last_group_s": last, "train_s": x.train, "sync_s": x.sync,
                         "samples": x.samples, "masked": x.masked, "rollout_s": max(wait, 0.0),
                         "trainer_busy_s": x.train + x.sync, "trainer_idle_s": max(wait, 0.0),
                         "rollouter_idle_ratio": idle, "stale_samples": x.stale,
                         "partial_samples": x.partial})  # fmt: skip
            prev, busy0 = x.end, x.engine_busy
        return rows

    # ------------------------------------------------------------ Chrome trace events
    def _trace_step(self, k, start, ready, t0, t1, end) -> None:
        self.trace.append(("trainer", -1, f"wait for groups (step {k})", start, max(ready - start, 0.0), {}))
        self.trace.append(("trainer", -1, f"train step {k}", t0, t1 - t0, {}))
        self.trace.append(("trainer", -1, f"weight sync -> v{k + 1}", t1, end - t1, {}))
