"""Training-run metric logs as the RL frameworks write them, read into one table of canonical
quantities per step (docs/calibration.md, "Calibrate the GPU side from a training run's logs").

Two tables make a reader: the framework's metric names (:data:`NAMES`, name -> canonical
quantity) and the file's kind (:data:`KINDS`: console lines, JSONL records, a JSON history, a CSV
export). Both are detected from the file; a file that matches none is refused naming what was
expected."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..errors import InputError, read_text

# canonical quantity -> unit, as the profile and docs name them
QUANTITIES = {
    "gen_s": "s: the rollout phase (generation of the step's responses)",
    "logprob_s": "s: the old policy's log-prob pass",
    "ref_s": "s: the reference model's log-prob pass",
    "adv_s": "s: advantages",
    "reward_s": "s: reward",
    "update_s": "s: the policy update (forward, backward, optimizer)",
    "sync_s": "s: weight sync into the engines",
    "save_s": "s: checkpoint",
    "step_s": "s: the whole step",
    "response_mean": "tokens: mean response length",
    "response_max": "tokens: longest response",
    "clip_ratio": "share of responses cut at the maximum length",
    "prompt_mean": "tokens: mean prompt length",
    "total_tokens": "tokens trained in the step (prompts and responses)",
    "tokens_per_rank": "tokens trained in the step per data-parallel rank (verl's balanced partitions)",
    "throughput": "tokens/s/GPU over the step",
    "step_tokens_per_gpu_second": "tokens trained / (the step's seconds x every GPU of the run)",
    "train_s": "s: the trainer's whole step (log-prob passes and update), where no update alone is logged",
    "wait_s": "s: the trainer's wait for its batch (a sync run: the batch's generation)",
    "gpus": "GPUs of the run (a table of several runs' means, a row a run)",
}
GPU_COLUMNS = ("n_gpus", "gpus")  # a table of runs: each row's GPUs (any framework)
LABEL_COLUMNS = ("row", "run")  # a table of runs: each row's name

# framework -> {metric name as logged -> canonical quantity}; sources in docs/calibration.md
NAMES: dict[str, dict[str, str]] = {
    "verl": {
        "timing_s/gen": "gen_s",
        "timing_s/old_log_prob": "logprob_s",
        "timing_s/ref": "ref_s",
        "timing_s/adv": "adv_s",
        "timing_s/reward": "reward_s",
        "timing_s/update_actor": "update_s",
        "timing_s/update_weights": "sync_s",
        "timing_s/save_checkpoint": "save_s",
        "timing_s/step": "step_s",
        "response_length/mean": "response_mean",
        "response_length/max": "response_max",
        "response_length/clip_ratio": "clip_ratio",
        "prompt_length/mean": "prompt_mean",
        "perf/total_num_tokens": "total_tokens",
        "global_seqlen/mean": "tokens_per_rank",
        "perf/throughput": "throughput",
    },
    "areal": {
        "timeperf/rollout": "gen_s",
        "timeperf/recompute_logp": "logprob_s",
        "timeperf/ref_logp": "ref_s",
        "timeperf/compute_advantage": "adv_s",
        "timeperf/train_step": "update_s",
        "timeperf/update_weights": "sync_s",
        "timeperf/save": "save_s",
    },
    "slime": {
        "perf/rollout_time": "gen_s",
        "perf/log_probs_time": "logprob_s",
        "perf/ref_log_probs_time": "ref_s",
        "perf/actor_train_time": "update_s",
        "perf/update_weights_time": "sync_s",
        "perf/step_time": "step_s",
        "perf/actor_train_tok_per_s": "throughput",
        "perf/train_time": "train_s",
        "perf/train_wait_time": "wait_s",
    },
    "skyrl": {
        "timing/generate": "gen_s",
        "timing/fwd_logprobs_values_reward": "logprob_s",
        "timing/compute_advantages_and_returns": "adv_s",
        "timing/policy_train": "update_s",
        "timing/sync_weights": "sync_s",
        "timing/save_checkpoints": "save_s",
        "timing/step": "step_s",
    },
    "nemo-rl": {  # its timers (nemo_rl/algorithms/grpo.py) logged under timing/train
        "timing/train/total_step_time": "step_s",
        "timing/train/generation": "gen_s",
        "timing/train/exposed_generation": "wait_s",  # async GRPO: the trainer's wait for its batch
        "timing/train/policy_and_reference_logprobs": "logprob_s",
        "timing/train/policy_training": "update_s",
        "timing/train/prepare_for_generation/transfer_and_update_weights": "sync_s",  # sync GRPO's refit
        "timing/train/weight_sync": "sync_s",  # async GRPO's
        "timing/train/reward_calculation": "reward_s",
        "timing/train/advantage_calculation": "adv_s",
        "timing/train/checkpointing": "save_s",
        "train/mean_gen_tokens_per_sample": "response_mean",
        "train/mean_prompt_length": "prompt_mean",
        "train/total_num_tokens": "total_tokens",
        # nemo_rl/algorithms/utils.py print_performance_metrics: train/total_num_tokens / step / GPUs
        "performance/tokens_per_sec_per_gpu": "step_tokens_per_gpu_second",
    },
    "prime-rl": {
        "time/step": "step_s",
        "time/update_weights": "sync_s",
        "seq_len/all/mean": "response_mean",
        "progress/total_tokens": "total_tokens",
        "perf/throughput": "throughput",
    },
}
STEP_KEYS = ("step", "_step", "global_step", "training/global_step", "Step")

# one metric in a console line: verl's ``name:value`` (`` - `` between them), or a printed
# Python dict's ``'name': value`` (slime), the value bare or as ``np.float64(value)``
_PAIR = re.compile(
    r"['\"]?([A-Za-z_][\w./@\-]*)['\"]?\s*:\s*(?:np\.float\d+\()?(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
)


def _console(text: str) -> list[dict[str, float]]:
    out = []
    for line in text.splitlines():
        pairs = {k: float(v) for k, v in _PAIR.findall(line)}
        if pairs:
            out.append(pairs)
    return out


def _jsonl(text: str) -> list[dict[str, float]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(_flat(json.loads(line)))
            except json.JSONDecodeError as exc:
                msg = f"line {n}: not a JSON object ({exc.msg}); expected one record a line."
                raise InputError(msg) from None
    return out


def _json(text: str) -> list[dict[str, float]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc.msg} at line {exc.lineno}).") from None
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
        n = max(len(v) for v in data.values())  # a history: metric -> values by step
        return [{k: v[i] for k, v in data.items() if i < len(v) and _number(v[i])} for i in range(n)]
    if isinstance(data, dict):
        data = data.get("history", data.get("records", [data]))
    if not isinstance(data, list):
        raise InputError("expected a list of per-step records, or a mapping of metric -> list of values.")
    return [_flat(r) for r in data]


def _csv(text: str) -> list[dict[str, float]]:
    """A W&B or TensorBoard scalar export: one row a step, one column a metric. W&B's panel export
    names columns ``<run> - <metric>`` and adds ``__MIN``/``__MAX`` columns, which are dropped."""
    rows = list(csv.DictReader(io.StringIO(text)))
    out = []
    for row in rows:
        rec = {}
        for col, v in row.items():
            if col in LABEL_COLUMNS and v:
                rec["__label"] = v
            if col is None or col.endswith(("__MIN", "__MAX")) or not _number(v):
                continue
            rec[col.rsplit(" - ", 1)[-1].strip()] = float(v)
        out.append(rec)
    return out


def _flat(rec) -> dict[str, float]:
    """A record's numbers, its metrics at the top or under ``data`` / ``metrics``."""
    if not isinstance(rec, dict):
        raise InputError(f"expected a record mapping metric names to numbers, got {type(rec).__name__}.")
    out = {k: float(v) for k, v in rec.items() if _number(v)}
    for key in ("data", "metrics"):
        if isinstance(rec.get(key), dict):
            out.update({k: float(v) for k, v in rec[key].items() if _number(v)})
    return out


