//! rsync's `--stop-after MINS` (`--time-limit`) and `--stop-at TIME`: the copy stops at that
//! moment as it stops on SIGINT (what is not finished is removed, or kept with `--partial`),
//! says `stopping at requested limit` and exits 30, as rsync.

use pagewise_core::sys::{self, LocalTime};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Set once the limit stopped the copy.
static REACHED: AtomicBool = AtomicBool::new(false);

/// Seconds since the epoch now.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The moment `--stop-after MINS` names (rsync: a positive whole number of minutes from now;
/// `3x` is 3, as atol reads it), or rsync's message.
pub fn after(arg: &str) -> Result<i64, String> {
    let digits = arg.trim_start();
    let sign = digits.starts_with('-');
    let digits = digits.trim_start_matches(['+', '-']);
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let mins: Option<i64> = digits[..end].parse().ok();
    match mins
        .filter(|&m| !sign && m > 0)
        .and_then(|m| m.checked_mul(60))
    {
        Some(s) => now().checked_add(s).ok_or(()),
        None => Err(()),
    }
    .map_err(|()| format!("invalid --stop-after value: {arg}"))
}

/// The moment `--stop-at TIME` names, or rsync's message.
pub fn at(arg: &str) -> Result<i64, String> {
    let now = now();
    let t = parse_time(arg, now).ok_or_else(|| format!("invalid --stop-at format: {arg}"))?;
    if t <= now {
        return Err(format!("--stop-at time is not in the future: {arg}"));
    }
    Ok(t)
}

/// The moment `--stop-at` or else `--stop-after` names (None: neither given).
pub fn deadline(
    at_arg: &Option<String>,
    after_arg: &Option<String>,
) -> Result<Option<i64>, String> {
    match (at_arg, after_arg) {
        (Some(t), _) => at(t).map(Some),
        (None, Some(m)) => after(m).map(Some),
        _ => Ok(None),
    }
}

/// Stops the copy at `deadline` (seconds since the epoch): a thread that sets the flag
/// SIGINT sets, and [`REACHED`].
pub fn watch(deadline: i64) {
    std::thread::spawn(move || loop {
        let left = deadline - now();
        if left <= 0 {
            REACHED.store(true, Ordering::SeqCst);
            sys::interrupt_flag().store(true, Ordering::SeqCst);
            return;
        }
        // Whole seconds at most, so a clock set forward is seen soon.
        std::thread::sleep(Duration::from_millis(left.min(1) as u64 * 1000));
    });
}

/// Whether the limit stopped the copy.
pub fn reached() -> bool {
    REACHED.load(Ordering::SeqCst)
}

/// rsync's `parse_time()` (options.c): `[[[[YY]YY-]MM-]DD]T]HH:MM`, `YYYY-MM-DD` (midnight),
/// `:MM` (this hour's minute), `HH:MM` — a date left out is the next one at which the time is
/// in the future. `/` may stand for `-`, `t` for `T`. None for anything else.
pub fn parse_time(arg: &str, now: i64) -> Option<i64> {
    let today = sys::local_time(now)?;
    let (year, mon, mday, hour, min) = fields(arg.as_bytes())?;
    resolve((year, mon, mday, hour, min), today, now)
}

/// The fields `arg` names (-1: left out): year, month (1-12), day, hour, minute.
fn fields(b: &[u8]) -> Option<(i32, i32, i32, i32, i32)> {
    let (mut year, mut mon, mut mday, mut hour, mut min) = (-1, -1, -1, -1, -1);
    let mut i = 0;
    let mut in_date = match b.first() {
        Some(b':') => {
            i = 1;
            0
        }
        Some(b'T' | b't') => {
            i = 1;
            -1
        }
        _ => 1,
    };
    loop {
        if !b.get(i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        let mut n: i32 = 0;
        while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(i32::from(d - b'0'))?;
            i += 1;
        }
        let c = b.get(i).copied();
        if c == Some(b':') {
            in_date = 0;
        }
        if in_date > 0 {
            if year != -1 {
                return None;
            }
            (year, mon, mday) = (mon, mday, n);
            match c {
                None => break,
                Some(b'T' | b't') if i + 1 == b.len() => break,
                Some(b'T' | b't') => in_date = -1,
                Some(b'-' | b'/') => {}
                _ => return None,
            }
            i += 1;
            continue;
        }
        if hour != -1 {
            return None;
        }
        (hour, min) = (min, n);
        match c {
            None if in_date < 0 => return None,
            None => break,
            Some(b':') => {}
            _ => return None,
        }
        in_date = 0;
        i += 1;
    }
    Some((year, mon, mday, hour, min))
}

