//! `hindsight export pprof`: on-CPU or off-CPU stacks as a gzipped pprof
//! `Profile` (google/pprof's profile.proto), for `go tool pprof`, Grafana
//! Pyroscope and speedscope.
//!
//! It weighs and names stacks with the flame graph's own SQL
//! ([`flamegraph::weights_cte`] and [`flamegraph::stack_frames_ctes`]), so a
//! profile and the folded output of the same flags hold the same stacks with
//! the same totals. As in the flame graph, the thread name is the root frame
//! of every stack (a location of its own, without a mapping).
//!
//! Sample values: on-CPU `samples/count` and `cpu/nanoseconds` (samples
//! times the sampling period, 1 s / `sample_frequency` of recording.json,
//! left out when the recording does not say it);
//! off-CPU `off_cpu/nanoseconds`. Locations are the recording's frames, one
//! per `frame_id`; functions are the names the flame graph shows (kernel
//! frames end in `_[k]`, unnamed user frames are `[module+0xoffset]`);
//! mappings are the frames' modules with their build ids.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Context;
use arrow::array::RecordBatch;
use flate2::write::GzEncoder;
use prost::Message;

use super::proto::pprof::{Function, Line, Location, Mapping, Profile, Sample, ValueType};
use crate::columns::{frame_position, i64s, opt_i64, opt_str, strings, u64s};
use crate::flamegraph::{self, Mode, Options};
use crate::recording::Recording;

/// The statement: one row per (thread name, stack, frame), leaf first.
pub fn sql(o: &Options) -> String {
    format!(
        "WITH {},\n{}\n\
         SELECT w.comm, w.stack_id, CAST(w.weight AS BIGINT) AS weight, n.depth, n.frame_id, n.name,\n  \
         n.kind, n.module, n.build_id, n.address, n.file_offset, n.function, n.file, n.line\n\
         FROM weights w\n\
         LEFT JOIN named n ON n.stack_id = w.stack_id\n\
         WHERE w.weight > 0\n\
         ORDER BY w.comm, w.stack_id, n.depth",
        flamegraph::weights_cte(o),
        flamegraph::stack_frames_ctes("weights")
    )
}

/// What went into a profile, for the summary on stderr and for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub samples: usize,
    /// The sum of the first sample value: samples on-CPU, ns off-CPU.
    pub total: i64,
}

/// Weighs the stacks of `o` and writes them to `out` as a gzipped profile.
pub async fn export(
    recordings: &[std::path::PathBuf],
    options: &Options,
    window: (Option<crate::when::When>, Option<crate::when::When>),
    partitions: usize,
    out: &mut dyn Write,
) -> anyhow::Result<Summary> {
    let (opened, ctx, options) = flamegraph::prepare(recordings, options, window, partitions)?;
    let batches = crate::catalog::query_batches(&ctx, &sql(&options))
        .await
        .map_err(crate::catalog::one_line)?;
    let period_ns = match options.mode {
        Mode::OnCpu => sampling_period_ns(&opened),
        Mode::OffCpu => None,
    };
    let range = crate::report::time_range(&opened);
    let start = options.from.or(range.map(|r| r.0)).unwrap_or(0);
    let end = options.to.or(range.map(|r| r.1)).unwrap_or(start);
    let mut builder = Builder::new(options.mode, period_ns);
    builder.profile.time_nanos = start;
    builder.profile.duration_nanos = (end - start).max(0);
    for batch in &batches {
        builder
            .add(batch)
            .context("reading the profile query's result")?;
    }
    let summary = builder.summary();
    let profile = builder.finish();
    let mut gz = GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?.flush()?;
    Ok(summary)
}

