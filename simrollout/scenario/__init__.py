"""The versioned scenario file (YAML, ``version: 1``) and its schema, one module per section:
``workload``, ``substrate`` (a ``substrates`` entry), ``cluster`` (with ``policy`` and
``arrivals``), ``training``; ``model`` holds the scenario itself and ``files`` the loading.

Every field is documented in docs/scenario.md. Load with :func:`load_scenario`; errors come back
as one :class:`~simrollout.errors.InputError` naming the file, the field path and the line.
"""

from .cluster import Arrivals, Cluster, Engine, Inference, IterationTime, Policy
from .files import (
    EngineProfileFile,
    ProfileFile,
    load_engine_profile,
    load_profile,
    load_scenario,
    scenario_from_dict,
)
from .model import Scenario
from .substrate import (
    PHASES,
    Billing,
    Capacity,
    Contention,
    Failures,
    ImageCache,
    Phase,
    Slowdown,
    Substrate,
    slowdown,
)
from .trainer import FlopsTime, ModelSize, TransferTime
from .training import LinearTime, PassRate, Trainer, Training, TrainTime
from .workload import TOOL_CATEGORIES, Chance, FailureRate, Images, Replay, Tokens, Tool, Workload

__all__ = [
    "PHASES",
    "TOOL_CATEGORIES",
    "Arrivals",
    "Billing",
    "Capacity",
    "Chance",
    "Cluster",
    "Contention",
    "Engine",
    "EngineProfileFile",
    "FailureRate",
    "Failures",
    "ImageCache",
    "Images",
    "Inference",
    "IterationTime",
    "FlopsTime",
    "LinearTime",
    "ModelSize",
    "PassRate",
    "Phase",
    "Policy",
    "ProfileFile",
    "Replay",
    "Scenario",
    "Slowdown",
    "Substrate",
    "Tokens",
    "Tool",
    "TrainTime",
    "Trainer",
    "Training",
    "TransferTime",
    "Workload",
    "load_engine_profile",
    "load_profile",
    "load_scenario",
    "scenario_from_dict",
    "slowdown",
]
