#!/usr/bin/env bash
# fleet.sh: what shipping a recording to a bucket costs, and how long one
# question over N hosts takes from the bucket beside the same N directories.
#
# The bucket is moto on the loopback (one Python process): its speed is not
# S3's, so the figures that carry over to a real fleet are the bytes and
# requests, and the warm-cache times, which read local copies.
#
#   push         `hindsight push REC s3://…/h1` into an empty prefix; then again
#                with nothing to send (a --follow round on an idle host)
#   N = 1 2 4 8  REC pushed under N host prefixes and copied to N directories:
#                  count    `sql`: the switches of all hosts
#                  runqlat  `report runqlat --interval 1m` (REC is indexed first,
#                           so the derived tables travel with it)
#                each over the directories (local), over s3:// with an empty
#                cache (cold: lists and downloads everything) and with the cache
#                full (warm: lists, downloads nothing); rounds interleaved,
#                medians of wall time
#   cluster      for N = 1 2 4 8, the same count and runqlat over s3:// (cache
#                warm) with --cluster, on a local Ballista cluster
#                (scripts/cluster --release) of 1 and of 2 executors, beside the
#                same without --cluster; the same answer both ways. The
#                cluster's client has a cache of its own: first the count
#                with it empty (client cold: lists, reads footers), and the
#                bytes it then holds; the rounds then find the footers there
#   window       REC as recorded (raw) and indexed, each in its own prefix;
#                questions about the last WINDOW (default -2m) with an empty
#                cache: the bytes they download against the whole prefix's,
#                their wall time, and the same answer as over the directory
#
# Usage, from the repository, after `cargo build --release -p hindsight`:
#   bench/fleet.sh REC
#   ROUNDS=5 HOSTS="1 2 4" PARTS="push hosts" bench/fleet.sh REC
#   PARTS=window WINDOW=-5m bench/fleet.sh REC
#   PARTS=cluster bench/fleet.sh REC    (builds the cluster's release binaries first)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$repo/target/release}
rounds=${ROUNDS:-3}
hosts=${HOSTS:-1 2 4 8}
parts=" ${PARTS:-push hosts cluster window} "
window=${WINDOW:--2m}
want() { [[ $parts == *" $1 "* ]]; }
rec=${1:?usage: bench/fleet.sh RECORDING}
work=$(mktemp -d)
# Below the ephemeral range (32768-), where a client's connection may hold a port.
port=$((20000 + RANDOM % 10000))
port_cluster=$((port + 100))
python3 -m moto.server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null; "$repo/scripts/cluster" down --dir "$work/cluster" 2>/dev/null; rm -rf "$work"' EXIT
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1 \
  AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ALLOW_HTTP=true
export HINDSIGHT_CACHE_DIR=$work/cache
for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null && break; sleep 0.2; done
python3 -c "import boto3; boto3.client('s3').create_bucket(Bucket='bench')"

mkdir -p "$work/raw"
cp -r "$rec" "$work/raw/rec"
"$bin/hindsight" index "$rec" >/dev/null
files=$(find "$rec" -name '*.parquet' ! -name '.*' | wc -l)
bytes=$(find "$rec" \( -name '*.parquet' -o -name recording.json \) ! -name '.*' -printf '%s\n' | awk '{s += $1} END {print s}')
echo "recording: $rec, $files chunk files + recording.json, $bytes bytes"