/// 1 s / the CPU sampling frequency the recordings' sessions used; None
/// (with a note) when no session says.
fn sampling_period_ns(recordings: &[Recording]) -> Option<i64> {
    let mut frequencies: Vec<u32> = recordings
        .iter()
        .flat_map(|r| r.meta.sessions.iter().map(|s| s.sample_frequency))
        .filter(|f| *f > 0)
        .collect();
    frequencies.sort_unstable();
    frequencies.dedup();
    match frequencies.as_slice() {
        [] => {
            eprintln!(
                "hindsight: note: the recording does not say its sampling frequency: the profile has samples/count only"
            );
            None
        }
        [one] => Some(1_000_000_000 / i64::from(*one)),
        several => {
            let last = *several.last().unwrap();
            eprintln!(
                "hindsight: note: sessions sampled at different frequencies ({several:?} Hz): cpu/nanoseconds assumes {last} Hz"
            );
            Some(1_000_000_000 / i64::from(last))
        }
    }
}

/// Where a location comes from: a recorded frame, or a thread name (the root).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum LocationKey {
    Frame(i64),
    Thread(String),
}

/// A profile being built: strings, functions, mappings and locations
/// deduplicated by what identifies them.
struct Builder {
    profile: Profile,
    mode: Mode,
    period_ns: Option<i64>,
    string_ids: HashMap<String, i64>,
    function_ids: HashMap<(i64, i64), u64>,
    mapping_ids: HashMap<(i64, i64), u64>,
    location_ids: HashMap<LocationKey, u64>,
    /// The sample being gathered: thread name, stack id, weight, locations leaf first.
    open: Option<(String, Option<i64>, i64, Vec<u64>)>,
}

impl Builder {
    fn new(mode: Mode, period_ns: Option<i64>) -> Builder {
        let mut b = Builder {
            profile: Profile::default(),
            mode,
            period_ns,
            string_ids: HashMap::new(),
            function_ids: HashMap::new(),
            mapping_ids: HashMap::new(),
            location_ids: HashMap::new(),
            open: None,
        };
        b.string(""); // string_table[0] must be "".
        let types: &[(&str, &str)] = match (mode, period_ns) {
            (Mode::OnCpu, Some(_)) => &[("samples", "count"), ("cpu", "nanoseconds")],
            (Mode::OnCpu, None) => &[("samples", "count")],
            (Mode::OffCpu, _) => &[("off_cpu", "nanoseconds")],
        };
        for (kind, unit) in types {
            let value_type = ValueType {
                ty: b.string(kind),
                unit: b.string(unit),
            };
            b.profile.sample_type.push(value_type);
        }
        let last = b.profile.sample_type.last().cloned();
        b.profile.default_sample_type = last.as_ref().map_or(0, |t| t.ty);
        if let (Mode::OnCpu, Some(period)) = (mode, period_ns) {
            b.profile.period_type = last;
            b.profile.period = period;
        }
        b
    }

    fn string(&mut self, text: &str) -> i64 {
        if let Some(id) = self.string_ids.get(text) {
            return *id;
        }
        let id = self.profile.string_table.len() as i64;
        self.profile.string_table.push(text.to_owned());
        self.string_ids.insert(text.to_owned(), id);
        id
    }

    fn function(&mut self, name: &str, system_name: Option<&str>, file: Option<&str>) -> u64 {
        let name = self.string(name);
        let file = file.map_or(0, |f| self.string(f));
        let system_name = system_name.map_or(name, |s| self.string(s));
        let next = self.profile.function.len() as u64 + 1;
        let id = *self.function_ids.entry((name, file)).or_insert(next);
        if id == next {
            self.profile.function.push(Function {
                id,
                name,
                system_name,
                filename: file,
                start_line: 0,
            });
        }
        id
    }

    fn mapping(&mut self, module: &str, build_id: Option<&str>) -> u64 {
        let filename = self.string(module);
        let build_id = build_id.map_or(0, |b| self.string(b));
        let next = self.profile.mapping.len() as u64 + 1;
        let id = *self.mapping_ids.entry((filename, build_id)).or_insert(next);
        if id == next {
            self.profile.mapping.push(Mapping {
                id,
                filename,
                build_id,
                has_functions: true,
                ..Mapping::default()
            });
        }
        id
    }

