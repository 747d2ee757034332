# In the guest (tests/vm/guest runs it with sh, in OUT): records a known
# workload with the recorder's default event groups on the guest's kernel.
#   record.sh REPO
# Leaves in OUT: rec/ (the recording), record.log (the recorder's stderr),
# record.status (its exit status), list-events.txt, pingpong.json (the
# workload's own counts: its threads' context switches from /proc), uname.
repo="$1"
uname -r >uname
"$repo/target/release/hindsight-record" --list-events >list-events.txt 2>&1
. "$repo/tests/vm/recorder.sh"
# The defaults, with CPU samples and off-CPU stacks: every BPF program
# (and its copy of the user stack) must pass this kernel's verifier.
# Each switch then carries up to 8 KiB of stack: a ring to hold them all.
start_recorder "$repo" --events sched,counters,tasks,numa,cache,cpu --off-cpu-stacks --ring-size 64M
"$repo/target/debug/hs-pingpong" --rounds 2000 --pairs 1 >pingpong.json
sleep 2
stop_recorder
