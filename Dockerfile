# seckill in a small image: a static binary on distroless, run as a numeric
# non-root user. `docker compose up --build` builds it; deploy/dockerfile_test.go
# checks its shape without Docker.
#
# No "# syntax=" line: it makes BuildKit fetch its frontend from a registry
# before building anything, and the Dockerfile frontend built into Docker
# Engine 20.10 and later already knows RUN --mount=type=cache.

# ---- build ------------------------------------------------------------------
FROM golang:1.26 AS build
WORKDIR /src

# Modules first, as their own layer: it is rebuilt only when go.mod or go.sum
# change, not on every source edit.
COPY go.mod go.sum ./
RUN go mod download

# The web pages and the SQL files are embedded, so the binary is all the
# final stage needs.
COPY . .
ENV CGO_ENABLED=0
# The context has no .git (.dockerignore), so the commit that
# `seckill version` reports comes in as a build argument: docker-compose.yml
# passes SECKILL_COMMIT, which the Makefile sets.
ARG SECKILL_COMMIT=""
RUN --mount=type=cache,target=/root/.cache/go-build \
    go build -tags nomsgpack -trimpath -ldflags "-s -w -X main.commit=${SECKILL_COMMIT}" -o /out/seckill ./cmd/seckill
# An empty folder for the admin token that docker-compose.yml's token
# service writes: a named volume mounted on it starts as a copy of it, owner
# included, so the non-root user can write there.
RUN mkdir -p /out/state

# ---- run --------------------------------------------------------------------
# distroless/static carries CA certificates and tzdata, and no shell: the
# container healthcheck runs `/seckill probe URL` instead of curl.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/seckill /seckill
COPY --from=build --chown=65532:65532 /out/state /var/lib/seckill
# 65532 is distroless's "nonroot"; numeric, so runtimes can verify non-root.
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/seckill"]
CMD ["serve"]
