//! A restore's passes over the changelog: from a checkpoint the shard's
//! own start left, from a standby's copy, or the whole partition, each
//! record applied by the epoch rule (`applier.rs`).

use super::super::applier::Applier;
use super::super::ChangelogWrite;
use super::*;

impl Restore {
    fn partition(&self) -> i32 {
        i32::try_from(self.shard.0).unwrap_or(i32::MAX)
    }

    /// The store's checkpoint of the shard.
    pub(in crate::store) async fn checkpoint(
        self: &Arc<Self>,
    ) -> Result<Option<Checkpoint>, RestoreError> {
        let this = self.clone();
        blocking(&self.turns, move || {
            this.store
                .checkpoint(&this.entity_type, this.shard)
                .map_err(RestoreError::from)
        })
        .await
    }

    /// Takes the epoch and restores.
    ///
    /// # Errors
    /// The store or the changelog failed, or a record cannot be read.
    /// With transactions, the start's writer is opened first (kept in
    /// `transactions` for the next try and for the shard), and the marker
    /// is written in one of its transactions.
    pub async fn run(
        self: Arc<Self>,
        transactions: &mut Transactions,
    ) -> Result<Restored, RestoreError> {
        if transactions.is_none() {
            if let Some(opening) = self.changelog.transactions(self.partition()) {
                *transactions = Some(Arc::from(opening.await?));
            }
        }
        let started = Instant::now();
        let _writer = self.writer.clone().lock_owned().await;
        let local = self.checkpoint().await?;
        let marker = format!(
            "epoch marker: a start of shard {} on {}",
            self.shard, self.node
        );
        let key = marker_key(&self.node, self.shard);
        let mark = fingerprint(&key);
        let records = [ChangelogWrite {
            key: &key,
            value: Some(marker.as_bytes()),
            tag: None,
        }];
        let offsets = match transactions {
            Some(transactions) => transactions.write(&records, &[]).await?,
            None => self.changelog.write(self.partition(), &records).await?,
        };
        let Some(&epoch) = offsets.first() else {
            return Err(RestoreError::Thread("the marker got no offset".into()));
        };
        let this = self.clone();
        let pass = blocking(&self.turns, move || {
            this.pass(local, Ending::Start { epoch, mark })
        })
        .await?;
        Ok(Restored {
            epoch: u64::try_from(epoch).unwrap_or(0),
            marker: mark,
            read: pass.applied.read,
            applied: pass.applied.applied,
            ignored: pass.applied.ignored,
            from: pass.from,
            took: started.elapsed(),
        })
    }

    /// Brings the store's copy of the shard, checkpointed at `local`, to
    /// where `ending` says. Blocking.
    pub(in crate::store) fn pass(
        &self,
        local: Option<Checkpoint>,
        ending: Ending,
    ) -> Result<Pass, RestoreError> {
        let pass = self.bring_up(local, ending)?;
        let mut vouched = self.vouched.lock();
        match ending {
            Ending::Standby => vouched.insert(self.shard, pass.applied.checkpoint),
            Ending::Start { .. } => vouched.remove(&self.shard),
        };
        Ok(pass)
    }

    fn bring_up(&self, local: Option<Checkpoint>, ending: Ending) -> Result<Pass, RestoreError> {
        let until = ending.until();
        match local {
            Some(c) if c.kind == CheckpointKind::Standby => {
                if let Some(applied) = self.resume_standby(c, ending)? {
                    return Ok(Pass {
                        applied,
                        from: RestoredFrom::Standby,
                    });
                }
            }
            Some(c) if i64::try_from(c.offset).is_ok_and(|o| o <= until) => {
                if let Some(applied) = self.resume_own(c, ending)? {
                    return Ok(Pass {
                        applied,
                        from: RestoredFrom::Checkpoint,
                    });
                }
            }
            Some(_) => {
                tracing::warn!(entity_type = %self.entity_type, shard = %self.shard, "the store's checkpoint is past the changelog's end (a changelog topic made anew?): its copy here is dropped and the changelog partition read");
            }
            None => {}
        }
        let mut batch = WriteBatch::new(&*self.entity_type);
        batch.clear_shard(self.shard);
        let mut applier = Applier::new(self, 0, 0, batch, ending);
        let mut next = 0;
        self.changelog
            .read(self.partition(), None, until, &mut |r| {
                next = r.offset + 1;
                applier.visit(r)
            })?;
        Ok(Pass {
            applied: applier.finish(ending, next)?,
            from: RestoredFrom::Changelog,
        })
    }

