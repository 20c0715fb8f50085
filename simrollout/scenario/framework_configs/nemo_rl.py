"""NeMo-RL: its GRPO YAML (``examples/configs/grpo_math_1B.yaml``, the recipes under
``examples/configs/recipes/llm/``), each file's ``defaults:`` chain of base files merged beneath
it. ``grpo.async_grpo.enabled`` is async GRPO: generation on GPUs of its own
(``policy.generation.colocated.enabled: false`` and its ``resources``), trajectories at most
``max_trajectory_age_steps`` training steps old, the engines' weights updated while they
generate (``in_flight_weight_updates``) or once their requests finish. Not mapped:
``policy.train_global_batch_size`` (samples an optimizer step: a step trains its whole batch in
B x G / it optimizer steps, which a calibrated trainer's rate covers), the model (its size is
calibrate's ``--params-b``) and the sequence lengths (the workload's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import InputError, load_yaml
from .common import finish, gpus_and_engines
from .table import Imported, Knobs, flatten, resolve

MAX_CHAIN = 8  # base files a recipe may name in turn (NeMo-RL's deepest performance recipe: 3)
ASYNC, COLOC, VLLM = "grpo.async_grpo", "policy.generation.colocated", "policy.generation.vllm_cfg"


def _base(config: Path, name: str) -> Path | None:
    """The base file ``name`` (``defaults:``) as written, relative to ``config``, else beside it."""
    for p in (config.parent / name, config.parent / Path(name).name):
        if p.is_file():
            return p
    return None


def read_chain(path: Path) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The config with its ``defaults:`` chain merged beneath it (a file's value replaces its base's
    value or subtree), by dotted name; the file each field came from; and the bases not found."""
    files: list[tuple[Path, dict]] = []
    missing: list[str] = []
    cur: Path | None = path
    while cur is not None:
        data, _ = load_yaml(cur)
        if not isinstance(data, dict):
            raise InputError(f"{cur}: expected a mapping of config fields at the top level.")
        files.append((cur, data))
        name = data.get("defaults")
        if isinstance(name, list) and len(name) == 1:
            name = name[0]
        if name is None:
            break
        if not isinstance(name, str):
            raise InputError(f"{cur}: field 'defaults' is {name!r}; expected the path of one base config.")
        cur = _base(cur, name)
        if cur is None:
            missing.append(f"{files[-1][0].name}'s base {name}")
        elif len(files) >= MAX_CHAIN or any(cur.resolve() == f.resolve() for f, _ in files):
            raise InputError(
                f"{path}: its 'defaults' chain returns to {cur.name} or passes {MAX_CHAIN} files; "
                "expected a chain of base files ending in one without 'defaults'."
            )
    flat: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for f, data in reversed(files):
        layer = flatten({k: v for k, v in data.items() if k != "defaults"})
        for key in layer:
            for old in [o for o in flat if o.startswith(f"{key}.") or key.startswith(f"{o}.")]:
                del flat[old], origin[old]
        flat.update(layer)
        origin.update(dict.fromkeys(layer, f.name))
    return resolve(flat), origin, missing


