//! LIBLINEAR as an outside reference: libsvm files read directly, LIBLINEAR's model files,
//! and the primal objective of its weights computed from the file, not from linea's grid.

use linea_engine::Loss;

/// Parses a libsvm file into (y in {-1, +1}, [(feature from 1, value)]) rows.
pub fn libsvm_rows(path: &str) -> Vec<(f64, Vec<(usize, f64)>)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut fields = line.split_whitespace();
            let y = if fields.next().unwrap().parse::<f64>().unwrap() > 0.0 { 1.0 } else { -1.0 };
            let x = fields
                .map(|kv| {
                    let (k, v) = kv.split_once(':').unwrap();
                    (k.parse().unwrap(), v.parse().unwrap())
                })
                .collect();
            (y, x)
        })
        .collect()
}

/// A LIBLINEAR model's weights (features 1..=n, then the bias), oriented so that a
/// positive margin means the positive class (label 1 or +1).
pub fn liblinear_weights(model: &std::path::Path) -> Vec<f64> {
    let text = std::fs::read_to_string(model).unwrap();
    let mut lines = text.lines();
    let mut first_label_positive = true;
    for line in lines.by_ref() {
        if let Some(labels) = line.strip_prefix("label ") {
            first_label_positive = labels.split_whitespace().next().unwrap().parse::<f64>().unwrap() > 0.0;
        }
        if line == "w" {
            break;
        }
    }
    let sign = if first_label_positive { 1.0 } else { -1.0 };
    lines.filter(|l| !l.trim().is_empty()).map(|l| sign * l.trim().parse::<f64>().unwrap()).collect()
}

/// `sum loss(y, w.x + bias) + l2 (|w|^2 + bias^2)`, from the file's rows themselves.
pub fn libsvm_primal(loss: Loss, rows: &[(f64, Vec<(usize, f64)>)], weights: &[f64], l2: f64) -> f64 {
    let (bias, w) = weights.split_last().unwrap();
    let data: f64 = rows
        .iter()
        .map(|(y, x)| {
            let f = bias + x.iter().filter(|&&(j, _)| j <= w.len()).map(|&(j, v)| w[j - 1] * v).sum::<f64>();
            loss.value(*y, f)
        })
        .sum();
    data + l2 * weights.iter().map(|v| v * v).sum::<f64>()
}
