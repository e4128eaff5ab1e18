//! Requests to the database coalesced (natural batching): requests that arrive while the
//! batches in hand are being served wait, and go together in the next one (up to a bound). A few
//! batches are served at once, so that one batch's commit (a WAL flush) overlaps the next
//! batch's statements, as concurrent transactions would. At a low rate a request finds a server
//! idle and is served at once, alone; under load each round trip serves everyone who came during
//! the last one, so the batch follows the load without a timer. The invite writer's group commit,
//! the batched sender reads and the outbox's `sent` marks run on it.
//!
//! The tasks end when the last handle is dropped, after the requests that hold one are
//! answered; they are not stopped by the instance's stop signal, because requests still in
//! flight during a graceful shutdown must still be served.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc, oneshot};
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

impl<T: Send + 'static, R: Send + 'static> Batcher<T, R> {
    /// Starts `servers` tasks on the current runtime: each takes up to `max` waiting requests
    /// in arrival order and `serve` answers each, in the same order, or fails them all.
    pub fn start<F, Fut>(max: usize, servers: usize, serve: F) -> Self
    where
        F: Fn(Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<R>, sqlx::Error>> + Send + 'static,
    {
        let (batcher, run) = Self::new(max, servers, serve);
        tokio::spawn(run);
        batcher
    }

    /// As [`Batcher::start`], but the servers run as tasks of whatever runs the future returned,
    /// which ends when the last handle is dropped and the requests in hand are answered.
    pub fn new<F, Fut>(
        max: usize,
        servers: usize,
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
                let (queue, serve) = (queue.clone(), serve.clone());
                tasks.spawn(async move {
                    let mut batch = Vec::with_capacity(max);
                    loop {
                        // One server waits for requests at a time; the others are serving.
                        if queue.lock().await.recv_many(&mut batch, max).await == 0 {
                            return;
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
        let (answer, answered) = oneshot::channel();
        let gone = || Arc::new(sqlx::Error::PoolClosed);
        self.requests
            .send((item, answer))
            .await
            .map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?
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
