//! Unknown flags: clap's own message without its guess (which named unrelated flags: copy's
//! `--inplace` was offered `--ionice`), and, for an rsync flag, what pagewise has for it.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// rsync's long options (rsync 3.5's options.c, without the `no-` forms).
const RSYNC_LONG: &str = "8-bit-output acls address append append-verify archive atimes backup backup-dir block-size blocking-io bwlimit cc checksum checksum-choice checksum-seed chmod chown compare-dest compress compress-choice compress-level compress-threads config confine-root contimeout copy-as copy-dest copy-devices copy-dirlinks copy-links copy-unsafe-links crtimes cvs-exclude daemon debug del delay-updates delete delete-after delete-before delete-delay delete-during delete-excluded delete-missing-args detach devices dirs dparam dry-run early-input exclude exclude-from executability existing fake-super files-from filter force from0 fsync fuzzy group groupmap hard-links help human-readable i-d i-r iconv ignore-errors ignore-existing ignore-missing-args ignore-non-existing ignore-times implied-dirs inc-recursive include include-from info inplace insecure-links ipv4 ipv6 itemize-changes keep-dirlinks link-dest links list-only log-file log-file-format log-format max-alloc max-delete max-size min-size mkpath modify-window motd msgs2stderr munge-links new-compress numeric-ids old-args old-compress old-d old-dirs omit-dir-times omit-link-times one-file-system only-write-batch open-noatime out-format outbuf owner partial partial-dir password-file perms port preallocate progress protect-args protocol prune-empty-dirs qsort quiet read-batch recursive relative remote-option remove-sent-files remove-source-files rsh rsync-path safe-links secluded-args sender server size-only skip-compress sockopts sparse specials stats stderr stop-after stop-at suffix super temp-dir time-limit timeout times trust-sender update usermap verbose version whole-file write-batch write-devices xattrs zc zl zt ";

/// Whether `arg` (`--name` or `--name=value`, or `--no-name`) is one of rsync's long options.
fn is_rsync(arg: &str) -> bool {
    let Some(name) = arg.strip_prefix("--") else {
        return false;
    };
    let name = name.split('=').next().unwrap_or(name);
    let name = name.strip_prefix("no-").unwrap_or(name);
    RSYNC_LONG.split(' ').any(|o| o == name)
}

/// The message for an unknown argument of `verb`, if `e` is one: the argument, and for an
/// rsync flag where it is (or is not) in pagewise. None for other errors.
pub fn unknown_argument(e: &clap::Error, verb: Option<&str>) -> Option<String> {
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let hint = match verb {
        Some("sync") if is_rsync(arg) => format!(
            "\n\n  {arg} is rsync's; pagewise sync does not have it (yet): see pagewise sync --help"
        ),
        Some("sync") => {
            "\n\n  (pagewise sync takes rsync's options: see pagewise sync --help)".into()
        }
        Some("copy") if is_rsync(arg) => format!(
            "\n\n  {arg} is rsync's: pagewise sync takes rsync's command line (copy takes cp's)"
        ),
        _ => String::new(),
    };
    let verb = verb.map(|v| format!(" {v}")).unwrap_or_default();
    Some(format!(
        "error: unexpected argument '{arg}'{hint}\n\nFor more information, try 'pagewise{verb} --help'.\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsync_flags_are_known() {
        assert!(is_rsync("--inplace") && is_rsync("--append-verify=x") && is_rsync("--no-inplace"));
        assert!(!is_rsync("--ionice") && !is_rsync("-z") && !is_rsync("--nonsense"));
    }
}
