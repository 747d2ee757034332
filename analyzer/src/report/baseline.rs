//! Departures from a recording's own baseline, and incidents: the pure
//! statistics behind `report timeline`, on plain numbers so they are
//! tested without a recording.
//!
//! Method (also in `report timeline --help`): every series (a system metric,
//! or a per-process metric of one process) has one value per interval. Its
//! baseline is the median over all intervals of the range and of the
//! history read before it (which are never reported), and its spread
//! the MAD (median absolute deviation) scaled by 1.4826, which estimates a
//! standard deviation but, like the median, ignores a minority of
//! outliers: a burst cannot hide itself by raising its own baseline. An
//! interval departs when its value exceeds the median by more than
//! [`SIGMAS`] spreads AND by more than the metric's floor (a series that
//! never moves has a spread of zero, and the floor keeps noise from
//! counting). Only rises count. Intervals where a per-process series has no
//! value count as zero (the process did nothing, or did not exist), as do
//! event metrics; a counter missing from an interval is left out. Series
//! with fewer than [`MIN_INTERVALS`] intervals have no baseline.
//!
//! Consecutive departing intervals of a host make one incident: from the
//! first one's start to the last one's end, its peak the interval with the
//! largest departure (in spreads). Its contributors are the processes whose
//! per-process metrics rose most above their own baselines, with their
//! share of the total rise.

use std::collections::{BTreeMap, BTreeSet};

/// How many scaled MADs above the median an interval must be to depart.
pub const SIGMAS: f64 = 5.0;

/// Fewer intervals than this, and a series has no baseline.
pub const MIN_INTERVALS: usize = 4;

/// The MAD of a normal distribution is 0.6745 sigma: this makes it one.
const MAD_TO_SIGMA: f64 = 1.4826;

/// Contributors listed per incident, at most.
const MAX_CONTRIBUTORS: usize = 5;

/// What a metric is and how it departs.
#[derive(Clone, Copy, Debug)]
pub struct MetricSpec {
    pub name: &'static str,
    pub unit: &'static str,
    /// True when the series are per process.
    pub per_process: bool,
    /// True when an interval without a value means zero (events, processes).
    pub zero_when_missing: bool,
    /// The least rise over the median that counts, in `unit`.
    pub floor: f64,
}

/// One value of one series in one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub host: Option<String>,
    /// The interval's start, UTC ns.
    pub interval: i64,
    pub metric: String,
    pub pid: Option<i32>,
    pub comm: Option<String>,
    pub value: f64,
}

/// A metric of an incident: how far it departed.
#[derive(Clone, Debug, PartialEq)]
pub struct Departure {
    pub metric: String,
    pub unit: &'static str,
    pub pid: Option<i32>,
    pub comm: Option<String>,
    /// The series' median over the range.
    pub baseline: f64,
    /// Its largest value in the incident.
    pub observed: f64,
    /// `(observed - baseline)` in scaled MADs (or floors, where the spread is smaller).
    pub score: f64,
    /// The interval of `observed`.
    pub peak: i64,
}

/// A process among an incident's causes.
#[derive(Clone, Debug, PartialEq)]
pub struct Contributor {
    pub pid: i32,
    pub comm: Option<String>,
    /// The per-process metric it contributed most to.
    pub metric: String,
    /// Its share (0..=1) of that metric's rise over baseline, summed over processes.
    pub share: f64,
}

/// Consecutive departing intervals of one host.
#[derive(Clone, Debug, PartialEq)]
pub struct Incident {
    pub host: Option<String>,
    /// Start of the first interval, UTC ns.
    pub start: i64,
    /// End of the last interval, UTC ns.
    pub end: i64,
    /// The interval with the largest departure.
    pub peak: i64,
    /// Departed series, the largest departure first.
    pub metrics: Vec<Departure>,
    pub contributors: Vec<Contributor>,
}

type SeriesKey = (Option<String>, String, Option<i32>);

/// The median of `values` (not empty).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Median and scaled MAD of `values` (not empty).
pub fn robust_baseline(values: &[f64]) -> (f64, f64) {
    let mut v = values.to_vec();
    let m = median(&mut v);
    let mut deviations: Vec<f64> = values.iter().map(|x| (x - m).abs()).collect();
    (m, MAD_TO_SIGMA * median(&mut deviations))
}

