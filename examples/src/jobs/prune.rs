//! Cleaning up what the queue leaves behind: an operator's job, with the producers stopped.

use serde::Serialize;

use super::{Queue, QueueError};

/// What [`Queue::prune`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Expired records deleted.
    pub records: u64,
    /// Objects deleted: the expired records' objects (in a folder, all their generations), and
    /// the superseded generations of live records in a folder.
    pub objects: u64,
}

impl Queue {
    /// Deletes every expired record, and in a local folder the generations of a live record
    /// other than its first and its newest. Tasks are left alone: they are the consumers'.
    ///
    /// **Run it only while no producer submits to this queue.** `object_store` has no
    /// conditional delete, so a prune racing a submit could delete a record the submit has
    /// just written (its key would then map to a second task), or, in a folder, a generation a
    /// submit is about to create again from an older read. With the producers stopped it is
    /// safe, and safe to interrupt: an expired record's generations go newest first, so what
    /// remains is still an expired record.
    ///
    /// Each record costs a read (GET; in a folder a LIST and a GET) and its deletes, after a
    /// LIST per scope.
    pub async fn prune(&self) -> Result<Pruned, QueueError> {
        let now = self.now();
        let mut pruned = Pruned::default();
        for path in self.objects.records().await? {
            let Some((record, _)) = self.read_record(&path).await? else {
                continue;
            };
            if record.expired(now) {
                pruned.objects += self.objects.delete_record(&path).await?;
                pruned.records += 1;
            } else {
                pruned.objects += self.objects.delete_superseded(&path).await?;
            }
        }
        Ok(pruned)
    }
}
