//! The `linea` binary end to end: every shared dataset through prepare -> train -> eval,
//! identical model bytes, and clear refusals of bad input.

mod common;

use common::data;
use std::path::Path;
use std::process::{Command, Output};

fn linea(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linea")).args(args).arg("--quiet").output().expect("linea runs")
}

fn ok(args: &[&str]) -> String {
    let out = linea(args);
    assert!(out.status.success(), "linea {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a command that must fail with exit code 2 and returns its stderr.
fn refused(args: &[&str]) -> String {
    let out = linea(args);
    assert_eq!(out.status.code(), Some(2), "linea {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stderr).unwrap()
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_string_lossy().into_owned()
}

/// The number after `name` in `eval`'s table.
fn metric(table: &str, name: &str) -> f64 {
    table
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .unwrap_or_else(|| panic!("no {name} in {table}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn every_shared_dataset_goes_through_prepare_train_eval() {
    struct Set {
        input: &'static str,
        prepare: &'static [&'static str],
        loss: &'static str,
        test: Option<&'static str>,
    }
    let sets = [
        Set {
            input: "a9a/a9a.train.libsvm",
            prepare: &["--format", "libsvm"],
            loss: "logistic",
            test: Some("a9a/a9a.test.libsvm"),
        },
        Set { input: "w8a/w8a.libsvm", prepare: &["--format", "libsvm"], loss: "logistic", test: None },
        Set { input: "rcv1-small/rcv1_small.vw", prepare: &["--format", "vw"], loss: "logistic", test: None },
        Set { input: "movielens-100k/ratings.vw", prepare: &["--format", "vw"], loss: "squared", test: None },
        Set {
            input: "criteo-sample/train.tsv",
            prepare: &["--format", "criteo"],
            loss: "logistic",
            test: Some("criteo-sample/test.tsv"),
        },
        Set {
            input: "higgs-sample/higgs.train.tsv",
            prepare: &["--format", "csv"],
            loss: "logistic",
            test: Some("higgs-sample/higgs.test.tsv"),
        },
        Set {
            input: "adult/adult.parquet",
            prepare: &["--format", "parquet", "--label", "income", "--positive", ">50K"],
            loss: "logistic",
            test: None,
        },
        Set {
            input: "protein-kdd2004/protein.parquet",
            prepare: &["--format", "parquet", "--label", "target", "--ignore", "EXAMPLE_ID,BLOCK_ID"],
            loss: "logistic",
            test: None,
        },
    ];
    for set in sets {
        let dir = tempfile::tempdir().unwrap();
        let (grid, model) = (path(dir.path(), "grid"), path(dir.path(), "model"));
        let input = data(set.input);
        let mut args = vec!["prepare", "--input", &input, "--output", &grid];
        args.extend_from_slice(set.prepare);
        ok(&args);
        // SCD named: its printed objective is the exact fixed-point sum that eval recomputes.
        let args = ["--algorithm", "scd", "--loss", set.loss, "--tolerance", "1e-9"];
        let trained = ok(&[&["train", "--data", &grid, "--model", &model][..], &args].concat());
        let objective: f64 =
            trained.split("objective ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
        // Evaluating the training grid gives back the training objective, bit for bit as printed.
        let on_grid = ok(&["eval", "--model", &model, "--data", &grid]);
        assert_eq!(format!("{:.10}", metric(&on_grid, "objective")), format!("{objective:.10}"), "{}", set.input);
        // And the raw training file, featurized from the model's spec, agrees with the grid.
        let on_raw = ok(&["eval", "--model", &model, "--data", &input]);
        assert_eq!(metric(&on_raw, "examples"), metric(&on_grid, "examples"), "{}", set.input);
        assert!((metric(&on_raw, "objective") - objective).abs() <= 1e-9 * objective, "{}: {on_raw}", set.input);
        if set.loss == "logistic" {
            assert!(metric(&on_grid, "auc") > 0.6, "{}: {on_grid}", set.input);
        } else {
            assert!(metric(&on_grid, "rmse") < 1.0, "{}: {on_grid}", set.input);
        }
        if let Some(test) = set.test {
            let held_out = ok(&["eval", "--model", &model, "--data", &data(test)]);
            assert!(metric(&held_out, "auc") > 0.6, "{test}: {held_out}");
        }
    }
}

#[test]
fn models_are_identical_bytes_whatever_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let grid = path(dir.path(), "grid");
    ok(&[
        "prepare",
        "--input",
        &data("movielens-100k/ratings.vw"),
        "--format",
        "vw",
        "--output",
        &grid,
        "--rows-per-shard",
        "6000",
    ]);
    let mut models = Vec::new();
    for (i, threads) in ["1", "2", "3", "2"].iter().enumerate() {
        let model = path(dir.path(), &format!("model-{i}"));
        let args = ["--algorithm", "scd", "--loss", "squared", "--threads", threads, "--epochs", "15"];
        ok(&[&["train", "--data", &grid, "--model", &model][..], &args].concat());
        models.push(std::fs::read(&model).unwrap());
    }
    assert!(models.windows(2).all(|w| w[0] == w[1]), "model bytes differ between runs");
    let text = String::from_utf8(models[0].clone()).unwrap();
    assert!(text.lines().count() > 2000, "one line per weight");
}

#[test]
fn predict_writes_one_probability_per_example_and_train_writes_plot_and_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (grid, model) = (path(dir.path(), "grid"), path(dir.path(), "model"));
    let (plot, trace, scores) =
        (path(dir.path(), "plot.svg"), path(dir.path(), "trace.csv"), path(dir.path(), "scores"));
    ok(&["prepare", "--input", &data("a9a/a9a.train.libsvm"), "--format", "libsvm", "--output", &grid]);
    ok(&["train", "--data", &grid, "--model", &model, "--plot", &plot, "--trace", &trace, "--algorithm", "scd"]);
    ok(&["predict", "--model", &model, "--input", &data("a9a/a9a.test.libsvm"), "--output", &scores]);
    let scores: Vec<f64> = std::fs::read_to_string(&scores).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(scores.len(), 16281);
    assert!(scores.iter().all(|&p| (0.0..=1.0).contains(&p)));
    let trace = std::fs::read_to_string(&trace).unwrap();
    let objectives: Vec<f64> = trace.lines().skip(1).map(|l| l.split(',').nth(2).unwrap().parse().unwrap()).collect();
    assert!(trace.starts_with("epoch,seconds,objective,gap,relative_gap,workers,algorithm\n") && objectives.len() > 3);
    assert!(
        trace.lines().skip(1).all(|l| l.ends_with(",,,scd")),
        "SCD has no duality gap nor wanted worker count: {trace}"
    );
    assert!(objectives.windows(2).all(|w| w[1] <= w[0]), "per-epoch objective must not rise: {objectives:?}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<polyline") && svg.trim_end().ends_with("</svg>"));
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let file = path(dir, name);
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn bad_input_is_refused_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let grid = path(dir.path(), "grid");
    let cases = [
        ("malformed.libsvm", "1 3:1 4:1\n0 5:1\n1 7\n", "libsvm", ":3: feature \"7\" is not index:value"),
        ("nan.libsvm", "1 3:1\n0 4:nan\n", "libsvm", ":2: value of feature 4 is NaN"),
        ("inf.vw", "1 |a x:1\n0 |a y:inf\n", "vw", ":2: value of feature y is inf"),
        ("label.csv", "y,a\n1,2\nyes,3\n", "csv", ":3: label \"yes\" is not a number (use --positive VALUE"),
        ("short.tsv", &format!("0{}\n", "\t1".repeat(10)), "criteo", ":1: 11 fields, expected 40"),
        ("empty.libsvm", "\n\n", "libsvm", "no examples"),
        ("unlabelled.vw", "1 |a x\n|a y\n", "vw", ":2: missing label (training needs labelled examples)"),
    ];
    for (name, text, format, expected) in cases {
        let file = write(dir.path(), name, text);
        let err = refused(&["prepare", "--input", &file, "--format", format, "--output", &grid]);
        assert!(err.contains(&file) && err.contains(expected), "{name}: {err}");
    }
    let err = refused(&["prepare", "--input", "x", "--format", "xml", "--output", &grid]);
    assert!(err.contains("invalid value 'xml'") && err.contains("libsvm"), "{err}");
}

#[test]
fn labels_outside_the_loss_domain_name_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let grid = path(dir.path(), "grid");
    let file = write(dir.path(), "ratings.libsvm", "1 1:1\n0 2:1\n3 1:1\n");
    ok(&["prepare", "--input", &file, "--format", "libsvm", "--output", &grid]);
    let err = refused(&["train", "--data", &grid, "--model", &path(dir.path(), "m")]);
    assert!(err.contains("ratings.libsvm:3: label 3 is outside the logistic loss's domain"), "{err}");
    assert!(!Path::new(&path(dir.path(), "m")).exists(), "no model from a refused run");
    ok(&["train", "--data", &grid, "--model", &path(dir.path(), "m"), "--loss", "squared"]);
}

#[test]
fn a_corrupt_cell_is_caught_by_its_checksum_and_never_trained_on() {
    let dir = tempfile::tempdir().unwrap();
    let grid = path(dir.path(), "grid");
    ok(&["prepare", "--input", &data("a9a/a9a.train.libsvm"), "--format", "libsvm", "--output", &grid]);
    let cell = Path::new(&grid).join("cells/b00003/r000001");
    let mut bytes = std::fs::read(&cell).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&cell, bytes).unwrap();
    let model = path(dir.path(), "m");
    let err = refused(&["train", "--data", &grid, "--model", &model]);
    assert!(err.contains("cells/b00003/r000001") && err.contains("checksum mismatch"), "{err}");
    assert!(!Path::new(&model).exists());
}

