#!/usr/bin/env python3
"""A hostile guest for cpuosd: started by the daemon in QEMU's place (cpuosd --qemu THIS).

It serves the three sockets QEMU would (QMP, console, agent) from the paths in its command line and
speaks the real agent protocol (docs/agent-protocol.md) over the real socket, as a guest that has
replaced cpuos-agent would. Each exec's shell command picks a misbehaviour:

  echo ...          answer like the real agent: output "ok\\n", exit 0
  hostile:flood     ignore the credit window: 32 MiB of stdout at once, then exit 0
  hostile:tiny      200000 one-byte stdout frames as fast as the credit allows
  hostile:noproc    background start answered without A_PROC, attach answered without A_PROC
  hostile:garbage   a frame with reserved flags (the host must drop and reconnect)
  hostile:silent    never answer this request
  hostile:console   write 64 MiB to the serial console
A listing answers 250000 entries, ignoring the 100000 cap; stat answers never.
"""

import os
import re
import select
import socket
import struct
import sys
import threading

HDR = struct.Struct("<IHHI")
P_HELLO, P_PING, P_EXEC, P_ATTACH, P_WAIT, P_SIGNAL, P_PS = 1, 2, 3, 4, 5, 6, 7
P_STAT, P_LIST, P_SETTIME, P_POWEROFF, P_CANCEL, P_TRUST = 10, 11, 15, 17, 18, 28
P_DATA, P_CREDIT = 32, 33
P_OK, P_ERROR, P_STARTED, P_STDOUT, P_EXIT, P_ENTRY = 64, 65, 66, 67, 69, 70
A_VERSION, A_AGENT, A_SHELL, A_BACKGROUND, A_PROC, A_PID = 1, 2, 4, 10, 11, 12
A_PATH, A_MODE, A_SIZE, A_ERRNO, A_MESSAGE, A_EXIT_CODE, A_CREDIT, A_WINDOW = 14, 16, 26, 21, 22, 23, 40, 39


def attr(tag, value):
    if isinstance(value, int):
        value = struct.pack("<I", value)
    elif isinstance(value, str):
        value = value.encode()
    return struct.pack("<HI", tag, len(value)) + value


def frame(ftype, fid, payload=b"", flags=0):
    return HDR.pack(len(payload), ftype, flags, fid) + payload


def attrs(payload):
    out, off = {}, 0
    while off + 6 <= len(payload):
        tag, n = struct.unpack_from("<HI", payload, off)
        out.setdefault(tag, payload[off + 6:off + 6 + n])
        off += 6 + n
    return out


def u32(a, tag, default=0):
    v = a.get(tag)
    return struct.unpack("<I", v)[0] if v and len(v) == 4 else default


