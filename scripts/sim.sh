#!/usr/bin/env bash
# Run a simulation over many seeds, in a release build, with a progress line
# and a summary:
#
#     scripts/sim.sh [SEEDS] [FIRST]            # the journal's writer over a faulty disk
#                                               # (actors/tests/it/sim), default 10000 seeds
#     scripts/sim.sh --daemon [SEEDS] [FIRST]   # the whole daemon over a faulty disk, killed
#                                               # and power-cut, relaunched
#                                               # (tests/it/daemon_sim), default 1000 seeds
#
# Each seed runs twice (its trace hashes must match). A failing seed prints
# the one line that replays it. STEADFAST_SIM_OPS (journal, default 400) and
# STEADFAST_DAEMON_SIM_OPS (daemon, default 120) set the operations a seed
# runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--daemon" ]]; then
  shift
  export STEADFAST_DAEMON_SIM_SEEDS="${1:-1000}"
  export STEADFAST_DAEMON_SIM_FIRST="${2:-0}"
  exec cargo test --release -p steadfast --test it -- daemon_sim::the_daemon --nocapture --test-threads=1
fi
export STEADFAST_SIM_SEEDS="${1:-10000}"
export STEADFAST_SIM_FIRST="${2:-0}"
exec cargo test --release -p steadfast-actors --test it -- sim:: --nocapture --test-threads=1
