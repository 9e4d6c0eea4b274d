//! One planner thread's state ([`Planner`]): the files it gathers and hands out to the
//! workers interleaved across directories, in units of small neighbours; the directories and
//! hard links it leaves for the end; the partial temporaries it keeps meanwhile. The walk
//! (`dir`) and the decisions per entry (`entries`) are functions over it.

use super::jobs::Shared;
use super::partial::Partials;
use crate::copy::commit::Temps;
use crate::copy::options::{SMALL_BATCH_BYTES, SMALL_FILE};
use crate::copy::state::Ctx;
use crate::copy::tasks::{DeferredLink, DirTask, FileTask};
use crate::walk::Taker;
use crossbeam_channel::Sender;

/// One planner thread's state while it walks.
pub(super) struct Planner<'a> {
    pub(super) ctx: &'a Ctx<'a>,
    pub(super) temps: &'a Temps,
    pub(super) shared: &'a Shared,
    pub(super) tx: Sender<Vec<FileTask>>,
    /// Files waiting to be sent, grouped by destination directory (see [`Planner::flush`]).
    pub(super) pending: Vec<Vec<FileTask>>,
    pub(super) pending_files: usize,
    pub(super) dirs: Vec<DirTask>,
    pub(super) deferred_links: Vec<DeferredLink>,
    /// Partial temporaries kept for the entries of the directory being planned.
    pub(super) partials: Partials,
}

/// Directories (and files) the planner gathers before handing files out interleaved.
const INTERLEAVE_DIRS: usize = 32;
const INTERLEAVE_FILES: usize = 8192;

impl<'a> Planner<'a> {
    pub(super) fn new(
        ctx: &'a Ctx<'a>,
        temps: &'a Temps,
        shared: &'a Shared,
        tx: Sender<Vec<FileTask>>,
    ) -> Self {
        Planner {
            ctx,
            temps,
            shared,
            tx,
            pending: Vec::new(),
            pending_files: 0,
            dirs: Vec::new(),
            deferred_links: Vec::new(),
            partials: Partials::default(),
        }
    }

    /// Queues a file for the workers, in the group of its destination directory.
    pub(super) fn queue(&mut self, task: FileTask) {
        match self.pending.last_mut() {
            Some(g)
                if g.last()
                    .is_some_and(|t| t.dst.parent() == task.dst.parent()) =>
            {
                g.push(task)
            }
            _ => self.pending.push(vec![task]),
        }
        self.pending_files += 1;
    }

    /// Hands the gathered files out when enough directories or files are gathered.
    pub(super) fn flush_if_full(&mut self) {
        if self.pending.len() >= INTERLEAVE_DIRS || self.pending_files >= INTERLEAVE_FILES {
            self.flush();
        }
    }

    /// What this thread leaves for the end of the run.
    pub(super) fn into_parts(mut self) -> (Vec<DirTask>, Vec<DeferredLink>) {
        self.flush();
        (self.dirs, self.deferred_links)
    }

    /// Sends the gathered files round-robin across their directories: workers then create and
    /// rename in different directories at once instead of queueing on one directory's lock
    /// (measured: 16 workers renaming into one directory spent most of their time spinning
    /// on its i_rwsem).
    pub(super) fn flush(&mut self) {
        let mut groups: Vec<std::iter::Peekable<std::vec::IntoIter<FileTask>>> =
            std::mem::take(&mut self.pending)
                .into_iter()
                .map(|g| g.into_iter().peekable())
                .collect();
        while !groups.is_empty() {
            groups.retain_mut(|g| {
                let Some(first) = g.next() else {
                    return false;
                };
                let _ = self.tx.send(unit_from(first, g, self.ctx.fds.small_batch));
                true
            });
        }
        self.pending_files = 0;
    }
}

impl Taker for Planner<'_> {
    fn stopped(&self) -> bool {
        self.ctx.stopped()
    }
    /// Nothing to plan for now: the workers get what is gathered first.
    fn has_idle_work(&self) -> bool {
        self.pending_files > 0
    }
    fn idle(&mut self) {
        self.flush();
    }
}

/// One unit of work for a worker, starting with `first`: small files go in batches of
/// neighbours from one directory (likely neighbours on disk too: their reads merge), others
/// one by one.
fn unit_from(
    first: FileTask,
    rest: &mut std::iter::Peekable<std::vec::IntoIter<FileTask>>,
    max_files: usize,
) -> Vec<FileTask> {
    let mut unit = vec![first];
    if unit[0].size <= SMALL_FILE {
        let mut bytes = unit[0].size;
        while unit.len() < max_files && bytes < SMALL_BATCH_BYTES {
            match rest.next_if(|t| t.size <= SMALL_FILE) {
                Some(t) => {
                    bytes += t.size;
                    unit.push(t);
                }
                None => break,
            }
        }
    }
    unit
}
