// Release notices: the ids (Allocation::id) of physical allocations whose box was destroyed,
// that is whose cuMemRelease ran, queued for Java's delivery thread while notices are on
// (org.cuvmm.AllocationReleaseNotices). The queue is the only shared state; its mutex is
// held for a push or a take, never across a driver call.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cuvmm {

// Turns the queue on or off. Off (the default) makes note_allocation_released a single
// atomic load; turning off drops the ids still queued and wakes a waiting taker.
void set_release_notices(bool on);

// Called by ~Allocation after cuMemRelease returned. Queues `id` when notices are on. Never
// throws: if the queue cannot grow (out of memory) the id is dropped and counted
// (release_notices_dropped).
void note_allocation_released(uint64_t id) noexcept;

// Waits up to `timeout_ms` (0: no wait) until an id is queued or notices are turned off,
// then moves up to `capacity` queued ids, oldest first, into `out`, and, when
// `out_sequences` is not null, each id's sequence number into it. Returns how many.
size_t take_released_allocations(uint64_t* out, size_t capacity, long long timeout_ms,
                                 uint64_t* out_sequences = nullptr);

// Each queued id gets the next sequence number (1, 2, ...; never reused, increasing in
// queue order). Returns the number of the last id queued (0: none yet). A release whose id
// is queued after this call returned gets a larger number, one queued before a smaller or
// equal one: Java gives a new listener only ids numbered above the value read when it
// registered ("releases from now on").
uint64_t release_notice_sequence();

// Ids dropped because the queue could not grow; 0 in any sane run.
long long release_notices_dropped();

}  // namespace cuvmm
