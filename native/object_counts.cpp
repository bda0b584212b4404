// Live counters of our own driver-object boxes; read by tests and `cuvmm info`.
#include "cuvmm/object_counts.hpp"

namespace cuvmm {

std::atomic<long long> g_live_allocations{0};
std::atomic<long long> g_live_reservations{0};
std::atomic<long long> g_live_mappings{0};
std::atomic<long long> g_live_ranges{0};

ObjectCounts object_counts() {
    ObjectCounts c;
    c.allocations = g_live_allocations.load(std::memory_order_relaxed);
    c.reservations = g_live_reservations.load(std::memory_order_relaxed);
    c.mappings = g_live_mappings.load(std::memory_order_relaxed);
    c.ranges = g_live_ranges.load(std::memory_order_relaxed);
    return c;
}

}  // namespace cuvmm
