//! Include / exclude globs, matched on a name or on the path below its root.

use crate::sys;
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::ffi::CStr;
use std::path::Path;

/// Compiled include/exclude globs.
pub(super) struct Filter {
    pub(super) include: Option<GlobSet>,
    pub(super) exclude: Option<GlobSet>,
}

pub(super) fn build_globs(globs: &[String]) -> Result<Option<GlobSet>, crate::Error> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for g in globs {
        b.add(Glob::new(g).map_err(|e| crate::Error::Invalid {
            what: "glob",
            message: format!("{g}: {e}"),
        })?);
    }
    b.build().map(Some).map_err(|e| crate::Error::Invalid {
        what: "glob",
        message: e.to_string(),
    })
}

impl Filter {
    fn matches(set: &GlobSet, rel: &Path, name: &CStr) -> bool {
        set.is_match(rel) || set.is_match(sys::name_os(name))
    }
    pub(super) fn excluded(&self, rel: &Path, name: &CStr) -> bool {
        self.exclude
            .as_ref()
            .is_some_and(|s| Self::matches(s, rel, name))
    }
    pub(super) fn included(&self, rel: &Path, name: &CStr) -> bool {
        self.include
            .as_ref()
            .is_none_or(|s| Self::matches(s, rel, name))
    }
}
