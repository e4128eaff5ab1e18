//! A TCP proxy on 127.0.0.1 that a test can stop (cutting every connection) and start again:
//! a dependency that goes away and comes back, without touching the shared server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub port: u16,
    upstream: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let port = super::free_port();
        let proxy = Proxy {
            port,
            upstream,
            tasks: Arc::default(),
        };
        proxy.resume().await;
        proxy
    }

    /// Accepts and forwards connections (again).
    pub async fn resume(&self) {
        // Right after a cut, the aborted listener may not have closed yet: up to a second.
        let mut bound = TcpListener::bind(("127.0.0.1", self.port)).await;
        for _ in 0..50 {
            if bound.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            bound = TcpListener::bind(("127.0.0.1", self.port)).await;
        }
        let listener = bound.expect("bind proxy");
        let upstream = self.upstream;
        let tasks = self.tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let forward = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                tasks.lock().expect("proxy tasks").push(forward);
            }
        });
        self.tasks.lock().expect("proxy tasks").push(accept);
    }

    /// Refuses new connections and cuts the open ones.
    pub fn cut(&self) {
        for task in self.tasks.lock().expect("proxy tasks").drain(..) {
            task.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}
