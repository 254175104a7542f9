# cpuos: one non-recursive Makefile. `make` builds host tools and the guest
# agent; `make guest` adds the kernel and template images (cached under
# $(CPUOS_CACHE)); `make test` runs every test; `make bench` the benchmarks.

CC ?= cc
BUILD ?= build
CPUOS_CACHE ?= /var/cache/cpuos
export CPUOS_CACHE

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -D_GNU_SOURCE $(WARN) -MMD -MP -Isrc -I.
ifdef WERROR
CFLAGS += -Werror
endif
ifdef SANITIZE
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SANITIZE)
endif
LDLIBS := -ljansson
DAEMON_LIBS := -ljansson -lmicrohttpd -lsqlite3 -lcrypto -lpthread
ifndef V
Q := @
endif

TEMPLATES := base python node

COMMON_SRCS := $(wildcard src/common/*.c)
# The agent is static and alone in the guest: only the common pieces it uses.
AGENT_SRCS := $(wildcard src/agent/*.c) src/common/proto.c src/common/clock.c src/common/fs.c
RUNNER_SRCS := $(wildcard src/runner/*.c)
VM_CLI_SRCS := src/cli/cpuos-vm.c
DAEMON_SRCS := $(wildcard src/daemon/*.c src/daemon/*/*.c)
STORE_SRCS := $(wildcard src/daemon/store/*.c)
CLI_SRCS := $(wildcard src/cli/cpuos/*.c)
TEST_LIB := tests/lib/tap.c

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
# The agent is static and runs as PID 1 in the guest: built without
# sanitizers, with its own object directory.
agent_obj = $(patsubst %.c,$(BUILD)/agent-obj/%.o,$(1))

AGENT := $(BUILD)/guest/cpuos-agent
INITRAMFS := $(BUILD)/guest/initramfs.cpio
KERNEL := $(BUILD)/guest/bzImage
VM_CLI := $(BUILD)/bin/cpuos-vm
DAEMON := $(BUILD)/bin/cpuosd
CLI := $(BUILD)/bin/cpuos
BENCH := $(BUILD)/bench/bench_vm $(BUILD)/bench/bench_api

UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))
VM_TESTS := $(patsubst tests/vm/%.c,$(BUILD)/tests/%,$(wildcard tests/vm/test_*.c))
FUZZ_REPLAY := $(BUILD)/tests/replay_proto

all: $(AGENT) $(INITRAMFS) $(VM_CLI) $(DAEMON) $(CLI) $(UNIT_TESTS) $(VM_TESTS) $(FUZZ_REPLAY) $(BENCH)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(if $(Q),@echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/agent-obj/%.o: %.c
	@mkdir -p $(@D)
	$(if $(Q),@echo "  CC      $< (agent)")
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -MMD -MP -Isrc -I. -Os -g $(if $(WERROR),-Werror) -c -o $@ $<

$(AGENT): $(call agent_obj,$(AGENT_SRCS))
	@mkdir -p $(@D)
	$(Q)$(CC) -static -o $@ $^

# The agent reaches the guest in an initramfs, not in the template images, so
# a new agent needs no image rebuild.
$(INITRAMFS): $(AGENT) guest/mkinitramfs.sh
	$(Q)guest/mkinitramfs.sh $(AGENT) $@

$(VM_CLI): $(call obj,$(VM_CLI_SRCS) $(RUNNER_SRCS) $(COMMON_SRCS))
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The OpenAPI document is compiled into the daemon (ASCII only, checked).
$(BUILD)/gen/openapi.c: docs/openapi.json
	@mkdir -p $(@D)
	$(Q)python3 -c 'import json,sys; d=open(sys.argv[1]).read(); json.loads(d); assert d.isascii(); print("const char api_openapi_json[] = " + json.dumps(d) + ";")' $< >$@.tmp && mv $@.tmp $@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(DAEMON): $(call obj,$(DAEMON_SRCS) $(RUNNER_SRCS) $(COMMON_SRCS)) $(BUILD)/obj/gen/openapi.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(DAEMON_LIBS)

$(CLI): $(call obj,$(CLI_SRCS) $(COMMON_SRCS))
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lcurl -ljansson -pthread

$(BUILD)/tests/test_store: $(call obj,tests/unit/test_store.c $(TEST_LIB) $(STORE_SRCS) $(COMMON_SRCS))
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lsqlite3 -lcrypto -ljansson -lpthread

$(BUILD)/tests/test_%: $(call obj,tests/unit/test_%.c $(TEST_LIB)) $(call obj,$(RUNNER_SRCS) $(COMMON_SRCS))
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/test_%: $(call obj,tests/vm/test_%.c tests/lib/vmtest.c $(TEST_LIB)) $(call obj,$(RUNNER_SRCS) $(COMMON_SRCS))
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/bench_%: $(call obj,bench/bench_%.c tests/lib/vmtest.c $(TEST_LIB)) $(call obj,$(RUNNER_SRCS) $(COMMON_SRCS))
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread

# Fuzzing: make test replays the committed corpus through the target with
# gcc; `make fuzz` runs libFuzzer (clang) and grows the corpus.
$(BUILD)/tests/replay_%: $(call obj,tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(TEST_LIB) src/common/proto.c)
	@mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^

FUZZ_SECONDS ?= 60
fuzz:
	@command -v clang >/dev/null || { echo "fuzz: needs clang (apt-get install clang libclang-rt-14-dev)"; exit 1; }
	@mkdir -p $(BUILD)/fuzz
	clang -g -O1 -std=c11 -D_GNU_SOURCE -Isrc -I. -fsanitize=fuzzer,address,undefined \
	  -o $(BUILD)/fuzz/fuzz_proto tests/fuzz/fuzz_proto.c src/common/proto.c
	$(BUILD)/fuzz/fuzz_proto -max_total_time=$(FUZZ_SECONDS) -max_len=4096 tests/fuzz/corpus/proto

# Guest kernel and templates: long, cached outside the repo, with progress.
kernel: $(KERNEL)
$(KERNEL): guest/kernel/cpuos.config guest/kernel/build.sh
	guest/kernel/build.sh $@

templates: $(foreach t,$(TEMPLATES),$(BUILD)/guest/templates/$(t).erofs)
$(BUILD)/guest/templates/%.erofs: $(wildcard guest/templates/*.recipe) guest/templates/build.sh
	guest/templates/build.sh $* $@

guest: kernel templates $(INITRAMFS)

# The README's two commands. Each first installs missing Debian packages,
# then builds (the sub-make orders that after the install).
run:
	scripts/deps.sh
	$(MAKE) all guest
	scripts/quickstart.sh

test:
	scripts/deps.sh
	$(MAKE) all guest
	tests/run.sh

bench:
	scripts/deps.sh
	$(MAKE) all guest
	bench/run.sh

format:
	clang-format -i $$(git ls-files 'src/*.[ch]' 'tests/*.[ch]' 'bench/*.[ch]')

clean:
	rm -rf $(BUILD)

.PHONY: all kernel templates guest run test bench fuzz format clean
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
