//! `linea prepare --threads`: the input cut into ranges parsed on threads gives the grid one
//! reader of the whole file gives, byte for byte, and the same error at the same line.
//!
//! Random libsvm, VW, Criteo and CSV inputs (blank lines, comments, VW namespaces without
//! features, CSV quotes that hand the rest of the file to one reader, a malformed line) are
//! prepared once as one range on one thread and again cut into ranges of a few bytes on one,
//! two and three threads.

mod common;

use common::spec;
use linea_worker::input::Format;
use linea_worker::input::ranges::RANGE_BYTES;
use linea_worker::prepare::{PrepareOptions, prepare};
use linea_worker::progress::Progress;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Every file under `dir`, by relative path.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// The grid's files, or the error's text.
fn prepared(
    input: &Path,
    format: Format,
    threads: usize,
    range_bytes: usize,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let dir = tempfile::tempdir().unwrap();
    let storage = linea_worker::storage::open(&dir.path().to_string_lossy()).unwrap();
    let options = PrepareOptions {
        input: input.to_string_lossy().into_owned(),
        spec: spec(format),
        rows_per_shard: 5,
        reuse: false,
        threads,
        range_bytes,
    };
    prepare(&options, storage.as_ref(), &Progress::silent()).map(|_| files(dir.path())).map_err(|e| e.to_string())
}

fn libsvm_line() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0u8..2, prop::collection::vec((1u32..30, prop_oneof![Just("1"), Just("0.5"), Just("-2"), Just("0")]), 0..6))
            .prop_map(|(label, features)| {
                let mut line = label.to_string();
                for (i, v) in features {
                    line += &format!(" {i}:{v}");
                }
                line
            }),
        1 => Just(String::new()),
        1 => Just("1 3:1 # a comment".to_string()),
    ]
}

fn vw_line() -> impl Strategy<Value = String> {
    let namespace = prop_oneof![Just("a"), Just("b"), Just("c"), Just("zz:2"), Just("")];
    let feature = prop_oneof![Just("x"), Just("y:2"), Just("w:0"), Just("v:-1.5"), Just("u")];
    prop_oneof![
        8 => (0u8..2, prop::collection::vec((namespace, prop::collection::vec(feature, 0..3)), 0..4)).prop_map(
            |(label, segments)| {
                let mut line = label.to_string();
                for (ns, features) in segments {
                    line += &format!(" |{ns} {}", features.join(" "));
                }
                line
            }
        ),
        1 => Just(String::new()),
    ]
}

fn criteo_line() -> impl Strategy<Value = String> {
    let int = prop_oneof![Just(""), Just("0"), Just("3"), Just("-1"), Just("250")];
    let cat = prop_oneof![Just(""), Just("68fd1e64"), Just("80e26c9b"), Just("fb936136")];
    (0u8..2, prop::collection::vec(int, 13), prop::collection::vec(cat, 26)).prop_map(|(label, ints, cats)| {
        let mut fields = vec![label.to_string()];
        fields.extend(ints.iter().map(|s| s.to_string()));
        fields.extend(cats.iter().map(|s| s.to_string()));
        fields.join("\t")
    })
}

fn csv_line() -> impl Strategy<Value = String> {
    let num = prop_oneof![Just(""), Just("1.5"), Just("0"), Just("-2")];
    let cat = prop_oneof![Just("red"), Just("blue"), Just(""), Just("\"gr,een\""), Just("\"two\nlines\"")];
    (0u8..2, num, cat).prop_map(|(label, n, c)| format!("{label},{n},{c}"))
}

/// A file of `format`: lines from its strategy, maybe one malformed line among them, with or
/// without a final line break.
fn input() -> impl Strategy<Value = (Format, String)> {
    let lines = |format: Format, line: BoxedStrategy<String>, header: &'static str, bad: &'static str| {
        (prop::collection::vec(line, 1..40), prop::option::weighted(0.2, any::<prop::sample::Index>()), any::<bool>())
            .prop_map(move |(mut lines, bad_at, final_break)| {
                if let Some(at) = bad_at {
                    lines.insert(at.index(lines.len() + 1), bad.to_string());
                }
                if !header.is_empty() {
                    lines.insert(0, header.to_string());
                }
                let mut text = lines.join("\n");
                if final_break {
                    text.push('\n');
                }
                (format, text)
            })
    };
    prop_oneof![
        lines(Format::Libsvm, libsvm_line().boxed(), "", "1 4:x"),
        lines(Format::Vw, vw_line().boxed(), "", "1 |a x:nan"),
        lines(Format::Criteo, criteo_line().boxed(), "", "1\t2"),
        lines(Format::Csv, csv_line().boxed(), "y,n,c", "1,1,red,extra"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn ranges_on_threads_give_the_grid_and_error_of_one_reader(
        (format, text) in input(),
        range_bytes in 1usize..120,
        threads in 1usize..4,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("input");
        std::fs::write(&path, &text).unwrap();
        let whole = prepared(&path, format, 1, RANGE_BYTES);
        let cut = prepared(&path, format, threads, range_bytes);
        match (&whole, &cut) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
                for (name, bytes) in a {
                    prop_assert!(bytes == &b[name], "{} differs", name);
                }
            }
            _ => prop_assert_eq!(&whole.map(|_| ()), &cut.map(|_| ())),
        }
    }
}

