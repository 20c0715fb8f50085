#!/bin/bash
# vime (slime-derived), Setup 2, the sync row: TRANSCRIBED, not a script from vime's repository.
# Only the knobs the source states, as the slime argument arrays of slime's scripts/run-qwen3-4B.sh
# (THUDM/slime @624b824a898ab0ec1fcb4d373004c7f3852bf515) spell them.
# Source: github.com/vllm-project/vime/issues/358, comment of 2026-07-24 ("Setup 2" table).
# Sync row: python3 train.py (issue description: "Sync | train.py | default sync rollout").
# Held-out async row: python3 train_async.py plus
#   --rollout-function-path vime.rollout.fully_async_rollout.generate_rollout_fully_async

CKPT_ARGS=(
   --hf-checkpoint Qwen/Qwen3-4B      # "Model | Qwen3-4B"
)

ROLLOUT_ARGS=(
   --prompt-data dapo-math-17k.jsonl  # "Dataset (train) | dapo-math-17k"
   --num-rollout 200                  # "Steps | 200"
   --rollout-batch-size 32            # "rollout-batch-size / n-samples / gbs | 32 / 8 / 256"
   --n-samples-per-prompt 8
   --global-batch-size 256
   --rollout-max-response-len 2048     # "rollout-max-response-len | 2k", read as 2 x 1024 (assumed)
)

GRPO_ARGS=(
   --advantage-estimator grpo         # "Method | GRPO"
   # --use-kl-loss not given            # "use-kl-loss | False"
)

PERF_ARGS=(
   --tensor-model-parallel-size 2     # "TP | 2"; the issue does not say whether the rollout engines use it too
)

DISTRIBUTED_ARGS=(
   --actor-num-nodes 1
   --actor-num-gpus-per-node 2        # "Actor GPUs | 2"
   --rollout-num-gpus 2               # "Rollout GPUs | 2 (disaggregated)": no --colocate
)
# Hardware: "Hardware | A3" (Ascend A3 NPUs). Not stated: the rollout engine and its version,
# --rollout-num-gpus-per-engine, micro-batch and dynamic-batch settings, sampling temperature.
# The sync row's command, as slime's scripts launch it (the issue: "Sync | train.py").
python3 train.py ${CKPT_ARGS[@]} ${ROLLOUT_ARGS[@]} ${GRPO_ARGS[@]} ${PERF_ARGS[@]} ${DISTRIBUTED_ARGS[@]} 