    fn location(&mut self, key: LocationKey, make: impl FnOnce(&mut Builder) -> Location) -> u64 {
        if let Some(id) = self.location_ids.get(&key) {
            return *id;
        }
        let id = self.profile.location.len() as u64 + 1;
        let location = Location { id, ..make(self) };
        self.profile.location.push(location);
        self.location_ids.insert(key, id);
        id
    }

    /// Adds the rows of one result batch (ordered by comm, stack, depth).
    fn add(&mut self, batch: &RecordBatch) -> anyhow::Result<()> {
        let comm = strings(batch, "comm")?;
        let stack_id = i64s(batch, "stack_id")?;
        let weight = i64s(batch, "weight")?;
        let frame_id = i64s(batch, "frame_id")?;
        let name = strings(batch, "name")?;
        let module = strings(batch, "module")?;
        let build_id = strings(batch, "build_id")?;
        let address = u64s(batch, "address")?;
        let file_offset = u64s(batch, "file_offset")?;
        let function = strings(batch, "function")?;
        let file = strings(batch, "file")?;
        let line = i64s(batch, "line")?;
        for row in 0..batch.num_rows() {
            let key = (
                opt_str(&comm, row).unwrap_or("[unknown]"),
                opt_i64(&stack_id, row),
            );
            let same = matches!(&self.open, Some((c, s, _, _)) if c == key.0 && *s == key.1);
            if !same {
                self.close_sample();
                self.open = Some((
                    key.0.to_owned(),
                    key.1,
                    opt_i64(&weight, row).unwrap_or(0),
                    Vec::new(),
                ));
            }
            let Some(frame) = opt_i64(&frame_id, row) else {
                continue; // a sample without a stack, or a stack without rows
            };
            let frame_name = opt_str(&name, row).unwrap_or("[unknown]").to_owned();
            let raw_function = opt_str(&function, row).map(str::to_owned);
            let file_name = opt_str(&file, row).map(str::to_owned);
            let module_name = opt_str(&module, row).map(str::to_owned);
            let build = opt_str(&build_id, row).map(str::to_owned);
            let source_line = opt_i64(&line, row).unwrap_or(0);
            // A mapping here starts at 0 with offset 0, so a frame in a file
            // is at its file offset, as pprof turns addresses into offsets
            // to look them up in the binary.
            let pc = frame_position(&file_offset, &address, row).unwrap_or(0);
            let id = self.location(LocationKey::Frame(frame), |b| {
                let function_id =
                    b.function(&frame_name, raw_function.as_deref(), file_name.as_deref());
                Location {
                    mapping_id: module_name
                        .as_deref()
                        .map_or(0, |m| b.mapping(m, build.as_deref())),
                    address: pc,
                    line: vec![Line {
                        function_id,
                        line: source_line,
                    }],
                    ..Location::default()
                }
            });
            if let Some((_, _, _, locations)) = &mut self.open {
                locations.push(id);
            }
        }
        Ok(())
    }

    /// Turns the gathered sample into a pprof `Sample`, the thread as its root.
    fn close_sample(&mut self) {
        let Some((comm, _, weight, mut locations)) = self.open.take() else {
            return;
        };
        let root = self.location(LocationKey::Thread(comm.clone()), |b| Location {
            line: vec![Line {
                function_id: b.function(&comm, None, None),
                line: 0,
            }],
            ..Location::default()
        });
        locations.push(root);
        let value = match (self.mode, self.period_ns) {
            (Mode::OnCpu, Some(period)) => vec![weight, weight.saturating_mul(period)],
            _ => vec![weight],
        };
        self.profile.sample.push(Sample {
            location_id: locations,
            value,
            label: Vec::new(),
        });
    }

    fn summary(&mut self) -> Summary {
        self.close_sample();
        Summary {
            samples: self.profile.sample.len(),
            total: self.profile.sample.iter().map(|s| s.value[0]).sum(),
        }
    }

