# seckill: the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
BIN := bin/seckill

# gin's msgpack binding (which we do not use) drags in a codec that takes
# half a minute to compile; leaving it out shortens the first `make run` (see
# docs/operations.md for what a first build costs). Exported, so the builds
# that tests start (the lab, the browser and chaos suites) leave it out too.
export GOFLAGS := -tags=nomsgpack -buildvcs=false $(GOFLAGS)

.PHONY: run story catalogue prep build test test-short vet fmt-check clean bench-buy bench-sales bench-reserve

## run: start the zero-set-up demo (three instances on :8081-:8083, front page on :8080;
## other ports: make run DEMO_FLAGS='-addr :9080 -instances :9081,:9082,:9083')
run: build
	./$(BIN) demo $(DEMO_FLAGS)

# The commit `seckill version` reports: builds run with -buildvcs=false, so
# it is passed in (outside a git checkout it stays empty: "commit unknown").
COMMIT ?= $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null && echo $$c || echo $$c+dirty; })
export SECKILL_COMMIT := $(COMMIT)

## story: see it oversell, then see it stop: one burst per stage against the demo, started if none runs (STORY_FLAGS='-buyers 500' passes flags on)
story: build
	./$(BIN) story $(STORY_FLAGS)

## catalogue: a test catalogue of N products (ids 1 to N, bulk insert) in the demo's SQLite, or in SECKILL_MYSQL_DSN when set (make catalogue N=100000)
N ?= 10000
catalogue: build
	./$(BIN) catalogue -items $(N)

## prep: before a workshop, on good Wi-Fi: download every module (tests included) and build the demo once; make run and make story then need no network
prep:
	$(GO) mod download
	$(MAKE) build

build:
	$(GO) build -ldflags "-X main.commit=$(COMMIT)" -o $(BIN) ./cmd/seckill

# The tests find MySQL and Redis here unless told otherwise; without them,
# the tests that need them skip (and fail under CI=true).
export SECKILL_TEST_MYSQL_DSN ?= root:@tcp(127.0.0.1:3306)/test
export SECKILL_TEST_REDIS_ADDR ?= 127.0.0.1:6379

## test: vet, gofmt check, and every test under the race detector
test: vet
	$(GO) test -race -count=1 -timeout 15m ./...

## test-short: the fast tier: every test but the process-spawning suites (chaos, lab, fleet, browser, compose smoke)
test-short:
	$(GO) test -short -count=1 ./...

vet: fmt-check
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path '*/node_modules/*'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin .demo

## bench-buy: what a sold-out buy costs next to the bare router, with and without an Idempotency-Key (in process; Redis at SECKILL_TEST_REDIS_ADDR)
bench-buy:
	$(GO) test -run '^$$' -bench '^BenchmarkSoldOutBuy$$' -benchtime 2s -count 3 ./internal/httpapi/

## bench-sales: redis-atomic sales of one hot product, 16 buyers at once per core, with group commit and with one transaction per sale (SQLite, and MySQL at SECKILL_TEST_MYSQL_DSN)
bench-sales:
	$(GO) test -run '^$$' -bench '^BenchmarkRedisAtomicSales$$' -benchtime 2000x -count 3 ./internal/inventory/redisstage/

## bench-reserve: the Redis part of a redis-atomic sale (reservation scripts alone or gathered) by 2 and 128 buyers at once, in CPU and writes per sale (a redis-server of its own)
bench-reserve:
	$(GO) test -run '^$$' -bench '^BenchmarkReserveBatch$$' -benchtime 20000x -count 5 ./internal/inventory/redisstage/

# Targets of the lock package, the lab, the browser tests, the chaos suite
# and the stress run.
-include internal/lock/Makefile.inc
-include loadtest/Makefile.inc
-include web/Makefile.inc
-include deploy/Makefile.inc
-include chaos/Makefile.inc
-include stress/Makefile.inc
