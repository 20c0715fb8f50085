"""The compiled engine's state, named: the loop's state ``S`` is one tuple of arrays (numba types it
once), and each of its slots is read by name, ``S[S_WF]``, never by number. The integer constants
below name the slots, the columns of the per-worker and global arrays, the states a worker's event
runs and the codes the loop returns to Python (:mod:`.compiled`, :mod:`.compiled_training`).

numba reads a module's integer globals as compile-time constants, so naming costs nothing at run
time: ``S[S_WF]`` compiles as ``S[0]`` did."""

from __future__ import annotations

from . import records as rec
from .compiled_heap import J_HSIZE, J_SEQ

# ------------------------------------------------------------ the slots of S
S_WF = 0  # a worker's floats (workers x NF; the last row is the batch's pseudo-worker)
S_WI = 1  # a worker's integers (workers x NI)
S_G = 2  # global floats (G_*)
S_GI = 3  # global integers (J_*), the heap's size and sequence among them
S_HT, S_HS, S_HW, S_HK = 4, 5, 6, 7  # the event heap: time, sequence, worker, state
S_P = 8  # parameters (P_*)
S_IN = 9  # each trajectory's inputs (trajectories x C_*, records.INPUTS)
S_SAND = 10  # sandboxes alive per host
S_BY = 11  # operations in flight: phase x domain
S_EXL = 12  # the running bodies' expected execs per domain
S_W = 13  # the phases' weights (phase x phase)
S_CURVE = 14  # the serving pilot's generation multiplier by bodies running
S_FP = 15  # each phase's contention curve parameters (compiled_ops.TABLE)
S_TAB = 16  # the measured curves' tables, end to end
S_TSZ = 17  # each phase's table size
S_QQ = 18  # the quota's queue of waiting workers (a ring)
S_OUT = 19  # each trajectory's row (records.ROW)
S_GEN = 20  # each trajectory's body: start, end, generating share
S_ARR = 21  # each trajectory's arrival (queue wait counts from it)
S_SCALE = 22  # each trajectory's serving luck
S_XS, S_YS = 23, 24  # each phase's failure rate: operations in flight, rate (tuples of arrays)
S_ON, S_OFF = 25, 26  # times bodies started, ended (the serving pilot's load curve)
S_SG, S_SNC, S_CO, S_CT = 27, 28, 29, 30  # detail pools: step LLM, step calls, call overhead, call tool
# the training loop's part (.compiled_training; one-element arrays without a loop)
S_TASK = 31  # each trajectory's prompt factor
S_LI = 32  # the loop's integers (L_*)
S_QI = 33  # the queue of group members waiting for a worker
S_IDLE = 34  # idle workers (a stack)
S_GATE = 35  # workers parked at the closed gate
S_GS, S_GF = 36, 37  # each group's integers (GS_*) and floats (GF_*)
S_TI = 38  # each trajectory's loop integers (T_*)
S_RQ = 39  # ready groups, in the order they became ready
S_DISC = 40  # discarded groups' cost by cause: worker, sandbox, LLM seconds, count
S_GENC = 41  # steps generated under the version a trajectory started in, under a newer one
S_TASKG = 42  # each group's prompt factor
S_TD = 43  # each trajectory's detail in the pools: first step, steps, first call (-1: not loaded)
NS = 44

# phases (rows of S_BY, S_FP, S_W; entries of S_XS, S_YS)
PH_CREATE, PH_EXEC, PH_TEARDOWN = 0, 1, 2

# request codes (the loop's return value); the last two are the training loop's (.compiled_training)
R_DONE, R_RETRY, R_DETAIL, R_PROGRESS, R_INPUTS, R_TIMER, R_NOTIFY = 0, 1, 2, 3, 4, 5, 6
# states of a worker (what it does when its event fires); STOP: it waits for its next event
(K_NEXT, K_START, K_ATTEMPT, K_ATTEMPT2, K_QUOTA, K_TOKEN, K_PLACE, K_CREATE_END, K_AGAIN, K_BODY,
 K_SEGSTART, K_SEG, K_SEG_END, K_LAST, K_TAIL_END, K_REWARD, K_BODY_END, K_TD, K_TD_OP_END, K_TD_END,
 K_FINISH, K_BATCH, K_BATCH_GO, K_TIMER) = range(24)  # fmt: skip
