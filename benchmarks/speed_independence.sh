#!/usr/bin/env bash
# The outcomes that once depended on the machine's speed (the guide's preemption chapter, the preemption tests) run
# twice: on the machine as it is, then beside two busy loops that keep both cores spinning. Each must pass both times:
# they signal on an event (a step, a line), never after a sleep.
#
#     bash benchmarks/speed_independence.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=(
  "tests/test_guide.py::test_every_block_runs_as_printed_and_leaves_nothing_in_tmp[7]"
  "tests/test_resume.py::test_the_preempt_fault_stops_the_run_after_its_step_whatever_the_machines_speed"
  "tests/test_resume.py::test_sigterm_to_train_stops_every_rank_at_one_step_and_resumes_bitwise[linear]"
  "tests/commands/test_new.py::test_sigterm_mid_run_saves_and_the_restart_ends_bitwise_equal"
)
run() { python -m pytest -q -n 0 "${TESTS[@]}" 2>&1 | grep -E "passed|failed|FAILED|machine CPU"; }
echo "== as the machine is"
run
echo "== beside two busy loops"
spin() { while :; do :; done; }
spin & first=$!
spin & second=$!
trap 'kill "$first" "$second" 2>/dev/null' EXIT
run
