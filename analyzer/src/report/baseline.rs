//! Departures from what was normal before, and incidents: the pure
//! statistics behind `report timeline`, on plain numbers so they are
//! tested without a recording.
//!
//! Method (also in `report timeline --help`): a series is a system metric,
//! or a per-process metric of one program (its processes of one `comm`
//! summed, so a build's hundredth `cc1` has the history of the ninety-nine
//! before it; a process seen under several names, as after an exec,
//! counts under the last, see [`program_names`]), with one value per
//! interval. Each interval is judged against
//! its own history: the series' values in the [`TRAILING_NS`] before it and,
//! where the recording reaches back a day, the same time of day the day
//! before ([`SEASON_HALF_NS`] either side), leaving out intervals that
//! departed themselves (an incident does not become normal by lasting).
//! From that history:
//! - `baseline`, its median;
//! - `spread`, its interquartile range / 1.349 (a standard deviation for
//!   normal noise, which a minority of bursts cannot inflate);
//! - `usual high`, the value it reached in at least [`USUAL_HIGH_COUNT`]
//!   intervals (or 1 % of them): how high a series of bursts (a cron job, a
//!   daily build) normally goes. This is how sparse series are judged: as
//!   counts of intervals, not by a spread that is zero when most are zero;
//! - `margin`, the largest rise over the baseline that is still normal: the
//!   greatest of [`SIGMAS`] spreads, the metric's floor (the least rise
//!   that matters, in its unit), and the usual high's rise.
//!
//! Its score is the rise over the baseline in margins: one unit for every
//! metric, so scores rank together; an interval departs when its score
//! exceeds 1 (or 1 / `sensitivity`). Only rises count. An interval without a
//! value counts as zero for processes and events; a counter missing from an
//! interval is left out. Where the history holds fewer than
//! [`MIN_HISTORY`] intervals (the start of a recording), the series' other
//! intervals in what was read stand in for it, without the usual high.
//!
//! Consecutive departing intervals of a host make one incident: from the
//! first one's start to the last one's end, its peak the interval with the
//! highest score. Its kinds are those of its departed metrics (cpu,
//! memory, cache_thrash, io, numa, lost, and new_process for a program with
//! no history), the highest scoring first (the timeline puts `recorder`
//! before them where the recorder itself leads). Its contributors are the
//! programs whose per-process metrics departed in it, the highest scoring
//! first, each with the process of that program that did most of it and
//! its share of the metric's rise over all programs; where none departed,
//! the programs that rose most.

use std::collections::{BTreeMap, BTreeSet};

/// How many spreads above the baseline a rise is still normal.
pub const SIGMAS: f64 = 5.0;

/// The trailing history of an interval.
pub const TRAILING_NS: i64 = 3 * 3600 * 1_000_000_000;

/// A day: where the recording reaches back this far, the same time of day
/// then is history too.
pub const DAY_NS: i64 = 86_400 * 1_000_000_000;

/// Half the width of the time-of-day window a day before.
pub const SEASON_HALF_NS: i64 = 1800 * 1_000_000_000;

/// A history shorter than this many intervals is not used.
pub const MIN_HISTORY: usize = 30;

/// A level is usual when this many separate bursts of the history reached it.
pub const USUAL_BURSTS: usize = 3;

/// Fewer intervals than this, and a series has no baseline at all.
pub const MIN_INTERVALS: usize = 4;

/// The interquartile range of a normal distribution is 1.349 sigma.
const IQR_TO_SIGMA: f64 = 1.349;

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
    /// The least rise over the baseline that counts, in `unit`.
    pub floor: f64,
    /// The kind of incident its departure is evidence of.
    pub kind: &'static str,
}

/// The kind of an incident led by a program with no history.
pub const NEW_PROCESS: &str = "new_process";

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
    /// For a per-process metric, the process of `comm` with the most of it at the peak.
    pub pid: Option<i32>,
    pub comm: Option<String>,
    /// The series' baseline at the peak.
    pub baseline: f64,
    /// The most it could have been at the peak and still be normal: baseline plus margin.
    pub normal_max: f64,
    /// Its largest value in the incident.
    pub observed: f64,
    /// `(observed - baseline) / margin`: above 1 departs.
    pub score: f64,
    /// The interval of `observed`.
    pub peak: i64,
    /// A per-process series that is idle as a rule and not in the habit of
    /// bursting: a program that appeared.
    pub new: bool,
}

