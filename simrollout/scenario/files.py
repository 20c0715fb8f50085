"""Loading: a scenario file (YAML, ``version: 1``) with its profiles merged in, and the substrate and
engine profile files; every error is one InputError naming the file, field and line."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import (
    ConfigDict,
    ValidationError,
)

from ..errors import InputError, did_you_mean_file, explain, load_yaml
from .base import _Model, merge
from .cluster import Engine
from .model import Scenario
from .substrate import (
    Substrate,
)

# ---------------------------------------------------------------- loading


class _ProfileFile(_Model):
    model_config = ConfigDict(extra="allow", frozen=True)
    version: Literal[1]
    name: str
    provenance: dict = {}


class ProfileFile(_ProfileFile):
    """A substrate profile under calibration/profiles/ (written by ``simrollout calibrate``)."""

    substrate: dict
    section: ClassVar[str] = "substrate"

    def check(self) -> None:
        Substrate.model_validate({"name": self.name, **self.substrate})


class EngineProfileFile(_ProfileFile):
    """An engine profile under calibration/engines/ (published figures or ``simrollout calibrate``)."""

    engine: dict
    section: ClassVar[str] = "engine"

    def check(self) -> None:
        Engine.model_validate(self.engine)


def _resolve(ref: str, scenario: Path, kind: str = "substrate", where: str = "profile") -> Path:
    for cand in (scenario.parent / ref, Path(ref)):
        try:
            if ref and cand.is_file():
                return cand
        except OSError:  # a name no file system holds (too long, a NUL byte)
            break
    shown = ref if len(ref) <= 80 else ref[:77] + "..."
    hint = did_you_mean_file(ref, scenario)
    raise InputError(
        f"{scenario}: field '{where}': {kind} profile '{shown}' not found (looked relative to the "
        f"scenario file and to the current directory){hint or '.'}"
    )


def _load(path: Path, kind: type[_ProfileFile]):
    data, node = load_yaml(path)
    try:
        prof = kind.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, path, node) from None
    try:
        prof.check()  # its fields now, so errors name the profile file
    except ValidationError as exc:
        raise explain(exc, path, node, within=(prof.section,)) from None
    except (TypeError, ValueError, ArithmeticError) as exc:  # a value of the wrong shape in a validator
        raise InputError(f"{path}: invalid {prof.section} ({exc}); check each field's type.") from None
    return prof


def load_profile(path: Path) -> ProfileFile:
    return _load(path, ProfileFile)


def load_engine_profile(path: Path) -> EngineProfileFile:
    return _load(path, EngineProfileFile)


def scenario_from_dict(data, path: str | Path = "<scenario>", node=None) -> Scenario:
    """Validate a scenario mapping; substrate ``profile`` paths resolve relative to ``path``."""
    path = Path(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of scenario fields at the top level.")
    subs = data.get("substrates")
    if subs is not None and not isinstance(subs, list):
        raise InputError(f"{path}: field 'substrates' must be a list of substrates, got {subs!r}.")
    data = copy.deepcopy(data)
    wl = data.get("workload")
    if isinstance(wl, dict) and ("import" in wl or ("replay" in wl and not isinstance(wl["replay"], dict))):
        from .workload_files import expand_workload, imported_inference

        inf = (data.get("cluster") or {}).get("inference") if isinstance(data.get("cluster"), dict) else None
        if "import" in wl and isinstance(inf, dict):
            data["cluster"]["inference"] = merge(imported_inference(wl, path), inf)
        data["workload"] = expand_workload(data["workload"], path, data.get("training") is not None)
    tr, imported = data.get("training"), None
    if isinstance(tr, dict) and "import" in tr:
        from .training_files import expand_training, own_fields

        data["training"], profile = expand_training(tr, path)
        imported = (str(profile), own_fields(tr)) if tr.get("refit") is None else None
    for i, sub in enumerate(data.get("substrates") or []):
        if isinstance(sub, dict) and isinstance(sub.get("profile"), str):
            prof = load_profile(_resolve(sub["profile"], path, where=f"substrates.{i}.profile"))
            data["substrates"][i] = {"name": prof.name, **merge(prof.substrate, sub)}
    inf = (data.get("cluster") or {}).get("inference") if isinstance(data.get("cluster"), dict) else None
    if isinstance(inf, dict) and isinstance(inf.get("profile"), str):
        prof = load_engine_profile(_resolve(inf["profile"], path, "engine", "cluster.inference.profile"))
        inf["engine"] = merge(prof.engine, inf.get("engine") or {})
    try:
        scn = Scenario.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, path, node) from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError) as exc:
        # a value of the wrong shape that reached a validator's arithmetic
        raise InputError(
            f"{path}: invalid input ({exc}); check each field's type against docs/scenario.md."
        ) from None
    scn._source = str(path)
    if imported is not None:
        scn.training._import = imported
    return scn


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    data, node = load_yaml(path)
    return scenario_from_dict(data, path, node)
