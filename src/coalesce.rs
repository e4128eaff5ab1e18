//! Requests to the database coalesced (natural batching): requests that arrive while the
//! batches in hand are being served wait, and go together in the next one (up to a bound). A few
//! batches are served at once, so that one batch's commit (a WAL flush) overlaps the next
//! batch's statements, as concurrent transactions would. At a low rate a request finds a server
//! idle and is served at once, alone; under load each round trip serves everyone who came during
//! the last one, so the batch follows the load without a timer. The batched sender reads run on
//! it so. Two servers also wait for more ([`Gather`]): the invite writer, whose batch of fewer
//! than a few waits 1-2 ms for the requests on their way to it (less once none is), and the
//! outbox's `sent` marks, which no client request waits on, a few milliseconds for each other.
//!
//! The tasks end when the last handle is dropped, after the requests that hold one are
//! answered; they are not stopped by the instance's stop signal, because requests still in
//! flight during a graceful shutdown must still be served.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, Notify, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A batch that failed: the error, shared by every request of the batch.
pub type BatchError = Arc<sqlx::Error>;

type Answer<R> = oneshot::Sender<Result<R, BatchError>>;

/// The handle requests go through.
pub struct Batcher<T, R> {
    requests: mpsc::Sender<(T, Answer<R>)>,
}

impl<T, R> Clone for Batcher<T, R> {
    fn clone(&self) -> Self {
        Batcher {
            requests: self.requests.clone(),
        }
    }
}

/// How long a batch waits for more requests once it has one, for a server whose fixed cost per
/// batch outweighs a short wait: each request that joins a waiting batch saves a commit.
pub struct Gather {
    /// The longest the first request of a batch waits for others.
    pub window: std::time::Duration,
    /// Whether a batch of this many requests is all that can come soon, so that it need not
    /// wait.
    pub complete: Box<dyn Fn(usize) -> bool + Send + Sync>,
    /// Signalled when `complete` may have turned true without a request arriving, so that a
    /// waiting batch asks it again instead of waiting out its window. Signal it with
    /// `notify_one`, which keeps a signal sent while no batch waits.
    pub changed: Option<Arc<Notify>>,
}

