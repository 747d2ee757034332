#!/usr/bin/env python3
"""Scores `report timeline -f json` against the incidents synthday injected.

Usage: timeline-score.py TRUTH.json INCIDENTS.json INTERVAL_S HOURS [WARMUP_H]

An injection is found when an incident starts within one interval of its
start (either side); it is named when that incident's first contributor is
the injected process (an injection of lost events names no process: found
is enough), and typed when the incident's first kind is the injected kind.
Every incident that overlaps no injection (by one interval's slack) is a
false one; those in the first WARMUP_H hours (default 1), when the
timeline has little history, are counted apart. Prints one JSON object: recall per strength and per kind, false
incidents per hour.
"""
import json
import sys
from datetime import datetime


def ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main():
    truth_path, incidents_path, interval, hours = sys.argv[1:5]
    warmup = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
    interval, hours = float(interval), float(hours)
    truth = json.load(open(truth_path))
    incidents = json.load(open(incidents_path))
    for i in incidents:
        i["_start"], i["_end"] = ts(i["start"]), ts(i["end"])
    matched = set()
    rows = []
    for inj in truth:
        start, end = ts(inj["start"]), ts(inj["end"])
        overlapping = [
            k for k, i in enumerate(incidents)
            if i["_start"] <= end + interval and i["_end"] >= start - interval
        ]
        matched.update(overlapping)
        first = next(
            (incidents[k] for k in overlapping
             if abs(incidents[k]["_start"] - start) <= interval),
            None,
        )
        found = first is not None
        named = found and (
            inj["kind"] == "lost"
            or (first["contributors"] and first["contributors"][0]["comm"] == inj["comm"])
        )
        typed = found and (first.get("kinds") or [None])[0] == inj["kind"]
        rows.append({"kind": inj["kind"], "strength": inj["strength"],
                     "found": found, "named": named, "typed": typed})
    unmatched = [i for k, i in enumerate(incidents) if k not in matched]
    if incidents:
        begin = min(i["_start"] for i in incidents + [{"_start": ts(t["start"])} for t in truth])
    warm = [i for i in unmatched if i["_start"] < begin + warmup * 3600]
    false = [i for i in unmatched if i["_start"] >= begin + warmup * 3600]

    def recall(selected):
        n = len(selected)
        return {
            "injected": n,
            "found": sum(r["found"] for r in selected),
            "named": sum(r["named"] for r in selected),
            "typed": sum(r["typed"] for r in selected),
        }

    out = {
        "by_strength": {str(s): recall([r for r in rows if r["strength"] == s])
                        for s in sorted({r["strength"] for r in rows}, reverse=True)},
        "by_kind": {k: recall([r for r in rows if r["kind"] == k])
                    for k in dict.fromkeys(r["kind"] for r in rows)},
        "all": recall(rows),
        "incidents": len(incidents),
        "false": len(false),
        "false_per_hour": round(len(false) / (hours - warmup), 2),
        "false_in_warmup": len(warm),
        "false_examples": [
            {"start": i["start"], "end": i["end"],
             "metrics": [m["metric"] + (f"/{m['comm']}" if m.get("comm") else "")
                         for m in i["metrics"][:3]]}
            for i in false[:8]
        ],
    }
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
