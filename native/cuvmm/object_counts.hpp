// Counters behind object_counts(); incremented by each box's factory and decremented by
// its destructor. Internal to native/.
#pragma once

#include "cuvmm/vmm.hpp"

#include <atomic>

namespace cuvmm {
extern std::atomic<long long> g_live_allocations;
extern std::atomic<long long> g_live_reservations;
extern std::atomic<long long> g_live_mappings;
extern std::atomic<long long> g_live_ranges;
}  // namespace cuvmm
