"""Training-run log readers (simrollout.calibration.training_logs) on real logs pasted in public
issues (tests/data/training_logs/PROVENANCE.md): each reads the numbers the file shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simrollout.calibration.training_logs import join_runs, read_training_log
from simrollout.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data" / "training_logs"


def test_verl_console_line_of_issue_1208():
    t = read_training_log(DATA / "verl_issue1208_step2.log")
    assert t.attrs["framework"] == "verl" and t.attrs["kind"] == "console"
    assert list(t.index) == [2]  # "step:2"
    row = t.loc[2]
    expected = {"gen_s": 74.020, "logprob_s": 3.566, "ref_s": 3.420, "adv_s": 1.167, "update_s": 14.302,
                "step_s": 96.551, "response_mean": 324.958, "response_max": 1024.0, "clip_ratio": 0.004,
                "prompt_mean": 102.534, "tokens_per_rank": 547190.5}  # fmt: skip
    assert row.to_dict() == pytest.approx(expected)


def test_verl_fragment_without_a_step_of_issue_7412():
    t = read_training_log(DATA / "verl_issue7412_step34.log")
    assert list(t.index) == [1]  # no step in the fragment: numbered by line
    row = t.loc[1]
    assert row["gen_s"] == pytest.approx(541.1881153844297)
    assert row["update_s"] == pytest.approx(472.1077583655715)
    assert row["sync_s"] == pytest.approx(5.82697419822216)
    assert row["step_s"] == pytest.approx(1163.9566092677414)
    assert row["reward_s"] == pytest.approx(5.0749629735946655e-05)
    assert "total_tokens" not in t  # "perf/total_num_t" is cut off in the issue: no value


def test_verl_step_80_of_the_sglang_tutorial_issue():
    t = read_training_log(DATA / "verl_sglang_tutorial_issue106_step80.log")
    assert list(t.index) == [80]
    row = t.loc[80]
    assert (row["gen_s"], row["reward_s"], row["response_mean"], row["clip_ratio"]) == pytest.approx(
        (29.316, 1.036, 326.241, 0.008)
    )
    assert row["tokens_per_rank"] == pytest.approx(353399.375)


def test_slime_printed_dict_and_the_tie_between_frameworks():
    path = DATA / "slime_issue385.log"
    with pytest.raises(InputError, match="slime_issue385.log: holds as many metric names of verl and slime"):
        read_training_log(path)
    assert read_training_log(path, "slime")["gen_s"].tolist() == pytest.approx([245.61117100715637])
    assert read_training_log(path, "verl")["step_s"].tolist() == pytest.approx([33.635794281959534])


def test_jsonl_json_and_wandb_csv_layouts_read_the_same_numbers(tmp_path):
    """No committed W&B or JSONL export with these names was found; the real line's numbers are
    written in each layout (verl's JSONL logger, W&B's history, W&B's panel CSV export)."""
    real = read_training_log(DATA / "verl_issue1208_step2.log")
    names = {"gen_s": "timing_s/gen", "update_s": "timing_s/update_actor", "step_s": "timing_s/step",
             "response_mean": "response_length/mean"}  # fmt: skip
    metrics = {names[q]: float(real.loc[2, q]) for q in names}
    (tmp_path / "m.jsonl").write_text(json.dumps({"step": 2, "data": metrics}) + "\n")
    (tmp_path / "m.json").write_text(json.dumps({"_step": [2], **{k: [v] for k, v in metrics.items()}}))
    header = ["Step"] + [f"run-a - {k}" for k in metrics] + [f"run-a - {k}__MIN" for k in metrics]
    row = ["2"] + [repr(v) for v in metrics.values()] + ["0"] * len(metrics)
    (tmp_path / "m.csv").write_text(",".join(header) + "\n" + ",".join(row) + "\n")
    for name, kind in (("m.jsonl", "jsonl"), ("m.json", "json"), ("m.csv", "csv")):
        t = read_training_log(tmp_path / name)
        assert t.attrs["kind"] == kind and list(t.index) == [2], name
        assert t.loc[2].to_dict() == pytest.approx({q: real.loc[2, q] for q in names}), name


def test_tensorboard_downloads_one_metric_a_file_join_into_one_run(tmp_path):
    """TensorBoard's scalar download (CSV and JSON), the tag in the file name, with the real line's
    numbers (no committed download with these tags was found)."""
    real = read_training_log(DATA / "verl_issue1208_step2.log")
    upd, gen = float(real.loc[2, "update_s"]), float(real.loc[2, "gen_s"])
    a = tmp_path / "run-grpo-tag-timing_s_update_actor.csv"
    a.write_text(f"Wall time,Step,Value\n1746000000.5,2,{upd!r}\n")
    b = tmp_path / "run-grpo-tag-timing_s_gen.json"
    b.write_text(json.dumps([[1746000000.5, 2, gen]]))
    tables = [read_training_log(a), read_training_log(b)]
    assert [t.attrs["kind"] for t in tables] == ["tensorboard", "tensorboard"]
    (run,) = join_runs(tables)
    assert list(run.index) == [2] and run.loc[2].to_dict() == pytest.approx({"update_s": upd, "gen_s": gen})
    assert run.attrs["source"] == f"{a}, {b}"


def test_a_file_of_no_known_framework_says_what_was_expected(tmp_path):
    bad = tmp_path / "train.log"
    bad.write_text("epoch 1 loss:0.5 - lr:0.001\n")
    with pytest.raises(InputError) as exc:
        read_training_log(bad)
    msg = str(exc.value)
    assert msg.startswith(str(bad)) and "\n" not in msg
    assert "timing_s/gen" in msg and "timeperf/rollout" in msg and "perf/rollout_time" in msg
    broken = tmp_path / "m.jsonl"
    broken.write_text('{"step": 1, "timing_s/gen": 3}\n{"step": 2,\n')
    with pytest.raises(InputError, match="m.jsonl: line 2: not a JSON object"):
        read_training_log(broken)


def test_a_table_of_runs_splits_by_row_with_its_gpus(tmp_path):
    from simrollout.calibration.training_logs import split_runs

    p = tmp_path / "runs.csv"
    p.write_text("row,n_gpus,timing_s/gen,timing_s/update_actor\nsync-32,32,357.41,269.80\n"
                 "sync-64,64,150.72,133.41\n")  # fmt: skip
    tables, gpus = split_runs([read_training_log(p)])
    assert gpus == [32, 64]
    assert [t["update_s"].iloc[0] for t in tables] == [269.80, 133.41]
    only, _ = split_runs([read_training_log(p)], ["sync-64"])
    assert len(only) == 1 and only[0]["gen_s"].iloc[0] == 150.72
    with pytest.raises(InputError, match="no row named sync-16"):
        split_runs([read_training_log(p)], ["sync-16"])


def test_nemo_rl_names_and_its_published_table():
    """NeMo-RL's timers as its GRPO loop logs them (``timing/train/<timer>``): the performance
    page's On policy rows (validation/training/nemo-rl) read as nine runs, the step alone each."""
    from simrollout.calibration.training_logs import split_runs

    table = DATA.parents[1].parent / "validation" / "training" / "nemo-rl" / "baseline_metrics.csv"
    t = read_training_log(table)
    assert t.attrs["framework"] == "nemo-rl"
    runs, gpus = split_runs([t])
    assert gpus[:3] == [16, 32, 8] and [list(r.columns) for r in runs[:1]] == [
        ["step_s", "step_tokens_per_gpu_second"]
    ]
    assert [r["step_s"].iloc[0] for r in runs[:3]] == [92.8, 198.0, 91.0]
    assert [r["step_tokens_per_gpu_second"].iloc[0] for r in runs[:3]] == [1581.0, 1066.0, 3359.0]


def test_nemo_rl_stage_timers_and_token_counts(tmp_path):
    names = {"timing/train/generation": ("gen_s", 41.5), "timing/train/policy_training": ("update_s", 30.25),
             "timing/train/policy_and_reference_logprobs": ("logprob_s", 9.0),
             "timing/train/prepare_for_generation/transfer_and_update_weights": ("sync_s", 2.5),
             "timing/train/total_step_time": ("step_s", 86.0), "train/total_num_tokens": ("total_tokens", 2.1e6),
             "train/mean_gen_tokens_per_sample": ("response_mean", 880.0)}  # fmt: skip
    rec = {"step": 3, **{n: v for n, (_, v) in names.items()}, "train/loss": 0.1}
    (tmp_path / "nemo.jsonl").write_text(json.dumps(rec) + "\n")
    t = read_training_log(tmp_path / "nemo.jsonl")
    assert t.attrs["framework"] == "nemo-rl" and list(t.index) == [3]
    assert t.loc[3].to_dict() == pytest.approx(dict(names.values()))
    # async GRPO's weight sync and the trainer's wait, as a TensorBoard download (the tag's / as _)
    wait = tmp_path / "run-async-tag-timing_train_exposed_generation.csv"
    wait.write_text("Wall time,Step,Value\n1746000000.5,3,4.75\n")
    assert read_training_log(wait).loc[3].to_dict() == {"wait_s": 4.75}