def _number(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int | float):
        return True
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return str(v).strip() != ""


KINDS: dict[str, Callable[[str], list[dict[str, float]]]] = {
    "console": _console,
    "jsonl": _jsonl,
    "json": _json,
    "csv": _csv,
}


def _tensorboard(path: Path, text: str, kind: str) -> list[dict[str, float]] | None:
    """TensorBoard's scalar download, one metric a file: CSV ``Wall time,Step,Value`` or JSON
    ``[[wall time, step, value], ...]``, the metric named by the file (``run-<run>-tag-<tag>``, the
    tag's ``/`` written ``_``); None for any other file."""
    rows = None
    if kind == "csv" and text.lstrip().startswith("Wall time,Step,Value"):
        rows = [(r["Step"], r["Value"]) for r in csv.DictReader(io.StringIO(text.lstrip()))]
    elif kind == "json" and text.lstrip().startswith("[["):
        data = json.loads(text)
        if all(isinstance(r, list) and len(r) == 3 for r in data):
            rows = [(r[1], r[2]) for r in data]
    if rows is None:
        return None
    stem = path.stem.rsplit("-tag-", 1)[-1]
    known = {re.sub(r"\W", "_", n): n for names in NAMES.values() for n in names}
    tags = [t for t in known if stem.endswith(t)]
    if not tags:
        return [{}]  # no known metric: refused below, naming what was expected
    name = known[max(tags, key=len)]
    return [{"step": float(st), name: float(v)} for st, v in rows if _number(st) and _number(v)]


