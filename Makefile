# sluice — elastic bandwidth quotas for Kafka broker hosts.
# `make help` lists the targets.

GO      ?= go
CLANG   ?= clang-19
BIN     := bin/sluice
BPF_CFLAGS := -O2 -g -Wall -Werror
# The compiled programs are committed beside their Go bindings (bpf2go's
# convention), so a clone builds with `go build`, `go vet` and `go install`
# without clang; check-generated proves both are what bpf/ compiles to.
# Defined here, before any rule names them: make expands a rule's
# prerequisites where it reads the rule.
BPF_OBJ    := maps/sluice_bpfel.o
BPF_SRC    := $(wildcard bpf/*.c bpf/*.h bpf/include/*.h bpf/include/arch/asm/*.h)
GENERATED  := maps/sluice_bpfel.go maps/sluice_bpfel.o

# Every package but the end-to-end scenarios, which `make e2e` (kfake),
# `make adversarial` and `make kafka-check` (real Apache Kafka) run.
# Three modules in one workspace (go.work): the agent (.), and test/ and
# deploy/, which hold what only builds and tests it.
# The scenario tiers run under faildigest: it prints the tests' output as
# -v does and ends with each failed test's last lines, where CI's cut of a
# long log shows them.
GO_TEST_DIGEST = $(GO) run ./test/faildigest -- $(GO) test -json
PKGS    = $(shell $(GO) list ./... ./test/... ./deploy/... | grep -v /test/e2e)
# Debian packages the tests need on a fresh machine (CI runs as root).
# prometheus: promtool checks deploy/prometheus' rules, and a real server
# scrapes the agent in the overcommit scenario. kcat: librdkafka clients log
# in with SASL PLAIN and SCRAM in the SASL scenario. nftables, bpftool: the
# busy-host scenario's foreign netdev counter and its dumps.
# lintian, rpmlint: deb-check lints the packages as Debian and rpm distributions would.
APT_PACKAGES := clang-19 llvm-19 libbpf-dev iproute2 iperf3 procps systemd util-linux make ethtool prometheus kcat nftables bpftool groff-base rpm file lintian rpmlint

export PATH := $(PATH):/usr/local/go/bin

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

# The version `sluice version` prints and the package carries.
VERSION := $(shell ./deploy/version.sh)

.PHONY: build
build: $(BPF_OBJ) ## build bin/sluice, stamped with its version (deploy/version.sh) and the revision (sluice version)
	GOWORK=off $(GO) build -ldflags "-X main.stampedVersion=$(VERSION) -X main.stampedRevision=$$(git rev-parse HEAD 2>/dev/null)" -o $(BIN) ./cmd/sluice

# Release builds: static (no cgo), stripped, with paths trimmed, for each of
# these architectures; the BPF object is the same little-endian one. Built
# with GOWORK=off, from the agent's go.mod alone: the test and deploy
# modules' requirements never choose a version the binary links.
RELEASE_ARCHES := amd64 arm64
RELEASE_LDFLAGS = -s -w -X main.stampedVersion=$(VERSION) -X main.stampedRevision=$$(git rev-parse HEAD 2>/dev/null)

.PHONY: packages
packages: build ## dist/: static stripped binaries, .deb and .rpm for amd64 and arm64 (deploy/nfpm.yaml), SHA256SUMS
	rm -rf dist && mkdir -p dist
	for arch in $(RELEASE_ARCHES); do \
		GOWORK=off CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS)" -o dist/sluice_$(VERSION)_linux_$$arch ./cmd/sluice || exit 1; \
	done
	$(GO) run ./deploy/pkg -version $(VERSION) -dist dist -native $(BIN) -arch $$(echo $(RELEASE_ARCHES) | tr ' ' ,)
	cd dist && sha256sum -- * > SHA256SUMS

.PHONY: deb
deb: packages ## the packages (make packages); dist/sluice_<version>_amd64.deb among them

.PHONY: deb-check
deb-check: ## the release: checksums, static binaries, each package's metadata and contents (rpm too); dpkg -i, -r, -P and an upgrade from the previous release in overlays (the host is untouched) (root)
	rm -rf dist
	$(MAKE) --no-print-directory packages
	./test/deb/check-release.sh dist $(VERSION)
	prev=$$(mktemp -d) && trap 'rm -rf "$$prev"' EXIT && \
	prev_version=$$(./test/release/build.sh "$$prev") && \
	./test/deb/check.sh dist/sluice_*_amd64.deb $(VERSION) "$$prev"/src/dist/sluice_*_amd64.deb "$$prev_version"

# The previous release, recorded by its commit (the one CI last landed);
# test/release/build.sh builds it from this clone's history with git
# archive: the restart scenario and deb-check upgrade from it to this tree.
.PHONY: previous-release
previous-release: ## record COMMIT (the last landed one) as the previous release in test/release/
	@test -n "$(COMMIT)" || { echo "usage: make previous-release COMMIT=<the commit CI last landed>" >&2; exit 1; }
	git rev-parse --verify --quiet "$(COMMIT)^{commit}" >/dev/null || { echo "previous-release: $(COMMIT) is not a commit here" >&2; exit 1; }
	printf 'commit %s\nversion 0.%s-g%s\n' $$(git rev-parse $(COMMIT)) $$(git rev-list --count $(COMMIT)) $$(git rev-parse --short $(COMMIT)) > test/release/previous.txt

.PHONY: demo
demo: deps $(BPF_OBJ) ## the main job: a one-minute story with real Kafka clients, live status, demo.png (root)
	$(GO) run ./test/demo -out demo.png

.PHONY: demo-simulate
demo-simulate: build ## the control loop alone on the design's worked examples (no root)
	./$(BIN) demo

.PHONY: deps
deps: ## install the Debian packages and Go modules the tests need (root)
	@missing=""; for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" != 0 ]; then echo "deps: need root to install$$missing" >&2; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	for m in . test deploy; do GOWORK=off $(GO) -C $$m mod download || exit 1; done
	$(MAKE) --no-print-directory kafka-deps

# Apache Kafka for the real-broker scenarios: the version test/kafka/pom.xml
# pins, resolved from Maven Central (checksums verified: -C fails on a
# mismatch) into test/kafka/lib, the class path the harness starts brokers
# and the Java tools from.
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' test/kafka/pom.xml)
KAFKA_LIB     := test/kafka/lib

.PHONY: kafka-deps
kafka-deps: ## fetch the pinned Apache Kafka server and tools from Maven Central into test/kafka/lib
	@command -v mvn >/dev/null || { echo "kafka-deps: mvn (Maven) is not installed; Apache Kafka $(KAFKA_VERSION) cannot be fetched" >&2; exit 1; }
	@command -v java >/dev/null || { echo "kafka-deps: java is not installed; the real-broker scenarios need Java 17" >&2; exit 1; }
	@if [ -f $(KAFKA_LIB)/kafka_2.13-$(KAFKA_VERSION).jar ] && [ $(KAFKA_LIB)/.complete -nt test/kafka/pom.xml ]; then exit 0; fi; \
	rm -rf $(KAFKA_LIB).tmp && \
	if ! mvn -B -q -C -f test/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA_LIB).tmp > $(KAFKA_LIB).log 2>&1; then \
		cat $(KAFKA_LIB).log >&2; \
		echo "kafka-deps: could not fetch org.apache.kafka:kafka_2.13:$(KAFKA_VERSION) and kafka-tools:$(KAFKA_VERSION) with their dependencies from Maven Central (above: Maven's own words)" >&2; \
		rm -rf $(KAFKA_LIB).tmp; exit 1; \
	fi; \
	rm -rf $(KAFKA_LIB) && mv $(KAFKA_LIB).tmp $(KAFKA_LIB) && touch $(KAFKA_LIB)/.complete && rm -f $(KAFKA_LIB).log; \
	echo "kafka-deps: Apache Kafka $(KAFKA_VERSION), $$(ls $(KAFKA_LIB)/*.jar | wc -l) jars in $(KAFKA_LIB)"

$(BPF_OBJ): $(BPF_SRC) maps/gen.go
	$(MAKE) --no-print-directory generate

.PHONY: generate
generate: ## compile bpf/ with clang-19 into maps/sluice_bpfel.o and regenerate the Go bindings (committed)
	cd maps && BPF_CLANG=$(CLANG) BPF_CFLAGS="$(BPF_CFLAGS)" $(GO) generate ./

.PHONY: check-generated
check-generated: ## fail when the committed BPF object or Go bindings are not what bpf/ compiles to
	@tmp=$$(mktemp -d); cp $(GENERATED) $$tmp/; \
	$(MAKE) --no-print-directory generate >/dev/null || { cp $$tmp/* maps/; rm -rf $$tmp; exit 1; }; \
	stale=""; for f in $(GENERATED); do cmp -s $$f $$tmp/$$(basename $$f) || stale="$$stale $$f"; done; \
	cp $$tmp/* maps/; rm -rf $$tmp; \
	if [ -n "$$stale" ]; then echo "stale generated files:$$stale (run make generate and commit)" >&2; exit 1; fi; \
	host=$$($(CLANG) -target bpf -M -Ibpf/include/arch bpf/tc.c | tr ' ' '\n' | grep -E '^/usr/include/[^/]*-linux-gnu[^/]*/' || true); \
	if [ -n "$$host" ]; then echo "the BPF build reads the build host's arch headers (the object would differ on amd64 and arm64):" $$host >&2; exit 1; fi; \
	echo "generated BPF output is up to date, and reads no host arch headers"

.PHONY: check-clone
check-clone: ## a clone of HEAD builds and vets with Go alone (no make, no clang): the committed BPF object serves its bindings
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && git clone -q . "$$tmp/sluice" && \
	cd "$$tmp/sluice" && GOWORK=off $(GO) build ./... && GOWORK=off $(GO) vet ./... && echo "a clone of HEAD builds and vets with go alone"

.PHONY: test
test: deps vet check-generated check-clone ## run every test (unit, fuzz seeds, BPF, namespaces, shaping); needs root
	@if [ "$$(id -u)" != 0 ]; then echo "make test needs root: the BPF, namespace and qdisc tests must run, not skip" >&2; exit 1; fi
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(MAKE) --no-print-directory bench-once
	$(MAKE) --no-print-directory shaping-check
	$(MAKE) --no-print-directory e2e
	$(MAKE) --no-print-directory adversarial
	$(MAKE) --no-print-directory kafka-check
	$(MAKE) --no-print-directory systemd-check
	$(MAKE) --no-print-directory deb-check

.PHONY: e2e
e2e: $(BPF_OBJ) ## end-to-end scenarios with franz-go, sarama and kafka-go; writes e2e-results.json (root)
	$(GO_TEST_DIGEST) -count=1 -timeout 25m -run '^TestScenario' ./test/e2e/ -args -results $(CURDIR)/e2e-results.json

.PHONY: latency-plot
latency-plot: $(BPF_OBJ) ## the latency testbed's four runs as tail CDFs: docs/latency.png and latency-results.json (root)
	$(GO) test -count=1 -v -timeout 10m -run '^TestScenarioLatencyTestbed$$' ./test/e2e/ -args -results $(CURDIR)/latency-results.json -latency-cdf $(CURDIR)/latency-testbed.json
	$(GO) run ./test/latencyplot -in latency-testbed.json -out docs/latency.png

.PHONY: cluster-plot
cluster-plot: $(BPF_OBJ) ## the three-broker cluster budgets scenario's rates over time: docs/cluster-budgets.png and cluster-results.json (root)
	$(GO) test -count=1 -v -timeout 10m -run '^TestScenarioClusterBudgets$$' ./test/e2e/ -args -results $(CURDIR)/cluster-results.json -cluster-series $(CURDIR)/cluster-series.json
	$(GO) run ./test/clusterplot -in cluster-series.json -out docs/cluster-budgets.png

.PHONY: bench-once
bench-once: $(BPF_OBJ) ## run every benchmark once (-benchtime 1x): a benchmark whose own check broke fails here, not in a release run (root)
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout 15m $(PKGS)

.PHONY: kafka-check
kafka-check: $(BPF_OBJ) kafka-deps ## the scenarios on real Apache Kafka with the Java client; writes kafka-results.json (root)
	$(GO_TEST_DIGEST) -count=1 -timeout 30m -run '^TestKafka' ./test/e2e/ -args -results $(CURDIR)/kafka-results.json -kafka-libs $(CURDIR)/$(KAFKA_LIB)

.PHONY: adversarial
adversarial: $(BPF_OBJ) ## hostile clients: forged replication, churn of ids and connections, floods, the floor; writes adversarial-results.json (root)
	$(GO_TEST_DIGEST) -count=1 -timeout 30m -run '^TestAdversarial' ./test/e2e/ -args -results $(CURDIR)/adversarial-results.json

.PHONY: systemd-check
systemd-check: $(BPF_OBJ) ## the unit under this machine's own systemd, booted in a PID+mount+net namespace: install, start, reload, restart, kill -9, stop (root)
	./test/systemd/check.sh

.PHONY: shaping-check
shaping-check: $(BPF_OBJ) ## measure the shapers with iperf3 in namespaces (the gated cases); writes shaping-results.json (root)
	$(GO) run ./test/shapingcheck -out shaping-results.json

.PHONY: shaping-report
shaping-report: $(BPF_OBJ) ## shaping-check plus the figures recorded but not gated (police, offloads off, multi-queue) (root)
	$(GO) run ./test/shapingcheck -recorded -out shaping-results.json

PREFIX  ?= /usr/local
DESTDIR ?=
# make install's binary is the release build (static, stripped, paths
# trimmed: what make packages builds for each architecture) for this
# machine; with it go the man pages and bash, zsh and fish completions it
# writes from its own command tree, as in the packages, under PREFIX.
INSTALL_BIN := bin/sluice-release
MAN1DIR     := $(DESTDIR)$(PREFIX)/share/man/man1
COMPLETIONS := $(DESTDIR)$(PREFIX)/share/bash-completion/completions/sluice $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_sluice $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/sluice.fish

.PHONY: install
install: $(BPF_OBJ) ## install the release binary (static, stripped), the systemd unit, man pages, shell completions and an example /etc/sluice/sluice.yaml (DESTDIR, PREFIX); make deb builds a package instead
	GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS)" -o $(INSTALL_BIN) ./cmd/sluice
	install -D -m 0755 $(INSTALL_BIN) $(DESTDIR)$(PREFIX)/bin/sluice
	@# The unit names the binary where PREFIX put it.
	install -d $(DESTDIR)/etc/systemd/system
	sed 's|/usr/local/bin/sluice|$(PREFIX)/bin/sluice|g' deploy/sluice.service > $(DESTDIR)/etc/systemd/system/sluice.service
	chmod 0644 $(DESTDIR)/etc/systemd/system/sluice.service
	@if [ -e $(DESTDIR)/etc/sluice/sluice.yaml ]; then echo "keeping existing $(DESTDIR)/etc/sluice/sluice.yaml"; \
	else install -D -m 0640 deploy/sluice.yaml $(DESTDIR)/etc/sluice/sluice.yaml; fi
	install -D -m 0644 README.md $(DESTDIR)/usr/share/doc/sluice/README.md
	@# Pages gzipped without name or time, as deploy/pkg packs them.
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	./$(INSTALL_BIN) man --out "$$tmp" && gzip -9n "$$tmp"/*.1 && \
	install -d $(MAN1DIR) && install -m 0644 "$$tmp"/*.1.gz $(MAN1DIR)/ && \
	for f in $(COMPLETIONS); do \
		case $$f in */_sluice) shell=zsh ;; *.fish) shell=fish ;; *) shell=bash ;; esac; \
		./$(INSTALL_BIN) completion $$shell > "$$tmp/c" && install -D -m 0644 "$$tmp/c" $$f || exit 1; \
	done

