//! Outages are logged once when they start and once when they end, not once per request.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether one dependency is currently failing.
#[derive(Clone, Debug)]
pub struct Incident {
    dependency: &'static str,
    down: Arc<AtomicBool>,
}

impl Incident {
    pub fn new(dependency: &'static str) -> Self {
        Incident {
            dependency,
            down: Arc::default(),
        }
    }

    /// A call failed: logs when this starts an outage.
    pub fn failed(&self, error: &dyn Display) {
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::error!(dependency = self.dependency, error = %error, "dependency unavailable");
        }
    }

    /// A call succeeded: logs when this ends an outage.
    pub fn recovered(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::info!(dependency = self.dependency, "dependency answers again");
        }
    }
}
