# What the three baseline makefiles share (Makefile, transport.mk, streams.mk include it
# first, then name their `all`): the toolchain settings, the build of native/ into
# $(BUILD)/native/libcuvmm_native.a (native's own Makefile), and the link of one baseline
# source with it. Like the library, no baseline links libcuda (dlopen at run time) and none
# needs the CUDA toolkit; CUDA_HOME is only passed on to native/, for its declarations check.
CUDA_HOME ?= /usr/local/cuda
BUILD ?= ../target
CXX ?= g++
# Same optimisation as native/ builds the library with, so the comparison is like for like.
CXXFLAGS ?= -O2 -g
CXXFLAGS += -std=c++17 -Wall -Wextra -I../../native
NATIVE_LIB := $(BUILD)/native/libcuvmm_native.a
# What every baseline binary depends on besides its own source.
BASELINE_DEPS := baseline_common.hpp $(NATIVE_LIB) $(wildcard ../../native/cuvmm/*.hpp)

# The including makefile's `all` stays the default goal.
.DEFAULT_GOAL := all

.PHONY: native
# Always delegate: native's Makefile knows when its objects are stale.
native:
	$(MAKE) --no-print-directory -C ../../native BUILD=$(abspath $(BUILD))/native CUDA_HOME=$(CUDA_HOME)

$(NATIVE_LIB): native

# The recipe of a baseline binary whose first prerequisite is its source.
define link_baseline
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $< $(NATIVE_LIB) -o $@ -ldl -pthread
endef