/// `--cache-mb` bounds the worker processes' cell caches; one process has none to bound.
#[test]
fn a_cache_bound_without_workers_is_refused() {
    let message = refused(&["train", "--data", "/nonexistent", "--model", "/nonexistent/m", "--cache-mb", "64"]);
    assert!(message.contains("--cache-mb") && message.contains("--workers N"), "{message}");
}

#[test]
fn a_failed_prepare_leaves_no_grid_that_looks_valid() {
    let dir = tempfile::tempdir().unwrap();
    let grid = path(dir.path(), "grid");
    ok(&["prepare", "--input", &data("a9a/a9a.train.libsvm"), "--format", "libsvm", "--output", &grid]);
    let bad = write(dir.path(), "bad.libsvm", &format!("{}1 2:x\n", "1 1:1\n".repeat(50_000)));
    refused(&["prepare", "--input", &bad, "--format", "libsvm", "--output", &grid, "--rows-per-shard", "1000"]);
    let err = refused(&["train", "--data", &grid, "--model", &path(dir.path(), "m")]);
    assert!(err.contains("no grid here"), "{err}");
}

#[test]
fn predict_scores_unlabelled_vw_examples_that_eval_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (grid, model, scores) = (path(dir.path(), "grid"), path(dir.path(), "model"), path(dir.path(), "scores"));
    ok(&["prepare", "--input", &data("rcv1-small/rcv1_small.vw"), "--format", "vw", "--output", &grid]);
    ok(&["train", "--data", &grid, "--model", &model]);
    // The first three examples without their labels.
    let text = std::fs::read_to_string(data("rcv1-small/rcv1_small.vw")).unwrap();
    let unlabelled: String = text.lines().take(3).map(|l| format!("{}\n", &l[l.find('|').unwrap()..])).collect();
    let input = write(dir.path(), "new.vw", &unlabelled);
    ok(&["predict", "--model", &model, "--input", &input, "--output", &scores]);
    let labelled = write(dir.path(), "old.vw", &text.lines().take(3).map(|l| format!("{l}\n")).collect::<String>());
    let with_labels = path(dir.path(), "scores-labelled");
    ok(&["predict", "--model", &model, "--input", &labelled, "--output", &with_labels]);
    let scores = std::fs::read_to_string(&scores).unwrap();
    assert_eq!(scores.lines().count(), 3);
    assert_eq!(scores, std::fs::read_to_string(&with_labels).unwrap(), "a label must not change a score");
    let err = refused(&["eval", "--model", &model, "--data", &input]);
    assert!(err.contains("new.vw:1: missing label"), "{err}");
}

