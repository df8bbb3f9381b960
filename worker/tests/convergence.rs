//! MovieLens: the set-valued `genres` namespace makes impure blocks, which SCD must handle
//! with a line search, and the objective must fall at every iteration.

mod common;

use common::*;
use linea_engine::Loss;
use linea_engine::algorithm::Algorithm;
use linea_engine::runner::LocalRunner;
use linea_engine::scd::{Scd, Update};
use linea_worker::input::Format;

#[test]
fn movielens_objective_falls_every_iteration_with_line_searched_genres() {
    let (_dir, loaded) = prepare(&data("movielens-100k/ratings.vw"), spec(Format::Vw), 16384, Loss::Squared);
    let impure: Vec<usize> =
        (0..loaded.layout.manifest.blocks.len()).filter(|&b| !loaded.layout.manifest.blocks[b].pure).collect();
    assert!(!impure.is_empty());
    assert!(impure.iter().all(|&b| loaded.layout.manifest.blocks[b].variable == "genres"), "only genres is set-valued");
    let shards = loaded.grid.targets.len();
    let mut scd = Scd::new(config(&loaded, Loss::Squared, 1.0, 1e-10), loaded.grid.shapes.clone(), shards);
    let mut exec = LocalRunner::new(scd.kernel().clone(), &loaded.grid, 2);
    let mut objectives = vec![scd.objective(&mut exec).unwrap()];
    let mut genre_steps = Vec::new();
    while !scd.finished() {
        scd.run_epoch(&mut exec, |scd, report, exec| {
            objectives.push(scd.objective(exec)?);
            if let Update::Block(b) = report.update
                && impure.contains(&b)
                && report.step > 0.0
            {
                genre_steps.push(report.step);
            }
            Ok(())
        })
        .unwrap();
    }
    // Squared loss: |l'| = 2 |y - f| <= 2 * 5 here, times 2^-33 of rounding per non-zero.
    let noise = 10.0 * loaded.layout.manifest.nnz as f64 * 2f64.powi(-33);
    for (i, pair) in objectives.windows(2).enumerate() {
        assert!(pair[1] <= pair[0] + noise, "iteration {i}: {} -> {}", pair[0], pair[1]);
    }
    assert!(objectives.len() > 50);
    // Full steps on a block where examples have several genres would overshoot; the line
    // search must have shortened some of them.
    assert!(genre_steps.iter().any(|&a| a < 1.0), "genre steps: {genre_steps:?}");
}
