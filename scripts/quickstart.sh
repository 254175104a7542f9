#!/usr/bin/env bash
# The main job of `make run`: start cpuosd (if it is not running), make an
# API key, and run examples/quickstart.py through the Python SDK against it:
# seed 003's flow without a model. With OPENAI_BASE_URL and OPENAI_API_KEY
# (or GPUOS_API_KEY) set, the same question goes to a real model too.
set -euo pipefail
cd "$(dirname "$0")/.."
build/bin/cpuos up
key=$(build/bin/cpuos keys create --name "quickstart-$(date +%s)")
export CPUOS_API_URL=http://127.0.0.1:7070 CPUOS_API_KEY=$key
export PYTHONPATH=$PWD/sdk/python${PYTHONPATH:+:$PYTHONPATH}
cd examples
python3 quickstart.py
if [ -n "${OPENAI_BASE_URL:-}" ] && [ -n "${OPENAI_API_KEY:-${GPUOS_API_KEY:-}}" ]; then
	python3 code_interpreter.py
fi
