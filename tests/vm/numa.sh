# In a two-node guest (tests/vm/guest --numa): the problem NUMA balancing
# exists for, recorded. A process on CPU 0 (node 0) writes memory that was
# placed on node 1; balancing scans it, takes hinting faults and migrates
# the pages to node 0.
#   numa.sh REPO MIB SECONDS QUIET_SECONDS
# Leaves in OUT: rec/, record.log, record.status, stray.json (the
# workload's pages per node before and after, from move_pages),
# vmstat.before and vmstat.after (the guest's /proc/vmstat around it).
repo="$1" mib="$2" seconds="$3" quiet="$4"
echo 1 >/proc/sys/kernel/numa_balancing
. "$repo/tests/vm/recorder.sh"
start_recorder "$repo" --interval 1s
# A quiet stretch before and after, as around a 3 a.m. incident: what the
# timeline measures the incident against.
sleep "$quiet"
cat /proc/vmstat >vmstat.before
HS_LOAD_CPU=0 HS_LOAD_NAME=numa-stray "$repo/target/debug/hs-load" numa-stray "$mib" "$seconds" >stray.json
load=$?
cat /proc/vmstat >vmstat.after
sleep "$quiet"
stop_recorder
# A workload that failed fails the guest (its panic is in guest.log), once
# the recording is closed.
[ "$load" = 0 ] || { echo "numa.sh: hs-load numa-stray exited $load" >&2; exit "$load"; }
