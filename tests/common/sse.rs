//! Reads Server-Sent Events off a response, as a client holding a stream
//! open would, and tells an event from the stream's end.

use std::time::Duration;

use futures::StreamExt;

/// One event.
#[derive(Debug, Default, Clone)]
pub struct Sse {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{:?} is not JSON: {e}", self.data))
    }

    /// The event's id as a position.
    pub fn position(&self) -> i64 {
        self.id.as_deref().and_then(|id| id.parse().ok()).expect("an event id that is a position")
    }
}

/// What came next on a stream.
#[derive(Debug)]
pub enum Next {
    Event(Sse),
    /// The server closed the stream.
    Ended,
    /// Nothing within the time allowed.
    Silent,
}

pub struct Events {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: String,
}

impl Events {
    pub fn new(resp: reqwest::Response) -> Events {
        assert_eq!(resp.status().as_u16(), 200, "a stream");
        Events { stream: Box::pin(resp.bytes_stream()), buf: String::new() }
    }

    /// The next event (keep-alive comments skipped), the end, or silence
    /// for `within`.
    pub async fn next(&mut self, within: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut ev = Sse::default();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        ev.event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        ev.id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        ev.data.push_str(v.trim());
                    }
                }
                if !ev.event.is_empty() || !ev.data.is_empty() {
                    return Next::Event(ev);
                }
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Err(_) => return Next::Silent,
                Ok(None) | Ok(Some(Err(_))) => return Next::Ended,
                Ok(Some(Ok(chunk))) => self.buf.push_str(&String::from_utf8_lossy(&chunk)),
            }
        }
    }

    /// The next event of kind `kind`, skipping others; panics on the end or
    /// silence.
    pub async fn expect(&mut self, kind: &str, within: Duration) -> Sse {
        self.find(kind, within)
            .await
            .unwrap_or_else(|other| panic!("expected a {kind:?} event within {within:?}, got {other:?}"))
    }

    /// The next event of kind `kind`, skipping others; `None` on the end or
    /// silence.
    pub async fn next_of(&mut self, kind: &str, within: Duration) -> Option<Sse> {
        self.find(kind, within).await.ok()
    }

    async fn find(&mut self, kind: &str, within: Duration) -> Result<Sse, Next> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Next::Event(e) if e.event == kind => return Ok(e),
                Next::Event(_) => continue,
                other => return Err(other),
            }
        }
    }
}