/// A malformed line in a later range is reported at its line in the file, not in the range.
#[test]
fn an_error_in_a_later_range_names_its_line_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.libsvm");
    let mut text = String::new();
    for i in 0..200 {
        text += &format!("{} {}:1\n", i % 2, i % 7 + 1);
        if i == 9 {
            text += "\n"; // a blank line counts as a line
        }
    }
    text += "1 3:oops\n";
    text += "1 3:1\n";
    std::fs::write(&path, &text).unwrap();
    let line = 202; // 200 examples and a blank line before it
    for (threads, range_bytes) in [(1, RANGE_BYTES), (1, 64), (2, 64), (3, 17)] {
        let error = prepared(&path, Format::Libsvm, threads, range_bytes).unwrap_err();
        let expected = format!("{}:{line}: value of feature 3 \"oops\" is not a number", path.display());
        assert_eq!(error, expected, "{threads} threads, ranges of {range_bytes} bytes");
    }
}

/// CSV lines are numbered right across ranges and across the hand-over to one reader at a quote.
#[test]
fn csv_errors_after_a_quote_name_their_line_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.csv");
    let mut text = String::from("y,n,c\n");
    for i in 0..100 {
        text += &format!("{},{i},red\n", i % 2);
    }
    text += "1,2,\"a\nb\"\n"; // lines 102-103: one record
    text += "1,2,blue\n";
    text += "0,2,blue,extra\n"; // line 105
    std::fs::write(&path, &text).unwrap();
    for (threads, range_bytes) in [(1, RANGE_BYTES), (1, 40), (2, 40), (3, 9)] {
        let error = prepared(&path, Format::Csv, threads, range_bytes).unwrap_err();
        assert_eq!(error, format!("{}:105: 4 fields, expected 3", path.display()), "{threads} threads, {range_bytes}");
    }
}

/// A local folder that records the keys written, in order, and those removed.
struct Recording {
    inner: Box<dyn linea_worker::storage::Storage>,
    written: std::sync::Mutex<Vec<String>>,
    removed: std::sync::Mutex<Vec<String>>,
}

impl linea_worker::storage::Storage for Recording {
    fn read(&self, key: &str) -> linea_worker::error::Result<Vec<u8>> {
        self.inner.read(key)
    }
    fn write(&self, key: &str, bytes: &[u8]) -> linea_worker::error::Result<()> {
        self.written.lock().unwrap().push(key.to_string());
        self.inner.write(key, bytes)
    }
    fn remove(&self, key: &str) -> linea_worker::error::Result<()> {
        self.removed.lock().unwrap().push(key.to_string());
        self.inner.remove(key)
    }
    fn exists(&self, key: &str) -> linea_worker::error::Result<bool> {
        self.inner.exists(key)
    }
    fn describe(&self, key: &str) -> String {
        self.inner.describe(key)
    }
}

#[test]
fn a_columns_cells_are_written_as_its_shards_end_and_a_sets_at_the_end() {
    // Criteo's columns are written through, so prepare's memory does not grow with the input;
    // LIBSVM's one variable is held until the end, where it is split into blocks.
    for (input, format, through) in
        [("criteo-sample/train.tsv", Format::Criteo, true), ("a9a/a9a.train.libsvm", Format::Libsvm, false)]
    {
        let dir = tempfile::tempdir().unwrap();
        let storage = Recording {
            inner: linea_worker::storage::open(&dir.path().to_string_lossy()).unwrap(),
            written: Default::default(),
            removed: Default::default(),
        };
        let options = PrepareOptions {
            input: common::data(input),
            spec: spec(format),
            rows_per_shard: 1000,
            reuse: false,
            threads: 2,
            range_bytes: RANGE_BYTES,
        };
        let manifest = prepare(&options, &storage, &Progress::silent()).unwrap().manifest;
        let written = storage.written.lock().unwrap().clone();
        let at = |key: &str| written.iter().position(|k| k == key).unwrap_or_else(|| panic!("{input}: no {key}"));
        let last_labels = at(&format!("labels/r{:06}", manifest.shards.len() - 1));
        // The cells the manifest names are the cells written and kept, each written once (a
        // column's empty cells all name one object, removed if only the label's did).
        let removed = storage.removed.lock().unwrap().clone();
        let named: std::collections::BTreeSet<&str> =
            manifest.blocks.iter().flat_map(|b| &b.cells).map(|c| c.key.as_str()).collect();
        let cells: Vec<&str> = written
            .iter()
            .map(String::as_str)
            .filter(|k| k.starts_with("cells/") && !removed.iter().any(|r| r == k))
            .collect();
        let unnamed: Vec<&&str> = cells.iter().filter(|k| !named.contains(**k)).collect();
        assert_eq!(
            cells.len(),
            named.len(),
            "{input}: a cell written twice, or one the manifest does not name: {unnamed:?}"
        );
        assert!(cells.iter().all(|k| named.contains(k)), "{input}");
        assert_eq!(cells.iter().any(|k| k.starts_with("cells/c")), through, "{input}");
        let first_cell = cells.iter().map(|k| at(k)).min().unwrap();
        assert_eq!(
            first_cell < last_labels,
            through,
            "{input}: first cell at {first_cell}, last labels at {last_labels}"
        );
        // And the grid loads, its cells' checksums verified (a column's under its own keys).
        let loaded = linea_worker::gridload::load(&storage, linea_engine::Loss::Logistic).unwrap();
        assert_eq!(loaded.layout.manifest.nnz, manifest.nnz, "{input}");
    }
}
