//! Reference solvers for tests: dense and direct, sharing nothing with SCD but the loss
//! functions, so agreement between the two is evidence rather than an echo.
//!
//! * Ridge: the closed form `(X'X + l2 I) w = X'y` by Cholesky.
//! * Logistic: full Newton on `sum log(1 + exp(-y w.x)) + l2 |w|^2` with a backtracking
//!   line search, iterated until the gradient vanishes to machine precision.

use crate::loss::Loss;

/// Sparse rows: (feature, value) pairs; features index the dense parameter vector.
pub type Rows = [Vec<(usize, f64)>];

pub fn objective(loss: Loss, rows: &Rows, targets: &[f64], w: &[f64], l2: f64) -> f64 {
    let data: f64 = rows.iter().zip(targets).map(|(r, &y)| loss.value(y, dot(r, w))).sum();
    data + l2 * w.iter().map(|x| x * x).sum::<f64>()
}

pub fn ridge(rows: &Rows, targets: &[f64], p: usize, l2: f64) -> Vec<f64> {
    let mut a = vec![0.0; p * p];
    let mut b = vec![0.0; p];
    for (r, &y) in rows.iter().zip(targets) {
        accumulate_outer(&mut a, p, r, 1.0);
        r.iter().for_each(|&(j, x)| b[j] += x * y);
    }
    (0..p).for_each(|j| a[j * p + j] += l2);
    cholesky_solve(&mut a, p, &b)
}

pub fn logistic(rows: &Rows, targets: &[f64], p: usize, l2: f64) -> Vec<f64> {
    let loss = Loss::Logistic;
    let mut w = vec![0.0; p];
    let mut f = objective(loss, rows, targets, &w, l2);
    for _ in 0..100 {
        let mut hessian = vec![0.0; p * p];
        let mut gradient: Vec<f64> = w.iter().map(|&x| 2.0 * l2 * x).collect();
        for (r, &y) in rows.iter().zip(targets) {
            let d = loss.derivatives(y, dot(r, &w));
            r.iter().for_each(|&(j, x)| gradient[j] += d.first * x);
            accumulate_outer(&mut hessian, p, r, d.second);
        }
        (0..p).for_each(|j| hessian[j * p + j] += 2.0 * l2);
        let step = cholesky_solve(&mut hessian, p, &gradient);
        let mut t = 1.0;
        loop {
            let candidate: Vec<f64> = w.iter().zip(&step).map(|(a, s)| a - t * s).collect();
            let fc = objective(loss, rows, targets, &candidate, l2);
            if fc <= f || t < 1e-12 {
                let done = f - fc <= 1e-15 * f.abs();
                w = candidate;
                f = fc.min(f);
                if done {
                    return w;
                }
                break;
            }
            t *= 0.5;
        }
    }
    w
}

fn dot(r: &[(usize, f64)], w: &[f64]) -> f64 {
    r.iter().map(|&(j, x)| x * w[j]).sum()
}

fn accumulate_outer(a: &mut [f64], p: usize, r: &[(usize, f64)], scale: f64) {
    for &(i, xi) in r {
        for &(j, xj) in r {
            a[i * p + j] += scale * xi * xj;
        }
    }
}

/// Solves `A x = b` for symmetric positive definite `A` (overwritten by its factor).
fn cholesky_solve(a: &mut [f64], p: usize, b: &[f64]) -> Vec<f64> {
    for j in 0..p {
        let mut d = a[j * p + j];
        for k in 0..j {
            d -= a[j * p + k] * a[j * p + k];
        }
        assert!(d > 0.0, "matrix is not positive definite");
        let d = d.sqrt();
        a[j * p + j] = d;
        for i in j + 1..p {
            let mut s = a[i * p + j];
            for k in 0..j {
                s -= a[i * p + k] * a[j * p + k];
            }
            a[i * p + j] = s / d;
        }
    }
    let mut y = b.to_vec();
    for i in 0..p {
        for k in 0..i {
            y[i] -= a[i * p + k] * y[k];
        }
        y[i] /= a[i * p + i];
    }
    for i in (0..p).rev() {
        for k in i + 1..p {
            y[i] -= a[k * p + i] * y[k];
        }
        y[i] /= a[i * p + i];
    }
    y
}
