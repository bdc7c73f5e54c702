#!/usr/bin/env bash
# Run the job scripts of benchmarks/device/plan_jobs.py, stage by stage, JOBS of a stage at
# once (one GPU holds several small trainings: 8 MiniLM ones used 15-65 s each on an H200).
# A failed job does not stop its stage; the jobs that need its outputs fail in turn, and the
# stage's stderr names them. BUDGET seconds bound all stages (the device call has a limit).
#   bash benchmarks/device/run_jobs.sh PLANDIR [JOBS]    (from the repository root, drpipe on PATH)
set -u
plan=${1:?usage: run_jobs.sh PLANDIR [JOBS]}
jobs=${2:-8}
mkdir -p results/logs
run_stage() {  # stage folder
    local t0 name
    t0=$(date +%s)
    name=$(basename "$1")
    find "$1" -name '*.sh' | sort | xargs -P "$jobs" -n 1 bash > /dev/null \
        2>> "results/logs/_device_$name.err" || echo "$name: some jobs failed (results/logs/_device_$name.err)"
    echo "$name: $(( $(date +%s) - t0 )) s, $(find "$1" -name '*.sh' | wc -l) jobs"
}
export -f run_stage
export jobs
timeout "${BUDGET:-3600}" bash -c '
for stage in $(find "$0" -maxdepth 1 -type d -name "stage-*" | sort -t- -k2 -n); do
    run_stage "$stage"
done' "$plan" || echo "stages stopped (timeout or failure, rc $?)"
