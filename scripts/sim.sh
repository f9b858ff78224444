#!/usr/bin/env bash
# Run the journal simulation (actors/tests/it/sim) over many seeds, in a
# release build, with a progress line every 1000 seeds and a summary:
#
#     scripts/sim.sh [SEEDS] [FIRST]       # default 10000 seeds from 0
#
# Each seed runs twice (its trace hashes must match). A failing seed prints
# the one line that replays it. STEADFAST_SIM_OPS sets the operations a
# seed runs (default 400).
set -euo pipefail
cd "$(dirname "$0")/.."
export STEADFAST_SIM_SEEDS="${1:-10000}"
export STEADFAST_SIM_FIRST="${2:-0}"
exec cargo test --release -p steadfast-actors --test it -- sim:: --nocapture --test-threads=1
