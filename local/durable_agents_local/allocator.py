"""Local mode's memory stays bounded under large requests: big buffers go back to the system.

glibc's ``malloc`` serves a request over ``M_MMAP_THRESHOLD`` (128 KiB) from its own mapping
and unmaps it when it is freed. But the threshold is dynamic: freeing such a mapping raises it
to that size (up to 32 MiB), and from then on buffers that large come from the heap arenas —
one per thread, up to eight per core, and the HTTP server starts a thread per request — where
freed memory stays with the process. Measured (``scripts/bench_loop.py --hostile``): 300
requests with a 200 KB body that the Api refuses grew local mode from 123 to 515 MiB, and it
kept growing with more; with the threshold fixed at 128 KiB it went back to 123 MiB after each
round (peak 150 MiB). Fixing it with ``mallopt`` also turns the dynamic adjustment off.

Other C libraries (macOS, musl) return large buffers on their own terms; nothing is changed
there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
THRESHOLD_BYTES = 128 * 1024  # glibc's default start value, kept from now on


def return_large_buffers(threshold: int = THRESHOLD_BYTES) -> bool:
    """Makes glibc give buffers of ``threshold`` bytes or more back to the system when freed.

    Returns:
        True if the allocator took the setting (glibc on Linux); False elsewhere.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # gnu_get_libc_version exists only in glibc: musl's mallopt accepts and ignores the call.
    if not hasattr(libc, "gnu_get_libc_version"):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))