seconds() { # wall seconds of a command, its output discarded
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

if want push; then
first=$(seconds "$bin/hindsight" push "$rec" s3://bench/push/h1)
again=$(seconds "$bin/hindsight" push "$rec" s3://bench/push/h1)
echo "push: first $first s ($files + 1 files), again with nothing new $again s"
fi

want hosts || hosts=""
for n in $hosts; do
  rm -rf "$work/local" "$work/cache"
  mkdir -p "$work/local"
  dirs=()
  for i in $(seq "$n"); do
    cp -r "$rec" "$work/local/h$i"
    dirs+=("$work/local/h$i")
    "$bin/hindsight" push "$rec" "s3://bench/n$n/h$i" >/dev/null
  done
  url=s3://bench/n$n
  for question in count runqlat; do
    case $question in
      count) args=(sql) tail=('SELECT count(*) FROM sched_switch' --format csv) ;;
      runqlat) args=(report runqlat) tail=(--interval 1m --format csv) ;;
    esac
    : >"$work/local.t"; : >"$work/cold.t"; : >"$work/warm.t"
    for _ in $(seq "$rounds"); do
      seconds "$bin/hindsight" "${args[@]}" "${dirs[@]}" "${tail[@]}" >>"$work/local.t"
      rm -rf "$work/cache"
      seconds "$bin/hindsight" "${args[@]}" "$url" "${tail[@]}" >>"$work/cold.t"
      seconds "$bin/hindsight" "${args[@]}" "$url" "${tail[@]}" >>"$work/warm.t"
    done
    # The same answer both ways (the host labels are the directory names).
    diff <("$bin/hindsight" "${args[@]}" "${dirs[@]}" "${tail[@]}") \
      <("$bin/hindsight" "${args[@]}" "$url" "${tail[@]}") >/dev/null \
      || { echo "N=$n $question: the bucket's answer differs from the directories'" >&2; exit 1; }
    printf 'N=%s %-8s local %6.2f s   s3 cold %6.2f s   s3 warm %6.2f s   (medians of %s)\n' \
      "$n" "$question" "$(median <"$work/local.t")" "$(median <"$work/cold.t")" \
      "$(median <"$work/warm.t")" "$rounds"
  done
done

if want cluster; then
  for n in ${HOSTS:-1 2 4 8}; do
    url=s3://bench/c$n
    for i in $(seq "$n"); do
      "$bin/hindsight" push "$rec" "$url/h$i" >/dev/null
    done
    "$bin/hindsight" sql "$url" 'SELECT 1' >/dev/null # fills the cache
    client=$work/client-cache
    rm -rf "$client"
    for question in count runqlat; do
      case $question in
        count) args=(sql) tail=('SELECT count(*) FROM sched_switch' --format csv) ;;
        runqlat) args=(report runqlat) tail=(--interval 1m --format csv) ;;
      esac
      line="N=$n $question"
      : >"$work/here.t"
      for executors in 1 2; do
        "$repo/scripts/cluster" up --release --executors "$executors" --port "$port_cluster" \
          --dir "$work/cluster" >/dev/null
        on_cluster=(env HINDSIGHT_CACHE_DIR="$client" "$bin/hindsight" --cluster "df://127.0.0.1:$port_cluster")
        if [[ ! -d $client ]]; then
          cold=$(seconds "${on_cluster[@]}" "${args[@]}" "$url" "${tail[@]}")
          held=$(find "$client" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
          held_chunks=$(find "$client" -name '*.parquet' | wc -l)
          echo "N=$n client cold $cold s, then holds $held bytes ($held_chunks chunk files)"
        fi
        : >"$work/cluster.t"
        for _ in $(seq "$rounds"); do
          [[ $executors == 1 ]] && seconds "$bin/hindsight" "${args[@]}" "$url" "${tail[@]}" >>"$work/here.t"
          seconds "${on_cluster[@]}" "${args[@]}" "$url" "${tail[@]}" >>"$work/cluster.t"
        done
        diff <("$bin/hindsight" "${args[@]}" "$url" "${tail[@]}") \
          <("${on_cluster[@]}" "${args[@]}" "$url" "${tail[@]}") \
          >/dev/null || { echo "N=$n $question: the cluster's answer differs" >&2; exit 1; }
        "$repo/scripts/cluster" down --dir "$work/cluster"
        line+=$(printf '   cluster of %s %6.2f s' "$executors" "$(median <"$work/cluster.t")")
      done
      printf '%s   here %6.2f s%s   (medians of %s)\n' "${line%%   cluster*}" \
        "$(median <"$work/here.t")" "   cluster${line#*   cluster}" "$rounds"
    done
  done
fi

cached_bytes() { find "$work/cache" -name '*.parquet' ! -name '.*' -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
if want window; then
  for kind in raw indexed; do
    src=$rec
    [[ $kind == raw ]] && src=$work/raw/rec
    url=s3://bench/window-$kind
    "$bin/hindsight" push "$src" "$url" >/dev/null
    rm -rf "$work/cache"
    whole_t=$(seconds "$bin/hindsight" sql "$url" 'SELECT count(*) FROM sched_switch')
    whole=$(cached_bytes)
    echo "window $kind: the whole prefix, $whole bytes of chunks, in $whole_t s"
    for question in atop runqlat on-cpu timeline; do
      case $question in
        atop) args=(report atop) tail=(--from "$window" --interval 10s --format csv) ;;
        runqlat) args=(report runqlat) tail=(--from "$window" --interval 10s --format csv) ;;
        on-cpu) args=(flamegraph) tail=(--on-cpu --from "$window") ;;
        timeline) args=(report timeline) tail=(--from "$window" --format csv) ;;
      esac
      : >"$work/cold.t"
      for _ in $(seq "$rounds"); do
        rm -rf "$work/cache"
        seconds "$bin/hindsight" "${args[@]}" "$url" "${tail[@]}" >>"$work/cold.t"
      done
      fetched=$(cached_bytes)
      diff <("$bin/hindsight" "${args[@]}" "$src" "${tail[@]}") \
        <("$bin/hindsight" "${args[@]}" "$url" "${tail[@]}") >/dev/null \
        || { echo "window $kind $question: the bucket's answer differs from the directory's" >&2; exit 1; }
      printf 'window %-8s %-8s --from %s: %10s bytes (%5.1f %% of the whole)   cold %6.2f s\n' \
        "$kind" "$question" "$window" "$fetched" "$(echo "100 * $fetched / $whole" | bc -l)" \
        "$(median <"$work/cold.t")"
    done
  done
fi
