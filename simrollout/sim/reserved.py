"""Per-trajectory arrays that are reserved address space, resident only where they are in use.

A streamed cell (:mod:`.compiled_fold`) indexes its trajectories' inputs and rows by trajectory,
as its whole run long, but reads and writes only the rows of the chunks in flight. Its arrays are
anonymous memory maps: a page becomes resident when first written, and :func:`release` hands the
pages of finished rows back to the operating system (``madvise(MADV_DONTNEED)``), so the memory
held is what is in flight, whatever the number of trajectories. Where ``madvise`` is missing
(not Linux), or for small arrays, they are plain ``np.zeros`` and :func:`release` does nothing.
"""

from __future__ import annotations

import mmap
import sys

import numpy as np

_SMALL = 1 << 22  # bytes: below this an array is plain numpy
# reserve without committing swap for it (Linux's MAP_NORESERVE; Python 3.11's mmap lacks the name)
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)
_CAN = hasattr(mmap, "MADV_DONTNEED") and sys.platform.startswith("linux")


def zeros(shape: int | tuple[int, ...], dtype=np.float64) -> np.ndarray:
    """An array of zeros whose pages are reserved, not allocated, until written."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    nbytes = count * dtype.itemsize
    if nbytes < _SMALL or not _CAN:
        return np.zeros(shape, dtype)
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)
    return np.frombuffer(mm, dtype, count).reshape(shape)


def _root(a: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """The memory map under ``a`` and the byte offset of ``a``'s first element in it."""
    b = a
    while isinstance(b, np.ndarray):
        under = b.base.obj if isinstance(b.base, memoryview) else b.base
        if isinstance(under, mmap.mmap):  # b: the array made on it (np.frombuffer)
            return under, a.ctypes.data - b.ctypes.data
        b = b.base
    return None


def release(a: np.ndarray, lo: int, hi: int) -> None:
    """Hand back the pages of rows ``lo:hi`` of ``a``, whose rows before ``hi`` are all done with:
    they read as zeros if touched again. The page that ``hi`` falls in stays."""
    root = _root(a) if _CAN else None
    if root is None or hi <= lo:
        return
    mm, off = root
    row = a.strides[0] if a.ndim else a.itemsize
    start = (off + lo * row) // mmap.PAGESIZE * mmap.PAGESIZE
    end = (off + hi * row) // mmap.PAGESIZE * mmap.PAGESIZE
    if end > start:
        mm.madvise(mmap.MADV_DONTNEED, start, end - start)
