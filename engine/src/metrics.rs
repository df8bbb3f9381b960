//! Evaluation metrics over (target, prediction) pairs.

use crate::loss::Loss;
use serde::Serialize;

/// Metrics for one evaluation; those that do not fit the loss are `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    pub examples: usize,
    /// Sum of losses (the data term of the objective).
    pub loss_sum: f64,
    pub auc: Option<f64>,
    pub log_loss: Option<f64>,
    pub accuracy: Option<f64>,
    pub rmse: Option<f64>,
}

/// `targets` are the loss's targets (±1 for logistic); `predictions` are margins.
pub fn evaluate(loss: Loss, targets: &[f64], predictions: &[f64]) -> Metrics {
    let n = targets.len();
    let loss_sum: f64 = targets.iter().zip(predictions).map(|(&y, &f)| loss.value(y, f)).sum();
    let rmse =
        (targets.iter().zip(predictions).map(|(&y, &f)| (y - f) * (y - f)).sum::<f64>() / n.max(1) as f64).sqrt();
    match loss {
        Loss::Squared => Metrics { examples: n, loss_sum, auc: None, log_loss: None, accuracy: None, rmse: Some(rmse) },
        Loss::Logistic | Loss::Hinge => {
            let correct = targets.iter().zip(predictions).filter(|&(&y, &f)| (f >= 0.0) == (y > 0.0)).count();
            Metrics {
                examples: n,
                loss_sum,
                auc: auc(targets, predictions),
                log_loss: (loss == Loss::Logistic).then(|| loss_sum / n.max(1) as f64),
                accuracy: Some(correct as f64 / n.max(1) as f64),
                rmse: None,
            }
        }
    }
}

/// Area under the ROC curve by the rank-sum (Mann–Whitney) formula, tied scores sharing
/// their average rank. `None` when one class is absent.
pub fn auc(targets: &[f64], scores: &[f64]) -> Option<f64> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let positives = targets.iter().filter(|&&y| y > 0.0).count() as f64;
    let negatives = targets.len() as f64 - positives;
    if positives == 0.0 || negatives == 0.0 {
        return None;
    }
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && scores[order[j + 1]] == scores[order[i]] {
            j += 1;
        }
        let average_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum += order[i..=j].iter().filter(|&&k| targets[k] > 0.0).count() as f64 * average_rank;
        i = j + 1;
    }
    Some((rank_sum - positives * (positives + 1.0) / 2.0) / (positives * negatives))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_counts_ordered_pairs_and_halves_ties() {
        // Brute force over pairs is the definition; compare on a small case with ties.
        let targets = [1.0, -1.0, 1.0, -1.0, 1.0, -1.0];
        let scores = [0.9, 0.1, 0.4, 0.4, 0.2, 0.3];
        let mut pairs = 0.0;
        let mut good = 0.0;
        for (i, &yi) in targets.iter().enumerate() {
            for (j, &yj) in targets.iter().enumerate() {
                if yi > 0.0 && yj < 0.0 {
                    pairs += 1.0;
                    good += if scores[i] > scores[j] {
                        1.0
                    } else if scores[i] == scores[j] {
                        0.5
                    } else {
                        0.0
                    };
                }
            }
        }
        assert!((auc(&targets, &scores).unwrap() - good / pairs).abs() < 1e-15);
        assert_eq!(auc(&[1.0, 1.0], &[0.1, 0.2]), None);
    }
}
