//! Names, at read time, the user frames the recorder could not name, and
//! gives file and line to those it named from a symbol table alone (a
//! binary over its DWARF limit), from separate debug files the reader
//! points at with `--debug-dir`: found by
//! build id where gdb and perf look (`DIR/.build-id/ab/cdef….debug`, as
//! /usr/lib/debug holds them) or where a debuginfod client caches them
//! (`DIR/abcdef…/debuginfo`), and looked up by the frame's
//! `elf_address` (a debug file keeps no code, so no file offsets).
//!
//! The recording is never changed: with debug directories set, `frame` is
//! a view over the recorded rows that fills `function`, `file`, `line` and
//! `inlined` where the recorder left them null, through the scalar function
//! `debug_symbol(build_id, elf_address)`, called for the rows without a
//! `file`. Each (build id, address) is looked up once per run, and each
//! build id's debug file found once.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
};

use arrow::{
    array::{Array, ArrayRef, AsArray, Int32Builder, StringBuilder, StructArray},
    compute::cast,
    datatypes::{DataType, Field, Fields, UInt64Type},
};
use blazesym::symbolize::{
    source::{Elf, Source},
    Input, Symbolized, Symbolizer,
};
use datafusion::{
    error::Result,
    functions::core::expr_fn::get_field,
    logical_expr::{
        col, expr_fn::when, ColumnarValue, LogicalPlan, LogicalPlanBuilder, ScalarFunctionArgs,
        ScalarUDF, ScalarUDFImpl, Signature, Volatility,
    },
    prelude::{coalesce, Expr},
};

static DEBUG_DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// Sets the `--debug-dir` directories, once, before the first session.
pub fn set_debug_dirs(dirs: Vec<PathBuf>) {
    let _ = DEBUG_DIRS.set(dirs);
}

fn debug_dirs() -> &'static [PathBuf] {
    DEBUG_DIRS.get().map_or(&[], Vec::as_slice)
}

/// True when frames are to be named from debug directories.
pub fn active() -> bool {
    !debug_dirs().is_empty()
}

/// The debug file of `build_id` (lowercase hex, as recorded) under one of
/// `dirs`, in either layout. Anything but hex is refused: a recording is
/// input, and its build ids must not walk out of the directories.
pub fn debug_file(dirs: &[PathBuf], build_id: &str) -> Option<PathBuf> {
    let hex = build_id.len() >= 4
        && build_id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hex {
        return None;
    }
    let (head, tail) = build_id.split_at(2);
    dirs.iter()
        .flat_map(|dir| {
            [
                dir.join(".build-id")
                    .join(head)
                    .join(format!("{tail}.debug")),
                dir.join(build_id).join("debuginfo"),
            ]
        })
        .find(|path| path.is_file())
}

/// What a debug file says of one address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<i32>,
    pub inlined: Option<String>,
}

/// Looks addresses up in debug files, remembering every answer (blazesym's
/// symbolizer is not `Send`: a batch brings its own).
struct Namer {
    dirs: Vec<PathBuf>,
    answers: HashMap<(String, u64), Option<Named>>,
    /// Per build id, its debug file if the directories hold one: most rows
    /// asked about are of binaries with none.
    files: HashMap<String, Option<PathBuf>>,
}

impl Namer {
    fn name(&mut self, symbolizer: &Symbolizer, build_id: &str, address: u64) -> Option<Named> {
        let key = (build_id.to_string(), address);
        if let Some(answer) = self.answers.get(&key) {
            return answer.clone();
        }
        let dirs = &self.dirs;
        let file =
            (self.files.entry(build_id.to_string())).or_insert_with(|| debug_file(dirs, build_id));
        let answer = file
            .as_ref()
            .and_then(|file| look_up(symbolizer, file, address));
        self.answers.insert(key, answer.clone());
        answer
    }
}

/// Function, source line and inlined functions at `address` of `file`.
fn look_up(symbolizer: &Symbolizer, file: &Path, address: u64) -> Option<Named> {
    let mut elf = Elf::new(file);
    elf.debug_syms = true;
    let Ok(Symbolized::Sym(sym)) =
        symbolizer.symbolize_single(&Source::Elf(elf), Input::VirtOffset(address))
    else {
        return None;
    };
    let (file, line) = match &sym.code_info {
        Some(code) => {
            let path = match &code.dir {
                Some(dir) => dir.join(&*code.file),
                None => PathBuf::from(&*code.file),
            };
            (
                Some(path.to_string_lossy().into_owned()),
                code.line.and_then(|l| i32::try_from(l).ok()),
            )
        }
        None => (None, None),
    };
    let inlined: Vec<&str> = sym.inlined.iter().map(|f| f.name.as_ref()).collect();
    Some(Named {
        function: sym.name.to_string(),
        file,
        line,
        inlined: (!inlined.is_empty()).then(|| inlined.join(";")),
    })
}

