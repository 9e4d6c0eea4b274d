//! Prometheus text format (0.0.4) and OpenMetrics (1.0.0) writing: families with HELP and
//! TYPE, escaped label values, counters named `_total` in both (OpenMetrics names the family
//! without the suffix), `# UNIT` and `# EOF` for OpenMetrics.

use std::fmt::Write;

/// Which exposition format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    Prometheus,
    /// OpenMetrics 1.0.0 (`application/openmetrics-text; version=1.0.0`).
    OpenMetrics,
}

impl Format {
    /// The format an HTTP `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` (as Prometheus does first), else the text format.
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a)
                if a.split(',').any(|part| {
                    let mut it = part.split(';');
                    let ty = it.next().unwrap_or("").trim();
                    // q=0 means "not this one".
                    let refused = it.any(|p| {
                        let p = p.trim();
                        p == "q=0" || p == "q=0.0" || p == "q=0.00" || p == "q=0.000"
                    });
                    ty.eq_ignore_ascii_case("application/openmetrics-text") && !refused
                }) =>
            {
                Format::OpenMetrics
            }
            _ => Format::Prometheus,
        }
    }
    /// The Content-Type header value of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Goes up and down.
    Gauge,
    /// Only goes up (named `..._total`).
    Counter,
}

/// Writes metric families into a string.
pub struct Writer {
    format: Format,
    out: String,
}

/// Escapes a label value: backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A float as both formats want it (integers without a fraction, `+Inf`, `NaN`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

impl Writer {
    /// An empty exposition in `format`.
    pub fn new(format: Format) -> Writer {
        Writer {
            format,
            out: String::new(),
        }
    }

    /// Starts a family: `name` is the sample name (`..._bytes`, `..._total` for counters).
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let family = match (self.format, kind) {
            (Format::OpenMetrics, Kind::Counter) => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(self.out, "# HELP {family} {help}");
        let ty = match kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = writeln!(self.out, "# TYPE {family} {ty}");
        if self.format == Format::OpenMetrics {
            for unit in ["bytes", "seconds"] {
                if family.ends_with(&format!("_{unit}")) {
                    let _ = writeln!(self.out, "# UNIT {family} {unit}");
                }
            }
        }
    }

    /// One sample of the family just started.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The exposition (OpenMetrics ends with `# EOF`).
    pub fn finish(mut self) -> String {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_picks_the_format() {
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Prometheus);
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0")),
            Format::Prometheus
        );
    }

    #[test]
    fn counters_and_units_per_format() {
        let mut w = Writer::new(Format::OpenMetrics);
        w.single("pagewise_scrapes_total", Kind::Counter, "Scrapes.", 3.0);
        w.family("pagewise_path_cached_bytes", Kind::Gauge, "Cached.");
        w.sample(
            "pagewise_path_cached_bytes",
            &[("path", "/a \"b\"\n\\")],
            4096.0,
        );
        assert_eq!(
            w.finish(),
            "# HELP pagewise_scrapes Scrapes.\n# TYPE pagewise_scrapes counter\npagewise_scrapes_total 3\n\
             # HELP pagewise_path_cached_bytes Cached.\n# TYPE pagewise_path_cached_bytes gauge\n\
             # UNIT pagewise_path_cached_bytes bytes\n\
             pagewise_path_cached_bytes{path=\"/a \\\"b\\\"\\n\\\\\"} 4096\n# EOF\n"
        );
        let mut w = Writer::new(Format::Prometheus);
        w.single("pagewise_scrapes_total", Kind::Counter, "Scrapes.", 3.0);
        w.single("pagewise_snapshot_age_seconds", Kind::Gauge, "Age.", 0.25);
        assert_eq!(
            w.finish(),
            "# HELP pagewise_scrapes_total Scrapes.\n# TYPE pagewise_scrapes_total counter\npagewise_scrapes_total 3\n\
             # HELP pagewise_snapshot_age_seconds Age.\n# TYPE pagewise_snapshot_age_seconds gauge\npagewise_snapshot_age_seconds 0.25\n"
        );
    }
}
