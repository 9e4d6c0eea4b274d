//! `struct perf_event_attr` as [`PerfEventAttr`]: a `#[repr(C)]` copy of the kernel's
//! (`PERF_ATTR_SIZE_VER7`, 128 bytes) with named fields and named flag bits ([`AttrFlags`],
//! [`SampleType`]), its layout asserted at compile time, and the attributes pagewise opens
//! (a tracepoint, a software counter). No system call here.

/// `PERF_TYPE_TRACEPOINT`: `config` is a tracepoint id from tracefs `events/SYS/NAME/id`.
pub const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `PERF_TYPE_SOFTWARE`: `config` is one of the kernel's software counters
/// (`PERF_COUNT_SW_*`), present on every kernel with perf events.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_PAGE_FAULTS_MIN`: page faults served without waiting for I/O.
pub const PERF_COUNT_SW_PAGE_FAULTS_MIN: u64 = 5;
/// `PERF_COUNT_SW_PAGE_FAULTS_MAJ`: page faults that waited for I/O (the page was not cached,
/// or the fault was retried after waiting for a page under read).
pub const PERF_COUNT_SW_PAGE_FAULTS_MAJ: u64 = 6;

bitflags::bitflags! {
    /// `PERF_SAMPLE_*` bits of [`PerfEventAttr::sample_type`]: what each sample record carries.
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct SampleType: u64 {
        /// `PERF_SAMPLE_IP`: the instruction pointer.
        const IP = 1 << 0;
        /// `PERF_SAMPLE_TID`: process and thread id (two u32).
        const TID = 1 << 1;
        /// `PERF_SAMPLE_TIME`: a timestamp (u64 ns, on `clockid` with `use_clockid`).
        const TIME = 1 << 2;
        /// `PERF_SAMPLE_ADDR`: the address (u64; for page faults, the faulting address).
        const ADDR = 1 << 3;
        /// `PERF_SAMPLE_CPU`: the CPU (u32, then u32 reserved).
        const CPU = 1 << 7;
        /// `PERF_SAMPLE_RAW`: the tracepoint's raw record (u32 size, then the bytes).
        const RAW = 1 << 10;
        const _ = !0;
    }

    /// The bit fields of `struct perf_event_attr` that follow `read_format`, by name (the
    /// kernel's order, `include/uapi/linux/perf_event.h`).
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct AttrFlags: u64 {
        /// `disabled`: created stopped; PERF_EVENT_IOC_ENABLE starts it.
        const DISABLED = 1 << 0;
        /// `inherit`: children (threads and processes created afterwards) are counted too.
        const INHERIT = 1 << 1;
        /// `pinned`: must always be on the PMU.
        const PINNED = 1 << 2;
        /// `exclusive`: the only group on the PMU when on.
        const EXCLUSIVE = 1 << 3;
        /// `exclude_user`: not in user space.
        const EXCLUDE_USER = 1 << 4;
        /// `exclude_kernel`: not in the kernel.
        const EXCLUDE_KERNEL = 1 << 5;
        /// `exclude_hv`: not in the hypervisor.
        const EXCLUDE_HV = 1 << 6;
        /// `exclude_idle`: not when idle.
        const EXCLUDE_IDLE = 1 << 7;
        /// `mmap`: PERF_RECORD_MMAP records for executable mappings.
        const MMAP = 1 << 8;
        /// `comm`: PERF_RECORD_COMM records.
        const COMM = 1 << 9;
        /// `freq`: `sample_period` is a frequency.
        const FREQ = 1 << 10;
        /// `inherit_stat`: per-task counts.
        const INHERIT_STAT = 1 << 11;
        /// `enable_on_exec`: starts at the next exec.
        const ENABLE_ON_EXEC = 1 << 12;
        /// `task`: PERF_RECORD_FORK/EXIT records.
        const TASK = 1 << 13;
        /// `watermark`: wake the reader by bytes (`wakeup_watermark`), not by events.
        const WATERMARK = 1 << 14;
        /// `use_clockid` (since Linux 4.1): timestamps on `clockid`.
        const USE_CLOCKID = 1 << 25;
        /// `context_switch` (since Linux 4.3): PERF_RECORD_SWITCH records.
        const CONTEXT_SWITCH = 1 << 26;
        /// `write_backward` (since Linux 4.7): the ring is written from the end.
        const WRITE_BACKWARD = 1 << 27;
        /// `remove_on_exec` (since Linux 5.13): closed at exec.
        const REMOVE_ON_EXEC = 1 << 36;
        /// `sigtrap` (since Linux 5.13): SIGTRAP on every sample.
        const SIGTRAP = 1 << 37;
        const _ = !0;
    }
}