/// The names filled in, in the order of `frame`'s columns.
const NAMED_COLUMNS: [(&str, DataType); 4] = [
    ("function", DataType::Utf8),
    ("file", DataType::Utf8),
    ("line", DataType::Int32),
    ("inlined", DataType::Utf8),
];

fn named_fields() -> Fields {
    NAMED_COLUMNS
        .iter()
        .map(|(name, ty)| Field::new(*name, ty.clone(), true))
        .collect()
}

/// `debug_symbol(build_id, elf_address)`: a struct of the columns of
/// [`NAMED_COLUMNS`], null where no debug file names the address.
#[derive(Debug)]
struct DebugSymbol {
    signature: Signature,
    namer: Mutex<Namer>,
}

impl PartialEq for DebugSymbol {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for DebugSymbol {}

impl std::hash::Hash for DebugSymbol {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl std::fmt::Debug for Namer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namer").field("dirs", &self.dirs).finish()
    }
}

impl ScalarUDFImpl for DebugSymbol {
    fn name(&self) -> &str {
        "debug_symbol"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Struct(named_fields()))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ids = cast(&arrays[0], &DataType::Utf8)?;
        let ids = ids.as_string::<i32>();
        let addresses = cast(&arrays[1], &DataType::UInt64)?;
        let addresses = addresses.as_primitive::<UInt64Type>();
        let (mut function, mut file, mut line, mut inlined) = (
            StringBuilder::new(),
            StringBuilder::new(),
            Int32Builder::new(),
            StringBuilder::new(),
        );
        let mut namer = self.namer.lock().unwrap_or_else(|e| e.into_inner());
        let symbolizer = Symbolizer::new();
        let mut valid = Vec::with_capacity(ids.len());
        for row in 0..ids.len() {
            let named = (ids.is_valid(row) && addresses.is_valid(row))
                .then(|| namer.name(&symbolizer, ids.value(row), addresses.value(row)))
                .flatten();
            valid.push(named.is_some());
            let named = named.unwrap_or_default();
            function.append_option(valid[row].then_some(named.function));
            file.append_option(named.file);
            line.append_option(named.line);
            inlined.append_option(named.inlined);
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(function.finish()),
            Arc::new(file.finish()),
            Arc::new(line.finish()),
            Arc::new(inlined.finish()),
        ];
        let nulls = valid.iter().any(|v| !v).then(|| valid.into());
        Ok(ColumnarValue::Array(Arc::new(StructArray::try_new(
            named_fields(),
            columns,
            nulls,
        )?)))
    }
}

/// `plan` (the recorded `frame` rows) with the names the debug directories
/// give where the recorder left them null: the function it named from a
/// symbol table stays, and gains file, line and inlined functions.
pub fn named_frames(plan: LogicalPlan) -> Result<LogicalPlan> {
    let udf = ScalarUDF::new_from_impl(DebugSymbol {
        signature: Signature::any(2, Volatility::Immutable),
        namer: Mutex::new(Namer {
            dirs: debug_dirs().to_vec(),
            answers: HashMap::new(),
            files: HashMap::new(),
        }),
    });
    let without_file = col("file")
        .is_null()
        .and(col("build_id").is_not_null())
        .and(col("elf_address").is_not_null());
    let found = when(
        without_file,
        udf.call(vec![col("build_id"), col("elf_address")]),
    )
    .end()?;
    let columns: Vec<Expr> = plan
        .schema()
        .fields()
        .iter()
        .map(|field| {
            let name = field.name();
            if NAMED_COLUMNS.iter().any(|(n, _)| n == name) {
                coalesce(vec![col(name), get_field(found.clone(), name.as_str())]).alias(name)
            } else {
                col(name)
            }
        })
        .collect();
    LogicalPlanBuilder::from(plan).project(columns)?.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_files_are_found_by_build_id_and_only_by_hex() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join(".build-id/ab/cdef01.debug");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, b"").unwrap();
        let dirs = [root.path().join("missing"), root.path().to_path_buf()];
        assert_eq!(debug_file(&dirs, "abcdef01"), Some(file));
        assert_eq!(debug_file(&dirs, "abcdef02"), None);
        // A debuginfod client's cache.
        let cached = root.path().join("abcdef03/debuginfo");
        std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
        std::fs::write(&cached, b"").unwrap();
        assert_eq!(debug_file(&dirs, "abcdef03"), Some(cached));
        for hostile in ["../../etc", "ab/../cdef01", "ABCDEF01", "ab"] {
            assert_eq!(debug_file(&dirs, hostile), None, "{hostile}");
        }
    }
}
