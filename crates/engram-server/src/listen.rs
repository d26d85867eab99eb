//! Listening: the connections served (header timeouts, a cap on how many at once, TCP_NODELAY),
//! graceful shutdown on SIGTERM or Ctrl-C, and the shutdown consolidation.

use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use engram_store::StoreLocation;

use crate::config::ServeConfig;
use crate::error::Error;

/// A blocking task that panicked or was cancelled, as the error the server stops with.
fn joined(e: tokio::task::JoinError) -> Error {
    Error::Io {
        doing: "a blocking task of the server".into(),
        source: std::io::Error::other(e),
    }
}

/// Runs the server until SIGTERM or Ctrl-C, then drains, consolidates and returns.
pub async fn serve(config: ServeConfig) -> Result<(), Error> {
    if config.api_keys.is_none() && !config.listen.ip().is_loopback() {
        return Err(Error::Unprotected {
            listen: config.listen,
        });
    }
    let listen = config.listen;
    // Opening a store blocks (files, or a PostgreSQL connection with its own runtime).
    let app = tokio::task::spawn_blocking(move || App::new(config))
        .await
        .map_err(joined)??;
    let listening = |source| Error::Io {
        doing: format!("cannot listen on {listen}"),
        source,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(listening)?;
    let local = listener.local_addr().map_err(listening)?;
    match &app.config.api_keys {
        None => eprintln!(
            "engram serve: listening on http://{local} (no --api-keys: one local tenant, loopback only); store {}",
            app.config.store
        ),
        Some(keys) => eprintln!(
            "engram serve: listening on http://{local}; {} tenants ({} keys); {}",
            keys.tenants().len(),
            keys.len(),
            match &app.config.store {
                StoreLocation::Sqlite(path) => format!("stores beside {}", path.display()),
                StoreLocation::Postgres(_) =>
                    format!("store {} (a tenant column)", app.config.store),
            }
        ),
    }
    match app.config.summarizer() {
        Some(s) => eprintln!(
            "engram serve: summaries are written by {} (the extractive digest when it fails)",
            s.name()
        ),
        None => eprintln!(
            "engram serve: summaries are written by the extractive digest (no --summarizer)"
        ),
    }
    for (format, url) in [
        ("OpenAI", &app.config.proxy.openai_upstream),
        ("Anthropic", &app.config.proxy.anthropic_upstream),
    ] {
        if let Some(url) = url {
            eprintln!("engram serve: proxy: {format}-format requests go to {url}");
        }
    }
    if app.config.proxy.openai_upstream.is_some() || app.config.proxy.anthropic_upstream.is_some() {
        for line in crate::proxy::describe_windows(&app) {
            eprintln!("engram serve: proxy: model window {line}");
        }
        eprintln!(
            "engram serve: proxy: other models use the registry's windows (`engram models`); unknown ones the fallback's ({} tokens)",
            app.config.registry.fallback().context_window
        );
    }
    let router = crate::routes::router(Arc::clone(&app));
    accept(listener, router, &app.config, shutdown_signal()).await;
    eprintln!("engram serve: draining done; running the shutdown consolidation");
    let app2 = Arc::clone(&app);
    let consolidated = tokio::task::spawn_blocking(move || app2.shutdown())
        .await
        .map_err(joined)?;
    eprintln!("engram serve: consolidated {consolidated} working entries; bye");
    Ok(())
}

/// Serves connections from `listener` until `shutdown` completes, then drains them (at most
/// 60 s). Each connection gets HTTP/1.1 with keep-alive and the header-read timeout; at most
/// `max_connections` are served at once (the others wait in the listen backlog).
async fn accept(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    config: &ServeConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(config.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Replies (and streamed chunks) go out at once: without TCP_NODELAY a response written
        // in two pieces can wait 40 ms for a delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY");
        }
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection =
            graceful.watch(builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection");
            }
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(Duration::from_secs(60)) => {
            eprintln!("engram serve: connections still open after 60 s of draining; closing them");
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        tokio::signal::ctrl_c().await.ok();
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
