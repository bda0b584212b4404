package org.cuvmm.ipc;

/**
 * The owner withdrew a buffer this client holds: drop the mapping ({@link Attachment#close()}).
 *
 * @param leaseId the lease the notice is about
 * @param name the buffer's published name
 * @param attachment this client's attachment of that lease, or null when it was already closed
 */
public record DropNotice(long leaseId, String name, Attachment attachment) {}
