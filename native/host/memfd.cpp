// Memfd naming and checks: the host driver encodes an allocation's properties in its
// memfd's name so that an importer in another process (its own host driver) recovers
// them from /proc/self/fd/<fd>, and check_import_fd decides whether an fd offered for
// import is such a memfd, saying why not. The name and the seals are the only
// cross-process format the host driver has.
#include "host/host_internal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace cuvmm {
namespace host {
namespace {

// Parses one "<tag><decimal>" field at *s, advancing past it. Accepts 0..1e6 only.
bool parse_field(const char** s, char tag, long* out) {
    const char* p = *s;
    if (*p != tag) return false;
    ++p;
    if (*p < '0' || *p > '9') return false;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > 7) return false;
        v = v * 10 + (*p - '0');
        ++p;
    }
    *s = p;
    *out = v;
    return true;
}

}  // namespace

// memfd name encoding the properties, so an importer in another process recovers them.
std::string memfd_name(const CUmemAllocationProp& p) {
    int dev = p.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? p.location.id : 0;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%sd%d:h%u:l%u:n%d", kMemfdPrefix, dev,
                  static_cast<unsigned>(p.requestedHandleTypes), static_cast<unsigned>(p.location.type),
                  p.location.id);
    return buf;
}

// Parses the /proc/self/fd link target of a memfd we created (possibly in another
// process): "/memfd:cuvmm-host:d<dev>:h<types>:l<loctype>:n<locid> (deleted)".
bool parse_memfd_target(const std::string& target, int* device, CUmemAllocationProp* prop) {
    static const std::string prefix = std::string("/memfd:") + kMemfdPrefix;
    static const std::string suffix = " (deleted)";
    if (target.size() < prefix.size() + suffix.size()) return false;
    if (target.compare(0, prefix.size(), prefix) != 0) return false;
    if (target.compare(target.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
    std::string body = target.substr(prefix.size(), target.size() - prefix.size() - suffix.size());
    const char* s = body.c_str();
    long d, h, l, n;
    if (!parse_field(&s, 'd', &d) || *s++ != ':') return false;
    if (!parse_field(&s, 'h', &h) || *s++ != ':') return false;
    if (!parse_field(&s, 'l', &l) || *s++ != ':') return false;
    if (!parse_field(&s, 'n', &n) || *s != '\0') return false;
    // Only an allocation created with POSIX_FILE_DESCRIPTOR requested can be exported,
    // and never from a plain HOST location, so any other combination is not a real export.
    if (h != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return false;
    switch (l) {
        case CU_MEM_LOCATION_TYPE_DEVICE:
            if (n != d) return false;
            break;
        case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
            if (d != 0 || n != 0) return false;
            break;
        default:
            return false;
    }
    *prop = CUmemAllocationProp{};
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = static_cast<CUmemAllocationHandleType>(h);
    prop->location.type = static_cast<CUmemLocationType>(l);
    prop->location.id = static_cast<int>(n);
    *device = static_cast<int>(d);
    return true;
}

namespace {

std::string seal_names(int seals) {
    static const struct {
        int bit;
        const char* name;
    } kNames[] = {{F_SEAL_SEAL, "F_SEAL_SEAL"},   {F_SEAL_SHRINK, "F_SEAL_SHRINK"},
                  {F_SEAL_GROW, "F_SEAL_GROW"},   {F_SEAL_WRITE, "F_SEAL_WRITE"},
                  {F_SEAL_FUTURE_WRITE, "F_SEAL_FUTURE_WRITE"}, {F_SEAL_EXEC, "F_SEAL_EXEC"}};
    std::string out;
    int known = 0;
    for (const auto& n : kNames) {
        known |= n.bit;
        if (seals & n.bit) out += (out.empty() ? "" : "|") + std::string(n.name);
    }
    if (seals & ~known) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%x", static_cast<unsigned>(seals & ~known));
        out += (out.empty() ? "" : "|") + std::string(buf);
    }
    return out.empty() ? "none" : out;
}

// A link target for a message: the memfd name is chosen by whoever created the fd (a
// peer, for an fd received over a socket), so it may hold newlines, escape sequences or
// any byte. Printable ASCII is kept; everything else becomes \xNN (and \ itself \\), and
// the result stops after kMaxShown input bytes with "..." so a 249-byte name cannot flood
// a log line.
std::string printable(const char* s, size_t n) {
    constexpr size_t kMaxShown = 64;
    std::string out;
    for (size_t i = 0; i < n && i < kMaxShown; ++i) {
        auto c = static_cast<unsigned char>(s[i]);
        if (c == '\\') {
            out += "\\\\";
        } else if (c >= 0x20 && c < 0x7f) {
            out += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        }
    }
    if (n > kMaxShown) out += "...";
    return out;
}

CUresult refuse(CUresult code, std::string* why, std::string text) {
    if (why != nullptr) *why = std::move(text);
    return code;
}

}  // namespace

CUresult check_import_fd(int fd, ImportableMemfd* out, std::string* why) {
    const std::string it = "fd " + std::to_string(fd);
    if (::fcntl(fd, F_GETFD) < 0) return refuse(CUDA_ERROR_INVALID_VALUE, why, it + " is not an open descriptor");
    int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) != O_RDWR) {
        return refuse(CUDA_ERROR_INVALID_VALUE, why,
                      it + " is not open read-write; memory exported by cuvmm's host driver always is (a read-only "
                           "reopen of it can never be mapped writable)");
    }
    struct stat sb {};
    if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        return refuse(CUDA_ERROR_INVALID_VALUE, why,
                      it + " is not a regular file (a pipe, socket or device?), so not memory exported by cuvmm's "
                           "host driver");
    }
    char link[64];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    char target[512];
    ssize_t n = ::readlink(link, target, sizeof target - 1);
    if (n <= 0 || n >= static_cast<ssize_t>(sizeof target - 1)) {
        return refuse(CUDA_ERROR_INVALID_VALUE, why, it + ": cannot read its name from " + std::string(link));
    }
    target[n] = '\0';
    int device = 0;
    CUmemAllocationProp prop{};
    if (!parse_memfd_target(target, &device, &prop)) {
        return refuse(CUDA_ERROR_INVALID_VALUE, why,
                      it + " is \"" + printable(target, static_cast<size_t>(n)) +
                          "\", not a memfd exported by cuvmm's host driver (expected \"/memfd:" + kMemfdPrefix +
                          "d<device>:h1:l<location type>:n<location id> (deleted)\"); pass the descriptor the "
                          "exporter sent");
    }
    // Exactly the seals cuMemCreate sets (F_SEAL_EXEC aside: the kernel may add it to
    // every memfd). Without SHRINK a holder could truncate the file under a mapping
    // (SIGBUS); without SEAL one could add a write seal later; a write seal makes the
    // memory read-only, so cuMemSetAccess could never grant write access to it.
    int seals = ::fcntl(fd, F_GET_SEALS);
    const int required = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (seals < 0 || (seals & required) != required || (seals & ~(required | F_SEAL_EXEC)) != 0) {
        std::string text = it + " is named like a memfd of cuvmm's host driver but carries seals " +
                           (seals < 0 ? std::string("(unreadable)") : seal_names(seals)) +
                           " (expected: F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL, as the exporter sets them)";
        if (seals >= 0 && (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
            text += "; a write seal makes the memory read-only, so it can never be mapped writable";
        }
        return refuse(CUDA_ERROR_INVALID_VALUE, why, text + ": it was forged or altered after export");
    }
    if (sb.st_size <= 0 || !aligned(static_cast<unsigned long long>(sb.st_size))) {
        return refuse(CUDA_ERROR_INVALID_VALUE, why,
                      it + " has size " + std::to_string(static_cast<long long>(sb.st_size)) +
                          " (expected: a positive multiple of the granularity " +
                          std::to_string(g_state->config.granularity) + ")");
    }
    // cuda.h (cuMemImportFromShareableHandle): "If the current process cannot support the
    // memory described by this shareable handle, this API will error as
    // CUDA_ERROR_NOT_SUPPORTED": memory of a device this process does not have (it was
    // CUDA_ERROR_INVALID_DEVICE, a code the import's documentation does not list).
    if (!valid_device(device)) {
        return refuse(CUDA_ERROR_NOT_SUPPORTED, why,
                      it + " holds memory of device " + std::to_string(device) + " but this process's host driver has " +
                          std::to_string(g_state->config.device_count) +
                          " device(s) (expected: an importing process with at least " + std::to_string(device + 1) +
                          " devices: set cuvmm.host.devices / CUVMM_HOST_DEVICES to that)");
    }
    if (out != nullptr) {
        out->size = static_cast<size_t>(sb.st_size);
        out->prop = prop;
    }
    if (why != nullptr) why->clear();
    return CUDA_SUCCESS;
}

}  // namespace host

std::string host_import_refusal(int fd) {
    if (host::g_state.get() == nullptr) return "";  // atomic: no install mutex needed
    try {
        std::string why;
        host::check_import_fd(fd, nullptr, &why);
        return why;
    } catch (...) {  // std::bad_alloc: an explanation is optional
        return "";
    }
}

}  // namespace cuvmm
