# colo's image: `colo` built in a Rust stage, run in a slim one as a
# non-root user. Configured only through COLO_* environment variables
# (colo.example.toml names every field); no config file is baked in.
#
#   docker build -t colo .
#
# The Rust toolchain the project is built and tested with (1.95).
FROM rust:1.95-slim-bookworm AS build
# librdkafka builds from the source rdkafka-sys bundles (a C compiler, make,
# perl); OpenSSL and zlib are the system's (OPENSSL_NO_VENDOR).
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ make perl pkg-config libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
ENV OPENSSL_NO_VENDOR=1 CARGO_INCREMENTAL=0
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p colo --bin colo \
 && cp target/release/colo /usr/local/bin/colo

FROM debian:bookworm-slim
# libssl3 for librdkafka's TLS, CA certificates for brokers reached over
# TLS, curl for the health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl3 zlib1g ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/colo --create-home colo \
 && install -d -o colo -g colo /var/lib/colo/data
COPY --from=build /usr/local/bin/colo /usr/local/bin/colo
# The data directory exists, owned by colo, so that a volume mounted there
# starts writable for it.
USER colo
WORKDIR /var/lib/colo
# What the node listens on in a container; the gRPC port is also how other
# nodes reach it (COLO_NODE__ADVERTISED names the host).
ENV COLO_NODE__LISTEN=0.0.0.0:7001 \
    COLO_NODE__ADMIN_LISTEN=0.0.0.0:9001 \
    COLO_NODE__DATA_DIR=/var/lib/colo/data \
    COLO_LOG__FORMAT=json
# 7001: gRPC (node-to-node, coordinator, client API); 9001: admin HTTP
# (/metrics, /health/live, /health/ready, the cluster map at /).
EXPOSE 7001 9001
# Ready: registered with its coordinator and hosting what it was given.
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=3 \
  CMD curl -fsS http://127.0.0.1:9001/health/ready || exit 1
ENTRYPOINT ["colo"]
CMD ["run"]
