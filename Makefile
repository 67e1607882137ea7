# forkbox — the two commands a new machine needs: `make run` and `make test`.
BUILD ?= build
SAN_BUILD ?= build-asan
# the template bench-fork and bench-memory copy into their daemons (and podman imports)
BENCH_TEMPLATE ?= /var/lib/forkbox-test/templates/default

.PHONY: run test test-unit test-sanitize build build-sanitize deps install bench bench-exec bench-fork bench-memory bench-templates format format-check clean

run: ## install what is missing, build, start forkboxd and print how to use it
	./scripts/install-deps.sh run
	./scripts/build.sh $(BUILD)
	./scripts/run.sh $(BUILD)

test: ## install what is missing, build (plain and ASan+UBSan), run every test
	./scripts/install-deps.sh test
	./scripts/test.sh

test-unit:
	./scripts/build.sh $(BUILD)
	meson test -C $(BUILD) --suite unit --print-errorlogs

test-sanitize: ## the whole suite on the ASan+UBSan build only
	./scripts/install-deps.sh test
	FORKBOX_TEST_BUILDS=$(SAN_BUILD) ./scripts/test.sh

build:
	./scripts/build.sh $(BUILD)

build-sanitize:
	./scripts/build.sh $(SAN_BUILD) -Db_sanitize=address,undefined -Db_lundef=false

deps:
	./scripts/install-deps.sh all

install: ## meson install (prefix /usr/local: bin/forkboxd, bin/forkbox, libexec/forkbox/forkbox-init) and the systemd unit
	./scripts/install-deps.sh run
	./scripts/build.sh $(BUILD)
	meson install -C $(BUILD)
	install -D -m 0644 packaging/forkboxd.service $(DESTDIR)/etc/systemd/system/forkboxd.service
	@echo "installed; now: systemctl daemon-reload && systemctl enable --now forkboxd"

bench: ## time to first command, side by side with podman and bubblewrap
	./scripts/install-deps.sh bench
	./scripts/build.sh $(BUILD)
	./bench/setup-peers.sh
	./bench/ttfc

bench-exec: ## exec round trip in a warm sandbox (`true`), side by side with podman exec
	./scripts/install-deps.sh bench
	./scripts/build.sh $(BUILD)
	./bench/setup-peers.sh
	./bench/exec

bench-fork: ## fork of a sandbox holding a 100 MB Python heap, side by side with podman checkpoint/restore and a replay
	./scripts/install-deps.sh bench
	./scripts/build.sh $(BUILD)
	./bench/setup-peers.sh --rootfs $(BENCH_TEMPLATE)/rootfs
	flock /tmp/forkbox-it.lock ./bench/fork --build-dir $(BUILD) --template $(BENCH_TEMPLATE)

bench-memory: ## memory checkpoint and rollback of that sandbox, side by side with podman checkpoint/restore
	./scripts/install-deps.sh bench
	./scripts/build.sh $(BUILD)
	./bench/setup-peers.sh --rootfs $(BENCH_TEMPLATE)/rootfs
	flock /tmp/forkbox-it.lock ./bench/memory-checkpoint --build-dir $(BUILD) --template $(BENCH_TEMPLATE)

bench-templates: ## template import of a 300 MB, 4-layer image and a cached rebuild of a 5-step Dockerfile, side by side with podman load / podman build
	./scripts/install-deps.sh bench
	./scripts/build.sh $(BUILD)
	./bench/setup-peers.sh --rootfs $(BENCH_TEMPLATE)/rootfs
	./bench/template-inputs --rootfs $(BENCH_TEMPLATE)/rootfs
	flock /tmp/forkbox-it.lock ./bench/templates --build-dir $(BUILD) --template $(BENCH_TEMPLATE)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	./scripts/format-check.sh

clean:
	rm -rf $(BUILD) $(SAN_BUILD)