# a body on serving engines (.compiled_tokens): it starts there, it ended there
K_TBODY, K_TBODY_END = 24, 25
STOP = -1
EPOCH = 32  # a segment's end is scheduled as K_SEG_END + EPOCH x its epoch: a cut one is skipped
# a worker's floats
(F_START, F_DEADLINE, F_T0, F_LAT, F_WAITED, F_WORKER, F_SANDBOX, F_LLM, F_OVER, F_TD, F_LOST, F_BILLED,
 F_COLD, F_UC, F_UE, F_TDB, F_UT, F_BT0, F_TG, F_TO, F_TT, F_PG, F_PO, F_PT, F_SETUP, F_REWARD, F_DONE,
 F_G, F_TIME, F_O, F_SEG, F_PL, F_PE, F_XL, F_XE, F_DU, F_SG, F_SO, F_SD, F_CE, F_RG, F_RT, F_RO,
 F_LUCK, F_LLMB, F_TTAIL, F_TDLAT, F_TASK, F_SEGT0) = range(49)  # fmt: skip
NF = 49
# a worker's integers
(I_I, I_ATT, I_HOST, I_DOM, I_STATUS, I_STEPS, I_FAILS, I_FC, I_EXACT, I_PREV, I_UNITS, I_RS, I_RD, I_TDN,
 I_DET, I_DS0, I_DNS, I_DC0, I_RESUME, I_TAIL, I_HAVE_RD, I_OK, I_EPOCH, I_INSEG,
 I_VER, I_DEAD) = range(26)  # fmt: skip
NI = 26
# globals: floats, integers
G_NOW, G_TOKEN, G_TIMER, G_BOUND = 0, 1, 2, 3  # G_TIMER, G_BOUND: the training loop's
(J_NEXT, _SEQ, _HSIZE, J_AVAIL, J_ALIVE, J_PEAK, J_BODIES, J_NON, J_NOFF, J_REQ, J_REQW, J_DONE,
 J_QH, J_QL, J_ACTIVE, J_BHI, J_BNEXT, J_TOLD, J_RESUME, J_READY) = range(20)  # fmt: skip
assert (_SEQ, _HSIZE) == (J_SEQ, J_HSIZE)  # the heap's (compiled_heap)
NJ = 20
# parameters
(P_TIMEOUT, P_RETRIES, P_BACKOFF, P_RATE, P_MINBILL, P_LOADED, P_QUOTA, P_SCOPE, P_CLIENTS, P_BATCH,
 P_TIMED, P_WEIGHTS, P_N, P_C, P_LOOP, P_TOKENS) = range(16)  # fmt: skip
NP = 16
# input columns (records.INPUTS)
C_COLD, C_WARM, C_TD, C_UC, C_UE, C_UT, C_CALLS, C_LLM, C_OVER, C_TOOL, C_SETUP, C_REWARD, C_STEPS = range(13)
NC = 13
# the training loop's integers (S[S_LI]): the policy version, group size, groups running / ready /
# trained / started, trajectories started, queued, running, the queue's head and tail, idle workers,
# workers at the closed gate, ready groups the trainer waits for, the budget ran out, requests from
# Python (cut segments: 1 cancels, 2 a barrier, 4 an interrupt; open the gate; top up; set the
# timer), ready groups listed, the gate closed; sync and one_step_off: groups to start at the next
# top-up whatever the bound, the trainer woken after this instant's events scheduled before
# (SimPy's order); bodies paused by an interrupt (at_sync: interrupt)
(L_VERSION, L_G, L_LIVE, L_NREADY, L_TRAINED, L_NEXTG, L_NEXTI, L_QUEUED, L_RUNNING, L_QH, L_QT, L_NIDLE,
 L_NGATE, L_NEED, L_EXH, L_CUT, L_OPEN, L_TOPUP, L_TIMER, L_RQN, L_GATE, L_START,
 L_DEFER, L_PAUSED) = range(24)  # fmt: skip
NL = 24
# a group's integers (S[S_GS]) and floats (S[S_GF]); a trajectory's loop integers (S[S_TI])
GS_STATE, GS_LEFT, GS_MASK, GS_CAUSE = range(4)
GF_READY, GF_WORKER, GF_SANDBOX, GF_LLM, GF_N = range(5)
T_V0, T_VEND, T_STARTED, T_CANCEL, T_RESUMED = range(5)  # T_RESUMED: turns interrupted
RUNNING, READY, TRAINED, DISCARDED = range(4)  # a group's state
OK, FAILED, TIMEOUT, LOST = rec.OK, rec.FAILED, rec.TIMEOUT, rec.LOST  # a trajectory's status
CANCELLED = rec.CANCELLED
AT_RISK, STILL = 1.25, 0.01
