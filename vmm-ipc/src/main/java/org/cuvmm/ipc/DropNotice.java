package org.cuvmm.ipc;

/**
 * The owner withdrew a buffer this client holds: drop the mapping ({@link Attachment#close()}).
 *
 * @param leaseId the lease the notice is about
 * @param name the buffer's published name
 * @param attachment this client's attachment of that lease, or null when it was already closed
 *     while an alias or view of its buffer keeps the lease (a DROP that arrives while a closed
 *     attachment's own RELEASE is on its way is not notified: the lease is being given back)
 */
public record DropNotice(long leaseId, String name, Attachment attachment) {}
