// Memfd naming: the host driver encodes an allocation's properties in its memfd's name
// so that an importer in another process (its own host driver) recovers them from
// /proc/self/fd/<fd>. The name is the only cross-process format the host driver has.
#include "host/host_internal.hpp"

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

}  // namespace host
}  // namespace cuvmm