    fn finish(mut self) -> Profile {
        self.close_sample();
        self.profile
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray, UInt64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    /// A row as the statement returns it: comm, stack, weight, frame, name.
    type Row<'a> = (&'a str, Option<i64>, i64, Option<i64>, Option<&'a str>);

    fn batch(rows: &[Row]) -> RecordBatch {
        let n = rows.len();
        let text = |name: &str| Field::new(name, DataType::Utf8, true);
        let int = |name: &str| Field::new(name, DataType::Int64, true);
        let schema = Arc::new(Schema::new(vec![
            text("comm"),
            int("stack_id"),
            int("weight"),
            int("frame_id"),
            text("name"),
            text("module"),
            text("build_id"),
            Field::new("address", DataType::UInt64, true),
            Field::new("file_offset", DataType::UInt64, true),
            text("function"),
            text("file"),
            int("line"),
        ]));
        let nulls = || Arc::new(StringArray::from(vec![None::<&str>; n]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.3))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.4))),
                Arc::new(StringArray::from_iter(
                    rows.iter().map(|r| r.4.map(|_| "/bin/app")),
                )),
                nulls(),
                Arc::new(UInt64Array::from(vec![Some(u64::MAX); n])),
                Arc::new(UInt64Array::from_iter(
                    rows.iter().map(|r| (r.3 == Some(11)).then_some(0x1234)),
                )),
                nulls(),
                nulls(),
                Arc::new(Int64Array::from(vec![None; n])),
            ],
        )
        .unwrap()
    }

    fn names(profile: &Profile, sample: &Sample) -> Vec<String> {
        sample
            .location_id
            .iter()
            .map(|id| {
                let location = &profile.location[*id as usize - 1];
                let function = &profile.function[location.line[0].function_id as usize - 1];
                profile.string_table[function.name as usize].clone()
            })
            .collect()
    }

    #[test]
    fn samples_are_leaf_first_with_the_thread_as_root_and_shared_locations() {
        let mut b = Builder::new(Mode::OnCpu, Some(10_000_000));
        b.add(&batch(&[
            ("app", Some(1), 3, Some(11), Some("work")),
            ("app", Some(1), 3, Some(10), Some("main")),
            ("app", Some(2), 1, Some(10), Some("main")),
            ("app", None, 2, None, None),
        ]))
        .unwrap();
        // A batch boundary inside a sample must not split it.
        b.add(&batch(&[("other", Some(1), 5, Some(11), Some("work"))]))
            .unwrap();
        b.add(&batch(&[("other", Some(1), 5, Some(10), Some("main"))]))
            .unwrap();
        assert_eq!(
            b.summary(),
            Summary {
                samples: 4,
                total: 11
            }
        );
        let p = b.finish();
        let stacks: Vec<(Vec<String>, Vec<i64>)> = p
            .sample
            .iter()
            .map(|s| (names(&p, s), s.value.clone()))
            .collect();
        assert_eq!(
            stacks,
            [
                (
                    vec!["work".into(), "main".into(), "app".into()],
                    vec![3, 30_000_000]
                ),
                (vec!["main".into(), "app".into()], vec![1, 10_000_000]),
                (vec!["app".into()], vec![2, 20_000_000]),
                (
                    vec!["work".into(), "main".into(), "other".into()],
                    vec![5, 50_000_000]
                ),
            ]
        );
        // Frames 10 and 11, and the two threads: four locations, one mapping.
        assert_eq!(p.location.len(), 4);
        assert_eq!(p.mapping.len(), 1);
        // Frame 11 is in a file, at its offset; frame 10 only at its address.
        assert_eq!(p.location[0].address, 0x1234);
        assert_eq!(p.location[1].address, u64::MAX);
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.period, 10_000_000);
        let t = &p.sample_type[p.sample_type.len() - 1];
        assert_eq!(p.string_table[t.ty as usize], "cpu");
        assert_eq!(p.default_sample_type, t.ty);
    }
}