def read(path: Path) -> Imported:
    flat, origin, missing = read_chain(path)
    k, imp = Knobs(flat, path), Imported("nemo-rl", path)

    def src(name: str, value: Any = None) -> str:
        """``name: value``, naming the base file the value came from."""
        shown = k.flat.get(name, value)
        text = f"{name}: {'true' if shown is True else 'false' if shown is False else shown}"
        return text if origin.get(name, path.name) == path.name else f"{text} (from {origin[name]})"

    why = f"; {', '.join(missing)} was not found beside it" if missing else ""
    B = k.need("grpo.num_prompts_per_step", f"the prompts a step trains{why}")
    G = k.need("grpo.num_generations_per_prompt", f"the samples a prompt{why}")
    imp.put("training.prompts_per_step", B, src("grpo.num_prompts_per_step"))
    imp.put("training.samples_per_prompt", G, src("grpo.num_generations_per_prompt"))
    steps = k.number("grpo.max_num_steps")
    if steps:
        imp.put("training.steps", steps, src("grpo.max_num_steps"))
    nodes, per_node = k.number("cluster.num_nodes", 1), k.number("cluster.gpus_per_node", 1)
    per_engine = k.number(f"{VLLM}.tensor_parallel_size", 1) * k.number(f"{VLLM}.pipeline_parallel_size", 1)
    per_src = f"{VLLM}.tensor_parallel_size x pipeline_parallel_size"
    colocated = k.flag(f"{COLOC}.enabled")
    coloc_src = src(f"{COLOC}.enabled") if colocated is not None else (
        f"assumed: {COLOC}.enabled true, NeMo-RL's examples' setting (not in the file{why})")  # fmt: skip
    colocated = True if colocated is None else colocated
    if k.flag(f"{ASYNC}.enabled", False):
        if colocated:
            raise InputError(
                f"{path}: {ASYNC}.enabled is true with {COLOC}.enabled true; NeMo-RL's async GRPO "
                f"generates on GPUs of its own: expected {COLOC}.enabled false and its resources."
            )
        imp.put("training.mode", "async", src(f"{ASYNC}.enabled") + ": generation runs ahead of training")
        imp.put("training.placement", "disaggregated", coloc_src)
        age = k.number(f"{ASYNC}.max_trajectory_age_steps", 1)
        imp.put("training.max_staleness", age, src(f"{ASYNC}.max_trajectory_age_steps", age))
        in_flight = k.flag(f"{ASYNC}.in_flight_weight_updates", False)
        imp.put("training.at_sync", "interrupt" if in_flight else "finish",
                src(f"{ASYNC}.in_flight_weight_updates", in_flight))  # fmt: skip
    else:
        imp.put("training.mode", "sync", f"{ASYNC}.enabled not true: generate, then train")
        imp.put("training.placement", "colocated" if colocated else "disaggregated", coloc_src)
    total_src = f"cluster.num_nodes {nodes} x cluster.gpus_per_node {per_node}"
    if colocated:
        gpus_and_engines(imp, nodes * per_node, per_engine, total_src, per_src, None, "")
        return finish(imp, k)
    gen, train, gen_src = _split(k, path, nodes, per_node)
    gpus_and_engines(imp, gen, per_engine, gen_src, per_src, train, f"{total_src} less the generation GPUs")
    return finish(imp, k)


def _split(k: Knobs, path: Path, nodes: int, per_node: int) -> tuple[int, int, str]:
    """Generation and training GPUs of a non-colocated run, as NeMo-RL's GRPO setup splits the
    cluster: on one node, ``resources.gpus_per_node`` of its GPUs generate; on several,
    ``resources.num_nodes`` whole nodes do."""
    res = f"{COLOC}.resources"
    gen_nodes, gen_per_node = k.number(f"{res}.num_nodes"), k.number(f"{res}.gpus_per_node")
    if nodes == 1:
        if not gen_per_node or gen_per_node >= per_node:
            raise InputError(
                f"{path}: {res}.gpus_per_node is {gen_per_node}; on one node expected the generation "
                f"GPUs, more than 0 and fewer than cluster.gpus_per_node {per_node}."
            )
        return gen_per_node, per_node - gen_per_node, f"{res}.gpus_per_node {gen_per_node} (one node)"
    if not gen_nodes or gen_nodes >= nodes or gen_per_node != per_node:
        raise InputError(
            f"{path}: {res}.num_nodes is {gen_nodes} and gpus_per_node {gen_per_node}; on {nodes} nodes "
            f"expected whole generation nodes (more than 0, fewer than cluster.num_nodes) of "
            f"cluster.gpus_per_node {per_node} GPUs."
        )
    gen_src = f"{res}.num_nodes {gen_nodes} x gpus_per_node {per_node}"
    return gen_nodes * per_node, (nodes - gen_nodes) * per_node, gen_src
