"""``simrollout import``: a framework's own config (verl, AReaL, slime, SkyRL, prime-rl, NeMo-RL) read into
the scenario's ``training`` section and inference tier; one module per framework, each returning
the shape of :mod:`.table`. docs/scenario.md, "Importing a framework's config"."""

from __future__ import annotations

from pathlib import Path

from ...errors import InputError
from .table import Imported, scenario_yaml, unmapped_lines

FRAMEWORKS = ("verl", "areal", "slime", "skyrl", "prime-rl", "nemo-rl")


def import_config(framework: str, path: str | Path) -> Imported:
    """Read ``path`` as ``framework``'s config."""
    from importlib import import_module

    if framework not in FRAMEWORKS:
        raise InputError(
            f"unknown framework '{framework}': expected one of {', '.join(FRAMEWORKS)} "
            "(simrollout import FRAMEWORK CONFIG)."
        )
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; expected {framework}'s config file.")
    module = import_module(f".{framework.replace('-', '_')}", __name__)
    return module.read(path)


__all__ = ["FRAMEWORKS", "Imported", "import_config", "scenario_yaml", "unmapped_lines"]
