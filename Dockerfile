# Multi-stage build of sendguard: compile with the Rust toolchain, run on a slim Debian.
FROM rust:1.95.0-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY migrations migrations
COPY templates templates
COPY static static
RUN cargo build --release --locked

FROM debian:12.8-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /var/lib/sendguard sendguard
COPY --from=build /src/target/release/sendguard /usr/local/bin/sendguard
USER sendguard
WORKDIR /var/lib/sendguard
ENV SENDGUARD_LISTEN=0.0.0.0:8080
EXPOSE 8080
# The image has no HTTP client: sendguard asks its own /readyz.
HEALTHCHECK --interval=10s --timeout=5s --retries=5 CMD ["sendguard", "healthcheck"]
ENTRYPOINT ["sendguard"]
CMD ["serve"]