impl<T: Send + 'static, R: Send + 'static> Batcher<T, R> {
    /// Starts `servers` tasks on the current runtime: each takes up to `max` waiting requests
    /// in arrival order and `serve` answers each, in the same order, or fails them all.
    pub fn start<F, Fut>(max: usize, servers: usize, serve: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<R>, sqlx::Error>> + Send + 'static,
    {
        let (batcher, run) = Self::build(max, servers, None, serve);
        tokio::spawn(run);
        batcher
    }

    /// As [`Batcher::start`] with one server, whose batches wait for more requests as `gather`
    /// says.
    pub fn start_gathering<F, Fut>(max: usize, gather: Gather, serve: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<R>, sqlx::Error>> + Send + 'static,
    {
        let (batcher, run) = Self::build(max, 1, Some(Arc::new(gather)), serve);
        tokio::spawn(run);
        batcher
    }

    /// As [`Batcher::start`], but the servers run as tasks of whatever runs the future returned,
    /// which ends when the last handle is dropped and the requests in hand are answered; their
    /// batches wait for more requests as `gather` says.
    pub fn new<F, Fut>(
        max: usize,
        servers: usize,
        gather: Gather,
        serve: F,
    ) -> (Self, impl Future<Output = ()> + Send + 'static)
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<R>, sqlx::Error>> + Send + 'static,
    {
        Self::build(max, servers, Some(Arc::new(gather)), serve)
    }

    fn build<F, Fut>(
        max: usize,
        servers: usize,
        gather: Option<Arc<Gather>>,
        serve: F,
    ) -> (Self, impl Future<Output = ()> + Send + 'static)
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<R>, sqlx::Error>> + Send + 'static,
    {
        let (requests, queue) = mpsc::channel::<(T, Answer<R>)>(max * 4);
        let queue = Arc::new(Mutex::new(queue));
        let serve = Arc::new(serve);
        let run = async move {
            let mut tasks = JoinSet::new();
            for _ in 0..servers.max(1) {
                let (queue, serve, gather) = (queue.clone(), serve.clone(), gather.clone());
                tasks.spawn(async move {
                    let mut batch = Vec::with_capacity(max);
                    loop {
                        {
                            // One server waits for requests at a time; the others are serving.
                            let mut queue = queue.lock().await;
                            if queue.recv_many(&mut batch, max).await == 0 {
                                return;
                            }
                            if let Some(gather) = &gather {
                                gather_more(&mut queue, &mut batch, max, gather).await;
                            }
                        }
                        let (items, answers): (Vec<T>, Vec<Answer<R>>) = batch.drain(..).unzip();
                        answer_all(answers, serve(items).await);
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
        };
        (Batcher { requests }, run)
    }

    /// Serves one request with the others waiting.
    pub async fn call(&self, item: T) -> Result<R, BatchError> {
        self.call_handing(item, ()).await
    }

    /// As [`Batcher::call`], dropping `guard` once the request is queued, for a guard whose drop
    /// may end a waiting batch ([`Gather::changed`]) that this request must still join.
    pub async fn call_handing<G>(&self, item: T, guard: G) -> Result<R, BatchError> {
        let (answer, answered) = oneshot::channel();
        let gone = || Arc::new(sqlx::Error::PoolClosed);
        self.requests
            .send((item, answer))
            .await
            .map_err(|_| gone())?;
        drop(guard);
        answered.await.map_err(|_| gone())?
    }
}

/// Adds the requests that come within `gather`'s window to `batch`, until it holds `max` or
/// all that can come soon.
async fn gather_more<T>(
    queue: &mut mpsc::Receiver<T>,
    batch: &mut Vec<T>,
    max: usize,
    gather: &Gather,
) {
    let until = tokio::time::Instant::now() + gather.window;
    while batch.len() < max && !(gather.complete)(batch.len()) {
        let room = max - batch.len();
        let changed = async {
            match &gather.changed {
                Some(changed) => changed.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            got = tokio::time::timeout_at(until, queue.recv_many(batch, room)) => match got {
                // The window is over, or every handle is gone.
                Err(_) | Ok(0) => return,
                Ok(_) => {}
            },
            () = changed => {}
        }
    }
}

/// Runs `round` every second until `stop` is cancelled, and again at once after a round that
/// handled a full batch (`full` items), since more may be waiting. A failed round is logged as
/// `what` failing, and tried again a second later.
pub async fn every_second<F, Fut, E>(stop: CancellationToken, full: usize, what: &str, mut round: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize, E>>,
    E: std::fmt::Display,
{
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
        loop {
            match round().await {
                Ok(n) if n == full && !stop.is_cancelled() => continue,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "{what} failed"),
            }
            break;
        }
    }
}

/// Sends each request its answer, or every request the batch's error. A request that stopped
/// waiting has nothing to answer.
fn answer_all<R>(answers: Vec<Answer<R>>, served: Result<Vec<R>, sqlx::Error>) {
    let expected = answers.len();
    let served = match served {
        Ok(all) if all.len() == expected => Ok(all),
        Ok(all) => Err(Arc::new(sqlx::Error::Protocol(format!(
            "a batch of {expected} was answered {} times",
            all.len()
        )))),
        Err(e) => Err(Arc::new(e)),
    };
    match served {
        Ok(all) => {
            for (answer, result) in answers.into_iter().zip(all) {
                let _ = answer.send(Ok(result));
            }
        }
        Err(e) => {
            for answer in answers {
                let _ = answer.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A batcher that records the size of each batch it serves.
    fn recording(
        max: usize,
        gather: Gather,
    ) -> (Batcher<u32, u32>, Arc<std::sync::Mutex<Vec<usize>>>) {
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let batcher = Batcher::start_gathering(max, gather, move |items: Vec<u32>| {
            seen.lock().expect("sizes").push(items.len());
            async move { Ok(items) }
        });
        (batcher, sizes)
    }

    /// Sends `n` requests one after the other, a millisecond apart, each waiting in its own
    /// task; answers once all are answered.
    async fn staggered(batcher: &Batcher<u32, u32>, n: u32) {
        let mut calls = JoinSet::new();
        for i in 0..n {
            let batcher = batcher.clone();
            calls.spawn(async move { batcher.call(i).await.map(|r| assert_eq!(r, i)) });
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        while let Some(call) = calls.join_next().await {
            call.expect("call").expect("answered");
        }
    }

    #[tokio::test]
    async fn requests_within_the_window_share_a_batch_that_ends_once_complete() {
        // A window far longer than the test may take: the batch ends because it is complete.
        let gather = Gather {
            window: Duration::from_secs(600),
            complete: Box::new(|n| n >= 3),
            changed: None,
        };
        let (batcher, sizes) = recording(16, gather);
        tokio::time::timeout(Duration::from_secs(10), staggered(&batcher, 3))
            .await
            .expect("a complete batch waited for its window");
        assert_eq!(*sizes.lock().expect("sizes"), [3]);
    }

    #[tokio::test]
    async fn a_batch_ends_with_its_window_or_when_full() {
        let gather = Gather {
            window: Duration::from_millis(200),
            complete: Box::new(|_| false),
            changed: None,
        };
        let (batcher, sizes) = recording(2, gather);
        staggered(&batcher, 3).await;
        staggered(&batcher, 1).await;
        assert_eq!(*sizes.lock().expect("sizes"), [2, 1, 1]);
    }

    /// A single-threaded test cannot show the other half, a guard dropped before its request
    /// is queued: the send completes in the same poll.
    #[tokio::test]
    async fn a_waiting_batch_ends_when_told_that_nothing_more_is_coming() {
        let coming = Arc::new(AtomicBool::new(true));
        let changed = Arc::new(Notify::new());
        let still = coming.clone();
        let gather = Gather {
            window: Duration::from_secs(600),
            complete: Box::new(move |_| !still.load(Ordering::SeqCst)),
            changed: Some(changed.clone()),
        };
        let (batcher, sizes) = recording(16, gather);
        let call = tokio::spawn(async move { batcher.call(7).await });
        // The batch of one is waiting for the request said to be coming, which then gives up.
        tokio::time::sleep(Duration::from_millis(50)).await;
        coming.store(false, Ordering::SeqCst);
        changed.notify_one();
        let answered = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the batch waited out its window");
        assert_eq!(answered.expect("call").expect("answered"), 7);
        assert_eq!(*sizes.lock().expect("sizes"), [1]);
    }
}
