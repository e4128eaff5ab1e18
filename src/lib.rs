pub mod limiter;
