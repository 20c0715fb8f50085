"""simrollout: a discrete-event simulator of coding-agent RL rollout clusters.

Pipeline: probe -> calibrate -> run -> sweep/plan -> validate (one CLI verb each).
"""

__version__ = "0.1.0"

__all__ = ["load", "override", "run", "sweep", "plan"]

from .api import load, override, plan, run, sweep  # noqa: E402
