"""Ask a model about sales.csv; it answers by running Python in a cpuos sandbox.

    export CPUOS_API_URL=http://127.0.0.1:7070 CPUOS_API_KEY=cpuos_...
    export OPENAI_BASE_URL=https://gpuos.si/v1 OPENAI_API_KEY=...   # or GPUOS_API_KEY
    export OPENAI_MODEL=qwen3-32b                                    # optional
    python3 examples/code_interpreter.py ["your question"]
"""

import os
import sys

import cpuos

from sales import make_sales_csv

QUESTION = ("Load /work/sales.csv, plot revenue per month to /work/chart.png "
            "and tell me which month grew the most.")


def main():
    key = os.environ.get("OPENAI_API_KEY") or os.environ.get("GPUOS_API_KEY")
    if not os.environ.get("OPENAI_BASE_URL") or not key:
        print("set OPENAI_BASE_URL (an OpenAI-compatible /v1 URL) and OPENAI_API_KEY or "
              "GPUOS_API_KEY; optionally OPENAI_MODEL (default qwen3-32b)", file=sys.stderr)
        return 2
    question = " ".join(sys.argv[1:]) or QUESTION
    make_sales_csv("sales.csv")
    with cpuos.CodeInterpreter() as ci:
        ci.sandbox.files.upload("sales.csv", "/work/sales.csv")
        answer = ci.ask(question)
    for i, step in enumerate(answer.steps, 1):
        print(f"--- run_python #{i}: exit {step.exit_code}")
    print(answer.text)
    for path, data in answer.files.items():
        name = os.path.basename(path)
        with open(name, "wb") as f:
            f.write(data)
        print(f"saved {name} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