def join_runs(tables: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """The tables as runs: every TensorBoard file (one metric each) joined by step into one run,
    the other files a run each."""
    board = [t for t in tables if t.attrs.get("kind") == "tensorboard"]
    if len(board) < 2:
        return tables
    joined = pd.concat(board, axis=1).sort_index()
    joined = joined.loc[:, ~joined.columns.duplicated(keep="last")]  # a quantity in two files: the later
    joined.attrs.update(framework=board[0].attrs["framework"], kind="tensorboard",
                        source=", ".join(t.attrs["source"] for t in board))  # fmt: skip
    return [joined] + [t for t in tables if t.attrs.get("kind") != "tensorboard"]


def file_kind(path: Path, text: str) -> str:
    """The file's kind from its suffix, else from its first line."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in (".json", ".csv"):
        return suffix[1:]
    first = text.lstrip()[:1]
    if first == "[" or (first == "{" and "\n{" not in text.strip()):
        return "json"
    if first == "{":
        return "jsonl"
    return "console"


def framework_of(records: list[dict[str, float]]) -> str | None:
    """The framework whose names the records hold most of (None: none of them); a tie is refused."""
    keys = {k for r in records for k in r}
    hits = {fw: len(keys & names.keys()) for fw, names in NAMES.items()}
    best = max(hits, key=hits.get)
    tied = [fw for fw, n in hits.items() if n == hits[best]]
    if hits[best] and len(tied) > 1:
        raise InputError(f"holds as many metric names of {' and '.join(tied)}; say which with --framework.")
    return best if hits[best] else None


def read_training_log(path: str | Path, framework: str | None = None) -> pd.DataFrame:
    """One file's steps as a table: a row per step (index ``step``), a column per canonical
    quantity it logs. ``attrs`` hold the framework, the file kind and the source."""
    path = Path(path)
    text = read_text(path, "training log")
    kind = file_kind(path, text)
    try:
        records = _tensorboard(path, text, kind)
        if records is not None:
            kind = "tensorboard"
        else:
            records = KINDS[kind](text)
        fw = framework or framework_of(records)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    if fw is None or fw not in NAMES:
        expected = "; ".join(f"{k}: {', '.join(list(v)[:4])}, ..." for k, v in NAMES.items())
        raise InputError(
            f"{path}: read as a {kind} file, but no metric of a known framework is in it (or "
            f"--framework '{fw}' is not one); expected the per-step metrics a training run logs, "
            f"named as {expected}."
        )
    names = NAMES[fw]
    rows, steps, labels = [], [], []
    for i, rec in enumerate(records):
        row = {q: rec[name] for name, q in names.items() if name in rec}
        if "step_s" not in row and rec.get("training_hours") and rec.get("ppo_steps"):
            row["step_s"] = rec["training_hours"] * 3600.0 / rec["ppo_steps"]  # a run's wall hours
        if not row:
            continue
        for g in GPU_COLUMNS:
            if g in rec:
                row["gpus"] = rec[g]
        step = next((rec[k] for k in STEP_KEYS if k in rec), None)
        steps.append(int(step) if step is not None else i + 1)
        rows.append(row)
        labels.append(rec.get("__label", ""))
    if not rows:
        raise InputError(f"{path}: no step logs a metric of {fw} ({', '.join(names)}).")
    table = pd.DataFrame(rows, index=pd.Index(steps, name="step"))
    if any(labels):
        table["label"] = labels
    table = table.sort_index()
    table = table[~table.index.duplicated(keep="last")]
    table.attrs.update(framework=fw, kind=kind, source=str(path))
    return table


def split_runs(
    tables: list[pd.DataFrame], rows: list[str] | None = None, need_gpus: bool = True
) -> tuple[list[pd.DataFrame], list[int]]:
    """A table of several runs' means (a ``gpus`` column, and a ``row`` or ``run`` name per row)
    split into one table per run with its GPU count; ``rows``: only the rows of those names.
    ``need_gpus`` False (``--gpus`` given): a table without the column stays one run (count 0)."""
    out, counts = [], []
    for t in tables:
        if rows is not None:
            if "label" not in t:
                raise InputError(
                    f"{t.attrs['source']}: --rows needs a 'row' or 'run' column naming each row."
                )
            missing = [r for r in rows if r not in set(t["label"])]
            if missing:
                raise InputError(f"{t.attrs['source']}: --rows: no row named {', '.join(missing)}; "
                                 f"the rows are {', '.join(t['label'])}.")  # fmt: skip
            t = t[t["label"].isin(rows)]
        if "gpus" not in t or t["gpus"].isna().any():
            if not need_gpus:  # --gpus gives them: the rows chosen are one run
                out.append(t)
                counts.append(0)
                continue
            raise InputError(
                f"{t.attrs['source']}: --gpus not given and the table has no 'n_gpus' or 'gpus' column "
                "for every row; give the GPUs that trained with --gpus."
            )
        key = t["label"] if "label" in t else t["gpus"]
        for _, run in t.groupby(key, sort=False):
            run = run.drop(columns=[c for c in ("label", "gpus") if c in run])
            run.attrs.update(t.attrs)
            out.append(run)
            counts.append(int(t.loc[run.index, "gpus"].iloc[0]))
    return out, counts
