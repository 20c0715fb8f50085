"""numpy's float32 standard normals (``Generator.standard_normal(size, dtype=np.float32)`` on its
default bit generator, PCG64), to the bit and about three times as fast, compiled with numba.

numpy draws each value through two calls it cannot inline (the ziggurat's, and the bit
generator's through a pointer); here the PCG64 step (a 128-bit multiply-add, emitted as LLVM's
``i128``) and the float32 ziggurat (numba's copy of numpy's tables) are one loop. The generator's
state is read before and written back after, so the draws that follow are the ones numpy would
make (:func:`.base.float32_normals` leaves a generator of another kind to numpy)."""

from __future__ import annotations

from functools import cache

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic
from numba.np.random._constants import fi_float, ki_float, wi_float, ziggurat_nor_inv_r_f, ziggurat_nor_r_f

_MULT = 0x2360ED051FC65DA44385DF649FCCF645  # PCG64's 128-bit multiplier (numpy's pcg64.h)
_U64 = (1 << 64) - 1
_F24 = np.float32(1.0 / 16777216.0)


@intrinsic
def _step(typingctx, hi, lo, inc_hi, inc_lo):
    """The LCG's step ``state * MULT + inc`` on 128 bits: the new state's high and low words."""
    sig = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i128, i64 = ir.IntType(128), ir.IntType(64)

        def wide(high, low):
            up = builder.shl(builder.zext(high, i128), ir.Constant(i128, 64))
            return builder.or_(up, builder.zext(low, i128))

        s = builder.add(builder.mul(wide(args[0], args[1]), ir.Constant(i128, _MULT)), wide(args[2], args[3]))
        words = (builder.trunc(builder.lshr(s, ir.Constant(i128, 64)), i64), builder.trunc(s, i64))
        return context.make_tuple(builder, signature.return_type, words)

    return sig, codegen


@njit(cache=True, inline="always")
def _output(hi, lo):
    """PCG's XSL-RR output of a state: the xor of its halves rotated by its top 6 bits."""
    x = hi ^ lo
    r = hi >> np.uint64(58)
    return (x >> r) | (x << ((np.uint64(64) - r) & np.uint64(63)))


@njit(cache=True, inline="always")
def _next32(hi, lo, ihi, ilo, has, held):
    """numpy's next_uint32 on PCG64: the upper half of the last 64-bit output if one is held,
    else the lower half of a new one: ``(state high, low, has_uint32, uinteger, the draw)``."""
    if has:
        return hi, lo, np.uint64(0), held, held
    hi, lo = _step(hi, lo, ihi, ilo)
    v = _output(hi, lo)
    return hi, lo, np.uint64(1), v >> np.uint64(32), v & np.uint64(0xFFFFFFFF)


@njit(cache=True, inline="always")
def _float(r):
    """numpy's next_float of a 32-bit draw: its top 24 bits over 2^24."""
    return np.float32(r >> np.uint64(8)) * _F24


@njit(cache=True, nogil=True)
def _fill(out, st, scale, shift):
    """``out`` filled with standard normals from the state ``st`` (state high, low, increment
    high, low, has_uint32, uinteger), updated in place; each times ``scale`` plus ``shift``, in
    float32 (numpy's ``x *= scale; x += shift`` on a float32 array; 1 and -0.0 change nothing)."""
    hi, lo, ihi, ilo, has, held = st[0], st[1], st[2], st[3], st[4], st[5]
    i = 0
    while i < out.size:
        hi, lo, has, held, r = _next32(hi, lo, ihi, ilo, has, held)
        idx = r & np.uint64(0xFF)
        rabs = (r >> np.uint64(9)) & np.uint64(0x7FFFFF)
        x = np.float32(rabs) * wi_float[idx]
        if (r >> np.uint64(8)) & np.uint64(1):
            x = -x
        if rabs < ki_float[idx]:
            out[i] = x * scale + shift
            i += 1
            continue
        # the ziggurat's rare paths: uniforms drawn in turn from the same state
        if idx == 0:
            while True:
                hi, lo, has, held, r1 = _next32(hi, lo, ihi, ilo, has, held)
                hi, lo, has, held, r2 = _next32(hi, lo, ihi, ilo, has, held)
                xx = -ziggurat_nor_inv_r_f * np.log1p(-_float(r1))
                yy = -np.log1p(-_float(r2))
                if yy + yy > xx * xx:
                    t = ziggurat_nor_r_f + xx
                    t = -t if (rabs >> np.uint64(8)) & np.uint64(1) else t
                    out[i] = t * scale + shift
                    i += 1
                    break
        else:
            hi, lo, has, held, r1 = _next32(hi, lo, ihi, ilo, has, held)
            y = (fi_float[idx - 1] - fi_float[idx]) * _float(r1) + fi_float[idx]
            xd = np.float64(x)
            if np.float64(y) < np.exp(-0.5 * xd * xd):
                out[i] = x * scale + shift
                i += 1
    st[0], st[1], st[4], st[5] = hi, lo, has, held


def standard_normal_f32(rng: np.random.Generator, size, scale: float | None = None, shift: float = 0.0):
    """``rng.standard_normal(size, dtype=np.float32)``, the same values and the same state after;
    with ``scale``, each value times ``scale`` plus ``shift`` as numpy computes them in place on a
    float32 array (``x *= scale; x += shift``)."""
    bg = rng.bit_generator  # a PCG64 (:func:`.base.float32_normals` leaves any other to numpy)
    with bg.lock:  # as numpy holds it while it draws
        s = bg.state
        pcg = s["state"]
        words = (pcg["state"] >> 64, pcg["state"] & _U64, pcg["inc"] >> 64, pcg["inc"] & _U64)
        st = np.array([*words, s["has_uint32"], s["uinteger"]], dtype=np.uint64)
        out = np.empty(size, dtype=np.float32)
        a, b = (1.0, -0.0) if scale is None else (scale, shift)  # x * 1 + -0.0 is x, to the bit
        _fill(out.reshape(-1), st, np.float32(a), np.float32(b))
        s["state"]["state"] = (int(st[0]) << 64) | int(st[1])
        s["has_uint32"], s["uinteger"] = int(st[4]), int(st[5])
        bg.state = s
    return out


CHECKED = 300_000  # draws compared with numpy's: about 80 reach the ziggurat's tail


@cache
def agrees_with_numpy() -> bool:
    """Whether this numpy draws as this module does (its algorithm, and its math library's
    ``log1pf`` and ``exp`` against the ones numba calls): checked once a process, on a fixed seed."""
    a, b = np.random.default_rng(20261208), np.random.default_rng(20261208)
    want, got = a.standard_normal(CHECKED, dtype=np.float32), standard_normal_f32(b, CHECKED)
    same = np.array_equal(want.view(np.uint32), got.view(np.uint32))
    return same and a.bit_generator.state == b.bit_generator.state
