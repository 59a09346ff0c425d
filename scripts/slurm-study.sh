#!/usr/bin/env bash
# A ctl_explore study on a Slurm cluster: one job-array task per run, then one job that gathers the report.
#
#   preset=cifar10-paper; out=/shared/studies/cifar10       # a folder every node sees
#   n=$(ctl-explore study --preset "$preset" --list | tail -n +2 | wc -l)
#   job=$(sbatch --parsable --array=0-$((n - 1)) scripts/slurm-study.sh "$preset" "$out")
#   sbatch --dependency=afterany:"$job" --wrap "ctl-explore study --preset $preset --out $out --report"
#
# Each task trains (or resumes) and measures one run in its own run folder under "$out/runs", holding that folder's lock:
# two tasks never train the same run, and a task that dies (preempted, out of time) releases the lock with its process,
# so resubmitting the same index resumes the run from its last checkpoint. A run that fails (training diverges, the disk
# fills) is recorded with its error in its run folder and the task exits with status 1; `--list --out "$out"` shows each
# run's state (finished, failed and why, started, not started). --report writes results.csv, results.json (with its
# checksum in results.json.sha256) and report.html from the finished runs, naming the failed ones and any still missing;
# resubmit those indices (a failed run is retried) and report again. "$out" must be new, empty, or a study's own folder
# (it holds .ctl_explore_study): the study never writes into a folder of other files. Each task's GPU is the one Slurm
# gave it (CUDA_VISIBLE_DEVICES).
#
# Requeued, not lost: two minutes before the time limit Slurm sends SIGTERM to this script (--signal=B:TERM@120), which
# passes it on to the study; the run saves its last finished epoch and exits with status 143, and this script then puts
# the task back in the queue (scontrol requeue; --requeue allows it, and lets Slurm requeue a preempted task too), where
# it resumes from that checkpoint. The study runs as a child of this shell (no exec), so that the shell is there to do it.
#SBATCH --job-name=ctl-study
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --output=ctl-study-%A_%a.out
#SBATCH --requeue
#SBATCH --signal=B:TERM@120
set -euo pipefail
preset=${1:?usage: slurm-study.sh PRESET STUDY_FOLDER}
out=${2:?usage: slurm-study.sh PRESET STUDY_FOLDER}
task=${SLURM_ARRAY_TASK_ID:?run me as a job array (sbatch --array=...)}
child=""
trap 'kill -TERM "$child" 2>/dev/null || true' TERM  # Slurm's notice to this shell, passed on to the study
ctl-explore study --preset "$preset" --out "$out" --run "$task" &
child=$!
status=0
while true; do  # a trapped SIGTERM ends `wait` early: wait again, for the study's own exit status
  wait "$child" && status=0 || status=$?
  kill -0 "$child" 2>/dev/null || break
done
if [ "$status" -eq 143 ]; then  # stopped by SIGTERM, its last finished epoch saved: back in the queue, to resume
  echo "ctl-study: run $task stopped by SIGTERM and saved; requeueing job ${SLURM_JOB_ID:-?}" >&2
  scontrol requeue "${SLURM_JOB_ID:?}"
fi
exit "$status"
