//! The statistics of `bench`: mean ± 95% confidence interval (Student's t), median, standard
//! deviation, min–max, outliers by the modified Z-score (hyperfine's rule: |0.6745 (x − median)
//! / MAD| > 3.5), and the difference of two states' means with Welch's interval.

use serde::Serialize;

/// What a set of run times says, seconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Stats {
    /// Runs counted.
    pub runs: u64,
    /// Mean, s.
    pub mean_s: f64,
    /// Half the width of the 95% confidence interval of the mean (Student's t), s; null with
    /// fewer than two runs.
    pub ci95_s: Option<f64>,
    /// Median, s.
    pub median_s: f64,
    /// Sample standard deviation, s; null with fewer than two runs.
    pub stddev_s: Option<f64>,
    /// Fastest run, s.
    pub min_s: f64,
    /// Slowest run, s.
    pub max_s: f64,
    /// Runs whose modified Z-score is above 3.5 (counted in the figures all the same, as
    /// hyperfine counts them; flagged so that a disturbed run is seen).
    pub outliers: u64,
}

/// The difference of two means (`a − b`), with Welch's 95% interval.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Difference {
    /// Mean of `a` minus mean of `b`, s.
    pub mean_s: f64,
    /// Half the width of its 95% confidence interval, s; null when either side has fewer than
    /// two runs.
    pub ci95_s: Option<f64>,
    /// `a`'s mean over `b`'s (how many times slower).
    pub ratio: f64,
}

/// The modified Z-score above which a run is an outlier (Iglewicz and Hoaglin; hyperfine).
pub const OUTLIER_Z: f64 = 3.5;

/// The statistics of `xs` (None when empty). NaNs are not expected (times are measured).
pub fn stats(xs: &[f64]) -> Option<Stats> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let sd = sample_sd(xs, mean);
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(Stats {
        runs: n as u64,
        mean_s: mean,
        ci95_s: sd.map(|s| t95(n as f64 - 1.0) * s / (n as f64).sqrt()),
        median_s: median(&sorted),
        stddev_s: sd,
        min_s: sorted[0],
        max_s: sorted[n - 1],
        outliers: outliers(xs).iter().filter(|&&o| o).count() as u64,
    })
}

