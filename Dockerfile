# syntax=docker/dockerfile:1
#
# One image for everything that runs in a cluster: `linea-operator` (the controller, the
# Helm chart's Deployment) and `linea` (master and worker pods of every TrainingJob; the
# operator passes its own image as the job pods' default).
#
#   docker build -t linea:dev .
#
# Not built in CI: the development machine has no Docker daemon and no registry access.
# CI assembles the same runtime image with umoci (e2e/node/images.py reads this file's last
# stage; e2e/node/image-check.sh compares the result with it) and runs it on real pods
# (e2e/cluster-journey.sh). e2e/kind/up.sh builds this file and loads it into kind.

# --- build -------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder
WORKDIR /src
# The workspace as a whole: Cargo.lock pins every dependency (--locked refuses to change
# it); .dockerignore keeps target/, virtualenvs and demo output out of the context.
COPY . .
# The workspace's release profile keeps line tables for the test suite's backtraces; in
# the image they would make the binaries five times larger (148 MB instead of 29 MB for
# `linea`), so they are stripped at link time. Symbols stay: backtraces still name
# functions.
ENV CARGO_PROFILE_RELEASE_STRIP=debuginfo
# BuildKit cache mounts keep the crates.io index, downloaded crates and the target dir
# between builds, so a source change recompiles only linea's own crates. The binaries are
# copied out of the cache mount, which does not outlive this RUN.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p linea-worker -p linea-operator \
 && mkdir -p /out \
 && cp target/release/linea target/release/linea-operator /out/

# --- runtime -----------------------------------------------------------------------------
# distroless/cc: glibc, libgcc, CA certificates (for S3 over HTTPS) and nothing else: no
# shell, no package manager. Both binaries need only libc, libm and libgcc_s (ldd), and
# the builder is Debian 12 too, so the glibc versions match. The :nonroot variant runs
# as uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="linea" \
      org.opencontainers.image.description="linea: sparse linear models on Kubernetes (operator and trainer)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/linea /usr/local/bin/linea
COPY --from=builder /out/linea-operator /usr/local/bin/linea-operator
USER 65532:65532
# Job pods and `docker run IMAGE <command>` run the trainer (`linea prepare|train|master|
# worker|...`); the chart's Deployment sets command ["linea-operator"].
ENTRYPOINT ["/usr/local/bin/linea"]
CMD ["--help"]
