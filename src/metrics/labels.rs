//! The label sets of the metrics: static strings, enums and integers, so building one to look
//! a series up allocates nothing.

use std::fmt::{self, Write};
use std::hash::{Hash, Hasher};

use axum::extract::{MatchedPath, Request};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StatusLabel {
    pub(super) status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabel {
    pub(super) kind: DependencyError,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TableLabel {
    pub(super) table: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DecisionLabels {
    pub(super) rule: String,
    pub(super) action: &'static str,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct HttpLabels {
    pub(super) route: Route,
    pub(super) status: u16,
}

/// What `sendguard_dependency_errors_total` counts, by its `kind` label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DependencyError {
    Redis,
    Postgres,
    Smtp,
    /// A request shed because its route group had too many in flight.
    Overload,
}

impl EncodeLabelValue for DependencyError {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(match self {
            DependencyError::Redis => "redis",
            DependencyError::Postgres => "postgres",
            DependencyError::Smtp => "smtp",
            DependencyError::Overload => "overload",
        })
    }
}

/// The `route` label of a request: the route template axum matched, or `unmatched`. Axum hands
/// every request of a route the same shared string, so keeping it costs a reference count
/// rather than a copy, and the set of values stays the fixed set of templates.
#[derive(Clone, Debug)]
pub struct Route(Option<MatchedPath>);

impl Route {
    pub fn of(request: &Request) -> Route {
        Route(request.extensions().get::<MatchedPath>().cloned())
    }

    pub fn as_str(&self) -> &str {
        self.0.as_ref().map_or("unmatched", MatchedPath::as_str)
    }
}

impl PartialEq for Route {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Route {}

impl Hash for Route {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl EncodeLabelValue for Route {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}
