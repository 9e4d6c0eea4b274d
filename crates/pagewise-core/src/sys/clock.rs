//! Local calendar time: localtime_r(3) and mktime(3), for options that name a wall-clock
//! time (rsync's `--stop-at`).
#![allow(unsafe_code)]

/// A local calendar time, fields as `struct tm`'s: `year` since 1900, `mon` 0-11, `mday`
/// 1-31, `hour` 0-23, `min` 0-59 (seconds are 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalTime {
    /// Years since 1900.
    pub year: i32,
    /// Month, 0-11.
    pub mon: i32,
    /// Day of the month, 1-31 (more before mktime normalises it).
    pub mday: i32,
    /// Hour, 0-23.
    pub hour: i32,
    /// Minute, 0-59.
    pub min: i32,
}

/// `t` (seconds since the epoch) in the local time zone; None where the C library cannot
/// say (a time beyond its range).
pub fn local_time(t: i64) -> Option<LocalTime> {
    let t = libc::time_t::try_from(t).ok()?;
    // SAFETY: tm is plain data; localtime_r writes it and reads only `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    (!r.is_null()).then_some(LocalTime {
        year: tm.tm_year,
        mon: tm.tm_mon,
        mday: tm.tm_mday,
        hour: tm.tm_hour,
        min: tm.tm_min,
    })
}

/// mktime(3) of a local time (daylight saving time as the zone has it then): the seconds
/// since the epoch, and the fields as mktime normalised them (the 32nd of a month is the
/// next month's 1st). None where mktime fails.
pub fn make_time(t: LocalTime) -> Option<(i64, LocalTime)> {
    // SAFETY: tm is plain data.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = t.year;
    tm.tm_mon = t.mon;
    tm.tm_mday = t.mday;
    tm.tm_hour = t.hour;
    tm.tm_min = t.min;
    tm.tm_isdst = -1;
    // SAFETY: tm is valid for reading and writing.
    let v = unsafe { libc::mktime(&mut tm) };
    (v != -1).then_some((
        v as i64,
        LocalTime {
            year: tm.tm_year,
            mon: tm.tm_mon,
            mday: tm.tm_mday,
            hour: tm.tm_hour,
            min: tm.tm_min,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_time_and_make_time_agree() {
        let now = 1_790_000_000;
        let t = local_time(now).unwrap();
        let (back, same) = make_time(t).unwrap();
        assert_eq!(same, t);
        assert!(back <= now && now - back < 60, "{back} {now}");
        // The 32nd of January is the 1st of February.
        let jan32 = LocalTime {
            year: 126,
            mon: 0,
            mday: 32,
            hour: 12,
            min: 0,
        };
        let (_, norm) = make_time(jan32).unwrap();
        assert_eq!((norm.mon, norm.mday), (1, 1));
        assert!(local_time(i64::MAX).is_none());
    }
}
