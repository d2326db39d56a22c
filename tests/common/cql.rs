//! A minimal CQL (native protocol v4) client: one connection to one node,
//! one `SELECT` at a consistency level the caller picks, for the negative
//! control of tests/partition_cassandra.rs — a read at consistency ONE that
//! a cut-off node answers alone. The driver bakery uses picks its own
//! coordinator and retries elsewhere; this one asks exactly the node given.
//! Only what that needs: STARTUP without authentication, QUERY, a RESULT of
//! kind Rows whose columns are returned as raw bytes (`None`: null).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Consistency ONE (the protocol's code).
pub const ONE: u16 = 0x0001;

const VERSION: u8 = 0x04;
const ERROR: u8 = 0x00;
const STARTUP: u8 = 0x01;
const READY: u8 = 0x02;
const QUERY: u8 = 0x07;
const RESULT: u8 = 0x08;
const ROWS: i32 = 0x0002;

/// A connection to one node.
pub struct Cql {
    stream: TcpStream,
}

impl Cql {
    /// Connects to `addr` (`host:port`) and starts a session; every read
    /// and write gives up after `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Cql, String> {
        let sock = addr.parse().map_err(|e| format!("address {addr}: {e}"))?;
        let stream = TcpStream::connect_timeout(&sock, timeout)
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let mut cql = Cql { stream };
        let mut body = Vec::new();
        body.extend(1u16.to_be_bytes());
        string(&mut body, "CQL_VERSION");
        string(&mut body, "3.0.0");
        let (op, reply) = cql.request(STARTUP, &body)?;
        if op != READY {
            return Err(format!("STARTUP answered with opcode {op:#x}: {reply:?}"));
        }
        Ok(cql)
    }

    /// Runs `query` at `consistency`; its rows, each column's bytes.
    pub fn query(
        &mut self,
        query: &str,
        consistency: u16,
    ) -> Result<Vec<Vec<Option<Vec<u8>>>>, String> {
        let mut body = Vec::new();
        body.extend((query.len() as i32).to_be_bytes());
        body.extend(query.as_bytes());
        body.extend(consistency.to_be_bytes());
        body.push(0); // no values, no paging, no serial consistency
        let (op, reply) = self.request(QUERY, &body)?;
        if op != RESULT {
            return Err(format!("QUERY answered with opcode {op:#x}"));
        }
        rows(&reply)
    }

    fn request(&mut self, opcode: u8, body: &[u8]) -> Result<(u8, Vec<u8>), String> {
        let mut frame = vec![VERSION, 0, 0, 1, opcode];
        frame.extend((body.len() as i32).to_be_bytes());
        frame.extend(body);
        self.stream
            .write_all(&frame)
            .map_err(|e| format!("send: {e}"))?;
        let mut header = [0u8; 9];
        self.stream
            .read_exact(&mut header)
            .map_err(|e| format!("receive: {e}"))?;
        let len = i32::from_be_bytes(header[5..9].try_into().expect("4 bytes"));
        let mut reply = vec![0u8; usize::try_from(len).map_err(|_| "negative length")?];
        self.stream
            .read_exact(&mut reply)
            .map_err(|e| format!("receive: {e}"))?;
        if header[4] == ERROR {
            let mut at = 0;
            let code = int(&reply, &mut at)?;
            let message = read_string(&reply, &mut at)?;
            return Err(format!("error {code:#06x}: {message}"));
        }
        Ok((header[4], reply))
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u16).to_be_bytes());
    out.extend(s.as_bytes());
}

fn take<'a>(buf: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], String> {
    let got = buf
        .get(*at..*at + n)
        .ok_or_else(|| format!("reply too short at {at}"))?;
    *at += n;
    Ok(got)
}

fn int(buf: &[u8], at: &mut usize) -> Result<i32, String> {
    Ok(i32::from_be_bytes(
        take(buf, at, 4)?.try_into().expect("4 bytes"),
    ))
}

fn short(buf: &[u8], at: &mut usize) -> Result<u16, String> {
    Ok(u16::from_be_bytes(
        take(buf, at, 2)?.try_into().expect("2 bytes"),
    ))
}

fn read_string(buf: &[u8], at: &mut usize) -> Result<String, String> {
    let n = short(buf, at)? as usize;
    Ok(String::from_utf8_lossy(take(buf, at, n)?).into_owned())
}

/// Skips a column type ([option]): its id and, for collections and
/// tuples, what they hold.
fn skip_type(buf: &[u8], at: &mut usize) -> Result<(), String> {
    match short(buf, at)? {
        0x0000 => {
            read_string(buf, at)?;
        }
        0x0020 | 0x0022 => skip_type(buf, at)?,
        0x0021 => {
            skip_type(buf, at)?;
            skip_type(buf, at)?;
        }
        0x0031 => {
            for _ in 0..short(buf, at)? {
                skip_type(buf, at)?;
            }
        }
        0x0030 => return Err("user-defined types are not read here".into()),
        _ => {}
    }
    Ok(())
}

/// A RESULT body of kind Rows: each row's columns.
fn rows(buf: &[u8]) -> Result<Vec<Vec<Option<Vec<u8>>>>, String> {
    let mut at = 0;
    let kind = int(buf, &mut at)?;
    if kind != ROWS {
        return Err(format!("a result of kind {kind}, not rows"));
    }
    let flags = int(buf, &mut at)?;
    let columns = int(buf, &mut at)?;
    if flags & 0x0002 != 0 {
        let n = int(buf, &mut at)?;
        take(buf, &mut at, usize::try_from(n).unwrap_or(0))?; // paging state
    }
    if flags & 0x0004 == 0 {
        let global = flags & 0x0001 != 0;
        if global {
            read_string(buf, &mut at)?;
            read_string(buf, &mut at)?;
        }
        for _ in 0..columns {
            if !global {
                read_string(buf, &mut at)?;
                read_string(buf, &mut at)?;
            }
            read_string(buf, &mut at)?;
            skip_type(buf, &mut at)?;
        }
    }
    let count = int(buf, &mut at)?;
    let mut out = Vec::new();
    for _ in 0..count {
        let mut row = Vec::new();
        for _ in 0..columns {
            let n = int(buf, &mut at)?;
            row.push(match usize::try_from(n) {
                Ok(n) => Some(take(buf, &mut at, n)?.to_vec()),
                Err(_) => None,
            });
        }
        out.push(row);
    }
    Ok(out)
}
