"""Child side of the isolation boundary for code taken from an inspected tree.

Stdlib only, Python 3.8 syntax: the same text runs on remote hosts with
whatever python3 they have. ``lockdown(limits)`` is called once the child has
read its whole request and before any tree code is compiled. On Linux
(x86_64, aarch64) it sets, in this order:

1. ``no_new_privs`` (prctl), which lets an unprivileged process install a filter;
2. resource limits that hold for root: address space, CPU seconds, no file
   growth (RLIMIT_FSIZE 0), few descriptors, no core dumps; descriptors above
   stderr are closed;
3. new user and network namespaces when the kernel allows them (an extra
   layer: its failure is not an error);
4. a seccomp-BPF allow-list: a computing interpreter needs only memory,
   signals, clocks, futexes and I/O on the descriptors it already has. Any
   other system call (open, stat, unlink, mkdir, ...) fails with EPERM, which
   CPython turns into an exception. The calls only an escape makes (new
   processes, exec, sockets, signals to other processes, ptrace) kill the
   process instead, so no ``except`` in the tree code can hide the attempt
   and every answer of the run is unknown; so does a call from another ABI
   (i386, x32).

A mandatory step that fails raises ``LockdownError``: the parent then knows
the boundary is not in force.
"""

import ctypes
import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations are strings: this runs on Pythons whose typing lacks these
    from typing import TypedDict

    class Arch(TypedDict):
        audit_arch: int
        syscalls: dict[str, int]

    Instruction = tuple[int, int, int, int]  # (code, jt, jf, k)

DEFAULT_LIMITS = {"memory_bytes": 512 << 20, "cpu_s": 20, "open_files": 8}

PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

# Classic BPF opcodes (linux/filter.h) and seccomp actions (linux/seccomp.h).
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_RET_K = 0x06
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
# Offsets in struct seccomp_data.
DATA_NR = 0
DATA_ARCH = 4
X32_SYSCALL_BIT = 0x40000000

# What CPython needs once it has started and read its input, found with strace
# on probe runs (including timeouts, MemoryError and large answers): memory,
# the SIGALRM call timer and its handler, clocks, futexes, I/O on the
# descriptors it already holds, and exiting.
ALLOWED = (
    "read",
    "write",
    "close",
    "mmap",
    "munmap",
    "mprotect",
    "mremap",
    "brk",
    "madvise",
    "futex",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "setitimer",
    "clock_gettime",
    "exit",
    "exit_group",
)

# Only an escape makes these: they end the process (where the architecture has them).
FORBIDDEN = (
    "fork",
    "vfork",
    "clone",
    "clone3",
    "execve",
    "execveat",
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    "sendto",
    "sendmsg",
    "sendmmsg",
    "kill",
    "tkill",
    "tgkill",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
)

# Numbers by architecture (asm/unistd_64.h; asm-generic/unistd.h for aarch64).
ARCHES: "dict[str, Arch]" = {
    "x86_64": {
        "audit_arch": 0xC000003E,
        "syscalls": {
            "read": 0,
            "write": 1,
            "close": 3,
            "mmap": 9,
            "mprotect": 10,
            "munmap": 11,
            "brk": 12,
            "rt_sigaction": 13,
            "rt_sigprocmask": 14,
            "rt_sigreturn": 15,
            "mremap": 25,
            "madvise": 28,
            "setitimer": 38,
            "exit": 60,
            "futex": 202,
            "clock_gettime": 228,
            "exit_group": 231,
            "socket": 41,
            "connect": 42,
            "accept": 43,
            "sendto": 44,
            "sendmsg": 46,
            "bind": 49,
            "listen": 50,
            "socketpair": 53,
            "clone": 56,
            "fork": 57,
            "vfork": 58,
            "execve": 59,
            "kill": 62,
            "ptrace": 101,
            "tkill": 200,
            "tgkill": 234,
            "accept4": 288,
            "sendmmsg": 307,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "execveat": 322,
            "clone3": 435,
        },
    },
    "aarch64": {
        "audit_arch": 0xC00000B7,
        "syscalls": {
            "close": 57,
            "read": 63,
            "write": 64,
            "exit": 93,
            "exit_group": 94,
            "futex": 98,
            "setitimer": 103,
            "clock_gettime": 113,
            "rt_sigaction": 134,
            "rt_sigprocmask": 135,
            "rt_sigreturn": 139,
            "brk": 214,
            "munmap": 215,
            "mremap": 216,
            "mmap": 222,
            "mprotect": 226,
            "madvise": 233,
            "ptrace": 117,
            "kill": 129,
            "tkill": 130,
            "tgkill": 131,
            "socket": 198,
            "socketpair": 199,
            "bind": 200,
            "listen": 201,
            "accept": 202,
            "connect": 203,
            "sendto": 206,
            "sendmsg": 211,
            "clone": 220,
            "execve": 221,
            "accept4": 242,
            "sendmmsg": 269,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "execveat": 281,
            "clone3": 435,
        },
    },
}