.PHONY: uninstall
uninstall: ## stop the unit, remove what the agent left attached (sluice unload) and what install wrote; keeps /etc/sluice/sluice.yaml
	-systemctl disable --now sluice.service 2>/dev/null
	@# Whatever the configuration's state: agents record what they made in /var/lib/sluice.
	@if [ -x $(DESTDIR)$(PREFIX)/bin/sluice ]; then $(DESTDIR)$(PREFIX)/bin/sluice unload; fi
	rm -f $(DESTDIR)$(PREFIX)/bin/sluice $(DESTDIR)/etc/systemd/system/sluice.service $(DESTDIR)/usr/share/doc/sluice/README.md
	rmdir $(DESTDIR)/usr/share/doc/sluice 2>/dev/null || true
	@# sluice(1) and a sluice-<command>(1) for each command: the pages sluice man writes.
	rm -f $(MAN1DIR)/sluice.1.gz $(MAN1DIR)/sluice-*.1.gz $(COMPLETIONS)
	-systemctl daemon-reload 2>/dev/null

.PHONY: dashboard
dashboard: ## regenerate deploy/grafana/sluice-dashboard.json from deploy/grafana/dashboard.go
	$(GO) run ./deploy/grafana/gen -out deploy/grafana/sluice-dashboard.json

.PHONY: vet
vet: $(BPF_OBJ) ## go vet and gofmt
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out" >&2; exit 1; fi

BENCH_PKGS := ./allocator/ ./agent/learner/ ./agent/ ./agent/shaper/ ./maps/ ./latency/

.PHONY: bench
bench: $(BPF_OBJ) ## benchmarks, -count 5 (read medians)
	$(GO) test -run '^$$' -bench . -benchmem -count 5 $(BENCH_PKGS)

# Fuzz targets as package:target; corpora live in each package's testdata/fuzz.
FUZZ_TARGETS := ./allocator/:FuzzCycle ./agent/kafka/:FuzzParse ./agent/kafka/:FuzzParseBody ./agent/kafka/:FuzzParseResponseStart ./agent/learner/:FuzzLearn ./agent/entity/:FuzzSafeName ./agent/objectives/:FuzzDecodeLeads

.PHONY: fuzz
fuzz: $(BPF_OBJ) ## run each fuzz target for FUZZTIME (default 60s)
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg) for $${FUZZTIME:-60s}"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $${FUZZTIME:-60s} $$pkg || exit 1; done

.PHONY: clean
clean: ## remove build output
	rm -rf bin dist $(BPF_OBJ)
