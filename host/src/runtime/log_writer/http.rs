//! The HTTP sink: lines gathered into batches (`batch_lines`, or whatever
//! came within `flush_ms`), each POSTed as gzipped JSON lines
//! (`Content-Type: application/x-ndjson`, `Content-Encoding: gzip`),
//! retried `retries` times with backoff doubling from 100 ms (at most
//! 5 s) when the endpoint fails, answers other than 2xx, or passes
//! `timeout_ms`; then the batch is dropped and counted. Meanwhile new lines
//! wait in the queue, and past its size are dropped: a dead endpoint costs
//! the decisions nothing.

use std::io::Write as _;
use std::time::Duration;

use flate2::Compression;
use flate2::write::GzEncoder;
use tokio::sync::oneshot;

use super::{Msg, Writer};

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Runs the HTTP sink's writer until every handle is dropped.
pub(super) async fn run(url: String, mut w: Writer) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_millis(w.config.timeout_ms))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("decision log: cannot make its HTTP client: {e}; nothing is sent");
            return;
        }
    };
    let every = Duration::from_millis(w.config.flush_ms);
    let mut batch: Vec<u8> = Vec::new();
    let mut lines = 0usize;
    let mut waiting: Vec<oneshot::Sender<()>> = Vec::new();
    loop {
        let msg = if lines == 0 {
            w.rx.recv().await
        } else {
            match tokio::time::timeout(every, w.rx.recv()).await {
                Ok(msg) => msg,
                Err(_elapsed) => {
                    send(&client, &url, &mut batch, &mut lines, &w).await;
                    continue;
                }
            }
        };
        let Some(msg) = msg else { break };
        match msg {
            Msg::Line(line) => {
                batch.extend_from_slice(line.to_string().as_bytes());
                batch.push(b'\n');
                lines += 1;
                if lines < w.config.batch_lines {
                    continue;
                }
            }
            Msg::Flush(done) => waiting.push(done),
        }
        send(&client, &url, &mut batch, &mut lines, &w).await;
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
    send(&client, &url, &mut batch, &mut lines, &w).await;
}

/// POSTs the batch, with its retries; empties it either way.
async fn send(
    client: &reqwest::Client,
    url: &str,
    batch: &mut Vec<u8>,
    lines: &mut usize,
    w: &Writer,
) {
    if *lines == 0 {
        return;
    }
    let n = std::mem::take(lines) as u64;
    let body = match gzip(batch) {
        Ok(b) => b,
        Err(e) => {
            batch.clear();
            w.drops.add(n, &format!("cannot gzip a batch: {e}"));
            return;
        }
    };
    batch.clear();
    let mut backoff = FIRST_BACKOFF;
    let mut why = String::new();
    for attempt in 0..=w.config.retries {
        if attempt > 0 {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        let sent = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
            .header(reqwest::header::CONTENT_ENCODING, "gzip")
            .body(body.clone())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => return,
            Ok(r) => why = format!("the endpoint answered {}", r.status()),
            Err(e) => why = format!("the endpoint failed: {e}"),
        }
    }
    w.drops.add(n, &format!("a batch was given up on: {why}"));
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut z = GzEncoder::new(Vec::with_capacity(bytes.len() / 4), Compression::fast());
    z.write_all(bytes)?;
    z.finish()
}