/// A program among an incident's causes.
#[derive(Clone, Debug, PartialEq)]
pub struct Contributor {
    /// The process of the program that did the most of `metric` in the incident.
    pub pid: i32,
    pub comm: Option<String>,
    /// The per-process metric it contributed most to.
    pub metric: String,
    /// Its share (0..=1) of that metric's rise over baseline, summed over programs.
    pub share: f64,
    /// Its departure's score; 0 where it rose without departing.
    pub score: f64,
    /// Its threads that did the most of `metric` in the incident, the most
    /// first (filled in after the incidents are found).
    pub threads: Vec<ThreadShare>,
    /// Its process's stacks that weighed most in the incident, the most
    /// first within each kind of time (filled in after the incidents are
    /// found, where recorded): where it ran and, if it departed in D state,
    /// where it blocked; the kind of its `metric` first.
    pub stacks: Vec<StackShare>,
}

/// What a contributor's stacks weigh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackTime {
    /// CPU samples of the process while it ran (`cpu_sample`).
    OnCpu,
    /// Nanoseconds the process spent in uninterruptible sleep (`D`, usually
    /// I/O), each from the stack it blocked in (`--off-cpu-stacks`).
    OffCpuD,
}

/// A stack of a contributor's process, and its weight in the incident.
#[derive(Clone, Debug, PartialEq)]
pub struct StackShare {
    pub time: StackTime,
    /// Samples ([`StackTime::OnCpu`]) or nanoseconds ([`StackTime::OffCpuD`]).
    pub weight: i64,
    /// Of the process's whole weight of that time in the incident (0..=1).
    pub share: f64,
    /// Its frames, root first, `;` between them (as a folded stack).
    pub frames: String,
}

/// A thread of a contributor: its time in the incident.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadShare {
    pub tid: i32,
    /// The name it ended the incident with.
    pub comm: Option<String>,
    /// Seconds on a CPU, waiting in a run queue, and in uninterruptible
    /// sleep (D) in the incident.
    pub on_cpu_s: f64,
    pub runq_wait_s: f64,
    pub offcpu_d_s: f64,
}

/// Consecutive departing intervals of one host.
#[derive(Clone, Debug, PartialEq)]
pub struct Incident {
    pub host: Option<String>,
    /// Start of the first interval, UTC ns.
    pub start: i64,
    /// End of the last interval, UTC ns.
    pub end: i64,
    /// The interval with the highest score.
    pub peak: i64,
    /// What it looks like (see the module doc), the most evident first.
    pub kinds: Vec<&'static str>,
    /// Departed series, the highest score first.
    pub metrics: Vec<Departure>,
    pub contributors: Vec<Contributor>,
}

/// (host, metric, comm for per-process metrics)
type SeriesKey = (Option<String>, String, Option<String>);

/// The median of `values` (not empty).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    quantile(values, 0.5)
}

/// The `q` quantile of `sorted` (not empty), interpolated between neighbours.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    let at = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

/// Baseline and spread of `sorted` (not empty): median, and interquartile
/// range scaled to a standard deviation.
pub fn robust_baseline(sorted: &[f64]) -> (f64, f64) {
    let spread = (quantile(sorted, 0.75) - quantile(sorted, 0.25)) / IQR_TO_SIGMA;
    (quantile(sorted, 0.5), spread)
}

/// A multiset of values kept sorted, for quantiles of a sliding window.
#[derive(Default)]
struct SortedWindow(Vec<f64>);

impl SortedWindow {
    fn insert(&mut self, v: f64) {
        let at = self.0.partition_point(|x| *x < v);
        self.0.insert(at, v);
    }
    fn remove(&mut self, v: f64) {
        let at = self.0.partition_point(|x| *x < v);
        if self.0.get(at) == Some(&v) {
            self.0.remove(at);
        }
    }
}

