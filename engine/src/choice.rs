//! `linea train --algorithm auto`: which algorithm to run, from the problem alone.
//!
//! The rule is a pure function of properties of the DATA (rows, features, non-zeros, the largest
//! |value|) and of the parameters (loss, l2, l1, whether a distributed runtime runs it), never of
//! the machine (cores, load, memory): the same grid and flags choose the same algorithm, hence the
//! same model bytes, on every machine. It was fitted to measurements
//! (docs/benchmarks/choosing-the-algorithm.md, "Choosing the algorithm"; docs/algorithms.md, "When
//! to pick which") and says in [`Choice::reason`] which of its cases decided.

use crate::loss::Loss;

/// What the rule can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Scalable Coordinate Descent.
    Scd,
    /// CoCoA+ with one slot (K = 1): SDCA on the whole problem.
    Cocoa,
    /// Truncated Newton on exact batch gradients and Hessian products (`--algorithm lbfgs
    /// --batch-solver newton`): the same model for any worker count, like SCD.
    Newton,
}

/// The properties of a problem the rule reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    pub rows: u64,
    /// Non-zeros of the grid, the bias column's included.
    pub nnz: u64,
    /// Features (model weights), the bias included.
    pub features: u64,
    /// The largest |value| of any feature (1 for one-hot and binary data).
    pub max_abs: f64,
    pub loss: Loss,
    pub l2: f64,
    pub l1: f64,
    /// Workers of a distributed runtime serve the run (`linea train --workers N`): only
    /// algorithms whose model is the same for any worker count are picked.
    pub distributed: bool,
}

/// The rule's answer and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub algorithm: Algorithm,
    /// The epoch limit when the run names none: SCD's default of 100, and 1,000 for CoCoA and
    /// Newton, whose epochs are cheaper and more numerous (CoCoA reached 1e-6 on movielens
    /// after 83 epochs; a Newton iteration is one batch pass per CG step).
    pub max_epochs: u32,
    pub reason: String,
}

/// [`Choice::max_epochs`] of SCD, and of the others.
pub const SCD_EPOCHS: u32 = 100;
pub const OTHER_EPOCHS: u32 = 1000;

/// At least this share of a row's features non-zero on average: few dense columns, as
/// protein-kdd2004 (74 of 75) and higgs (27 of 29). SCD's coarse correction then takes a
/// Newton step in a subspace that holds nearly every feature (one block per column), which
/// L-BFGS and CoCoA cannot match on correlated, unscaled columns.
pub const DENSE_FILL: f64 = 0.5;

/// From this many non-zeros per feature (per unit of `l2`) on, every weight is determined by
/// many rows and the Hessian's diagonal says most of its conditioning: truncated Newton with
/// the Jacobi-preconditioned CG needs few passes. It runs this case where CoCoA cannot (values
/// beyond [`SCALED_MAX_ABS`], as adult's; a distributed run), and everywhere from
/// [`COCOA_NNZ_PER_FEATURE`] on. Against L-BFGS, which had the case before: 1.3-5.4x ahead on
/// a9a and adult, and on a9a, w8a and adult at `l2 = 0.1`; 1.2-1.5x behind on w8a
/// (docs/benchmarks/choosing-the-algorithm.md, "Choosing the algorithm, again").
pub const NEWTON_NNZ_PER_FEATURE: f64 = 1000.0;

/// Below this many non-zeros per feature (per unit of `l2`), scaled data in one process runs
/// CoCoA with one slot even where [`NEWTON_NNZ_PER_FEATURE`] is passed: on a9a (3,936) and
/// w8a (2,091) at `l2 = 1` CoCoA was the faster in each quiet run (a9a 0.084 against Newton's
/// 0.096 s, and 0.075 against 0.135; w8a 0.175 against 0.181, and 0.150 against 0.249, one
/// thread), while at 20,910 (w8a, `l2 = 0.1`) and 39,360 (a9a, 0.1) Newton was 10x and 7.7x
/// faster (a loaded run: ratios that large hold): the dual's steps shrink as the regularizer
/// weakens against the rows
/// (docs/benchmarks/choosing-the-algorithm.md, "CoCoA keeps a9a and w8a").
pub const COCOA_NNZ_PER_FEATURE: f64 = 10_000.0;

