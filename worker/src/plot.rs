//! A convergence plot as a self-contained SVG: relative suboptimality
//! `(F(t) - F*) / F*` against seconds on a log scale, with F* the best objective reached,
//! and, for algorithms that have one, the relative gap (CoCoA's duality gap, the batch
//! family's gradient bound) — a certificate: the true
//! suboptimality is below it. Where the algorithm changed its worker count (an elastic
//! scale-in) a dotted vertical line marks the moment, labelled with the new count.

use crate::driver::EpochPoint;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

pub fn convergence_svg(trace: &[EpochPoint], title: &str, gap_name: &str) -> String {
    let best = trace.iter().map(|p| p.objective).fold(f64::INFINITY, f64::min);
    let points: Vec<(f64, f64)> = trace
        .iter()
        .map(|p| (p.seconds, (p.objective - best) / best.abs().max(f64::MIN_POSITIVE)))
        .filter(|&(_, gap)| gap > 0.0)
        .collect();
    let gaps: Vec<(f64, f64)> =
        trace.iter().filter_map(|p| Some((p.seconds, p.gap?.relative))).filter(|&(_, g)| g > 0.0).collect();
    let t_max = trace.last().map_or(1.0, |p| p.seconds).max(1e-6);
    let (lo, hi) = points
        .iter()
        .chain(&gaps)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, g)| (lo.min(g.log10()), hi.max(g.log10())));
    let (lo, hi) = if lo.is_finite() { (lo.floor(), hi.ceil().max(lo.floor() + 1.0)) } else { (-1.0, 0.0) };
    let x = |t: f64| LEFT + t / t_max * (WIDTH - LEFT - RIGHT);
    let y = |g: f64| TOP + (hi - g.log10()) / (hi - lo) * (HEIGHT - TOP - BOTTOM);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        WIDTH / 2.0,
        escape(title)
    );
    for decade in lo as i32..=hi as i32 {
        let yy = y(10f64.powi(decade));
        svg += &format!(
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">1e{decade}</text>\n",
            WIDTH - RIGHT,
            LEFT - 6.0,
            yy + 4.0
        );
    }
    for i in 0..=4 {
        let t = t_max * i as f64 / 4.0;
        svg +=
            &format!("<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{t:.2}</text>\n", x(t), HEIGHT - BOTTOM + 18.0);
    }
    svg += &format!(
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds</text>\n\
         <text transform=\"translate(18 {}) rotate(-90)\" text-anchor=\"middle\">(objective - best) / best</text>\n",
        WIDTH - LEFT - RIGHT,
        HEIGHT - TOP - BOTTOM,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 12.0,
        (TOP + HEIGHT - BOTTOM) / 2.0
    );
    let path: Vec<String> = points.iter().map(|&(t, g)| format!("{:.1},{:.1}", x(t), y(g))).collect();
    svg += &format!("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>\n", path.join(" "));
    for &(t, g) in &points {
        svg += &format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#1f77b4\"/>\n", x(t), y(g));
    }
    if !gaps.is_empty() {
        let path: Vec<String> = gaps.iter().map(|&(t, g)| format!("{:.1},{:.1}", x(t), y(g))).collect();
        svg += &format!(
            "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"6 3\" points=\"{}\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#d62728\">- - relative {gap_name}</text>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#1f77b4\">&#8212; (objective - best) / best</text>\n",
            path.join(" "),
            WIDTH - RIGHT - 6.0,
            TOP + 48.0,
            WIDTH - RIGHT - 6.0,
            TOP + 32.0
        );
    }
    for &(t, g) in &gaps {
        svg += &format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#d62728\"/>\n", x(t), y(g));
    }
    // CoCoA computes its objective and gap only after some epochs (its gap schedule): say so,
    // as the lines join the computed points (marked) and nothing is known between them.
    let computed = trace.iter().filter(|p| !p.objective.is_nan()).count();
    if computed < trace.len() {
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">computed after {computed} of {} epochs (dots); nothing is known between</text>\n",
            WIDTH - RIGHT - 6.0,
            TOP + 64.0,
            trace.len()
        );
    }
    for pair in trace.windows(2) {
        if let (Some(before), Some(after)) = (pair[0].workers, pair[1].workers)
            && before != after
        {
            let xx = x(pair[1].seconds);
            svg += &format!(
                "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{TOP}\" y2=\"{}\" stroke=\"#2ca02c\" stroke-dasharray=\"2 3\"/>\n\
                 <text x=\"{:.1}\" y=\"{}\" fill=\"#2ca02c\">{before}&#8594;{after} workers</text>\n",
                HEIGHT - BOTTOM,
                xx + 3.0,
                HEIGHT - BOTTOM - 6.0
            );
        }
    }
    svg += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">best objective {best:.10e} after {} epochs</text>\n</svg>\n",
        WIDTH - RIGHT - 6.0,
        TOP + 16.0,
        trace.len().saturating_sub(1)
    );
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
