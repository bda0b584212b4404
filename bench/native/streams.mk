# Builds the C++ baseline of the stream-copy benchmarks (bench/run-streams):
#   make -f streams.mk -C bench/native BUILD=<dir>   -> <dir>/cuvmm-streams-baseline
# Builds native/ into <dir>/native/libcuvmm_native.a first (baseline_common.mk, as the
# Makefile beside this one does), then links streams_baseline.cpp with it. Never links
# libcuda (the library dlopens it at run time).
include baseline_common.mk

.PHONY: all
all: $(BUILD)/cuvmm-streams-baseline

$(BUILD)/cuvmm-streams-baseline: streams_baseline.cpp $(BASELINE_DEPS)
	$(link_baseline)
