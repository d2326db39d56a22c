//! pgoutput's binary messages, as `pg_logical_slot_peek_binary_changes`
//! returns them (one message per row): Begin, logical Message, Commit.
//! Anything else (relation, origin, type messages) is skipped; a damaged
//! Begin/Message/Commit is a Corrupt error, never a guess.

use bakery_core::{Bytes, Error, Result};
use bakery_recipes::keys;

use crate::{Batch, Message, Transaction, BACKEND};

/// "X/Y" (hex) → u64.
pub(crate) fn parse_lsn(text: &str) -> Result<u64> {
    let bad = || Error::corrupt(BACKEND, format!("{text:?} is not an LSN"));
    let (hi, lo) = text.split_once('/').ok_or_else(bad)?;
    let hi = u64::from_str_radix(hi, 16).map_err(|_| bad())?;
    let lo = u64::from_str_radix(lo, 16).map_err(|_| bad())?;
    if hi > u64::from(u32::MAX) || lo > u64::from(u32::MAX) {
        return Err(bad());
    }
    Ok((hi << 32) | lo)
}

/// u64 → "X/Y".
pub(crate) fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

/// A cursor over one message's bytes.
struct Reader<'a> {
    data: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A damaged message, named by its kind.
    fn corrupt(&self, problem: &str) -> Error {
        Error::corrupt(BACKEND, format!("{} message: {problem}", self.what))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.data.len() < n {
            return Err(self.corrupt("truncated"));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    fn cstring(&mut self) -> Result<String> {
        let end = (self.data.iter().position(|b| *b == 0))
            .ok_or_else(|| self.corrupt("unterminated string"))?;
        let s = std::str::from_utf8(&self.data[..end])
            .map_err(|_| self.corrupt("prefix is not UTF-8"))?
            .to_owned();
        self.data = &self.data[end + 1..];
        Ok(s)
    }
}

/// The transaction being decoded.
struct Open {
    commit_lsn: u64,
    xid: u32,
    messages: Vec<Message>,
}

/// Turns pgoutput rows into committed transactions.
#[derive(Default)]
pub(crate) struct Decoder {
    open: Option<Open>,
    done: Vec<Transaction>,
}

impl Decoder {
    pub(crate) fn feed(&mut self, data: &[u8]) -> Result<()> {
        let Some((&tag, body)) = data.split_first() else {
            return Err(Error::corrupt(BACKEND, "empty pgoutput message"));
        };
        type Step = fn(&mut Decoder, &mut Reader<'_>) -> Result<()>;
        let (what, step): (&'static str, Step) = match tag {
            b'B' => ("begin", Self::begin),
            b'M' => ("logical", Self::message),
            b'C' => ("commit", Self::commit),
            // Relation, type, origin, truncate and row messages: not ours.
            _ => return Ok(()),
        };
        step(self, &mut Reader { data: body, what })
    }

    fn begin(&mut self, r: &mut Reader<'_>) -> Result<()> {
        let final_lsn = r.u64()?;
        let _commit_time = r.u64()?;
        let xid = r.u32()?;
        if self.open.is_some() {
            return Err(Error::corrupt(BACKEND, "begin inside an open transaction"));
        }
        self.open = Some(Open {
            commit_lsn: final_lsn,
            xid,
            messages: Vec::new(),
        });
        Ok(())
    }

    fn message(&mut self, r: &mut Reader<'_>) -> Result<()> {
        let flags = r.u8()?;
        let lsn = r.u64()?;
        let prefix = r.cstring()?;
        let len = usize::try_from(r.u32()?)
            .map_err(|_| Error::corrupt(BACKEND, "message length overflows"))?;
        let payload = Bytes::copy_from_slice(r.take(len)?);
        let transactional = flags & 1 == 1;
        match (&mut self.open, transactional) {
            (Some(open), true) => open.messages.push(Message {
                key: keys::wal(open.commit_lsn, lsn),
                commit_lsn: open.commit_lsn,
                lsn,
                xid: open.xid,
                prefix,
                payload,
            }),
            // Emitted outside any transaction's guarantee: not an
            // outbox message (emit always uses transactional=true).
            (_, false) => {
                tracing::debug!(prefix, "outbox: skipping a non-transactional message")
            }
            (None, true) => {
                return Err(Error::corrupt(
                    BACKEND,
                    "transactional message outside a transaction",
                ))
            }
        }
        Ok(())
    }

    fn commit(&mut self, r: &mut Reader<'_>) -> Result<()> {
        let _flags = r.u8()?;
        let commit_lsn = r.u64()?;
        let end_lsn = r.u64()?;
        let open = self
            .open
            .take()
            .ok_or_else(|| Error::corrupt(BACKEND, "commit without a begin"))?;
        if commit_lsn != open.commit_lsn {
            return Err(Error::corrupt(
                BACKEND,
                format!(
                    "commit at {} does not match its begin ({})",
                    format_lsn(commit_lsn),
                    format_lsn(open.commit_lsn)
                ),
            ));
        }
        self.done.push(Transaction {
            commit_lsn,
            end_lsn,
            messages: open.messages,
        });
        Ok(())
    }

    /// The committed transactions; a transaction still open (the peek
    /// stopped inside it — it does not, but be safe) is left for next time.
    pub(crate) fn finish(self) -> Batch {
        Batch {
            transactions: self.done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(lsn: u64, xid: u32) -> Vec<u8> {
        let mut v = vec![b'B'];
        v.extend(lsn.to_be_bytes());
        v.extend(0u64.to_be_bytes());
        v.extend(xid.to_be_bytes());
        v
    }

    fn message(lsn: u64, prefix: &str, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![b'M', 1];
        v.extend(lsn.to_be_bytes());
        v.extend(prefix.as_bytes());
        v.push(0);
        v.extend(u32::try_from(payload.len()).expect("len").to_be_bytes());
        v.extend(payload);
        v
    }

    fn commit(lsn: u64, end: u64) -> Vec<u8> {
        let mut v = vec![b'C', 0];
        v.extend(lsn.to_be_bytes());
        v.extend(end.to_be_bytes());
        v.extend(0u64.to_be_bytes());
        v
    }

    #[test]
    fn decodes_transactions_in_order_with_wal_keys() {
        let mut d = Decoder::default();
        for m in [
            begin(100, 7),
            message(90, "p", b"a\0b"),
            message(100, "p", b""),
            commit(100, 120),
        ] {
            d.feed(&m).expect("feed");
        }
        let batch = d.finish();
        let msgs: Vec<_> = batch.messages().collect();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].key, keys::wal(100, 90));
        assert_eq!(&msgs[0].payload[..], b"a\0b");
        assert!(msgs[0].key < msgs[1].key);
        assert_eq!(batch.transactions.last().map(|t| t.end_lsn), Some(120));
    }

    #[test]
    fn damaged_messages_are_corrupt() {
        for bad in [
            vec![],
            vec![b'B', 1, 2],
            message(1, "p", b"x")[..12].to_vec(),
            commit(1, 2),
        ] {
            let mut d = Decoder::default();
            let err = d.feed(&bad).expect_err("damaged");
            assert_eq!(err.kind(), bakery_core::ErrorKind::Corrupt, "{bad:?}");
        }
        let mut d = Decoder::default();
        d.feed(&begin(5, 1)).expect("begin");
        assert!(
            d.feed(&commit(6, 7)).is_err(),
            "commit LSN must match the begin"
        );
    }

    #[test]
    fn lsn_text_round_trips() {
        assert_eq!(parse_lsn("0/65750FA8").expect("lsn"), 0x6575_0FA8);
        assert_eq!(parse_lsn("1/0").expect("lsn"), 1 << 32);
        assert_eq!(format_lsn((3 << 32) | 0xAB), "3/AB");
        for bad in ["", "12", "x/1", "1/2/3", "100000000/0"] {
            assert!(parse_lsn(bad).is_err(), "{bad}");
        }
    }
}
