"""Reading the daemon's processes from the host, for the tests that check what each one holds:
its cpuos-netd, and whether a process's memory holds some bytes."""

import os


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def netd_of(pid):
    """The daemon's cpuos-netd: its child whose command line is "cpuos-netd --netd"."""
    found = [int(p) for p in os.listdir("/proc") if p.isdigit()
             and status(p).get("PPid") == str(pid)
             and open(f"/proc/{p}/cmdline", "rb").read() == b"cpuos-netd\0--netd\0"]
    assert len(found) == 1, f"cpuos-netd of {pid}: {found}"
    return found[0]


def memory_has(pid, needles):
    """Which of needles (bytes) are in process pid's memory: every readable private mapping
    of at most 1 GiB (ASan's shadow is larger, and never holds data), read through
    /proc/PID/mem."""
    found = set()
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            f = line.split()
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if f[1][0] != "r" or hi - lo > 1 << 30 or (len(f) > 5 and f[5] in ("[vvar]", "[vsyscall]")):
                continue
            keep = max(len(n) for n in needles)
            tail = b""
            for at in range(lo, hi, 1 << 20):
                try:
                    mem.seek(at)
                    chunk = tail + mem.read(min(1 << 20, hi - at))
                except OSError:
                    tail = b""
                    continue
                found.update(n for n in needles if n in chunk)
                tail = chunk[-keep:]
    return found