/// `struct perf_event_attr` of `<linux/perf_event.h>`, up to `sig_data`
/// (`PERF_ATTR_SIZE_VER7`, Linux 5.13): every field by name, the unions under the name
/// pagewise uses. Zero ([`Default`]) is the kernel's default for every field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PerfEventAttr {
    /// `type`: PERF_TYPE_HARDWARE, ..., [`PERF_TYPE_TRACEPOINT`].
    pub type_: u32,
    /// `size`: bytes of this struct, so the kernel knows which fields exist.
    pub size: u32,
    /// `config`: the event (for tracepoints, its tracefs id).
    pub config: u64,
    /// `sample_period` (or `sample_freq` with [`AttrFlags::FREQ`]): a sample every N events.
    pub sample_period: u64,
    /// `sample_type`: what each record carries.
    pub sample_type: SampleType,
    /// `read_format`: what read(2) on the event returns.
    pub read_format: u64,
    /// The bit fields: [`AttrFlags`].
    pub flags: AttrFlags,
    /// `wakeup_events` (or `wakeup_watermark`, in bytes, with [`AttrFlags::WATERMARK`]).
    pub wakeup: u32,
    /// `bp_type`: breakpoint type.
    pub bp_type: u32,
    /// `config1` (also `bp_addr`, `kprobe_func`, `uprobe_path`).
    pub config1: u64,
    /// `config2` (also `bp_len`, `kprobe_addr`, `probe_offset`).
    pub config2: u64,
    /// `branch_sample_type`.
    pub branch_sample_type: u64,
    /// `sample_regs_user`.
    pub sample_regs_user: u64,
    /// `sample_stack_user`.
    pub sample_stack_user: u32,
    /// `clockid`: the clock of PERF_SAMPLE_TIME with [`AttrFlags::USE_CLOCKID`].
    pub clockid: i32,
    /// `sample_regs_intr`.
    pub sample_regs_intr: u64,
    /// `aux_watermark`.
    pub aux_watermark: u32,
    /// `sample_max_stack`.
    pub sample_max_stack: u16,
    /// `__reserved_2`.
    pub reserved_2: u16,
    /// `aux_sample_size` (since Linux 5.5).
    pub aux_sample_size: u32,
    /// `__reserved_3`.
    pub reserved_3: u32,
    /// `sig_data` (since Linux 5.13): passed to the SIGTRAP handler.
    pub sig_data: u64,
}

/// `PERF_ATTR_SIZE_VER7`: bytes of [`PerfEventAttr`].
pub const PERF_ATTR_SIZE: u32 = 128;
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE as usize);
const _: () = assert!(std::mem::offset_of!(PerfEventAttr, flags) == 40);
const _: () = assert!(std::mem::offset_of!(PerfEventAttr, wakeup) == 48);
const _: () = assert!(std::mem::offset_of!(PerfEventAttr, clockid) == 92);
const _: () = assert!(std::mem::offset_of!(PerfEventAttr, sig_data) == 120);

/// When a perf ring's reader is woken by an event's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerfWake {
    /// When this many bytes are waiting in the ring (`watermark`, `wakeup_watermark`).
    Bytes(u32),
    /// After every this many samples of the event (`wakeup_events`; 1: every sample).
    Samples(u32),
}

impl PerfEventAttr {
    /// The attribute of [`perf_tracepoint_open`]: tracepoint `id`, sampled at every hit
    /// with the thread id, a CLOCK_MONOTONIC time and the raw record; `inherit` as there;
    /// the reader woken as `wake` says.
    pub fn tracepoint(id: u64, inherit: bool, wake: PerfWake) -> Self {
        let mut flags = AttrFlags::USE_CLOCKID;
        flags.set(AttrFlags::INHERIT, inherit);
        flags.set(AttrFlags::WATERMARK, matches!(wake, PerfWake::Bytes(_)));
        let (PerfWake::Bytes(n) | PerfWake::Samples(n)) = wake;
        PerfEventAttr {
            type_: PERF_TYPE_TRACEPOINT,
            size: PERF_ATTR_SIZE,
            config: id,
            sample_period: 1,
            sample_type: SampleType::TID | SampleType::TIME | SampleType::RAW,
            flags,
            wakeup: n.max(1),
            clockid: libc::CLOCK_MONOTONIC,
            ..Default::default()
        }
    }
}

