# Inside a fresh Debian root (tests/deb/fresh-root), chrooted with /proc,
# /sys and /dev of this machine: installs the package as a user would,
# runs the service's own command line around a known workload, removes
# and purges it. Run with sh, in /tmp/deb, where the caller put the
# packages (*.deb) and hs-pingpong; leaves its findings there:
#   no-rust          "none": no cargo or rustc in this root
#   enabled          the unit's enablement symlink after install
#   exec-start       the unit's ExecStart
#   record.log, record.status, pingpong.json, info.txt, switches.csv
#   man-pages        the man pages installed
#   after-remove     what remove left of the binaries, the recording, the
#                    unit's mask and its enablement symlink, a path a line
#   after-purge      the same after purge
set -eu
cd /tmp/deb
export DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin
{ command -v cargo || command -v rustc || echo none; } >no-rust
apt-get update -qq >apt.log 2>&1
# As a user installs a downloaded package: apt fetches its dependencies.
apt-get install -y -q ./hindsight_*.deb ./hindsight-dbgsym_*.deb >>apt.log 2>&1
readlink /etc/systemd/system/multi-user.target.wants/hindsight-record.service >enabled || echo missing >enabled
unit=/lib/systemd/system/hindsight-record.service
sed -n 's/^ExecStart=//p' "$unit" >exec-start
ls /usr/share/man/man1 >man-pages
# What systemd would do to start it (no systemd runs in a chroot): its
# state directory, then its command line, here for 6 s.
mkdir -p /var/lib/hindsight
$(cat exec-start) --duration 6s >record.log 2>&1 &
recorder=$!
for _ in $(seq 300); do
  grep -q recording record.log 2>/dev/null && break
  kill -0 "$recorder" 2>/dev/null || break
  sleep 0.1
done
./hs-pingpong --rounds 2000 --pairs 1 >pingpong.json
status=0
wait "$recorder" || status=$?
echo "$status" >record.status
hindsight info /var/lib/hindsight/rec >info.txt 2>&1
hindsight sql /var/lib/hindsight/rec -f csv \
  "SELECT prev_tid AS tid, count(*) AS switches FROM sched_switch GROUP BY prev_tid" >switches.csv
apt-get remove -y -q hindsight >>apt.log 2>&1
left() {
  for path in /usr/bin/hindsight /usr/bin/hindsight-record /var/lib/hindsight/rec \
    /etc/systemd/system/hindsight-record.service \
    /etc/systemd/system/multi-user.target.wants/hindsight-record.service; do
    [ -e "$path" ] || [ -L "$path" ] && echo "$path"
  done
  return 0
}
left >after-remove
apt-get purge -y -q hindsight >>apt.log 2>&1
left >after-purge