/// Which of `xs` are outliers (modified Z-score above [`OUTLIER_Z`]); none when the median
/// absolute deviation is 0 (half the runs or more took the same time).
pub fn outliers(xs: &[f64]) -> Vec<bool> {
    if xs.len() < 3 {
        return vec![false; xs.len()];
    }
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let med = median(&sorted);
    let mut dev: Vec<f64> = xs.iter().map(|x| (x - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    let mad = median(&dev);
    if mad <= 0.0 {
        return vec![false; xs.len()];
    }
    xs.iter()
        .map(|x| (0.6745 * (x - med) / mad).abs() > OUTLIER_Z)
        .collect()
}

/// `a − b` of two samples' means, Welch's interval.
pub fn difference(a: &[f64], b: &[f64]) -> Option<Difference> {
    let (sa, sb) = (stats(a)?, stats(b)?);
    let ci = match (sa.stddev_s, sb.stddev_s) {
        (Some(da), Some(db)) => {
            let (na, nb) = (a.len() as f64, b.len() as f64);
            let (va, vb) = (da * da / na, db * db / nb);
            let se2 = va + vb;
            // Welch–Satterthwaite degrees of freedom (both variances 0: exact, any df).
            let df = if se2 > 0.0 {
                se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0))
            } else {
                na + nb - 2.0
            };
            Some(t95(df) * se2.sqrt())
        }
        _ => None,
    };
    Some(Difference {
        mean_s: sa.mean_s - sb.mean_s,
        ci95_s: ci,
        ratio: if sb.mean_s > 0.0 {
            sa.mean_s / sb.mean_s
        } else {
            f64::INFINITY
        },
    })
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn sample_sd(xs: &[f64], mean: f64) -> Option<f64> {
    (xs.len() >= 2).then(|| {
        let ss: f64 = xs.iter().map(|x| (x - mean) * (x - mean)).sum();
        (ss / (xs.len() - 1) as f64).sqrt()
    })
}

/// The two-sided 95% quantile of Student's t with `df` degrees of freedom (df ≥ 1; fractional
/// df from Welch's formula interpolated): the table for df ≤ 30, then the Cornish–Fisher
/// expansion around the normal quantile (error below 1e-3 there).
pub fn t95(df: f64) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    let df = if df.is_finite() { df.max(1.0) } else { 1e9 };
    if df <= 30.0 {
        let lo = df.floor() as usize;
        let hi = df.ceil() as usize;
        let (tl, th) = (TABLE[lo - 1], TABLE[hi - 1]);
        return tl + (th - tl) * (df - lo as f64);
    }
    let z: f64 = 1.959_963_984_540_054;
    let (z3, z5) = (z.powi(3), z.powi(5));
    z + (z3 + z) / (4.0 * df) + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df * df)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_ci_median_and_spread_of_a_known_sample() {
        let s = stats(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(s.mean_s, 3.0);
        assert_eq!(s.median_s, 3.0);
        let sd = s.stddev_s.unwrap();
        assert!((sd - 2.5f64.sqrt()).abs() < 1e-12);
        // t(4) = 2.776: 2.776 * 1.5811 / sqrt(5) = 1.963
        assert!((s.ci95_s.unwrap() - 1.963).abs() < 1e-3, "{s:?}");
        assert_eq!((s.min_s, s.max_s, s.outliers), (1.0, 5.0, 0));
        let one = stats(&[0.5]).unwrap();
        assert_eq!((one.ci95_s, one.stddev_s, one.median_s), (None, None, 0.5));
        assert!(stats(&[]).is_none());
    }

    #[test]
    fn t_quantiles_meet_the_table_and_the_normal_limit() {
        assert!((t95(1.0) - 12.706).abs() < 1e-9);
        assert!((t95(10.0) - 2.228).abs() < 1e-9);
        assert!((t95(10.5) - 2.2145).abs() < 1e-9);
        assert!((t95(40.0) - 2.021).abs() < 2e-3);
        assert!((t95(120.0) - 1.980).abs() < 2e-3);
        assert!((t95(f64::INFINITY) - 1.960).abs() < 1e-3);
        assert!((t95(0.2) - 12.706).abs() < 1e-9, "clamped to 1");
    }

    #[test]
    fn one_slow_run_is_an_outlier_and_equal_runs_have_none() {
        let mut xs = vec![0.100, 0.101, 0.099, 0.102, 0.100, 0.098, 0.101];
        xs.push(0.300);
        let o = outliers(&xs);
        assert_eq!(o.iter().filter(|&&x| x).count(), 1);
        assert!(o[7]);
        assert_eq!(stats(&xs).unwrap().outliers, 1);
        assert!(outliers(&[0.1; 9]).iter().all(|&x| !x));
    }

    #[test]
    fn welch_difference_of_two_samples() {
        let cold = [2.0, 2.2, 1.8, 2.1, 1.9];
        let hot = [1.0, 1.1, 0.9, 1.0, 1.0];
        let d = difference(&cold, &hot).unwrap();
        assert!((d.mean_s - 1.0).abs() < 1e-12);
        assert!((d.ratio - 2.0).abs() < 1e-12);
        let ci = d.ci95_s.unwrap();
        assert!(ci > 0.0 && ci < 0.3, "{d:?}");
        assert!(difference(&[1.0], &hot).unwrap().ci95_s.is_none());
    }

    /// Any sample: the figures are finite and ordered (min ≤ median, mean ≤ max; the interval
    /// and the spread not negative), and a run scaled scales them.
    #[test]
    fn property_figures_are_ordered_for_any_sample() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = 1 + (seed % 40) as usize;
            let xs: Vec<f64> = (0..n)
                .map(|i| {
                    let v = seed.rotate_left(i as u32 * 7) % 1_000_000;
                    v as f64 / 1e4
                })
                .collect();
            let s = stats(&xs).unwrap();
            assert!(s.min_s <= s.median_s && s.median_s <= s.max_s, "{xs:?}");
            assert!(
                s.min_s <= s.mean_s + 1e-9 && s.mean_s <= s.max_s + 1e-9,
                "{xs:?}"
            );
            assert!(s.ci95_s.unwrap_or(0.0) >= 0.0 && s.stddev_s.unwrap_or(0.0) >= 0.0);
            assert!(s.outliers <= n as u64);
            let scaled: Vec<f64> = xs.iter().map(|x| x * 2.0).collect();
            let s2 = stats(&scaled).unwrap();
            assert!((s2.mean_s - 2.0 * s.mean_s).abs() < 1e-6 * (1.0 + s.mean_s));
        }
    }
}
