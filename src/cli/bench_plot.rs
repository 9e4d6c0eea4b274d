//! `bench --plot FILE.svg`: per command and state a box of its run times (quartiles, whiskers
//! at 1.5 IQR as Tukey drew them), every run a grey dot, the mean and its 95% interval in red;
//! drawn with plotters.

use pagewise_core::bench::BenchReport;
use plotters::prelude::*;
use std::path::Path;

/// Writes the picture of `r` to `path` (SVG).
pub fn svg(r: &BenchReport, path: &Path) -> std::io::Result<()> {
    draw(r, path).map_err(|e| std::io::Error::other(e.to_string()))
}

/// One box: its label and run times (ms), the mean and the interval's half width (ms).
struct Column {
    label: String,
    times: Vec<f32>,
    mean: f32,
    ci: f32,
}

fn columns(r: &BenchReport) -> Vec<Column> {
    let several = r.commands.len() > 1;
    let mut out = Vec::new();
    for (i, c) in r.commands.iter().enumerate() {
        for st in &c.states {
            let Some(x) = &st.stats else { continue };
            let label = if several {
                format!("{} #{}", st.state.name(), i + 1)
            } else {
                st.state.name().to_string()
            };
            out.push(Column {
                label,
                times: st.runs.iter().map(|r| (r.time_s * 1e3) as f32).collect(),
                mean: (x.mean_s * 1e3) as f32,
                ci: (x.ci95_s.unwrap_or(0.0) * 1e3) as f32,
            });
        }
    }
    out
}

fn draw(r: &BenchReport, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let cols = columns(r);
    let width = (160 + 150 * cols.len() as u32).clamp(640, 2400);
    let root = SVGBackend::new(path, (width, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = cols
        .iter()
        .flat_map(|c| c.times.iter().copied().chain([c.mean + c.ci]))
        .fold(0f32, f32::max)
        .max(1e-3)
        * 1.1;
    let title = match r.commands.as_slice() {
        [one] => format!("pagewise bench: {}", one.name),
        _ => "pagewise bench".to_string(),
    };
    // What fits the width at the caption's size (a long command line was cut at both ends).
    let fits = (width as usize / 10).max(16);
    let title = if title.chars().count() > fits {
        let kept: String = title.chars().take(fits - 1).collect();
        format!("{kept}…")
    } else {
        title
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d((0..cols.len()).into_segmented(), 0f32..top)?;
    let labels: Vec<String> = cols.iter().map(|c| c.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(cols.len().max(1))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc("run time (ms)")
        .draw()?;
    for (i, c) in cols.iter().enumerate() {
        let q = Quartiles::new(&c.times);
        chart.draw_series(std::iter::once(
            Boxplot::new_vertical(SegmentValue::CenterOf(i), &q)
                .width(36)
                .style(BLUE),
        ))?;
        chart.draw_series(
            c.times
                .iter()
                .map(|&t| Circle::new((SegmentValue::CenterOf(i), t), 2, BLACK.mix(0.35).filled())),
        )?;
        chart.draw_series(std::iter::once(ErrorBar::new_vertical(
            SegmentValue::CenterOf(i),
            c.mean - c.ci,
            c.mean,
            c.mean + c.ci,
            RED.stroke_width(2),
            14,
        )))?;
    }
    root.present()?;
    Ok(())
}