/// How one interval of a series compares with its history.
#[derive(Clone, Copy, Debug)]
struct Judged {
    value: f64,
    baseline: f64,
    margin: f64,
    score: f64,
    departs: bool,
    /// A baseline of zero and no usual bursts: a program that is not normally busy.
    quiet_history: bool,
}

/// Judges every interval of one series (`times` ascending, `values` theirs)
/// against its history; see the module doc. `threshold` is the score
/// above which an interval departs.
fn judge(times: &[i64], values: &[f64], floor: f64, threshold: f64) -> Vec<Judged> {
    let mut all: Vec<f64> = values.to_vec();
    all.sort_by(f64::total_cmp);
    let global = robust_baseline(&all);
    // The normal (not departed) values of the trailing window [trail_lo, k)
    // and of the day-ago window [season_lo, season_hi).
    let mut trailing = SortedWindow::default();
    let mut season = SortedWindow::default();
    let mut judged: Vec<Judged> = Vec::with_capacity(times.len());
    let (mut trail_lo, mut season_lo, mut season_hi) = (0, 0, 0);
    for (k, (&t, &value)) in times.iter().zip(values).enumerate() {
        let normal = |j: usize, judged: &[Judged]| !judged[j].departs;
        let day_ago = t - DAY_NS;
        while season_lo < season_hi && times[season_lo] < day_ago - SEASON_HALF_NS {
            if normal(season_lo, &judged) {
                season.remove(values[season_lo]);
            }
            season_lo += 1;
        }
        while season_hi < k && times[season_hi] <= day_ago + SEASON_HALF_NS {
            if times[season_hi] < day_ago - SEASON_HALF_NS {
                season_lo = season_hi + 1;
            } else if normal(season_hi, &judged) {
                season.insert(values[season_hi]);
            }
            season_hi += 1;
        }
        if k > 0 && normal(k - 1, &judged) {
            trailing.insert(values[k - 1]);
        }
        while trail_lo < k && times[trail_lo] < t - TRAILING_NS {
            if normal(trail_lo, &judged) {
                trailing.remove(values[trail_lo]);
            }
            trail_lo += 1;
        }
        let base_margin = |spread: f64| (SIGMAS * spread).max(floor);
        let history = trailing.0.len() >= MIN_HISTORY;
        let (mut baseline, spread) = if history {
            robust_baseline(&trailing.0)
        } else {
            global
        };
        let mut margin = base_margin(spread);
        let mut usual_bursts = false;
        if history && value - baseline > threshold * margin {
            // A candidate. Is it as high as the series' usual bursts?
            let spans = [season_lo..season_hi, trail_lo..k];
            let peaks = burst_peaks(&spans, values, baseline + margin);
            if let Some(usual) = peaks.get(USUAL_BURSTS - 1) {
                // Normal up to the usual bursts' height, and by as much
                // again as any rise: a burst a little higher than the last
                // few is still one of them.
                margin += usual - baseline;
                usual_bursts = true;
            }
            // Or as high as this time of day is, yesterday?
            if season.0.len() >= MIN_HISTORY {
                let (b, s) = robust_baseline(&season.0);
                let m = base_margin(s) + (margin - base_margin(spread));
                if (value - b) / m < (value - baseline) / margin {
                    (baseline, margin) = (b, m);
                }
            }
        }
        let score = (value - baseline) / margin;
        judged.push(Judged {
            value,
            baseline,
            margin,
            score,
            departs: value > baseline && score > threshold,
            // Idle as a rule, and not in the habit of bursting.
            quiet_history: baseline <= 0.0 && !usual_bursts,
        });
    }
    judged
}

/// The peaks of the bursts in `values` over the index ranges `spans`
/// (adjacent indices are adjacent intervals; the last span ends at the
/// interval judged): runs of values above `line`, the highest peak first.
fn burst_peaks(spans: &[std::ops::Range<usize>], values: &[f64], line: f64) -> Vec<f64> {
    let mut peaks = Vec::new();
    for (i, span) in spans.iter().enumerate() {
        let mut peak: Option<f64> = None;
        for &v in &values[span.clone()] {
            if v > line {
                peak = Some(peak.map_or(v, |p| p.max(v)));
            } else if let Some(p) = peak.take() {
                peaks.push(p);
            }
        }
        // A run still under way at the end of the last span (the trailing
        // one) is the burst being judged, not history.
        if i + 1 < spans.len() {
            peaks.extend(peak);
        }
    }
    peaks.sort_by(|a, b| b.total_cmp(a));
    peaks
}

