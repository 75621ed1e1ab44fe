# shellcheck shell=bash disable=SC2154 # the sourcing script's variables
# Background processes of the scripts that run a kwok cluster and programs
# against it (demo/demo.sh, demo/helm.sh, hack/bench-kwok.sh). Source
# it after hack/lib/init.sh; the functions use these variables of the
# sourcing script:
#   run_dir   folder of the PID files
#   log_dir   folder of the logs, one NAME.log per process
#   root      the repository root, trimmed from paths in messages
#   binaries  associative array: process name -> binary, the processes that
#             run_watching watches
# run_watching keeps the PID of the command it runs in `watched` while it
# runs, so that the exit trap can stop it (stop_watched): background
# commands ignore SIGINT in scripts, so Ctrl-C alone would leave it running.

watched=""

# stop_watched stops the command that run_watching runs, if any. It runs at
# exit, before the sourcing script's own exit commands (added later), so
# that the command does not see the cluster go away under it.
stop_watched() {
  if [[ -n "${watched}" ]]; then
    kill "${watched}" 2>/dev/null || true
  fi
}
at_exit stop_watched

# start_process NAME COMMAND...: runs a process in the background with its
# output in ${log_dir}/NAME.log and its PID in ${run_dir}/NAME.pid.
start_process() {
  local name=$1 i
  shift
  nohup "$@" >"${log_dir}/${name}.log" 2>&1 &
  echo "$!" >"${run_dir}/${name}.pid"
  # Until nohup has exec'ed the binary, the PID runs something else and
  # process_pid would report the process gone.
  for ((i = 0; i < 100; i++)); do
    [[ -z "$(process_pid "${name}" "$1")" ]] || return 0
    kill -0 "$(<"${run_dir}/${name}.pid")" 2>/dev/null || break
    sleep 0.05
  done
  echo "${name} did not start, see ${log_dir#"${root}"/}/${name}.log" >&2
  return 1
}

# process_pid NAME: the PID of a process started by start_process that is
# still running that binary; nothing if there is none (a PID file left
# behind, whose PID may have been reused, does not count).
process_pid() {
  local pid_file=${run_dir}/$1.pid binary=$2 pid exe
  [[ -f "${pid_file}" ]] || return 0
  pid=$(<"${pid_file}")
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 0
  exe=$(readlink "/proc/${pid}/exe" 2>/dev/null || true)
  # A binary replaced by a rebuild reads "PATH (deleted)".
  if [[ -n "${exe}" && "${exe% (deleted)}" == "$(readlink -f "${binary}")" ]]; then
    echo "${pid}"
  fi
}

# run_watching COMMAND...: runs COMMAND, and stops it with an error as soon
# as a process started by start_process exits, instead of letting it wait
# for its timeout.
run_watching() {
  "$@" &
  local cmd=$! name
  # Background commands ignore SIGINT in scripts: stop_watched stops it.
  watched=${cmd}
  while kill -0 "${cmd}" 2>/dev/null; do
    for name in "${!binaries[@]}"; do
      if [[ -f "${run_dir}/${name}.pid" && -z "$(process_pid "${name}" "${binaries[${name}]}")" ]]; then
        kill "${cmd}" 2>/dev/null || true
        wait "${cmd}" 2>/dev/null || true
        echo "${name} exited, see ${log_dir#"${root}"/}/${name}.log" >&2
        return 1
      fi
    done
    sleep 0.5
  done
  watched=""
  wait "${cmd}"
}

# stop_process NAME BINARY: stops a process started by start_process.
stop_process() {
  local name=$1 binary=$2 pid i
  pid=$(process_pid "${name}" "${binary}")
  if [[ -n "${pid}" ]]; then
    kill "${pid}" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "${pid}" 2>/dev/null || break
      sleep 0.2
    done
    kill -9 "${pid}" 2>/dev/null || true
  fi
  rm -f "${run_dir}/${name}.pid"
}
