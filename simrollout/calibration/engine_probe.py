"""Time a real OpenAI-compatible serving engine (vLLM, SGLang, llama.cpp's server) in tokens.

Each request streams ``/v1/completions`` with a prompt of a controlled length and a fixed number
of output tokens (``ignore_eos``); its record holds the time to first token, the time per output
token after it, and the token counts the server reports. Requests run at several concurrency
levels, with several prompt lengths; at each level also decode runs: that many requests with a
long output started together (decodes with nothing else in the batch), with a short prompt and
with a long one the server already holds; then pairs sharing a long prefix (the second one's
first token shows the prefix cache). Records are appended to the same
JSONL as the sandbox probes and flushed as they come; a request the server fails is recorded with
its error, and the probe goes on.
"""

from __future__ import annotations

import json
import random
import string
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from ..errors import InputError
from ..redact import strip_url
from .probe import RecordWriter


@dataclass
class EngineRecord:
    run_id: str
    backend: str  # "openai"
    backend_version: str  # what the server says it is
    engine_version: str
    host: str  # the server's address
    image: str  # the model
    phase: str  # "generate"
    start: float  # unix time, s
    latency: float  # request to last token, s
    concurrency: int
    mode: str  # "plain" or "shared_prefix"
    ok: bool
    error: str | None
    sandbox: int  # request index within the level
    command: str | None = None
    prompt_length: int | None = None  # tokens asked for (the group the fit uses)
    prompt_tokens: int | None = None  # as the server counted them
    output_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens the server served from its cache, if it says
    ttft: float | None = None  # s
    tpot: float | None = None  # s per output token after the first
    chunks: int | None = None  # streamed pieces of text; fewer than the tokens: some were held back
    slots: int | None = None  # requests the server runs at once, if it says (llama.cpp /props)
    slot_context: int | None = None  # tokens of KV cache per slot, if it says
    slot: int | None = None  # the slot the request was pinned to (``pin_slots``), else None
    reference: bool = False  # a reference block's request (drift; left out of the fit)
    block: int | None = None  # which reference block: 0 = the start, the last = the end


@dataclass
class EnginePlan:
    levels: tuple[int, ...] = (1, 2, 4, 8)
    prompts: tuple[int, ...] = (128, 1024)  # prompt lengths, tokens (bytes for a byte-level vocabulary)
    output: int = 32
    requests: int = 0  # per level and prompt length; 0: max(8, 2 x level)
    decode_output: int = 96  # decode runs: ``level`` requests started together, each decoding alone
    decode_rounds: int = 3
    # prompts of the decode runs: a short one, and longer ones the server holds first (sent once
    # with one output token), so the runs read what a decode's context costs in a batch
    decode_contexts: tuple[int, ...] = (16, 1024)
    shared_prefix: int = 1024  # tokens of the prefix shared by the pairs (0: no pairs)
    pairs: int = 4  # per append size
    # new tokens after the shared prefix in each request of a pair: several sizes time how the cost
    # of attending to a cached prefix changes with the append (llama.cpp's one-thread CPU path: per
    # pair of a new and a cached token, ten times as much at 16-49 new tokens as at 64 and more),
    # and the fit reads where it switches (engine_fit._cached_split)
    appends: tuple[int, ...] = (16, 32, 64, 128)
    timeout: float = 300.0
    pin_slots: bool = False  # each client keeps to one slot (llama.cpp's ``id_slot``; see Lanes)
    seed: int | None = None  # of the prompt texts; None: from the run id (never a repeated prompt,
    # which a server's prompt cache would serve without a prefill)
    extra: dict = field(default_factory=dict)
    # reference blocks (the drift): this many requests of the first prompt length at level 1 and
    # max(this, top) at the top level, at the start, after half the levels and at the end; 0: none
    reference: int = 0

    def count(self, level: int) -> int:
        return self.requests or max(8, 2 * level)


