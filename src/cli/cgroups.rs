//! `pagewise cgroups`: render the library's CgroupsReport.

use super::exit::{CliError, ExitCode};
use super::output::Output;
use super::render;
use clap::Args;
use pagewise_core::cgroup::{self, CgroupsOptions, CgroupsReport, SortKey};
use std::io::Write;
use std::path::PathBuf;

/// The `pagewise cgroups --help` epilogue.
pub const EXAMPLES: &str = "\
Examples:
  pagewise cgroups                        the whole memory hierarchy, largest file cache first
  pagewise cgroups --top 10               the ten groups with the most file cache
  pagewise cgroups /system.slice -d 1     a group and its direct children
  pagewise cgroups --self --json          your own cgroup's tree as JSON
  pagewise evict --cgroup /system.slice/x.service   reclaim a group's file cache

Figures come from each group's memory.stat and include its descendants: cgroup v2 (file,
file_dirty, ...) or v1's memory controller (total_cache, total_dirty, ...). REFAULTS counts
evicted file pages read again (workingset_refault_file; '-' where the kernel has none).

Exit codes: 0 success, 1 fatal error, 2 some groups could not be read.";

#[derive(Args, Debug)]
pub struct CgroupsArgs {
    /// A cgroup directory (/sys/fs/cgroup/memory/x) or cgroup path (/x). Default: the memory
    /// hierarchy's root (v1's memory controller when mounted, else v2)
    pub path: Option<PathBuf>,
    /// Start at your own memory cgroup (from /proc/self/cgroup)
    #[arg(long = "self", conflicts_with = "path")]
    pub own: bool,
    /// Levels below PATH to list (0: PATH alone)
    #[arg(short = 'd', long, value_name = "N")]
    pub max_depth: Option<usize>,
    /// Order of the rows [default: tree; file with --top]
    #[arg(long, value_name = "KEY", value_parser = sort_key())]
    pub sort: Option<SortKey>,
    /// Only the N first groups in --sort order. A ranking by a figure lists leaf groups only
    /// (no child listed): figures include descendants', so / would always come first
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Rank every group, inner ones too (their figures include their children's)
    #[arg(long)]
    pub all_levels: bool,
    /// One JSON document on stdout (schema: docs/json.md)
    #[arg(short = 'J', long)]
    pub json: bool,
}

/// `--sort KEY`: one of the core's keys, by name (clap checked it against the list).
fn sort_key() -> impl clap::builder::TypedValueParser<Value = SortKey> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(SortKey::ALL.map(|(name, _)| name))
        .map(|name: String| SortKey::named(&name).unwrap_or(SortKey::Tree))
}

/// `pagewise cgroups`.
pub fn run(a: CgroupsArgs) -> Result<ExitCode, CliError> {
    let root = if a.own {
        Some(cgroup::own_memory_cgroup()?)
    } else {
        a.path.clone()
    };
    let opts = CgroupsOptions {
        root,
        max_depth: a.max_depth,
    };
    let mut report = cgroup::cgroups(&opts, &())?;
    let key = cgroup::rank(&mut report.groups, a.sort, a.top, a.all_levels);
    let code = ExitCode::from_outcome(&report.outcome);
    Output::of(a.json, false).document(&report, |r| {
        let o = &r.outcome;
        render::report_problems("cgroups", &o.errors, o.error_count, &o.notices);
        let _ = write_table(&mut std::io::stdout().lock(), r, key == SortKey::Tree);
    });
    Ok(code)
}

/// One row per group; in tree order names are indented by depth.
fn write_table(w: &mut dyn Write, report: &CgroupsReport, tree: bool) -> std::io::Result<()> {
    let mut rows = vec![render::file_cache_header("CGROUP", &["REFAULTS"])];
    let base = report.groups.iter().map(|g| g.depth).min().unwrap_or(0);
    for g in &report.groups {
        let c = &g.cache;
        let name = render::escape_bytes(g.cgroup.as_bytes());
        let name = if tree {
            format!("{}{}", "  ".repeat(g.depth - base), name)
        } else {
            name
        };
        let mut row = render::file_cache_row(name, c);
        row.push(
            c.workingset_refaults
                .map_or_else(|| "-".into(), |r| r.to_string()),
        );
        rows.push(row);
    }
    if rows.len() == 1 {
        return Ok(());
    }
    w.write_all(render::table(&rows).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagewise_core::cgroup::{CgroupStat, FileCache, Hierarchy};
    use pagewise_core::Outcome;

    fn group(name: &str, depth: usize, file: u64) -> CgroupStat {
        CgroupStat {
            path: PathBuf::from(format!("/sys/fs/cgroup/memory{name}")),
            cgroup: name.into(),
            depth,
            cache: FileCache {
                file_bytes: file,
                dirty_bytes: 4096,
                workingset_refaults: (depth == 0).then_some(7),
                ..FileCache::default()
            },
        }
    }

    fn render(groups: Vec<CgroupStat>, key: SortKey) -> String {
        let mut r = CgroupsReport {
            hierarchy: Hierarchy::V1,
            groups,
            outcome: Outcome::default(),
        };
        cgroup::rank(&mut r.groups, Some(key), None, false);
        let mut out = Vec::new();
        write_table(&mut out, &r, key == SortKey::Tree).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn tree_order_indents_children() {
        let got = render(
            vec![
                group("/", 0, 1 << 20),
                group("/a", 1, 8192),
                group("/a/b", 2, 4096),
            ],
            SortKey::Tree,
        );
        assert_eq!(
            got,
            "CGROUP       FILE    DIRTY  WRITEBACK  MAPPED  ACTIVE  INACTIVE  REFAULTS\n\
             /         1.0 MiB  4.0 KiB        0 B     0 B     0 B       0 B         7\n\
             \x20 /a      8.0 KiB  4.0 KiB        0 B     0 B     0 B       0 B         -\n\
             \x20   /a/b  4.0 KiB  4.0 KiB        0 B     0 B     0 B       0 B         -\n"
        );
    }

    #[test]
    fn sorted_rows_are_flat_and_largest_first() {
        let got = render(
            vec![group("/x", 1, 4096), group("/y", 1, 8192)],
            SortKey::File,
        );
        let first: Vec<&str> = got
            .lines()
            .skip(1)
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        assert_eq!(first, ["/y", "/x"]);
    }
}