impl PerfEventAttr {
    /// The attribute of [`perf_software_open_for`]: software counter `config`
    /// (`PERF_COUNT_SW_*`) sampled at every count with the process and thread id, a
    /// CLOCK_MONOTONIC time and the address (`PERF_SAMPLE_ADDR`); `inherit` and `wake` as
    /// for [`PerfEventAttr::tracepoint`]; with `user_only`, `exclude_kernel` and `exclude_hv`
    /// (what `perf_event_paranoid` 2 allows without CAP_PERFMON).
    pub fn software(config: u64, inherit: bool, wake: PerfWake, user_only: bool) -> Self {
        let mut a = PerfEventAttr::tracepoint(config, inherit, wake);
        a.type_ = PERF_TYPE_SOFTWARE;
        a.sample_type = SampleType::TID | SampleType::TIME | SampleType::ADDR;
        a.flags
            .set(AttrFlags::EXCLUDE_KERNEL | AttrFlags::EXCLUDE_HV, user_only);
        a
    }
}

#[cfg(test)]
#[allow(unsafe_code)] // a transmute compares the struct's bytes with hand-built ones
mod tests {
    use super::*;

    #[test]
    fn attr_fields_sit_where_the_kernel_reads_them() {
        use std::mem::offset_of;
        // include/uapi/linux/perf_event.h, struct perf_event_attr.
        let offsets = [
            (offset_of!(PerfEventAttr, type_), 0),
            (offset_of!(PerfEventAttr, size), 4),
            (offset_of!(PerfEventAttr, config), 8),
            (offset_of!(PerfEventAttr, sample_period), 16),
            (offset_of!(PerfEventAttr, sample_type), 24),
            (offset_of!(PerfEventAttr, read_format), 32),
            (offset_of!(PerfEventAttr, flags), 40),
            (offset_of!(PerfEventAttr, wakeup), 48),
            (offset_of!(PerfEventAttr, bp_type), 52),
            (offset_of!(PerfEventAttr, config1), 56),
            (offset_of!(PerfEventAttr, config2), 64),
            (offset_of!(PerfEventAttr, branch_sample_type), 72),
            (offset_of!(PerfEventAttr, sample_regs_user), 80),
            (offset_of!(PerfEventAttr, sample_stack_user), 88),
            (offset_of!(PerfEventAttr, clockid), 92),
            (offset_of!(PerfEventAttr, sample_regs_intr), 96),
            (offset_of!(PerfEventAttr, aux_watermark), 104),
            (offset_of!(PerfEventAttr, sample_max_stack), 108),
            (offset_of!(PerfEventAttr, aux_sample_size), 112),
            (offset_of!(PerfEventAttr, sig_data), 120),
        ];
        for (i, (got, want)) in offsets.into_iter().enumerate() {
            assert_eq!(got, want, "field {i}");
        }
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 128);
        assert_eq!(std::mem::align_of::<PerfEventAttr>(), 8);
        assert_eq!(SampleType::RAW.bits(), 1 << 10);
        assert_eq!(AttrFlags::WATERMARK.bits(), 1 << 14);
        assert_eq!(AttrFlags::USE_CLOCKID.bits(), 1 << 25);
    }

    /// The attribute as it was built before the struct: bytes at offsets, bare bits.
    fn attr_by_hand(id: u64, inherit: bool, wakeup: Option<u32>) -> [u8; 128] {
        let mut a = [0u8; 128];
        let put32 = |a: &mut [u8], o: usize, v: u32| a[o..o + 4].copy_from_slice(&v.to_ne_bytes());
        let put64 = |a: &mut [u8], o: usize, v: u64| a[o..o + 8].copy_from_slice(&v.to_ne_bytes());
        put32(&mut a, 0, 2);
        put32(&mut a, 4, 128);
        put64(&mut a, 8, id);
        put64(&mut a, 16, 1);
        put64(&mut a, 24, (1 << 1) | (1 << 2) | (1 << 10));
        let flags = (1u64 << 25) | (inherit as u64) << 1 | (wakeup.is_some() as u64) << 14;
        put64(&mut a, 40, flags);
        put32(&mut a, 48, wakeup.unwrap_or(1).max(1));
        put32(&mut a, 92, libc::CLOCK_MONOTONIC as u32);
        a
    }

    #[test]
    fn tracepoint_attr_has_the_same_bytes_as_before() {
        for (inherit, wakeup) in [(false, None), (true, Some(65536)), (true, Some(0))] {
            let wake = wakeup.map_or(PerfWake::Samples(1), PerfWake::Bytes);
            let attr = PerfEventAttr::tracepoint(1234, inherit, wake);
            // SAFETY: PerfEventAttr is 128 bytes of plain integers with no padding (asserted).
            let bytes: [u8; 128] = unsafe { std::mem::transmute(attr) };
            assert_eq!(
                bytes,
                attr_by_hand(1234, inherit, wakeup),
                "{inherit} {wakeup:?}"
            );
        }
    }
}
