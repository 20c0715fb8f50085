"""The compiled serving pilot's state, named (:mod:`.pilot_compiled`): one tuple of arrays ``S``,
each slot and column read by name as in :mod:`.compiled_state` (numba reads these constants when it
compiles: the numba cache's folder is named by this module's source too).

The pilot's bodies at step fidelity and its serving engines run compiled; the sandbox lifecycle
around each body stays in SimPy. Requests are numbered as they are made (a retried trajectory's
new request is not its old one, which an iteration in progress may still hold)."""

from __future__ import annotations

from .compiled_heap import J_HSIZE, J_SEQ  # noqa: F401 (the heap's globals, in GI)

# ------------------------------------------------------------ the slots of S
S_GF, S_GI, S_P = 0, 1, 2  # global floats, global integers, parameters
S_HT, S_HS, S_HW, S_HK = 3, 4, 5, 6  # the event heap: time, sequence, target, kind + 16 x epoch
S_EI, S_EF = 7, 8  # an engine's integers and floats (engines x E_*)
# waiting (a ring), running, and an iteration's decodes, prefills and their chunks
S_WQ, S_RUN, S_BD, S_BA, S_BT = 9, 10, 11, 12, 13
S_LP, S_LN, S_LT = 14, 15, 16  # idle prefixes: LRU links (previous, next) and tokens (engines x trajectories)
S_HOME, S_HOMED = 17, 18  # a trajectory's home engine; the running trajectories homed on each engine
S_RI, S_RF = 19, 20  # a request's integers and times (requests x R_*)
S_TI, S_TF = 21, 22  # a body's integers and floats (trajectories x B_*)
S_SOFF, S_SCALLS, S_SAPP, S_SOUT, S_SLLM = 23, 24, 25, 26, 27  # per-step detail
S_CTOOL, S_COFF, S_PROMPT, S_SETUP, S_REWARD, S_COVER = 28, 29, 30, 31, 32, 33  # per call, per trajectory
# per contention domain, the fleet's own arrays (SimPy's lifecycle and the bodies share them): operations
# in flight, of them creates, execs and teardowns, and running bodies' expected execs
S_OPS, S_CR, S_EX, S_TD, S_XL = 34, 35, 36, 37, 38
S_KVW, S_LAT, S_TTFT, S_TPOT, S_TL = 39, 40, 41, 42, 43  # metrics: per request; the turns' log
# a training loop's bodies (.compiled_tokens; one-element arrays in a pilot): the compiled loop's own
# loop integers (the gate, the version), each trajectory's loop integers (cancelled, start version,
# turns resumed), steps generated under the start version or a newer one, each trajectory's prompt
# factor; the bodies parked at the closed gate, the request ids free for reuse, each body's worker
S_LLI, S_LTI, S_LGEN, S_LTASK, S_PARK, S_FREE, S_WORKER = 44, 45, 46, 47, 48, 49, 50
NS = 51

# ------------------------------------------------------------ global floats and integers
G_NOW, G_REPREFILL_S = 0, 1
J_BODIES, J_NREQ, J_NTL, J_NFIN, J_NTPOT, J_ERR = 3, 4, 5, 6, 7, 8
J_REQUESTS, J_QUEUED, J_EVICTED, J_COMPACTED, J_PREFILL, J_DECODE = 9, 10, 11, 12, 13, 14
J_REUSABLE, J_REUSED, J_REPREFILLED, J_ENDED = 15, 16, 17, 18
J_NPARK, J_NFREE, J_DLGEN = 19, 20, 21  # a training loop's: bodies parked at the gate; free request
# ids; the deadline waits made (each request's wait numbered, the latest one of a body its own)
NJ = 22

# ------------------------------------------------------------ parameters
P_BASE, P_PPT, P_PPA, P_PCA, P_HAS_PCA, P_BELOW, P_PD, P_PCT = 0, 1, 2, 3, 4, 5, 6, 7
P_KV, P_MAX_RUN, P_MAX_BATCH, P_OVERHEAD = 8, 9, 10, 11
P_MAX_CTX, P_MAX_TOK, P_STICKY, P_PREFIX = 12, 13, 14, 15
P_SLOPE, P_WEIGHTED, P_WC, P_WE, P_WT, P_BG, P_N = 16, 17, 18, 19, 20, 21, 22
P_LOOP = 23  # the bodies are a training loop's (.compiled_tokens): its hooks, request ids reused
NP = 24

# ------------------------------------------------------------ an engine's columns
E_STATE, E_EPOCH, E_WAKE, E_NRUN, E_QH, E_QN, E_HEAD, E_TAIL = 0, 1, 2, 3, 4, 5, 6, 7
E_ITERS, E_NB, E_NA, E_K, E_HELD, E_CACHED, E_PEAK, E_ABORTS = 8, 9, 10, 11, 12, 13, 14, 15
NEI = 16
EF_BUSY, EF_T, EF_AH, EF_AU, EF_START, EF_T0, EF_SLOPE, EF_RUN, EF_DT = 0, 1, 2, 3, 4, 5, 6, 7, 8
NEF = 10
IDLE, PREFILL, DECODE, TAIL = 0, 1, 2, 3  # what an engine is doing

# ------------------------------------------------------------ a request's columns
R_TRAJ, R_CONTEXT, R_OUTPUT, R_REUSABLE, R_FRESH, R_REUSE = 0, 1, 2, 3, 4, 5
R_PREFILL, R_DECODE, R_CTX, R_ENGINE, R_BLOCKED, R_DONE = 6, 7, 8, 9, 10, 11
R_ABORTED = 12  # interrupted at a weight sync (a training loop's at_sync: interrupt)
NRI = 13
RF_ARRIVAL, RF_ADMITTED, RF_FIRST, RF_END = 0, 1, 2, 3
NRF = 4

# ------------------------------------------------------------ a body's columns
B_EPOCH, B_PC, B_S, B_SEND, B_CALL, B_K, B_CTX, B_STEPS = 0, 1, 2, 3, 4, 5, 6, 7
B_DOM, B_FAIL, B_REQ, B_OUT, B_J, B_STATUS, B_FIRST_CALL = 8, 9, 10, 11, 12, 13, 14
B_REUSABLE, B_FRESH, B_TURN = 15, 16, 17  # the turn's request: reusable tokens, compacted, its context
B_C, B_O = 18, 19  # the request in flight: its context and output (resumed: what is left)
B_DLGEN = 20  # a training loop's body: the number of its latest deadline wait (J_DLGEN)
NBI = 21
BF_DEADLINE, BF_T0, BF_TOVER, BF_LLM, BF_OVER, BF_DL = 0, 1, 2, 3, 4, 5
NBF = 6
# where a body resumes
PC_SETUP, PC_STEP, PC_SUBMIT, PC_AWAIT, PC_CALLS = 0, 1, 2, 3, 4
PC_OVER, PC_TOOL, PC_REWARD, PC_END = 5, 6, 7, 8
PC_GATED, PC_RESUME = 9, 10  # a training loop's: a step's start past the gate; an interrupted turn's resume

# ------------------------------------------------------------ event kinds (the heap's k & 15)
# a body's: its wait ended in time, or at the deadline; its request is done; its deadline
EV_OK, EV_LATE, EV_DONE, EV_DEADLINE = 0, 1, 2, 3
EV_WAKE, EV_INTR, EV_RUNEND, EV_TAIL, EV_ITER = 4, 5, 6, 7, 8  # an engine's
# a training loop's body: its deadline reached while it awaits a request, after the instant's events
EV_DEADLINE2 = 9