/// The moment of the fields (see [`fields`]): what is left out is today's, moved to the
/// next day, month or year (or hour, for `:MM`) at which it is after `now`.
fn resolve(
    (mut year, mut mon, mut mday, mut hour, mut min): (i32, i32, i32, i32, i32),
    today: LocalTime,
    now: i64,
) -> Option<i64> {
    let mut in_date = 0;
    if year < 0 {
        year = today.year;
        in_date = 1;
    } else if year < 100 {
        while year < today.year {
            year += 100;
        }
    } else {
        year -= 1900;
    }
    if mon < 0 {
        mon = today.mon;
        in_date = 2;
    } else {
        mon -= 1;
    }
    if mday < 0 {
        mday = today.mday;
        in_date = 3;
    }
    let mut step = 0;
    if min < 0 {
        (hour, min) = (0, 0);
    } else if hour < 0 {
        if in_date != 3 {
            return None;
        }
        in_date = 0;
        hour = today.hour;
        step = 60 * 60;
    }
    let mut old_mday = mday;
    if hour > 23 || min > 59 || !(0..12).contains(&mon) || !(1..=31).contains(&mday) {
        return None;
    }
    let (mut val, mut t) = sys::make_time(LocalTime {
        year,
        mon,
        mday,
        hour,
        min,
    })?;
    // Bounded: each turn moves a day, a month or a year forward (rsync's loop is not).
    for _ in 0..1000 {
        if in_date == 0 || (val > now && t.mday >= old_mday) {
            break;
        }
        match in_date {
            3 => {
                t.mday += 1;
                old_mday = t.mday;
            }
            2 if t.mday < old_mday => t.mday = old_mday,
            2 => {
                t.mon += 1;
                if t.mon == 12 {
                    (t.mon, t.year) = (0, t.year + 1);
                }
            }
            _ => {
                if t.mday < old_mday {
                    // The 29th of February made the 1st of March.
                    if t.mon != 2 || old_mday != 29 {
                        return None;
                    }
                    (t.mon, t.mday) = (1, 29);
                }
                t.year += 1;
            }
        }
        match sys::make_time(t) {
            Some((v, n)) => (val, t) = (v, n),
            None if in_date != 3 || t.mday <= 28 => return None,
            None => {
                (t.mday, old_mday, in_date) = (1, 1, 2);
            }
        }
    }
    if step > 0 {
        while val <= now {
            val += step;
        }
    }
    Some(val)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rsync's forms, against local time computed the same way.
    #[test]
    fn parses_rsync_time_forms() {
        let now = 1_790_000_000; // 2026-09-21 (UTC)
        let today = sys::local_time(now).unwrap();
        let at = |y, mo, d, h, mi| {
            let t = LocalTime {
                year: y,
                mon: mo,
                mday: d,
                hour: h,
                min: mi,
            };
            sys::make_time(t).unwrap().0
        };
        assert_eq!(
            parse_time("2030-01-02T03:04", now),
            Some(at(130, 0, 2, 3, 4))
        );
        assert_eq!(
            parse_time("2030/01/02t03:04", now),
            Some(at(130, 0, 2, 3, 4))
        );
        assert_eq!(parse_time("30-01-02T03:04", now), Some(at(130, 0, 2, 3, 4)));
        assert_eq!(parse_time("2030-01-02", now), Some(at(130, 0, 2, 0, 0)));
        assert_eq!(parse_time("2030-01-02T", now), Some(at(130, 0, 2, 0, 0)));
        // A time alone: today's, or tomorrow's when it has passed.
        let hm = parse_time("00:00", now).unwrap();
        assert!(hm > now && hm - now <= 24 * 3600, "{hm}");
        let next = parse_time(&format!("{}:{:02}", today.hour, today.min), now).unwrap();
        assert!(next > now && next - now <= 24 * 3600 + 3600);
        // :MM — this hour's minute, or the next hour's.
        let m = parse_time(":30", now).unwrap();
        assert!(m > now && m - now <= 3600, "{m}");
        for bad in [
            "",
            "T",
            "x",
            "25:00",
            "12:60",
            "2030-13-01",
            "2030-01-32",
            "1:2:3",
            "T12",
            "12:30x",
            "2030-01-02-03",
            "99999999999:00",
        ] {
            assert_eq!(parse_time(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn stop_after_takes_positive_minutes() {
        let t = after("2").unwrap();
        assert!((t - now() - 120).abs() <= 1);
        assert!(after("3x").is_ok());
        for bad in ["0", "-1", "x", "", "99999999999999999999"] {
            assert!(after(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            at("2000-01-01").unwrap_err(),
            "--stop-at time is not in the future: 2000-01-01"
        );
        assert_eq!(at("nope").unwrap_err(), "invalid --stop-at format: nope");
    }
}
