"""A launch script's variables and arguments, expanded as bash would."""

from __future__ import annotations

from simrollout.scenario.framework_configs.shell import expand, read_script


def test_expansion_forms():
    env = {"A": "4", "B": ""}
    assert expand("$((A * (A + 1)))", env) == "20"
    assert expand("$(((512*400)))", env) == "204800"
    assert expand("${B:-x/${A}}", env) == "x/4"
    assert expand("$A-${A}", env) == "4-4"
    assert expand("$((7 / 2))", env) == "3"  # integer division


def test_arrays_defaults_and_continuations():
    script = (
        'N=2\n: "${M:=$((N * 3))}"\nARGS=(\n  --a ${M}\n  --b x  # note\n)\nrun ${ARGS[@]} \\\n  k.v=$N\n'
    )
    env, words = read_script(script)
    assert env["M"] == "6"
    assert words == ["run", "--a", "6", "--b", "x", "k.v=2"]


def test_a_comment_inside_a_bash_array_ends_its_line_only():
    from simrollout.scenario.framework_configs.shell import read_script

    env, args = read_script(
        'ARGS=(\n   --batch 32   # "a comment"\n   --n 8\n)\npython3 train.py ${ARGS[@]}\n'
    )
    assert args == ["python3", "train.py", "--batch", "32", "--n", "8"]