class LockdownError(Exception):
    """A mandatory step failed: the isolation boundary is NOT in force."""


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def arch() -> "Arch":
    """The entry of ARCHES for this machine; raises LockdownError elsewhere."""
    if not sys.platform.startswith("linux"):
        raise LockdownError("seccomp needs Linux; this is %s" % sys.platform)
    machine = os.uname().machine
    if machine not in ARCHES or ctypes.sizeof(ctypes.c_void_p) != 8:
        raise LockdownError(
            "no system call table for a %d-bit python on %s" % (8 * ctypes.sizeof(ctypes.c_void_p), machine)
        )
    return ARCHES[machine]


def seccomp_program(entry: "Arch") -> "list[Instruction]":
    """The filter as (code, jt, jf, k) tuples: check the ABI, allow ALLOWED,
    kill on FORBIDDEN, EPERM for the rest."""
    table = entry["syscalls"]
    allowed = [table[name] for name in ALLOWED]
    forbidden = [table[name] for name in FORBIDDEN if name in table]
    program = [
        (BPF_LD_W_ABS, 0, 0, DATA_ARCH),
        (BPF_JEQ_K, 1, 0, entry["audit_arch"]),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (BPF_LD_W_ABS, 0, 0, DATA_NR),
    ]
    if entry["audit_arch"] == ARCHES["x86_64"]["audit_arch"]:
        # x32 calls share the x86_64 audit arch: they carry this bit instead.
        program += [(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    # After the comparisons: [EPERM, KILL, ALLOW]; jt counts the instructions skipped.
    count = len(allowed) + len(forbidden)
    for index, number in enumerate(allowed + forbidden):
        program.append((BPF_JEQ_K, count - index + (1 if index < len(allowed) else 0), 0, number))
    program += [
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    return program


def _check(result: int, what: str) -> None:
    if result != 0:
        raise LockdownError("%s failed: %s" % (what, os.strerror(ctypes.get_errno())))


def _set_limits(limits: "dict[str, int]") -> None:
    import resource  # POSIX only: imported once arch() has said Linux

    memory = int(limits["memory_bytes"])
    cpu = int(limits["cpu_s"])
    for name, soft, hard in (
        ("RLIMIT_AS", memory, memory),
        ("RLIMIT_CPU", cpu, cpu + 1),  # SIGXCPU first, SIGKILL a second later
        ("RLIMIT_FSIZE", 0, 0),
        ("RLIMIT_NOFILE", int(limits["open_files"]), int(limits["open_files"])),
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_NPROC", 0, 0),  # does not bind root; seccomp refuses fork anyway
    ):
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError) as exc:
            raise LockdownError("setrlimit(%s) failed: %s" % (name, exc)) from None


def lockdown(limits: "dict[str, int] | None" = None) -> "tuple[str, ...]":
    """Put this process behind the boundary; returns the layers in force.

    ``limits`` overrides DEFAULT_LIMITS (memory_bytes, cpu_s, open_files)."""
    settings = dict(DEFAULT_LIMITS)
    settings.update(limits or {})
    entry = arch()
    libc = ctypes.CDLL(None, use_errno=True)
    _check(
        libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)),
        "prctl(PR_SET_NO_NEW_PRIVS)",
    )
    layers = ["no_new_privs"]
    os.closerange(3, 1 << 16)  # the parent passes none; a remote shell might
    _set_limits(settings)
    layers.append("rlimits")
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        layers.append("user+net namespaces")
    program = seccomp_program(entry)
    filters = (_SockFilter * len(program))(*[_SockFilter(*instruction) for instruction in program])
    fprog = _SockFprog(len(program), filters)
    _check(
        libc.prctl(
            PR_SET_SECCOMP,
            ctypes.c_ulong(SECCOMP_MODE_FILTER),
            ctypes.byref(fprog),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        ),
        "prctl(PR_SET_SECCOMP)",
    )
    layers.append("seccomp")
    return tuple(layers)
