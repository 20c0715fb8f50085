"""How the compiled engine's functions are compiled (numba): :func:`compiled` is
``njit(cache=True, _nrt=False)`` compiling each function once, whatever constants its callers pass.

A call from compiled code hands numba its arguments' types, and a module's integer (or boolean)
constant is typed as its literal value: left so, a function called with ``K_TOKEN`` in one place
and ``K_NEXT`` in another is compiled once for each, the heap's push 15 times in a process (and
every one of them again in each cell process). Typing the arguments by their plain types
(``int64``, ``bool``) compiles one specialization; the constants' branches are pruned by LLVM
where the callee is inlined, as before."""

from __future__ import annotations

from numba import njit, types


def compiled(fn=None, **options):
    """``njit(cache=True, _nrt=False, **options)``, one specialization per plain argument types."""

    def wrap(f):
        d = njit(cache=True, _nrt=False, **options)(f)
        get = d.get_call_template

        def get_call_template(args, kws):
            plain = {k: types.unliteral(v) for k, v in kws.items()}
            return get(tuple(types.unliteral(a) for a in args), plain)

        d.get_call_template = get_call_template
        return d

    return wrap(fn) if fn is not None else wrap