/// A sample's process and interval: (host, metric, pid, interval).
type SampleKey<'a> = (&'a Option<String>, &'a str, Option<i32>, i64);

fn sample_key(s: &Sample) -> SampleKey<'_> {
    (&s.host, s.metric.as_str(), s.pid, s.interval)
}

/// The name a per-process sample counts under when its row has none.
fn name(s: &Sample) -> String {
    s.comm
        .clone()
        .unwrap_or_else(|| format!("pid {}", s.pid.unwrap_or_default()))
}

/// The program each per-process sample counts under. A process's rows may
/// carry several names: a thread keeps the name it had when it was switched
/// in, so a fork that exec'd without leaving the CPU burns under its
/// parent's name until its next switch. Over a run of consecutive intervals
/// of one process (a pid seen again after a gap may be another process),
/// every sample counts under the name the run ends with: what it exec'd or
/// renamed itself to (of several in its last interval, the one it did most
/// under).
fn program_names<'a>(samples: &'a [Sample], interval_ns: i64) -> BTreeMap<SampleKey<'a>, String> {
    // (host, metric, pid) -> interval -> name -> value
    type ByInterval = BTreeMap<i64, BTreeMap<String, f64>>;
    let mut rows: BTreeMap<(&Option<String>, &str, i32), ByInterval> = BTreeMap::new();
    for s in samples {
        if let Some(pid) = s.pid {
            *rows
                .entry((&s.host, s.metric.as_str(), pid))
                .or_default()
                .entry(s.interval)
                .or_default()
                .entry(name(s))
                .or_default() += s.value;
        }
    }
    let mut names = BTreeMap::new();
    for ((host, metric, pid), intervals) in rows {
        let mut run: Vec<(i64, &BTreeMap<String, f64>)> = Vec::new();
        let mut flush = |run: &mut Vec<(i64, &BTreeMap<String, f64>)>| {
            let last = run.last().map(|(_, by_name)| *by_name);
            let main = last.and_then(|by_name| by_name.iter().max_by(|a, b| a.1.total_cmp(b.1)));
            if let Some((main, _)) = main {
                for (t, _) in run.iter() {
                    names.insert((host, metric, Some(pid), *t), main.clone());
                }
            }
            run.clear();
        };
        for (t, by_name) in &intervals {
            if run.last().is_some_and(|(last, _)| last + interval_ns != *t) {
                flush(&mut run);
            }
            run.push((*t, by_name));
        }
        flush(&mut run);
    }
    names
}

