//! Natural batching for the database: requests that arrive while a batch is being served wait,
//! and go together in the next one (up to a bound). At a low rate a request finds the task idle
//! and is served at once, alone; under load each round trip serves everyone who came during
//! the last one, so the batch follows the load without a timer.
//!
//! The task ends when the last handle is dropped, after the requests that hold one are
//! answered; it is not stopped by the instance's stop signal, because requests still in flight
//! during a graceful shutdown must still be served.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

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
    /// Starts the task: `serve` gets up to `max` requests in arrival order and answers each,
    /// in the same order, or fails them all.
    pub fn start<F, Fut>(max: usize, mut serve: F) -> Self
    where
        F: FnMut(Vec<T>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<R>, sqlx::Error>> + Send,
    {
        let (requests, mut queue) = mpsc::channel::<(T, Answer<R>)>(max * 4);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(max);
            while queue.recv_many(&mut batch, max).await > 0 {
                let (items, answers): (Vec<T>, Vec<Answer<R>>) = batch.drain(..).unzip();
                let expected = answers.len();
                let served = match serve(items).await {
                    Ok(all) if all.len() == expected => Ok(all),
                    Ok(all) => Err(Arc::new(sqlx::Error::Protocol(format!(
                        "a batch of {expected} was answered {} times",
                        all.len()
                    )))),
                    Err(e) => Err(Arc::new(e)),
                };
                // A request that stopped waiting has nothing to answer.
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
        });
        Batcher { requests }
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