class Agent:
    def __init__(self, sock, console):
        self.sock, self.console, self.credit = sock, console, {}
        self.lock = threading.Lock()

    def send(self, data):
        with self.lock:
            self.sock.sendall(data)

    def serve(self):
        buf = b""
        while True:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return
            buf += chunk
            while len(buf) >= HDR.size:
                n, ftype, flags, fid = HDR.unpack_from(buf)
                if len(buf) < HDR.size + n:
                    break
                payload, buf = buf[HDR.size:HDR.size + n], buf[HDR.size + n:]
                self.request(ftype, fid, payload)

    def output(self, fid, data):
        self.send(frame(P_STDOUT, fid, data))

    def request(self, ftype, fid, payload):
        a = attrs(payload) if ftype not in (P_DATA,) else {}
        if ftype == P_HELLO:
            self.send(frame(P_OK, fid, attr(A_VERSION, 2) + attr(A_AGENT, "hostile 0")))
        elif ftype in (P_PING, P_SETTIME, P_SIGNAL, P_CANCEL, P_TRUST):
            self.send(frame(P_OK, fid))
        elif ftype == P_CREDIT:
            self.credit[fid] = self.credit.get(fid, 0) + u32(a, A_CREDIT)
        elif ftype == P_EXEC:
            self.exec(fid, a.get(A_SHELL, b"").decode(errors="replace"), u32(a, A_BACKGROUND))
        elif ftype == P_ATTACH:
            # Started without A_PROC, then the end soon after.
            self.send(frame(P_STARTED, fid))
            threading.Timer(0.05, self.send, [frame(P_ERROR, fid, attr(A_ERRNO, 3) + attr(A_MESSAGE, "gone"))]).start()
        elif ftype == P_LIST:
            threading.Thread(target=self.big_listing, args=(fid,), daemon=True).start()
        elif ftype == P_STAT:
            pass  # never answered
        elif ftype == P_PS:
            self.send(frame(P_OK, fid))
        elif ftype == P_POWEROFF:
            self.send(frame(P_OK, fid))
            os._exit(0)
        elif ftype != P_DATA:
            self.send(frame(P_ERROR, fid, attr(A_ERRNO, 38) + attr(A_MESSAGE, "not here")))

    def big_listing(self, fid):
        for i in range(250000):
            self.send(frame(P_ENTRY, fid, attr(A_PATH, f"f{i}") + attr(A_MODE, 0o100644) +
                            struct.pack("<HI", A_SIZE, 8) + struct.pack("<Q", 1)))
        self.send(frame(P_OK, fid))

    def exec(self, fid, cmd, background):
        started = attr(A_PROC, 7) + attr(A_PID, 700)
        if cmd == "hostile:noproc":
            self.send(frame(P_OK if background else P_STARTED, fid))
            return
        if cmd == "hostile:silent":
            return
        if cmd == "hostile:garbage":
            self.send(HDR.pack(0, P_STDOUT, 0x8000, fid))
            return
        if background:
            self.send(frame(P_OK, fid, started))
            return
        self.send(frame(P_STARTED, fid, started))
        if cmd == "hostile:flood":
            threading.Thread(target=self.flood, args=(fid,), daemon=True).start()
        elif cmd == "hostile:tiny":
            threading.Thread(target=self.tiny, args=(fid,), daemon=True).start()
        elif cmd == "hostile:console":
            threading.Thread(target=self.console_flood, args=(fid,), daemon=True).start()
        else:
            self.output(fid, b"ok\n")
            self.send(frame(P_EXIT, fid, attr(A_EXIT_CODE, 0)))

    def flood(self, fid):
        try:
            block = b"x" * 65536
            for _ in range(512):
                self.output(fid, block)
            self.send(frame(P_EXIT, fid, attr(A_EXIT_CODE, 0)))
        except OSError:
            pass

    def tiny(self, fid):
        # Within the credit the host gives (each frame costs 64 bytes).
        credit = 1 << 20
        self.credit[fid] = 0
        try:
            for _ in range(200000):
                while credit <= 0:
                    threading.Event().wait(0.001)
                    credit += self.credit.pop(fid, 0)
                self.output(fid, b"y")
                credit -= 64
            self.send(frame(P_EXIT, fid, attr(A_EXIT_CODE, 0)))
        except OSError:
            pass

    def console_flood(self, fid):
        try:
            for _ in range(1024):
                self.console.sendall(b"c" * 65536)
            self.output(fid, b"ok\n")
            self.send(frame(P_EXIT, fid, attr(A_EXIT_CODE, 0)))
        except OSError:
            pass


def listen(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    return s


def qmp(conn):
    conn.sendall(b'{"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 0}}, "capabilities": []}}\n')
    buf = b""
    while True:
        chunk = conn.recv(4096)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            m = re.search(rb'"id":\s*(\d+)', line)
            ident = m.group(1).decode() if m else "0"
            ret = "{}"
            if b'"query-version"' in line:  # what a snapshot records
                ret = '{"qemu": {"major": 7, "minor": 2, "micro": 0}, "package": "hostile"}'
            conn.sendall(('{"return": %s, "id": %s}\n' % (ret, ident)).encode())
            if b'"quit"' in line:
                os._exit(0)


def main():
    paths = dict(re.findall(r"id=(qmp|con|agent),path=([^,]+)", " ".join(sys.argv[1:])))
    servers = {name: listen(path) for name, path in paths.items()}
    console = None
    while True:
        ready, _, _ = select.select(list(servers.values()), [], [])
        for s in ready:
            conn, _ = s.accept()
            if s is servers["qmp"]:
                threading.Thread(target=qmp, args=(conn,), daemon=True).start()
            elif s is servers["con"]:
                console = conn
            else:
                # One host at a time, as QEMU's chardev: a reconnect replaces it.
                threading.Thread(target=Agent(conn, console).serve, daemon=True).start()


if __name__ == "__main__":
    main()
