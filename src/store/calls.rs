//! The round trips of the account scripts (`accounts.rs` says what they decide): the admissions of one
//! batch (`batch.rs`) made into one `admit.lua` call per key, the settler's `settle.lua` call, and the
//! pipeline that sends them, loads the scripts again for a Redis that forgot them, and puts back the
//! settlements of a call that did not go through.

use redis::{FromRedisValue, Value};

use super::accounts::{AdmitCall, Call};
use super::settle::Carried;
use super::{Store, StoreError};
use crate::util::lock;

impl Store {
    /// The admissions of one batch: one script call per key (and per set of its limits, which a reload can
    /// change between two asks), in the order of each key's first ask, all in one round trip. Returns each
    /// ask's answer, in order.
    pub(super) fn admit_together(&self, asks: Vec<AdmitCall>) -> Vec<Result<Value, StoreError>> {
        // (the first ask of the call, the asks it carries)
        let mut calls: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, ask) in asks.iter().enumerate() {
            match calls
                .iter_mut()
                .find(|(first, _)| asks[*first].key == ask.key && asks[*first].shared == ask.shared)
            {
                Some((_, members)) => members.push(i),
                None => calls.push((i, vec![i])),
            }
        }
        let mut asks = asks;
        let mut members_of = Vec::with_capacity(calls.len());
        let mut sent = Vec::with_capacity(calls.len());
        for (first, members) in calls {
            let k = self.account_keys(&asks[first].key);
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(self.scripts.admit.get_hash())
                .arg(7)
                .arg(&[
                    k.acct,
                    k.res,
                    k.lease,
                    k.win,
                    k.winv,
                    k.per,
                    self.k("terms"),
                ])
                .arg(members.len())
                .arg(&asks[first].shared);
            let mut settles = Carried::new(Vec::new(), &self.pending);
            for &i in &members {
                cmd.arg(&asks[i].own);
                settles.append(&mut asks[i].settles);
            }
            cmd.arg(Self::settle_groups(settles.items().iter()));
            sent.push((cmd, settles));
            members_of.push(members);
        }
        let n = asks.len();
        let mut answers: Vec<Option<Result<Value, StoreError>>> = (0..n).map(|_| None).collect();
        for (reply, members) in self.send(sent).into_iter().zip(members_of) {
            let each: Result<Vec<Value>, StoreError> = reply.and_then(|v| {
                match Vec::<Value>::from_redis_value(v) {
                    Ok(each) if each.len() == members.len() => Ok(each),
                    Ok(each) => Err(format!(
                        "{} answers for {} admissions",
                        each.len(),
                        members.len()
                    )),
                    Err(e) => Err(e.to_string()),
                }
                .map_err(|e| StoreError {
                    unavailable: false,
                    message: format!("the admission script's answer: {e}"),
                })
            });
            match each {
                Ok(each) => {
                    for (i, v) in members.into_iter().zip(each) {
                        answers[i] = Some(Ok(v));
                    }
                }
                Err(e) => {
                    for i in members {
                        answers[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| {
                    Err(StoreError {
                        unavailable: false,
                        message: "the store's answer had no reply to the script".into(),
                    })
                })
            })
            .collect()
    }

    /// Script calls in one round trip, each with the settlements it carries (applied in it), in order;
    /// returns each call's answer. The settlements of a call that did not go through are put back (a
    /// settlement applies once: sent twice, the second finds it done), as are those of every call when this
    /// unwinds.
    pub(super) fn send(&self, calls: Vec<Call>) -> Vec<Result<Value, StoreError>> {
        let n = calls.len();
        let (cmds, settles): (Vec<redis::Cmd>, Vec<Carried>) = calls.into_iter().unzip();
        let mut first = redis::pipe();
        first.ignore_errors();
        for cmd in cmds {
            first.add_command(cmd);
        }
        self.wait_in(&mut first);
        let mut answers: Vec<Option<Result<Value, StoreError>>> = (0..n).map(|_| None).collect();
        let mut todo: Vec<usize> = (0..n).collect();
        let mut again: Option<redis::Pipeline> = None;
        for attempt in 0..2 {
            let pipe = again.as_ref().unwrap_or(&first);
            let replies: Vec<redis::RedisResult<Value>> = match self.with(|con| pipe.query(con)) {
                Ok(r) => r,
                Err(e) => {
                    for &i in &todo {
                        answers[i] = Some(Err(e.clone()));
                    }
                    break;
                }
            };
            let mut forgot = Vec::new();
            for (&i, reply) in todo.iter().zip(replies) {
                let no_script = reply.as_ref().is_err_and(|e| {
                    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                });
                if no_script && attempt == 0 {
                    forgot.push(i);
                } else {
                    // An error the script answered; with sentinels, a server that turned replica counts
                    // as down.
                    answers[i] = Some(reply.map_err(|e| self.failed(&e)));
                }
            }
            if forgot.is_empty() {
                break;
            }
            // A restarted Redis forgot the scripts: load them and send those calls again.
            let loaded = self.with(|con| {
                self.scripts.settle.load(con)?;
                self.scripts.allot.load(con)?;
                self.scripts.admit.load(con)
            });
            if let Err(e) = loaded {
                for &i in &forgot {
                    answers[i] = Some(Err(e.clone()));
                }
                break;
            }
            let sent: Vec<&redis::Cmd> = first.cmd_iter().collect();
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &i in &forgot {
                pipe.add_command(sent[i].clone());
            }
            self.wait_in(&mut pipe);
            again = Some(pipe);
            todo = forgot;
        }
        answers
            .into_iter()
            .zip(settles)
            .map(|(answer, settles)| {
                let answer = answer.unwrap_or_else(|| {
                    Err(StoreError {
                        unavailable: false,
                        message: "the store's answer had no reply to the script".into(),
                    })
                });
                match &answer {
                    Ok(_) => {
                        let sent = settles.sent();
                        let mut leases = lock(&self.leases);
                        for p in &sent {
                            leases.remove(&p.id);
                        }
                        drop(leases);
                        self.drawn_settled(sent.iter().filter(|p| !p.allot.is_empty()));
                    }
                    Err(e) => {
                        let n = settles.items().len();
                        if n > 0 {
                            log::error!("store: settling {n} request(s) failed: {e}");
                        }
                        // Dropped: back in the queue.
                        drop(settles);
                    }
                }
                answer
            })
            .collect()
    }

    /// The settler's script call: `settles` (any keys) in one call, each key's together, with the markers
    /// of drawn requests that may go (`forgets`: key name, request id).
    pub(super) fn settle_call(&self, settles: Carried, forgets: &[(String, String)]) -> Call {
        let mut order: Vec<&str> = Vec::new();
        for key in settles
            .items()
            .iter()
            .map(|p| &p.key)
            .chain(forgets.iter().map(|(k, _)| k))
        {
            if !order.contains(&key.as_str()) {
                order.push(key);
            }
        }
        let mut keys = Vec::with_capacity(order.len() * 5);
        let mut args = Vec::new();
        for key in order {
            let k = self.account_keys(key);
            keys.extend([k.acct, k.res, k.lease, k.winv, k.per]);
            let groups = Self::settle_groups(settles.items().iter().filter(|p| p.key == key));
            args.push(groups.len().to_string());
            args.extend(groups);
            let ids: Vec<&String> = forgets
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, id)| id)
                .collect();
            args.push(ids.len().to_string());
            args.extend(ids.into_iter().cloned());
        }
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.scripts.settle.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        (cmd, settles)
    }
}
