"""A row of the fidelity matrix: a policy, a load and what else is switched on (its name and its
regime, which sets the tolerance)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    """One cell of the matrix: a policy, a load, and what else is switched on."""

    policy: str  # async | sync | poisson
    load: str  # none | host | tier | both
    extra: str = ""  # "", warm_pool, failures, timeouts, images, prefetch, reuse, clients, tokens, ...
    scenario: dict = field(default_factory=dict)
    trajectories: int = 0  # this many, whatever the comparison's size (0: the comparison's)

    @property
    def name(self) -> str:
        size = f"{self.trajectories // 1000}k" if self.trajectories else ""
        if self.extra.startswith("train"):  # a training row's size is in training steps
            size = f"{self.trajectories}steps" if self.trajectories else ""
        return "/".join(p for p in (self.policy, self.load, self.extra, size) if p)

    @property
    def regime(self) -> str:
        if self.extra.startswith("train"):
            return "training"
        if self.extra == "tokens" and self.load != "none":
            return "serving"
        return "light" if self.load == "none" else "loaded"
