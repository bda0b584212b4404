package org.cuvmm.internal;

/**
 * Messages that more than one place says, made here once so that the wording cannot drift
 * (the JDK's small static message factories are the model). Not API: public only so that
 * cuvmm's own modules (vmm-ipc) can use it from another package.
 *
 * <p>Named {@code ErrorMessages}, not {@code Messages}, because vmm-ipc already has a
 * {@code Messages} (its protocol's message records).
 */
public final class ErrorMessages {
    private ErrorMessages() {}

    /**
     * Why imported memory cannot be exported, and what to do instead. The native layer
     * ({@code native/sharing.cpp}, {@code export_range_fds}) says the same words when its own
     * check refuses; {@code ErrorMessagesTest} checks that the two stay equal.
     */
    public static final String IMPORTED_CANNOT_BE_EXPORTED = "imported memory cannot be exported again; share it "
            + "from the process that owns it (forward the BufferDescriptor it was imported from, or publish the "
            + "owner's buffer), or copy the data into a buffer this process owns (resource.allocate + copyFrom) "
            + "and export that";

    /**
     * "{@code subject} covers memory imported from another process{@code where}; " followed by
     * {@link #IMPORTED_CANNOT_BE_EXPORTED}.
     *
     * @param subject the operation and the buffer, e.g. "exportDescriptor: buffer 0x7f00.. (4096 bytes)"
     * @param where more precise location, e.g. " (chunk 2 of 3)", or ""
     */
    public static String importedCannotBeExported(String subject, String where) {
        return subject + " covers memory imported from another process" + where + "; " + IMPORTED_CANNOT_BE_EXPORTED;
    }
}