    /// Goes on from the copy a start of the shard here left, unless it
    /// cannot be kept (`None`: the whole partition is read instead).
    fn resume_own(
        &self,
        checkpoint: Checkpoint,
        ending: Ending,
    ) -> Result<Option<Applied>, RestoreError> {
        let until = ending.until();
        let mine = i64::try_from(checkpoint.epoch).unwrap_or(i64::MAX);
        let from = i64::try_from(checkpoint.offset).unwrap_or(i64::MAX);
        let mut applier = Applier::resuming(self, checkpoint, ending);
        let (mut foreign, mut anew, mut own_seen) = (false, false, false);
        // The next offset after the checkpoint: one skipped was compacted
        // away.
        let (mut next, mut compacted) = (from, false);
        self.changelog
            .read(self.partition(), Some(mine), until, &mut |r| {
                if !own_seen {
                    // The copy's own marker, unless the changelog is
                    // another than the one the copy came from.
                    own_seen = true;
                    let own = r.offset == mine
                        && is_marker(r.key)
                        && (checkpoint.marker == 0 || fingerprint(r.key) == checkpoint.marker);
                    if !own {
                        anew = true;
                        return ControlFlow::Break(());
                    }
                    return ControlFlow::Continue(());
                }
                if r.offset < from {
                    // In the store already, unless another start came, or
                    // an older start's write landed late among this start's
                    // own (taken as a full read would take it).
                    if is_marker(r.key) {
                        if r.offset > mine {
                            foreign = true;
                            return ControlFlow::Break(());
                        }
                        return ControlFlow::Continue(());
                    }
                    if r.value.is_none() || written_by(&r) == Some(checkpoint.epoch) {
                        return ControlFlow::Continue(());
                    }
                } else {
                    if r.offset != next {
                        compacted = true;
                        return ControlFlow::Break(());
                    }
                    next = r.offset + 1;
                }
                applier.visit(r)
            })?;
        if let Some(failure) = applier.failure() {
            return Err(failure);
        }
        // Records up to a start's marker were compacted away too.
        compacted |= !anew && !foreign && matches!(ending, Ending::Start { .. }) && next < until;
        if anew || !own_seen {
            tracing::warn!(entity_type = %self.entity_type, shard = %self.shard, checkpoint = from, "the store's copy came from another changelog than this one (its topic deleted and made anew?): its copy here is dropped and the changelog partition read");
        } else if foreign {
            tracing::warn!(entity_type = %self.entity_type, shard = %self.shard, "another start of the shard came while this node still wrote it: its copy here is dropped and the whole changelog partition read");
        } else if compacted {
            tracing::info!(entity_type = %self.entity_type, shard = %self.shard, checkpoint = from, "records after the store's checkpoint were compacted away, deleted entities' tombstones maybe among them: its copy here is dropped and the changelog partition read");
        } else {
            return applier.finish(ending, next).map(Some);
        }
        Ok(None)
    }

    /// Goes on from a standby's copy, unless it cannot be kept (`None`:
    /// the whole partition is read instead). The copy applied every record
    /// below its checkpoint in order, as a read of the whole partition
    /// would: the rest of the read follows on, once the copy's newest
    /// start is found where the checkpoint says (else the changelog is
    /// another one, made anew).
    fn resume_standby(
        &self,
        checkpoint: Checkpoint,
        ending: Ending,
    ) -> Result<Option<Applied>, RestoreError> {
        let until = ending.until();
        let (Ok(from), Ok(newest)) = (
            i64::try_from(checkpoint.offset),
            i64::try_from(checkpoint.epoch),
        ) else {
            return Ok(None);
        };
        if from > until {
            tracing::warn!(entity_type = %self.entity_type, shard = %self.shard, checkpoint = from, "the standby's checkpoint is past the changelog's end (a changelog topic made anew?): its copy here is dropped and the changelog partition read");
            return Ok(None);
        }
        let vouched = self.vouched.lock().get(&self.shard) == Some(&checkpoint);
        if from > 0 && !vouched {
            let mut same = false;
            self.changelog
                .read(self.partition(), Some(newest), newest + 1, &mut |r| {
                    same = r.offset == newest
                        && is_marker(r.key)
                        && (checkpoint.marker == 0 || fingerprint(r.key) == checkpoint.marker);
                    ControlFlow::Break(())
                })?;
            if !same {
                tracing::warn!(entity_type = %self.entity_type, shard = %self.shard, checkpoint = from, "the standby's copy came from another changelog than this one (its topic deleted and made anew?): its copy here is dropped and the changelog partition read");
                return Ok(None);
            }
        }
        let mut applier = Applier::resuming(self, checkpoint, ending);
        let (mut next, mut compacted) = (from, false);
        self.changelog
            .read(self.partition(), Some(from), until, &mut |r| {
                if r.offset != next {
                    compacted = true;
                    return ControlFlow::Break(());
                }
                next = r.offset + 1;
                applier.visit(r)
            })?;
        if let Some(failure) = applier.failure() {
            return Err(failure);
        }
        compacted |= matches!(ending, Ending::Start { .. }) && next < until;
        if compacted {
            tracing::info!(entity_type = %self.entity_type, shard = %self.shard, checkpoint = from, "records after the standby's checkpoint were compacted away, deleted entities' tombstones maybe among them: its copy here is dropped and the changelog partition read");
            return Ok(None);
        }
        applier.finish(ending, next).map(Some)
    }
}

async fn blocking<T: Send + 'static>(
    turns: &super::super::StoreCalls,
    work: impl FnOnce() -> Result<T, RestoreError> + Send + 'static,
) -> Result<T, RestoreError> {
    turns.run(work).await.map_err(RestoreError::Thread)?
}