/// Finds the incidents in `samples`, on each host's grid of intervals from
/// its first to its last sample, `interval_ns` apart. Intervals before
/// `report_from` are history: they are judged and serve as history, and
/// never reported. An interval departs when its score exceeds
/// `1 / sensitivity`.
pub fn incidents(
    samples: &[Sample],
    specs: &[MetricSpec],
    interval_ns: i64,
    report_from: Option<i64>,
    sensitivity: f64,
) -> Vec<Incident> {
    let reported = |t: i64| report_from.is_none_or(|from| t >= from);
    let spec = |name: &str| specs.iter().find(|s| s.name == name);
    let threshold = 1.0 / sensitivity;
    // host -> every interval of its range
    let mut grid: BTreeMap<Option<String>, Vec<i64>> = BTreeMap::new();
    for s in samples {
        grid.entry(s.host.clone()).or_default().push(s.interval);
    }
    for intervals in grid.values_mut() {
        let (first, last) = intervals
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(*t), hi.max(*t)));
        *intervals = (0..)
            .map(|k| first + k * interval_ns)
            .take_while(|&t| t <= last)
            .collect();
    }
    let names = program_names(samples, interval_ns);
    let mut series: BTreeMap<SeriesKey, BTreeMap<i64, f64>> = BTreeMap::new();
    // (host, metric, comm) -> pid -> interval -> value: who within a program did it
    let mut by_pid: BTreeMap<SeriesKey, BTreeMap<i32, BTreeMap<i64, f64>>> = BTreeMap::new();
    for s in samples {
        let Some(spec) = spec(&s.metric) else {
            continue;
        };
        let comm = match (spec.per_process, s.pid) {
            (false, _) => None,
            (true, _) => Some(
                names
                    .get(&sample_key(s))
                    .cloned()
                    .unwrap_or_else(|| name(s)),
            ),
        };
        let key = (s.host.clone(), s.metric.clone(), comm);
        *series
            .entry(key.clone())
            .or_default()
            .entry(s.interval)
            .or_default() += s.value;
        if let (true, Some(pid)) = (spec.per_process, s.pid) {
            *by_pid
                .entry(key)
                .or_default()
                .entry(pid)
                .or_default()
                .entry(s.interval)
                .or_default() += s.value;
        }
    }

    // Per series: every interval judged against its history.
    let mut fits: BTreeMap<SeriesKey, BTreeMap<i64, Judged>> = BTreeMap::new();
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
        let times: Vec<i64> = values.keys().copied().collect();
        let vals: Vec<f64> = values.values().copied().collect();
        let judged = judge(&times, &vals, spec.floor, threshold);
        fits.insert(key, times.into_iter().zip(judged).collect());
    }

    // Runs of consecutive departing intervals in the reported range, per host.
    let mut departing: BTreeMap<Option<String>, BTreeSet<i64>> = BTreeMap::new();
    for ((host, _, _), fit) in &fits {
        departing.entry(host.clone()).or_default().extend(
            fit.iter()
                .filter(|(t, j)| j.departs && reported(**t))
                .map(|(t, _)| *t),
        );
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
            let top_pid = |key: &SeriesKey, at: &dyn Fn(&i64) -> bool| {
                by_pid.get(key).and_then(|pids| {
                    pids.iter()
                        .map(|(pid, v)| {
                            (
                                *pid,
                                v.iter().filter(|(t, _)| at(t)).map(|(_, x)| x).sum::<f64>(),
                            )
                        })
                        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
                        .map(|(pid, _)| pid)
                })
            };
            let mut metrics = Vec::new();
            for (key, fit) in &fits {
                let (h, metric, comm) = key;
                if *h != host {
                    continue;
                }
                let Some((&peak, judged)) = fit
                    .iter()
                    .filter(|(t, j)| inside(t) && j.departs)
                    .max_by(|a, b| a.1.score.total_cmp(&b.1.score))
                else {
                    continue;
                };
                let spec = spec(metric).expect("filtered above");
                metrics.push(Departure {
                    metric: metric.clone(),
                    unit: spec.unit,
                    pid: top_pid(key, &|t: &i64| *t == peak),
                    comm: comm.clone(),
                    baseline: judged.baseline,
                    normal_max: judged.baseline + judged.margin,
                    observed: judged.value,
                    score: judged.score,
                    peak,
                    new: spec.per_process && judged.quiet_history,
                });
            }
            metrics.sort_by(|a, b| b.score.total_cmp(&a.score));
            let peak = metrics.first().map_or(first, |m| m.peak);

            // Kinds, each as evident as its best departure.
            let mut kinds: Vec<(&'static str, f64)> = Vec::new();
            for m in &metrics {
                let (kind, score) = if m.new && m.metric == "process_cpu" {
                    (NEW_PROCESS, m.score)
                } else {
                    (spec(&m.metric).map_or("", |s| s.kind), m.score)
                };
                match kinds.iter_mut().find(|(k, _)| *k == kind) {
                    Some(entry) => entry.1 = entry.1.max(score),
                    None => kinds.push((kind, score)),
                }
            }
            kinds.sort_by(|a, b| b.1.total_cmp(&a.1));

            // Each program's rise over its baseline in the incident, per metric.
            let mut rises: BTreeMap<&str, Vec<(&SeriesKey, f64)>> = BTreeMap::new();
            for (key, fit) in &fits {
                let (h, metric, Some(_)) = key else { continue };
                if *h != host {
                    continue;
                }
                let rise: f64 = fit
                    .iter()
                    .filter(|(t, _)| inside(t))
                    .map(|(_, j)| (j.value - j.baseline).max(0.0))
                    .sum();
                if rise > 0.0 {
                    rises.entry(metric.as_str()).or_default().push((key, rise));
                }
            }
            let share = |key: &SeriesKey| {
                let per = rises.get(key.1.as_str())?;
                let total: f64 = per.iter().map(|(_, r)| r).sum();
                per.iter().find(|(k, _)| *k == key).map(|(_, r)| r / total)
            };
            // Programs that departed, by score; else those that rose, by share.
            let mut best: BTreeMap<String, Contributor> = BTreeMap::new();
            let departed: Vec<&Departure> = metrics.iter().filter(|m| m.comm.is_some()).collect();
            let candidates: Vec<(SeriesKey, f64)> = if departed.is_empty() {
                rises
                    .values()
                    .flatten()
                    .map(|(key, _)| ((*key).clone(), 0.0))
                    .collect()
            } else {
                departed
                    .iter()
                    .map(|m| ((host.clone(), m.metric.clone(), m.comm.clone()), m.score))
                    .collect()
            };
            for (key, score) in candidates {
                let Some(share) = share(&key) else { continue };
                let comm = key.2.clone().unwrap_or_default();
                let better = best
                    .get(&comm)
                    .is_none_or(|c| (c.score, c.share) < (score, share));
                if better {
                    best.insert(
                        comm.clone(),
                        Contributor {
                            pid: top_pid(&key, &inside).unwrap_or_default(),
                            comm: Some(comm),
                            metric: key.1.clone(),
                            share,
                            score,
                            threads: Vec::new(),
                            stacks: Vec::new(),
                        },
                    );
                }
            }
            let mut contributors: Vec<Contributor> = best.into_values().collect();
            contributors.sort_by(|a, b| {
                (b.score, b.share)
                    .partial_cmp(&(a.score, a.share))
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(a.pid.cmp(&b.pid))
            });
            contributors.truncate(MAX_CONTRIBUTORS);

            out.push(Incident {
                host: host.clone(),
                start: first,
                end: last + interval_ns,
                peak,
                kinds: kinds.into_iter().map(|(k, _)| k).collect(),
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
            kind: "cpu",
        },
        MetricSpec {
            name: "process_cpu",
            unit: "%",
            per_process: true,
            zero_when_missing: true,
            floor: 25.0,
            kind: "cpu",
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
        named(k, pid, &format!("p{pid}"), value)
    }

    fn named(k: i64, pid: i32, comm: &str, value: f64) -> Sample {
        Sample {
            host: None,
            interval: k * IV,
            metric: "process_cpu".into(),
            pid: Some(pid),
            comm: Some(comm.into()),
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

    fn find(samples: &[Sample]) -> Vec<Incident> {
        incidents(samples, SPECS, IV, None, 1.0)
    }

    /// (first interval, end interval) of each incident.
    fn spans(found: &[Incident]) -> Vec<(i64, i64)> {
        found.iter().map(|i| (i.start / IV, i.end / IV)).collect()
    }

    #[test]
    fn median_and_quartiles_ignore_a_minority_of_outliers() {
        let mut sorted = vec![10.0, 11.0, 9.0, 10.0, 1000.0, 10.0, 12.0];
        sorted.sort_by(f64::total_cmp);
        let (m, s) = robust_baseline(&sorted);
        assert_eq!(m, 10.0);
        // Quartiles 10 and 11.5 (interpolated between 11 and 12): 1.5 / 1.349.
        assert!((s - 1.5 / 1.349).abs() < 1e-9, "{s}");
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn quiet_series_have_no_incident() {
        assert_eq!(find(&quiet(400, |_| vec![])), vec![]);
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
        let found = incidents(&samples, SPECS, IV, Some(25 * IV), 1.0);
        assert_eq!(spans(&found), [(25, 30)], "{found:#?}");
        assert_eq!(found[0].metrics[0].pid, Some(77));
        assert_eq!(found[0].metrics[0].baseline, 0.0);
        assert!(found[0].metrics[0].new);
        assert_eq!(found[0].kinds, [NEW_PROCESS]);
        // The range alone is its own baseline: nothing departs.
        let range_only: Vec<Sample> = samples
            .iter()
            .filter(|s| s.interval >= 25 * IV)
            .cloned()
            .collect();
        assert_eq!(find(&range_only), vec![]);
    }

    #[test]
    fn a_burst_is_one_incident_with_its_process_first() {
        // A hog at 100 % in intervals 12 and 13, with ctxt at 12000 and 9000/s
        // then (quiet values plus these); a second process adds a little in 13.
        let samples = quiet(30, |k| match k {
            12 => vec![process(k, 77, 100.0), system(k, 6_400.0)],
            13 => vec![
                process(k, 77, 60.0),
                process(k, 88, 20.0),
                system(k, 3_850.0),
            ],
            _ => vec![],
        });
        let found = find(&samples);
        assert_eq!(spans(&found), [(12, 14)], "{found:#?}");
        let incident = &found[0];
        assert_eq!(incident.peak, 12 * IV);
        // 88's 20 % is under the floor: only ctxt and 77 departed.
        let departed: Vec<(&str, Option<i32>)> = incident
            .metrics
            .iter()
            .map(|m| (m.metric.as_str(), m.pid))
            .collect();
        assert_eq!(departed.len(), 2, "{departed:?}");
        assert!(
            departed.contains(&("process_cpu", Some(77))),
            "{departed:?}"
        );
        let ctxt = incident
            .metrics
            .iter()
            .find(|m| m.metric == "ctxt")
            .unwrap();
        assert_eq!(ctxt.observed, 12_000.0);
        // Too little history yet: the median of the series' 30 values, and
        // 5 spreads from their quartiles (5150 and 5450: 300 / 1.349).
        assert_eq!(ctxt.baseline, 5300.0);
        let margin = 5.0 * 300.0 / 1.349;
        assert!(
            (ctxt.normal_max - (5300.0 + margin)).abs() < 1e-6,
            "{ctxt:?}"
        );
        assert!((ctxt.score - 6700.0 / margin).abs() < 1e-9, "{ctxt:?}");
        // Only the program that departed contributes: 77 rose by 160
        // points, 88 by 20, the daemon by 0.5 (median 3.5; 3 then 4).
        assert_eq!(incident.contributors.len(), 1, "{incident:#?}");
        let first = &incident.contributors[0];
        assert_eq!((first.pid, first.comm.as_deref()), (77, Some("p77")));
        assert!((first.share - 160.0 / 180.5).abs() < 1e-9, "{first:?}");
        assert!((first.score - 4.0).abs() < 1e-9, "{first:?}");
    }

    #[test]
    fn a_process_that_renames_itself_is_one_program_in_the_interval() {
        // pid 77 runs 80 % under its parent's name (not switched out since
        // the fork), then 30 % under it and 60 % as `hog`, then 20 % as
        // `hog`; pid 77 again after a gap is another process, `other`.
        let samples = quiet(30, |k| match k {
            20 => vec![named(k, 77, "parent", 100.0)],
            21 => vec![named(k, 77, "parent", 30.0), named(k, 77, "hog", 60.0)],
            22 => vec![named(k, 77, "hog", 20.0)],
            25 => vec![named(k, 77, "other", 80.0)],
            _ => vec![],
        });
        let found = find(&samples);
        assert_eq!(spans(&found), [(20, 22), (25, 26)], "{found:#?}");
        let departed = |i: usize| -> Vec<(Option<&str>, f64)> {
            found[i]
                .metrics
                .iter()
                .map(|m| (m.comm.as_deref(), m.observed))
                .collect()
        };
        assert_eq!(departed(0), [(Some("hog"), 100.0)]);
        assert_eq!(departed(1), [(Some("other"), 80.0)]);
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
        let all = find(&samples);
        let found: Vec<(Option<&str>, i64, i64)> = all
            .iter()
            .map(|i| (i.host.as_deref(), i.start / IV, i.end / IV))
            .collect();
        assert_eq!(found, [(None, 5, 6), (Some("b"), 6, 7), (None, 20, 21)]);
    }

    #[test]
    fn a_program_that_bursts_as_usual_is_normal_and_a_higher_burst_is_not() {
        // Every 30 intervals a new `cron-job` process runs 2 intervals at 40 %;
        // the ninth time at 95 %.
        let samples = quiet(300, |k| {
            let run = k / 30;
            match k % 30 {
                0 | 1 => vec![named(
                    k,
                    1000 + run as i32,
                    "cron-job",
                    if run == 8 { 95.0 } else { 40.0 },
                )],
                _ => vec![],
            }
        });
        let found = find(&samples);
        // Before it has history (its first 30 intervals) and until it has
        // burst three times, each run departs; then only the higher one.
        assert_eq!(
            spans(&found),
            [(0, 2), (30, 32), (60, 62), (240, 242)],
            "{found:#?}"
        );
        let high = &found[3].metrics[0];
        assert_eq!(
            (high.comm.as_deref(), high.pid),
            (Some("cron-job"), Some(1008))
        );
        assert!(!high.new, "{high:?}");
        // Normal up to the usual 40 (baseline 0) plus the 25 floor.
        assert_eq!(high.normal_max, 65.0);
        assert_eq!(found[3].kinds, ["cpu"]);
    }

    #[test]
    fn a_long_incident_does_not_become_its_own_normal() {
        // A hog from interval 100 to 160 after 100 quiet ones.
        let samples = quiet(200, |k| match k {
            100..160 => vec![process(k, 77, 100.0)],
            _ => vec![],
        });
        assert_eq!(spans(&find(&samples)), [(100, 160)]);
    }

    #[test]
    fn the_same_time_yesterday_is_history() {
        // ctxt at 5000/s, yesterday rising slowly to 20000/s over six hours
        // (2160 intervals) and staying there for five more; today jumping
        // to 20000/s at the hour the rise had ended: as high as yesterday
        // at this time, it does not depart (it would against the trailing
        // hours alone).
        let day = DAY_NS / IV;
        let level = |k: i64| match k {
            0..2160 => 5000.0 + 15_000.0 * k as f64 / 2160.0,
            2160..4000 => 20_000.0,
            k if (day + 2160..day + 4000).contains(&k) => 20_000.0,
            _ => 5000.0,
        };
        let day_after = |jump: f64| -> Vec<Sample> {
            (0..day + 4000)
                .map(|k| {
                    let noise = 150.0 * ((k * 7) % 5) as f64;
                    let extra = if k == day + 3000 { jump } else { 0.0 };
                    system(k, level(k) + noise + extra)
                })
                .collect()
        };
        assert_eq!(spans(&find(&day_after(0.0))), []);
        // Beyond yesterday's level, it departs.
        assert_eq!(
            spans(&find(&day_after(10_000.0))),
            [(day + 3000, day + 3001)]
        );
        // Yesterday's incidents are not what is normal: a burst departs
        // again the day after.
        let samples = quiet(day + 200, |k| match k % day {
            100..112 => vec![named(k, 500, "nightly", 90.0)],
            _ => vec![],
        });
        assert_eq!(spans(&find(&samples)), [(100, 112), (day + 100, day + 112)]);
    }

    #[test]
    fn sensitivity_scales_the_margin() {
        // A rise to 40 % where the floor is 25: no departure at 1, one at 2;
        // 100 % departs at 1 and not at 0.2.
        let samples = quiet(60, |k| match k {
            40 => vec![process(k, 77, 20.0)],
            50 => vec![process(k, 88, 100.0)],
            _ => vec![],
        });
        let at = |sensitivity| spans(&incidents(&samples, SPECS, IV, None, sensitivity));
        assert_eq!(at(1.0), [(50, 51)]);
        assert_eq!(at(2.0), [(40, 41), (50, 51)]);
        assert_eq!(at(0.2), []);
    }

    #[test]
    fn short_ranges_have_no_baseline() {
        let samples: Vec<Sample> = (0..3)
            .map(|k| process(k, 5, [0.0, 0.0, 99.0][k as usize]))
            .collect();
        assert_eq!(find(&samples), vec![]);
    }

    #[test]
    fn unknown_metrics_are_ignored() {
        let samples: Vec<Sample> = (0..10)
            .map(|k| Sample {
                metric: "nonsense".into(),
                ..system(k, if k == 5 { 1e9 } else { 1.0 })
            })
            .collect();
        assert_eq!(find(&samples), vec![]);
    }
}