/// Truncated Newton's cases ([`COCOA_NNZ_PER_FEATURE`], [`NEWTON_NNZ_PER_FEATURE`]) hold up
/// to this many features: its CG steps solve a system in the features, and they take more
/// steps the more features the Hessian couples, while CoCoA's epochs do not grow with them.
/// Where many rows per weight made Newton the faster, the sets had at most 3,130 features
/// (movielens at `l2 = 0.03`, 10,785 non-zeros per feature and unit of l2: 1e-6 in 0.52 s,
/// CoCoA not at 1e-3 after 2.2 s; a9a and w8a at `l2 <= 0.5`). With more, CoCoA was the
/// faster however many rows a weight had: rcv1-small's 9,739 at `l2 = 0.0005` (16,170:
/// 0.004 s against 0.016 s), generated Criteo rows' 54,543 at `l2 = 0.05` (13,313: 15.8 s
/// against 41.8 s) and 82,709 (50M rows, 21,949: 1e-6 in 622 s, where Newton had not reached
/// 1e-4 after 756 s) (docs/benchmarks/choosing-the-algorithm.md, "Newton's case ends at
/// 5,000 features"). The bound lies between 3,130 and 9,739, where nothing was measured.
pub const NEWTON_MAX_FEATURES: u64 = 5_000;

/// Values at most this large count as scaled (binary, one-hot or normalized rows). CoCoA's
/// dual steps slow down with the rows' squared norms against `l2`: on adult's raw columns
/// (|x| up to 1.5e6) and protein's it did not reach 1e-3 at all.
pub const SCALED_MAX_ABS: f64 = 1.0;

impl Problem {
    /// The share of a row's features that are non-zero, on average.
    pub fn fill(&self) -> f64 {
        self.nnz as f64 / (self.rows.max(1) as f64 * self.features.max(1) as f64)
    }

    /// Non-zeros per feature, in units of `l2`: how many rows determine a weight against how
    /// strongly the regularizer pulls it to 0.
    pub fn nnz_per_feature(&self) -> f64 {
        self.nnz as f64 / self.features.max(1) as f64 / self.l2.max(f64::MIN_POSITIVE)
    }
}