class Lanes:
    """Pins each worker thread of one pool to its own slot of a llama.cpp server (``id_slot``:
    0, 1, ... in the order the threads first ask), or, with ``pin`` off, leaves the server to
    choose. With a KV stream per slot (llama.cpp's default) a batch costs one forward pass per run
    of consecutive slots, and which slots an unpinned request gets depends on the server's whole
    history; pinned, ``c`` clients use slots ``0..c-1``, as an engine that batches in one pass."""

    def __init__(self, pin: bool):
        self.pin, self._ids, self._lock = pin, {}, threading.Lock()

    def slot(self) -> int | None:
        if not self.pin:
            return None
        with self._lock:
            return self._ids.setdefault(threading.get_ident(), len(self._ids))

    def extra(self, extra: dict, slot: int | None = None) -> dict:
        """``extra`` with this thread's slot (or ``slot``) when pinning."""
        slot = self.slot() if slot is None else slot
        return extra if not self.pin or slot is None else {**extra, "id_slot": slot}


class Server:
    """An OpenAI-compatible endpoint: ``/v1/completions`` streamed, and what it says about itself."""

    def __init__(self, base_url: str, model: str, timeout: float = 300.0, api_key: str | None = None,
                 key_variable: str = "OPENAI_API_KEY"):  # fmt: skip
        """``api_key`` goes as a bearer token; a user and password in the URL as basic
        authentication (without a key). Neither is kept in ``base_url``, which is what records
        and messages show."""
        import httpx

        url, userinfo = strip_url(base_url.rstrip("/"))
        self.base_url = url if url.endswith("/v1") else url + "/v1"
        self.model = model
        self.key_variable = key_variable if api_key else None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        auth = httpx.BasicAuth(*userinfo) if userinfo and not api_key else None
        self.client = httpx.Client(timeout=timeout, headers=headers, auth=auth)

    def _refused(self, status: int, what: str) -> InputError:
        """The server refused us (HTTP 401 or 403): say where the key came from, never the key."""
        how = (
            f"the API key in {self.key_variable} was refused; check it"
            if self.key_variable
            else "it needs an API key: export it in OPENAI_API_KEY or name its variable with "
            "--api-key-env NAME"
        )
        return InputError(f"--base-url {self.base_url}: {what} answered HTTP {status}; {how}.")

    def info(self) -> dict:
        """Server properties where the server exposes them (llama.cpp: ``/props``)."""
        root = self.base_url[: -len("/v1")]
        out = {"backend_version": "", "engine_version": ""}
        try:
            r = self.client.get(f"{root}/props", timeout=5)
            if r.status_code == 200:
                p = r.json()
                out["engine_version"] = str(p.get("build_info", ""))
                out["slots"] = p.get("total_slots")
                gen = p.get("default_generation_settings") or {}
                out["slot_context"] = gen.get("n_ctx")
        except Exception:  # not llama.cpp: nothing more to read
            pass
        return out

    def check(self) -> None:
        """Refuse an unreachable URL before anything is written."""
        import httpx

        try:
            r = self.client.get(f"{self.base_url}/models", timeout=10)
        except httpx.HTTPError as exc:
            raise InputError(
                f"--base-url {self.base_url}: no OpenAI-compatible server answers there "
                f"({type(exc).__name__}: {exc}); start the server (e.g. llama-server, vllm serve) "
                "or fix the URL. Nothing was written."
            ) from None
        if r.status_code in (401, 403):
            raise self._refused(r.status_code, "GET /models")
        if r.status_code >= 400:
            raise InputError(
                f"--base-url {self.base_url}: GET /models answered HTTP {r.status_code}; expected an "
                "OpenAI-compatible server. Nothing was written."
            )

    def complete(self, prompt: str, output: int, extra: dict, times: list[float] | None = None) -> dict:
        """Stream one completion; returns ttft, end, token counts (server-reported where given).
        ``times``, if given, receives the ``perf_counter`` of every piece of text as it comes."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": output, "temperature": 0.0,
                "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True},
                "cache_prompt": True, **extra}  # fmt: skip
        t0 = time.perf_counter()
        first = None
        chunks, usage, timings, pieces = 0, None, None, []
        with self.client.stream("POST", f"{self.base_url}/completions", json=body) as r:
            if r.status_code in (401, 403):
                raise self._refused(r.status_code, "POST /completions")
            if r.status_code >= 400:
                r.read()
                raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                msg = json.loads(data)
                if "error" in msg:
                    raise RuntimeError(str(msg["error"])[:200])
                if msg.get("usage"):
                    usage = msg["usage"]
                if msg.get("timings"):
                    timings = msg["timings"]
                for ch in msg.get("choices") or []:
                    if ch.get("text"):
                        chunks += 1
                        pieces.append(ch["text"])
                        if times is not None:
                            times.append(time.perf_counter())
                        if first is None:
                            first = time.perf_counter()
        end = time.perf_counter()
        out_tokens = (usage or {}).get("completion_tokens") or (timings or {}).get("predicted_n") or chunks
        prompt_tokens = (usage or {}).get("prompt_tokens") or (timings or {}).get("prompt_n")
        cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is None and timings and "cache_n" in timings:
            cached = timings["cache_n"]
        if first is None:
            first = end
        return {"ttft": first - t0, "end": end - t0, "output_tokens": int(out_tokens),
                "text": "".join(pieces), "chunks": chunks,
                "prompt_tokens": None if prompt_tokens is None else int(prompt_tokens),
                "cached_tokens": None if cached is None else int(cached)}  # fmt: skip


SHORT_DECODE = 16  # a decode run's prompt this short is prefilled with the run, not before


def _quiet(fn, *args):
    """``fn(*args)``, its failure left to the request that follows (which records it)."""
    try:
        return fn(*args)
    except Exception:
        return None


def text(tokens: int, rng: random.Random) -> str:
    """About ``tokens`` tokens of text: letters, one token each in a byte-level vocabulary (fewer
    for BPE); no spaces, which some tokenizers spell in several bytes."""
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(tokens))


def probe_engine(
    server: Server,
    plan: EnginePlan,
    out: Path,
    on_record: Callable[[EngineRecord], None] | None = None,
) -> str:
    """Run the plan against ``server``; returns the run id."""
    server.check()
    run_id = uuid.uuid4().hex[:12]
    info = server.info()
    rng = random.Random(run_id if plan.seed is None else plan.seed)
    base = dict(run_id=run_id, backend="openai", backend_version=info.get("backend_version", ""),
                engine_version=info.get("engine_version", ""), host=urlparse(server.base_url).netloc,
                image=server.model, phase="generate", slots=info.get("slots"),
                slot_context=info.get("slot_context"))  # fmt: skip
    writer = RecordWriter(out)
    stop = threading.Event()

    def one(level: int, idx: int, prompt: str, mode: str, length: int, lanes: Lanes,
            output: int | None = None, slot: int | None = None,
            block: int | None = None) -> None:  # fmt: skip
        if stop.is_set():
            return
        t0 = time.time()
        slot = lanes.slot() if slot is None else slot
        try:
            res, err = server.complete(prompt, output or plan.output, lanes.extra(plan.extra, slot)), None
        except InputError:  # refused (no key, or a wrong one): nothing more can be timed
            stop.set()
            raise
        except Exception as exc:  # recorded, never lost
            res, err = {}, exc
        if res and res["chunks"] < res["output_tokens"]:
            # the server held text back (an incomplete UTF-8 sequence): the stream does not show
            # when tokens came, so no TTFT or TPOT is claimed for this request
            res["ttft"] = None
        rec = EngineRecord(
            **base, start=t0, latency=res.get("end", time.time() - t0), concurrency=level, mode=mode,
            ok=err is None, error=None if err is None else f"{type(err).__name__}: {err}"[:300],
            sandbox=idx, prompt_length=length, slot=slot, reference=block is not None, block=block,
            prompt_tokens=res.get("prompt_tokens") or (len(prompt) if err is None else None),
            output_tokens=res.get("output_tokens"), cached_tokens=res.get("cached_tokens"),
            ttft=res.get("ttft"), chunks=res.get("chunks"),
            tpot=(res["end"] - res["ttft"]) / (res["output_tokens"] - 1)
            if res.get("ttft") is not None and res["output_tokens"] > 1 else None,
        )  # fmt: skip
        writer.write(rec)
        if on_record:
            on_record(rec)

    def decode_runs(level: int, context: int) -> None:
        """``level`` requests started together (request ``k`` on slot ``k`` if pinning), each
        decoding alone after a prefill of a few tokens: a short prompt, or a prompt the server
        was given once before (its cache holds it) and a few new tokens."""
        lanes, slots = Lanes(plan.pin_slots), list(range(level)) if plan.pin_slots else [None] * level
        prompts = [text(context, rng) for _ in range(level)]
        if context > SHORT_DECODE:
            with ThreadPoolExecutor(level) as pool:
                list(pool.map(lambda p, k: _quiet(server.complete, p, 1, lanes.extra(plan.extra, k)),
                              prompts, slots))  # fmt: skip
        for _ in range(plan.decode_rounds):
            new = [text(8, rng) if context > SHORT_DECODE else "" for _ in range(level)]
            with ThreadPoolExecutor(level) as pool:
                futures = [pool.submit(one, level, k, prompts[k] + new[k], "decode", context, lanes,
                                       plan.decode_output, slots[k]) for k in range(level)]  # fmt: skip
                for f in futures:
                    f.result()

    def reference(block: int) -> None:
        """A reference block: a few plain requests at level 1 and a fill of the top level."""
        for level in dict.fromkeys((plan.levels[0], max(plan.levels))):
            n = plan.reference if level == plan.levels[0] else max(plan.reference, level)
            lanes, length = Lanes(plan.pin_slots), plan.prompts[0]
            with ThreadPoolExecutor(level) as pool:
                futures = [pool.submit(one, level, k, text(length, rng), "plain", length, lanes, block=block)
                           for k in range(n)]  # fmt: skip
                for f in futures:
                    f.result()

    half = len(plan.levels) // 2 if len(plan.levels) > 1 else None
    try:
        for k, level in enumerate(plan.levels):
            if plan.reference and k in (0, half):
                reference(0 if k == 0 else 1)
            jobs = [(p, i) for i in range(plan.count(level)) for p in plan.prompts]
            rng.shuffle(jobs)
            prompts = [(text(p, rng), p) for p, _ in jobs]
            lanes = Lanes(plan.pin_slots)
            with ThreadPoolExecutor(level) as pool:
                futures = [
                    pool.submit(one, level, k, text_, "plain", p, lanes)
                    for k, (text_, p) in enumerate(prompts)
                ]
                try:
                    for f in futures:
                        f.result()
                except BaseException:
                    stop.set()
                    raise
            for context in plan.decode_contexts if plan.decode_output else ():
                decode_runs(level, context)
        if plan.shared_prefix:  # pairs, one after the other: the second finds the prefix cached
            lanes = Lanes(plan.pin_slots)
            for a, size in enumerate(plan.appends):
                for k in range(plan.pairs):
                    prefix, idx = text(plan.shared_prefix, rng), 2 * (a * plan.pairs + k)
                    for j in range(2):
                        length = plan.shared_prefix + size
                        one(1, idx + j, prefix + text(size, rng), "shared_prefix", length, lanes)
        if plan.reference:
            reference(2 if half else 1)
    finally:
        stop.set()
        writer.close()
    return run_id
