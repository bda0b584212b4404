// Telling a file mapping apart from other direct memory, for the JNI glue only: the
// JavaCPP-generated translation unit includes this header (it has <jni.h>); nothing in
// cuvmm_native does.
//
// Why: a file mapping (FileChannel.map) can lose its pages at any time, when its file is
// truncated; a native read or write of them is a SIGBUS that ends the JVM, where the JDK's
// own accesses turn the fault into an InternalError (on JDK 17 only asynchronously, at an
// unknown later point). Every direct ByteBuffer is a
// java.nio.MappedByteBuffer by type (DirectByteBuffer extends it), so the type says
// nothing; the private field MappedByteBuffer.fd is set only for a file mapping (and for
// its slices, duplicates and read-only views). JNI reads it without the module opening
// that Java reflection would need.
#pragma once

#include <jni.h>

namespace cuvmm {
namespace jni {

// 1: a file mapping; 0: other direct (or heap) memory; -1: this JDK has no such field
// (the caller then treats the buffer as plain direct memory, as before this check existed).
inline int file_mapping_state(JNIEnv* env, jclass /* the calling class, unused */, jobject buffer) {
    struct MappedBufferFd {
        jclass type = nullptr;      // a global reference to java.nio.MappedByteBuffer
        jfieldID field = nullptr;   // its fd
    };
    // Looked up once. MappedByteBuffer is a bootstrap class, never unloaded, so the global
    // reference and the field id stay valid; a static local's initialisation is thread-safe.
    static const MappedBufferFd fd = [env] {
        MappedBufferFd found;
        jclass local = env->FindClass("java/nio/MappedByteBuffer");
        if (local == nullptr) {
            env->ExceptionClear();
            return found;
        }
        found.field = env->GetFieldID(local, "fd", "Ljava/io/FileDescriptor;");
        if (found.field == nullptr) env->ExceptionClear();
        else found.type = static_cast<jclass>(env->NewGlobalRef(local));
        env->DeleteLocalRef(local);
        return found;
    }();
    if (fd.type == nullptr) return -1;
    if (buffer == nullptr || !env->IsInstanceOf(buffer, fd.type)) return 0;  // a heap buffer
    jobject value = env->GetObjectField(buffer, fd.field);
    if (value == nullptr) return 0;
    env->DeleteLocalRef(value);
    return 1;
}

}  // namespace jni
}  // namespace cuvmm