/// The algorithm `linea train --algorithm auto` runs for `problem`: the first case that
/// applies decides.
pub fn choose(problem: &Problem) -> Choice {
    let pick = |algorithm, reason: String| {
        let max_epochs = if algorithm == Algorithm::Scd { SCD_EPOCHS } else { OTHER_EPOCHS };
        Choice { algorithm, max_epochs, reason }
    };
    let (fill, density) = (problem.fill(), problem.nnz_per_feature());
    if problem.l1 > 0.0 {
        return pick(Algorithm::Scd, "l1 > 0: only scd minimizes an L1 penalty".into());
    }
    if problem.loss == Loss::Hinge {
        return pick(Algorithm::Cocoa, "hinge loss: only cocoa trains it to the optimum".into());
    }
    if fill >= DENSE_FILL {
        return pick(Algorithm::Scd, format!("dense rows ({:.0}% of the features): scd", 100.0 * fill));
    }
    let per_feature = format!("{density:.0} non-zeros per feature and unit of l2");
    // Past NEWTON_MAX_FEATURES the density says nothing for Newton: its cases are skipped.
    let too_wide = format!("{} features (> {NEWTON_MAX_FEATURES}, too many for newton)", problem.features);
    let newton_fits = problem.features <= NEWTON_MAX_FEATURES;
    if density >= COCOA_NNZ_PER_FEATURE && newton_fits {
        return pick(
            Algorithm::Newton,
            format!("{per_feature} (>= {COCOA_NNZ_PER_FEATURE}): lbfgs --batch-solver newton"),
        );
    }
    let scaled = problem.max_abs <= SCALED_MAX_ABS;
    if scaled && !problem.distributed && problem.l2 > 0.0 {
        let why = if density >= COCOA_NNZ_PER_FEATURE {
            format!("{per_feature}, {too_wide}")
        } else {
            format!("{per_feature} (< {COCOA_NNZ_PER_FEATURE})")
        };
        return pick(Algorithm::Cocoa, format!("{why}, values within {SCALED_MAX_ABS}: cocoa with one slot"));
    }
    // Why CoCoA cannot run it.
    let not_cocoa = if problem.l2 <= 0.0 {
        "l2 = 0 (cocoa needs l2 > 0)".to_string()
    } else if scaled {
        "distributed (cocoa's model would depend on the slots)".to_string()
    } else {
        format!("values up to {:e} (> {SCALED_MAX_ABS})", problem.max_abs)
    };
    if density >= NEWTON_NNZ_PER_FEATURE {
        if !newton_fits {
            return pick(Algorithm::Scd, format!("{per_feature}, {too_wide}, {not_cocoa}: scd"));
        }
        return pick(
            Algorithm::Newton,
            format!("{per_feature} (>= {NEWTON_NNZ_PER_FEATURE}), {not_cocoa}: lbfgs --batch-solver newton"),
        );
    }
    pick(Algorithm::Scd, format!("{per_feature} (< {NEWTON_NNZ_PER_FEATURE}), {not_cocoa}: scd"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifests' figures of the shared sets (rows, non-zeros and features with the
    /// bias, the largest |value|) as `linea prepare` makes them.
    fn set(name: &str) -> Problem {
        let (rows, nnz, features, max_abs, loss) = match name {
            "a9a" => (32_560, 484_138, 123, 1.0, Loss::Logistic),
            "w8a" => (49_749, 629_335, 301, 1.0, Loss::Logistic),
            "rcv1-small" => (1_000, 78_739, 9_739, 1.0, Loss::Logistic),
            "criteo-sample" => (7_200, 247_015, 34_691, 1.0, Loss::Logistic),
            "higgs-sample" => (7_000, 187_489, 29, 13.098, Loss::Logistic),
            "adult" => (48_842, 641_263, 109, 1_490_400.0, Loss::Logistic),
            "protein-kdd2004" => (145_751, 10_846_553, 75, 64_129.4, Loss::Logistic),
            "movielens-100k" => (100_000, 1_012_595, 3_130, 1.0, Loss::Squared),
            other => panic!("no set {other}"),
        };
        Problem { rows, nnz, features, max_abs, loss, l2: 1.0, l1: 0.0, distributed: false }
    }

    #[test]
    fn the_shared_sets_get_the_algorithm_the_measurements_chose_for_them() {
        // docs/benchmarks/choosing-the-algorithm.md, "Choosing the algorithm", "..., again" and
        // "CoCoA keeps a9a and w8a": at l2 = 1 the fastest candidate, or within 1.5x of it
        // (w8a: CoCoA 1.4x L-BFGS's time, quiet).
        for (name, expected) in [
            ("a9a", Algorithm::Cocoa),
            ("w8a", Algorithm::Cocoa),
            ("adult", Algorithm::Newton),
            ("rcv1-small", Algorithm::Cocoa),
            ("criteo-sample", Algorithm::Cocoa),
            ("movielens-100k", Algorithm::Cocoa),
            ("higgs-sample", Algorithm::Scd),
            ("protein-kdd2004", Algorithm::Scd),
        ] {
            let choice = choose(&set(name));
            assert_eq!(choice.algorithm, expected, "{name}: {}", choice.reason);
            let epochs = if expected == Algorithm::Scd { SCD_EPOCHS } else { OTHER_EPOCHS };
            assert_eq!(choice.max_epochs, epochs, "{name}");
        }
    }

    #[test]
    fn many_rows_per_weight_run_newton_where_cocoa_is_slower_or_cannot_run() {
        // a9a and w8a at l2 = 0.1 (39,360 and 20,910 non-zeros per feature and unit of l2).
        for name in ["a9a", "w8a"] {
            let choice = choose(&Problem { l2: 0.1, ..set(name) });
            assert_eq!(choice.algorithm, Algorithm::Newton, "{name}: {}", choice.reason);
            // At l2 = 1 in one process CoCoA; with workers Newton, whose model is the same for
            // any worker count, not SCD.
            let choice = choose(&Problem { distributed: true, ..set(name) });
            assert_eq!(choice.algorithm, Algorithm::Newton, "{name}: {}", choice.reason);
            assert!(choice.reason.contains("distributed"), "{}", choice.reason);
        }
        // Raw values keep adult from CoCoA at any l2 where a weight has many rows.
        let choice = choose(&set("adult"));
        assert!(choice.reason.contains("values up to"), "{}", choice.reason);
    }

    #[test]
    fn many_features_keep_newton_away_however_many_rows_a_weight_has() {
        // docs/benchmarks/choosing-the-algorithm.md, "Newton's case ends at 5,000 features":
        // generated Criteo rows, 50M at l2 = 1 (21,949 non-zeros per feature and unit of l2)
        // and 1M at l2 = 0.05 (13,313), and rcv1-small at l2 = 0.0005 (16,170), where CoCoA
        // was 2.6-4x ahead.
        let fifty_million = Problem { rows: 50_000_000, nnz: 1_815_386_569, features: 82_709, ..set("criteo-sample") };
        let one_million = Problem { rows: 1_000_000, nnz: 36_305_915, features: 54_543, l2: 0.05, ..fifty_million };
        for problem in [fifty_million, one_million, Problem { l2: 0.0005, ..set("rcv1-small") }] {
            assert!(problem.nnz_per_feature() >= COCOA_NNZ_PER_FEATURE);
            let choice = choose(&problem);
            assert_eq!(choice.algorithm, Algorithm::Cocoa, "{}", choice.reason);
            assert!(choice.reason.contains("too many for newton"), "{}", choice.reason);
            // With workers, and with raw values, SCD rather than Newton.
            for other in [Problem { distributed: true, ..problem }, Problem { max_abs: 40.0, ..problem }] {
                let choice = choose(&other);
                assert_eq!(choice.algorithm, Algorithm::Scd, "{}", choice.reason);
                assert!(choice.reason.contains("too many for newton"), "{}", choice.reason);
            }
        }
        // movielens at l2 = 0.03 (10,785; 3,130 features): Newton reached 1e-6 in 0.52 s,
        // CoCoA not 1e-3 in 2.2 s.
        let choice = choose(&Problem { l2: 0.03, ..set("movielens-100k") });
        assert_eq!(choice.algorithm, Algorithm::Newton, "{}", choice.reason);
    }

    #[test]
    fn l1_and_hinge_go_to_the_only_algorithm_that_solves_them() {
        for name in ["a9a", "rcv1-small", "protein-kdd2004"] {
            assert_eq!(choose(&Problem { l1: 0.5, ..set(name) }).algorithm, Algorithm::Scd, "{name}");
            let hinge = Problem { loss: Loss::Hinge, ..set(name) };
            assert_eq!(choose(&hinge).algorithm, Algorithm::Cocoa, "{name}");
            assert_eq!(choose(&Problem { distributed: true, ..hinge }).algorithm, Algorithm::Cocoa, "{name}");
        }
    }

    #[test]
    fn a_distributed_run_never_gets_an_algorithm_whose_model_depends_on_the_slots() {
        for name in ["a9a", "w8a", "rcv1-small", "criteo-sample", "higgs-sample", "adult", "protein-kdd2004"] {
            for l2 in [1e-3, 1.0, 1e3] {
                let choice = choose(&Problem { distributed: true, l2, ..set(name) });
                assert_ne!(choice.algorithm, Algorithm::Cocoa, "{name} l2 {l2}: {}", choice.reason);
            }
        }
        // Where one process would run CoCoA, workers run SCD, and say why.
        let choice = choose(&Problem { distributed: true, ..set("rcv1-small") });
        assert_eq!(choice.algorithm, Algorithm::Scd);
        assert!(choice.reason.contains("distributed"), "{}", choice.reason);
    }

    #[test]
    fn without_l2_cocoa_which_needs_it_is_never_chosen() {
        for name in ["rcv1-small", "criteo-sample", "movielens-100k"] {
            let choice = choose(&Problem { l2: 0.0, ..set(name) });
            assert_ne!(choice.algorithm, Algorithm::Cocoa, "{name}: {}", choice.reason);
        }
    }

    #[test]
    fn unscaled_values_keep_sparse_data_away_from_cocoa() {
        let choice = choose(&Problem { max_abs: 40.0, ..set("criteo-sample") });
        assert_eq!(choice.algorithm, Algorithm::Scd, "{}", choice.reason);
        // An unknown range (an old grid) counts as unscaled.
        let choice = choose(&Problem { max_abs: f64::INFINITY, ..set("rcv1-small") });
        assert_eq!(choice.algorithm, Algorithm::Scd, "{}", choice.reason);
    }

    #[test]
    fn the_choice_and_its_reason_depend_on_the_problem_only() {
        let problem = set("criteo-sample");
        assert_eq!(choose(&problem), choose(&problem.clone()));
        assert!(choose(&problem).reason.contains("cocoa"), "{}", choose(&problem).reason);
    }
}
