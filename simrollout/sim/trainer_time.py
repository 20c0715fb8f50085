"""The trainer's time: each update's train seconds and each weight sync's, from the scenario's
models (a distribution, the linear model, FLOPs of the tokens trained, the model's bytes over a
bandwidth; docs/model.md, "The trainer")."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..rng import stream
from ..scenario import FlopsTime, LinearTime, TransferTime

if TYPE_CHECKING:
    from ..scenario import Scenario
    from .training_results import LoopResults


def train_gpus(scn: Scenario) -> int:
    """GPUs that train: the trainer's (disaggregated), or every engine's (colocated)."""
    tr, inf = scn.training, scn.cluster.inference
    if tr.placement == "disaggregated":
        return tr.trainer.gpus
    if inf is None:
        return 1
    return inf.engines * (inf.engine.gpus if inf.engine is not None else 1)


class TrainerClock:
    """Seconds of the loop's updates and weight syncs."""

    def __init__(self, loop: LoopResults):  # the loop (its tr, cell, steps_done, seed and rep)
        self.loop, self.tr = loop, loop.tr
        self.gpus = train_gpus(loop.cell.scn)
        self.per_step = self.tr.critical_path + self._colocated()

    def _colocated(self) -> float:
        """Seconds per step a colocated placement adds to the FLOPs model (``colocated``)."""
        tt = self.tr.train_time
        if self.tr.placement != "colocated" or not isinstance(tt, FlopsTime) or tt.colocated is None:
            return 0.0
        return tt.colocated.seconds(self.gpus, self.tr.model)

    def draws(self, k: int) -> tuple[float | None, float]:
        """Step ``k``'s drawn train seconds (a distribution; None for a model of the work) and
        its weight sync's seconds (stream ``(seed, rep, "training", "trainer", k)``)."""
        tr, loop = self.tr, self.loop
        rng = stream(loop._seed, loop._rep, "training", "trainer", k)
        tt, ws = tr.train_time, tr.weight_sync_time
        train = None if isinstance(tt, LinearTime | FlopsTime) else float(tt.sample(rng, 1)[0])
        sync = ws.seconds(tr.model) if isinstance(ws, TransferTime) else float(ws.sample(rng, 1)[0])
        return train, sync

    def update(self, members: list[int], share: float, drawn: float | None) -> float:
        """Seconds of one update on ``members``, ``share`` of the step's groups: the step's drawn
        time and the linear model's intercept split by share, the FLOPs model's per update; the
        per-step terms (``critical_path``, colocated costs) split by share."""
        out = self._update(members, share, drawn)
        return out + self.per_step * share if self.per_step else out

    def _update(self, members: list[int], share: float, drawn: float | None) -> float:
        tt, loop = self.tr.train_time, self.loop
        if drawn is not None:
            return drawn * share
        idx = np.asarray(members, dtype=np.int64)
        if isinstance(tt, LinearTime):
            out = tt.intercept * share + tt.per_step * int(loop.steps_done[idx].sum())
            if tt.per_token:
                out += tt.per_token * float(loop.tokens_trained(idx).sum())
            return out
        if tt.tokens_per_turn is not None:
            tokens = float(loop.steps_done[idx].sum()) * tt.tokens_per_turn
        else:
            tokens = float(loop.tokens_trained(idx).sum())
        return tt.seconds(tokens, self.gpus, self.tr.model)
