# Builds the C++ baseline of the stream-copy benchmarks (bench/run-streams):
#   make -f streams.mk -C bench/native BUILD=<dir>   -> <dir>/cuvmm-streams-baseline
# Builds native/ into <dir>/native/libcuvmm_native.a first (native's own Makefile, as the
# Makefile beside this one does), then links streams_baseline.cpp with it. Never links
# libcuda (the library dlopens it at run time).
CUDA_HOME ?= /usr/local/cuda
BUILD ?= ../target
CXX ?= g++
# Same optimisation as native/ and the other baselines.
CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++17 -Wall -Wextra -I../../native -I$(CUDA_HOME)/include
NATIVE_LIB := $(BUILD)/native/libcuvmm_native.a

.PHONY: all native
all: $(BUILD)/cuvmm-streams-baseline

native:
	$(MAKE) --no-print-directory -C ../../native BUILD=$(abspath $(BUILD))/native CUDA_HOME=$(CUDA_HOME)

$(NATIVE_LIB): native

$(BUILD)/cuvmm-streams-baseline: streams_baseline.cpp baseline_common.hpp $(NATIVE_LIB) $(wildcard ../../native/cuvmm/*.hpp)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) streams_baseline.cpp $(NATIVE_LIB) -o $@ -ldl -pthread