/// The model lines of a model file: everything after the header.
fn weights(model: &str) -> String {
    let text = std::fs::read_to_string(model).unwrap();
    text.split_once('\n').unwrap().1.to_string()
}

#[test]
fn train_chooses_its_algorithm_from_the_data_says_which_and_records_it() {
    // One set for each of the rule's data cases (docs/algorithms.md, "When to pick which"):
    // rare features; many rows per weight, scaled (CoCoA below 10,000 non-zeros per feature
    // and unit of l2, truncated Newton, run as lbfgs with its batch solver, from there on);
    // dense rows.
    let sets = [
        ("rcv1-small/rcv1_small.vw", "vw", "1", "cocoa", &[][..], "1000"),
        ("a9a/a9a.train.libsvm", "libsvm", "1", "cocoa", &[][..], "1000"),
        ("a9a/a9a.train.libsvm", "libsvm", "0.1", "lbfgs", &["--batch-solver", "newton"][..], "1000"),
        ("higgs-sample/higgs.train.tsv", "csv", "1", "scd", &[][..], "100"),
    ];
    for (input, format, l2, chosen, solver, epochs) in sets {
        let dir = tempfile::tempdir().unwrap();
        let grid = path(dir.path(), "grid");
        ok(&["prepare", "--input", &data(input), "--format", format, "--output", &grid]);
        let mut models = Vec::new();
        for threads in ["1", "2"] {
            let (model, trace) = (path(dir.path(), &format!("auto-{threads}")), path(dir.path(), "trace.csv"));
            let out =
                ok(&["train", "--data", &grid, "--model", &model, "--threads", threads, "--trace", &trace, "--l2", l2]);
            // What ran, solver included (the flags that name it).
            let ran = [&[chosen][..], solver].concat().join(" ");
            assert!(out.contains(&format!(" with {ran}: objective ")), "{input}: {out}");
            // The rate is per thread that had work: CoCoA's one slot keeps one of two busy.
            if (chosen, threads) == ("cocoa", "2") {
                assert!(out.contains(" nnz/s per thread, 1 of 2 threads busy)"), "{input}: {out}");
            }
            // The model is a model of this objective: eval gives back what training printed
            // (to the last digits: the algorithms sum in their own order).
            let printed: f64 =
                out.split("objective ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
            let evaluated = metric(&ok(&["eval", "--model", &model, "--data", &grid]), "objective");
            assert!((evaluated - printed).abs() <= 1e-10 * printed, "{input}: {evaluated} against {printed}");
            let header = std::fs::read_to_string(&model).unwrap().lines().next().unwrap().to_string();
            let batch_solver = solver.get(1).map_or(String::new(), |s| format!(",\"batch_solver\":\"{s}\""));
            assert!(header.contains(&format!("\"algorithm\":\"{chosen}\"{batch_solver},")), "{input}: {header}");
            assert!(header.contains("\"chosen_by\":\"auto: "), "{input}: {header}");
            let trace = std::fs::read_to_string(&trace).unwrap();
            // The trace's last column names what ran as the summary line does.
            assert!(trace.lines().skip(1).all(|l| l.ends_with(&format!(",{ran}"))), "{input}: {trace}");
            models.push(std::fs::read(&model).unwrap());
        }
        assert_eq!(models[0], models[1], "{input}: the choice and the model do not depend on the thread count");
        // The same run as naming the algorithm with the choice's epoch limit: the same weights
        // (the header differs by the recorded choice only).
        let named = path(dir.path(), "named");
        let run = ["train", "--data", &grid, "--model", &named, "--algorithm", chosen, "--epochs", epochs, "--l2", l2];
        ok(&[&run[..], solver].concat());
        assert_eq!(weights(&named), weights(&path(dir.path(), "auto-1")), "{input}");
        assert!(
            !std::fs::read_to_string(&named).unwrap().contains("chosen_by"),
            "{input}: a named run records no choice"
        );
    }
}

#[test]
fn a_batch_solver_is_recorded_and_models_written_without_it_still_load() {
    // Models of `bench/model-hashes.sh --linear`'s `newton` and `hybrid-newton` runs on a9a,
    // written at eebcc36, before the header recorded the batch solver.
    let runs = [
        ("a9a-lbfgs-newton-eebcc36.model", &["--algorithm", "lbfgs"][..]),
        ("a9a-hybrid-newton-eebcc36.model", &["--algorithm", "hybrid", "--slots", "4"][..]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let grid = path(dir.path(), "grid");
    ok(&["prepare", "--input", &data("a9a/a9a.train.libsvm"), "--format", "libsvm", "--output", &grid]);
    for (old, algorithm) in runs {
        let old = format!("{}/tests/models/{old}", env!("CARGO_MANIFEST_DIR"));
        let model = path(dir.path(), "model");
        let flags = ["--l2", "1", "--batch-solver", "newton", "--epochs", "200", "--gap-tolerance", "0"];
        let out = ok(&[&["train", "--data", &grid, "--model", &model][..], algorithm, &flags].concat());
        assert!(out.contains(&format!(" with {} --batch-solver newton: ", algorithm[1])), "{out}");
        // The same weights, bit for bit; the header gains the solver and nothing else.
        assert_eq!(weights(&model), weights(&old), "{old}");
        let header = |m: &str| std::fs::read_to_string(m).unwrap().lines().next().unwrap().to_string();
        let recorded = format!("\"algorithm\":\"{}\",\"batch_solver\":\"newton\",", algorithm[1]);
        assert_eq!(
            header(&model).replacen(&recorded, &format!("\"algorithm\":\"{}\",", algorithm[1]), 1),
            header(&old)
        );
        // The old file still loads: eval scores it as the new one.
        let table = |m: &str| ok(&["eval", "--model", m, "--data", &grid]);
        assert_eq!(table(&old), table(&model), "{old}");
    }
}

#[test]
fn auto_refuses_the_flags_of_one_algorithm_and_a_master_never_chooses() {
    let dir = tempfile::tempdir().unwrap();
    let grid = path(dir.path(), "grid");
    ok(&["prepare", "--input", &data("rcv1-small/rcv1_small.vw"), "--format", "vw", "--output", &grid]);
    let model = path(dir.path(), "m");
    for flag in [&["--slots", "2"][..], &["--elastic"], &["--accelerate"], &["--gap-every-epoch"], &["--memory", "3"]] {
        let err = refused(&[&["train", "--data", &grid, "--model", &model][..], flag].concat());
        assert!(err.contains(flag[0]) && err.contains("auto"), "{flag:?}: {err}");
    }
    assert!(!Path::new(&model).exists(), "no model from a refused run");
    let err =
        refused(&["master", "--data", &grid, "--model", &model, "--listen", "127.0.0.1:0", "--algorithm", "auto"]);
    assert!(err.contains("--algorithm auto is `linea train`'s"), "{err}");
}

#[test]
fn lbfgs_hybrid_and_ipm_refuse_what_does_not_apply_to_them_and_write_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (grid, model, trace) = (path(dir.path(), "grid"), path(dir.path(), "model"), path(dir.path(), "trace.csv"));
    ok(&["prepare", "--input", &data("a9a/a9a.train.libsvm"), "--format", "libsvm", "--output", &grid]);
    let train = |extra: &[&str]| -> Vec<String> {
        ["train", "--data", &grid, "--model", &model].iter().chain(extra).map(|s| s.to_string()).collect()
    };
    for (extra, says) in [
        (&["--algorithm", "lbfgs", "--slots", "2"][..], "--slots applies to cocoa, hybrid and ipm"),
        (&["--algorithm", "ipm", "--memory", "3"][..], "--memory applies to the L-BFGS algorithms"),
        (&["--algorithm", "hybrid", "--mixing", "examples"][..], "--mixing applies to ipm"),
        (&["--algorithm", "scd", "--sgd-rate", "1"][..], "--sgd-rate applies to the online passes"),
        (&["--algorithm", "hybrid", "--l1", "1"][..], "--l1 needs a solver for non-smooth penalties"),
        (&["--algorithm", "hybrid", "--elastic"][..], "hybrid has no elastic policy"),
        (&["--algorithm", "hybrid", "--memory", "0"][..], "must be an integer from 1 to 1000"),
        (&["--algorithm", "scd", "--batch-solver", "newton"][..], "--batch-solver applies to the batch algorithms"),
        (&["--algorithm", "ipm", "--batch-solver", "lbfgs"][..], "--batch-solver applies to the batch algorithms"),
        (&["--algorithm", "lbfgs", "--batch-solver", "newton", "--memory", "5"][..], "--memory is L-BFGS's"),
        (
            &["--algorithm", "hybrid", "--batch-solver", "newton", "--lbfgs-precondition", "scaled"][..],
            "--lbfgs-precondition is L-BFGS's",
        ),
    ] {
        let args = train(extra);
        let stderr = refused(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    }
    for (extra, says) in [
        (&["--algorithm", "lbfgs", "--loss", "hinge"][..], "the hinge loss cannot be trained with lbfgs"),
        (&["--algorithm", "hybrid", "--slots", "40"][..], "a slot owns whole grains"),
        (&["--algorithm", "lbfgs", "--batch-solver", "newton", "--loss", "hinge"][..], "cannot be trained with lbfgs"),
    ] {
        let args = train(extra);
        let out = linea(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{extra:?}: {stderr}");
    }
    let args = train(&["--algorithm", "hybrid", "--slots", "4", "--trace", &trace, "--epochs", "30"]);
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let text = std::fs::read_to_string(&trace).unwrap();
    let objectives: Vec<f64> = text.lines().skip(1).map(|l| l.split(',').nth(2).unwrap().parse().unwrap()).collect();
    assert_eq!(objectives.len(), 31, "epoch 0 (w = 0), the warm start, 29 L-BFGS iterations: {text}");
    assert!(objectives.windows(2).all(|w| w[1] <= w[0]), "the hybrid's objective must not rise: {objectives:?}");
}
