//! The data-dir lock as held ([`HeldLock`]): the open, locked `lock` file
//! and the checks that it still guards the data dir (`lock` still naming
//! it, the control directory's path still naming the directory opened).
use super::*;

/// The data-dir lock as held: the open `lock` file, and the control
/// directory it must still be the `lock` of.
#[derive(Debug)]
pub(super) struct HeldLock {
    /// The open, locked file (held open: its inode cannot be reused while
    /// it is, so its device and inode name it for as long as we hold it).
    pub(super) file: File,
    /// The control directory, open.
    pub(super) dir: Arc<Dir>,
    /// The locked file's device and inode.
    pub(super) file_id: (u64, u64),
    /// The control directory's device and inode.
    pub(super) dir_id: (u64, u64),
}

impl HeldLock {
    /// The lock held on `file`, the `lock` of `dir`: their identities taken
    /// once, so that a check is two `stat`s.
    pub(super) fn new(file: File, dir: Arc<Dir>) -> Result<Self, ControlDirError> {
        let held = file.meta().map_err(io_err(&dir.join(LOCK_NAME)))?;
        let opened = dir.fstat()?;
        Ok(Self {
            file,
            dir,
            file_id: held.id(),
            dir_id: opened.id(),
        })
    }

    /// That `name` in the control directory still names the file `id`
    /// (the journal this daemon writes): not removed, not replaced.
    pub(super) fn check_name(&self, name: &str, id: (u64, u64)) -> Result<(), ControlDirError> {
        let reason = match self.dir.stat(name)? {
            Some(now) if now.id() == id => return Ok(()),
            Some(_) => "was replaced",
            None => "was removed",
        };
        Err(ControlDirError::JournalReplaced {
            path: self.dir.join(name),
            reason,
        })
    }

    /// See [`ControlDir::check_lock`]. The locked file is held open, so its
    /// inode is not reused while this runs: `lock` still naming that inode
    /// (through the directory's descriptor) means the file was neither
    /// removed nor replaced, and a removed control directory names nothing.
    pub(super) fn check(&self) -> Result<(), ControlDirError> {
        let lost = |reason: String| ControlDirError::LockLost {
            path: self.dir.join(LOCK_NAME),
            reason,
        };
        match self.dir.stat(LOCK_NAME)? {
            None => {
                return Err(lost(format!(
                    "{} no longer exists",
                    self.dir.join(LOCK_NAME).display()
                )));
            }
            Some(now) if now.id() != self.file_id => {
                return Err(lost(format!(
                    "{} now names another file",
                    self.dir.join(LOCK_NAME).display()
                )));
            }
            Some(_) => {}
        }
        match self.dir.stat_path() {
            Ok(now) if now.id() == self.dir_id => Ok(()),
            Ok(_) => Err(lost(format!(
                "{} now names another directory",
                self.dir.path().display()
            ))),
            Err(e) => Err(lost(format!(
                "{} was moved or removed: {e}",
                self.dir.path().display()
            ))),
        }
    }
}
