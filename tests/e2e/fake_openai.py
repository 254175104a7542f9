"""A scripted OpenAI-compatible chat server over real HTTP: the project's only test double.

POST /v1/chat/completions answers a conversation in two steps, like a model with one tool:
1. no tool result yet: a `run_python` tool call whose code reads /work/sales.csv with pandas,
   sums revenue per month, plots /work/chart.png and prints `GREW_MOST <month> <amount>`;
2. after a tool result: a text answer naming the month the tool printed.
Every request body is recorded in `requests`. Also here: the scenario's data (`sales_csv`,
`grew_most`) and `png_size`, which checks a PNG."""

import collections
import json
import random
import re
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANALYSIS_CODE = '''\
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

df = pd.read_csv("/work/sales.csv", parse_dates=["date"])
df["revenue"] = df["units"] * df["unit_price"]
monthly = df.groupby(df["date"].dt.to_period("M"))["revenue"].sum()
growth = monthly.diff()
best = growth.idxmax()
ax = monthly.plot(kind="bar", title="Revenue per month")
ax.set_ylabel("revenue")
plt.tight_layout()
plt.savefig("/work/chart.png")
print(monthly.round(2).to_string())
print(f"GREW_MOST {best} {growth.max():.2f}")
'''


def sales_csv(seed=3):
    """A year of daily sales (date,product,units,unit_price) as bytes; July jumps."""
    rng = random.Random(seed)
    prices = {"widget": 4.5, "gadget": 12.0, "gizmo": 30.0}
    lines = ["date,product,units,unit_price"]
    days = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    for month, ndays in enumerate(days, start=1):
        boost = 1.6 if month == 7 else 1.0 + month * 0.02
        for day in range(1, ndays + 1):
            for product, price in prices.items():
                units = int(rng.randint(5, 15) * boost)
                lines.append(f"2025-{month:02d}-{day:02d},{product},{units},{price}")
    return ("\n".join(lines) + "\n").encode()


def grew_most(csv_bytes):
    """The "YYYY-MM" whose revenue grew most over the month before, computed with the stdlib."""
    revenue = collections.OrderedDict()
    for line in csv_bytes.decode().splitlines()[1:]:
        date, _, units, price = line.split(",")
        revenue[date[:7]] = revenue.get(date[:7], 0.0) + int(units) * float(price)
    months = sorted(revenue)
    return max(months[1:], key=lambda m: revenue[m] - revenue[months[months.index(m) - 1]])


def png_size(data):
    """(width, height) of a PNG after checking its signature and every chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"not a PNG: {data[:16]!r}"
    pos, width, height, seen = 8, 0, 0, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + chunk) == crc, f"bad CRC in chunk {kind!r}"
        if kind == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        seen.append(kind)
        pos += 12 + length
        if kind == b"IEND":
            break
    assert seen[0] == b"IHDR" and seen[-1] == b"IEND" and b"IDAT" in seen, f"chunks {seen}"
    return width, height


class FakeOpenAI:
    """Start with `with FakeOpenAI() as fake:`; `fake.base_url` ends in /v1.

    With `loop=True` it answers every request with another tool call (to test step caps)."""

    def __init__(self, code=ANALYSIS_CODE, loop=False):
        self.code = code
        self.loop = loop
        self.requests = []  # (headers with lowercase names, parsed body)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._calls = 0

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def tool_messages(self):
        """Every tool message the client sent, in order (duplicates across requests removed)."""
        seen, out = set(), []
        for _, body in self.requests:
            for m in body.get("messages", []):
                if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id") not in seen:
                    seen.add(m.get("tool_call_id"))
                    out.append(m)
        return out

    def reply(self, body):
        """The scripted assistant message for a request body."""
        messages = body.get("messages") or []
        tools = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        last = messages[-1] if messages else {}
        if last.get("role") != "tool" or self.loop:
            if "run_python" not in tools:
                return {"role": "assistant", "content": "I need the run_python tool."}, "stop"
            with self._lock:
                self._calls += 1
                call_id = f"call_{self._calls}"
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "run_python", "arguments": json.dumps({"code": self.code})},
            }]}, "tool_calls"
        try:
            result = json.loads(last.get("content") or "")
        except ValueError:
            result = {}
        m = re.search(r"GREW_MOST (\S+) (\S+)", result.get("stdout") or "")
        if m:
            text = f"Revenue grew the most in {m.group(1)} (+{m.group(2)}). The chart is /work/chart.png."
        else:
            text = f"The analysis failed: {str(result.get('stderr'))[-500:]}"
        return {"role": "assistant", "content": text}, "stop"


def _handler(fake):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(400, {"error": {"message": "invalid JSON"}})
            with fake._lock:
                fake.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
            message, finish = fake.reply(body)
            self._send(200, {
                "id": f"chatcmpl-{len(fake.requests)}", "object": "chat.completion",
                "created": int(time.time()), "model": body.get("model", "fake"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish,
                             "logprobs": None}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            })

        def do_GET(self):
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    return Handler
