"""Seed 003's question through cpuos-gateway: the plain openai client, no tools of its own.

The gateway offers the model run_python and runs its calls in a cpuos sandbox of the
conversation's; the answer carries the code that ran and the chart. (docs/gateway.md)

    build/bin/cpuos-gateway keys create --name me                  # prints cgw_...
    UPSTREAM_API_KEY=... CPUOS_API_KEY=cpuos_... build/bin/cpuos-gateway \\
        --upstream-url https://gpuos.si/v1 --cpuos-url http://127.0.0.1:7070
    export GATEWAY_URL=http://127.0.0.1:7080/v1 GATEWAY_API_KEY=cgw_...
    export OPENAI_MODEL=qwen3-32b                                  # optional
    python3 examples/gateway.py ["your question"]
"""

import base64
import os
import sys
import urllib.request
import uuid

from openai import OpenAI

from sales import make_sales_csv

QUESTION = ("Load /work/sales.csv, plot revenue per month to /work/chart.png "
            "and tell me which month grew the most.")
SYSTEM = ("You are a data analyst. Use run_python to compute every number. "
          "Save charts as PNG files in /work.")


def upload(base_url, key, conversation, path, data):
    """The user's file into the conversation's sandbox, before the first question."""
    req = urllib.request.Request(
        f"{base_url}/conversations/{conversation}/files?path={path}", data=data, method="PUT",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        resp.read()


def main():
    base_url, key = os.environ.get("GATEWAY_URL"), os.environ.get("GATEWAY_API_KEY")
    if not base_url or not key:
        print("set GATEWAY_URL (the gateway's /v1 URL) and GATEWAY_API_KEY (a cgw_ key); "
              "optionally OPENAI_MODEL (default qwen3-32b)", file=sys.stderr)
        return 2
    base_url = base_url.rstrip("/")
    question = " ".join(sys.argv[1:]) or QUESTION
    conversation = "example-" + uuid.uuid4().hex[:8]
    with open(make_sales_csv("sales.csv"), "rb") as f:
        upload(base_url, key, conversation, "/work/sales.csv", f.read())

    llm = OpenAI(base_url=base_url, api_key=key, timeout=900)
    reply = llm.chat.completions.create(
        model=os.environ.get("OPENAI_MODEL", "qwen3-32b"),
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        extra_headers={"X-Conversation-Id": conversation})
    run = reply.model_extra["cpuos"]
    for i, step in enumerate(run["steps"], 1):
        print(f"--- run_python #{i}:\n{step['code']}\n--- output: {step['output'][:300]}")
    print(reply.choices[0].message.content)
    for art in run["artifacts"]:
        _, data = art["url"].split(",", 1)
        with open(art["name"], "wb") as f:
            f.write(base64.b64decode(data))
        print(f"saved {art['name']} ({art['mime_type']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
