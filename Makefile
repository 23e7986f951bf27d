# amp: the front door. `make` builds the library (static and shared), the CLI and amp.pc;
# `make test` and `make demo` first install missing Debian packages (when run as root).
#
#   make [all]            build/libamp.a, build/libamp.so (soname libamp.so.0), build/amp, build/amp.pc
#   make test             unit tests on every SIMD path, CLI golden tests, a pkg-config client build
#   make test-sanitize    the same under ASan+UBSan (near-exhaustive sweeps instead of exhaustive ones)
#   make demo             the main job: `amp compare` on Fashion-MNIST (do I need a GradScaler?)
#   make bench            `amp bench convert` and the numpy comparison (bench/convert_vs_numpy.py)
#   make fuzz             libFuzzer targets (clang); make fuzz-replay replays the committed corpus
#   make install PREFIX=/usr/local [DESTDIR=...]

VERSION_MAJOR := 0
VERSION := 0.1.0
BUILD ?= build
CONFIG_STAMP := $(BUILD)/config.stamp
PREFIX ?= /usr/local
CC ?= cc
ARCH := $(shell uname -m)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
# No -ffast-math anywhere: amp's job includes detecting inf and NaN.
OPT ?= -O2
CPPFLAGS_AMP := -Iinclude -D_POSIX_C_SOURCE=200809L
CFLAGS_AMP := -std=c11 $(OPT) -g -fPIC -fno-strict-aliasing $(WARN) $(CPPFLAGS_AMP) $(EXTRA_CFLAGS)
LDLIBS_AMP := -lcjson -lpcre2-8 -lz -lpthread -lm
LDFLAGS_AMP := $(EXTRA_LDFLAGS)

