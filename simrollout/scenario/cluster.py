"""The ``cluster`` (the inference tier, its engines and their iteration times), ``policy`` and
``arrivals`` sections."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from .base import Count, Engines, NonNegativeCount, _Model


class IterationTime(_Model):
    """Seconds per engine iteration, linear in the batch's work (a Vidur-style predictor):
    ``base + per_prefill_token x P + per_prefill_attention x A + per_cached_attention x K +
    per_decode x D + per_context_token x C`` for P prefill tokens, A pairs of a prefill token and
    a token of its request's new context it attends to (a chunk of ``t`` tokens after ``k`` new
    ones: ``t x (k + t/2)``, as Vidur's prefill attention grows with the chunk's square), K pairs
    of a prefill token and a token of the cached prefix it resumes after (``t x cached``), D
    decoding requests and C tokens of context those decodes attend to. ``per_cached_attention``
    unset: a cached pair costs what a new one does. On a GPU the two are one kernel; on a CPU
    engine (llama.cpp) a short chunk after a long cached prefix runs far slower per pair than a
    whole prompt does, and the probe's resumed requests read it. ``cached_attention_below``: that
    rate applies only to a request's chunk of fewer new tokens than this (llama.cpp's one-thread
    CPU build switches between 49 and 64, whatever else shares the batch), a longer chunk's cached
    pairs cost a new pair's; unset: to every chunk (:meth:`cached_pairs`)."""

    base: PositiveFloat
    per_prefill_token: NonNegativeFloat
    per_prefill_attention: NonNegativeFloat = 0.0
    per_cached_attention: NonNegativeFloat | None = None
    cached_attention_below: PositiveInt | None = None
    per_decode: NonNegativeFloat = 0.0
    per_context_token: NonNegativeFloat = 0.0

    def __call__(
        self, prefill: float, decodes: float, context: float, attention: float = 0.0, cached: float = 0.0
    ) -> float:
        """One iteration; ``attention`` counts every pair of the prefill, ``cached`` those of them
        with a cached prefix's tokens."""
        return (self.base + self.per_prefill_token * prefill + self._attention(attention, cached)
                + self.per_decode * decodes + self.per_context_token * context)  # fmt: skip

    def _attention(self, pairs, cached):
        if self.per_cached_attention is None:
            return self.per_prefill_attention * pairs
        return self.per_prefill_attention * (pairs - cached) + self.per_cached_attention * cached

    def cached_pairs(self, chunk, prefix):
        """The pairs of a request's ``chunk`` of new tokens with its cached ``prefix`` that cost
        ``per_cached_attention`` (the ``cached`` of an iteration sums them): all of them, or none
        for a chunk of ``cached_attention_below`` tokens or more (arrays: each its own)."""
        below = self.cached_attention_below
        if below is None:
            return chunk * prefix
        if np.ndim(chunk):
            return np.where(np.asarray(chunk) < below, chunk * prefix, 0.0)
        return chunk * prefix if chunk < below else 0.0

    def prefill_seconds(self, tokens, prefix=0):
        """The prefill part of iterations over ``tokens`` tokens after a cached ``prefix`` (in any
        chunks: the causal pairs add up to ``tokens x (prefix + tokens / 2)``; the cached pairs
        read as those of one chunk of ``tokens``)."""
        if self.per_cached_attention is None:
            return self.per_prefill_token * tokens + self.per_prefill_attention * tokens * (
                prefix + tokens / 2
            )
        pairs = tokens * (prefix + tokens / 2)
        return self.per_prefill_token * tokens + self._attention(pairs, self.cached_pairs(tokens, prefix))


class Engine(_Model):
    """One serving engine (vLLM, SGLang, llama.cpp's server): continuous batching with chunked
    prefill, a KV cache of ``kv_capacity_tokens`` and at most ``max_running`` requests."""

    iteration: IterationTime
    kv_capacity_tokens: PositiveInt
    max_batch_tokens: PositiveInt = 8192  # prefill + decode tokens per iteration
    max_running: PositiveInt = 256
    gpus: PositiveInt = 1  # GPUs per engine (tensor parallel), for GPU-hours
    overhead: NonNegativeFloat = 0.0  # s per request outside the iterations (HTTP, tokenizer)


class Inference(_Model):
    """Engines serving the policy. With a time workload (``llm_time``) generation slows by
    ``slowdown`` per extra running request; with a token workload each engine is the ``engine``
    model (continuous batching, KV cache, prefix cache; see docs/model.md)."""

    engines: Engines
    slowdown: NonNegativeFloat = 0.0
    price_per_hour: NonNegativeFloat = 0.0  # per engine
    profile: str | None = None  # an engine profile under calibration/engines/
    engine: Engine | None = None
    routing: Literal["sticky", "least_loaded"] = "sticky"
    prefix_cache: bool = True


class Cluster(_Model):
    concurrency: Count | list[Count]
    inference: Inference | None = None
    clients: Count = 1  # rollout clients issuing sandbox operations (contention.scope client)

    @field_validator("concurrency")
    @classmethod
    def _non_empty(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("give at least one concurrency level")
        return v

    @property
    def levels(self) -> list[int]:
        return list(self.concurrency) if isinstance(self.concurrency, list) else [self.concurrency]


class Policy(_Model):
    mode: Literal["async", "sync"] = "async"
    batch_size: Count | None = None
    timeout: PositiveFloat | None = None
    retries: NonNegativeInt = 0
    retry_backoff: NonNegativeFloat = 0.0
    warm_pool: NonNegativeCount = 0
    reuse: bool = False  # a finished sandbox serves the next sample of its task after substrate.reset

    @model_validator(mode="after")
    def _batch(self):
        if self.mode == "sync" and self.batch_size is None:
            raise ValueError("mode 'sync' needs batch_size")
        return self


class Arrivals(_Model):
    kind: Literal["batch", "poisson"] = "batch"
    rate: PositiveFloat | None = None

    @model_validator(mode="after")
    def _rate(self):
        if self.kind == "poisson" and self.rate is None:
            raise ValueError("kind 'poisson' needs rate (trajectories per second)")
        return self