/// Finds the incidents in `samples`, on each host's grid of intervals from
/// its first to its last sample, `interval_ns` apart. Intervals before
/// `report_from` are history: they count in every baseline, and never
/// depart themselves.
pub fn incidents(
    samples: &[Sample],
    specs: &[MetricSpec],
    interval_ns: i64,
    report_from: Option<i64>,
) -> Vec<Incident> {
    let reported = |t: i64| report_from.is_none_or(|from| t >= from);
    let spec = |name: &str| specs.iter().find(|s| s.name == name);
    // host -> every interval of its range
    let mut grid: BTreeMap<Option<String>, BTreeSet<i64>> = BTreeMap::new();
    for s in samples {
        grid.entry(s.host.clone()).or_default().insert(s.interval);
    }
    for intervals in grid.values_mut() {
        let (first, last) = (*intervals.first().unwrap(), *intervals.last().unwrap());
        *intervals = (0..)
            .map(|k| first + k * interval_ns)
            .take_while(|&t| t <= last)
            .collect();
    }
    let mut series: BTreeMap<SeriesKey, BTreeMap<i64, f64>> = BTreeMap::new();
    let mut comms: BTreeMap<(Option<String>, i32), String> = BTreeMap::new();
    for s in samples {
        if spec(&s.metric).is_none() {
            continue;
        }
        *series
            .entry((s.host.clone(), s.metric.clone(), s.pid))
            .or_default()
            .entry(s.interval)
            .or_default() += s.value;
        if let (Some(pid), Some(comm)) = (s.pid, &s.comm) {
            comms.insert((s.host.clone(), pid), comm.clone());
        }
    }

    // Per series: its baseline, and the intervals that depart.
    struct Fit {
        baseline: f64,
        values: BTreeMap<i64, f64>,
        departs: BTreeMap<i64, f64>, // interval -> score
    }
    let mut fits: BTreeMap<SeriesKey, Fit> = BTreeMap::new();
    for (key, values) in series {
        let spec = spec(&key.1).expect("filtered above");
        let values: BTreeMap<i64, f64> = if spec.zero_when_missing {
            grid[&key.0]
                .iter()
                .map(|t| (*t, values.get(t).copied().unwrap_or(0.0)))
                .collect()
        } else {
            values
        };
        if values.len() < MIN_INTERVALS {
            continue;
        }
        let all: Vec<f64> = values.values().copied().collect();
        let (baseline, spread) = robust_baseline(&all);
        let unit = spread.max(spec.floor / SIGMAS);
        let departs = values
            .iter()
            .filter(|(t, _)| reported(**t))
            .filter(|(_, v)| **v - baseline > SIGMAS * spread && **v - baseline > spec.floor)
            .map(|(t, v)| (*t, (v - baseline) / unit))
            .collect();
        fits.insert(
            key,
            Fit {
                baseline,
                values,
                departs,
            },
        );
    }

    // Runs of consecutive departing intervals, per host.
    let mut departing: BTreeMap<Option<String>, BTreeSet<i64>> = BTreeMap::new();
    for ((host, _, _), fit) in &fits {
        departing
            .entry(host.clone())
            .or_default()
            .extend(fit.departs.keys());
    }
    let mut out = Vec::new();
    for (host, intervals) in departing {
        let mut runs: Vec<(i64, i64)> = Vec::new();
        for t in intervals {
            match runs.last_mut() {
                Some((_, last)) if *last + interval_ns == t => *last = t,
                _ => runs.push((t, t)),
            }
        }
        for (first, last) in runs {
            let inside = |t: &i64| (first..=last).contains(t);
            let mut metrics = Vec::new();
            for ((h, metric, pid), fit) in &fits {
                if *h != host {
                    continue;
                }
                let Some((&peak, &score)) = fit
                    .departs
                    .iter()
                    .filter(|(t, _)| inside(t))
                    .max_by(|a, b| a.1.total_cmp(b.1))
                else {
                    continue;
                };
                metrics.push(Departure {
                    metric: metric.clone(),
                    unit: spec(metric).map_or("", |s| s.unit),
                    pid: *pid,
                    comm: pid.and_then(|p| comms.get(&(host.clone(), p)).cloned()),
                    baseline: fit.baseline,
                    observed: fit.values[&peak],
                    score,
                    peak,
                });
            }
            metrics.sort_by(|a, b| b.score.total_cmp(&a.score));
            let peak = metrics.first().map_or(first, |m| m.peak);

            // Contributors: per-process metrics that departed here (all of
            // them when none did), each process's rise over its own baseline
            // as a share of every process's rise.
            let departed: BTreeSet<&str> = metrics
                .iter()
                .filter(|m| m.pid.is_some())
                .map(|m| m.metric.as_str())
                .collect();
            let considered = |metric: &str| {
                spec(metric).is_some_and(|s| s.per_process)
                    && (departed.is_empty() || departed.contains(metric))
            };
            let mut rises: BTreeMap<&str, Vec<(i32, f64)>> = BTreeMap::new();
            for ((h, metric, pid), fit) in &fits {
                let (true, Some(pid)) = (*h == host && considered(metric), pid) else {
                    continue;
                };
                let rise: f64 = fit
                    .values
                    .iter()
                    .filter(|(t, _)| inside(t))
                    .map(|(_, v)| (v - fit.baseline).max(0.0))
                    .sum();
                if rise > 0.0 {
                    rises.entry(metric.as_str()).or_default().push((*pid, rise));
                }
            }
            let mut best: BTreeMap<i32, Contributor> = BTreeMap::new();
            for (metric, per_pid) in rises {
                let total: f64 = per_pid.iter().map(|(_, r)| r).sum();
                for (pid, rise) in per_pid {
                    let share = rise / total;
                    if best.get(&pid).is_none_or(|c| c.share < share) {
                        best.insert(
                            pid,
                            Contributor {
                                pid,
                                comm: comms.get(&(host.clone(), pid)).cloned(),
                                metric: metric.to_string(),
                                share,
                            },
                        );
                    }
                }
            }
            let mut contributors: Vec<Contributor> = best.into_values().collect();
            contributors.sort_by(|a, b| b.share.total_cmp(&a.share).then(a.pid.cmp(&b.pid)));
            contributors.truncate(MAX_CONTRIBUTORS);

            out.push(Incident {
                host: host.clone(),
                start: first,
                end: last + interval_ns,
                peak,
                metrics,
                contributors,
            });
        }
    }
    out.sort_by(|a, b| a.start.cmp(&b.start).then(a.host.cmp(&b.host)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;
    const IV: i64 = 10 * S;

    const SPECS: &[MetricSpec] = &[
        MetricSpec {
            name: "ctxt",
            unit: "switches/s",
            per_process: false,
            zero_when_missing: false,
            floor: 1000.0,
        },
        MetricSpec {
            name: "process_cpu",
            unit: "%",
            per_process: true,
            zero_when_missing: true,
            floor: 25.0,
        },
    ];

    fn system(k: i64, value: f64) -> Sample {
        Sample {
            host: None,
            interval: k * IV,
            metric: "ctxt".into(),
            pid: None,
            comm: None,
            value,
        }
    }

    fn process(k: i64, pid: i32, value: f64) -> Sample {
        Sample {
            host: None,
            interval: k * IV,
            metric: "process_cpu".into(),
            pid: Some(pid),
            comm: Some(format!("p{pid}")),
            value,
        }
    }

    /// ctxt around 5000/s with noise; a daemon at 3 % CPU; `extra` on top.
    fn quiet(n: i64, extra: impl Fn(i64) -> Vec<Sample>) -> Vec<Sample> {
        let mut samples = Vec::new();
        for k in 0..n {
            samples.push(system(k, 5000.0 + 150.0 * ((k * 7) % 5) as f64));
            samples.push(process(k, 1, 3.0 + (k % 2) as f64));
            samples.extend(extra(k));
        }
        samples
    }

    #[test]
    fn median_and_mad_ignore_a_minority_of_outliers() {
        let (m, s) = robust_baseline(&[10.0, 11.0, 9.0, 10.0, 1000.0, 10.0, 12.0]);
        assert_eq!(m, 10.0);
        // Deviations 0 1 1 0 990 0 2: their median is 1, times the normal
        // distribution's 1.4826.
        assert!((s - 1.4826).abs() < 1e-9, "{s}");
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn quiet_series_have_no_incident() {
        assert_eq!(incidents(&quiet(30, |_| vec![]), SPECS, IV, None), vec![]);
    }

    #[test]
    fn history_sets_the_baseline_and_is_never_reported() {
        // A burst in interval 5 (history) and a hog in every interval of
        // the range 25..30.
        let samples = quiet(30, |k| match k {
            5 => vec![process(k, 66, 100.0)],
            25.. => vec![process(k, 77, 100.0)],
            _ => vec![],
        });
        let found = incidents(&samples, SPECS, IV, Some(25 * IV));
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!((found[0].start, found[0].end), (25 * IV, 30 * IV));
        assert_eq!(found[0].metrics[0].pid, Some(77));
        assert_eq!(found[0].metrics[0].baseline, 0.0);
        // The range alone is its own baseline: nothing departs.
        let range_only: Vec<Sample> = samples
            .iter()
            .filter(|s| s.interval >= 25 * IV)
            .cloned()
            .collect();
        assert_eq!(incidents(&range_only, SPECS, IV, None), vec![]);
    }

    #[test]
    fn a_burst_is_one_incident_with_its_process_first() {
        // A hog at 100 % in intervals 12 and 13, with ctxt at 12000 and 9000/s
        // then (quiet values plus these);
        // a second process adds a little in 13.
        let samples = quiet(30, |k| match k {
            12 => vec![process(k, 77, 100.0), system(k, 6_400.0)],
            13 => vec![
                process(k, 77, 60.0),
                process(k, 88, 20.0),
                system(k, 3_850.0),
            ],
            _ => vec![],
        });
        let found = incidents(&samples, SPECS, IV, None);
        assert_eq!(found.len(), 1, "{found:#?}");
        let incident = &found[0];
        assert_eq!((incident.start, incident.end), (12 * IV, 14 * IV));
        assert_eq!(incident.peak, 12 * IV);
        // 88's 20 % is under the floor: only ctxt and 77 departed.
        let departed: Vec<(&str, Option<i32>)> = incident
            .metrics
            .iter()
            .map(|m| (m.metric.as_str(), m.pid))
            .collect();
        assert!(
            departed.contains(&("process_cpu", Some(77))),
            "{departed:?}"
        );
        assert!(departed.contains(&("ctxt", None)), "{departed:?}");
        assert_eq!(departed.len(), 2, "{departed:?}");
        let ctxt = incident
            .metrics
            .iter()
            .find(|m| m.metric == "ctxt")
            .unwrap();
        assert_eq!(ctxt.observed, 12_000.0);
        assert_eq!(ctxt.baseline, 5300.0);
        let first = &incident.contributors[0];
        assert_eq!((first.pid, first.comm.as_deref()), (77, Some("p77")));
        // 77 rose by 160 points, 88 by 20, daemon 1 by 0.5 (median 3.5; 3 then 4).
        assert!((first.share - 160.0 / 180.5).abs() < 1e-9, "{first:?}");
        assert_eq!(incident.contributors[1].pid, 88);
    }

    #[test]
    fn separate_bursts_are_separate_incidents_and_hosts_do_not_mix() {
        let mut samples = quiet(30, |k| match k {
            5 | 20 => vec![process(k, 77, 100.0)],
            _ => vec![],
        });
        let mut other: Vec<Sample> = quiet(30, |k| match k {
            6 => vec![process(k, 77, 90.0)],
            _ => vec![],
        });
        for s in &mut other {
            s.host = Some("b".into());
        }
        samples.append(&mut other);
        let all = incidents(&samples, SPECS, IV, None);
        let found: Vec<(Option<&str>, i64, i64)> = all
            .iter()
            .map(|i| (i.host.as_deref(), i.start / IV, i.end / IV))
            .collect();
        assert_eq!(found, [(None, 5, 6), (Some("b"), 6, 7), (None, 20, 21)]);
    }

    #[test]
    fn short_ranges_have_no_baseline() {
        let samples: Vec<Sample> = (0..3)
            .map(|k| process(k, 5, [0.0, 0.0, 99.0][k as usize]))
            .collect();
        assert_eq!(incidents(&samples, SPECS, IV, None), vec![]);
    }

    #[test]
    fn unknown_metrics_are_ignored() {
        let samples: Vec<Sample> = (0..10)
            .map(|k| Sample {
                metric: "nonsense".into(),
                ..system(k, if k == 5 { 1e9 } else { 1.0 })
            })
            .collect();
        assert_eq!(incidents(&samples, SPECS, IV, None), vec![]);
    }
}
