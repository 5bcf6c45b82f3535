"""Open a directory beneath a held directory descriptor, never following a symlink.

``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` does it in one
call where the kernel has it (Linux 5.6+, called through ``syscall(2)``: the
number is 437 on x86_64 and aarch64); elsewhere, and to name the component
that refused, the path is walked one component at a time with ``O_NOFOLLOW``
from the held descriptor. Either way nothing is resolved by name from ``/``
or the working directory, so a directory swapped for a link above or below
the held one cannot redirect the open.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import sys
from collections.abc import Callable

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@functools.cache
def _syscall() -> Callable[..., int] | None:
    """libc's ``syscall``, when this is a 64-bit Linux Python on an architecture whose number is known."""
    if sys.platform != "linux" or sys.maxsize <= 2**32 or platform.machine() not in _SYS_OPENAT2:
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_long
    return call


def _openat2(dir_fd: int, relpath: str, flags: int) -> int:
    """Only called once ``_syscall`` gave a callable (``has_openat2``)."""
    call = _syscall()
    assert call is not None
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    fd = call(
        ctypes.c_long(_SYS_OPENAT2[platform.machine()]),
        ctypes.c_int(dir_fd),
        os.fsencode(relpath),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), relpath)
    return int(fd)


@functools.cache
def has_openat2() -> bool:
    """Asked once per process: ENOSYS (an old kernel), EPERM or EINVAL (a seccomp
    filter, an old ABI) mean the walk does all the work."""
    if _syscall() is None:
        return False
    root = os.open("/", DIR_FLAGS)
    try:
        os.close(_openat2(root, ".", DIR_FLAGS))
    except OSError:
        return False
    finally:
        os.close(root)
    return True


def open_dir(dir_fd: int, parts: list[str]) -> int:
    """The directory ``parts`` beneath ``dir_fd``, no symlink followed: one
    openat2 call where the kernel has it, else (and on any refusal, so that
    the error names the component) one ``O_NOFOLLOW`` open per component.
    Raises FileNotFoundError, or a WalkError naming the component that refused."""
    if not parts:
        return os.dup(dir_fd)
    if has_openat2():
        try:
            return _openat2(dir_fd, "/".join(parts), DIR_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise FileNotFoundError(exc.errno, exc.strerror, "/".join(parts)) from None
            # ELOOP, ENOTDIR, EXDEV, EAGAIN...: the walk refuses too, and says at which component
    return _walk(dir_fd, parts)


class WalkError(OSError):
    """A component of the walk refused: ``depth`` is its index."""

    def __init__(self, exc: OSError, depth: int) -> None:
        super().__init__(exc.errno, exc.strerror)
        self.depth = depth


def _walk(dir_fd: int, parts: list[str]) -> int:
    """One ``O_NOFOLLOW`` open per component from ``dir_fd``; FileNotFoundError or WalkError."""
    fd = dir_fd
    try:
        for depth, part in enumerate(parts):
            try:
                inner = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    raise FileNotFoundError(exc.errno, exc.strerror, part) from None
                raise WalkError(exc, depth) from None
            if fd != dir_fd:
                os.close(fd)
            fd = inner
    except BaseException:
        if fd != dir_fd:
            os.close(fd)
        raise
    return fd