LIB_SRCS := $(shell find src -name '*.c' | sort)
ifneq ($(ARCH),x86_64)
LIB_SRCS := $(filter-out src/kernels/x86/%,$(LIB_SRCS))
endif
# The MPI backend is a library of its own (libamp_mpi), built only when MPI is found (below).
LIB_SRCS := $(filter-out src/comm_mpi/%,$(LIB_SRCS))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_SRCS := $(wildcard tools/amp/*.c)
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
TEST_SRCS := $(wildcard tests/*.c)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/obj/%.o)

# Per-file ISA flags: only these translation units may contain AVX2/AVX-512 instructions, and
# nothing calls into them unless run-time detection (src/cpu/cpu.c) says the CPU has them.
ISA_AVX2 := -mavx2 -mfma -mf16c
ISA_AVX512 := $(ISA_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16
$(BUILD)/obj/src/kernels/x86/%_avx2.o: CFLAGS_ISA := $(ISA_AVX2)
$(BUILD)/obj/src/kernels/x86/%_avx512.o: CFLAGS_ISA := $(ISA_AVX512)
$(BUILD)/obj/src/kernels/x86/%_amx.o: CFLAGS_ISA := $(ISA_AVX512) -mamx-tile -mamx-bf16

.PHONY: all lib cli test test-sanitize demo bench fuzz fuzz-replay install uninstall clean deps
all: lib cli $(BUILD)/amp.pc

lib: $(BUILD)/libamp.a $(BUILD)/libamp.so
cli: $(BUILD)/amp

$(BUILD)/obj/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_AMP) $(CFLAGS_ISA) -MMD -MP -c $< -o $@

$(BUILD)/libamp.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

# The shared library exports exactly the functions the public headers declare.
$(BUILD)/libamp.map: include/amp.h $(wildcard include/amp/*.h) tools/gen-exports.sh
	@mkdir -p $(BUILD)
	sh tools/gen-exports.sh include/amp.h $(filter-out include/amp/comm_mpi.h,$(wildcard include/amp/*.h)) > $@

$(BUILD)/libamp.so.$(VERSION): $(LIB_OBJS) $(BUILD)/libamp.map
	$(CC) -shared -Wl,-soname,libamp.so.$(VERSION_MAJOR) -Wl,--version-script=$(BUILD)/libamp.map \
	    -o $@ $(LIB_OBJS) $(LDFLAGS_AMP) $(LDLIBS_AMP)

$(BUILD)/libamp.so: $(BUILD)/libamp.so.$(VERSION)
	ln -sf libamp.so.$(VERSION) $(BUILD)/libamp.so.$(VERSION_MAJOR)
	ln -sf libamp.so.$(VERSION) $@

# Data-parallel training over MPI (Debian: openmpi-bin, libopenmpi-dev): when mpicc is on the PATH,
# build/libamp_mpi.a is built and the CLI trains data-parallel under mpirun. AMP_MPI=0 turns it off.
AMP_MPI ?= $(if $(shell command -v mpicc 2>/dev/null),1,0)
ifeq ($(AMP_MPI),1)
MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell mpicc --showme:compile 2>/dev/null))
MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)
MPI_LIB := $(BUILD)/libamp_mpi.a
CLI_MPI_CFLAGS := -DAMP_HAVE_MPI $(MPI_CFLAGS)
$(BUILD)/obj/src/comm_mpi/%.o: CFLAGS_ISA := $(MPI_CFLAGS)
$(MPI_LIB): $(BUILD)/obj/src/comm_mpi/comm_mpi.o
	@rm -f $@
	ar rcs $@ $^
lib: $(MPI_LIB)
endif

# The CLI links the static library so it runs from the build tree without LD_LIBRARY_PATH. Only the
# CLI uses PLplot (Debian's libplplot-dev, for the report plots); the library does not.
PLPLOT_CFLAGS := $(shell pkg-config --cflags plplot 2>/dev/null)
PLPLOT_LIBS := $(shell pkg-config --libs plplot 2>/dev/null || echo -lplplot)
$(BUILD)/obj/tools/%.o: CFLAGS_ISA := $(PLPLOT_CFLAGS) $(CLI_MPI_CFLAGS)
$(BUILD)/amp: $(CLI_OBJS) $(BUILD)/libamp.a $(MPI_LIB)
	$(CC) -o $@ $(CLI_OBJS) $(MPI_LIB) $(BUILD)/libamp.a $(LDFLAGS_AMP) $(PLPLOT_LIBS) $(MPI_LIBS) $(LDLIBS_AMP)


$(BUILD)/amp_tests: $(TEST_OBJS) $(BUILD)/libamp.a
	$(CC) -o $@ $(TEST_OBJS) $(BUILD)/libamp.a $(LDFLAGS_AMP) $(LDLIBS_AMP)

# amp.pc for the build tree: headers from the source tree, libraries (with an rpath) from $(BUILD).
$(BUILD)/amp.pc: amp.pc.in Makefile
	@mkdir -p $(BUILD)
	sed -e 's|@PREFIX@|$(CURDIR)|' -e 's|@INCLUDEDIR@|$(CURDIR)/include|' -e 's|@LIBDIR@|$(abspath $(BUILD))|' \
	    -e 's|@RPATH@|-Wl,-rpath,$(abspath $(BUILD))|' -e 's|@VERSION@|$(VERSION)|' $< > $@

deps:
	@sh tools/install-deps.sh

test: deps
	$(MAKE) all $(BUILD)/amp_tests
	BUILD=$(BUILD) sh tests/run.sh

# ASan+UBSan build in its own tree; AMP_TEST_QUICK trades the 2^32 sweeps for strided ones.
test-sanitize: deps
	$(MAKE) BUILD=$(BUILD)/sanitize OPT=-O1 EXTRA_CFLAGS="$(SAN_FLAGS)" \
	    EXTRA_LDFLAGS="-fsanitize=address,undefined" all $(BUILD)/sanitize/amp_tests
	AMP_TEST_QUICK=1 BUILD=$(BUILD)/sanitize EXAMPLE_CFLAGS="-fsanitize=address,undefined" \
	    LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp sh tests/run.sh

# The seed question on real data: `amp compare` on Fashion-MNIST (Debian's dataset-fashion-mnist,
# installed by tools/install-demo-data.sh; `make test` does not need it). A few minutes on two cores.
DEMO_FLAGS ?= --model mlp --epochs 1 --threads 2
demo: deps
	@sh tools/install-demo-data.sh
	$(MAKE) all
	$(BUILD)/amp compare $(DEMO_FLAGS) --report $(BUILD)/demo-report
	@echo "demo: report in $(BUILD)/demo-report/index.html (metrics.jsonl, loss/scale/grad_hist/act_hist .png/.svg)"

bench: all
	$(BUILD)/amp bench convert
	@if python3 -c 'import numpy' 2>/dev/null; then python3 bench/convert_vs_numpy.py --amp $(BUILD)/amp; \
	 else echo "bench: numpy not installed (pip install numpy ml_dtypes) - skipping the numpy comparison"; fi

FUZZ_TARGETS := $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
# fuzz_cli_args links the CLI's own sources (its main() comes in through the target, renamed).
FUZZ_EXTRA_cli_args := $(filter-out tools/amp/main.c,$(CLI_SRCS)) $(PLPLOT_CFLAGS)
FUZZ_LIBS_cli_args := $(PLPLOT_LIBS)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

# libFuzzer targets: the library is rebuilt with clang and coverage instrumentation in its own tree.
# -fno-sanitize-recover: an undefined-behaviour report stops the fuzzer as a finding (by default
# UBSan prints and carries on, and the run ends "clean").
fuzz:
	$(MAKE) BUILD=$(BUILD)/fuzz CC=clang OPT=-O1 EXTRA_CFLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all" lib
	for t in $(FUZZ_TARGETS); do \
	  extra=""; libs=""; if [ $$t = cli_args ]; then extra="$(FUZZ_EXTRA_cli_args)"; libs="$(FUZZ_LIBS_cli_args)"; fi; \
	  clang -std=c11 -O1 -g $(WARN) $(CPPFLAGS_AMP) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    fuzz/fuzz_$$t.c $$extra $(BUILD)/fuzz/libamp.a $$libs $(LDLIBS_AMP) -o $(BUILD)/fuzz/$$t || exit 1; done
	@echo "run e.g.: $(BUILD)/fuzz/convert fuzz/corpus/convert -max_total_time=60 (cli_args: add -close_fd_mask=3)"

# Replays the committed corpus through each target with a plain main(), under ASan+UBSan.
fuzz-replay:
	$(MAKE) BUILD=$(BUILD)/sanitize OPT=-O1 EXTRA_CFLAGS="$(SAN_FLAGS)" EXTRA_LDFLAGS="-fsanitize=address,undefined" lib
	for t in $(FUZZ_TARGETS); do \
	  extra=""; libs=""; if [ $$t = cli_args ]; then extra="$(FUZZ_EXTRA_cli_args)"; libs="$(FUZZ_LIBS_cli_args)"; fi; \
	  $(CC) -std=c11 -O1 -g $(WARN) $(CPPFLAGS_AMP) $(SAN_FLAGS) fuzz/fuzz_$$t.c $$extra fuzz/replay_main.c \
	    $(BUILD)/sanitize/libamp.a $$libs $(LDLIBS_AMP) -o $(BUILD)/sanitize/replay_$$t || exit 1; \
	  $(BUILD)/sanitize/replay_$$t fuzz/corpus/$$t || exit 1; done

install: all
	install -d $(DESTDIR)$(PREFIX)/include/amp $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/amp.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 include/amp/*.h $(DESTDIR)$(PREFIX)/include/amp/
	install -m 644 $(BUILD)/libamp.a $(MPI_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libamp.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libamp.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libamp.so.$(VERSION_MAJOR)
	ln -sf libamp.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libamp.so
	install -m 755 $(BUILD)/amp $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@INCLUDEDIR@|$(PREFIX)/include|' -e 's|@LIBDIR@|$(PREFIX)/lib|' \
	    -e 's|@RPATH@||' -e 's|@VERSION@|$(VERSION)|' amp.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/amp.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/amp.h $(DESTDIR)$(PREFIX)/lib/libamp.* $(DESTDIR)$(PREFIX)/lib/libamp_mpi.a \
	    $(DESTDIR)$(PREFIX)/bin/amp \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig/amp.pc
	rm -rf $(DESTDIR)$(PREFIX)/include/amp

clean:
	rm -rf $(BUILD)

# The build's configuration (compiler, flags, whether MPI and PLplot were found), in CONFIG_STAMP: when
# it changes, as when Open MPI is installed after a first build, every object is rebuilt, without
# `make clean`.
CONFIG_NOW := $(CC) | $(CFLAGS_AMP) | $(LDFLAGS_AMP) | mpi=$(AMP_MPI) $(MPI_CFLAGS) $(MPI_LIBS) | plplot $(PLPLOT_CFLAGS) $(PLPLOT_LIBS)
$(CONFIG_STAMP): FORCE
	@mkdir -p $(BUILD)
	@if [ "$$(cat $@ 2>/dev/null)" != '$(CONFIG_NOW)' ]; then echo '$(CONFIG_NOW)' > $@; fi
FORCE:
.PHONY: FORCE

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_OBJS:.o=.d)
