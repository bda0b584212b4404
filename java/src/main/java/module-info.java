/**
 * cuvmm core: CUDA Virtual Memory Management for Java (resources, buffers, both drivers, the
 * pool).
 *
 * <p>Only the API packages are exported: {@code org.cuvmm} and {@code org.cuvmm.pool}.
 * {@code org.cuvmm.internal} (state word, checks, the bridge to the pool) and
 * {@code org.cuvmm.internal.jni} (the JavaCPP bindings, which can reach raw memory and fds)
 * are not exported to anyone else. {@code org.cuvmm.internal} is exported to cuvmm's own
 * {@code org.cuvmm.ipc} only, for the one message both modules share
 * ({@code ErrorMessages}), the class preloading both use ({@code ClassPreload}) and the
 * first-use check before a native load ({@code FirstUse});
 * {@code org.cuvmm.internal.jni} to no module.
 * {@code org.cuvmm.internal.jni} is opened to JavaCPP only, which loads its JNI library and
 * reads its {@code @Platform} classes by reflection.
 *
 * <p>The jar works on the class path as well, where this descriptor is ignored; there the
 * internal packages are reachable like any public class, so the one door into package-private
 * code ({@code BufferAccess}) checks its callers itself.
 */
module org.cuvmm {
    requires transitive java.management; // the pool API returns ObjectName, extends BufferPoolMXBean
    requires org.bytedeco.javacpp; // not transitive: no JavaCPP type is part of the API

    exports org.cuvmm;
    exports org.cuvmm.pool;
    exports org.cuvmm.internal to org.cuvmm.ipc; // ErrorMessages, ClassPreload, FirstUse

    opens org.cuvmm.internal.jni to org.bytedeco.javacpp;
}
