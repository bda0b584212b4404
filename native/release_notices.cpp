// The release-notice queue (release_notices.hpp). The state lives in a heap object that is
// never deleted: an Allocation destroyed during static destruction (a leaked range freed at
// exit) must still find its mutex.
#include "cuvmm/release_notices.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

namespace cuvmm {
namespace {

struct NoticeQueue {
    std::atomic<bool> on{false};
    std::atomic<long long> dropped{0};
    std::mutex lock;                 // guards ids and last_sequence; held for a push, a take or a read
    std::condition_variable queued;  // an id was queued, or notices were turned off
    std::deque<std::pair<uint64_t, uint64_t>> ids;  // (id, sequence), oldest first
    uint64_t last_sequence = 0;      // of the last id queued; never reused
};

NoticeQueue& queue() {
    static NoticeQueue* q = new NoticeQueue();  // never deleted, see above
    return *q;
}

}  // namespace

void set_release_notices(bool on) {
    NoticeQueue& q = queue();
    {
        std::lock_guard<std::mutex> guard(q.lock);
        q.on.store(on, std::memory_order_release);
        if (!on) q.ids.clear();
    }
    q.queued.notify_all();
}

void note_allocation_released(uint64_t id) noexcept {
    NoticeQueue& q = queue();
    if (!q.on.load(std::memory_order_acquire)) return;
    try {
        {
            std::lock_guard<std::mutex> guard(q.lock);
            if (!q.on.load(std::memory_order_relaxed)) return;
            q.ids.emplace_back(id, q.last_sequence + 1);
            ++q.last_sequence;  // after the push: a failed push uses no number
        }
        q.queued.notify_one();
    } catch (...) {  // bad_alloc, or a mutex error: a destructor must not throw
        q.dropped.fetch_add(1, std::memory_order_relaxed);
    }
}

size_t take_released_allocations(uint64_t* out, size_t capacity, long long timeout_ms, uint64_t* out_sequences) {
    NoticeQueue& q = queue();
    std::unique_lock<std::mutex> guard(q.lock);
    if (q.ids.empty() && timeout_ms > 0) {
        q.queued.wait_for(guard, std::chrono::milliseconds(timeout_ms),
                          [&] { return !q.ids.empty() || !q.on.load(std::memory_order_relaxed); });
    }
    size_t n = 0;
    while (n < capacity && !q.ids.empty()) {
        out[n] = q.ids.front().first;
        if (out_sequences != nullptr) out_sequences[n] = q.ids.front().second;
        ++n;
        q.ids.pop_front();
    }
    return n;
}

uint64_t release_notice_sequence() {
    NoticeQueue& q = queue();
    std::lock_guard<std::mutex> guard(q.lock);
    return q.last_sequence;
}

long long release_notices_dropped() { return queue().dropped.load(std::memory_order_relaxed); }

}  // namespace cuvmm
