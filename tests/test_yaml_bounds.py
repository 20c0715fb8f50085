"""YAML whose aliases expand past what any input holds is refused at once, naming the file."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.conftest import make


def _bomb(levels: int = 10, width: int = 10) -> str:
    """Each level an anchored list of ``width`` aliases of the level below: width**levels values."""
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _run(*args) -> subprocess.CompletedProcess:
    # a generous timeout: the refusal takes a few seconds of CPU (the command's imports), walking the
    # expansion hours; 20 s of wall was reached by a machine loaded with other work
    return subprocess.run(
        [sys.executable, "-m", "simrollout.cli", *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # a command in a subprocess: about 3 s of CPU, its imports
@pytest.mark.parametrize("where", ["scenario", "profile"])
def test_alias_bomb_refused_naming_the_file(tmp_path, where):
    scn = make()
    bomb = tmp_path / ("bomb.yaml" if where == "profile" else "s.yaml")
    if where == "scenario":
        bomb.write_text(yaml.safe_dump(scn, sort_keys=False) + _bomb())
        path = bomb
    else:
        bomb.write_text("version: 1\nname: p\nsubstrate: {}\n" + _bomb())
        scn["substrates"] = [{"profile": str(bomb)}]
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(scn, sort_keys=False))
    r = _run("run", path, "-o", tmp_path / "out")
    assert r.returncode == 2, r.stderr[-800:]
    msg = " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr
    assert f"{bomb}: its aliases" in msg and "2,000,000 values" in msg


def test_aliases_within_bounds_still_load(tmp_path):
    from simrollout.errors import load_yaml

    p = tmp_path / "small.yaml"
    p.write_text(_bomb(levels=3, width=4) + "top: *l2\n")
    data, node = load_yaml(p)
    assert len(data["top"]) == 4 and data["top"][0][0] == ["x"] * 4
    assert node is not None
