//! `sendguard serve`: the API, the dashboard and the workers, until Ctrl-C or SIGTERM.

use sendguard::config::Config;

use super::Failure;

pub async fn run(mut cfg: Box<Config>) -> Result<(), Failure> {
    init_logs(cfg.log_json);
    for flag in sendguard::config::secret_flags_in(std::env::args_os()) {
        tracing::warn!(
            "the key given with {flag} is visible to every local user (ps, /proc/PID/cmdline): \
             set it in the environment or, for the current key, with --secret-key-file"
        );
    }
    if cfg.default_public_url() {
        tracing::warn!(public_url = %cfg.public_url,
            "SENDGUARD_PUBLIC_URL is unset and the listener is not on loopback: emails will \
             carry a link to this machine's local address; set it to the address recipients reach");
    }
    let files = sendguard::startup::raise_open_file_limit();
    tracing::info!(open_files = files, "open-file limit");
    let running = sendguard::start(&cfg).await?;
    shutdown_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        logs.json().init();
    } else {
        logs.init();
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
