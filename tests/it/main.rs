//! The integration tests, as one binary: one module per area, sharing `support`.

mod admin_security;
mod apps;
mod dashboard_browser;
mod dashboard_http;
mod deceptive_inputs;
mod edge_attacks;
mod explain;
mod fuzz_routes;
mod group_commit;
mod instances;
mod invites_api;
mod limiter_model;
mod limiter_redis;
mod metrics;
mod moderation;
mod outbox;
mod postgres_failure;
mod redis_cluster;
mod redis_failure;
mod retention;
mod shadow_leaks;
mod shutdown;
mod signals;
mod slow_clients;
mod support;
mod webhooks;
