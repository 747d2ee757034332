# Sourced by the guest scripts (POSIX sh: the guest runs them with dash):
# the release recorder into OUT/rec around the caller's workload.
#   start_recorder REPO [FLAGS...]   starts it, returns once it records
#   stop_recorder                    SIGINT, waits, leaves record.status
# Its stderr goes to record.log.
start_recorder() {
  bin="$1/target/release/hindsight-record"
  shift
  "$bin" --output rec --chunk 5s "$@" >record.log 2>&1 &
  recorder=$!
  # Recording once its banner is out (or gone, when it failed): the banner
  # line itself, as a warning that a group is skipped says "recording
  # without it" before the last groups attach.
  for _ in $(seq 600); do
    grep -q "^hindsight-record: recording " record.log 2>/dev/null && break
    kill -0 "$recorder" 2>/dev/null || break
    sleep 0.1
  done
}

stop_recorder() {
  kill -INT "$recorder"
  wait "$recorder"
  echo $? >record.status
}
