# Builds the C++ baseline of the descriptor-transport benchmark (bench/run-sharing-pool):
#   make -f transport.mk -C bench/native BUILD=<dir>   -> <dir>/cuvmm-transport-baseline
# Builds native/ into <dir>/native/libcuvmm_native.a first (baseline_common.mk, as the
# Makefile beside this one does), then links transport_baseline.cpp with it. Never links
# libcuda (the library dlopens it at run time).
include baseline_common.mk

.PHONY: all
all: $(BUILD)/cuvmm-transport-baseline

$(BUILD)/cuvmm-transport-baseline: transport_baseline.cpp $(BASELINE_DEPS)
	$(link_baseline)
